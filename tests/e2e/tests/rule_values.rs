//! `spec.valuesFrom`, with real agents and devclusters driven by
//! kubectl: templates read `.Values` from a ConfigMap each sink owns; a sink
//! without it reports why and writes nothing; creating or changing it there
//! rewrites that sink's copy only.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use crate::common;

use common::rules::RuleBuilder;
use common::sync::*;
use common::{Member, NAMESPACE};
use fleetbus_testsupport::NatsServer;
use serde_json::json;

/// ConfigMaps of `apps`, whose `data.registry` each sink fills from its
/// own values (its ConfigMap `region`).
fn rule() -> RuleBuilder {
    RuleBuilder::new("app-config")
        .spec("valuesFrom", json!([{"configMapRef": {"name": "region"}}]))
        .namespaces(&["apps"])
        .mutations(json!({"overrides": [
            {"type": "replace", "path": "/data/registry", "value": "{{ .Values.registry }}"}
        ]}))
}

fn region(m: &Member, registry: &str) {
    let yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: region, namespace: {NAMESPACE}}}\ndata: {{registry: {registry}}}\n"
    );
    apply_yaml(m, &yaml);
}

/// Waits until `m`'s copy of `apps/app` carries `registry` (from its values).
async fn wait_app(m: &Member, registry: &str) {
    let want = data_is(json!({"image": "app:1", "registry": registry}));
    wait_copy(
        m,
        &config_maps(),
        Some("apps"),
        "app",
        "c1",
        "app-config",
        want,
    )
    .await;
}

fn config_maps() -> kube::api::ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn templates_read_each_sinks_own_values() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "apps").await;
    }
    region(c1, "registry.us.example.com");
    region(c2, "registry.eu.example.com");
    apply_yaml(c1, &rule().yaml());
    kubectl(
        c1,
        &[
            "-n",
            "apps",
            "create",
            "configmap",
            "app",
            "--from-literal=image=app:1",
        ],
    );

    wait_app(c2, "registry.eu.example.com").await;

    // c3 has no values: nothing written there, and its rule says why.
    wait_rule(
        c3,
        "app-config",
        "the missing ConfigMap named",
        |r| match rule_condition(r, "Ready") {
            Some(c)
                if c.reason == "SyncErrors"
                    && c.message.contains(&format!(
                        "valuesFrom ConfigMap {NAMESPACE}/region not found on this cluster"
                    )) =>
            {
                Ok(())
            }
            other => Err(format!("Ready is {other:?}")),
        },
    )
    .await;
    assert_absent(c3, &config_maps(), Some("apps"), "app").await;
    region(c3, "registry.ap.example.com");
    wait_app(c3, "registry.ap.example.com").await;
    wait_rule(c3, "app-config", "Synced", ready_is("True", "Synced")).await;

    // A sink's values change: its copy follows, the others do not move.
    region(c2, "registry.eu2.example.com");
    wait_app(c2, "registry.eu2.example.com").await;
    let c3_copy = get_dynamic(c3, &config_maps(), Some("apps"), "app")
        .await
        .unwrap()
        .expect("c3's copy");
    assert_eq!(data(&c3_copy)["registry"], "registry.ap.example.com");
}
