//! What the sink knows of a copy beyond the live object.

use super::Packed;
use crate::sync::digest::Digest;

/// What the sink knows of a copy beyond the live object.
#[derive(Debug, Clone)]
pub struct Baseline {
    /// The digest of the desired object (before carrying over live fields)
    /// last written: only "did it change" is asked of it.
    pub desired: Digest,
    /// What the API server made of it (the write's response, or a dry
    /// run's), packed: a copy found in sync by resourceVersion (`verified`)
    /// never reads it; a changed live copy is compared with it, and a drift
    /// is described from it. Not a digest: what is compared depends on the
    /// exclusions the live copy's annotations select at that moment.
    pub server: Packed,
    /// The live copy's resourceVersion (and whether status was compared)
    /// when it was last found equal to `server`: while both are the same,
    /// it still is, without comparing again. Cleared when rules recompile
    /// (exclusions, drift modes).
    pub verified: Option<(String, bool)>,
}
