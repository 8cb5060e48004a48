#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};
use fleetbus_schemas::crd::{
    Capacity, ClusterTaint, Divide, Failback, Failover, Placement, PlacementMode, Preference,
    Purge, ReplicaDivision, SpreadConstraint, TaintEffect, Toleration, TolerationOperator,
};
use fleetbus_schemas::placement::{PlacementRecord, Role};
use fleetbus_schemas::registry::TimedTaint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::{decide, Candidate, Health, Inputs, RELEASE_STEP};

fn cluster(name: &str, region: &str) -> Candidate {
    Candidate {
        name: name.into(),
        labels: BTreeMap::from([("region".to_owned(), region.to_owned())]),
        taints: Vec::new(),
        health: Health::Ready,
        capacity: (None, None),
    }
}

fn five() -> Vec<Candidate> {
    vec![
        cluster("a", "eu"),
        cluster("b", "eu"),
        cluster("c", "us"),
        cluster("d", "us"),
        cluster("e", "ap"),
    ]
}

fn two_spread() -> Placement {
    Placement {
        clusters: Some(IntOrString::Int(2)),
        spread: vec![SpreadConstraint {
            topology_key: "region".into(),
            max_skew: 1,
        }],
        ..Placement::default()
    }
}

fn input(seed: &str, candidates: Vec<Candidate>) -> Inputs {
    Inputs {
        rule: "r".into(),
        seed: seed.into(),
        candidates: candidates.into(),
        ..Inputs::default()
    }
}

fn chosen(rec: &PlacementRecord) -> Vec<&str> {
    rec.chosen_names().collect()
}

fn region_of(name: &str) -> &'static str {
    match name {
        "a" | "b" => "eu",
        "c" | "d" => "us",
        _ => "ap",
    }
}

#[test]
fn two_of_five_in_two_regions_and_objects_spread_evenly() {
    let now = Utc::now();
    let mut per_cluster: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..20 {
        let d = decide(
            None,
            &two_spread(),
            &input(&format!("obj-{i}"), five()),
            now,
        );
        let names = chosen(&d.record);
        assert_eq!(names.len(), 2, "{names:?}");
        assert_ne!(region_of(names[0]), region_of(names[1]), "{names:?}");
        assert!(d.record.degraded.is_none());
        for n in names {
            *per_cluster.entry(n.to_owned()).or_default() += 1;
        }
    }
    // 40 copies over 5 clusters: a share of 8; none holds more than twice it.
    assert!(per_cluster.values().all(|n| *n <= 16), "{per_cluster:?}");
    assert_eq!(per_cluster.values().sum::<usize>(), 40);
    assert!(per_cluster.len() >= 4, "{per_cluster:?}");
}

#[test]
fn a_preference_moves_the_choice_and_ties_are_the_same_everywhere() {
    let now = Utc::now();
    let mut cands = five();
    cands[4].labels.insert("tier".into(), "gold".into());
    let spec = Placement {
        prefer: vec![Preference {
            weight: 50,
            cluster_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("tier".into(), "gold".into())])),
                ..LabelSelector::default()
            }),
            capacity: None,
        }],
        ..two_spread()
    };
    for i in 0..10 {
        let d = decide(None, &spec, &input(&format!("o{i}"), cands.clone()), now);
        assert!(chosen(&d.record).contains(&"e"), "{:?}", d.record.chosen);
        // Another agent deciding from the same inputs decides the same.
        let again = decide(None, &spec, &input(&format!("o{i}"), cands.clone()), now);
        assert_eq!(again.record, d.record);
    }
}

#[test]
fn more_allocatable_cpu_wins_and_a_cluster_that_reports_none_scores_nothing() {
    let now = Utc::now();
    let mut cands = five();
    // a: 4 cores, c: 64 cores, the others report nothing (older agents).
    cands[0].capacity = (Some(4_000.0), None);
    cands[2].capacity = (Some(64_000.0), None);
    let spec = Placement {
        clusters: Some(IntOrString::Int(1)),
        prefer: vec![Preference {
            weight: 20,
            cluster_selector: None,
            capacity: Some(Capacity::Cpu),
        }],
        ..Placement::default()
    };
    for i in 0..10 {
        let d = decide(None, &spec, &input(&format!("o{i}"), cands.clone()), now);
        assert_eq!(chosen(&d.record), vec!["c"], "{:?}", d.record.chosen);
    }
    // Memory is scored apart: with no memory reported, cpu does not count.
    let by_memory = Placement {
        prefer: vec![Preference {
            capacity: Some(Capacity::Memory),
            ..spec.prefer[0].clone()
        }],
        ..spec.clone()
    };
    let picks: BTreeSet<String> = (0..20)
        .map(|i| {
            decide(
                None,
                &by_memory,
                &input(&format!("o{i}"), cands.clone()),
                now,
            )
        })
        .flat_map(|d| {
            d.record
                .chosen_names()
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        picks.len() > 1,
        "no memory reported: the hash spreads, {picks:?}"
    );
}

#[test]
fn a_restart_with_the_same_fleet_changes_nothing_in_steady_mode() {
    let now = Utc::now();
    let first = decide(None, &two_spread(), &input("x", five()), now);
    let again = decide(
        Some(&first.record),
        &two_spread(),
        &input("x", five()),
        now + Duration::seconds(60),
    );
    assert!(!again.changed, "{:?}", again.record);
    // A cluster joining does not move a Steady choice; Rebalance may.
    let mut more = five();
    let mut gold = cluster("f", "ap");
    gold.labels.insert("tier".into(), "gold".into());
    more.push(gold);
    let prefer_gold = |mode| Placement {
        mode,
        prefer: vec![Preference {
            weight: 10,
            cluster_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("tier".into(), "gold".into())])),
                ..LabelSelector::default()
            }),
            capacity: None,
        }],
        ..two_spread()
    };
    let steady = decide(
        Some(&first.record),
        &prefer_gold(PlacementMode::Steady),
        &input("x", more.clone()),
        now,
    );
    assert_eq!(chosen(&steady.record), chosen(&first.record));
    let rebalanced = decide(
        Some(&first.record),
        &prefer_gold(PlacementMode::Rebalance),
        &input("x", more),
        now,
    );
    assert!(chosen(&rebalanced.record).contains(&"f"));
}

fn taint(key: &str, effect: TaintEffect, at: DateTime<Utc>) -> TimedTaint {
    TimedTaint {
        taint: ClusterTaint {
            key: key.into(),
            value: String::new(),
            effect,
        },
        added_at: at,
    }
}

#[test]
fn no_schedule_keeps_new_copies_off_and_existing_ones_on() {
    let now = Utc::now();
    let spec = Placement {
        clusters: Some(IntOrString::Int(4)),
        ..Placement::default()
    };
    let first = decide(None, &spec, &input("x", five()), now);
    let holder = first.record.chosen[0].cluster.clone();
    let mut cands = five();
    for c in cands.iter_mut().filter(|c| c.name == holder) {
        c.taints
            .push(taint("maintenance", TaintEffect::NoSchedule, now));
    }
    let later = decide(Some(&first.record), &spec, &input("x", cands.clone()), now);
    assert!(
        chosen(&later.record).contains(&holder.as_str()),
        "existing stays"
    );
    let fresh = decide(None, &spec, &input("y", cands), now);
    assert!(!chosen(&fresh.record).contains(&holder.as_str()));
    let passed = fresh
        .record
        .passed
        .iter()
        .find(|p| p.cluster == holder)
        .unwrap();
    assert!(
        passed.reason.contains("maintenance:NoSchedule"),
        "{passed:?}"
    );
}

#[test]
fn no_execute_moves_copies_after_the_window_unless_tolerated() {
    let t0 = Utc::now();
    let spec = |tolerate: bool| Placement {
        clusters: Some(IntOrString::Int(1)),
        tolerations: if tolerate {
            vec![Toleration {
                key: "drain".into(),
                operator: TolerationOperator::Exists,
                ..Toleration::default()
            }]
        } else {
            Vec::new()
        },
        failover: Failover {
            after_seconds: 30,
            purge: Purge::Immediately,
            ..Failover::default()
        },
        ..Placement::default()
    };
    let first = decide(None, &spec(false), &input("x", five()), t0);
    let holder = first.record.chosen[0].cluster.clone();
    let mut cands = five();
    for c in cands.iter_mut().filter(|c| c.name == holder) {
        c.taints.push(taint("drain", TaintEffect::NoExecute, t0));
    }
    let within = decide(
        Some(&first.record),
        &spec(false),
        &input("x", cands.clone()),
        t0 + Duration::seconds(10),
    );
    assert_eq!(chosen(&within.record), vec![holder.as_str()]);
    assert_eq!(within.wake, Some(t0 + Duration::seconds(30)));
    let after = decide(
        Some(&within.record),
        &spec(false),
        &input("x", cands.clone()),
        t0 + Duration::seconds(31),
    );
    assert_ne!(chosen(&after.record), vec![holder.as_str()]);
    assert_eq!(after.record.role(&holder), Role::Out, "purge Immediately");
    let tolerated = decide(
        Some(&first.record),
        &spec(true),
        &input("x", cands),
        t0 + Duration::seconds(300),
    );
    assert_eq!(chosen(&tolerated.record), vec![holder.as_str()]);
}

fn down(mut c: Candidate, since: DateTime<Utc>) -> Candidate {
    c.health = Health::Failing {
        since,
        state: "Disconnected",
    };
    c
}

#[test]
fn a_failed_cluster_is_replaced_drained_graciously_and_failback_follows_the_spec() {
    let t0 = Utc::now();
    let spec = |failback| Placement {
        failover: Failover {
            after_seconds: 30,
            failback,
            purge: Purge::Graciously,
        },
        ..two_spread()
    };
    let first = decide(None, &spec(Failback::Never), &input("x", five()), t0);
    let dead = first.record.chosen[0].cluster.clone();
    let other = first.record.chosen[1].cluster.clone();
    let with_dead = || {
        five()
            .into_iter()
            .map(|c| if c.name == dead { down(c, t0) } else { c })
            .collect::<Vec<_>>()
    };
    let early = decide(
        Some(&first.record),
        &spec(Failback::Never),
        &input("x", with_dead()),
        t0 + Duration::seconds(29),
    );
    assert!(
        chosen(&early.record).contains(&dead.as_str()),
        "not replaced within the window"
    );
    assert_eq!(early.record.failing.len(), 1);
    let t1 = t0 + Duration::seconds(30);
    let over = decide(
        Some(&early.record),
        &spec(Failback::Never),
        &input("x", with_dead()),
        t1,
    );
    let now_chosen = chosen(&over.record);
    assert!(!now_chosen.contains(&dead.as_str()));
    assert!(
        now_chosen.contains(&other.as_str()),
        "the healthy choice stays"
    );
    assert_eq!(now_chosen.len(), 2);
    let by = now_chosen
        .iter()
        .find(|n| **n != other)
        .unwrap()
        .to_string();
    assert_ne!(
        region_of(&by),
        region_of(&other),
        "the spread holds across the failover"
    );
    assert!(
        matches!(over.record.role(&dead), Role::Keep(_)),
        "graciously: kept until healthy"
    );
    assert_eq!(over.record.replaced, vec![(dead.clone(), by.clone())]);
    // The replacement is healthy: the dead cluster's copy is released.
    let healthy = Inputs {
        healthy: BTreeSet::from([other.clone(), by.clone()]),
        ..input("x", with_dead())
    };
    let drained = decide(
        Some(&over.record),
        &spec(Failback::Never),
        &healthy,
        t1 + RELEASE_STEP,
    );
    assert_eq!(drained.record.role(&dead), Role::Out);
    // The cluster returns: Never keeps the new choice, Immediate moves back.
    let back = Inputs {
        healthy: BTreeSet::from([other.clone(), by.clone()]),
        ..input("x", five())
    };
    let never = decide(
        Some(&drained.record),
        &spec(Failback::Never),
        &back,
        t1 + Duration::seconds(60),
    );
    assert!(!chosen(&never.record).contains(&dead.as_str()));
    assert!(
        never.record.replaced.is_empty(),
        "a returned cluster is no longer waited for"
    );
    let immediate = decide(
        Some(&drained.record),
        &spec(Failback::Immediate),
        &back,
        t1 + Duration::seconds(60),
    );
    assert!(chosen(&immediate.record).contains(&dead.as_str()));
    assert!(!chosen(&immediate.record).contains(&by.as_str()));
    assert!(matches!(immediate.record.role(&by), Role::Keep(_)));
}

#[test]
fn purge_never_keeps_the_old_copy_for_good() {
    let t0 = Utc::now();
    let spec = Placement {
        clusters: Some(IntOrString::Int(1)),
        failover: Failover {
            after_seconds: 0,
            purge: Purge::Never,
            ..Failover::default()
        },
        ..Placement::default()
    };
    let first = decide(None, &spec, &input("x", five()), t0);
    let dead = first.record.chosen[0].cluster.clone();
    let cands: Vec<Candidate> = five()
        .into_iter()
        .map(|c| if c.name == dead { down(c, t0) } else { c })
        .collect();
    let all = five().iter().map(|c| c.name.clone()).collect();
    let over = decide(
        Some(&first.record),
        &spec,
        &Inputs {
            healthy: all,
            ..input("x", cands)
        },
        t0 + Duration::seconds(100),
    );
    assert!(matches!(over.record.role(&dead), Role::Keep(w) if w.contains("Never")));
}

#[test]
fn weighted_replicas_divide_by_score_and_sum_again_after_a_failover() {
    let t0 = Utc::now();
    let weight = |w: i32, name: &str| Preference {
        weight: w,
        cluster_selector: Some(LabelSelector {
            match_labels: Some(BTreeMap::from([("name".into(), name.into())])),
            ..LabelSelector::default()
        }),
        capacity: None,
    };
    let spec = Placement {
        clusters: Some(IntOrString::Int(3)),
        prefer: vec![weight(50, "a"), weight(30, "b"), weight(20, "c")],
        replicas: Some(ReplicaDivision {
            path: "/spec/replicas".into(),
            divide: Divide::Weighted,
        }),
        failover: Failover {
            after_seconds: 0,
            ..Failover::default()
        },
        ..Placement::default()
    };
    let named = |c: Candidate| {
        let mut c = c;
        c.labels.insert("name".into(), c.name.clone());
        c
    };
    let cands: Vec<Candidate> = five().into_iter().take(4).map(named).collect();
    let inp = Inputs {
        replicas: Some(10),
        ..input("x", cands.clone())
    };
    let d = decide(None, &spec, &inp, t0);
    let shares: Vec<(&str, Option<i64>)> = d
        .record
        .chosen
        .iter()
        .map(|c| (c.cluster.as_str(), c.replicas))
        .collect();
    assert_eq!(shares, vec![("a", Some(5)), ("b", Some(3)), ("c", Some(2))]);
    let failed = Inputs {
        replicas: Some(10),
        ..input(
            "x",
            cands
                .into_iter()
                .map(|c| if c.name == "a" { down(c, t0) } else { c })
                .collect(),
        )
    };
    let over = decide(Some(&d.record), &spec, &failed, t0 + Duration::seconds(1));
    let sum: i64 = over.record.chosen.iter().filter_map(|c| c.replicas).sum();
    assert_eq!(sum, 10, "{:?}", over.record.chosen);
    assert!(!chosen(&over.record).contains(&"a"));
}

#[test]
fn what_the_fleet_cannot_satisfy_is_placed_best_effort_and_said() {
    let now = Utc::now();
    let spec = Placement {
        clusters: Some(IntOrString::Int(3)),
        ..Placement::default()
    };
    let cands = vec![cluster("a", "eu"), down(cluster("b", "eu"), now)];
    let d = decide(None, &spec, &input("x", cands), now);
    assert_eq!(chosen(&d.record), vec!["a"]);
    assert!(
        d.record.degraded.as_deref().unwrap().contains("1 of 2"),
        "{:?}",
        d.record.degraded
    );
    let nokey = Placement {
        spread: vec![SpreadConstraint {
            topology_key: "zone".into(),
            max_skew: 1,
        }],
        ..two_spread()
    };
    let d = decide(None, &nokey, &input("x", five()), now);
    assert_eq!(chosen(&d.record).len(), 2, "best effort");
    assert!(d.record.degraded.unwrap().contains("zone"));
}

#[test]
fn turning_placement_on_releases_the_other_copies_one_step_at_a_time() {
    let t0 = Utc::now();
    let spec = Placement {
        clusters: Some(IntOrString::Int(1)),
        ..Placement::default()
    };
    let all: BTreeSet<String> = five().iter().map(|c| c.name.clone()).collect();
    let inp = Inputs {
        reporting: all.clone(),
        healthy: all,
        ..input("x", five())
    };
    let mut rec = decide(None, &spec, &inp, t0).record;
    let outs = |r: &PlacementRecord| {
        five()
            .iter()
            .filter(|c| r.role(&c.name) == Role::Out)
            .count()
    };
    // The first decision released one at most; the others keep theirs.
    assert!(outs(&rec) <= 1, "{rec:?}");
    let mut t = t0;
    for step in 0..4 {
        let before = outs(&rec);
        let same_time = decide(Some(&rec), &spec, &inp, t).record;
        assert_eq!(
            outs(&same_time),
            before,
            "step {step}: not before RELEASE_STEP"
        );
        t += RELEASE_STEP;
        rec = decide(Some(&rec), &spec, &inp, t).record;
        assert!(outs(&rec) <= before + 1, "step {step}");
    }
    assert_eq!(outs(&rec), 4);
}

/// The ranking reads tie-breaks lazily (`Ranked`); its order must be the
/// full sort's: score first, then the lower SHA-256 of (unit, cluster).
/// Two gold clusters in one region and 60 standard ones over two: the
/// first pick is the gold with the lower hash; the spread refuses the
/// other gold, so the second is read from the standard run, the lowest
/// hash among the other region's. The passed list is the first 50 by
/// name, whatever the order the candidates came in.
#[test]
fn the_lazy_ranking_picks_what_the_full_sort_picks() {
    let now = Utc::now();
    let mut cands = vec![cluster("g1", "eu"), cluster("g2", "eu")];
    for c in &mut cands {
        c.labels.insert("tier".into(), "gold".into());
    }
    for i in 0..60 {
        let region = if i % 2 == 0 { "eu" } else { "us" };
        cands.push(cluster(&format!("s{i:02}"), region));
    }
    // Not in name order: the index by name must not rely on it.
    cands.reverse();
    let spec = Placement {
        prefer: vec![Preference {
            weight: 50,
            cluster_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([("tier".into(), "gold".into())])),
                ..LabelSelector::default()
            }),
            capacity: None,
        }],
        ..two_spread()
    };
    for i in 0..20 {
        let seed = format!("obj-{i}");
        let d = decide(None, &spec, &input(&seed, cands.clone()), now);
        let lowest = |names: &mut dyn Iterator<Item = String>| {
            names.min_by_key(|n| super::tie(&seed, n)).unwrap()
        };
        let gold = lowest(&mut ["g1", "g2"].into_iter().map(str::to_owned));
        let us = lowest(&mut (0..60).filter(|i| i % 2 == 1).map(|i| format!("s{i:02}")));
        let mut want = vec![gold.clone(), us];
        want.sort();
        assert_eq!(chosen(&d.record), want, "{seed}");
        assert!(d.record.degraded.is_none(), "{:?}", d.record.degraded);
        let passed: Vec<&str> = d.record.passed.iter().map(|p| p.cluster.as_str()).collect();
        let mut all: Vec<&str> = cands
            .iter()
            .map(|c| c.name.as_str())
            .filter(|n| !want.iter().any(|w| w == n))
            .collect();
        all.sort_unstable();
        all.truncate(50);
        assert_eq!(passed, all, "{seed}");
    }
}

#[test]
fn a_cluster_that_cannot_hold_the_copy_is_never_chosen_and_a_chosen_one_is_replaced_at_once() {
    let now = Utc::now();
    let spec = Placement {
        clusters: Some(IntOrString::Int(2)),
        // A failover window longer than the test: a refusal must not wait for it.
        failover: Failover {
            after_seconds: 3600,
            ..Failover::default()
        },
        ..Placement::default()
    };
    let first = decide(None, &spec, &input("o", five()), now);
    let was = chosen(&first.record);
    let refuser = was[0].to_owned();
    let why = "cannot hold the copy: SyncPolicy default refuses namespace shop";
    let mut inp = input("o", five());
    std::sync::Arc::make_mut(&mut inp.refused).insert(refuser.clone(), why.to_owned());
    // The cluster also still reports the copy healthy (it held one before
    // its policy changed): what it says it cannot hold decides.
    inp.healthy = was.iter().map(|s| (*s).to_owned()).collect();
    inp.reporting = inp.healthy.clone();
    let next = decide(Some(&first.record), &spec, &inp, now);
    let names = chosen(&next.record);
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(!names.contains(&refuser.as_str()), "{names:?}");
    assert!(names.contains(&was[1]), "the other choice stays (Steady)");
    assert!(next.record.replaced.is_empty(), "a refusal is no failover");
    let passed = next
        .record
        .passed
        .iter()
        .find(|p| p.cluster == refuser)
        .unwrap();
    assert!(passed.reason.starts_with(why), "{}", passed.reason);
    // Rebalance decides again from scratch each pass: still never chosen.
    let rebalance = Placement {
        mode: PlacementMode::Rebalance,
        ..spec.clone()
    };
    for i in 0..20 {
        let mut inp = input(&format!("o{i}"), five());
        std::sync::Arc::make_mut(&mut inp.refused).insert("a".into(), why.to_owned());
        std::sync::Arc::make_mut(&mut inp.refused).insert("c".into(), why.to_owned());
        let d = decide(None, &rebalance, &inp, now);
        let names = chosen(&d.record);
        assert_eq!(names.len(), 2);
        assert!(!names.contains(&"a") && !names.contains(&"c"), "{names:?}");
    }
    // Every candidate refusing: nothing chosen, and the record says why.
    let mut all = input("o", five());
    for c in ["a", "b", "c", "d", "e"] {
        std::sync::Arc::make_mut(&mut all.refused).insert(c.into(), why.to_owned());
    }
    let none = decide(None, &spec, &all, now);
    assert!(none.record.chosen.is_empty());
    assert!(none
        .record
        .degraded
        .as_deref()
        .is_some_and(|d| d.starts_with("0 of 2 clusters can hold a copy")));
}

/// The origin spreads a rule's releases over steps (`release_from`): a
/// unit that may release by its own step waits for it, and says when.
#[test]
fn a_release_waits_for_the_rules_step_and_wakes_then() {
    let t0 = Utc::now();
    let spec = Placement {
        clusters: Some(IntOrString::Int(1)),
        ..Placement::default()
    };
    let all: BTreeSet<String> = five().iter().map(|c| c.name.clone()).collect();
    let later = t0 + Duration::seconds(3);
    let held = Inputs {
        reporting: all.clone(),
        healthy: all.clone(),
        release_from: Some(later),
        ..input("x", five())
    };
    let d = decide(None, &spec, &held, t0);
    assert_eq!(d.record.draining.len(), 4, "nothing released yet");
    assert!(d.record.last_release.is_none());
    assert_eq!(d.wake, Some(later));
    let then = decide(Some(&d.record), &spec, &held, later);
    assert_eq!(then.record.draining.len(), 3, "released once the step came");
    assert!(then.record.last_release.is_some());
}

/// Copies draining while the chosen ones are not healthy yet wait for the
/// reports, not for time: no wake-up (one at "now" was a busy loop).
#[test]
fn draining_behind_unhealthy_choices_asks_for_no_wake_up() {
    let t0 = Utc::now();
    let spec = Placement {
        clusters: Some(IntOrString::Int(1)),
        ..Placement::default()
    };
    let all: BTreeSet<String> = five().iter().map(|c| c.name.clone()).collect();
    let inp = Inputs {
        reporting: all,
        ..input("x", five())
    };
    let d = decide(None, &spec, &inp, t0);
    assert_eq!(d.record.draining.len(), 4);
    assert_eq!(d.wake, None, "{:?}", d.wake);
    let again = decide(Some(&d.record), &spec, &inp, t0 + Duration::seconds(1));
    assert_eq!(again.wake, None);
}
