//! What the drift stage keeps: the drifts detected and not ended yet, and
//! whether an announcement of this pass failed (so that the sink pass returns
//! when to try again, and no stage sets the engine's timers). A leaf, so the
//! engine owns it without importing the stage ([`super::announce`]
//! announces and ends drifts).

use std::collections::HashMap;
use std::time::Duration;

use fleetbus_schemas::drift::DriftEvent;
use tokio::time::Instant;

use crate::sync::model::Target;

/// How soon a pass runs again after an announcement the bus did not
/// acknowledge: the drift was not recorded, so that pass detects and
/// announces it again.
pub const ANNOUNCE_RETRY: Duration = Duration::from_secs(2);

/// The drift stage's state.
#[derive(Debug, Default)]
pub struct DriftState {
    /// The open drift of each copy.
    pub open: HashMap<Target, OpenDrift>,
    /// When an announcement of the pass in progress last failed.
    unannounced: Option<Instant>,
}

impl DriftState {
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
        let mut s = DriftState::default();
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
