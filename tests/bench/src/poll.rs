//! Polling with a deadline that returns an error instead of panicking (the
//! harness reports a failed scenario and goes on).

use std::future::Future;
use std::time::Duration;

const POLL: Duration = Duration::from_millis(50);

/// Calls `f` every 50 ms until it returns `Ok`; at the deadline, an error with what was last seen.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    let mut last = String::from("(no attempt finished)");
    loop {
        match tokio::time::timeout_at(deadline, f()).await {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => last = e,
            Err(_) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("timed out after {timeout:?} waiting for {what}; last seen: {last}");
        }
        tokio::time::sleep(POLL).await;
    }
}
