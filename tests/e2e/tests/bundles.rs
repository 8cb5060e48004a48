//! Bundles end to end: a Bundle on the hub is inert
//! there; a rule with `unwrap: true` makes each selected edge apply its
//! manifests, each as a managed copy (drift corrected, collected per
//! orphanPolicy when removed from the Bundle or when the Bundle goes).
//! Real nats-server, devclusters and agents; users act through kubectl.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_schemas::well_known::{ANNOTATION_BUNDLE, ANNOTATION_ORIGIN_UID};
use fleetbus_testsupport::{wait_for, NatsServer};
use kube::api::{ApiResource, DynamicObject};
use kube::ResourceExt;

/// The rule taking Bundles from `role=hub` and unwrapping them on `env=prod`.
fn unwrap_rule(orphan_policy: &str) -> String {
    RuleBuilder::new("bundles")
        .kind("fleetbus.io", "v1alpha1", "Bundle")
        .spec("unwrap", true.into())
        .sources(&[("role", "hub")])
        .sinks(&[("env", "prod")])
        .spec("createNamespace", true.into())
        .spec("orphanPolicy", orphan_policy.into())
        .yaml()
}

const SERVICE_ACCOUNT: &str = r#"
    - apiVersion: v1
      kind: ServiceAccount
      metadata: {name: app}"#;
const CLUSTER_ROLE: &str = r#"
    - apiVersion: rbac.authorization.k8s.io/v1
      kind: ClusterRole
      metadata: {name: app-reader}
      rules:
        - apiGroups: [""]
          resources: [configmaps]
          verbs: [get, list]"#;
const DEPLOYMENT: &str = r#"
    - apiVersion: apps/v1
      kind: Deployment
      metadata: {name: web, labels: {app: web}}
      spec:
        replicas: 2
        selector: {matchLabels: {app: web}}
        template:
          metadata: {labels: {app: web}}
          spec:
            serviceAccountName: app
            containers: [{name: web, image: "nginx:1.27"}]"#;

/// A Bundle `apps/stack` holding `manifests` (YAML list items).
fn bundle(manifests: &[&str]) -> String {
    format!(
        r#"apiVersion: fleetbus.io/v1alpha1
kind: Bundle
metadata:
  name: stack
  namespace: apps
spec:
  manifests:{}
"#,
        manifests.concat()
    )
}

/// Applies the Bundle `apps/stack` holding `manifests` on the hub with
/// kubectl; returns its uid.
async fn apply_bundle(hub: &Member, manifests: &[&str]) -> String {
    apply_yaml(hub, &bundle(manifests));
    get_dynamic(hub, &bundles(), Some("apps"), "stack")
        .await
        .unwrap()
        .expect("the Bundle")
        .uid()
        .expect("uid")
}

fn bundles() -> ApiResource {
    resource("fleetbus.io", "v1alpha1", "Bundle", "bundles")
}
fn service_accounts() -> ApiResource {
    resource("", "v1", "ServiceAccount", "serviceaccounts")
}
fn cluster_roles() -> ApiResource {
    resource(
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
    )
}
fn deployments() -> ApiResource {
    resource("apps", "v1", "Deployment", "deployments")
}
fn config_maps() -> ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

/// A hub (`role=hub`) and edges (`env=prod`), each label seen everywhere.
async fn hub_and_edges(nats: &NatsServer, edges: &[&str]) -> Vec<Member> {
    let mut names = vec!["hub"];
    names.extend_from_slice(edges);
    let m = fleet(nats, &names).await;
    for x in &m {
        let label = if x.name == "hub" {
            "role=hub"
        } else {
            "env=prod"
        };
        kubectl(x, &["label", "clusters.fleetbus.io", &x.name, label]);
    }
    for x in &m {
        let (key, value) = if x.name == "hub" {
            ("role", "hub")
        } else {
            ("env", "prod")
        };
        for seer in &m {
            let what = format!("{}: {} labelled {key}={value}", seer.name, x.name);
            wait_for(&what, SYNC, || async {
                let c = seer
                    .clusters()
                    .get(&x.name)
                    .await
                    .map_err(|e| e.to_string())?;
                match c.labels().get(key) {
                    Some(v) if v == value => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            })
            .await;
        }
    }
    // The stacks carry ClusterRoles and CRDs, which the built-in import
    // policy keeps out: these edges let them in.
    for x in &m[1..] {
        apply_policy(x, ALLOW_ALL_IMPORTS, "True").await;
    }
    create_ns(&m[0], "apps").await;
    m
}

/// A predicate: the copy is marked as unwrapped from `apps/stack` with uid `uid`.
fn from_bundle(uid: &str) -> impl Fn(&DynamicObject) -> Result<(), String> + '_ {
    move |o| {
        let ann = o.annotations();
        match (ann.get(ANNOTATION_BUNDLE), ann.get(ANNOTATION_ORIGIN_UID)) {
            (Some(b), Some(u)) if b == "apps/stack" && u == uid => Ok(()),
            other => Err(format!("bundle/origin-uid annotations {other:?}")),
        }
    }
}

/// Waits until the object on `edge` is a copy unwrapped from `apps/stack` (uid `uid`).
async fn wait_unwrapped(edge: &Member, ar: &ApiResource, ns: Option<&str>, name: &str, uid: &str) {
    wait_copy(edge, ar, ns, name, "hub", "bundles", from_bundle(uid)).await;
}

/// Waits for the three objects of the full Bundle on `edge`.
async fn wait_stack(edge: &Member, uid: &str) {
    for (ar, ns, name) in [
        (service_accounts(), Some("apps"), "app"),
        (cluster_roles(), None, "app-reader"),
        (deployments(), Some("apps"), "web"),
    ] {
        wait_unwrapped(edge, &ar, ns, name, uid).await;
    }
}

/// The hub holds only the Bundle; both edges get its ServiceAccount,
/// ClusterRole and Deployment (in the Bundle's namespace, created), marked
/// with the bundle annotation; an edited copy is corrected; a manifest
/// removed from the Bundle is deleted on the edges (orphanPolicy Delete)
/// while the others stay; deleting the Bundle deletes every copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundle_unwrapped_on_edges_only() {
    let nats = NatsServer::start().unwrap();
    let m = hub_and_edges(&nats, &["e1", "e2"]).await;
    let (hub, e1, e2) = (&m[0], &m[1], &m[2]);
    apply_yaml(hub, &unwrap_rule("Delete"));
    wait_rule(hub, "bundles", "SourceOnly", ready_is("True", "SourceOnly")).await;
    let uid = apply_bundle(hub, &[SERVICE_ACCOUNT, CLUSTER_ROLE, DEPLOYMENT]).await;
    for edge in [e1, e2] {
        wait_stack(edge, &uid).await;
        // The Bundle itself is never written on a sink.
        assert_absent(edge, &bundles(), Some("apps"), "stack").await;
        wait_rule(edge, "bundles", "Ready", |r| {
            ready_is("True", "Synced")(r)?;
            match r.status.as_ref().map(|s| (s.objects_synced, s.errors)) {
                Some((3, 0)) => Ok(()),
                other => Err(format!("synced/errors {other:?}")),
            }
        })
        .await;
    }
    // Inert at the source: the edges have had them for a while now.
    assert_absent(hub, &service_accounts(), Some("apps"), "app").await;
    assert_absent(hub, &cluster_roles(), None, "app-reader").await;
    assert_absent(hub, &deployments(), Some("apps"), "web").await;

    // Drift on an unwrapped copy is corrected like on any copy.
    kubectl(
        e1,
        &["scale", "deployment", "web", "-n", "apps", "--replicas=5"],
    );
    wait_obj(
        e1,
        &deployments(),
        Some("apps"),
        "web",
        "back at 2 replicas",
        |o| match o.data["spec"]["replicas"].as_i64() {
            Some(2) => Ok(()),
            other => Err(format!("replicas {other:?}")),
        },
    )
    .await;

    // The ClusterRole leaves the Bundle: deleted on the edges, the rest stays.
    apply_yaml(hub, &bundle(&[SERVICE_ACCOUNT, DEPLOYMENT]));
    for edge in [e1, e2] {
        wait_absent(edge, &cluster_roles(), None, "app-reader").await;
        wait_unwrapped(edge, &service_accounts(), Some("apps"), "app", &uid).await;
        wait_unwrapped(edge, &deployments(), Some("apps"), "web", &uid).await;
    }

    // The Bundle deleted: every copy goes.
    kubectl_delete(hub, "bundles.fleetbus.io", Some("apps"), "stack");
    for edge in [e1, e2] {
        wait_absent(edge, &service_accounts(), Some("apps"), "app").await;
        wait_absent(edge, &deployments(), Some("apps"), "web").await;
    }
}

/// orphanPolicy Orphan: a manifest removed from the Bundle stays on the edge,
/// without any fleetbus mark. A Bundle with invalid manifests (no name; a
/// ResourceSyncRule, a fleetbus kind a Bundle may not carry) applies the
/// others, reports the errors on the rule's status and counts them.
/// A CRD and an object of its kind in one Bundle: the object is applied as
/// soon as the CRD is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_invalid_and_crd_manifests() {
    let nats = NatsServer::start().unwrap();
    let m = hub_and_edges(&nats, &["e1"]).await;
    let (hub, e1) = (&m[0], &m[1]);
    apply_yaml(hub, &unwrap_rule("Orphan"));
    let no_name = r#"
    - apiVersion: v1
      kind: ConfigMap
      data: {a: b}"#;
    let config = r#"
    - apiVersion: v1
      kind: ConfigMap
      metadata: {name: settings}
      data: {level: info}"#;
    let crd = r#"
    - apiVersion: apiextensions.k8s.io/v1
      kind: CustomResourceDefinition
      metadata: {name: widgets.example.com}
      spec:
        group: example.com
        scope: Namespaced
        names: {plural: widgets, singular: widget, kind: Widget}
        versions:
          - name: v1
            served: true
            storage: true
            schema:
              openAPIV3Schema:
                type: object
                x-kubernetes-preserve-unknown-fields: true"#;
    let widget = r#"
    - apiVersion: example.com/v1
      kind: Widget
      metadata: {name: w1}
      spec: {size: 3}"#;
    // Would copy every ConfigMap of the edge to every cluster if it were made.
    // Left as YAML text: a list item of the Bundle's manifests, like the others.
    let rule = r#"
    - apiVersion: fleetbus.io/v1alpha1
      kind: ResourceSyncRule
      metadata: {name: sneaky}
      spec:
        groupVersionKind: {group: "", version: v1, kind: ConfigMap}
        sourceClusterSelector: {matchLabels: {env: prod}}
        clusterSelector: {}"#;
    // The Widget comes first: the order of the manifests does not matter.
    let uid = apply_bundle(hub, &[widget, no_name, SERVICE_ACCOUNT, config, crd, rule]).await;
    wait_unwrapped(e1, &config_maps(), Some("apps"), "settings", &uid).await;
    wait_unwrapped(e1, &service_accounts(), Some("apps"), "app", &uid).await;
    let widgets = resource("example.com", "v1", "Widget", "widgets");
    wait_copy(e1, &widgets, Some("apps"), "w1", "hub", "bundles", |o| {
        from_bundle(&uid)(o)?;
        match o.data["spec"]["size"].as_i64() {
            Some(3) => Ok(()),
            other => Err(format!("size {other:?}")),
        }
    })
    .await;
    wait_rule(
        e1,
        "bundles",
        "reporting the nameless manifest and the rule",
        |r| {
            let s = r.status.as_ref().ok_or("no status")?;
            let ready = rule_condition(r, "Ready").ok_or("no Ready")?;
            if s.errors == 2 && s.objects_synced == 4 && ready.message.contains("manifests[1]") {
                Ok(())
            } else {
                Err(format!("errors {} synced {}", s.errors, s.objects_synced))
            }
        },
    )
    .await;
    e1.wait_metric_at_least(
        "fleetbus_sync_rejected_total{reason=\"invalid_manifest\"}",
        2.0,
    )
    .await;
    let rules = resource(
        "fleetbus.io",
        "v1alpha1",
        "ResourceSyncRule",
        "resourcesyncrules",
    );
    assert_absent(e1, &rules, None, "sneaky").await;
    assert_absent(hub, &config_maps(), Some("apps"), "settings").await;
    assert_absent(
        hub,
        &resource(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
        ),
        None,
        "widgets.example.com",
    )
    .await;

    // The ConfigMap leaves the Bundle: orphaned, it stays without marks.
    apply_yaml(hub, &bundle(&[widget, SERVICE_ACCOUNT, crd]));
    wait_obj(
        e1,
        &config_maps(),
        Some("apps"),
        "settings",
        "to be orphaned",
        check_unmanaged,
    )
    .await;
    wait_rule(e1, "bundles", "the invalid manifest gone", |r| {
        match r.status.as_ref().map(|s| (s.errors, s.objects_synced)) {
            Some((0, 3)) => Ok(()),
            other => Err(format!("errors/synced {other:?}")),
        }
    })
    .await;
}

/// `Bundle.status` on the hub from the edges' reports: per cluster and per
/// manifest applied/error/ready; Ready once every manifest is applied and
/// ready on both edges (the Deployment's rollout is reported by patching its
/// status, as its controller would: devclusters run none); an invalid
/// manifest added makes it not Ready with that manifest's error per cluster.
///
/// Needs the status return pipeline (`sync/report.rs`, `sync/returned.rs`)
/// to publish `Engine::bundle_report` and write `bundle::status_from_reports`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundle_status_on_the_hub() {
    let nats = NatsServer::start().unwrap();
    let m = hub_and_edges(&nats, &["e1", "e2"]).await;
    let (hub, e1, e2) = (&m[0], &m[1], &m[2]);
    apply_yaml(hub, &unwrap_rule("Delete"));
    let uid = apply_bundle(hub, &[SERVICE_ACCOUNT, CLUSTER_ROLE, DEPLOYMENT]).await;
    for edge in [e1, e2] {
        wait_stack(edge, &uid).await;
    }
    // Applied everywhere; the Deployment has not rolled out.
    wait_bundle_status(hub, "applied, Deployment not ready", |s| {
        expect_ready(s, "False", "0/2 ready")?;
        for c in clusters(s, &["e1", "e2"])? {
            let got: Vec<(String, bool, bool, Option<bool>)> = c["manifests"]
                .as_array()
                .ok_or("no manifests")?
                .iter()
                .map(|m| {
                    (
                        m["kind"].as_str().unwrap_or_default().to_owned(),
                        m["applied"] == true,
                        m.get("error").is_some(),
                        m["ready"].as_bool(),
                    )
                })
                .collect();
            let want = [
                ("ServiceAccount", true, false, Some(true)),
                ("ClusterRole", true, false, Some(true)),
                ("Deployment", true, false, Some(false)),
            ]
            .map(|(k, a, e, r)| (k.to_owned(), a, e, r));
            if got != want {
                return Err(format!("{}: manifests {got:?}", c["cluster"]));
            }
        }
        Ok(())
    })
    .await;

    for edge in [e1, e2] {
        roll_out(edge).await;
    }
    wait_bundle_status(hub, "Ready on both edges", |s| {
        expect_ready(s, "True", "2/2 ready")?;
        for c in clusters(s, &["e1", "e2"])? {
            if c["ready"] != true || c["applied"] != 3 || c["errors"] != 0 {
                return Err(format!("cluster entry {c}"));
            }
        }
        Ok(())
    })
    .await;

    // A manifest without a name: an error entry on each edge, others applied.
    let nameless = r#"
    - apiVersion: v1
      kind: ConfigMap
      data: {a: b}"#;
    apply_yaml(
        hub,
        &bundle(&[SERVICE_ACCOUNT, CLUSTER_ROLE, DEPLOYMENT, nameless]),
    );
    wait_bundle_status(hub, "reporting the nameless manifest", |s| {
        expect_ready(s, "False", "0/2 ready")?;
        for c in clusters(s, &["e1", "e2"])? {
            let error = c["manifests"][3]["error"].as_str().unwrap_or_default();
            if c["applied"] != 3 || c["errors"] != 1 || !error.contains("metadata.name") {
                return Err(format!("cluster entry {c}"));
            }
        }
        Ok(())
    })
    .await;
}

/// Reports the Deployment copy on `edge` rolled out (its status, written by
/// its controller on a real cluster).
async fn roll_out(edge: &Member) {
    let d = get_dynamic(edge, &deployments(), Some("apps"), "web")
        .await
        .unwrap()
        .expect("the Deployment copy");
    let generation = d.metadata.generation.unwrap_or(1);
    let status = serde_json::json!({"status": {"observedGeneration": generation, "replicas": 2,
        "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2,
        "conditions": [{"type": "Available", "status": "True"},
                       {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"}]}})
    .to_string();
    kubectl(
        edge,
        &[
            "patch",
            "deployment",
            "web",
            "-n",
            "apps",
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ],
    );
}

/// Waits until the hub's Bundle `apps/stack` has a status satisfying `pred`.
async fn wait_bundle_status<P>(hub: &Member, what: &str, pred: P)
where
    P: Fn(&serde_json::Value) -> Result<(), String>,
{
    let pred = &pred;
    wait_for(&format!("hub: Bundle status {what}"), SYNC, || async move {
        let b = get_dynamic(hub, &bundles(), Some("apps"), "stack")
            .await?
            .ok_or("no Bundle")?;
        let status = b.data.get("status").cloned().unwrap_or_default();
        pred(&status).map_err(|e| format!("{e}; status: {status}"))
    })
    .await;
}

/// Condition Ready has `status` and the summary is `summary`.
fn expect_ready(s: &serde_json::Value, status: &str, summary: &str) -> Result<(), String> {
    let ready = s["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .ok_or("no Ready condition")?;
    if ready["status"] == status && s["summary"] == summary {
        Ok(())
    } else {
        Err(format!(
            "Ready {}, summary {}",
            ready["status"], s["summary"]
        ))
    }
}

/// The per-cluster entries, which must be exactly `names` in order.
fn clusters<'a>(
    s: &'a serde_json::Value,
    names: &[&str],
) -> Result<&'a Vec<serde_json::Value>, String> {
    let cs = s["clusters"].as_array().ok_or("no clusters")?;
    let got: Vec<&str> = cs.iter().filter_map(|c| c["cluster"].as_str()).collect();
    if got == names {
        Ok(cs)
    } else {
        Err(format!("clusters {got:?}"))
    }
}

/// A Bundle's own `clusterSelector` is ANDed with the rule's: only the
/// edge labelled `tier=gold` applies it; relabelled, its copy goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundle_cluster_selector_is_anded_with_the_rule() {
    let nats = NatsServer::start().unwrap();
    let m = hub_and_edges(&nats, &["e1", "e2"]).await;
    let (hub, e1, e2) = (&m[0], &m[1], &m[2]);
    kubectl(e1, &["label", "clusters.fleetbus.io", "e1", "tier=gold"]);
    apply_yaml(hub, &unwrap_rule("Delete"));
    let config = |name: &str, selector: &str| {
        format!(
            r#"apiVersion: fleetbus.io/v1alpha1
kind: Bundle
metadata: {{name: {name}, namespace: apps}}
spec:
  {selector}
  manifests:
    - apiVersion: v1
      kind: ConfigMap
      metadata: {{name: {name}}}
      data: {{a: b}}
"#
        )
    };
    apply_yaml(
        hub,
        &config("gold", "clusterSelector: {matchLabels: {tier: gold}}"),
    );
    apply_yaml(hub, &config("all", "clusterSelector: {}"));
    wait_obj(
        e1,
        &config_maps(),
        Some("apps"),
        "gold",
        "from the gold Bundle",
        |o| check_copy(o, "hub", "bundles"),
    )
    .await;
    // e2 got the Bundle for everyone; the gold one, published before, would
    // have come with it.
    wait_obj(
        e2,
        &config_maps(),
        Some("apps"),
        "all",
        "from the Bundle for all",
        |o| check_copy(o, "hub", "bundles"),
    )
    .await;
    assert_absent(e2, &config_maps(), Some("apps"), "gold").await;

    kubectl(e1, &["label", "clusters.fleetbus.io", "e1", "tier-"]);
    wait_absent(e1, &config_maps(), Some("apps"), "gold").await;
    get_dynamic(e1, &config_maps(), Some("apps"), "all")
        .await
        .unwrap()
        .expect("the copy of the Bundle for all stays");
}

/// The object's resourceVersion on `m` (devcluster versions are one counter
/// per server, so they order writes).
async fn version(m: &Member, ar: &ApiResource, ns: Option<&str>, name: &str) -> u64 {
    let o = get_dynamic(m, ar, ns, name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{}: {name} missing", m.name));
    o.resource_version()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name}: resourceVersion {:?}", o.resource_version()))
}

/// A Bundle listing a custom resource, a ConfigMap and a ServiceAccount in a
/// namespace `team`, the CRD and the Namespace itself, in that (reverse)
/// order: the edge writes the Namespace before the CRD and the
/// ServiceAccount before the ConfigMap (install ranks run as successive
/// waves of concurrent writes), and every manifest arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_applies_in_install_order() {
    let nats = NatsServer::start().unwrap();
    let m = hub_and_edges(&nats, &["e1"]).await;
    let (hub, e1) = (&m[0], &m[1]);
    apply_yaml(hub, &unwrap_rule("Delete"));
    apply_yaml(
        hub,
        r#"apiVersion: fleetbus.io/v1alpha1
kind: Bundle
metadata:
  name: stack
  namespace: apps
spec:
  manifests:
    - apiVersion: example.com/v1
      kind: Widget
      metadata: {name: w1, namespace: team}
      spec: {size: 3}
    - apiVersion: v1
      kind: ConfigMap
      metadata: {name: settings, namespace: team}
      data: {level: info}
    - apiVersion: v1
      kind: ServiceAccount
      metadata: {name: app, namespace: team}
    - apiVersion: apiextensions.k8s.io/v1
      kind: CustomResourceDefinition
      metadata: {name: widgets.example.com}
      spec:
        group: example.com
        scope: Namespaced
        names: {plural: widgets, singular: widget, kind: Widget}
        versions:
          - name: v1
            served: true
            storage: true
            schema:
              openAPIV3Schema:
                type: object
                x-kubernetes-preserve-unknown-fields: true
    - apiVersion: v1
      kind: Namespace
      metadata: {name: team}
"#,
    );
    let namespaces = resource("", "v1", "Namespace", "namespaces");
    let crds = resource(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    );
    let accounts = resource("", "v1", "ServiceAccount", "serviceaccounts");
    let widgets = resource("example.com", "v1", "Widget", "widgets");
    let any = |_: &DynamicObject| Ok(());
    wait_copy(
        e1,
        &widgets,
        Some("team"),
        "w1",
        "hub",
        "bundles",
        |o| match o.data["spec"]["size"].as_i64() {
            Some(3) => Ok(()),
            other => Err(format!("size {other:?}")),
        },
    )
    .await;
    wait_copy(
        e1,
        &config_maps(),
        Some("team"),
        "settings",
        "hub",
        "bundles",
        any,
    )
    .await;
    wait_copy(e1, &accounts, Some("team"), "app", "hub", "bundles", any).await;
    let ns = version(e1, &namespaces, None, "team").await;
    let crd = version(e1, &crds, None, "widgets.example.com").await;
    let sa = version(e1, &accounts, Some("team"), "app").await;
    let cm = version(e1, &config_maps(), Some("team"), "settings").await;
    assert!(
        ns < crd,
        "the Namespace ({ns}) is written before the CRD ({crd})"
    );
    assert!(
        sa < cm,
        "the ServiceAccount ({sa}) before the ConfigMap ({cm})"
    );
}

/// A Bundle cannot carry past an edge's import policy what a rule could
/// not: with its SyncPolicy deleted (the built-in default again), an edge
/// writes the Bundle's ServiceAccount and Deployment but not its
/// ClusterRole, and says so on the rule's status; the other edge, whose
/// policy lets it in, has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_brings_no_manifest_the_edge_refuses() {
    let nats = NatsServer::start().unwrap();
    let m = hub_and_edges(&nats, &["e1", "e2"]).await;
    let (hub, e1, e2) = (&m[0], &m[1], &m[2]);
    kubectl_delete(e2, "syncpolicies.fleetbus.io", None, "default");
    apply_yaml(hub, &unwrap_rule("Delete"));
    let uid = apply_bundle(hub, &[SERVICE_ACCOUNT, CLUSTER_ROLE, DEPLOYMENT]).await;
    wait_stack(e1, &uid).await;
    wait_unwrapped(e2, &service_accounts(), Some("apps"), "app", &uid).await;
    wait_unwrapped(e2, &deployments(), Some("apps"), "web", &uid).await;
    let r = wait_rule(
        e2,
        "bundles",
        "to say the ClusterRole was refused",
        |r| match rule_condition(r, "PolicyRefused") {
            Some(c)
                if c.reason == "ImportRefused" && c.message.contains("ClusterRole app-reader") =>
            {
                Ok(())
            }
            other => Err(format!("PolicyRefused is {other:?}")),
        },
    )
    .await;
    assert!(
        rule_condition(&r, "PolicyRefused")
            .unwrap()
            .message
            .contains("refused by the built-in default policy (import.rules[0])"),
        "{}",
        rule_summary(&r)
    );
    assert_absent(e2, &cluster_roles(), None, "app-reader").await;
}
