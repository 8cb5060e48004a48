//! What the sink knows of a copy beyond the live object.

use serde_json::Value;

use crate::sync::digest::Digest;

/// What the sink knows of a copy beyond the live object.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// The digest of the desired object (before carrying over live fields)
    /// last written: only "did it change" is asked of it.
    pub desired: Digest,
    /// What the API server made of it (the write's response, or a dry run's).
    pub server: Value,
    /// The live copy's resourceVersion (and whether status was compared)
    /// when it was last found equal to `server`: while both are the same,
    /// it still is, without comparing again. Cleared when rules recompile
    /// (exclusions, drift modes).
    pub verified: Option<(String, bool)>,
}
