//! Polling with a deadline that returns an error instead of panicking (the
//! harness reports a failed scenario and goes on).

use std::future::Future;
use std::time::Duration;

/// Calls `f` (every ~100 ms, [`fleetbus_testsupport::try_wait_for`]) until it
/// returns `Ok`; at the deadline, an error with what was last seen.
pub async fn poll<T, F, Fut>(what: &str, timeout: Duration, f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    fleetbus_testsupport::try_wait_for(what, timeout, f)
        .await
        .map_err(anyhow::Error::msg)
}
