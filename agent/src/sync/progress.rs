//! Sync progress (`fleetbus clusters progress`): counted at the end of each pass, answered on
//! `<p>.cmd.<self>.progress`.
//!
//! Request/reply rather than a record the agent publishes: the CLI asks once a second while
//! it watches, so a joining cluster catching up on 10,000 objects costs nothing when nobody
//! looks, the answer is never older than the last pass, and nothing new is stored (no
//! bucket, key or stream; the registry record, republished each heartbeat to every
//! member, stays as it is). Subscribing is allowed to every agent; the reply goes to the
//! requester's inbox, which agents may publish to. PROTOCOL §6.5.
//!
//! The counts are those of the last pass, except while a sink pass is in flight: a
//! joining cluster's first pass may write thousands of copies, so the sink counts its
//! targets and settled copies as it goes ([`InFlight`]) and the answer shows those.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use fleetbus_schemas::progress::SyncProgress;
use fleetbus_schemas::subject::CommandKey;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::bus::command::{self, Common, Refused, Signed, Verb};
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

    /// Stores `now`, what the last pass left (measured by the engine's loop,
    /// `engine::run`). Only a change of the counts replaces the stored value,
    /// so `updatedAt` says when the progress last moved.
    pub fn record(&self, now: SyncProgress) {
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

/// The copies of the sink pass in flight: how many it wants, how many are in sync so
/// far. Written by the engine's task, read by the responder (relaxed atomics: the two
/// counts are shown together but need not be one snapshot).
#[derive(Debug, Default)]
pub struct InFlight {
    active: AtomicBool,
    wanted: AtomicU64,
    in_sync: AtomicU64,
    /// When the pass began: only a pass running for [`SHOWN_AFTER`] is shown, so
    /// the short passes of a cluster in sync never flicker as "catching up".
    began: std::sync::Mutex<Option<std::time::Instant>>,
}

/// How long a sink pass runs before its own counts are shown.
const SHOWN_AFTER: std::time::Duration = std::time::Duration::from_millis(500);

impl InFlight {
    /// A sink pass starts work on `wanted` copies.
    pub fn begin(&self, wanted: usize) {
        self.wanted
            .store(u64::try_from(wanted).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.in_sync.store(0, Ordering::Relaxed);
        *self.began.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::time::Instant::now());
        self.active.store(true, Ordering::Relaxed);
    }

    /// `n` copies of the pass are in sync without being looked at (decided
    /// in an earlier pass, and nothing of theirs changed since).
    pub fn also_in_sync(&self, n: usize) {
        self.in_sync
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// One more copy of the pass is in sync (found equal or written).
    pub fn settled(&self) {
        self.in_sync.fetch_add(1, Ordering::Relaxed);
    }

    /// The pass is done; its result is recorded by [`Progress::record`].
    pub fn end(&self) {
        self.active.store(false, Ordering::Relaxed);
    }

    /// `last` with the in-flight pass's counts, while one runs.
    fn show(&self, last: SyncProgress) -> SyncProgress {
        self.show_after(last, SHOWN_AFTER)
    }

    fn show_after(&self, mut last: SyncProgress, after: std::time::Duration) -> SyncProgress {
        let long = self
            .began
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|t| t.elapsed() >= after);
        if long && self.active.load(Ordering::Relaxed) {
            let wanted = self.wanted.load(Ordering::Relaxed);
            // A pass counts from zero the copies it finds in sync, including those the
            // last pass already counted: shown alone, a second pass of a catch-up made
            // the count go back (92% then 75%). The copies the last pass left in sync
            // are still in sync unless this pass finds otherwise, which its end
            // records; until then the larger count is the true one.
            let in_sync = self.in_sync.load(Ordering::Relaxed);
            last.copies_in_sync = in_sync.max(last.copies_in_sync).min(wanted);
            last.copies_wanted = wanted;
        }
        last
    }
}

/// Answers progress requests from `progress` until `cancel`, through the
/// agent's one request server (`bus::command`). Anyone on the bus may ask:
/// the answer is counts only, so no signature is asked for.
#[tracing::instrument(name = "progress_cmd", skip_all, fields(cluster = %ctx.cfg.cluster_name))]
pub async fn serve(
    ctx: Arc<Context>,
    progress: watch::Receiver<SyncProgress>,
    in_flight: Arc<InFlight>,
    cancel: CancellationToken,
) {
    let verb = Verb {
        name: "progress",
        subject: CommandKey::progress(&ctx.cfg.cluster_name).to_subject(ctx.layout.prefix()),
        signed: Signed::NotRequired,
        rate: ctx.cfg.command_rate,
    };
    let common = Common {
        metrics: &ctx.metrics,
        trust: ctx.cfg.trust.as_deref(),
    };
    let cluster = ctx.cfg.cluster_name.clone();
    let refuse = |refused: Refused| {
        let (error, retry_after_ms) = match refused {
            Refused::Rate {
                why,
                retry_after_ms,
            } => (why, Some(retry_after_ms)),
            Refused::Unauthorized(why) => (why, None),
        };
        SyncProgress {
            error: Some(error),
            retry_after_ms,
            ..SyncProgress::starting(&cluster, chrono::Utc::now())
        }
        .encode()
        .map_err(|e| e.to_string())
    };
    // The request's payload is ignored: there is nothing to ask but "where are you".
    let handle = |_payload| {
        let answer = in_flight.show(progress.borrow().clone());
        async move { answer.encode().map_err(|e| e.to_string()) }
    };
    command::serve(&ctx.js.client(), common, &verb, handle, refuse, &cancel).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pass_in_flight_shows_its_own_counts_and_the_last_pass_otherwise() {
        let mut last = SyncProgress::starting("c3", chrono::Utc::now());
        last.copies_wanted = 10;
        last.copies_in_sync = 10;
        let now = std::time::Duration::ZERO;
        let f = InFlight::default();
        assert_eq!(f.show_after(last.clone(), now), last, "no pass in flight");
        f.begin(10_000);
        f.settled();
        f.settled();
        assert_eq!(
            f.show_after(last.clone(), std::time::Duration::from_secs(3600)),
            last,
            "a short pass is not shown"
        );
        let shown = f.show_after(last.clone(), now);
        assert_eq!(
            (shown.copies_wanted, shown.copies_in_sync),
            (10_000, 10),
            "the pass's target, and the 10 copies the last pass left in sync (more than the 2 it has walked)"
        );
        assert_eq!(shown.cluster, "c3", "the rest is the last pass's");
        f.end();
        assert_eq!(
            f.show_after(last.clone(), now),
            last,
            "ended: the recorded pass counts"
        );
        f.begin(5);
        assert_eq!(
            f.show_after(last, now).copies_in_sync,
            5,
            "never more than the pass wants"
        );
    }

    #[test]
    fn a_second_pass_of_a_catch_up_never_shows_fewer_copies_than_the_last_one_left() {
        let mut last = SyncProgress::starting("c3", chrono::Utc::now());
        let now = std::time::Duration::ZERO;
        let f = InFlight::default();
        // First pass: 10,002 wanted, 9,293 in sync when it ended.
        f.begin(10_002);
        for _ in 0..9_293 {
            f.settled();
        }
        f.end();
        last.copies_wanted = 10_002;
        last.copies_in_sync = 9_293;
        // The second pass has walked 7,578 copies so far.
        f.begin(10_002);
        for _ in 0..7_578 {
            f.settled();
        }
        assert_eq!(f.show_after(last.clone(), now).copies_in_sync, 9_293);
        for _ in 7_578..10_002 {
            f.settled();
        }
        assert_eq!(f.show_after(last, now).copies_in_sync, 10_002);
    }
}
