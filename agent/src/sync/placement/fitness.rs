//! Fitness (PROTOCOL §6.10, "Fitness"): a cluster that cannot hold a
//! unit's copy is not chosen for it, and a chosen one that turns out unable
//! is replaced at once (no failover window: nothing failed, the copy can
//! never be written there).
//!
//! - What only the sink knows, its SyncPolicy, the sink says itself: an
//!   `unfit` report (`<p>.status.<sink>.…`, the channel copies' health
//!   already takes back to the origin) per source object of a placement rule
//!   it would refuse, **chosen here or not**, judged on the copy as computed
//!   (after mutations: `sink::pass::note_unfit`). Were it said only once
//!   chosen, a `Rebalance` origin would choose the cluster again each time
//!   the report went away with the choice, and flap. A closed policy (a
//!   typo) says nothing new and takes nothing back.
//! - What the origin can read itself, where a rule's `dependsOn` places its
//!   copies, it reads from the placement records: a cluster where a
//!   dependency with placement places nothing would hold the dependent's
//!   copy waiting for ever (`sink::depends`), so it is not fit. This is how
//!   a workload follows what it needs without sharing a group. A dependency
//!   there but not yet `Current` is no reason to go elsewhere: it becomes
//!   ready where it is, and moving would chase it.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use fleetbus_schemas::placement::PlacementUnit;
use fleetbus_schemas::registry::kind_id;
use fleetbus_schemas::reported::{cut_unfit, ReportedStatus};
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::ObjectRef;
use serde_json::Value;

use super::state::PlacementBook;
use crate::sync::returns::source::{source_key, source_object};
use crate::sync::returns::state::StatusBook;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::sink::state::SinkState;
use crate::sync::world::World;

/// Sink: a report per source object of a placement rule this cluster
/// cannot hold (see the module docs).
pub(in crate::sync) fn unfit_reports(
    world: &World,
    sink: &SinkState,
    now: DateTime<Utc>,
) -> Vec<ReportedStatus> {
    let local = &world.fleet.local.name;
    let mut out = Vec::new();
    // A closed policy (a typo in it, unread since a restart) refuses
    // everything: saying so would move every placement off this cluster,
    // where the closed policy promises to neither leak nor delete. What
    // was said before stands (`report::undecided`) until it is fixed.
    if world.policy.is_closed() {
        return out;
    }
    for rule in world.rules.values() {
        if rule.builtin || rule.spec.unwrap || rule.spec.placement.is_none() {
            continue;
        }
        if !world.selects_us(rule) || world.rule_problem(rule).is_some() || !world.rule_ready(rule)
        {
            continue;
        }
        let Some(kind) = world.kinds.get(&rule.source) else {
            continue;
        };
        let refused = sink.unfit.iter().filter(|((r, _), _)| *r == rule.name);
        for ((_, key), why) in refused {
            let Some(meta) = kind.snapshots.meta(key).filter(|m| !m.tombstone) else {
                continue;
            };
            if key.origin == *local {
                continue;
            }
            out.push(report(local, rule, key, &meta.uid, why.clone(), now));
        }
    }
    out
}

fn report(
    local: &str,
    rule: &CompiledRule,
    key: &ObjectKey,
    uid: &str,
    why: String,
    now: DateTime<Utc>,
) -> ReportedStatus {
    let api_version = if key.group.is_empty() {
        key.version.clone()
    } else {
        format!("{}/{}", key.group, key.version)
    };
    ReportedStatus {
        cluster: local.to_owned(),
        rule: rule.name.clone(),
        origin: key.origin.clone(),
        source: ObjectRef {
            uid: (!uid.is_empty()).then(|| uid.to_owned()),
            ..ObjectRef::new(&api_version, &key.kind, key.namespace.as_deref(), &key.name)
        },
        copy_name: key.name.clone(),
        copy_namespace: key.namespace.clone(),
        copy_resource_version: String::new(),
        observed_at: now,
        // No copy stands behind it: nothing reads it as a copy's status.
        status: Value::Null,
        ready: None,
        health: None,
        source_hash: None,
        unfit: Some(cut_unfit(&format!("cannot hold the copy: {why}"))),
    }
}

/// Origin: per source object of this cluster, the clusters whose reports
/// say they cannot hold its copy, with the rule they said it for and why.
/// Only members' reports about an object that exists here with the uid
/// they name count.
pub(in crate::sync) fn unfit_clusters(
    world: &World,
    book: &StatusBook,
) -> BTreeMap<ObjectKey, Vec<(String, String, String)>> {
    let local = &world.fleet.local.name;
    let mut out: BTreeMap<ObjectKey, Vec<(String, String, String)>> = BTreeMap::new();
    for r in book.reports.values() {
        let Some(why) = &r.unfit else { continue };
        let member = world
            .fleet
            .peers
            .get(&r.cluster)
            .is_some_and(|p| !p.left && !p.name_conflict && p.fitness);
        if &r.origin != local || !member || source_object(world, r).is_none() {
            continue;
        }
        out.entry(source_key(r)).or_default().push((
            r.cluster.clone(),
            r.rule.clone(),
            cut_unfit(why),
        ));
    }
    out
}

/// The rules `rule` depends on whose copies placement decides (with
/// placement, in no group of `rule`'s: a group shares its decision anyway).
pub(in crate::sync) fn placed_dependencies<'w>(
    world: &'w World,
    rule: &CompiledRule,
) -> Vec<&'w str> {
    let group = rule.spec.placement.as_ref().and_then(|p| p.group.as_ref());
    rule.spec
        .depends_on
        .iter()
        .filter_map(|d| world.rules.get(d.as_str()))
        .filter(|d| {
            d.spec
                .placement
                .as_ref()
                .is_some_and(|p| group.is_none() || p.group.as_ref() != group)
        })
        .map(|d| d.name.as_str())
        .collect()
}

/// Origin: the candidates a rule may not take because one of `deps` (its
/// [`placed_dependencies`]) places nothing there, with why. `placed` is
/// [`placed_by_rule`]'s.
pub(in crate::sync) fn dependency_misses<'a>(
    deps: &[&str],
    placed: &BTreeMap<String, BTreeSet<String>>,
    candidates: impl Iterator<Item = &'a str>,
) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    if deps.is_empty() {
        return out;
    }
    for c in candidates {
        let missing: Vec<&str> = deps
            .iter()
            .filter(|d| !placed.get(**d).is_some_and(|s| s.contains(c)))
            .copied()
            .collect();
        if !missing.is_empty() {
            out.insert(
                c.to_owned(),
                format!("dependsOn: rule {} places nothing here", missing.join(", ")),
            );
        }
    }
    out
}

/// Origin: the peers whose records say they do not serve a kind `rule`
/// writes (`unservedKinds`), with why.
pub(in crate::sync) fn unserved(world: &World, rule: &CompiledRule) -> BTreeMap<String, String> {
    let kinds: Vec<String> = rule
        .targets
        .iter()
        .map(|g| kind_id(&g.group, &g.version, &g.kind))
        .collect();
    world
        .fleet
        .peers
        .values()
        .filter_map(|p| {
            let missing: Vec<&str> = kinds
                .iter()
                .filter(|k| p.unserved_kinds.contains(k))
                .map(String::as_str)
                .collect();
            (!missing.is_empty()).then(|| {
                (
                    p.name.clone(),
                    format!("does not serve {}", missing.join(", ")),
                )
            })
        })
        .collect()
}

/// Whether any placement rule depends on another placement rule (only
/// then is [`placed_by_rule`] worth a walk over every record).
pub(in crate::sync) fn any_placed_dependency(world: &World) -> bool {
    world.rules.values().any(|r| {
        r.spec.placement.is_some()
            && r.spec.depends_on.iter().any(|d| {
                world
                    .rules
                    .get(d.as_str())
                    .is_some_and(|dep| dep.spec.placement.is_some())
            })
    })
}

/// Every cluster each placement rule's decisions (every origin's) choose,
/// by rule name; a group's decision counts for every rule of the group.
pub(in crate::sync) fn placed_by_rule(
    world: &World,
    book: &PlacementBook,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut by_group: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in world.rules.values() {
        if let Some(g) = r.spec.placement.as_ref().and_then(|p| p.group.as_deref()) {
            by_group.entry(g).or_default().push(r.name.as_str());
        }
    }
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (key, rec) in &book.read.records {
        let rules: Vec<&str> = match &key.unit {
            PlacementUnit::Object { rule, .. } => vec![rule.as_str()],
            PlacementUnit::Group(g) => by_group.get(g.as_str()).cloned().unwrap_or_default(),
        };
        for rule in rules {
            out.entry(rule.to_owned())
                .or_default()
                .extend(rec.chosen_names().map(str::to_owned));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_where_a_dependency_places_nothing_is_unfit() {
        let placed = BTreeMap::from([
            ("config".to_owned(), BTreeSet::from(["c2".to_owned()])),
            (
                "secrets".to_owned(),
                BTreeSet::from(["c2".to_owned(), "c3".to_owned()]),
            ),
        ]);
        let cands = ["c1", "c2", "c3"];
        let misses = dependency_misses(&["config", "secrets"], &placed, cands.into_iter());
        assert_eq!(misses.len(), 2, "{misses:?}");
        assert_eq!(
            misses["c1"],
            "dependsOn: rule config, secrets places nothing here"
        );
        assert_eq!(misses["c3"], "dependsOn: rule config places nothing here");
        assert!(!misses.contains_key("c2"), "both dependencies are on c2");
        // A dependency not decided yet places nothing anywhere.
        let none = dependency_misses(&["later"], &placed, cands.into_iter());
        assert_eq!(none.len(), 3);
        // No dependency with placement: every cluster is fit.
        assert!(dependency_misses(&[], &placed, cands.into_iter()).is_empty());
    }
}
