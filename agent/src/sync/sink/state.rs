//! What the sink stage keeps between passes: the plan and what changed
//! since the last pass, what the server made of each copy we wrote
//! (baselines), the copies backing off, what is held, kept and unwrapped,
//! and which conflicts and failures were reported already. Only the sink
//! stage changes it; the engine owns it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use fleetbus_schemas::subject::ObjectKey;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tokio::time::Instant;

use super::bundle_state::Unwrapped;
use super::keep::KeptCopy;
use super::plan::{Dirty, Gate, Pair, Plan, FULL_EVERY};
use crate::registry::FleetView;
use crate::sync::model::backoff::Backoff;
use crate::sync::model::meta::describe_key;
use crate::sync::model::{Baseline, RuleReport, Target};
use crate::sync::progress::InFlight;

/// What the sink keeps between passes for planning.
pub struct SinkState {
    /// The plan.
    pub plan: Plan,
    /// What changed since the last pass.
    pub dirty: Dirty,
    /// What the plan was made under: the gate, the fleet view and the
    /// rules generation (templates read the fleet; a recompile may change
    /// any rule).
    pub gate: Gate,
    pub fleet: Option<Arc<FleetView>>,
    pub rules_generation: u64,
    /// `values::values_digest` when the plan was last brought up to date.
    pub values: u64,
    /// When the last full plan ran.
    pub full_at: Option<Instant>,
    /// The targets Bundles wanted in the last pass (decided every pass).
    pub unwrapped: BTreeSet<Target>,
    /// Local objects the next pass looks at for collection (`collect`):
    /// copies no longer wanted, foreign copies that appeared, copies kept
    /// or failing to be collected.
    pub collect: BTreeSet<Target>,
    /// Any copy may have become collectable (see `collect`): rules or the
    /// fleet changed, a kind (re)listed or caught up; the next pass scans
    /// every object. What concerns one copy (no longer wanted, a foreign
    /// copy appeared, kept or failing) is in `collect`.
    pub collect_due: bool,
    /// What the server made of our last write of each copy. A persistent
    /// B-tree, as the World's objects: a preview's snapshot shares it.
    pub baselines: imbl::OrdMap<Target, Baseline>,
    /// Copies whose last write, delete or orphan failed: when to try again
    /// (see `model::backoff`).
    pub retries: HashMap<Target, Backoff>,
    /// Failures that are news, as (rule, message): announced as Events on
    /// their rule at the end of the pass (`failures`).
    pub failure_events: Vec<(String, String)>,
    /// The copies the last pass wanted here: rule and source key of each
    /// (what the status reports report on), shared with the plan.
    pub held: BTreeMap<Target, Arc<Pair>>,
    /// The rules whose copies are held here this pass (suspended, or waiting
    /// for their `dependsOn`), with why: nothing of theirs is created or
    /// updated, drift is reported, not corrected (see `depends`).
    pub holds: BTreeMap<String, String>,
    /// The Bundles unwrapped here by the last pass, per manifest (`bundle`).
    pub bundles: BTreeMap<ObjectKey, Unwrapped>,
    /// Bundle versions whose invalid manifests were counted already.
    pub bundles_counted: HashSet<(ObjectKey, String)>,
    /// Copies kept instead of deleted, while they are there
    /// (`collect::report_kept`).
    pub kept: BTreeMap<Target, KeptCopy>,
    /// The pass's counts while it runs (read by `progress`).
    pub in_flight: Arc<InFlight>,
    /// Conflicts already reported (Event, bus), so each is reported once.
    pub reported_conflicts: BTreeSet<String>,
    /// When a rule last wrote a copy.
    pub last_sync: BTreeMap<String, Time>,
    /// The placement rules' source objects this cluster's SyncPolicy would
    /// refuse, chosen here or not, with why (`refusal::placement_unfit`):
    /// said to their origins (`placement::fitness`). Kept by the plan's
    /// walks, so a pass costs no walk of its own.
    pub unfit: BTreeMap<Pair, String>,
}

impl Default for SinkState {
    fn default() -> Self {
        SinkState {
            plan: Plan::default(),
            dirty: Dirty::default(),
            gate: Gate::default(),
            fleet: None,
            rules_generation: 0,
            values: 0,
            full_at: None,
            unwrapped: BTreeSet::new(),
            collect: BTreeSet::new(),
            // The first pass scans every object.
            collect_due: true,
            baselines: imbl::OrdMap::new(),
            retries: HashMap::new(),
            failure_events: Vec::new(),
            held: BTreeMap::new(),
            holds: BTreeMap::new(),
            bundles: BTreeMap::new(),
            bundles_counted: HashSet::new(),
            kept: BTreeMap::new(),
            in_flight: Arc::default(),
            reported_conflicts: BTreeSet::new(),
            last_sync: BTreeMap::new(),
            unfit: BTreeMap::new(),
        }
    }
}

impl SinkState {
    /// Completes `rule`'s report from the plan: copies in sync, errors,
    /// conflicts, unknown update policies.
    pub fn fill(&self, rule: &str, report: &mut RuleReport) {
        let Some(l) = self.plan.ledger_of(rule) else {
            return;
        };
        report.synced = l.synced;
        report.held = l.held;
        for (key, e) in &l.pair_errors {
            report.errors.insert(describe_key(key), e.clone());
        }
        for (target, e) in &l.errors {
            report.errors.insert(target.to_string(), e.clone());
        }
        for (target, c) in &l.conflicts {
            report.conflicts.insert(target.to_string(), c.clone());
        }
        report
            .unknown_update_policy
            .extend(l.unknown.iter().cloned());
        for (key, why) in &l.refused {
            report.refused.insert(describe_key(key), why.clone());
        }
    }

    /// What a preview reads of the sink, so it can run off the engine's
    /// loop: the holds and the failing copies (a few, copied) and the
    /// baselines (shared, not copied).
    pub fn for_preview(&self) -> SinkState {
        SinkState {
            holds: self.holds.clone(),
            retries: self.retries.clone(),
            baselines: self.baselines.clone(),
            ..SinkState::default()
        }
    }

    /// When the sink wants a pass: the next full plan, or a failed copy's
    /// next try, whichever comes first.
    pub fn wake_at(&self) -> Option<Instant> {
        let full = self.full_at.map(|at| at + FULL_EVERY);
        self.retries.values().map(|r| r.at).chain(full).min()
    }
}
