//! One table of cases per rule of PROTOCOL §6.9 ("How the origin decides"),
//! and the commands.

use super::*;
use fleetbus_schemas::crd::RolloutGroup;
use fleetbus_schemas::time::parse_rfc3339;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

fn h(c: char) -> String {
    c.to_string().repeat(64)
}

fn t0() -> DateTime<Utc> {
    parse_rfc3339("2026-11-27T05:00:00.000Z").unwrap()
}

fn at(secs: i64) -> DateTime<Utc> {
    t0() + Duration::seconds(secs)
}

fn spec() -> Rollout {
    Rollout {
        min_ready_seconds: 3,
        progress_deadline_seconds: 60,
        ..Rollout::default()
    }
}

/// Clusters c1..cn in the implicit group, connected.
fn inputs(n: usize, current: Option<char>) -> Inputs {
    Inputs {
        origin: "hub".into(),
        rule: "web".into(),
        source: ObjectRef {
            uid: Some("u-1".into()),
            ..ObjectRef::new("apps/v1", "Deployment", Some("apps"), "web")
        },
        current: current.map(h),
        clusters: (1..=n)
            .map(|i| Cluster {
                name: format!("c{i}"),
                group: 0,
                connected: true,
            })
            .collect(),
        reports: BTreeMap::new(),
    }
}

/// `cluster` reports version `v` with `health`, Current since `since`.
fn report(input: &mut Inputs, cluster: &str, v: char, health: HealthStatus, since: Option<i64>) {
    input.reports.insert(
        cluster.into(),
        Report {
            hash: Some(h(v)),
            health,
            message: format!("{health} message"),
            current_since: since.map(at),
        },
    );
}

fn healthy(input: &mut Inputs, cluster: &str, v: char, since: i64) {
    report(input, cluster, v, HealthStatus::Current, Some(since));
}

/// A record where `stable` is A, target B, and `admitted` lists these at t0.
fn rolling(admitted: &[&str]) -> RolloutRecord {
    let mut rec = super::first(&inputs(0, Some('b')), &h('b'), t0());
    rec.stable = Some(h('a'));
    rec.revision = 2;
    for c in admitted {
        rec.admitted.entry(h('b')).or_default().insert((*c).into());
        rec.admitted_at.insert((*c).into(), t0());
    }
    rec
}

fn complete(v: char) -> RolloutRecord {
    let mut rec = super::first(&inputs(0, Some(v)), &h(v), t0());
    rec.stable = Some(h(v));
    rec.phase = RolloutPhase::Complete;
    rec
}

fn on_b(rec: &RolloutRecord) -> Vec<&str> {
    rec.admitted
        .get(&h('b'))
        .map(|s| s.iter().map(String::as_str).collect())
        .unwrap_or_default()
}

#[test]
fn no_record_starts_with_nothing_stable_and_admits_the_first() {
    let d = decide(None, &spec(), &inputs(3, Some('b')), t0());
    assert!(d.changed);
    let r = &d.record;
    assert_eq!(
        (r.stable.as_deref(), r.target.clone()),
        (None, Some(h('b')))
    );
    assert_eq!((r.phase, r.revision), (RolloutPhase::Progressing, 1));
    assert_eq!(on_b(r), ["c1"]);
    assert_eq!(r.version_of("c2"), None, "c2 gets no copy yet");
    assert_eq!(r.updated_at, t0());
    // Its deadline is the next clock.
    assert_eq!(d.wake, Some(at(60)));
}

#[test]
fn copies_already_at_the_newest_version_are_adopted_and_never_rewritten() {
    // A rule given a rollout over copies that already run the source.
    let mut input = inputs(2, Some('b'));
    healthy(&mut input, "c1", 'b', 0);
    healthy(&mut input, "c2", 'b', 0);
    let d = decide(None, &spec(), &input, at(1));
    // Not yet Current for minReadySeconds: c1 is admitted (it already runs
    // it), c2 waits its turn, and wakes at minReadySeconds.
    assert_eq!(on_b(&d.record), ["c1"]);
    assert_eq!(d.wake, Some(at(3)));
    let d = decide(Some(&d.record), &spec(), &input, at(3));
    assert_eq!(d.record.phase, RolloutPhase::Complete);
    assert_eq!(d.record.stable, Some(h('b')));
    assert!(d.record.admitted.is_empty());
}

#[test]
fn a_new_version_starts_a_new_revision_from_the_first_cluster() {
    let d = decide(Some(&complete('a')), &spec(), &inputs(3, Some('b')), at(10));
    let r = &d.record;
    assert_eq!((r.revision, r.phase), (2, RolloutPhase::Progressing));
    assert_eq!(
        (r.stable.clone(), r.target.clone()),
        (Some(h('a')), Some(h('b')))
    );
    assert_eq!(on_b(r), ["c1"]);
    assert_eq!(r.version_of("c2"), Some(h('a').as_str()));
    // Lifts a failure pause, and the failures of the old target...
    let mut failed = rolling(&["c1"]);
    failed.phase = RolloutPhase::Paused;
    failed.paused_by = Some(PausedBy::Failure);
    failed.failed.insert("c1".into(), "c1: Failed".into());
    let d = decide(Some(&failed), &spec(), &inputs(3, Some('c')), at(10));
    assert_eq!(
        (d.record.phase, d.record.paused_by),
        (RolloutPhase::Progressing, None)
    );
    assert!(d.record.failed.is_empty());
    assert_eq!(d.record.revision, 3);
    // ...c1 stays on b until admitted to c (it is: it is first in line).
    assert_eq!(d.record.version_of("c1"), Some(h('c').as_str()));
    // ...not an operator's pause.
    let mut paused = rolling(&["c1"]);
    paused.phase = RolloutPhase::Paused;
    paused.paused_by = Some(PausedBy::Operator);
    let d = decide(Some(&paused), &spec(), &inputs(3, Some('c')), at(10));
    assert_eq!(d.record.phase, RolloutPhase::Paused);
    assert_eq!(d.record.version_of("c1"), Some(h('b').as_str()));
    // Aborted and rolled back rollouts roll again.
    for phase in [RolloutPhase::Aborted, RolloutPhase::RolledBack] {
        let mut stopped = rolling(&[]);
        stopped.phase = phase;
        let d = decide(Some(&stopped), &spec(), &inputs(3, Some('c')), at(10));
        assert_eq!(d.record.phase, RolloutPhase::Progressing, "{phase}");
    }
}

#[test]
fn the_next_cluster_waits_for_min_ready_seconds() {
    let mut input = inputs(3, Some('b'));
    // c1 admitted at t0, Current at 5 s.
    healthy(&mut input, "c1", 'b', 5);
    let d = decide(Some(&rolling(&["c1"])), &spec(), &input, at(7));
    assert!(!d.changed, "2 s of 3: nothing moves");
    assert_eq!(d.wake, Some(at(8)));
    let d = decide(Some(&rolling(&["c1"])), &spec(), &input, at(8));
    assert!(d.changed);
    assert_eq!(on_b(&d.record), ["c1", "c2"]);
    assert_eq!(d.record.admitted_at["c2"], at(8));
    // Current at another version is not done.
    let mut input = inputs(3, Some('b'));
    healthy(&mut input, "c1", 'a', 0);
    assert!(!decide(Some(&rolling(&["c1"])), &spec(), &input, at(30)).changed);
}

#[test]
fn unavailable_clusters_use_the_budget() {
    let two = Rollout {
        max_unavailable: IntOrString::Int(2),
        ..spec()
    };
    // c3 is unhealthy on its own (not admitted): one admission left.
    let mut input = inputs(4, Some('b'));
    report(&mut input, "c3", 'a', HealthStatus::InProgress, None);
    let d = decide(Some(&rolling(&[])), &two, &input, t0());
    assert_eq!(on_b(&d.record), ["c1"]);
    // Admitted and not done count, connected or not.
    let mut input = inputs(4, Some('b'));
    input.clusters[0].connected = false;
    let d = decide(Some(&rolling(&["c1"])), &two, &input, t0());
    assert_eq!(on_b(&d.record), ["c1", "c2"]);
    // A percent of the selected clusters: 50% of 4.
    let half = Rollout {
        max_unavailable: IntOrString::String("50%".into()),
        ..spec()
    };
    let d = decide(Some(&rolling(&[])), &half, &inputs(4, Some('b')), t0());
    assert_eq!(on_b(&d.record), ["c1", "c2"]);
    // A disconnected cluster is not admitted, nor counted when not admitted.
    let mut input = inputs(3, Some('b'));
    input.clusters[0].connected = false;
    report(&mut input, "c1", 'a', HealthStatus::Failed, None);
    let d = decide(Some(&rolling(&[])), &spec(), &input, t0());
    assert_eq!(on_b(&d.record), ["c2"]);
}

fn grouped() -> Rollout {
    Rollout {
        groups: vec![RolloutGroup {
            name: "canary".into(),
            cluster_selector: LabelSelector::default(),
            max_unavailable: None,
        }],
        ..spec()
    }
}

#[test]
fn groups_roll_in_order() {
    // c3 is the canary (group 0); c1, c2 the rest (group 1).
    let mut input = inputs(3, Some('b'));
    input.clusters[0].group = 1;
    input.clusters[1].group = 1;
    let d = decide(Some(&rolling(&[])), &grouped(), &input, t0());
    assert_eq!(on_b(&d.record), ["c3"]);
    assert_eq!((d.record.step, d.record.steps), (0, 2));
    // A larger budget does not reach into the next group.
    let wide = Rollout {
        max_unavailable: IntOrString::Int(5),
        ..grouped()
    };
    let d = decide(Some(&rolling(&[])), &wide, &input, t0());
    assert_eq!(on_b(&d.record), ["c3"]);
    // Once the canary is done, the rest, with the group's own budget.
    healthy(&mut input, "c3", 'b', 0);
    let d = decide(Some(&rolling(&["c3"])), &wide, &input, at(3));
    assert_eq!(on_b(&d.record), ["c1", "c2", "c3"]);
    assert_eq!(d.record.step, 1);
    let mut own = wide.clone();
    own.max_unavailable = IntOrString::Int(1);
    own.groups[0].max_unavailable = Some(IntOrString::Int(5));
    let d = decide(Some(&rolling(&["c3"])), &own, &input, at(3));
    assert_eq!(
        on_b(&d.record),
        ["c1", "c3"],
        "the rest uses the rule's budget"
    );
}

#[test]
fn a_failed_copy_pauses_or_is_passed_over() {
    let mut input = inputs(3, Some('b'));
    report(&mut input, "c1", 'b', HealthStatus::Failed, None);
    let d = decide(Some(&rolling(&["c1"])), &spec(), &input, at(1));
    let r = &d.record;
    assert_eq!(
        (r.phase, r.paused_by),
        (RolloutPhase::Paused, Some(PausedBy::Failure))
    );
    assert_eq!(r.failed["c1"], "c1: Failed: Failed message");
    assert_eq!(r.reason, "Failed");
    assert!(r.message.contains("c1: Failed"), "{}", r.message);
    assert_eq!(on_b(r), ["c1"], "no more admissions");
    // Paused stays paused, with no put, however long.
    let again = decide(Some(r), &spec(), &input, at(100));
    assert!(!again.changed);
    // Continue: c1 no longer counts against the budget.
    let go_on = Rollout {
        on_failure: OnFailure::Continue,
        ..spec()
    };
    let d = decide(Some(&rolling(&["c1"])), &go_on, &input, at(1));
    assert_eq!(d.record.phase, RolloutPhase::Progressing);
    assert_eq!(on_b(&d.record), ["c1", "c2"]);
    assert!(d.record.failed.contains_key("c1"));
    // A failed copy that recovers is no longer failed.
    let mut recovered = input.clone();
    healthy(&mut recovered, "c1", 'b', 1);
    let d2 = decide(Some(&d.record), &go_on, &recovered, at(5));
    assert!(!d2.record.failed.contains_key("c1"));
}

#[test]
fn a_copy_not_healthy_by_the_deadline_has_failed() {
    let mut input = inputs(2, Some('b'));
    report(&mut input, "c1", 'b', HealthStatus::InProgress, None);
    let d = decide(Some(&rolling(&["c1"])), &spec(), &input, at(59));
    assert!(!d.changed);
    assert_eq!(d.wake, Some(at(60)));
    let d = decide(Some(&rolling(&["c1"])), &spec(), &input, at(60));
    assert_eq!(d.record.phase, RolloutPhase::Paused);
    assert_eq!(d.record.failed["c1"], "c1: not healthy within 60s");
    // Current at the target, its minReadySeconds restarted with the origin
    // past the deadline, is healthy, not late.
    let mut restarted = inputs(2, Some('b'));
    healthy(&mut restarted, "c1", 'b', 100);
    let d = decide(Some(&rolling(&["c1"])), &spec(), &restarted, at(101));
    assert!(!d.changed, "{:?}", d.record.failed);
    // A cluster that never reported at all fails the same way.
    let d = decide(
        Some(&rolling(&["c1"])),
        &spec(),
        &inputs(2, Some('b')),
        at(60),
    );
    assert!(d.record.failed.contains_key("c1"));
}

#[test]
fn done_everywhere_completes() {
    let mut input = inputs(2, Some('b'));
    healthy(&mut input, "c1", 'b', 0);
    healthy(&mut input, "c2", 'b', 0);
    let d = decide(Some(&rolling(&["c1", "c2"])), &spec(), &input, at(3));
    let r = &d.record;
    assert_eq!(r.phase, RolloutPhase::Complete);
    assert_eq!(
        (r.stable.clone(), r.target.clone()),
        (Some(h('b')), Some(h('b')))
    );
    assert!(r.admitted.is_empty() && r.admitted_at.is_empty());
    assert_eq!(d.wake, None);
    // A disconnected cluster is not waited for: it gets the new stable on return.
    let mut input = inputs(3, Some('b'));
    input.clusters[2].connected = false;
    healthy(&mut input, "c1", 'b', 0);
    healthy(&mut input, "c2", 'b', 0);
    let d = decide(Some(&rolling(&["c1", "c2"])), &spec(), &input, at(3));
    assert_eq!(d.record.phase, RolloutPhase::Complete);
    assert_eq!(d.record.version_of("c3"), Some(h('b').as_str()));
    // But a version no cluster ran does not become stable because all are away.
    let mut input = inputs(2, Some('b'));
    for c in &mut input.clusters {
        c.connected = false;
    }
    let d = decide(None, &spec(), &input, at(3));
    assert_eq!(d.record.phase, RolloutPhase::Progressing);
    assert_eq!(d.record.reason, "WaitingForClusters");
    assert!(d.record.admitted.is_empty());
}

#[test]
fn a_newly_selected_cluster_runs_stable_then_takes_its_turn() {
    let mut input = inputs(2, Some('b'));
    healthy(&mut input, "c1", 'b', 0);
    let rec = rolling(&["c1", "c2"]);
    let mut rec_c2_done = rec.clone();
    rec_c2_done.admitted_at.insert("c2".into(), at(1));
    // c4 joins the selection mid-rollout: the record gives it stable.
    input.clusters.push(Cluster {
        name: "c4".into(),
        group: 0,
        connected: true,
    });
    let d = decide(Some(&rec), &spec(), &input, at(2));
    assert_eq!(d.record.version_of("c4"), Some(h('a').as_str()));
    healthy(&mut input, "c2", 'b', 0);
    let d = decide(Some(&rec), &spec(), &input, at(3));
    assert_eq!(on_b(&d.record), ["c1", "c2", "c4"]);
    // A cluster no longer selected is dropped from the record.
    input.clusters.retain(|c| c.name != "c2");
    let d = decide(Some(&rec), &spec(), &input, at(3));
    assert!(!d.record.admitted_at.contains_key("c2"));
}

#[test]
fn reading_a_record_back_decides_the_same() {
    // Restart idempotence: the record on the bus, decided again with the
    // same reports, is not changed (no put, no admission twice).
    let mut input = inputs(3, Some('b'));
    healthy(&mut input, "c1", 'b', 0);
    let d = decide(Some(&rolling(&["c1"])), &spec(), &input, at(3));
    assert!(d.changed);
    let wire = RolloutRecord::decode(&d.record.encode().unwrap()).unwrap();
    let again = decide(Some(&wire), &spec(), &input, at(4));
    assert!(!again.changed);
    assert_eq!(again.record, wire);
    // After a restart the minReadySeconds clocks start again: c2 reported
    // Current before, seen now for the first time, is not done yet.
    healthy(&mut input, "c2", 'b', 4);
    let d = decide(Some(&wire), &spec(), &input, at(5));
    assert!(!d.changed);
    assert_eq!(d.wake, Some(at(7)));
}

#[test]
fn a_deleted_source_is_gone() {
    let d = decide(Some(&rolling(&["c1"])), &spec(), &inputs(2, None), t0());
    assert!(d.changed);
    assert_eq!(d.record.phase, RolloutPhase::Gone);
    assert!(d.record.target.is_none() && d.record.admitted.is_empty());
    assert_eq!(d.record.validate(&d.record.subject_key()), Ok(()));
    // Nothing to say of an object never decided for.
    assert!(!decide(None, &spec(), &inputs(2, None), t0()).changed);
    // A source created again is a new object, a new revision.
    let back = decide(Some(&d.record), &spec(), &inputs(2, Some('c')), at(1));
    assert_eq!(back.record.phase, RolloutPhase::Progressing);
    assert_eq!(back.record.stable, None);
    assert_eq!(back.record.revision, 3);
}

#[test]
fn every_record_decided_validates() {
    let mut input = inputs(3, Some('b'));
    report(&mut input, "c1", 'b', HealthStatus::Failed, None);
    for prev in [None, Some(rolling(&["c1"])), Some(complete('a'))] {
        let d = decide(prev.as_ref(), &grouped(), &input, at(1));
        assert_eq!(d.record.validate(&d.record.subject_key()), Ok(()));
    }
}

#[test]
fn commands() {
    let rec = rolling(&["c1"]);
    let paused = command(&rec, RolloutAction::Pause, at(1)).unwrap().unwrap();
    assert_eq!(
        (paused.phase, paused.paused_by),
        (RolloutPhase::Paused, Some(PausedBy::Operator))
    );
    assert_eq!(command(&paused, RolloutAction::Pause, at(2)), Ok(None));
    // An operator's pause holds against time and new reports.
    let mut input = inputs(3, Some('b'));
    healthy(&mut input, "c1", 'b', 0);
    let d = decide_with(Some(&rec), RolloutAction::Pause, &spec(), &input, at(30)).unwrap();
    assert!(d.changed);
    assert_eq!(on_b(&d.record), ["c1"], "nothing admitted");
    assert_eq!(d.record.reason, "Paused");
    assert_eq!(d.record.updated_at, at(30));
    let later = decide(Some(&d.record), &spec(), &input, at(90));
    assert!(!later.changed, "an operator's pause holds");
    // A resume admits at once, in the same put.
    let d = decide_with(
        Some(&d.record),
        RolloutAction::Resume,
        &spec(),
        &input,
        at(91),
    )
    .unwrap();
    assert_eq!(on_b(&d.record), ["c1", "c2"]);
    assert_eq!(d.record.phase, RolloutPhase::Progressing);
    assert!(decide_with(None, RolloutAction::Pause, &spec(), &input, at(1)).is_err());
    // Resume clears failures and restarts deadlines.
    let mut failed = paused.clone();
    failed.paused_by = Some(PausedBy::Failure);
    failed.failed.insert("c1".into(), "x".into());
    let resumed = command(&failed, RolloutAction::Resume, at(40))
        .unwrap()
        .unwrap();
    assert_eq!(
        (resumed.phase, resumed.paused_by),
        (RolloutPhase::Progressing, None)
    );
    assert!(resumed.failed.is_empty());
    assert_eq!(resumed.admitted_at["c1"], at(40));
    assert_eq!(command(&rec, RolloutAction::Resume, at(40)), Ok(None));
    // Abort: no more admissions; clusters keep what they run.
    let aborted = command(&rec, RolloutAction::Abort, at(1)).unwrap().unwrap();
    let d = decide(Some(&aborted), &spec(), &input, at(30));
    assert_eq!(d.record.phase, RolloutPhase::Aborted);
    assert_eq!(on_b(&d.record), ["c1"]);
    // Rollback: everyone back on stable, even a cluster still reporting the
    // target; refused with nothing to go back to.
    let d = decide_with(Some(&rec), RolloutAction::Rollback, &spec(), &input, at(30)).unwrap();
    assert_eq!(d.record.phase, RolloutPhase::RolledBack);
    assert!(d.record.admitted.is_empty());
    assert_eq!(d.record.version_of("c1"), Some(h('a').as_str()));
    assert!(d
        .record
        .message
        .contains("change the source to roll forward"));
    let mut new = rec.clone();
    new.stable = None;
    assert_eq!(
        command(&new, RolloutAction::Rollback, at(1)),
        Err("no previous version to roll back to; use abort".into())
    );
    // Nothing to command on a deleted source.
    let gone = decide(Some(&rec), &spec(), &inputs(1, None), at(1)).record;
    assert_eq!(command(&gone, RolloutAction::Pause, at(2)), Ok(None));
}
