//! Cases after cli-utils' `status_compute_test.go` / `core_test.go`.

use super::*;
use serde_json::json;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn now() -> DateTime<Utc> {
    at("2026-11-27T08:00:00Z")
}

fn judge(obj: Value) -> HealthStatus {
    compute(&obj, now()).status
}

fn deployment(spec: Value, status: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment",
           "metadata": {"name": "web", "generation": 2}, "spec": spec, "status": status})
}

fn rolled_out() -> Value {
    json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3, "readyReplicas": 3,
           "availableReplicas": 3,
           "conditions": [{"type": "Available", "status": "True"},
                          {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]})
}

#[test]
fn deployment_like_kstatus() {
    let spec = json!({"replicas": 3, "progressDeadlineSeconds": 600});
    assert_eq!(judge(deployment(spec.clone(), rolled_out())), Current);
    // Every step of kstatus's order, each breaking one thing of a rolled-out status.
    let mut unobserved = rolled_out();
    unobserved["observedGeneration"] = json!(1);
    assert_eq!(judge(deployment(spec.clone(), unobserved)), InProgress);
    for (field, value) in [
        ("replicas", 2),
        ("updatedReplicas", 2),
        ("replicas", 4),
        ("availableReplicas", 2),
        ("readyReplicas", 2),
    ] {
        let mut s = rolled_out();
        s[field] = json!(value);
        assert_eq!(
            judge(deployment(spec.clone(), s)),
            InProgress,
            "{field}={value}"
        );
    }
    let mut no_available = rolled_out();
    no_available["conditions"] =
        json!([{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]);
    assert_eq!(judge(deployment(spec.clone(), no_available)), InProgress);
    // With a progress deadline, the new ReplicaSet must be reported available.
    let mut not_progressed = rolled_out();
    not_progressed["conditions"] = json!([{"type": "Available", "status": "True"}]);
    assert_eq!(
        judge(deployment(spec.clone(), not_progressed.clone())),
        InProgress
    );
    // Without one (the devcluster does not default it), kstatus does not wait for it.
    assert_eq!(
        judge(deployment(json!({"replicas": 3}), not_progressed)),
        Current
    );
    let mut deadline = rolled_out();
    deadline["conditions"] = json!([{"type": "Progressing", "status": "False",
                                     "reason": "ProgressDeadlineExceeded"}]);
    assert_eq!(judge(deployment(spec.clone(), deadline)), Failed);
    // No status at all: nothing is running yet (spec.replicas defaults to 1).
    assert_eq!(judge(deployment(json!({}), json!({}))), InProgress);
}

#[test]
fn generic_checks_come_first() {
    let mut deleting = deployment(json!({"replicas": 3}), rolled_out());
    deleting["metadata"]["deletionTimestamp"] = json!("2026-11-27T07:59:00Z");
    assert_eq!(judge(deleting), Terminating);
    let widget = |conditions: Value| {
        json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"generation": 1},
               "status": {"observedGeneration": 1, "conditions": conditions}})
    };
    assert_eq!(
        judge(widget(json!([{"type": "Reconciling", "status": "True"}]))),
        InProgress
    );
    let stalled = compute(
        &widget(
            json!([{"type": "Stalled", "status": "True", "reason": "Broken", "message": "no disk"}]),
        ),
        now(),
    );
    assert_eq!(
        (stalled.status, stalled.message.as_str()),
        (Failed, "Broken: no disk")
    );
    assert_eq!(
        judge(widget(json!([{"type": "Ready", "status": "True"}]))),
        Current
    );
    assert_eq!(
        judge(widget(json!([{"type": "Ready", "status": "Unknown"}]))),
        InProgress
    );
    // Our deviation: `Available` decides when there is no `Ready`.
    assert_eq!(
        judge(widget(json!([{"type": "Available", "status": "False"}]))),
        InProgress
    );
    assert_eq!(
        judge(widget(json!([{"type": "Available", "status": "True"}]))),
        Current
    );
    assert_eq!(judge(widget(json!([]))), Current);
    // A float counter is no integer to kstatus: the default applies.
    let floats = deployment(json!({"replicas": 3.0}), rolled_out());
    assert_eq!(
        judge(floats),
        InProgress,
        "spec.replicas 3.0 reads as 1 < 3 replicas: extra pods"
    );
}

#[test]
fn stateful_sets_daemon_sets_replica_sets() {
    let sts = |status: Value, strategy: Value| {
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"generation": 1},
               "spec": {"replicas": 2, "updateStrategy": strategy}, "status": status})
    };
    let done = json!({"observedGeneration": 1, "replicas": 2, "readyReplicas": 2,
                      "currentReplicas": 2, "updatedReplicas": 2,
                      "currentRevision": "r1", "updateRevision": "r1"});
    assert_eq!(judge(sts(done.clone(), json!({}))), Current);
    let mut revision = done.clone();
    revision["updateRevision"] = json!("r2");
    assert_eq!(judge(sts(revision, json!({}))), InProgress);
    let mut not_ready = done.clone();
    not_ready["readyReplicas"] = json!(1);
    assert_eq!(
        judge(sts(not_ready.clone(), json!({"type": "OnDelete"}))),
        Current
    );
    assert_eq!(judge(sts(not_ready, json!({}))), InProgress);
    let mut partial = done;
    partial["updatedReplicas"] = json!(1);
    partial["currentReplicas"] = json!(1);
    let partition = |p: i64| json!({"rollingUpdate": {"partition": p}});
    assert_eq!(judge(sts(partial.clone(), partition(1))), Current);
    assert_eq!(judge(sts(partial, partition(0))), InProgress);

    let ds = |status: Value| {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1},
               "status": status})
    };
    let all = json!({"observedGeneration": 1, "desiredNumberScheduled": 3, "currentNumberScheduled": 3,
                     "updatedNumberScheduled": 3, "numberAvailable": 3, "numberReady": 3});
    assert_eq!(judge(ds(all.clone())), Current);
    let mut unready = all.clone();
    unready["numberReady"] = json!(2);
    assert_eq!(judge(ds(unready)), InProgress);
    let mut no_desired = all;
    no_desired
        .as_object_mut()
        .unwrap()
        .remove("desiredNumberScheduled");
    assert_eq!(judge(ds(no_desired)), InProgress);
    assert_eq!(judge(ds(json!({}))), InProgress, "no observedGeneration");

    let rs = |status: Value| json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "spec": {"replicas": 2}, "status": status});
    let up = json!({"replicas": 2, "fullyLabeledReplicas": 2, "availableReplicas": 2, "readyReplicas": 2});
    assert_eq!(judge(rs(up.clone())), Current);
    let mut failing = up;
    failing["conditions"] = json!([{"type": "ReplicaFailure", "status": "True"}]);
    assert_eq!(judge(rs(failing)), InProgress);
}

#[test]
fn jobs_claims_services_crds_and_always_ready_kinds() {
    let job = |spec: Value, status: Value| json!({"apiVersion": "batch/v1", "kind": "Job", "spec": spec, "status": status});
    let cond = |t: &str| json!({"conditions": [{"type": t, "status": "True"}], "startTime": "x"});
    assert_eq!(judge(job(json!({}), cond("Complete"))), Current);
    assert_eq!(judge(job(json!({}), cond("Failed"))), Failed);
    assert_eq!(
        judge(job(json!({"suspend": true}), cond("Suspended"))),
        Current
    );
    assert_eq!(judge(job(json!({}), json!({}))), InProgress, "not started");
    assert_eq!(
        judge(job(json!({}), json!({"startTime": "x"}))),
        Current,
        "running"
    );

    let pvc = |phase: &str| json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "status": {"phase": phase}});
    assert_eq!(judge(pvc("Bound")), Current);
    assert_eq!(judge(pvc("Pending")), InProgress);

    let svc = |t: &str, ip: &str| json!({"apiVersion": "v1", "kind": "Service", "spec": {"type": t, "clusterIP": ip}});
    assert_eq!(judge(svc("LoadBalancer", "")), InProgress);
    assert_eq!(judge(svc("LoadBalancer", "10.0.0.1")), Current);
    assert_eq!(judge(svc("ClusterIP", "")), Current);

    let crd = |conditions: Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "status": {"conditions": conditions}})
    };
    assert_eq!(
        judge(crd(json!([{"type": "Established", "status": "True"}]))),
        Current
    );
    assert_eq!(
        judge(crd(json!([{"type": "NamesAccepted", "status": "False"}]))),
        Failed
    );
    assert_eq!(
        judge(crd(
            json!([{"type": "Established", "status": "False", "reason": "Installing"}])
        )),
        InProgress
    );
    assert_eq!(
        judge(crd(
            json!([{"type": "Established", "status": "False", "reason": "Conflict"}])
        )),
        Failed
    );
    for (api, kind) in [
        ("v1", "Secret"),
        ("v1", "ConfigMap"),
        ("policy/v1", "PodDisruptionBudget"),
        ("batch/v1", "CronJob"),
    ] {
        let obj = json!({"apiVersion": api, "kind": kind,
                         "status": {"conditions": [{"type": "Ready", "status": "False"}]}});
        assert_eq!(judge(obj), Current, "{kind}");
    }
}

#[test]
fn pods() {
    let pod = |status: Value, created: &str| {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"creationTimestamp": created}, "status": status})
    };
    let old = "2026-11-27T07:59:00Z";
    let young = "2026-11-27T07:59:50Z";
    assert_eq!(judge(pod(json!({"phase": "Succeeded"}), old)), Current);
    assert_eq!(
        judge(pod(
            json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}),
            old
        )),
        Current
    );
    assert_eq!(judge(pod(json!({"phase": "Running"}), old)), InProgress);
    let crash = json!({"phase": "Running",
                       "containerStatuses": [{"state": {"waiting": {"reason": "CrashLoopBackOff"}}}]});
    assert_eq!(judge(pod(crash, old)), Failed);
    let unschedulable = json!({"phase": "Pending",
        "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
    assert_eq!(judge(pod(unschedulable.clone(), old)), Failed);
    assert_eq!(
        judge(pod(unschedulable, young)),
        InProgress,
        "inside kstatus's 15 s window"
    );
    assert_eq!(judge(pod(json!({}), old)), InProgress);
    assert_eq!(judge(pod(json!({"phase": "Weird"}), old)), Unknown);
}

#[test]
fn garbage_does_not_panic() {
    for obj in [
        json!(null),
        json!([]),
        json!({"kind": 3}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": {"conditions": "nope"}}),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": {"conditions": [1, null, {"type": 2}]}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"creationTimestamp": "garbage"},
               "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}}),
    ] {
        let _ = compute(&obj, now());
    }
    assert_eq!(
        judge(json!({"kind": 3})),
        Current,
        "an object with no signals exists: Current"
    );
}
