//! Sync progress (`fleetbus sync progress`): counted at the end of each pass, answered on
//! `<p>.cmd.<self>.progress`.
//!
//! Request/reply rather than a record the agent publishes: the CLI asks once a second while
//! it watches, so a joining cluster catching up on 10,000 objects costs nothing when nobody
//! looks, the answer is never older than the last pass, and nothing new is stored (no
//! bucket, key or stream; the registry record, republished each heartbeat to every
//! member, stays as it is). Subscribing is allowed to every agent; the reply goes to the
//! requester's inbox, which agents may publish to. PROTOCOL §6.5.
//!
//! The counts move once per pass: while one long pass writes thousands of copies, the
//! answer is the state before it (bus read, copies wanted as the previous pass saw them).
//! Counting inside the sink's write loop would show every copy; it belongs to the sink.

use std::sync::Arc;

use fleetbus_schemas::progress::SyncProgress;
use fleetbus_schemas::subject::CommandKey;
use futures::StreamExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use crate::context::Context;

/// The last pass's progress, shared by the engine (writer) and the responder (reader).
pub struct Progress {
    tx: watch::Sender<SyncProgress>,
}

impl Progress {
    /// Nothing counted yet: answers "starting" until the first pass is recorded.
    pub fn new(cluster: &str) -> Self {
        let (tx, _) = watch::channel(SyncProgress::starting(cluster, chrono::Utc::now()));
        Self { tx }
    }

    /// What the responder reads.
    pub fn subscribe(&self) -> watch::Receiver<SyncProgress> {
        self.tx.subscribe()
    }

    /// Counts what `engine`'s last pass left. Only a change of the counts replaces the
    /// stored value, so `updatedAt` says when the progress last moved.
    pub fn record(&self, engine: &Engine) {
        let now = measure(engine, chrono::Utc::now());
        self.tx.send_if_modified(|last| {
            if last.same_counts(&now) {
                false
            } else {
                *last = now;
                true
            }
        });
    }
}

/// The counts of `engine` after a pass.
fn measure(engine: &Engine, now: chrono::DateTime<chrono::Utc>) -> SyncProgress {
    let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    let reports = engine.reports.values();
    SyncProgress {
        cluster: engine.ctx.cfg.cluster_name.clone(),
        started: engine.fleet.synced,
        kinds: count(engine.kinds.len()),
        kinds_ready: count(engine.kinds.values().filter(|k| k.ready()).count()),
        envelopes: count(engine.kinds.values().map(|k| k.snapshots.len()).sum()),
        copies_wanted: count(engine.held.len()),
        copies_in_sync: reports
            .clone()
            .map(|r| u64::try_from(r.synced).unwrap_or(0))
            .sum(),
        errors: count(reports.clone().map(|r| r.errors.len()).sum()),
        conflicts: count(reports.map(|r| r.conflicts.len()).sum()),
        updated_at: now,
    }
}

/// Answers progress requests from `progress` until `cancel`. A failed subscribe is retried
/// with backoff (the CLI finds no responder meanwhile).
#[tracing::instrument(name = "progress_cmd", skip_all, fields(cluster = %ctx.cfg.cluster_name))]
pub async fn serve(
    ctx: Arc<Context>,
    progress: watch::Receiver<SyncProgress>,
    cancel: CancellationToken,
) {
    let client = ctx.js.client();
    let subject = CommandKey::progress(&ctx.cfg.cluster_name).to_subject(ctx.layout.prefix());
    loop {
        let Some(mut sub) = crate::bus::command_sub::subscribe(&client, &subject, &cancel).await
        else {
            return;
        };
        loop {
            let msg = tokio::select! {
                _ = cancel.cancelled() => return,
                msg = sub.next() => match msg {
                    Some(msg) => msg,
                    // Closed (the client was closed): subscribe again.
                    None => break,
                },
            };
            // The request's payload is ignored: there is nothing to ask but "where are you".
            let Some(to) = msg.reply else { continue };
            let encoded = progress.borrow().encode();
            match encoded {
                Ok(bytes) => {
                    if let Err(e) = client.publish(to, bytes.into()).await {
                        tracing::warn!(error = %e, "could not reply to a progress request");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "could not encode sync progress"),
            }
        }
        tracing::warn!(%subject, "progress subscription closed; subscribing again");
    }
}
