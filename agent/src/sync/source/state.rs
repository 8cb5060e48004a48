//! What the source side keeps between passes: a leaf, so the engine can
//! own it without importing the source pass.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use fleetbus_schemas::subject::ObjectKey;
use kube::core::GroupVersionKind;
use tokio::time::Instant;

use super::published::HashMemo;
use crate::sync::policy::Refusal;
use crate::sync::withheld::Withheld;

/// What the source side keeps between passes.
#[derive(Default)]
pub(in crate::sync) struct SourceState {
    /// No publishing before this (an acknowledgement failed).
    pub hold: Option<Instant>,
    /// When the source side wants the next pass (what `source_pass` returned).
    pub wake: Option<Instant>,
    /// Errors of the source side, by rule (oversized objects).
    pub errors: BTreeMap<String, BTreeMap<String, String>>,
    /// Objects rules select that are never published, by rule (`withheld`).
    pub withheld: BTreeMap<String, BTreeMap<String, Withheld>>,
    /// Objects only rules this cluster's policy refuses select, by rule
    /// (`sync::policy`): not published.
    pub refused: BTreeMap<String, BTreeMap<String, Refusal>>,
    /// Content hashes of our originals' versions, per source kind.
    pub hashes: HashMap<GroupVersionKind, HashMemo>,
    /// Object versions that could not be published and got their Event.
    pub unpublishable: HashSet<(ObjectKey, String)>,
    /// Our live objects whose last value on the bus someone overwrote with
    /// a message sync cannot read: to publish again.
    pub overwritten: BTreeSet<ObjectKey>,
}
