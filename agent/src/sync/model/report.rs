//! What one pass found about one rule, for its status.

use std::collections::{BTreeMap, BTreeSet};

use fleetbus_schemas::subject::ObjectKey;

use crate::sync::policy::Refusal;
use crate::sync::withheld::Withheld;

/// Everything one pass found about one rule, for its status.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RuleReport {
    /// Copies in sync.
    pub synced: i64,
    /// Copies the rule holds (suspended) that would be created or updated.
    pub held: i64,
    /// Why the rule holds its copies here (waiting for its `dependsOn`, or
    /// suspended), when it does.
    pub hold: Option<String>,
    /// Objects in conflict, with a description each.
    pub conflicts: BTreeMap<String, String>,
    /// Objects failing, with the error each.
    pub errors: BTreeMap<String, String>,
    /// Source clusters in effect.
    pub sources: BTreeSet<String>,
    /// Whether this cluster is a sink of the rule.
    pub selected: bool,
    /// Whether this cluster is a source of the rule (set by `status`, which
    /// alone needs it: the Ready condition of a cluster that is not a sink).
    pub source: bool,
    /// A copy was written in this pass.
    pub wrote: bool,
    /// Source objects whose `fleetbus.io/update-policy` value is unknown
    /// (ignored); a set, so that an object several rules select counts once.
    pub unknown_update_policy: BTreeSet<ObjectKey>,
    /// On the origin: (ready, reported) copies of our objects, when any report.
    pub readiness: Option<(i64, i64)>,
    /// On the origin: the reported copies that are not Current, as
    /// `cluster: Kind ns/name` → their health (status and message).
    pub unhealthy: BTreeMap<String, String>,
    /// Copies kept instead of deleted (`sink::keep`), with why and how to finish.
    pub kept: BTreeMap<String, String>,
    /// Our objects the rule selects that are never published, with why.
    pub withheld: BTreeMap<String, Withheld>,
    /// Objects this cluster's SyncPolicy refuses for the rule (ours not
    /// published, copies not written here), with why (`sync::policy`).
    pub refused: BTreeMap<String, Refusal>,
    /// On the origin: its rollouts of the rule's objects, for the status
    /// (`rollout::origin`), and how many in all.
    pub rollouts: Vec<fleetbus_schemas::crd::RolloutSummary>,
    /// See `rollouts`.
    pub rollouts_total: usize,
    /// On the origin of a placement rule: its placement units decided
    /// (`placement::summary`), and which could not be satisfied, with why.
    pub placed: usize,
    /// See `placed`.
    pub placement_degraded: Option<String>,
    /// On a sink of a placement rule: of the rule's placement units decided
    /// (every origin's), how many chose this cluster and how many did not,
    /// for the views (the dashboard marks chosen clusters).
    pub placed_here: Option<(u64, u64)>,
    /// Why rollouts are paused, when one is (the `RolloutPaused` condition).
    pub rollouts_paused: Option<String>,
}
