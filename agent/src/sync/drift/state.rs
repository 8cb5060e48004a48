//! What the drift stage keeps: the drifts detected and not ended yet, and
//! whether an announcement of this pass failed (so that the sink pass returns
//! when to try again, and no stage sets the engine's timers). A leaf, so the
//! engine owns it without importing the stage ([`super::announce`]
//! announces and ends drifts).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use fleetbus_schemas::drift::DriftEvent;
use tokio::time::Instant;

use super::coalesce::Coalescer;
use super::fight::Fights;
use crate::sync::model::Target;

/// How soon a pass runs again after an announcement the bus did not
/// acknowledge: the drift was not recorded, so that pass detects and
/// announces it again.
pub const ANNOUNCE_RETRY: Duration = Duration::from_secs(2);

/// The drift stage's state.
pub struct DriftState {
    /// The open drift of each copy.
    pub open: HashMap<Target, OpenDrift>,
    /// When an announcement of the pass in progress last failed.
    unannounced: Option<Instant>,
    /// When the local watch last saw each copy change (drift latency).
    pub seen: HashMap<Target, Instant>,
    /// Copies an operator asked to correct now (`fleetbus drift correct`),
    /// whatever the drift mode.
    pub forced: HashSet<Target>,
    /// Results of forced corrections in the last pass.
    pub forced_results: Vec<(Target, Result<(), String>)>,
    /// The drift state KV bucket, once found.
    pub kv: Option<async_nats::jetstream::kv::Store>,
    /// Copies another writer keeps changing back (`fight`).
    pub fights: Fights<Target>,
    /// Drift announcements held per copy (`coalesce`).
    pub coalesce: Coalescer<Target>,
    /// An announcement failed on the bus: run a pass then to try again
    /// (what the sink pass returned, from `take_wake`).
    pub wake: Option<Instant>,
}

impl DriftState {
    /// No drift yet; fights and announcements judged by these settings.
    pub fn new(fights: crate::config::FightPolicy, coalesce_window: Duration) -> Self {
        DriftState {
            open: HashMap::new(),
            unannounced: None,
            seen: HashMap::new(),
            forced: HashSet::new(),
            forced_results: Vec::new(),
            kv: None,
            fights: Fights::new(fights),
            coalesce: Coalescer::new(coalesce_window),
            wake: None,
        }
    }

    /// When the drift stage wants a pass: an announcement to try again, a
    /// fight's backoff ending, a coalesced announcement due.
    pub fn wake_at(&self) -> Option<Instant> {
        [self.wake, self.fights.wake_at(), self.coalesce.wake_at()]
            .into_iter()
            .flatten()
            .min()
    }

    /// An announcement was not acknowledged at `at`.
    pub fn announce_failed(&mut self, at: Instant) {
        self.unannounced = Some(at);
    }

    /// The end of a pass: when the next must run for the announcements that
    /// failed in this one (`ANNOUNCE_RETRY` after the last failure), if any.
    /// Taken, so the next pass starts with none.
    pub fn take_wake(&mut self) -> Option<Instant> {
        self.unannounced.take().map(|at| at + ANNOUNCE_RETRY)
    }
}

/// A drift that has been detected and not ended yet.
#[derive(Debug, Clone)]
pub struct OpenDrift {
    /// The last event sent for it (Detected or CorrectionFailed).
    pub event: DriftEvent,
    /// When its watch event arrived (for the latency histograms).
    pub seen: Instant,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_announcement_wakes_the_engine_once_after_the_last_failure() {
        let mut s = DriftState::new(
            crate::config::FightPolicy {
                threshold: 3,
                window: Duration::from_secs(60),
                backoff: Duration::from_secs(1),
            },
            Duration::from_secs(1),
        );
        assert_eq!(s.take_wake(), None);
        let t0 = Instant::now();
        s.announce_failed(t0);
        s.announce_failed(t0 + Duration::from_millis(300));
        assert_eq!(
            s.take_wake(),
            Some(t0 + Duration::from_millis(300) + ANNOUNCE_RETRY)
        );
        // The next pass starts with none: a due timer left standing would
        // wake the loop at once, forever.
        assert_eq!(s.take_wake(), None);
    }
}
