//! Which rules hold their copies on this sink this pass, and why: a
//! suspended rule (`spec.suspend`), and a rule whose `dependsOn` are not
//! synced and healthy here yet (decided by the pure `depends::waiting`).
//! A held rule creates and updates nothing; `wave::decide` and the serial
//! path read them (`SinkState::holds`).
//!
//! Cost: with no `dependsOn` in any active rule this is one look at each
//! rule. With one, the copies the last pass held are walked once per pass
//! to judge the dependencies' health: O(copies here), not O(changes); fine
//! for the CRD / namespace / quota rules dependsOn is for, and named in
//! ARCHITECTURE.md as the one per-pass walk left.

use std::collections::{BTreeMap, BTreeSet};

use super::depends::{waiting, Dependency};
use super::state::SinkState;
use crate::sync::health;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::world::World;

/// Why a suspended rule's copies are held.
pub const SUSPENDED: &str = "the rule is suspended (spec.suspend)";

/// The holds of this pass, by rule, among the rules that make copies
/// here (`active`).
pub(super) fn rule_holds(
    world: &World,
    sink: &SinkState,
    active: &[CompiledRule],
) -> BTreeMap<String, String> {
    let mut holds: BTreeMap<String, String> = active
        .iter()
        .filter(|r| r.spec.suspend)
        .map(|r| (r.name.clone(), SUSPENDED.to_owned()))
        .collect();
    let dependents: Vec<&CompiledRule> = active
        .iter()
        .filter(|r| !r.spec.suspend && !r.spec.depends_on.is_empty())
        .collect();
    if dependents.is_empty() {
        return holds;
    }
    let needed: BTreeSet<&str> = dependents
        .iter()
        .flat_map(|r| r.spec.depends_on.iter().map(String::as_str))
        .collect();
    let active_names: BTreeSet<&str> = active.iter().map(|r| r.name.as_str()).collect();
    let mut deps = dependencies(world, sink, &needed, &active_names);
    // A rule waiting on a held rule is held too: settle until nothing
    // changes (at most one round per rule).
    for _ in 0..=dependents.len() {
        let mut changed = false;
        for rule in &dependents {
            let looked: Vec<(&str, Option<&Dependency>)> = rule
                .spec
                .depends_on
                .iter()
                .map(|d| (d.as_str(), deps.get(d.as_str())))
                .collect();
            let why = waiting(&looked);
            if holds.get(&rule.name) != why.as_ref() {
                changed = true;
                match why {
                    Some(why) => holds.insert(rule.name.clone(), why),
                    None => holds.remove(&rule.name),
                };
            }
        }
        for (name, d) in deps.iter_mut() {
            d.held = holds.contains_key(*name);
        }
        if !changed {
            break;
        }
    }
    holds
}

/// What this sink knows of each rule in `needed` (rules that do not
/// exist are left out): active here, failing or conflicting copies, and
/// the health of every copy it held in the last pass. A rule counts as
/// active only once the last pass applied it too: in the pass where it
/// becomes active its copies are not planned yet, and "no copies" would
/// read as "every copy Current" (found by the e2e test: a dependent's
/// copy was written in the same pass as its dependency's).
fn dependencies<'a>(
    world: &World,
    sink: &SinkState,
    needed: &BTreeSet<&'a str>,
    active: &BTreeSet<&str>,
) -> BTreeMap<&'a str, Dependency> {
    let mut deps: BTreeMap<&'a str, Dependency> = needed
        .iter()
        .filter(|name| world.rules.contains_key(**name))
        .map(|name| {
            let troubled = sink
                .plan
                .ledger_of(name)
                .map_or(0, |l| l.errors.len() + l.conflicts.len());
            let applied_before = sink.gate.rules.iter().any(|r| r == *name);
            let d = Dependency {
                active: active.contains(name) && applied_before,
                troubled,
                ..Dependency::default()
            };
            (*name, d)
        })
        .collect();
    let now = chrono::Utc::now();
    for (target, pair) in &sink.held {
        let rule = &pair.0;
        let Some(d) = deps.get_mut(rule.as_str()) else {
            continue;
        };
        let custom = world.rules.get(rule).and_then(|r| r.health.as_ref());
        let live = world
            .kinds
            .get(&target.gvk())
            .and_then(|k| k.objects.get(&target.local_key()));
        d.copies
            .push(live.map(|live| health::judge(custom, &live, now)));
    }
    deps
}
