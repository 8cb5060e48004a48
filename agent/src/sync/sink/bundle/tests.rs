use super::*;
use serde_json::json;

fn target(api_version: &str, kind: &str) -> Target {
    Target::from(crate::sync::model::Place {
        api_version: api_version.into(),
        kind: kind.into(),
        namespace: None,
        name: "x".into(),
    })
}

#[test]
fn install_order_is_namespaces_crds_accounts_rbac_then_the_rest_and_webhooks_last() {
    let mut targets = [
        target("apps/v1", "Deployment"),
        target(
            "admissionregistration.k8s.io/v1",
            "ValidatingWebhookConfiguration",
        ),
        target("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
        target("rbac.authorization.k8s.io/v1", "Role"),
        target("v1", "ServiceAccount"),
        target("apiextensions.k8s.io/v1", "CustomResourceDefinition"),
        target("v1", "Namespace"),
        target("example.com/v1", "Namespace"),
    ];
    targets.sort_by_key(install_rank);
    let kinds: Vec<String> = targets
        .iter()
        .map(|t| format!("{} {}", t.api_version, t.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            "v1 Namespace",
            "apiextensions.k8s.io/v1 CustomResourceDefinition",
            "v1 ServiceAccount",
            "rbac.authorization.k8s.io/v1 Role",
            "rbac.authorization.k8s.io/v1 ClusterRoleBinding",
            "apps/v1 Deployment",
            // Same kind name, another group: an ordinary kind.
            "example.com/v1 Namespace",
            "admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration",
        ]
    );
}

#[test]
fn manifest_kinds_skip_manifests_without_a_type() {
    let bundle = json!({"spec": {"manifests": [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "a"}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"},
        {"kind": "NoVersion"},
        {"apiVersion": "v1", "kind": ""},
        "not an object",
        {"apiVersion": 1, "kind": "Odd"}
    ]}});
    assert_eq!(
        manifest_kinds(&bundle),
        vec![
            GroupVersionKind::gvk("", "v1", "ServiceAccount"),
            GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", "ClusterRole"),
        ]
    );
    assert!(manifest_kinds(&json!({"spec": {}})).is_empty());
    assert!(manifest_kinds(&json!({"spec": {"manifests": "x"}})).is_empty());
}

fn manifest(kind: &str, name: &str) -> Manifest {
    Manifest {
        status: BundleManifestStatus {
            api_version: "v1".into(),
            kind: kind.into(),
            name: name.into(),
            ..Default::default()
        },
        target: Some(Target::from(crate::sync::model::Place {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: None,
            name: name.into(),
        })),
    }
}

fn key(name: &str) -> ObjectKey {
    ObjectKey {
        origin: "hub".into(),
        group: "fleetbus.io".into(),
        version: "v1alpha1".into(),
        kind: "Bundle".into(),
        namespace: Some("apps".into()),
        name: name.into(),
    }
}

#[test]
fn outcomes_are_recorded_on_the_manifest_of_their_target_only() {
    let mut pass = BundlePass::default();
    pass.bundles.insert(
        key("b"),
        Unwrapped {
            rule: "r".into(),
            error: None,
            manifests: vec![manifest("ServiceAccount", "a"), manifest("ConfigMap", "c")],
            hash: "h".into(),
            invalid: 0,
            waiting: false,
        },
    );
    let sa = manifest("ServiceAccount", "a").target.unwrap();
    let cm = manifest("ConfigMap", "c").target.unwrap();
    pass.record(&key("b"), &sa, Ok(()));
    pass.record(&key("b"), &cm, Err("refused".into()));
    // Another bundle's, or a plain copy's outcome: nothing to record.
    pass.record(&key("other"), &sa, Err("x".into()));
    let b = &pass.bundles[&key("b")];
    assert!(b.manifests[0].status.applied);
    assert_eq!(b.manifests[0].status.error, None);
    assert!(!b.manifests[1].status.applied);
    assert_eq!(b.manifests[1].status.error.as_deref(), Some("refused"));
    // A later success clears the error.
    pass.record(&key("b"), &cm, Ok(()));
    assert!(pass.bundles[&key("b")].manifests[1].status.applied);
    assert_eq!(pass.bundles[&key("b")].manifests[1].status.error, None);
}

#[test]
fn outcome_results() {
    assert_eq!(outcome_result(&Outcome::InSync), Ok(()));
    assert_eq!(outcome_result(&Outcome::Wrote), Ok(()));
    assert_eq!(
        outcome_result(&Outcome::Failed(crate::sync::model::CopyError::invalid(
            "no"
        ))),
        Err("no".to_owned())
    );
}

/// A report built from JSON, as it comes off the bus (so optional members
/// added later keep their defaults).
fn report(cluster: &str, at: &str, status: Value) -> ReportedStatus {
    serde_json::from_value(json!({
        "cluster": cluster, "rule": "r", "origin": "hub",
        "source": {"apiVersion": "fleetbus.io/v1alpha1", "kind": "Bundle",
                   "namespace": "apps", "name": "b"},
        "copyName": "b", "copyNamespace": "apps", "copyResourceVersion": "",
        "observedAt": at, "status": status
    }))
    .unwrap()
}

fn entry(kind: &str, applied: bool, error: Option<&str>, ready: Option<bool>) -> Value {
    serde_json::to_value(BundleManifestStatus {
        api_version: "v1".into(),
        kind: kind.into(),
        namespace: None,
        name: "x".into(),
        applied,
        error: error.map(str::to_owned),
        ready,
    })
    .unwrap()
}

fn ready_condition(s: &BundleStatus) -> (&str, &str) {
    let c = &s.conditions[0];
    assert_eq!(c.type_, "Ready");
    (c.status.as_str(), c.reason.as_str())
}

#[test]
fn status_is_ready_when_every_cluster_applied_every_manifest_and_all_are_ready() {
    let ok = json!({"manifests": [entry("ServiceAccount", true, None, Some(true)),
                                  entry("ClusterRole", true, None, Some(true))]});
    let e1 = report("edge1", "2026-11-23T10:00:00.000Z", ok.clone());
    let e2 = report("edge2", "2026-11-23T10:00:05.000Z", ok);
    let s = status_from_reports(&[&e2, &e1]);
    assert_eq!(ready_condition(&s), ("True", "Ready"));
    assert_eq!(s.summary.as_deref(), Some("2/2 ready"));
    let names: Vec<&str> = s.clusters.iter().map(|c| c.cluster.as_str()).collect();
    assert_eq!(names, ["edge1", "edge2"], "sorted by cluster");
    assert_eq!(s.clusters[0].applied, 2);
    assert_eq!(s.clusters[0].errors, 0);
    assert_eq!(s.clusters[0].manifests.len(), 2);
    assert_eq!(
        s.conditions[0].last_transition_time,
        time(e2.observed_at),
        "the newest report's time"
    );
}

#[test]
fn an_error_or_a_manifest_not_ready_makes_the_cluster_and_the_bundle_not_ready() {
    let ok = json!({"manifests": [entry("ServiceAccount", true, None, Some(true))]});
    let failing = json!({"manifests": [entry("ServiceAccount", true, None, Some(true)),
                                       entry("Bad", false, Some("no name"), None)]});
    let rolling = json!({"manifests": [entry("Deployment", true, None, Some(false))]});
    let a = report("a", "2026-11-23T10:00:00.000Z", ok);
    let b = report("b", "2026-11-23T10:00:00.000Z", failing);
    let c = report("c", "2026-11-23T10:00:00.000Z", rolling);
    let s = status_from_reports(&[&a, &b, &c]);
    assert_eq!(ready_condition(&s), ("False", "NotReady"));
    assert_eq!(s.conditions[0].message, "not ready on b, c");
    assert_eq!(s.summary.as_deref(), Some("1/3 ready"));
    let b = &s.clusters[1];
    assert!(!b.ready);
    assert_eq!((b.applied, b.errors), (1, 1));
    assert_eq!(b.manifests[1].error.as_deref(), Some("no name"));
}

#[test]
fn null_reports_drop_out_the_newest_report_of_a_cluster_counts_and_junk_is_an_error() {
    let ok = json!({"manifests": [entry("ServiceAccount", true, None, Some(true))]});
    let bad = json!({"manifests": [entry("ServiceAccount", false, Some("refused"), None)]});
    let old = report("a", "2026-11-23T10:00:00.000Z", bad);
    let new = report("a", "2026-11-23T10:00:09.000Z", ok);
    let gone = report("b", "2026-11-23T10:00:00.000Z", Value::Null);
    let s = status_from_reports(&[&new, &old, &gone]);
    assert_eq!(ready_condition(&s), ("True", "Ready"));
    assert_eq!(s.summary.as_deref(), Some("1/1 ready"));

    let junk = report("c", "2026-11-23T10:00:00.000Z", json!({"manifests": "no"}));
    let s = status_from_reports(&[&junk]);
    assert_eq!(ready_condition(&s), ("False", "NotReady"));
    assert!(s.clusters[0]
        .message
        .as_deref()
        .unwrap_or_default()
        .starts_with("unreadable report"));

    let bundle_error = report(
        "d",
        "2026-11-23T10:00:00.000Z",
        json!({"error": "spec.clusterSelector: bad", "manifests": []}),
    );
    let s = status_from_reports(&[&bundle_error]);
    assert_eq!(ready_condition(&s), ("False", "NotReady"));
    assert_eq!(
        s.clusters[0].message.as_deref(),
        Some("spec.clusterSelector: bad")
    );

    let s = status_from_reports(&[]);
    assert_eq!(ready_condition(&s), ("False", "NoClusters"));
    assert_eq!(s.summary.as_deref(), Some("0/0 ready"));
    assert!(s.clusters.is_empty());
}

#[test]
fn an_empty_bundle_is_ready_where_it_is_unwrapped() {
    let s = status_from_reports(&[&report(
        "a",
        "2026-11-23T10:00:00.000Z",
        json!({"manifests": []}),
    )]);
    assert_eq!(ready_condition(&s), ("True", "Ready"));
}

#[test]
fn a_report_is_ready_when_all_is_applied_and_ready() {
    let ready = json!({"manifests": [entry("ServiceAccount", true, None, Some(true))]});
    assert!(report_is_ready(&ready));
    for not in [
        json!({"manifests": [entry("Deployment", true, None, Some(false))]}),
        json!({"manifests": [entry("Deployment", true, None, None)]}),
        json!({"manifests": [entry("Bad", false, Some("no name"), None)]}),
        json!({"error": "bad selector", "manifests": []}),
        json!("junk"),
        Value::Null,
    ] {
        assert!(!report_is_ready(&not), "{not}");
    }
}

#[test]
fn fleetbus_groups_are_ours_and_look_alikes_are_not() {
    assert!(is_fleetbus_group("fleetbus.io"));
    assert!(is_fleetbus_group("hub.fleetbus.io"));
    assert!(!is_fleetbus_group("notfleetbus.io"));
    assert!(!is_fleetbus_group("fleetbus.io.example.com"));
    assert!(!is_fleetbus_group(""));
    assert!(!is_fleetbus_group("apps"));
}

#[test]
fn a_bundle_version_changes_with_its_spec_not_its_status() {
    let bundle = json!({
        "apiVersion": "fleetbus.io/v1alpha1", "kind": "Bundle",
        "metadata": {"name": "b", "namespace": "default"},
        "spec": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}]},
    });
    let mut reported = bundle.clone();
    reported["status"] = json!({"summary": "1/1 ready"});
    reported["metadata"]["resourceVersion"] = json!("42");
    assert_eq!(spec_version(&bundle), spec_version(&reported));
    let mut changed = bundle.clone();
    changed["spec"]["manifests"][0]["metadata"]["name"] = json!("b");
    assert_ne!(spec_version(&bundle), spec_version(&changed));
}

#[test]
fn a_truncated_report_keeps_what_is_not_ready_and_says_how_many_went() {
    let report = json!({"manifests": [
        entry("ConfigMap", true, None, Some(true)),
        entry("Deployment", true, None, Some(false)),
        entry("Secret", false, Some("denied"), None),
        entry("ServiceAccount", true, None, Some(true)),
    ]});
    let cut = truncated_report(&report).expect("a Bundle report");
    let r: BundleReport = serde_json::from_value(cut.clone()).unwrap();
    let kinds: Vec<&str> = r.manifests.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(kinds, ["Deployment", "Secret"]);
    assert!(r.message.as_deref().unwrap_or_default().contains("2 of 4"));
    assert!(!report_is_ready(&cut));
    let ready = json!({"manifests": [entry("ConfigMap", true, None, Some(true))]});
    let cut = truncated_report(&ready).unwrap();
    assert!(
        report_is_ready(&cut),
        "omitting ready manifests keeps it ready"
    );
    assert!(truncated_report(&json!("junk")).is_none());
}

#[test]
fn a_large_bundle_lists_only_the_manifests_that_need_attention() {
    let small: Vec<Value> = (0..MANIFESTS_LISTED_IN_FULL)
        .map(|_| entry("ConfigMap", true, None, Some(true)))
        .collect();
    let s = status_from_reports(&[&report(
        "e",
        "2026-11-23T10:00:00.000Z",
        json!({ "manifests": small }),
    )]);
    assert_eq!(s.clusters[0].manifests.len(), MANIFESTS_LISTED_IN_FULL);
    assert_eq!(s.clusters[0].message, None);

    let mut large: Vec<Value> = (0..100)
        .map(|_| entry("ConfigMap", true, None, Some(true)))
        .collect();
    large.push(entry("Deployment", true, None, Some(false)));
    large.push(entry("Bad", false, Some("no name"), None));
    let s = status_from_reports(&[&report(
        "e",
        "2026-11-23T10:00:00.000Z",
        json!({ "manifests": large }),
    )]);
    let c = &s.clusters[0];
    let kinds: Vec<&str> = c.manifests.iter().map(|m| m.kind.as_str()).collect();
    assert_eq!(
        kinds,
        ["Deployment", "Bad"],
        "only what is not ready or failed"
    );
    assert_eq!(
        (c.applied, c.errors),
        (101, 1),
        "counts cover every manifest"
    );
    assert_eq!(
        c.message.as_deref(),
        Some("100 of 102 manifests applied and ready (not listed)")
    );
    assert!(!c.ready);
}
