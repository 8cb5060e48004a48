//! What a sink keeps of the Bundles it unwrapped, from one pass to the next
//! (what became of each manifest, for the Bundle's report). A leaf, so the
//! engine owns it without importing the Bundle stage ([`super::bundle`]).

use fleetbus_schemas::crd::BundleManifestStatus;

use crate::sync::model::Target;

/// One manifest as a pass found it.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::sync) struct Manifest {
    /// What is reported (`ready` is filled in when read).
    pub(in crate::sync) status: BundleManifestStatus,
    /// Where its copy is, when it has one.
    pub(in crate::sync) target: Option<Target>,
}

/// One Bundle unwrapped on this cluster in the last pass.
#[derive(Debug, Clone, PartialEq)]
pub struct Unwrapped {
    /// The rule that unwraps it.
    pub rule: String,
    /// An error of the Bundle as a whole.
    pub(in crate::sync) error: Option<String>,
    /// Its manifests, in order.
    pub(in crate::sync) manifests: Vec<Manifest>,
    /// A hash of the Bundle's `spec` (invalid manifests are counted once per
    /// version: the envelope's hash covers `status`, which changes with reports).
    pub(in crate::sync) hash: String,
    /// Manifests (or the Bundle itself) found invalid, as opposed to waiting for a kind.
    pub(in crate::sync) invalid: usize,
    /// Some manifest's kind is not listed yet (just after a start, say): its
    /// report would say "not applied" of what may well be applied, so none is made.
    pub(in crate::sync) waiting: bool,
}
