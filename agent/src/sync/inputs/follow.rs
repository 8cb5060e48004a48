//! Following a subject tree of a last-value stream: the last message of every
//! subject, then live ones, into the engine. Shared by the objects consumer
//! (one per kind) and the status consumer.
//!
//! An ordered consumer with `DeliverPolicy::LastPerSubject` replays the state
//! and then follows it. It restarts with backoff (200 ms doubling to 10 s,
//! cancellable, so a dead NATS is not hammered; from 200 ms again after a
//! run that lasted) when it fails, and when JetStream announces that the
//! stream was created again: an ordered consumer of the deleted stream would
//! resume at its old sequence on the new one and miss what was published
//! there first. On every NATS reconnection it asks the server for its
//! consumer and restarts at once if it is gone (a restarted nats-server keeps
//! no ephemeral consumer): the client library finds out only after retrying
//! for 15 s, and the copies would stay behind that long.

use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use fleetbus_schemas::subject::Prefix;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::context::Context;
use crate::sync::model::{Feed, Input};

/// One "skipped a message" line per kind and reason every 10 s.
static SKIPPED: crate::log_gate::LogGate =
    crate::log_gate::LogGate::new(std::time::Duration::from_secs(10));

/// Decodes one message (prefix, subject, payload); the error is the
/// `sync_rejected_total` reason when it is skipped. A closure: the objects'
/// decoder holds this cluster's sealing key.
pub type Decode<K, V> =
    Box<dyn Fn(&Prefix, &str, &[u8]) -> Result<(K, V), &'static str> + Send + Sync>;

/// One followed subject tree, whose events become `I`s (the engine's
/// [`Input`] by default; multi-cluster Services follow their own).
pub struct Follow<K, V, I = Input> {
    /// Name of the stream.
    pub stream: String,
    /// Subject filter within it.
    pub filter: String,
    /// What is followed, for logs and errors (e.g. "objects", "status").
    pub what: &'static str,
    /// Message decoding and checks.
    pub decode: Decode<K, V>,
    /// The key a subject names, for messages that do not decode.
    pub key_of: fn(&Prefix, &str) -> Option<K>,
    /// Wraps a feed event as the reader's input.
    pub input: Box<dyn Fn(Feed<K, V>) -> I + Send + Sync>,
}

/// Follows `f` into `tx` until `cancel` or until the reader is gone.
pub async fn follow<K, V, I>(
    ctx: Arc<Context>,
    f: Follow<K, V, I>,
    tx: mpsc::Sender<I>,
    cancel: CancellationToken,
) {
    let mut delay = FIRST_DELAY;
    loop {
        let started = tokio::time::Instant::now();
        let result = tokio::select! {
            _ = cancel.cancelled() => return,
            r = consume_once(&ctx, &f, &tx) => r,
        };
        match result {
            Ok(()) => return, // the engine is gone
            Err(e) => {
                if started.elapsed() >= MAX_DELAY {
                    // It ran a while: a new failure, not the same one again.
                    delay = FIRST_DELAY;
                }
                tracing::warn!(what = f.what, error = %e, ?delay, "consumer failed; restarting");
                // The stream may have been deleted: have it checked (and
                // recreated) now rather than at the next periodic check.
                ctx.check_layout.notify_one();
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(MAX_DELAY);
            }
        }
    }
}

/// The first wait before a failed consumer is started again.
const FIRST_DELAY: Duration = Duration::from_millis(200);
/// The longest wait (doubling from [`FIRST_DELAY`]).
const MAX_DELAY: Duration = Duration::from_secs(10);

/// One consumer's life: `Ok` when the engine is gone, `Err` to restart.
async fn consume_once<K, V, I>(
    ctx: &Context,
    f: &Follow<K, V, I>,
    tx: &mpsc::Sender<I>,
) -> Result<(), String> {
    let prefix = ctx.layout.prefix();
    // A creation means consuming anew (event-driven, no polling). Without
    // the subscription (permissions), the periodic layout check and consumer
    // errors still recover.
    let mut recreated = ctx
        .js
        .client()
        .subscribe(format!("$JS.EVENT.ADVISORY.STREAM.CREATED.{}", f.stream))
        .await
        .ok();
    let stream = ctx
        .js
        .get_stream(&f.stream)
        .await
        .map_err(|e| format!("{} stream: {e}", f.what))?;
    let created = stream.cached_info().created;
    let mut consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: f.filter.clone(),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..OrderedConfig::default()
        })
        .await
        .map_err(|e| format!("create consumer: {e}"))?;
    let info = consumer
        .info()
        .await
        .map_err(|e| format!("consumer info: {e}"))?;
    let (pending, name) = (info.num_pending, info.name.clone());
    let mut connections = ctx.readiness.nats_connections.subscribe();
    connections.mark_unchanged();
    let send = |ev: Feed<K, V>| tx.send((f.input)(ev));
    if send(Feed::Reset).await.is_err() {
        return Ok(());
    }
    // A message dropped because its signer is not known (yet) may verify
    // once the signer's record arrives (a join, a rotation): then read
    // every last value again rather than keep the copy behind.
    let mut signers = ctx.signers.subscribe();
    signers.mark_unchanged();
    let mut awaiting_signer = false;
    let mut catch_up = CatchUp::default();
    if catch_up.tell(pending == 0) && send(Feed::CaughtUp).await.is_err() {
        return Ok(());
    }
    let mut messages = consumer
        .messages()
        .await
        .map_err(|e| format!("consume: {e}"))?;
    loop {
        let next = tokio::select! {
            m = messages.next() => m,
            Some(_) = next_advisory(&mut recreated) => {
                // An advisory is only a claim: a member's push consumer can
                // deliver one (SECURITY.md, "Deliveries a member steers"), and
                // each would have every agent read the stream anew. The
                // stream's creation time says whether it was made again.
                // An error reading it counts as gone: consuming anew finds out.
                let now = ctx.js.get_stream(&f.stream).await.ok();
                if now.map(|s| s.cached_info().created) != Some(created) {
                    return Err(format!("the {} stream was recreated; consuming it anew", f.what));
                }
                ctx.metrics.sync_rejected("false_advisory");
                if let Some(held_back) = SKIPPED.admit(&format!("{}/false_advisory", f.what)) {
                    tracing::warn!(what = f.what, held_back, "ignored a stream-creation advisory of a stream that was not created again (counted in fleetbus_sync_rejected_total)");
                }
                continue;
            }
            Ok(()) = signers.changed(), if awaiting_signer => {
                return Err(format!("a signer of dropped {} became known; reading them again", f.what));
            }
            Ok(()) = connections.changed() => {
                // Reconnected: a server that restarted has no ephemeral
                // consumer any more. One request says whether ours is there
                // (the library would retry for 15 s before it gave up).
                if let Err(e) = stream.consumer_info(&name).await {
                    return Err(format!("NATS reconnected and the consumer is gone ({e}); consuming anew"));
                }
                continue;
            }
        };
        let Some(msg) = next else { break };
        let msg = msg.map_err(|e| format!("message: {e}"))?;
        let at_end = msg.info().map(|i| i.pending == 0).unwrap_or(false);
        let caught_up = catch_up.tell(at_end);
        let ev = match (f.decode)(prefix, &msg.subject, &msg.payload) {
            Ok((key, value)) => Some(Feed::Item(key, Box::new(value))),
            Err(reason) => {
                awaiting_signer |= matches!(
                    reason,
                    crate::trust::reason::UNKNOWN_SIGNER
                        | crate::trust::reason::EXPIRED_CERTIFICATE
                );
                ctx.metrics.sync_rejected(reason);
                // Counted each; logged once per kind and reason a while.
                if let Some(held_back) = SKIPPED.admit(&format!("{}/{reason}", f.what)) {
                    tracing::warn!(what = f.what, subject = %msg.subject, reason, held_back, "skipped a message (more of this kind and reason are counted in fleetbus_sync_rejected_total, logged every 10 s)");
                }
                (f.key_of)(prefix, &msg.subject).map(Feed::Unreadable)
            }
        };
        if let Some(ev) = ev {
            if send(ev).await.is_err() {
                return Ok(());
            }
        }
        if caught_up && send(Feed::CaughtUp).await.is_err() {
            return Ok(());
        }
    }
    Err("message stream ended".to_owned())
}

/// When a consumer says `CaughtUp`: once, the first time it has delivered
/// every last value (nothing pending), never again while it lives. Live
/// messages arrive with nothing pending too; a `CaughtUp` with each of them
/// made the engine treat every change as the end of a re-read (every object
/// planned, decided and looked at for collection again): the cost of one
/// change grew with the number of objects (docs/design/memory.md).
#[derive(Debug, Default)]
struct CatchUp {
    told: bool,
}

impl CatchUp {
    /// Whether to send `CaughtUp` now; `at_end`: nothing is pending.
    fn tell(&mut self, at_end: bool) -> bool {
        let now = at_end && !self.told;
        self.told |= at_end;
        now
    }
}

async fn next_advisory(sub: &mut Option<async_nats::Subscriber>) -> Option<async_nats::Message> {
    match sub {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// Secure mode: a record must be signed by the origin its subject names; one
/// the broker let someone else write is refused (counted, reported) and not
/// acted on. Insecure mode: every record stands.
pub(crate) fn signed_by(
    ctx: &Context,
    origin: &str,
    subject: &str,
    payload: &[u8],
) -> Result<(), &'static str> {
    if ctx.cfg.trust.is_none() {
        return Ok(());
    }
    ctx.signers
        .check_json(origin, payload, chrono::Utc::now())
        .inspect_err(|reason| ctx.reject(origin, reason, subject))
}

#[cfg(test)]
mod tests {
    use super::CatchUp;

    #[test]
    fn caught_up_is_said_once_when_the_replay_ends_not_with_every_live_message() {
        // A replay of three: pending 2, 1, 0; then live messages, each with
        // nothing pending.
        let mut c = CatchUp::default();
        let said: Vec<bool> = [false, false, true, true, true, true]
            .into_iter()
            .map(|at_end| c.tell(at_end))
            .collect();
        assert_eq!(said, [false, false, true, false, false, false]);
        // A stream empty when the consumer starts: said at once, then never.
        let mut empty = CatchUp::default();
        assert!(empty.tell(true));
        assert!(!empty.tell(true));
    }
}
