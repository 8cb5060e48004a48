//! What the Bundles unwrapped here say, read by other stages: the kinds
//! their manifests need watched, whether a report is undecided, each
//! Bundle's report here and (at the origin) each Bundle's status. Reads
//! the World and the sink's state; changes nothing.

use std::collections::{BTreeMap, HashSet};

use fleetbus_schemas::subject::ObjectKey;
use kube::core::GroupVersionKind;
use serde_json::Value;

use fleetbus_schemas::crd::BundleReport;
use fleetbus_schemas::reported::ReportedStatus;

use super::bundle::{is_fleetbus_group, manifest_kinds, report_is_ready, status_from_reports};
use super::state::SinkState;
use crate::sync::health;
use crate::sync::world::World;

/// The kinds of the manifests of every Bundle an unwrap rule brings here.
pub fn kinds(world: &World) -> HashSet<GroupVersionKind> {
    let mut out = HashSet::new();
    for rule in world.rules.values() {
        if !rule.spec.unwrap || rule.problem.is_some() || !world.selects_us(rule) {
            continue;
        }
        let Some(kind) = world.kinds.get(&rule.source) else {
            continue;
        };
        for (key, env) in kind.snapshots.iter_meta() {
            if env.tombstone || key.origin == world.fleet.local.name {
                continue;
            }
            if let Some(obj) = kind.snapshots.get(key).and_then(|e| e.object) {
                // Refused in `prepare`: nothing to watch for them.
                let kinds = manifest_kinds(&obj).into_iter();
                out.extend(kinds.filter(|g| !is_fleetbus_group(&g.group)));
            }
        }
    }
    out
}

/// The Bundles unwrapped here in the last pass, with their rule: what the
/// sink reports (see [`report`]).
pub fn unwrapped(sink: &SinkState) -> impl Iterator<Item = (&ObjectKey, &str)> {
    sink.bundles.iter().map(|(k, b)| (k, b.rule.as_str()))
}

/// Whether the Bundle's report is undecided: a manifest's kind is not
/// listed yet, so whether its copy exists is not known.
pub fn waiting(sink: &SinkState, key: &ObjectKey) -> bool {
    sink.bundles.get(key).is_some_and(|b| b.waiting)
}

/// The report of one Bundle unwrapped here: per manifest applied, error
/// and ready (read from the live copy now), as a [`BundleReport`] in JSON;
/// `None` when this cluster does not unwrap it.
pub fn report(world: &World, sink: &SinkState, key: &ObjectKey) -> Option<Value> {
    let b = sink.bundles.get(key)?;
    let manifests = b
        .manifests
        .iter()
        .map(|m| {
            let mut s = m.status.clone();
            if s.applied {
                let live = m.target.as_ref().and_then(|t| {
                    world
                        .kinds
                        .get(&t.gvk())
                        .and_then(|k| k.objects.get(&t.local_key()))
                });
                // Applied but not seen yet: its watch event comes next.
                s.ready = Some(live.as_ref().is_some_and(|live| {
                    health::judge(None, live, chrono::Utc::now()).is_current()
                }));
            }
            s
        })
        .collect();
    let report = BundleReport {
        error: b.error.clone(),
        manifests,
        message: None,
    };
    serde_json::to_value(report).ok()
}

/// The sink's part of status return for Bundles: the Bundles unwrapped
/// here, each with its rule, its report (`status`) and whether it is
/// ready here (every manifest applied and ready, no error).
pub fn reports(world: &World, sink: &SinkState) -> Vec<(ObjectKey, String, Value, bool)> {
    unwrapped(sink)
        .filter_map(|(key, rule)| {
            let report = report(world, sink, key)?;
            let ready = report_is_ready(&report);
            Some((key.clone(), rule.to_owned(), report, ready))
        })
        .collect()
}

/// The origin's part: `Bundle.status` (as JSON) of each Bundle of this
/// cluster that unwrap rules report about, from `returned` (the live
/// reports by source object).
pub fn statuses(
    world: &World,
    returned: &BTreeMap<ObjectKey, Vec<ReportedStatus>>,
) -> BTreeMap<ObjectKey, Value> {
    returned
        .iter()
        .filter(|(_, rs)| {
            rs.iter().any(|r| {
                world
                    .rules
                    .get(&r.rule)
                    .is_some_and(|rule| rule.spec.unwrap)
            })
        })
        .filter_map(|(key, rs)| {
            let refs: Vec<&ReportedStatus> = rs
                .iter()
                .filter(|r| {
                    world
                        .rules
                        .get(&r.rule)
                        .is_some_and(|rule| rule.spec.unwrap)
                })
                .collect();
            let status = serde_json::to_value(status_from_reports(&refs)).ok()?;
            Some((key.clone(), status))
        })
        .collect()
}
