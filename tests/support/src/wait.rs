//! Waiting for a condition with a deadline, reporting what was last seen.

use std::future::Future;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(100);

/// Polls `f` every ~100ms until it returns `Ok`.
///
/// # Panics
/// At the deadline, with "timed out after Xs waiting for {what}; last seen: {err}".
/// An attempt still pending at the deadline is abandoned.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    match try_wait_for(what, timeout, f).await {
        Ok(v) => v,
        Err(e) => panic!("{e}"),
    }
}

/// [`wait_for`] that returns the timeout as an error instead of panicking
/// (for callers that report a failure and go on, like the bench harness).
pub async fn try_wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    // tokio's clock, so this also works under `start_paused = true`.
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::from("(no attempt finished)");
    loop {
        match tokio::time::timeout_at(deadline, f()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => last = e,
            Err(_) => last = format!("{last} (then an attempt was still pending at the deadline)"),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "timed out after {:.1}s waiting for {what}; last seen: {last}",
                timeout.as_secs_f64()
            ));
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Blocking [`wait_for`]: polls `f` every ~100ms until it returns `Ok`.
///
/// # Panics
/// At the deadline, with "timed out after Xs waiting for {what}; last seen: {err}".
pub fn wait_for_blocking<T>(
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let last = match f() {
            Ok(v) => return v,
            Err(e) => e,
        };
        if std::time::Instant::now() >= deadline {
            panic!(
                "timed out after {:.1}s waiting for {what}; last seen: {last}",
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "timed out after 0.3s waiting for the answer; last seen: attempt 3")]
    fn blocking_timeout_reports_last_error() {
        let mut n = 0;
        wait_for_blocking::<()>("the answer", Duration::from_millis(300), || {
            n += 1;
            Err(format!("attempt {}", n.min(3)))
        });
    }

    #[test]
    fn blocking_returns_first_ok() {
        let mut n = 0;
        let v = wait_for_blocking("third try", Duration::from_secs(5), || {
            n += 1;
            if n == 3 {
                Ok(n)
            } else {
                Err(format!("try {n}"))
            }
        });
        assert_eq!(v, 3);
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(expected = "timed out after 2.0s waiting for ready; last seen: not ready")]
    async fn async_timeout_reports_last_error() {
        wait_for::<(), _, _>("ready", Duration::from_secs(2), || async {
            Err("not ready".to_string())
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    #[should_panic(
        expected = "last seen: first (then an attempt was still pending at the deadline)"
    )]
    async fn async_hung_attempt_does_not_outlive_deadline() {
        let mut n = 0;
        wait_for::<(), _, _>("hang", Duration::from_secs(2), || {
            n += 1;
            let first = n == 1;
            async move {
                if first {
                    Err("first".to_string())
                } else {
                    std::future::pending().await
                }
            }
        })
        .await;
    }

    #[tokio::test(start_paused = true)]
    async fn async_returns_value_once_ready() {
        let start = tokio::time::Instant::now();
        let v = wait_for("clock", Duration::from_secs(10), || async move {
            if start.elapsed() >= Duration::from_secs(1) {
                Ok(42)
            } else {
                Err("early".to_string())
            }
        })
        .await;
        assert_eq!(v, 42);
    }
}
