//! Rule sync of other kinds and shapes end to end: a CRD
//! kind that appears after its rule, missing namespaces, renaming/moving
//! overrides with cleanup, GVK rewrite and `syncStatus`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_testsupport::NatsServer;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt};

fn widgets() -> kube::api::ApiResource {
    resource("example.com", "v1", "Widget", "widgets")
}

fn gadgets() -> kube::api::ApiResource {
    resource("example.com", "v1", "Gadget", "gadgets")
}

/// Every Widget (`example.com/v1`), from every cluster to every cluster.
fn widget_rule() -> RuleBuilder {
    RuleBuilder::new("widgets").kind("example.com", "v1", "Widget")
}

const WIDGET: &str = r#"apiVersion: example.com/v1
kind: Widget
metadata: {name: w1, namespace: default}
spec: {size: 3, color: blue}
"#;

/// A rule for `example.com/v1 Widget` before the kind is served is Invalid
/// (on its origin and on its copy's cluster); once the CRD is installed the
/// rule turns Ready without a restart and a Widget syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_kind_later() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    apply_yaml(c1, &widget_rule().yaml());
    wait_rule_copy(c2, "widgets", "c1").await;
    for x in [c1, c2] {
        wait_rule(x, "widgets", "Invalid", ready_is("False", "Invalid")).await;
    }
    for x in [c1, c2] {
        install_crd(x, "Widget", "widgets").await;
    }
    apply_yaml(c1, WIDGET);
    wait_copy(
        c2,
        &widgets(),
        Some("default"),
        "w1",
        "c1",
        "widgets",
        spec_is(serde_json::json!({"size": 3, "color": "blue"})),
    )
    .await;
    for x in [c1, c2] {
        wait_rule(x, "widgets", "Ready", ready_is("True", "Synced")).await;
    }
}

/// A mutation rewrites Widget to Gadget (a second CRD with the same
/// schema): the sink holds a Gadget copy and no Widget; deleting the origin
/// deletes the Gadget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gvk_mutation() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in [c1, c2] {
        install_crd(x, "Widget", "widgets").await;
        install_crd(x, "Gadget", "gadgets").await;
    }
    let rule = RuleBuilder::new("widgets-as-gadgets")
        .kind("example.com", "v1", "Widget")
        .mutations(serde_json::json!({
            "groupVersionKind": {"group": "example.com", "version": "v1", "kind": "Gadget"}
        }))
        .yaml();
    apply_yaml(c1, &rule);
    apply_yaml(c1, WIDGET);
    let copy = wait_copy(
        c2,
        &gadgets(),
        Some("default"),
        "w1",
        "c1",
        "widgets-as-gadgets",
        spec_is(serde_json::json!({"size": 3, "color": "blue"})),
    )
    .await;
    assert_eq!(copy.types.as_ref().map(|t| t.kind.as_str()), Some("Gadget"));
    assert_absent(c2, &widgets(), Some("default"), "w1").await;

    kubectl(
        c1,
        &["delete", "widgets.example.com", "w1", "-n", "default"],
    );
    wait_absent(c2, &gadgets(), Some("default"), "w1").await;
}

/// `syncStatus: true`: the source's `.status`, set through the status
/// subresource with kubectl, is copied and follows changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_status() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in [c1, c2] {
        install_crd(x, "Widget", "widgets").await;
    }
    let rule = RuleBuilder::new("widgets-status")
        .kind("example.com", "v1", "Widget")
        .mutations(serde_json::json!({"syncStatus": true}))
        .yaml();
    apply_yaml(c1, &rule);
    apply_yaml(c1, WIDGET);
    for (i, status) in [
        serde_json::json!({"phase": "Running", "replicas": 3}),
        serde_json::json!({"phase": "Done", "replicas": 0}),
    ]
    .into_iter()
    .enumerate()
    {
        let patch = serde_json::json!({ "status": status }).to_string();
        let out = kubectl(
            c1,
            &[
                "patch",
                "widgets.example.com",
                "w1",
                "-n",
                "default",
                "--subresource=status",
                "--type",
                "merge",
                "-p",
                &patch,
                "-o",
                "json",
            ],
        );
        let patched: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(
            patched["status"], status,
            "step {i}: status patch did not land"
        );
        let want = status.clone();
        wait_copy(
            c2,
            &widgets(),
            Some("default"),
            "w1",
            "c1",
            "widgets-status",
            move |o| {
                if o.data["status"] == want {
                    Ok(())
                } else {
                    Err(format!("status {}", o.data["status"]))
                }
            },
        )
        .await;
    }
}

/// Every Secret of `ns`, with `createNamespace` as given.
fn ns_rule(name: &str, ns: &str, create_namespace: bool) -> String {
    secrets_rule(name, &[ns])
        .spec("createNamespace", create_namespace.into())
        .yaml()
}

/// Without `createNamespace`, a copy whose namespace is missing is an error
/// on the sink's rule status (`namespace team-a not found`); `kubectl create
/// ns` there makes the copy appear (watch-driven) and the rule Ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_namespace_created_later() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    create_ns(c1, "team-a").await;
    apply_yaml(c1, &ns_rule("team-a-secrets", "team-a", false));
    let data = [("k", "v")];
    create_secret(c1, "team-a", "s", &data).await;
    wait_rule(
        c2,
        "team-a-secrets",
        "reporting the missing namespace",
        |r| {
            ready_is("False", "SyncErrors")(r)?;
            let s = r.status.as_ref().ok_or("no status")?;
            let msg = &rule_condition(r, "Ready").ok_or("no Ready")?.message;
            if s.errors >= 1 && msg.contains("namespace team-a not found") {
                Ok(())
            } else {
                Err("errors/message".into())
            }
        },
    )
    .await;
    assert_absent(c2, &secrets(), Some("team-a"), "s").await;

    kubectl(c2, &["create", "namespace", "team-a"]);
    wait_copy(
        c2,
        &secrets(),
        Some("team-a"),
        "s",
        "c1",
        "team-a-secrets",
        data_is(secret_data(&data)),
    )
    .await;
    wait_rule(c2, "team-a-secrets", "Ready again", |r| {
        ready_is("True", "Synced")(r)?;
        match r.status.as_ref() {
            Some(s) if s.errors == 0 && s.objects_synced == 1 => Ok(()),
            _ => Err("counts".into()),
        }
    })
    .await;
}

/// `createNamespace: true` creates the missing namespace on the sink.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_namespace_true() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    create_ns(c1, "team-b").await;
    assert!(Api::<Namespace>::all(c2.client.clone())
        .get_opt("team-b")
        .await
        .unwrap()
        .is_none());
    apply_yaml(c1, &ns_rule("team-b-secrets", "team-b", true));
    let data = [("k", "v")];
    create_secret(c1, "team-b", "s", &data).await;
    wait_copy(
        c2,
        &secrets(),
        Some("team-b"),
        "s",
        "c1",
        "team-b-secrets",
        data_is(secret_data(&data)),
    )
    .await;
    let ns = Api::<Namespace>::all(c2.client.clone())
        .get("team-b")
        .await
        .unwrap();
    assert!(ns.metadata.deletion_timestamp.is_none(), "{ns:?}");
}

/// Every Secret of `shared`, copied as `<name>-<suffix>` into `other`.
fn rename_rule(suffix: &str) -> String {
    let name = ["{{ .Object.metadata.name }}-", suffix].concat();
    secrets_rule("renamed-secrets", &["shared"])
        .mutations(serde_json::json!({"overrides": [
            {"type": "replace", "path": "/metadata/name", "value": name},
            {"type": "replace", "path": "/metadata/namespace", "value": "other"},
        ]}))
        .yaml()
}

/// Overrides of `/metadata/name` (templated) and `/metadata/namespace`: the
/// copy lives under the new name in the other namespace and nowhere else;
/// changing the override cleans up the old copy; deleting the origin deletes
/// the renamed copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_and_move_override() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in [c1, c2] {
        create_ns(x, "shared").await;
        create_ns(x, "other").await;
    }
    apply_yaml(c1, &rename_rule("copy"));
    let data = [("url", "https://api")];
    create_secret(c1, "shared", "api", &data).await;
    wait_copy(
        c2,
        &secrets(),
        Some("other"),
        "api-copy",
        "c1",
        "renamed-secrets",
        data_is(secret_data(&data)),
    )
    .await;
    assert_absent(c2, &secrets(), Some("shared"), "api").await;
    assert_absent(c2, &secrets(), Some("other"), "api").await;
    // The origin is not renamed on its own cluster.
    assert_absent(c1, &secrets(), Some("other"), "api-copy").await;

    apply_yaml(c1, &rename_rule("v2"));
    wait_copy(
        c2,
        &secrets(),
        Some("other"),
        "api-v2",
        "c1",
        "renamed-secrets",
        data_is(secret_data(&data)),
    )
    .await;
    wait_absent(c2, &secrets(), Some("other"), "api-copy").await;

    kubectl_delete(c1, "secret", Some("shared"), "api");
    wait_absent(c2, &secrets(), Some("other"), "api-v2").await;
    let left: Vec<String> = dynamic(c2, &secrets(), Some("other"))
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|o| o.name_any())
        .filter(|n| n.starts_with("api"))
        .collect();
    assert!(left.is_empty(), "c2: copies left in other: {left:?}");
}

/// The subject of Widget `default/<name>` published by c1.
fn widget_subject(name: &str) -> String {
    fleetbus_schemas::subject::ObjectKey {
        origin: "c1".into(),
        group: "example.com".into(),
        version: "v1".into(),
        kind: "Widget".into(),
        namespace: Some("default".into()),
        name: name.into(),
    }
    .to_subject(&fleetbus_schemas::subject::Prefix::default())
}

/// `kubectl patch --subresource=status` of Widget `w1` on `m`.
fn patch_widget_status(m: &Member, status: &serde_json::Value) {
    let patch = serde_json::json!({ "status": status }).to_string();
    kubectl(
        m,
        &[
            "patch",
            "widgets.example.com",
            "w1",
            "-n",
            "default",
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            &patch,
        ],
    );
}

/// Reads `sub` until an envelope on `until` arrives; returns the envelopes
/// seen before it on `subject` (their objects' `.status`, `Null` if absent).
async fn statuses_before(
    sub: &mut async_nats::Subscriber,
    subject: &str,
    until: &str,
) -> Vec<serde_json::Value> {
    use futures::StreamExt;
    let mut seen = Vec::new();
    let found = tokio::time::timeout(SYNC, async {
        while let Some(msg) = sub.next().await {
            if msg.subject.as_str() == until {
                return true;
            }
            if msg.subject.as_str() == subject {
                let env = fleetbus_schemas::envelope::Envelope::decode(&msg.payload)
                    .expect("an envelope");
                let obj = env.object.unwrap_or_default();
                seen.push(obj.get("status").cloned().unwrap_or_default());
            }
        }
        false
    })
    .await;
    assert_eq!(
        found,
        Ok(true),
        "no envelope on {until} within {SYNC:?}; seen on {subject}: {seen:?}"
    );
    seen
}

/// Without `syncStatus`, envelopes carry no `.status` and a status-only
/// change on the origin publishes nothing (counted on `fleetbus.obj.c1.>`
/// with a plain subscriber, up to a later real change); once the rule syncs
/// status, the object is published again with its status and the copy's
/// status follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_only_changes_are_not_published_unless_synced() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in [c1, c2] {
        install_crd(x, "Widget", "widgets").await;
    }
    apply_yaml(c1, &widget_rule().yaml());
    apply_yaml(c1, WIDGET);
    let spec = serde_json::json!({"size": 3, "color": "blue"});
    wait_copy(
        c2,
        &widgets(),
        Some("default"),
        "w1",
        "c1",
        "widgets",
        spec_is(spec.clone()),
    )
    .await;

    let client = async_nats::connect(nats.url()).await.expect("connect nats");
    let mut sub = client
        .subscribe("fleetbus.obj.c1.>")
        .await
        .expect("subscribe");
    client.flush().await.expect("flush");
    let (w1, w2) = (widget_subject("w1"), widget_subject("w2"));

    // A status-only change, then a real change (a new Widget) as the end
    // marker: c1 handles the two in order, so a republished w1 would come first.
    patch_widget_status(c1, &serde_json::json!({"phase": "Running"}));
    apply_yaml(c1, &WIDGET.replace("w1", "w2"));
    let seen = statuses_before(&mut sub, &w1, &w2).await;
    assert_eq!(
        seen,
        Vec::<serde_json::Value>::new(),
        "w1 republished for a status change"
    );

    // The rule gains syncStatus: w1 is published again, with its status.
    apply_yaml(
        c1,
        &widget_rule()
            .mutations(serde_json::json!({"syncStatus": true}))
            .yaml(),
    );
    let running = serde_json::json!({"phase": "Running"});
    let want = running.clone();
    wait_copy(
        c2,
        &widgets(),
        Some("default"),
        "w1",
        "c1",
        "widgets",
        move |o| {
            if o.data["status"] == want {
                Ok(())
            } else {
                Err(format!("status {}", o.data["status"]))
            }
        },
    )
    .await;
    // A status-only change is published now, and followed.
    patch_widget_status(c1, &serde_json::json!({"phase": "Done"}));
    apply_yaml(c1, &WIDGET.replace("w1", "w3"));
    let seen = statuses_before(&mut sub, &w1, &widget_subject("w3")).await;
    assert!(
        seen.contains(&serde_json::json!({"phase": "Done"})),
        "w1 not published with its new status: {seen:?}"
    );
    wait_copy(
        c2,
        &widgets(),
        Some("default"),
        "w1",
        "c1",
        "widgets",
        |o| {
            if o.data["status"] == serde_json::json!({"phase": "Done"}) {
                Ok(())
            } else {
                Err(format!("status {}", o.data["status"]))
            }
        },
    )
    .await;
}
