//! The stamp is inviolable: a rule whose mutations would
//! add, change or remove a `fleetbus.io/*` label or annotation (the stamp that
//! says whose copy it is) is `Invalid`, names the pointer, and makes no copy;
//! a valid rule next to it syncs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::rules::{stream, RuleBuilder};
use common::sync::*;
use fleetbus_testsupport::NatsServer;
use serde_json::{json, Value};

/// A ConfigMap rule named `name` for namespace `ns` with these `mutations`.
fn rule(name: &str, ns: &str, mutations: Value) -> RuleBuilder {
    RuleBuilder::new(name)
        .namespaces(&[ns])
        .mutations(mutations)
}

/// The probe's forgeries (the sink's own name as the origin: the copy then
/// outlived its source), the stamp's map replaced, the managed label removed;
/// and a valid rule beside them.
fn rules() -> String {
    let replace = |path: &str, value: &str| json!({"overrides": [{"type": "replace", "path": path, "value": value}]});
    stream(&[
        rule(
            "forge-origin",
            "forged",
            replace(
                "/metadata/annotations/fleetbus.io~1origin-cluster",
                "{{ .LocalCluster.name }}",
            ),
        ),
        rule(
            "forge-map",
            "forged",
            replace("/metadata/annotations", "{}"),
        ),
        rule(
            "forge-label",
            "forged",
            json!({"labels": {"remove": ["fleetbus.io/managed"]}}),
        ),
        rule(
            "plain",
            "plain",
            json!({"annotations": {"add": {"example.com/copied": "yes"}}}),
        ),
    ])
}

fn config_map(ns: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  namespace: {ns}\ndata:\n  k: v\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_forging_the_stamp_is_invalid_and_makes_no_copy() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "forged").await;
        create_ns(x, "plain").await;
    }
    apply_yaml(c1, &rules());
    // The forgeable object first, then the plain one: once the plain copy is
    // on c2, a forged copy would have been written too.
    apply_yaml(c1, &config_map("forged"));
    apply_yaml(c1, &config_map("plain"));
    let cms = resource("", "v1", "ConfigMap", "configmaps");
    let plain = data_is(json!({"k": "v"}));
    wait_copy(c2, &cms, Some("plain"), "cm", "c1", "plain", plain).await;
    let pointers = [
        (
            "forge-origin",
            "/metadata/annotations/fleetbus.io~1origin-cluster",
        ),
        ("forge-map", "/metadata/annotations"),
        ("forge-label", "/metadata/labels/fleetbus.io~1managed"),
    ];
    for x in [c1, c2] {
        for (name, pointer) in pointers {
            let r = wait_rule(x, name, "Invalid", ready_is("False", "Invalid")).await;
            let msg = rule_condition(&r, "Ready")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            assert!(
                msg.contains(pointer) && msg.contains("fleetbus.io/"),
                "{}: rule {name}: the message names {pointer}: {msg}",
                x.name
            );
        }
        wait_rule(x, "plain", "Synced", ready_is("True", "Synced")).await;
    }
    assert_absent(c2, &cms, Some("forged"), "cm").await;
}
