//! ResourceSyncRule status on this cluster, written only when it changes,
//! and while only counts and times change at most once per [`COALESCE`].
//!
//! Counts (`objectsSynced`, `lastSyncTime`, the Ready message) change with
//! every copy written: writing each change would cost one status write per
//! copy. What an operator waits on (`kubectl wait`: a condition's status or
//! reason, `observedGeneration`) is written at once; the rest at most once a
//! second, and the engine wakes when the second is over
//! ([`StatusState::due`]) so the last counts are written once things settle.

use std::collections::BTreeMap;
use std::time::Duration;

use fleetbus_schemas::crd::{ResourceSyncRule, ResourceSyncRuleStatus};
use fleetbus_schemas::well_known::condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};
use tokio::time::Instant;

use super::model::RuleReport;
use super::placement::state::PlacementBook;
use super::placement::summary::placement_summary;
use super::rollout::origin::rollout_summaries;
use super::rollout::state::RolloutBook;
use super::rules::compile::{rule_gvk, CompiledRule};
use super::rules::matching::qualifies;
use super::world::World;
use crate::context::Context;
use crate::kube::conditions::{merge, Desired};
use crate::kube::FIELD_MANAGER;
use crate::metrics::RuleObjects;

/// What the status stage keeps: each rule's report of the last pass, when
/// this agent last wrote each rule's status, when a status held back (only
/// counts changed) is due, and the records left for the bus.
#[derive(Default)]
pub struct StatusState {
    /// Per rule, what the last pass found.
    pub reports: std::collections::BTreeMap<String, RuleReport>,
    /// When this agent last wrote each rule's status.
    pub written: std::collections::BTreeMap<String, Instant>,
    /// When a status held back is due.
    pub due: Option<Instant>,
    /// The rule status records left for the bus (`status_bus`).
    pub bus: super::status_bus::StatusBus,
}

impl StatusState {
    /// Takes the readiness the origin's return pass found (`returns`): per
    /// rule, ready and reported copies, and those not Current.
    pub fn set_readiness(
        &mut self,
        per_rule: &BTreeMap<String, (i64, i64)>,
        mut unhealthy: BTreeMap<String, BTreeMap<String, String>>,
    ) {
        for (rule, report) in self.reports.iter_mut() {
            report.readiness = per_rule.get(rule).copied();
            report.unhealthy = unhealthy.remove(rule).unwrap_or_default();
        }
    }
}

/// Condition type naming the objects in conflict.
pub const CONFLICT: &str = "Conflict";

/// Condition type naming the copies kept instead of deleted, because deleting
/// them would delete objects fleetbus does not manage (`sink::keep`).
pub const KEPT: &str = "Kept";
/// Condition type naming this cluster's objects the rule selects that are
/// never published (`sync/withheld`).
pub const SKIPPED: &str = "Skipped";
/// Condition type, on the origin of a reporting rule: whether every reported
/// copy of this cluster's objects is healthy (`Current`), naming those not.
pub const HEALTHY: &str = "Healthy";
/// Condition type: one of the rule's rollouts is paused (PROTOCOL §6.9).
pub const ROLLOUT_PAUSED: &str = "RolloutPaused";
/// Condition type, on the origin of a placement rule: the fleet could not
/// satisfy a placement (too few clusters, a spread key no cluster has) and
/// it was placed best-effort (PROTOCOL §6.10).
pub const PLACEMENT_DEGRADED: &str = "PlacementDegraded";

/// The Ready condition's reason while the rule is suspended (`spec.suspend`).
pub const SUSPENDED: &str = "Suspended";

/// The Ready condition's reason while the rule waits for its `dependsOn`.
pub const DEPENDS_ON: &str = "DependsOn";

/// Condition type naming the objects this cluster's SyncPolicy refuses for
/// the rule: ours not published, copies not written (`sync::policy`).
pub const POLICY_REFUSED: &str = "PolicyRefused";

/// At most this many objects are named in a condition message.
const NAMED: usize = 5;

/// The least time between two writes of a rule's status that change only
/// counts, times or messages.
pub const COALESCE: Duration = Duration::from_secs(1);

/// When to write a rule's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Write {
    /// It is what the API server has: not at all.
    Never,
    /// Now.
    Now,
    /// Not before this (only counts or times changed, and the last write was
    /// less than [`COALESCE`] ago); a pass must run then.
    At(Instant),
}

/// When to write `new` over `existing` (the status the API server has),
/// given when this agent last wrote the rule's status.
pub fn when_to_write(
    existing: &ResourceSyncRuleStatus,
    new: &ResourceSyncRuleStatus,
    last_write: Option<Instant>,
    now: Instant,
) -> Write {
    if new == existing {
        return Write::Never;
    }
    if significant(existing) != significant(new) {
        return Write::Now;
    }
    match last_write.map(|at| at + COALESCE) {
        Some(due) if due > now => Write::At(due),
        _ => Write::Now,
    }
}

/// A condition's type, status, reason and observed generation.
type ConditionState<'a> = (&'a str, &'a str, &'a str, Option<i64>);

/// What someone waits on: each condition's type, status, reason and
/// observed generation, and the status's observed generation.
fn significant(s: &ResourceSyncRuleStatus) -> (Option<i64>, Vec<ConditionState<'_>>) {
    let mut conditions: Vec<_> = s
        .conditions
        .iter()
        .map(|c| {
            (
                c.type_.as_str(),
                c.status.as_str(),
                c.reason.as_str(),
                c.observed_generation,
            )
        })
        .collect();
    conditions.sort_unstable();
    (s.observed_generation, conditions)
}

/// The Ready condition: why the rule cannot work, is held, has nothing to
/// do here, waits, fails, or is in sync.
fn ready_condition(
    rule: &CompiledRule,
    report: &RuleReport,
    problem: Option<&str>,
    ready: bool,
) -> Desired {
    match (problem, report.selected, ready) {
        (Some(p), _, _) => Desired {
            type_: condition::READY,
            status: false,
            reason: "Invalid",
            message: p.to_owned(),
        },
        (None, true, true) if !rule.spec.suspend && report.hold.is_some() => Desired {
            type_: condition::READY,
            status: false,
            reason: DEPENDS_ON,
            message: format!(
                "{}; {} copy(ies) would be created or updated",
                report.hold.as_deref().unwrap_or_default(),
                report.held
            ),
        },
        (None, _, _) if rule.spec.suspend => Desired {
            type_: condition::READY,
            status: false,
            reason: SUSPENDED,
            message: format!(
                "suspended (spec.suspend): nothing is created, updated or deleted here; drift is reported, not corrected; {} copy(ies) would be created or updated",
                report.held
            ),
        },
        // Not a sink is no failure: Ready is True (so `kubectl wait
        // --for=condition=Ready` on every cluster returns), the reason says
        // there is nothing to do here.
        (None, false, _) if report.source => Desired {
            type_: condition::READY,
            status: true,
            reason: "SourceOnly",
            message: "this cluster is a source of this rule, not a sink (its labels do not match spec.clusterSelector): its objects are published, no copies are written here".to_owned(),
        },
        (None, false, _) => Desired {
            type_: condition::READY,
            status: true,
            reason: "NotSelected",
            message: "this cluster is not selected by this rule: its labels match neither spec.clusterSelector (sinks) nor spec.sourceClusterSelector (sources), so nothing is done here".to_owned(),
        },
        (None, true, false) => Desired {
            type_: condition::READY,
            status: false,
            reason: "Waiting",
            message: "waiting for the objects of the rule's kinds to be read".to_owned(),
        },
        (None, true, true) if !report.errors.is_empty() => Desired {
            type_: condition::READY,
            status: false,
            reason: "SyncErrors",
            message: format!("{} object(s) failed: {}", report.errors.len(), named(&report.errors)),
        },
        (None, true, true) => Desired {
            type_: condition::READY,
            status: true,
            reason: "Synced",
            message: format!(
                "{} object(s) in sync from {} source cluster(s)",
                report.synced,
                report.sources.len()
            ),
        },
    }
}

/// The status a rule should show; `problem` is why it cannot work, `ready`
/// whether everything it needs has been read.
pub fn desired(
    rule: &CompiledRule,
    report: &RuleReport,
    problem: Option<&str>,
    ready: bool,
    existing: &ResourceSyncRuleStatus,
    last_sync: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
) -> ResourceSyncRuleStatus {
    let ready_condition = ready_condition(rule, report, problem, ready);
    let conflict_condition = if report.conflicts.is_empty() {
        Desired {
            type_: CONFLICT,
            status: false,
            reason: "NoConflicts",
            message: String::new(),
        }
    } else {
        Desired {
            type_: CONFLICT,
            status: true,
            reason: "Conflicts",
            message: named(&report.conflicts),
        }
    };
    let kept_condition = if report.kept.is_empty() {
        Desired {
            type_: KEPT,
            status: false,
            reason: "NothingKept",
            message: String::new(),
        }
    } else {
        Desired {
            type_: KEPT,
            status: true,
            reason: "UnmanagedDependents",
            message: named(&report.kept),
        }
    };
    let mut conditions = vec![
        ready_condition,
        conflict_condition,
        kept_condition,
        skipped_condition(report),
        refused_condition(report),
    ];
    conditions.extend(healthy_condition(report));
    conditions.extend(rollout_condition(report));
    conditions.extend(placement_condition(report));
    ResourceSyncRuleStatus {
        observed_generation: rule.generation,
        conditions: merge(&existing.conditions, &conditions, rule.generation),
        source_clusters: report.sources.iter().cloned().collect(),
        objects_synced: report.synced,
        conflicts: report.conflicts.len() as i64,
        errors: report.errors.len() as i64,
        skipped: report.withheld.len() as i64,
        last_sync_time: last_sync.or_else(|| existing.last_sync_time.clone()),
        readiness: report
            .readiness
            .map(|(ready, reported)| format!("ready {ready}/{reported}")),
        ready_copies: report.readiness.map(|(ready, _)| ready),
        reported_copies: report.readiness.map(|(_, reported)| reported),
        rollouts: report.rollouts.clone(),
        rollouts_total: (report.rollouts_total > 0)
            .then(|| i64::try_from(report.rollouts_total).unwrap_or(i64::MAX)),
    }
}

/// The `RolloutPaused` condition, on the origin of a rule with rollouts:
/// True while one of them is paused, with why.
fn rollout_condition(report: &RuleReport) -> Option<Desired> {
    if report.rollouts_total == 0 {
        return None;
    }
    Some(match &report.rollouts_paused {
        Some(why) => Desired {
            type_: ROLLOUT_PAUSED,
            status: true,
            reason: "Paused",
            message: why.clone(),
        },
        None => Desired {
            type_: ROLLOUT_PAUSED,
            status: false,
            reason: "NotPaused",
            message: String::new(),
        },
    })
}

/// The `PlacementDegraded` condition, on the origin of a placement rule
/// once it has decided: True naming the placements it could not satisfy.
fn placement_condition(report: &RuleReport) -> Option<Desired> {
    if report.placed == 0 {
        return None;
    }
    Some(match &report.placement_degraded {
        Some(why) => Desired {
            type_: PLACEMENT_DEGRADED,
            status: true,
            reason: "BestEffort",
            message: why.clone(),
        },
        None => Desired {
            type_: PLACEMENT_DEGRADED,
            status: false,
            reason: "Satisfied",
            message: format!("{} placements as asked", report.placed),
        },
    })
}

/// The `Healthy` condition, on the origin while copies are reported: which
/// copies are not `Current`, and what their health says.
fn healthy_condition(report: &RuleReport) -> Option<Desired> {
    let (ready, reported) = report.readiness?;
    Some(if report.unhealthy.is_empty() {
        Desired {
            type_: HEALTHY,
            status: true,
            reason: "AllCurrent",
            message: format!("{ready}/{reported} reported copies are Current"),
        }
    } else {
        Desired {
            type_: HEALTHY,
            status: false,
            reason: "NotCurrent",
            message: format!(
                "{} of {reported} reported copies are not Current: {}",
                report.unhealthy.len(),
                named(&report.unhealthy)
            ),
        }
    })
}

/// The `Skipped` condition: how many of our objects the rule selects are
/// never published, how many for each reason, and which (the first few).
fn skipped_condition(report: &RuleReport) -> Desired {
    if report.withheld.is_empty() {
        return Desired {
            type_: SKIPPED,
            status: false,
            reason: "NothingSkipped",
            message: String::new(),
        };
    }
    let mut by_reason: std::collections::BTreeMap<&str, usize> = Default::default();
    for w in report.withheld.values() {
        *by_reason.entry(w.reason()).or_default() += 1;
    }
    let counts: Vec<String> = by_reason.iter().map(|(r, n)| format!("{r} {n}")).collect();
    let why = report
        .withheld
        .iter()
        .map(|(k, w)| (k.clone(), w.why().to_owned()))
        .collect();
    Desired {
        type_: SKIPPED,
        status: true,
        reason: "NeverPublished",
        message: format!(
            "{} object(s) never published ({}): {}",
            report.withheld.len(),
            counts.join(", "),
            named(&why)
        ),
    }
}

/// The `PolicyRefused` condition: how many objects this cluster's SyncPolicy
/// refuses for the rule, per direction and kind/namespace, and which (the
/// first few), with the entry that decided.
fn refused_condition(report: &RuleReport) -> Desired {
    if report.refused.is_empty() {
        return Desired {
            type_: POLICY_REFUSED,
            status: false,
            reason: "NothingRefused",
            message: String::new(),
        };
    }
    let mut by_what: std::collections::BTreeMap<(&str, &str), usize> = Default::default();
    for r in report.refused.values() {
        *by_what.entry((r.direction.as_str(), &r.what)).or_default() += 1;
    }
    let counts: Vec<String> = by_what
        .iter()
        .map(|((d, w), n)| format!("{d} {w}: {n}"))
        .collect();
    let exports = report
        .refused
        .values()
        .any(|r| r.direction == crate::sync::policy::Direction::Export);
    let imports = report
        .refused
        .values()
        .any(|r| r.direction == crate::sync::policy::Direction::Import);
    let why = report
        .refused
        .iter()
        .map(|(k, r)| (k.clone(), format!("refused by {}", r.by)))
        .collect();
    Desired {
        type_: POLICY_REFUSED,
        status: true,
        reason: match (exports, imports) {
            (true, true) => "ExportAndImportRefused",
            (true, false) => "ExportRefused",
            _ => "ImportRefused",
        },
        message: format!(
            "{} object(s) refused by this cluster's SyncPolicy ({}): {}",
            report.refused.len(),
            counts.join(", "),
            named(&why)
        ),
    }
}

/// `object: why; …` for the first few entries.
fn named(entries: &std::collections::BTreeMap<String, String>) -> String {
    let mut parts: Vec<String> = entries
        .iter()
        .take(NAMED)
        .map(|(k, v)| format!("{k}: {v}"))
        .collect();
    if entries.len() > NAMED {
        parts.push(format!("and {} more", entries.len() - NAMED));
    }
    parts.join("; ")
}

/// Writes the status of every rule object whose status changed (see
/// [`when_to_write`]); returns when those that must wait are due (the
/// engine keeps it as `StatusState::due`). `last_sync` is the sink's last
/// sync time per rule, `rollouts` the rollout book (this origin's rollouts
/// are summed up in the status).
pub(super) async fn status_pass(
    world: &World,
    state: &mut StatusState,
    last_sync: &BTreeMap<String, Time>,
    (rollouts, placements): (&RolloutBook, &PlacementBook),
    ctx: &Context,
) -> Option<Instant> {
    let kind = world.kinds.get(&rule_gvk())?;
    let mut wake: Option<Instant> = None;
    let now = Instant::now();
    let mut writes = Vec::new();
    let (mut synced, mut conflicts, mut errors) = (0, 0, 0);
    let mut per_rule = Vec::new();
    let mut unpublished = Vec::new();
    for rule in world.rules.values().filter(|r| !r.builtin) {
        let Some(obj) = kind.objects.get(&(None, rule.name.clone())) else {
            continue;
        };
        let existing: ResourceSyncRuleStatus = obj
            .get("status")
            .cloned()
            .and_then(|s| serde_json::from_value(s).ok())
            .unwrap_or_default();
        let mut report = state.reports.get(&rule.name).cloned().unwrap_or_default();
        let local = &world.fleet.local;
        report.source = rule.is_valid() && qualifies(rule, &local.labels, &local.features);
        rollout_summaries(rollouts, &local.name, &rule.name, &mut report);
        placement_summary(placements, &local.name, rule, &mut report);
        synced += report.synced;
        conflicts += report.conflicts.len() as i64;
        errors += report.errors.len() as i64;
        per_rule.push(RuleObjects {
            rule: rule.name.clone(),
            synced: report.synced,
            conflicts: report.conflicts.len() as i64,
            errors: report.errors.len() as i64,
        });
        let problem = world.rule_problem(rule);
        let status = desired(
            rule,
            &report,
            problem.as_deref(),
            world.rule_ready(rule),
            &existing,
            last_sync.get(&rule.name).cloned(),
        );
        let last = state.written.get(&rule.name).copied();
        match when_to_write(&existing, &status, last, now) {
            // The API server has it; the bus may not (since this start, or
            // the placement counts, which only the bus carries).
            Write::Never if state.bus.behind(&rule.name, &report) => {
                unpublished.push((rule.name.clone(), status, report));
            }
            Write::Never => {}
            Write::Now => writes.push((rule.name.clone(), status, report)),
            Write::At(due) => {
                wake = Some(wake.map_or(due, |d| d.min(due)));
            }
        }
    }
    let rules = &world.rules;
    state.written.retain(|name, _| rules.contains_key(name));
    state.bus.retain(ctx, rules.keys().cloned().collect());
    for (name, status, report) in unpublished {
        state.bus.put(ctx, &name, &status, &report);
    }
    ctx.metrics.sync_objects.set(synced);
    ctx.metrics.sync_conflicts.set(conflicts);
    ctx.metrics.sync_errors.set(errors);
    ctx.metrics.set_rule_objects(&per_rule);
    let api: Api<ResourceSyncRule> = Api::all(ctx.client.clone());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    for (name, status, report) in writes {
        match serde_json::to_value(&status) {
            Ok(v) => {
                let patch = json!({ "status": with_nulls(v) });
                // Rule names are DNS subdomains (the API server checked
                // them); escaped all the same, like every name in a URL.
                let segment = crate::kube::path::segment(&name);
                match api
                    .patch_status(&segment, &params, &Patch::Merge(&patch))
                    .await
                {
                    Ok(_) => {
                        ctx.metrics.sync_kube_write("resourcesyncrule_status");
                        state.bus.put(ctx, &name, &status, &report);
                        state.written.insert(name, now);
                    }
                    // Deleted since the pass read it: nothing to report on.
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => {
                        tracing::warn!(rule = %name, error = %e, "could not write rule status")
                    }
                }
            }
            Err(e) => {
                tracing::warn!(rule = %name, error = %e, "could not serialise rule status")
            }
        }
    }
    wake
}

/// A merge patch removes a member only when it is `null`: absent optional
/// members of the new status are sent as null so old values do not linger.
fn with_nulls(mut v: Value) -> Value {
    if let Some(map) = v.as_object_mut() {
        for key in [
            "observedGeneration",
            "conditions",
            "sourceClusters",
            "lastSyncTime",
            "readiness",
            "readyCopies",
            "reportedCopies",
            "rollouts",
            "rolloutsTotal",
        ] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::rules::compile as rules;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use k8s_openapi::jiff::Timestamp;
    use std::collections::BTreeMap;

    fn rule() -> CompiledRule {
        let obj = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
                         "metadata": {"name": "r", "generation": 3},
                         "spec": {"groupVersionKind": {"version": "v1", "kind": "Secret"}}});
        rules::compile(&[&obj])["r"].clone()
    }

    fn report() -> RuleReport {
        RuleReport {
            synced: 2,
            sources: ["c2".to_owned(), "c3".to_owned()].into(),
            selected: true,
            ..RuleReport::default()
        }
    }

    fn cond<'a>(s: &'a ResourceSyncRuleStatus, type_: &str) -> &'a Condition {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} condition in {s:?}"))
    }

    fn ready(s: &ResourceSyncRuleStatus) -> (&str, &str, &str) {
        let c = cond(s, condition::READY);
        (c.status.as_str(), c.reason.as_str(), c.message.as_str())
    }

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn status(
        report: &RuleReport,
        problem: Option<&str>,
        is_ready: bool,
    ) -> ResourceSyncRuleStatus {
        desired(
            &rule(),
            report,
            problem,
            is_ready,
            &ResourceSyncRuleStatus::default(),
            None,
        )
    }

    #[test]
    fn synced_when_selected_read_and_without_errors() {
        let s = status(&report(), None, true);
        let (st, reason, msg) = ready(&s);
        assert_eq!((st, reason), ("True", "Synced"));
        assert!(
            msg.contains("2 object(s)") && msg.contains("2 source"),
            "{msg}"
        );
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.source_clusters, vec!["c2", "c3"]);
        assert_eq!((s.objects_synced, s.conflicts, s.errors), (2, 0, 0));
        assert_eq!(cond(&s, CONFLICT).status, "False");
        assert!(s
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(3)));
    }

    #[test]
    fn a_problem_is_invalid_whatever_else_holds() {
        let mut r = report();
        r.selected = false;
        r.errors.insert("Secret a/b".into(), "boom".into());
        let s = status(&r, Some("cannot watch v1 ConfigMap: forbidden"), false);
        assert_eq!(
            ready(&s),
            ("False", "Invalid", "cannot watch v1 ConfigMap: forbidden")
        );
    }

    #[test]
    fn not_selected_is_ready_and_says_why_not_a_failure() {
        let mut r = report();
        r.selected = false;
        let s = status(&r, None, true);
        let (st, reason, msg) = ready(&s);
        // `kubectl get resourcesyncrules` must not say READY False on a
        // cluster the rule has nothing to do on (the hub of the README tour).
        assert_eq!((st, reason), ("True", "NotSelected"));
        assert!(
            msg.contains("clusterSelector") && msg.contains("nothing is done here"),
            "{msg}"
        );
        // Whether or not the kinds are read yet.
        assert_eq!(ready(&status(&r, None, false)).0, "True");
        r.source = true;
        let s = status(&r, None, true);
        let (st, reason, msg) = ready(&s);
        assert_eq!((st, reason), ("True", "SourceOnly"));
        assert!(msg.contains("published"), "{msg}");
    }

    #[test]
    fn waiting_until_the_kinds_are_read() {
        let s = status(&report(), None, false);
        assert_eq!(ready(&s).1, "Waiting");
        assert_eq!(ready(&s).0, "False");
    }

    #[test]
    fn sync_errors_name_the_failing_objects() {
        let mut r = report();
        for i in 0..7 {
            r.errors.insert(
                format!("Secret apps/s{i}"),
                "namespace apps not found".into(),
            );
        }
        let s = status(&r, None, true);
        let (st, reason, msg) = ready(&s);
        assert_eq!((st, reason), ("False", "SyncErrors"));
        assert!(
            msg.starts_with("7 object(s) failed: Secret apps/s0: namespace apps not found"),
            "{msg}"
        );
        // Five named, the rest counted.
        assert!(
            msg.contains("s4") && !msg.contains("s5:") && msg.ends_with("and 2 more"),
            "{msg}"
        );
        assert_eq!(s.errors, 7);
    }

    #[test]
    fn copies_not_current_are_named_on_the_origin() {
        let s = status(&report(), None, true);
        assert!(
            s.conditions.iter().all(|c| c.type_ != HEALTHY),
            "no reports, no Healthy condition"
        );
        let mut r = report();
        r.readiness = Some((1, 2));
        r.unhealthy.insert(
            "c3: Deployment apps/web".into(),
            "InProgress (Available: 0/1)".into(),
        );
        let s = status(&r, None, true);
        let c = cond(&s, HEALTHY);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "NotCurrent")
        );
        assert_eq!(
            c.message,
            "1 of 2 reported copies are not Current: c3: Deployment apps/web: InProgress (Available: 0/1)"
        );
        r.readiness = Some((2, 2));
        r.unhealthy.clear();
        let c = cond(&status(&r, None, true), HEALTHY).clone();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "AllCurrent")
        );
    }

    #[test]
    fn withheld_objects_are_counted_and_named_with_why() {
        use crate::sync::withheld::Withheld;
        let s = status(&report(), None, true);
        assert_eq!(cond(&s, SKIPPED).status, "False");
        assert_eq!(s.skipped, 0);
        let mut r = report();
        r.withheld.insert(
            "Secret kube-system/tok".into(),
            Withheld::ServiceAccountToken,
        );
        r.withheld
            .insert("Secret kube-system/boot".into(), Withheld::BootstrapToken);
        r.withheld.insert(
            "Secret fleetbus-system/b-kubeconfig".into(),
            Withheld::WrittenByFleetbus,
        );
        let s = status(&r, None, true);
        let c = cond(&s, SKIPPED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "NeverPublished")
        );
        assert!(
            c.message.starts_with(
                "3 object(s) never published (BootstrapToken 1, ServiceAccountToken 1, WrittenByFleetbus 1): "
            ),
            "{}",
            c.message
        );
        assert!(
            c.message.contains(
                "Secret kube-system/tok: a service account token never leaves its cluster"
            ),
            "{}",
            c.message
        );
        assert_eq!(s.skipped, 3);
        // Skipping is no error: the rule stays Ready.
        assert_eq!(ready(&s).1, "Synced");
    }

    #[test]
    fn refusals_are_counted_per_direction_and_kind_and_named_with_the_entry() {
        use crate::sync::policy::{Direction, Refusal};
        let s = status(&report(), None, true);
        assert_eq!(cond(&s, POLICY_REFUSED).reason, "NothingRefused");
        let refusal = |direction, what: &str| Refusal {
            direction,
            what: what.into(),
            by: "SyncPolicy default (export.rules[0])".into(),
        };
        let mut r = report();
        for n in ["a", "b"] {
            r.refused.insert(
                format!("Secret team/{n}"),
                refusal(Direction::Export, "Secret in team"),
            );
        }
        let s = status(&r, None, true);
        let c = cond(&s, POLICY_REFUSED);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "ExportRefused")
        );
        assert_eq!(
            c.message,
            "2 object(s) refused by this cluster's SyncPolicy (export Secret in team: 2): Secret team/a: refused by SyncPolicy default (export.rules[0]); Secret team/b: refused by SyncPolicy default (export.rules[0])"
        );
        r.refused.insert(
            "ClusterRole view".into(),
            refusal(
                Direction::Import,
                "ClusterRole.rbac.authorization.k8s.io (cluster-scoped)",
            ),
        );
        let c = cond(&status(&r, None, true), POLICY_REFUSED).clone();
        assert_eq!(c.reason, "ExportAndImportRefused");
        assert!(c.message.starts_with("3 object(s) refused by this cluster's SyncPolicy (export Secret in team: 2, import ClusterRole.rbac.authorization.k8s.io (cluster-scoped): 1)"), "{}", c.message);
        // A refusal is the policy working, no error: the rule stays Ready.
        assert_eq!(ready(&status(&r, None, true)).1, "Synced");
    }

    #[test]
    fn conflicts_raise_the_conflict_condition_naming_the_object() {
        let mut r = report();
        r.conflicts.insert(
            "Secret apps/s".into(),
            "exists on this cluster and was not made by fleetbus".into(),
        );
        let s = status(&r, None, true);
        let c = cond(&s, CONFLICT);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "Conflicts")
        );
        assert!(c.message.contains("Secret apps/s"), "{}", c.message);
        assert_eq!(s.conflicts, 1);
        // A conflict alone does not make the rule unready.
        assert_eq!(ready(&s).1, "Synced");
    }

    #[test]
    fn placement_degraded_only_on_a_placing_origin_and_names_why() {
        let none = status(&report(), None, true);
        assert!(none
            .conditions
            .iter()
            .all(|c| c.type_ != PLACEMENT_DEGRADED));
        let placed = RuleReport {
            placed: 3,
            ..report()
        };
        let ok = cond(&status(&placed, None, true), PLACEMENT_DEGRADED).clone();
        assert_eq!(
            (ok.status.as_str(), ok.reason.as_str()),
            ("False", "Satisfied")
        );
        let degraded = RuleReport {
            placement_degraded: Some("1 of 3 placements degraded: ConfigMap web/a: 1 of 2".into()),
            ..placed
        };
        let bad = cond(&status(&degraded, None, true), PLACEMENT_DEGRADED).clone();
        assert_eq!(
            (bad.status.as_str(), bad.reason.as_str()),
            ("True", "BestEffort")
        );
        assert!(bad.message.contains("web/a"), "{}", bad.message);
    }

    #[test]
    fn an_unchanged_status_compares_equal_and_is_not_rewritten() {
        let first = status(&report(), None, true);
        // As the API server gives it back: transition times in the past.
        let mut stored = first.clone();
        for c in &mut stored.conditions {
            c.last_transition_time = at(1_000);
        }
        stored.last_sync_time = Some(at(2_000));
        let again = desired(&rule(), &report(), None, true, &stored, None);
        assert_eq!(again, stored);
        // A new message with the same status keeps the transition time...
        let mut more = report();
        more.synced = 3;
        let changed = desired(&rule(), &more, None, true, &stored, None);
        assert_ne!(changed, stored);
        assert_eq!(
            cond(&changed, condition::READY).last_transition_time,
            at(1_000)
        );
        // ...a flip of the status does not.
        let flipped = desired(&rule(), &more, None, false, &stored, None);
        assert_ne!(
            cond(&flipped, condition::READY).last_transition_time,
            at(1_000)
        );
        assert_eq!(cond(&flipped, CONFLICT).last_transition_time, at(1_000));
    }

    #[test]
    fn last_sync_time_is_the_newest_write_or_kept() {
        let mut stored = status(&report(), None, true);
        stored.last_sync_time = Some(at(2_000));
        let kept = desired(&rule(), &report(), None, true, &stored, None);
        assert_eq!(kept.last_sync_time, Some(at(2_000)));
        let newer = desired(&rule(), &report(), None, true, &stored, Some(at(3_000)));
        assert_eq!(newer.last_sync_time, Some(at(3_000)));
    }

    #[test]
    fn an_unchanged_status_is_never_written() {
        let s = status(&report(), None, true);
        let now = Instant::now();
        assert_eq!(when_to_write(&s, &s, None, now), Write::Never);
        assert_eq!(when_to_write(&s, &s, Some(now), now), Write::Never);
    }

    #[test]
    fn counts_alone_are_written_at_most_once_per_interval() {
        let stored = status(&report(), None, true);
        let mut more = report();
        more.synced = 3;
        let counted = desired(&rule(), &more, None, true, &stored, Some(at(5)));
        let now = Instant::now();
        // Never written by this agent, or long ago: now.
        assert_eq!(when_to_write(&stored, &counted, None, now), Write::Now);
        let long_ago = now.checked_sub(COALESCE * 2).unwrap();
        assert_eq!(
            when_to_write(&stored, &counted, Some(long_ago), now),
            Write::Now
        );
        // Written 200 ms ago: when the interval is over.
        let recent = now.checked_sub(Duration::from_millis(200)).unwrap();
        assert_eq!(
            when_to_write(&stored, &counted, Some(recent), now),
            Write::At(recent + COALESCE)
        );
    }

    #[test]
    fn what_an_operator_waits_on_is_written_at_once() {
        let stored = status(&report(), None, true);
        let now = Instant::now();
        let just = Some(now);
        // Ready flips.
        let waiting = desired(&rule(), &report(), None, false, &stored, None);
        assert_eq!(when_to_write(&stored, &waiting, just, now), Write::Now);
        // A conflict appears, and goes.
        let mut r = report();
        r.conflicts.insert("Secret apps/s".into(), "exists".into());
        let conflicted = desired(&rule(), &r, None, true, &stored, None);
        assert_eq!(when_to_write(&stored, &conflicted, just, now), Write::Now);
        let cleared = desired(&rule(), &report(), None, true, &conflicted, None);
        assert_eq!(when_to_write(&conflicted, &cleared, just, now), Write::Now);
        // An error appears (Ready's reason changes).
        let mut r = report();
        r.errors.insert("Secret apps/s".into(), "boom".into());
        let failing = desired(&rule(), &r, None, true, &stored, None);
        assert_eq!(when_to_write(&stored, &failing, just, now), Write::Now);
        // A new generation is observed.
        let mut newer = stored.clone();
        newer.observed_generation = Some(4);
        assert_eq!(when_to_write(&stored, &newer, just, now), Write::Now);
        // A second error while failing already: a count, held back.
        let mut r2 = r.clone();
        r2.errors.insert("Secret apps/t".into(), "boom".into());
        let more_failing = desired(&rule(), &r2, None, true, &failing, None);
        assert!(matches!(
            when_to_write(&failing, &more_failing, just, now),
            Write::At(_)
        ));
    }

    #[test]
    fn absent_members_are_sent_as_null_in_the_merge_patch() {
        let v = with_nulls(json!({"objectsSynced": 0}));
        let map: BTreeMap<String, Value> = serde_json::from_value(v).unwrap();
        for key in [
            "observedGeneration",
            "conditions",
            "sourceClusters",
            "lastSyncTime",
        ] {
            assert_eq!(map.get(key), Some(&Value::Null), "{key}");
        }
        assert_eq!(map.get("objectsSynced"), Some(&json!(0)));
    }

    /// The record on the bus (`status_bus`) from the status written here.
    mod bus {
        use super::*;
        use crate::sync::status_bus::{cell_state, record};
        use chrono::{DateTime, Utc};
        use fleetbus_schemas::rule_status::{
            ProblemKind, RuleCellState, RuleStatusKey, RuleStatusRecord, MAX_PROBLEMS,
        };

        fn sink() -> RuleReport {
            report()
        }

        fn state(report: &RuleReport, problem: Option<&str>, ready: bool) -> RuleCellState {
            cell_state(&desired(
                &rule(),
                report,
                problem,
                ready,
                &ResourceSyncRuleStatus::default(),
                None,
            ))
        }

        #[test]
        fn the_state_word_follows_the_status_written() {
            assert_eq!(state(&sink(), None, true), RuleCellState::Synced);
            assert_eq!(state(&sink(), None, false), RuleCellState::Waiting);
            assert_eq!(state(&sink(), Some("bad"), true), RuleCellState::Invalid);
            let mut r = sink();
            r.conflicts.insert("Secret a/b".into(), "held".into());
            assert_eq!(state(&r, None, true), RuleCellState::Conflict);
            // An error outranks a conflict.
            r.errors.insert("Secret a/c".into(), "boom".into());
            assert_eq!(state(&r, None, true), RuleCellState::Error);
            // Neither source nor sink: NotSelected; a source only: Synced.
            let mut r = sink();
            r.selected = false;
            assert_eq!(state(&r, None, true), RuleCellState::NotSelected);
            r.source = true;
            assert_eq!(state(&r, None, true), RuleCellState::Synced);
            assert_eq!(
                cell_state(&ResourceSyncRuleStatus::default()),
                RuleCellState::Waiting
            );
            // Suspended outranks everything but Invalid, and says what waits.
            let mut suspended = rule();
            suspended.spec.suspend = true;
            let mut r = sink();
            r.held = 4;
            r.errors.insert("Secret a/c".into(), "boom".into());
            let status = desired(
                &suspended,
                &r,
                None,
                true,
                &ResourceSyncRuleStatus::default(),
                None,
            );
            assert_eq!(cell_state(&status), RuleCellState::Suspended);
            let ready = status
                .conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .unwrap();
            assert!(
                ready
                    .message
                    .contains("4 copy(ies) would be created or updated"),
                "{}",
                ready.message
            );
            let invalid = desired(
                &suspended,
                &r,
                Some("bad"),
                true,
                &ResourceSyncRuleStatus::default(),
                None,
            );
            assert_eq!(cell_state(&invalid), RuleCellState::Invalid);
        }

        #[test]
        fn the_record_carries_counts_and_problems_errors_first_bounded() {
            let mut r = sink();
            for i in 0..30 {
                r.withheld.insert(
                    format!("Secret kube-system/t{i:02}"),
                    crate::sync::withheld::Withheld::ServiceAccountToken,
                );
            }
            r.kept.insert("Secret a/k".into(), "kept".into());
            r.conflicts.insert("Secret a/c".into(), "held".into());
            r.errors.insert("Secret a/e".into(), "x".repeat(5000));
            let status = desired(
                &rule(),
                &r,
                None,
                true,
                &ResourceSyncRuleStatus::default(),
                None,
            );
            let key = RuleStatusKey {
                cluster: "east".into(),
                cluster_id: "6f1c".into(),
                rule: "r".into(),
            };
            let now: DateTime<Utc> = "2026-11-27T01:00:00Z".parse().unwrap();
            let rec = record(key.clone(), &status, &r, now);
            assert_eq!(rec.state, RuleCellState::Error);
            assert_eq!(rec.reason, "SyncErrors");
            assert_eq!((rec.errors, rec.conflicts, rec.skipped), (1, 1, 30));
            assert_eq!(rec.objects_synced, 2);
            assert_eq!(rec.observed_generation, Some(3));
            assert!(rec.sink && !rec.source);
            assert_eq!(rec.problems.len(), MAX_PROBLEMS);
            assert_eq!(rec.problems_total, 33);
            let kinds: Vec<_> = rec.problems.iter().take(3).map(|p| p.kind).collect();
            assert_eq!(
                kinds,
                [ProblemKind::Error, ProblemKind::Conflict, ProblemKind::Kept]
            );
            assert_eq!(rec.problems[1].object, "Secret a/c");
            // What the agent writes passes what every reader checks.
            assert_eq!(rec.validate(&key), Ok(()));
            let bytes = rec.encode().unwrap();
            assert_eq!(RuleStatusRecord::decode(&bytes).unwrap(), rec);
        }
    }
}
