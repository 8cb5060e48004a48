//! ResourceSyncRule status on this cluster, written only when it changes.

use fleetbus_schemas::crd::{ResourceSyncRule, ResourceSyncRuleStatus};
use fleetbus_schemas::well_known::condition;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use super::engine::{Engine, RuleReport};
use super::rules::{rule_gvk, CompiledRule};
use crate::kube::conditions::{merge, Desired};
use crate::kube::FIELD_MANAGER;

/// Condition type naming the objects in conflict.
pub const CONFLICT: &str = "Conflict";

/// At most this many objects are named in a condition message.
const NAMED: usize = 5;

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
    let ready_condition = match (problem, report.selected, ready) {
        (Some(p), _, _) => Desired {
            type_: condition::READY,
            status: false,
            reason: "Invalid",
            message: p.to_owned(),
        },
        (None, false, _) => Desired {
            type_: condition::READY,
            status: false,
            reason: "NotSelected",
            message: "this cluster's labels do not match spec.clusterSelector: it is not a sink of this rule".to_owned(),
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
    };
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
    ResourceSyncRuleStatus {
        observed_generation: rule.generation,
        conditions: merge(
            &existing.conditions,
            &[ready_condition, conflict_condition],
            rule.generation,
        ),
        source_clusters: report.sources.iter().cloned().collect(),
        objects_synced: report.synced,
        conflicts: report.conflicts.len() as i64,
        errors: report.errors.len() as i64,
        last_sync_time: last_sync.or_else(|| existing.last_sync_time.clone()),
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

impl Engine {
    /// Writes the status of every rule object whose status changed.
    pub(super) async fn status_pass(&mut self) {
        let Some(kind) = self.kinds.get(&rule_gvk()) else {
            return;
        };
        let mut writes = Vec::new();
        let (mut synced, mut conflicts, mut errors) = (0, 0, 0);
        for rule in self.rules.values().filter(|r| !r.builtin) {
            let Some(obj) = kind.objects.get(&(None, rule.name.clone())) else {
                continue;
            };
            let existing: ResourceSyncRuleStatus = obj
                .get("status")
                .cloned()
                .and_then(|s| serde_json::from_value(s).ok())
                .unwrap_or_default();
            let report = self.reports.get(&rule.name).cloned().unwrap_or_default();
            synced += report.synced;
            conflicts += report.conflicts.len() as i64;
            errors += report.errors.len() as i64;
            let problem = self.rule_problem(rule);
            let status = desired(
                rule,
                &report,
                problem.as_deref(),
                self.rule_ready(rule),
                &existing,
                self.last_sync.get(&rule.name).cloned(),
            );
            if status != existing {
                writes.push((rule.name.clone(), status));
            }
        }
        self.ctx.metrics.sync_objects.set(synced);
        self.ctx.metrics.sync_conflicts.set(conflicts);
        self.ctx.metrics.sync_errors.set(errors);
        let api: Api<ResourceSyncRule> = Api::all(self.ctx.client.clone());
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        for (name, status) in writes {
            match serde_json::to_value(&status) {
                Ok(v) => {
                    let patch = json!({ "status": with_nulls(v) });
                    match api
                        .patch_status(&name, &params, &Patch::Merge(&patch))
                        .await
                    {
                        Ok(_) => self.ctx.metrics.kube_write("resourcesyncrule_status"),
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
    }
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
        ] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    v
}
