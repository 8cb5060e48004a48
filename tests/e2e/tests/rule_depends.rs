//! `spec.dependsOn`, with real agents and devclusters driven by
//! kubectl: on a sink, a rule's copies wait until the rules it depends on
//! are synced and healthy there (the dependency's Deployment rolled out, as
//! its controller reports it), the waiting rule says why; a cycle makes
//! every rule on it Invalid, naming the cycle.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use crate::common;

use common::rules::{stream, RuleBuilder};
use common::sync::*;
use serde_json::json;

use fleetbus_testsupport::NatsServer;

/// `web` (ConfigMaps) depends on `db` (Deployments); `loop-a` and `loop-b`
/// depend on each other.
fn rules() -> String {
    stream(&[
        RuleBuilder::new("db")
            .kind("apps", "v1", "Deployment")
            .namespaces(&["db"]),
        RuleBuilder::new("web")
            .spec("dependsOn", json!(["db"]))
            .namespaces(&["web"]),
        RuleBuilder::new("loop-a")
            .kind("", "v1", "Secret")
            .spec("dependsOn", json!(["loop-b"])),
        RuleBuilder::new("loop-b")
            .kind("", "v1", "Secret")
            .spec("dependsOn", json!(["loop-a"])),
    ])
}

const DB: &str = r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: db, namespace: db}
spec:
  replicas: 1
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec: {containers: [{name: db, image: "postgres:17"}]}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_waits_for_its_dependencies_to_be_healthy_and_cycles_are_invalid() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "db").await;
        create_ns(x, "web").await;
    }
    apply_yaml(c1, DB);
    kubectl(
        c1,
        &[
            "-n",
            "web",
            "create",
            "configmap",
            "site",
            "--from-literal=url=http://db",
        ],
    );
    apply_yaml(c1, &rules());

    // The dependency's copy arrives; it is not rolled out, so web waits.
    let db = wait_copy(
        c2,
        &resource("apps", "v1", "Deployment", "deployments"),
        Some("db"),
        "db",
        "c1",
        "db",
        |_| Ok(()),
    )
    .await;
    wait_rule(c2, "web", "waiting for db", |r| {
        match rule_condition(r, "Ready") {
            Some(c)
                if c.status == "False"
                    && c.reason == "DependsOn"
                    && c.message.contains("rule db: 0/1 copies Current")
                    && c.message.contains("1 copy(ies) would be created") =>
            {
                Ok(())
            }
            other => Err(format!("Ready is {other:?}")),
        }
    })
    .await;
    assert_absent(
        c2,
        &resource("", "v1", "ConfigMap", "configmaps"),
        Some("web"),
        "site",
    )
    .await;

    // Play the Deployment controller on c2: rolled out → web's copy comes.
    let generation = db.metadata.generation.unwrap_or(1);
    let status = json!({"status": {"observedGeneration": generation, "replicas": 1,
        "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [{"type": "Available", "status": "True"}]}})
    .to_string();
    kubectl(
        c2,
        &[
            "-n",
            "db",
            "patch",
            "deployment",
            "db",
            "--subresource=status",
            "--type=merge",
            "-p",
            &status,
        ],
    );
    wait_copy(
        c2,
        &resource("", "v1", "ConfigMap", "configmaps"),
        Some("web"),
        "site",
        "c1",
        "web",
        data_is(json!({"url": "http://db"})),
    )
    .await;
    wait_rule(c2, "web", "Synced", ready_is("True", "Synced")).await;

    // A cycle: both rules Invalid on every cluster, the cycle named.
    for x in [c1, c2] {
        for name in ["loop-a", "loop-b"] {
            let r = wait_rule(x, name, "Invalid", ready_is("False", "Invalid")).await;
            let msg = rule_condition(&r, "Ready")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            assert!(
                msg.contains("dependsOn cycle: loop-a → loop-b → loop-a"),
                "{}: {name}: {msg}",
                x.name
            );
        }
    }
}
