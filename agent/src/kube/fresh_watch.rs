//! Watches that start again on a new connection when theirs fails.
//!
//! kube-runtime's watcher, once its connection fails, watches again on the
//! same client and its pooled connections, and a list sent on a connection
//! that will never answer (half-open after a cut, an API server stopped
//! mid-request) waits for ever: the client sets no read timeout, since a
//! watch may be idle for minutes. The sync watches (`sync::inputs::watches`)
//! and the registry's Cluster, ClusterFeature and Node watches
//! ([`watch`]) therefore share one rule: a list that gets no item for
//! [`LIST_STALL`], or a run that fails below HTTP, ends; after
//! [`restart_delay`] the watch starts again with a new client (so a new
//! connection) and a new list. Other errors (410 Gone, a refusal) stay with
//! the watcher, which re-lists or backs off on its own.

use std::fmt::Debug;
use std::time::Duration;

use futures::stream::{BoxStream, Stream, StreamExt};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

/// The wait before a watch whose connection failed starts again, after the
/// first failure in a row; it doubles with each further one.
pub const RESTART_FIRST: Duration = Duration::from_millis(500);
/// The longest wait between two starts: how stale a view may stay after its
/// API server is back, against one failed connection per watch that often
/// while it is away.
pub const RESTART_MAX: Duration = Duration::from_secs(10);

/// Longest wait for the next item of a list (the watcher lists in pages of
/// 500): a list that gets no answer for this long is a lost connection.
/// Before lists had this deadline, a list held by an API server that came
/// back half-answering kept a kind's copies held (the `api-down` chaos
/// run) and a cluster's labels stale for as long as the server held it.
/// Once listed, the watch may be silent.
pub const LIST_STALL: Duration = Duration::from_secs(20);

/// The wait before the next start after `failures` connection failures in a
/// row (at least one).
pub fn restart_delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    RESTART_FIRST
        .saturating_mul(1 << doublings)
        .min(RESTART_MAX)
}

/// Whether the watch (or its list) failed for want of a working connection.
pub fn lost_connection(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => super::client::is_connection_error(e),
        _ => false,
    }
}

/// What [`watch`] keeps between items.
struct Run<K: 'static> {
    /// What is watched, for the log.
    what: &'static str,
    /// Builds a new client (a new connection) for each restart.
    config: kube::Config,
    /// The API of `K` on a client.
    api: Box<dyn Fn(kube::Client) -> Api<K> + Send>,
    wc: watcher::Config,
    /// The current run; None: start one (after `restart_delay(failures)`
    /// when `failures` > 0).
    inner: Option<BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>>,
    /// The first run's client (the shared one); later runs build their own.
    first: Option<kube::Client>,
    /// A list is under way: each item must come within [`LIST_STALL`].
    listing: bool,
    /// Connection failures since the last complete list.
    failures: u32,
}

impl<K> Run<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    /// Starts a run: the shared client first, then a new one each time.
    async fn start(&mut self) {
        if self.failures > 0 {
            tokio::time::sleep(restart_delay(self.failures)).await;
        }
        let client = match self.first.take() {
            Some(c) => c,
            None => match super::client::connect(&self.config) {
                Ok(c) => c,
                // Cannot happen with a configuration that built a client
                // once; the next failure tries again.
                Err(e) => {
                    tracing::warn!(what = self.what, error = %crate::report(&e), "cannot build a new client");
                    self.failures = self.failures.saturating_add(1);
                    return;
                }
            },
        };
        let api = (self.api)(client);
        self.inner = Some(watcher(api, self.wc.clone()).default_backoff().boxed());
        self.listing = true;
    }

    /// The run ends on a lost connection: the next item starts another.
    fn lost(&mut self, error: &dyn std::fmt::Display) {
        self.failures = self.failures.saturating_add(1);
        self.inner = None;
        let wait = restart_delay(self.failures);
        tracing::warn!(what = self.what, %error, failures = self.failures, ?wait,
            "watch lost its connection; starting it again on a new connection");
    }

    /// The next item of the watch, across restarts (None: it ended).
    async fn next(&mut self) -> Option<Result<watcher::Event<K>, watcher::Error>> {
        loop {
            let Some(inner) = self.inner.as_mut() else {
                self.start().await;
                continue;
            };
            let item = if self.listing {
                match tokio::time::timeout(LIST_STALL, inner.next()).await {
                    Ok(item) => item,
                    Err(_) => {
                        self.lost(&format_args!("no answer to the list within {LIST_STALL:?}"));
                        continue;
                    }
                }
            } else {
                inner.next().await
            };
            match &item {
                Some(Ok(watcher::Event::Init)) => self.listing = true,
                Some(Ok(watcher::Event::InitDone)) => {
                    self.listing = false;
                    self.failures = 0;
                }
                Some(Err(e)) if lost_connection(e) => self.lost(e),
                _ => {}
            }
            return item;
        }
    }
}

/// Watches `K` (through `api`, on `client` first) as kube-runtime's
/// `watcher(..).default_backoff()` does, but a run whose connection fails
/// or whose list goes unanswered starts again on a new client built from
/// `config` (module docs). Yields the watcher's items, the error that ended
/// a run included; a new run begins with `Init`, so a reflector replaces its
/// store when the new list is complete.
pub fn watch<K>(
    what: &'static str,
    config: &kube::Config,
    client: kube::Client,
    api: impl Fn(kube::Client) -> Api<K> + Send + 'static,
    wc: watcher::Config,
) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let run = Run {
        what,
        config: config.clone(),
        api: Box::new(api),
        wc,
        inner: None,
        first: Some(client),
        listing: false,
        failures: 0,
    };
    futures::stream::unfold(run, |mut run| async move {
        let item = run.next().await?;
        Some((item, run))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_watch_restarts_sooner_first_and_never_waits_past_the_cap() {
        assert_eq!(restart_delay(1), RESTART_FIRST);
        assert_eq!(restart_delay(2), RESTART_FIRST * 2);
        assert_eq!(restart_delay(6), RESTART_MAX);
        assert_eq!(restart_delay(u32::MAX), RESTART_MAX);
    }

    #[test]
    fn only_connection_failures_restart_on_a_new_connection() {
        let reset = || kube::Error::ReadEvents(std::io::ErrorKind::ConnectionReset.into());
        assert!(lost_connection(&watcher::Error::WatchFailed(reset())));
        assert!(lost_connection(&watcher::Error::WatchStartFailed(reset())));
        assert!(lost_connection(&watcher::Error::InitialListFailed(reset())));
        let mut gone = kube::core::Status::failure("too old", "Expired");
        gone.code = 410;
        // The watcher re-lists on its own.
        assert!(!lost_connection(&watcher::Error::WatchError(Box::new(
            gone
        ))));
    }
}
