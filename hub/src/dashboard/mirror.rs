//! One watch of a KV bucket per dashboard process, kept in memory for every request.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::Operation;
use async_nats::jetstream::Context;
use fleetbus_schemas::subject::Prefix;
use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::clusters::progress::chain;
use crate::kv::{unreadable_bucket, ReadError};

/// How a bucket's value is decoded when it arrives; `None` leaves the key out (the
/// decoder logs why, once per value rather than once per request).
pub(crate) type Decode<T> = fn(&str, &[u8]) -> Option<T>;

/// What the mirror holds.
pub(crate) enum Mirrored<T> {
    /// The first watch has neither caught up nor failed yet.
    Starting,
    /// Every key whose value decodes, as of the last entry the watch delivered.
    Current(BTreeMap<String, T>),
    /// The last watch failed; a new one is started after a backoff.
    Failed(Arc<ReadError>),
}

/// What a request read from the mirror.
pub(crate) enum Snapshot<R> {
    /// What the reader made of the current map.
    Read(R),
    /// Why the bucket cannot be read now (the answer a one-off read would give).
    Failed(Arc<ReadError>),
    /// The first watch has not caught up in time: read the bucket directly once.
    NotYet,
}

/// One bucket, watched with its history by [`BucketMirror::run`] (the only writer) and
/// read by every request: a request costs no consumer on the server.
pub(crate) struct BucketMirror<T> {
    bucket: String,
    decode: Decode<T>,
    state: watch::Sender<Mirrored<T>>,
}

/// The first retry after a failed watch, doubled each time up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(250);
/// Short enough that a bucket created after the dashboard started (agents create
/// theirs when they start) shows within seconds; a lookup every few seconds is cheap.
const MAX_BACKOFF: Duration = Duration::from_secs(4);

impl<T: Send + Sync + 'static> BucketMirror<T> {
    pub(crate) fn new(bucket: String, decode: Decode<T>) -> Self {
        Self {
            bucket,
            decode,
            state: watch::Sender::new(Mirrored::Starting),
        }
    }

    /// Waits at most `wait` for the first watch to catch up (or fail), then applies
    /// `read` to the map. `read` runs under the map's read lock, with no `.await`: it
    /// should filter and copy, nothing more (the watch waits for it).
    pub(crate) async fn read<R>(
        &self,
        wait: Duration,
        read: impl FnOnce(&BTreeMap<String, T>) -> R,
    ) -> Snapshot<R> {
        let mut rx = self.state.subscribe();
        let settled =
            tokio::time::timeout(wait, rx.wait_for(|m| !matches!(m, Mirrored::Starting))).await;
        match settled {
            Ok(Ok(m)) => match &*m {
                Mirrored::Current(map) => Snapshot::Read(read(map)),
                Mirrored::Failed(e) => Snapshot::Failed(e.clone()),
                Mirrored::Starting => Snapshot::NotYet,
            },
            // Timed out, or the sender is gone (it lives as long as `self`).
            _ => Snapshot::NotYet,
        }
    }

    /// Watches the bucket until `shutdown`, restarting a failed watch with backoff.
    /// Requests see the failure until a new watch has caught up.
    pub(crate) async fn run(&self, js: Context, prefix: Prefix, shutdown: CancellationToken) {
        let mut failures: u32 = 0;
        loop {
            let (error, caught_up) = tokio::select! {
                () = shutdown.cancelled() => return,
                ended = self.watch(&js, &prefix) => ended,
            };
            if caught_up {
                failures = 0;
            }
            let delay = backoff(failures);
            failures = failures.saturating_add(1);
            match &error {
                // No agent has created it yet: expected before the fleet starts.
                ReadError::Missing { .. } => {
                    tracing::debug!(bucket = %self.bucket, retry_in = ?delay, "no bucket yet")
                }
                ReadError::Unreadable { .. } => tracing::warn!(
                    bucket = %self.bucket, error = %chain(&error), retry_in = ?delay,
                    "the bucket's watch failed"
                ),
            }
            self.state.send_replace(Mirrored::Failed(Arc::new(error)));
            // A backoff, not a wait for a condition: nothing observable says
            // NATS or the stream is back except trying again (250 ms doubling
            // to 4 s, `mirror::backoff`); shutdown still ends it at once.
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One watch, from the last value of every key on; returns what ended it and
    /// whether it had caught up.
    async fn watch(&self, js: &Context, prefix: &Prefix) -> (ReadError, bool) {
        let (kv, stream) = match crate::kv::store(js, prefix, &self.bucket).await {
            Ok(found) => found,
            Err(e) => return (e, false),
        };
        let mut entries = match crate::kv::watch(&kv, false).await {
            Ok((_, w)) => Box::pin(w),
            Err(e) => return (unreadable_bucket(&self.bucket, e), false),
        };
        // An empty bucket delivers nothing, so nothing would say "caught up": the
        // stream's count when it was looked up (just before the watch) says it. A value
        // put in between arrives as an update, as it would after a one-off read.
        let mut caught_up = stream.cached_info().state.messages == 0;
        if caught_up {
            self.state.send_replace(Mirrored::Current(BTreeMap::new()));
        }
        let mut initial = BTreeMap::new();
        while let Some(entry) = entries.next().await {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => return (unreadable_bucket(&self.bucket, e), caught_up),
            };
            if caught_up {
                self.state.send_modify(|m| {
                    if let Mirrored::Current(map) = m {
                        apply(map, self.decode, entry.key, entry.operation, &entry.value);
                    }
                });
                continue;
            }
            // No message was pending after this one when it was sent: the last
            // value of every key has been delivered.
            let current = entry.caught_up;
            apply(
                &mut initial,
                self.decode,
                entry.key,
                entry.operation,
                &entry.value,
            );
            if current {
                caught_up = true;
                let map = std::mem::take(&mut initial);
                self.state.send_replace(Mirrored::Current(map));
            }
        }
        let ended = "the watch ended (the NATS connection closed)";
        (unreadable_bucket(&self.bucket, ended), caught_up)
    }
}

/// Folds one watched entry into `map`: a put of a value that decodes sets the key; a
/// delete, a purge or a value that does not decode removes it.
fn apply<T>(
    map: &mut BTreeMap<String, T>,
    decode: Decode<T>,
    key: String,
    operation: Operation,
    value: &[u8],
) {
    let decoded = match operation {
        Operation::Put => decode(&key, value),
        Operation::Delete | Operation::Purge => None,
    };
    match decoded {
        Some(v) => {
            map.insert(key, v);
        }
        None => {
            map.remove(&key);
        }
    }
}

/// The delay before the retry that follows `failures` failures in a row (the drift
/// feed's reader retries by it too).
pub(crate) fn backoff(failures: u32) -> Duration {
    FIRST_BACKOFF
        .saturating_mul(1u32.checked_shl(failures.min(16)).unwrap_or(u32::MAX))
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn number(_key: &str, value: &[u8]) -> Option<u32> {
        std::str::from_utf8(value).ok()?.parse().ok()
    }

    #[test]
    fn puts_set_keys_and_deletes_purges_and_bad_values_remove_them() {
        let mut map = BTreeMap::new();
        apply(&mut map, number, "a".into(), Operation::Put, b"1");
        apply(&mut map, number, "b".into(), Operation::Put, b"2");
        apply(&mut map, number, "c".into(), Operation::Put, b"3");
        apply(&mut map, number, "a".into(), Operation::Put, b"10");
        assert_eq!(
            map,
            BTreeMap::from([("a".into(), 10), ("b".into(), 2), ("c".into(), 3)])
        );
        // A value that no longer decodes must not leave the old one shown.
        apply(&mut map, number, "a".into(), Operation::Put, b"garbage");
        apply(&mut map, number, "b".into(), Operation::Delete, b"");
        apply(&mut map, number, "c".into(), Operation::Purge, b"");
        apply(&mut map, number, "z".into(), Operation::Delete, b"");
        assert!(map.is_empty(), "{map:?}");
    }

    #[test]
    fn retries_back_off_to_a_ceiling() {
        assert_eq!(backoff(0), FIRST_BACKOFF);
        assert_eq!(backoff(1), FIRST_BACKOFF * 2);
        assert_eq!(backoff(4), MAX_BACKOFF);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }
}
