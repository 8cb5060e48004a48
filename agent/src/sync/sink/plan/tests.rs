//! The plan's memo, and the property that matters: a plan kept up to date
//! from what changed equals one made from scratch over the same inputs.

use super::*;
use crate::sync::model::RuleReport;
use crate::sync::sink::state::SinkState;
use fleetbus_schemas::crd::UpdatePolicy;
use proptest::prelude::*;
use serde_json::json;

use crate::sync::sink::conflicts;

const RULES: [&str; 2] = ["r1", "r2"];

fn key(origin: &str, name: &str) -> ObjectKey {
    ObjectKey::from_api_version(origin, "v1", "ConfigMap", Some("apps"), name)
}

/// The envelope of `origin`'s ConfigMap `name` at version `v`.
fn env(origin: &str, name: &str, v: u8) -> Envelope {
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"namespace": "apps", "name": name,
                                  "uid": format!("u-{origin}-{name}"),
                                  "resourceVersion": v.to_string(),
                                  "creationTimestamp": format!("2026-01-0{}T00:00:00Z", v % 3)},
                     "data": {"v": v}});
    Envelope::snapshot(origin, None, obj, chrono::Utc::now()).unwrap()
}

fn target(name: &str) -> Target {
    Target::from(crate::sync::model::Place {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: name.into(),
    })
}

/// What a rule makes of an envelope: r1 copies under the same name (two
/// origins' objects meet), fails at version 3; r2 renames so that
/// different objects meet at one target, and does not select version 4.
fn compute(rule: &str, key: &ObjectKey, env: &Envelope, calls: &mut usize) -> Computed {
    *calls += 1;
    let obj = env.object.as_ref().unwrap();
    let v = obj["data"]["v"].as_u64().unwrap();
    let name = match rule {
        "r1" if v == 3 => {
            return Computed {
                result: Some(Err(format!("cannot map version {v}"))),
                unknown_policy: false,
                refused: None,
            }
        }
        "r1" => key.name.clone(),
        _ if v == 4 => return Computed::default(),
        _ if v.is_multiple_of(2) => format!("x-{}", key.name),
        _ => key.name[..1].to_owned(),
    };
    let desired = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"namespace": "apps", "name": name},
                         "data": {"v": v, "from": key.origin}});
    Computed {
        result: Some(Ok((
            target(&name),
            Candidate {
                rule: rule.into(),
                key: key.clone().into(),
                created: obj["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
                digest: crate::sync::digest::Digest::of_desired(&desired),
                desired: crate::sync::model::Packed::new(&desired),
                with_status: false,
                update: UpdatePolicy::Update,
                create_namespace: false,
                published: chrono::DateTime::default(),
            },
        ))),
        unknown_policy: v == 2,
        refused: None,
    }
}

/// Sets every rule's pair of `key` from the envelope there (or its absence).
fn plan_key(
    plan: &mut Plan,
    world: &BTreeMap<ObjectKey, Envelope>,
    key: &ObjectKey,
    changed: &mut BTreeSet<Target>,
) -> usize {
    let mut calls = 0;
    for rule in RULES {
        let env = world.get(key);
        let pair = (rule.to_owned(), key.clone());
        plan.set(
            &pair,
            env,
            || compute(rule, key, env.unwrap(), &mut calls),
            changed,
        );
    }
    calls
}

/// A decision from the candidates alone (the sink's would read the live
/// copy): the winner is in sync unless its copy's version is 1 (an error);
/// every loser is a conflict.
fn decide(plan: &mut Plan, t: &Target) {
    let mut cands = plan.candidates(t);
    if cands.is_empty() {
        plan.settle(t, None);
        return;
    }
    conflicts::order(&mut cands);
    let winner = cands.remove(0);
    let failing = winner.desired.value().unwrap()["data"]["v"] == json!(1);
    let s = Settled {
        rule: winner.rule.clone(),
        synced: !failing,
        error: failing.then(|| "write refused".to_owned()),
        conflicts: cands
            .iter()
            .map(|l| Conflict::other_origin(t, l, &winner))
            .collect(),
        held: false,
    };
    plan.settle(t, Some(s));
}

/// What a plan says: per target its candidates in order (rule, source,
/// digest) and its winner's decision, per rule its ledger.
type Shape = (
    BTreeMap<Target, Vec<(String, ObjectKey, crate::sync::digest::Digest)>>,
    BTreeMap<Target, (String, bool, Option<String>, usize)>,
    BTreeMap<String, Ledger>,
);

fn shape(plan: &Plan) -> Shape {
    let targets = plan
        .wanted()
        .map(|t| {
            let c = plan.candidates(t);
            (
                t.clone(),
                c.into_iter()
                    .map(|c| (c.rule, ObjectKey::clone(&c.key), c.digest))
                    .collect(),
            )
        })
        .collect();
    let settled = plan
        .settled
        .iter()
        .map(|(t, s)| {
            let v = (s.rule.clone(), s.synced, s.error.clone(), s.conflicts.len());
            (t.clone(), v)
        })
        .collect();
    (targets, settled, plan.ledgers.clone())
}

/// The plan made from scratch over `world`, every target decided.
fn full(world: &BTreeMap<ObjectKey, Envelope>) -> Plan {
    let mut plan = Plan::default();
    let mut changed = BTreeSet::new();
    for key in world.keys() {
        plan_key(&mut plan, world, key, &mut changed);
    }
    for t in plan.every_target() {
        decide(&mut plan, &t);
    }
    plan
}

#[derive(Debug, Clone)]
enum Change {
    /// An envelope arrives (or changes) at version v.
    Put(usize, usize, u8),
    /// The envelope goes (a tombstone, or a deleted subject).
    Drop(usize, usize),
}

const ORIGINS: [&str; 2] = ["c2", "c3"];
const NAMES: [&str; 4] = ["a1", "a2", "b1", "b2"];

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => (0..ORIGINS.len(), 0..NAMES.len(), 0u8..5).prop_map(|(o, n, v)| Change::Put(o, n, v)),
        1 => (0..ORIGINS.len(), 0..NAMES.len()).prop_map(|(o, n)| Change::Drop(o, n)),
    ]
}

proptest! {
    #[test]
    fn the_plan_kept_from_changes_equals_the_full_plan(
        changes in proptest::collection::vec(change(), 1..60)
    ) {
        let mut world: BTreeMap<ObjectKey, Envelope> = BTreeMap::new();
        let mut plan = Plan::default();
        for (step, c) in changes.iter().enumerate() {
            let before = shape(&full(&world));
            let k = match *c {
                Change::Put(o, n, v) => {
                    let k = key(ORIGINS[o], NAMES[n]);
                    world.insert(k.clone(), env(ORIGINS[o], NAMES[n], v));
                    k
                }
                Change::Drop(o, n) => {
                    let k = key(ORIGINS[o], NAMES[n]);
                    world.remove(&k);
                    k
                }
            };
            // Only the changed key is planned, only the targets it touched decided.
            let mut changed = BTreeSet::new();
            plan_key(&mut plan, &world, &k, &mut changed);
            for t in &changed {
                decide(&mut plan, t);
            }
            let reference = full(&world);
            let after = shape(&reference);
            prop_assert_eq!(shape(&plan), after.clone(), "step {} {:?}", step, c);
            // Every target whose candidates changed was reported.
            let moved: BTreeSet<&Target> = before.0.iter()
                .filter(|(t, c)| after.0.get(*t) != Some(*c))
                .map(|(t, _)| t)
                .chain(after.0.keys().filter(|t| !before.0.contains_key(*t)))
                .collect();
            for t in moved {
                prop_assert!(changed.contains(t), "step {} {:?}: {} not reported", step, c, t);
            }
            prop_assert_eq!(plan.synced(), reference.synced());
        }
    }
}

#[test]
fn an_envelope_version_is_computed_once() {
    let world = BTreeMap::from([(key("c2", "a1"), env("c2", "a1", 0))]);
    let mut plan = Plan::default();
    let mut changed = BTreeSet::new();
    assert_eq!(
        plan_key(&mut plan, &world, &key("c2", "a1"), &mut changed),
        2
    );
    assert_eq!(changed, BTreeSet::from([target("a1"), target("x-a1")]));
    // The same version again: a lookup, nothing changed.
    let mut changed = BTreeSet::new();
    assert_eq!(
        plan_key(&mut plan, &world, &key("c2", "a1"), &mut changed),
        0
    );
    assert!(changed.is_empty());
    // A new version: computed again; r2's copy moves from x-a1 to a.
    let world = BTreeMap::from([(key("c2", "a1"), env("c2", "a1", 1))]);
    assert_eq!(
        plan_key(&mut plan, &world, &key("c2", "a1"), &mut changed),
        2
    );
    assert_eq!(
        changed,
        BTreeSet::from([target("a"), target("a1"), target("x-a1")])
    );
    assert!(!plan.wants(&target("x-a1")));
    // After `clear` (rules or fleet changed), everything is computed again.
    plan.clear();
    assert_eq!(
        plan_key(&mut plan, &world, &key("c2", "a1"), &mut changed),
        2
    );
}

/// One `Target` and one pair per copy, shared by every map that keeps them
/// (docs/design/memory.md): the place the local watch names, a target computed again
/// after its decision, and the pair a pass holds are the plan's own.
#[test]
fn a_copys_target_and_pair_are_the_plans_own() {
    let k = key("c2", "a1");
    let world = BTreeMap::from([(k.clone(), env("c2", "a1", 0))]);
    let mut plan = Plan::default();
    let mut changed = BTreeSet::new();
    plan_key(&mut plan, &world, &k, &mut changed);
    let own = plan.wanted().find(|t| **t == target("a1")).unwrap().clone();
    // As the local watch names it: a new allocation, equal.
    let seen = target("a1");
    assert!(!Target::same(&seen, &own));
    assert!(Target::same(&plan.shared(seen), &own));
    // A place the plan does not know stays as it is.
    let other = target("elsewhere");
    assert!(Target::same(&plan.shared(other.clone()), &other));
    // Decided, then computed again from a new version (r1's pair is removed
    // from the index first): still the decided target.
    decide(&mut plan, &own);
    let world = BTreeMap::from([(k.clone(), env("c2", "a1", 5))]);
    plan_key(&mut plan, &world, &k, &mut changed);
    let again = plan.wanted().find(|t| **t == target("a1")).unwrap();
    assert!(Target::same(again, &own));
    // The pair held for the copy is the plan's; one it does not hold is new.
    let held = plan.pair(&own, "r1", &k);
    assert!(Arc::ptr_eq(&held, &plan.targets[&own][0]));
    let stranger = plan.pair(&own, "r9", &k);
    assert_eq!(*stranger, ("r9".to_owned(), k.clone()));
    assert!(!Arc::ptr_eq(&stranger, &plan.targets[&own][0]));
}

#[test]
fn a_version_changes_with_each_of_its_parts_and_only_with_them() {
    let base = env("c2", "a1", 0);
    let v = version_of(&base);
    assert_eq!(version_of(&base.clone()), v);
    let mut uid = base.clone();
    uid.uid.push('x');
    let mut hash = base.clone();
    hash.content_hash.push('x');
    let mut rv = base.clone();
    rv.resource_version.push('x');
    // The same characters split otherwise between the parts: another version.
    let mut moved = base.clone();
    moved.uid.push_str(&moved.content_hash);
    moved.content_hash = moved.resource_version.clone();
    moved.resource_version.clear();
    for other in [uid, hash, rv, moved] {
        assert_ne!(version_of(&other), v, "{other:?}");
    }
    // What the version leaves out (the publish time) does not change it.
    let mut later = base.clone();
    later.time += chrono::Duration::seconds(5);
    assert_eq!(version_of(&later), v);
}

#[test]
fn a_pair_error_and_an_unknown_policy_are_in_the_ledger_while_they_last() {
    let k = key("c2", "a1");
    let mut plan = Plan::default();
    let mut changed = BTreeSet::new();
    let at = |v| BTreeMap::from([(k.clone(), env("c2", "a1", v))]);
    plan_key(&mut plan, &at(3), &k, &mut changed);
    let l = plan.ledger_of("r1").unwrap();
    assert_eq!(
        l.pair_errors.get(&k).map(String::as_str),
        Some("cannot map version 3")
    );
    plan_key(&mut plan, &at(2), &k, &mut changed);
    let l = plan.ledger_of("r1").unwrap();
    assert!(l.pair_errors.is_empty(), "{l:?}");
    assert!(l.unknown.contains(&k));
    assert!(plan.ledger_of("r2").unwrap().unknown.contains(&k));
    plan_key(
        &mut plan,
        &BTreeMap::<ObjectKey, Envelope>::new(),
        &k,
        &mut changed,
    );
    assert!(plan.ledgers.is_empty());
    assert!(plan.wanted().next().is_none());
}

#[test]
fn a_refused_pair_wants_no_target_and_its_rule_says_why_until_it_changes() {
    let mut plan = Plan::default();
    let mut changed = BTreeSet::new();
    let k = key("c2", "a");
    let pair = ("r1".to_owned(), k.clone());
    let why = crate::sync::policy::Refusal {
        direction: crate::sync::policy::Direction::Import,
        what: "ConfigMap in apps".into(),
        by: "SyncPolicy default (import.otherwise)".into(),
    };
    let refused = || Computed {
        result: None,
        unknown_policy: false,
        refused: Some(Box::new(why.clone())),
    };
    plan.set(&pair, Some(&env("c2", "a", 1)), refused, &mut changed);
    assert!(!plan.wants(&target("a")));
    let mut report = RuleReport::default();
    SinkState {
        plan,
        ..SinkState::default()
    }
    .fill("r1", &mut report);
    assert_eq!(report.refused.len(), 1, "{report:?}");
    assert_eq!(report.refused["ConfigMap apps/a"], why);
    // Allowed again (a new computation): wanted, the refusal forgotten.
    let mut plan = Plan::default();
    plan.set(&pair, Some(&env("c2", "a", 1)), refused, &mut changed);
    let mut calls = 0;
    let e = env("c2", "a", 2);
    plan.set(
        &pair,
        Some(&e),
        || compute("r1", &k, &e, &mut calls),
        &mut changed,
    );
    assert!(plan.wants(&target("a")));
    assert!(plan.ledger_of("r1").is_none_or(|l| l.refused.is_empty()));
}
