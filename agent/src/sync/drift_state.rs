//! What the drift stage keeps between passes: the drifts detected and not
//! ended yet. A leaf, so the engine owns them without importing the stage
//! ([`super::drift_report`] announces and ends them).

use fleetbus_schemas::drift::DriftEvent;
use tokio::time::Instant;

/// A drift that has been detected and not ended yet.
#[derive(Debug, Clone)]
pub struct OpenDrift {
    /// The last event sent for it (Detected or CorrectionFailed).
    pub event: DriftEvent,
    /// When its watch event arrived (for the latency histograms).
    pub seen: Instant,
}
