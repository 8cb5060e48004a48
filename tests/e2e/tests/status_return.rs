//! Status return end to end: copies keep the
//! status their cluster wrote (no status subresource, KubeStellar #1894);
//! `Singleton` writes a copy's status into the source's status without
//! wiping what others wrote there; `PerCluster` keeps one ReportedState per
//! (object, cluster) and a readiness summary on the rule; reports travel on
//! `fleetbus.status.>`, only when they change, and garbage there changes
//! nothing.
//!
//! The devcluster runs no controllers: the tests write a copy's status as its
//! controller would (`kubectl patch --subresource=status` where the kind has
//! the subresource, a plain patch where it has not).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_testsupport::{wait_for, NatsServer};
use futures::StreamExt;
use kube::api::ApiResource;
use kube::ResourceExt;
use serde_json::{json, Value};

/// A CRD `Gadget` without a status subresource: `.status` is part of the object.
const GADGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: gadgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget, listKind: GadgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
            status: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

fn gadgets() -> ApiResource {
    resource("example.com", "v1", "Gadget", "gadgets")
}

fn deployments() -> ApiResource {
    resource("apps", "v1", "Deployment", "deployments")
}

fn reported_states() -> ApiResource {
    resource("fleetbus.io", "v1alpha1", "ReportedState", "reportedstates")
}

/// Installs the Gadget CRD on `m` and waits until kubectl lists gadgets.
async fn install_gadgets(m: &Member) {
    apply_crd(m, GADGET_CRD, "gadgets").await;
}

/// Rule `name` for the `group/v1` `kind` objects of namespace `apps`, with
/// this `statusReturn`.
fn status_rule(name: &str, group: &str, kind: &str, status_return: &str) -> RuleBuilder {
    RuleBuilder::new(name)
        .kind(group, "v1", kind)
        .namespaces(&["apps"])
        .spec("statusReturn", status_return.into())
}

fn gadget(size: i64) -> String {
    format!(
        "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {{name: g, namespace: apps}}\nspec: {{size: {size}}}\n"
    )
}

const DEPLOYMENT: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: apps}
spec:
  replicas: 1
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: nginx}]}
"#;

fn status_of(o: &kube::api::DynamicObject) -> Value {
    o.data.get("status").cloned().unwrap_or(Value::Null)
}

/// Writes `status` (a merge patch) as the copy's controller would.
fn patch_status(m: &Member, resource: &str, name: &str, subresource: bool, status: Value) {
    let patch = json!({ "status": status }).to_string();
    let mut args = vec![
        "patch",
        resource,
        name,
        "-n",
        "apps",
        "--type=merge",
        "-p",
        &patch,
    ];
    if subresource {
        args.push("--subresource=status");
    }
    kubectl(m, &args);
}

/// What a Deployment controller writes once one replica of generation
/// `generation` is available (kstatus wants the `Available` condition; the
/// `Progressing` one is what a real API server's default progress deadline
/// makes it wait for too).
fn rolled_out(generation: i64) -> Value {
    json!({"observedGeneration": generation, "replicas": 1, "updatedReplicas": 1,
           "readyReplicas": 1, "availableReplicas": 1,
           "conditions": [{"type": "Available", "status": "True"},
                          {"type": "Progressing", "status": "True",
                           "reason": "NewReplicaSetAvailable"}]})
}

fn generation(o: &kube::api::DynamicObject) -> i64 {
    o.metadata.generation.unwrap_or(1)
}

/// Item 1 (KubeStellar #1894): a copy of a kind without a status subresource
/// keeps the status written on its sink when a source change rewrites it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_status_survives_source_changes_without_status_subresource() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "apps").await;
        install_gadgets(x).await;
    }
    apply_yaml(
        c1,
        &status_rule("gadgets", "example.com", "Gadget", "None").yaml(),
    );
    apply_yaml(c1, &gadget(1));
    wait_copy(c2, &gadgets(), Some("apps"), "g", "c1", "gadgets", |_| {
        Ok(())
    })
    .await;
    patch_status(c2, "gadget", "g", false, json!({"phase": "Running"}));

    apply_yaml(c1, &gadget(2));
    let copy = wait_copy(c2, &gadgets(), Some("apps"), "g", "c1", "gadgets", |o| {
        if o.data["spec"]["size"] == 2 {
            Ok(())
        } else {
            Err("not updated yet".into())
        }
    })
    .await;
    assert_eq!(
        status_of(&copy),
        json!({"phase": "Running"}),
        "the sink's status must survive the replace"
    );
}

/// Singleton, for a kind without a status subresource (Gadget) and one with
/// it (Deployment): the only copy's status lands in the source's status;
/// a field someone else wrote there survives; a field the copy drops goes;
/// when no cluster reports any more, every field fleetbus wrote goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn singleton_returns_the_copy_status_without_wiping_others() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "apps").await;
        install_gadgets(x).await;
    }
    apply_yaml(
        c1,
        &status_rule("gadgets", "example.com", "Gadget", "Singleton").yaml(),
    );
    apply_yaml(
        c1,
        &status_rule("web", "apps", "Deployment", "Singleton").yaml(),
    );
    apply_yaml(c1, &gadget(1));
    apply_yaml(c1, DEPLOYMENT);
    // Someone else's status on the source (not fleetbus's to remove).
    patch_status(c1, "gadget", "g", false, json!({"owner": "hub"}));
    patch_status(c1, "deployment", "web", true, json!({"collisionCount": 7}));

    for (ar, resource, subresource, owned) in [
        (gadgets(), "gadget", false, ("owner", json!("hub"))),
        (
            deployments(),
            "deployment",
            true,
            ("collisionCount", json!(7)),
        ),
    ] {
        let name = if resource == "gadget" { "g" } else { "web" };
        let rule = if resource == "gadget" {
            "gadgets"
        } else {
            "web"
        };
        let copy = wait_copy(c2, &ar, Some("apps"), name, "c1", rule, |_| Ok(())).await;
        let mut full = rolled_out(generation(&copy));
        full["conditions"] = json!([{"type": "Available", "status": "True"}]);
        patch_status(c2, resource, name, subresource, full.clone());
        wait_obj(
            c1,
            &ar,
            Some("apps"),
            name,
            "to carry the copy's status",
            |o| {
                let s = status_of(o);
                if s["availableReplicas"] == 1 && s["conditions"][0]["type"] == "Available" {
                    Ok(())
                } else {
                    Err(format!("status {s}"))
                }
            },
        )
        .await;
        let now = get_dynamic(c1, &ar, Some("apps"), name)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status_of(&now)[owned.0], owned.1, "{resource}: kept");

        // The copy's controller drops a field: it goes on the source too.
        let json_patch = r#"[{"op": "remove", "path": "/status/conditions"}]"#;
        let mut args = vec![
            "patch",
            resource,
            name,
            "-n",
            "apps",
            "--type=json",
            "-p",
            json_patch,
        ];
        if subresource {
            args.push("--subresource=status");
        }
        kubectl(c2, &args);
        wait_obj(
            c1,
            &ar,
            Some("apps"),
            name,
            "to lose the dropped field",
            |o| {
                let s = status_of(o);
                // Absent, or an empty list where the sink's API server keeps one.
                let dropped = s
                    .get("conditions")
                    .is_none_or(|c| c.as_array().is_some_and(Vec::is_empty));
                if dropped && s["availableReplicas"] == 1 {
                    Ok(())
                } else {
                    Err(format!("status {s}"))
                }
            },
        )
        .await;
        let now = get_dynamic(c1, &ar, Some("apps"), name)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(status_of(&now)[owned.0], owned.1, "{resource}: still kept");
    }

    // The Deployment rule goes, and with it the only watch on Deployments:
    // fleetbus's fields are still cleared, the others' stay.
    kubectl(c1, &["delete", "resourcesyncrule", "web"]);
    wait_obj(
        c1,
        &deployments(),
        Some("apps"),
        "web",
        "to keep only others' status after its rule is deleted",
        |o| match status_of(o) {
            s if s.get("availableReplicas").is_none() && s["collisionCount"] == 7 => Ok(()),
            s => Err(format!("status {s}")),
        },
    )
    .await;

    // No status returned any more (no cluster reports): fleetbus's fields
    // go, the others' stay.
    kubectl(
        c1,
        &[
            "patch",
            "resourcesyncrule",
            "gadgets",
            "--type=merge",
            "-p",
            r#"{"spec":{"statusReturn":"None"}}"#,
        ],
    );
    wait_obj(
        c1,
        &gadgets(),
        Some("apps"),
        "g",
        "to keep only others' status",
        |o| match status_of(o) {
            s if s == json!({"owner": "hub"}) => Ok(()),
            s => Err(format!("status {s}")),
        },
    )
    .await;
}

/// The ReportedStates of `name` on `m` (namespace `apps`), by cluster.
async fn states_of(m: &Member, name: &str) -> Result<BTreeMap<String, Value>, String> {
    let list = dynamic(m, &reported_states(), Some("apps"))
        .list(&Default::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .into_iter()
        .filter(|o| o.data["spec"]["objectRef"]["name"] == name)
        .map(|o| {
            let cluster = o.data["spec"]["cluster"].as_str().unwrap_or("").to_owned();
            (
                cluster,
                json!({"name": o.name_any(), "uid": o.uid(), "status": o.data.get("status")}),
            )
        })
        .collect())
}

async fn wait_states<P>(m: &Member, name: &str, what: &str, pred: P) -> BTreeMap<String, Value>
where
    P: Fn(&BTreeMap<String, Value>) -> bool,
{
    let pred = &pred;
    wait_for(
        &format!("{}: ReportedStates of {name} {what}", m.name),
        SYNC,
        || async move {
            let states = states_of(m, name).await?;
            if pred(&states) {
                Ok(states)
            } else {
                Err(format!("{states:?}"))
            }
        },
    )
    .await
}

async fn wait_readiness(m: &Member, rule: &str, want: &'static str) {
    wait_rule(m, rule, want, |r| {
        match r.status.as_ref().and_then(|s| s.readiness.as_deref()) {
            Some(x) if x == want => Ok(()),
            other => Err(format!("readiness {other:?}")),
        }
    })
    .await;
}

/// Messages seen on `fleetbus.status.>`, by subject.
type Seen = std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>;

/// Whether `subject` is a report of `cluster` about a `kind` (the group
/// token may be escaped, so it is not compared).
fn about(subject: &str, cluster: &str, kind: &str) -> bool {
    subject.starts_with(&format!("fleetbus.status.{cluster}."))
        && subject.contains(&format!(".{kind}.apps."))
}

fn count(seen: &Seen, cluster: &str, kind: &str) -> usize {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(s, _)| about(s, cluster, kind))
        .count()
}

/// A plain NATS client recording every message on `fleetbus.status.>`.
async fn watch_status(
    nats: &NatsServer,
) -> (async_nats::Client, Seen, tokio::task::JoinHandle<()>) {
    let client = async_nats::connect(nats.url()).await.unwrap();
    let mut sub = client.subscribe("fleetbus.status.>").await.unwrap();
    client.flush().await.unwrap();
    let seen: Seen = Default::default();
    let collector = {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                let v = serde_json::from_slice(&msg.payload).unwrap_or(Value::Null);
                seen.lock().unwrap().push((msg.subject.to_string(), v));
            }
        })
    };
    (client, seen, collector)
}

fn last(seen: &Seen, cluster: &str, kind: &str) -> Option<Value> {
    seen.lock()
        .unwrap()
        .iter()
        .rfind(|(s, _)| about(s, cluster, kind))
        .map(|(_, v)| v.clone())
}

/// PerCluster with two edges (env=edge) and the hub c1: one ReportedState
/// per (object, cluster) with the raw status; `ready 0/2` → `1/2` → `2/2`;
/// a pass that changes nothing publishes nothing; garbage on the status
/// subjects is counted and changes nothing; a cluster relabelled out and the
/// source deleted remove their ReportedStates. A Gadget (no status
/// subresource) gets its ReportedStates too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_cluster_reported_states_and_readiness() {
    let nats = NatsServer::start().unwrap();
    let (client, seen, collector) = watch_status(&nats).await;

    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "apps").await;
        install_gadgets(x).await;
    }
    for x in [c2, c3] {
        kubectl(x, &["label", "clusters.fleetbus.io", &x.name, "env=edge"]);
    }
    let edges = [("env", "edge")];
    apply_yaml(
        c1,
        &status_rule("web", "apps", "Deployment", "PerCluster")
            .sinks(&edges)
            .yaml(),
    );
    apply_yaml(
        c1,
        &status_rule("gadgets", "example.com", "Gadget", "PerCluster")
            .sinks(&edges)
            .yaml(),
    );
    apply_yaml(c1, DEPLOYMENT);
    apply_yaml(c1, &gadget(1));

    // Both copies exist, neither rolled out yet.
    let states = wait_states(c1, "web", "for c2 and c3", |s| s.len() == 2).await;
    let c2_name = states["c2"]["name"].as_str().unwrap_or_default();
    assert!(c2_name.starts_with("deployment.web.c2."), "{c2_name}");
    assert_eq!(states["c3"]["status"]["ready"], false);
    // Not rolled out: kstatus says why, and the ReportedState carries it.
    assert_eq!(
        states["c3"]["status"]["health"]["status"], "InProgress",
        "{}",
        states["c3"]
    );
    wait_readiness(c1, "web", "ready 0/2").await;
    // The Gadget has no status subresource and no status: ready by existing.
    wait_states(c1, "g", "for c2 and c3, ready", |s| {
        s.len() == 2 && s.values().all(|v| v["status"]["ready"] == true)
    })
    .await;
    wait_readiness(c1, "gadgets", "ready 2/2").await;
    patch_status(c2, "gadget", "g", false, json!({"phase": "Up"}));
    let states = wait_states(c1, "g", "with c2's raw status", |s| {
        s.get("c2")
            .is_some_and(|v| v["status"]["status"] == json!({"phase": "Up"}))
    })
    .await;
    // Someone else edits a ReportedState: the origin writes it back, although the
    // report did not change.
    let state_name = states["c2"]["name"].as_str().unwrap_or_default().to_owned();
    patch_status(
        c1,
        "reportedstate",
        &state_name,
        true,
        json!({"ready": false, "status": {"phase": "Edited"}}),
    );
    wait_states(c1, "g", "repaired after an edit", |s| {
        s.get("c2").is_some_and(|v| {
            v["status"]["status"] == json!({"phase": "Up"}) && v["status"]["ready"] == true
        })
    })
    .await;

    for (i, edge) in [c2, c3].into_iter().enumerate() {
        let copy = wait_copy(
            edge,
            &deployments(),
            Some("apps"),
            "web",
            "c1",
            "web",
            |_| Ok(()),
        )
        .await;
        patch_status(
            edge,
            "deployment",
            "web",
            true,
            rolled_out(generation(&copy)),
        );
        wait_readiness(c1, "web", if i == 0 { "ready 1/2" } else { "ready 2/2" }).await;
    }
    let states = wait_states(c1, "web", "with c2's raw status", |s| {
        s.get("c2")
            .is_some_and(|v| v["status"]["status"]["availableReplicas"] == 1)
    })
    .await;
    assert_eq!(states["c2"]["status"]["ready"], true);
    assert_eq!(
        states["c2"]["status"]["health"],
        json!({"status": "Current", "message": "Deployment is available. Replicas: 1"})
    );
    let table = kubectl(c1, &["get", "resourcesyncrules", "web"]);
    assert!(
        table.contains("READY COPIES") && table.contains("ready 2/2"),
        "{table}"
    );

    // A pass on c2 that changes no status publishes nothing: a label on the
    // copy is drift, corrected (a write, a new resourceVersion, a pass).
    let before = count(&seen, "c2", "Deployment");
    assert!(before >= 2, "c2 reported its copy at least twice");
    kubectl(c2, &["label", "deployment", "web", "-n", "apps", "extra=1"]);
    wait_copy(c2, &deployments(), Some("apps"), "web", "c1", "web", |o| {
        if o.labels().contains_key("extra") {
            Err("not corrected yet".into())
        } else {
            Ok(())
        }
    })
    .await;
    // Later, c3 changes: its report arrives; c2 sent none meanwhile.
    let c3_before = count(&seen, "c3", "Deployment");
    let mut note = rolled_out(1);
    note["collisionCount"] = json!(1);
    patch_status(c3, "deployment", "web", true, note);
    wait_for("c3's new report", SYNC, || async {
        if count(&seen, "c3", "Deployment") > c3_before {
            Ok(())
        } else {
            Err("none yet".into())
        }
    })
    .await;
    assert_eq!(
        count(&seen, "c2", "Deployment"),
        before,
        "c2 republished an unchanged status"
    );

    // Garbage on a status subject: counted, nothing changes.
    let js = async_nats::jetstream::new(client.clone());
    js.publish(
        "fleetbus.status.x.apps.v1.Deployment.apps.web",
        "garbage".into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    c1.wait_metric_at_least(
        r#"fleetbus_sync_rejected_total{reason="status_malformed"}"#,
        1.0,
    )
    .await;
    assert_eq!(states_of(c1, "web").await.unwrap().len(), 2);
    wait_readiness(c1, "web", "ready 2/2").await;

    // c3 leaves the selection: its copy goes, and with it its ReportedState.
    kubectl(
        c3,
        &[
            "label",
            "clusters.fleetbus.io",
            "c3",
            "env=off",
            "--overwrite",
        ],
    );
    wait_absent(c3, &deployments(), Some("apps"), "web").await;
    wait_states(c1, "web", "without c3", |s| {
        s.len() == 1 && s.contains_key("c2")
    })
    .await;
    wait_readiness(c1, "web", "ready 1/1").await;
    let gone = last(&seen, "c3", "Deployment");
    assert_eq!(gone.as_ref().map(|v| &v["status"]), Some(&Value::Null));

    // The source is deleted: the rest goes.
    kubectl_delete(c1, "deployment", Some("apps"), "web");
    wait_states(c1, "web", "to be gone", BTreeMap::is_empty).await;
    collector.abort();
}

/// c1 and c2 with namespace `apps` and the Gadget CRD, c2 labelled `env=edge`.
async fn gadget_fleet(nats: &NatsServer) -> Vec<Member> {
    let m = fleet(nats, &["c1", "c2"]).await;
    for x in &m {
        create_ns(x, "apps").await;
        install_gadgets(x).await;
    }
    kubectl(&m[1], &["label", "clusters.fleetbus.io", "c2", "env=edge"]);
    m
}

/// A rule's own health check (CEL over the live copy, `spec.health`) decides
/// `ready r/n` on the origin, although the rule returns no status: `failed`
/// wins over `current`, and the source's status is not written. A rule whose
/// expression does not compile is `Invalid` on every cluster, with the parser's
/// message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rules_cel_health_decides_readiness_and_a_bad_one_is_invalid() {
    let nats = NatsServer::start().unwrap();
    let m = gadget_fleet(&nats).await;
    let (c1, c2) = (&m[0], &m[1]);
    let health = json!({
        "current": "has(object.status) && object.status.phase == 'Up'",
        "failed": "has(object.status) && object.status.phase == 'Broken'",
    });
    apply_yaml(
        c1,
        &status_rule("gadgets", "example.com", "Gadget", "None")
            .sinks(&[("env", "edge")])
            .spec("health", health)
            .yaml(),
    );
    apply_yaml(
        c1,
        &status_rule("bad-health", "example.com", "Gadget", "None")
            .spec("health", json!({"current": "object.status.phase =="}))
            .yaml(),
    );
    apply_yaml(c1, &gadget(1));

    wait_copy(c2, &gadgets(), Some("apps"), "g", "c1", "gadgets", |_| {
        Ok(())
    })
    .await;
    wait_readiness(c1, "gadgets", "ready 0/1").await;
    patch_status(c2, "gadget", "g", false, json!({"phase": "Up"}));
    wait_readiness(c1, "gadgets", "ready 1/1").await;
    patch_status(c2, "gadget", "g", false, json!({"phase": "Broken"}));
    wait_readiness(c1, "gadgets", "ready 0/1").await;
    // The origin's rule names the copy that is not Current, and why.
    wait_rule(
        c1,
        "gadgets",
        "Healthy=False naming c2's copy",
        |r| match rule_condition(r, "Healthy") {
            Some(c)
                if c.status == "False"
                    && c.message
                        .contains("c2: Gadget apps/g: Failed (spec.health.failed is true)") =>
            {
                Ok(())
            }
            other => Err(format!("Healthy is {other:?}")),
        },
    )
    .await;
    // statusReturn None: nothing of the copy's status reaches the source.
    let source = get_dynamic(c1, &gadgets(), Some("apps"), "g")
        .await
        .unwrap()
        .expect("the source Gadget");
    assert_eq!(status_of(&source), Value::Null, "{source:?}");

    for x in [c1, c2] {
        let r = wait_rule(x, "bad-health", "Invalid", ready_is("False", "Invalid")).await;
        let msg = rule_condition(&r, "Ready")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        assert!(
            msg.contains("spec.health.current: does not compile"),
            "{}: {msg}",
            x.name
        );
    }
}

/// A health expression too costly to run (seven loops nested over ten
/// elements: ten million iterations per evaluation) makes its rule Invalid on
/// every cluster, naming the field, the estimate and the limit, and costs no
/// sink anything. One the estimate admits but a copy's lists make too costly
/// is stopped on the sink, and the origin's rule names the copy with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_costly_health_expression_is_refused_or_stopped_and_says_why() {
    let nats = NatsServer::start().unwrap();
    let m = gadget_fleet(&nats).await;
    let (c1, c2) = (&m[0], &m[1]);
    let mut seven = "g >= 0".to_owned();
    for v in ["g", "f", "e", "d", "c", "b", "a"] {
        seven = format!("[0,1,2,3,4,5,6,7,8,9].all({v}, {seven})");
    }
    apply_yaml(
        c1,
        &status_rule("costly", "example.com", "Gadget", "None")
            .spec("health", json!({ "current": seven }))
            .yaml(),
    );
    // Two loops over the copy's list: 10,100 estimated, 400 + 400 × 400 run.
    let pairs = "object.spec.items.all(x, object.spec.items.all(y, y == x))";
    apply_yaml(
        c1,
        &status_rule("pairs", "example.com", "Gadget", "None")
            .sinks(&[("env", "edge")])
            .spec("health", json!({ "current": pairs }))
            .yaml(),
    );
    apply_yaml(
        c1,
        &format!(
            "apiVersion: example.com/v1\nkind: Gadget\nmetadata: {{name: g, namespace: apps}}\nspec: {{items: {:?}}}\n",
            vec![1; 400]
        ),
    );

    for x in [c1, c2] {
        let r = wait_rule(x, "costly", "Invalid", ready_is("False", "Invalid")).await;
        let msg = rule_condition(&r, "Ready")
            .map(|c| c.message.clone())
            .unwrap_or_default();
        for part in [
            "spec.health.current: `[0,1,2,3,4,5,6,7,8,9].all(a, ",
            "is too costly: its estimated cost is 11111110, above the limit of 100000",
        ] {
            assert!(msg.contains(part), "{}: {part} not in {msg}", x.name);
        }
    }
    wait_copy(c2, &gadgets(), Some("apps"), "g", "c1", "pairs", |_| Ok(())).await;
    wait_readiness(c1, "pairs", "ready 0/1").await;
    wait_rule(
        c1,
        "pairs",
        "Healthy=False naming c2's copy and why",
        |r| match rule_condition(r, "Healthy") {
            Some(c)
                if c.status == "False"
                    && c.message.contains(
                        "c2: Gadget apps/g: Unknown (spec.health.current `object.spec.items.all(x, ",
                    )
                    && c.message.contains("stopped: it would cost more than 100000") =>
            {
                Ok(())
            }
            other => Err(format!("Healthy is {other:?}")),
        },
    )
    .await;
}

/// Sinks read their own last reports back at start: a restarted sink
/// republishes nothing unchanged, and one whose copy went away while it was
/// down (relabelled out of the selection meanwhile) publishes `null`, so the
/// origin removes that cluster's ReportedState. A restarted origin keeps its
/// ReportedStates (none deleted while it reads its kinds and rules again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_sink_reads_back_its_reports() {
    let nats = NatsServer::start().unwrap();
    let (_client, seen, collector) = watch_status(&nats).await;
    let mut m = fleet(&nats, &["c1", "c2", "c3"]).await;
    for x in &m {
        create_ns(x, "apps").await;
        install_gadgets(x).await;
    }
    for x in &m[1..] {
        kubectl(x, &["label", "clusters.fleetbus.io", &x.name, "env=edge"]);
    }
    let edges = [("env", "edge")];
    apply_yaml(
        &m[0],
        &status_rule("gadgets", "example.com", "Gadget", "PerCluster")
            .sinks(&edges)
            .yaml(),
    );
    apply_yaml(&m[0], &gadget(1));
    wait_states(&m[0], "g", "for c2 and c3", |s| s.len() == 2).await;
    let before = count(&seen, "c2", "Gadget");

    // c2 restarts; later its copy's status changes: exactly one new report.
    m[1].agent.restart().unwrap();
    wait_readyz(&m[1], 200, CONVERGE).await;
    patch_status(&m[1], "gadget", "g", false, json!({"phase": "Up"}));
    wait_states(&m[0], "g", "with c2's new status", |s| {
        s.get("c2")
            .is_some_and(|v| v["status"]["status"] == json!({"phase": "Up"}))
    })
    .await;
    assert_eq!(
        count(&seen, "c2", "Gadget"),
        before + 1,
        "a restart republished an unchanged report: {:#?}",
        seen.lock().unwrap()
    );

    // The origin restarts: its ReportedStates stay (the same objects), and a
    // later report still updates them.
    let uids = |states: &BTreeMap<String, Value>| -> Vec<Value> {
        states.values().map(|v| v["uid"].clone()).collect()
    };
    let kept = uids(&states_of(&m[0], "g").await.unwrap());
    m[0].agent.restart().unwrap();
    wait_readyz(&m[0], 200, CONVERGE).await;
    patch_status(&m[1], "gadget", "g", false, json!({"phase": "Down"}));
    let now = wait_states(&m[0], "g", "with c2's status after the restart", |s| {
        s.get("c2")
            .is_some_and(|v| v["status"]["status"] == json!({"phase": "Down"}))
    })
    .await;
    assert_eq!(uids(&now), kept, "ReportedStates were recreated");

    // c3 is relabelled out while its agent is down.
    m[2].agent.stop();
    kubectl(
        &m[2],
        &[
            "label",
            "clusters.fleetbus.io",
            "c3",
            "env=off",
            "--overwrite",
        ],
    );
    m[2].agent.restart().unwrap();
    wait_absent(&m[2], &gadgets(), Some("apps"), "g").await;
    wait_states(&m[0], "g", "without c3", |s| {
        s.len() == 1 && s.contains_key("c2")
    })
    .await;
    assert_eq!(
        last(&seen, "c3", "Gadget").map(|v| v["status"].clone()),
        Some(Value::Null)
    );
    collector.abort();
}

/// Status fleetbus returned before the origin stopped is still cleared when, on
/// its return, no report wants it any more (its memory of what it applied is gone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_origin_clears_status_no_longer_returned() {
    let nats = NatsServer::start().unwrap();
    let mut m = fleet(&nats, &["c1", "c2"]).await;
    for x in &m {
        create_ns(x, "apps").await;
        install_gadgets(x).await;
    }
    apply_yaml(
        &m[0],
        &status_rule("gadgets", "example.com", "Gadget", "Singleton").yaml(),
    );
    apply_yaml(&m[0], &gadget(1));
    patch_status(&m[0], "gadget", "g", false, json!({"owner": "hub"}));
    let copy = wait_copy(
        &m[1],
        &gadgets(),
        Some("apps"),
        "g",
        "c1",
        "gadgets",
        |_| Ok(()),
    )
    .await;
    patch_status(&m[1], "gadget", "g", false, rolled_out(generation(&copy)));
    wait_obj(
        &m[0],
        &gadgets(),
        Some("apps"),
        "g",
        "to carry the copy's status",
        |o| match status_of(o) {
            s if s["availableReplicas"] == 1 && s["owner"] == "hub" => Ok(()),
            s => Err(format!("status {s}")),
        },
    )
    .await;

    // While the origin's agent is down, the rule stops returning status.
    m[0].agent.kill9();
    kubectl(
        &m[0],
        &[
            "patch",
            "resourcesyncrule",
            "gadgets",
            "--type=merge",
            "-p",
            r#"{"spec":{"statusReturn":"None"}}"#,
        ],
    );
    m[0].agent.restart().unwrap();
    wait_obj(
        &m[0],
        &gadgets(),
        Some("apps"),
        "g",
        "to keep only others' status after a restart",
        |o| match status_of(o) {
            s if s == json!({"owner": "hub"}) => Ok(()),
            s => Err(format!("status {s}")),
        },
    )
    .await;
}
