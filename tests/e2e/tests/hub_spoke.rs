//! Hub and spoke end to end: a hub (`role=hub`) and three edges.
//! Downsync places the hub's objects on the edges its rule's
//! `clusterSelector` picks, and follows relabelling (by `fleetbus clusters
//! label` and by kubectl on the edge); upsync collects the edges' objects on
//! the hub in one namespace per edge; create-only copies are never updated.
//!
//! Real nats-server, devclusters, agents and the `fleetbus` binary; one mesh
//! per test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_testsupport::{wait_for, NatsServer};
use kube::api::ApiResource;
use kube::ResourceExt;
use serde_json::json;

fn configmaps() -> ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

fn network_policies() -> ApiResource {
    resource(
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
    )
}

/// Runs `fleetbus <args>` against `nats`; returns (success, stdout, stderr).
async fn cli(nats: &NatsServer, args: &[&str]) -> (bool, String, String) {
    let (code, out, err) = fleetbus_cli(nats, args).await;
    (code == Some(0), out, err)
}

/// `fleetbus clusters label <args>`, which must succeed; returns the labels it printed.
async fn label(nats: &NatsServer, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["clusters", "label", "-o", "json"];
    all.extend_from_slice(args);
    let (ok, out, err) = cli(nats, &all).await;
    assert!(ok, "fleetbus {all:?} failed: {out}{err}");
    let reply: serde_json::Value = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("fleetbus {all:?} printed no JSON ({e}): {out}"));
    reply["labels"].clone()
}

/// Waits until every member's Cluster object `cluster` has label `key` = `value`
/// (`None`: no such label): the record carried the change to the whole fleet.
async fn wait_label(members: &[Member], cluster: &str, key: &str, value: Option<&str>) {
    for m in members {
        let what = format!("{}: Cluster {cluster} label {key}={value:?}", m.name);
        wait_for(&what, SYNC, || async {
            let c = m.clusters().get(cluster).await.map_err(|e| e.to_string())?;
            if c.labels().get(key).map(String::as_str) == value {
                Ok(())
            } else {
                Err(format!("labels {:?}", c.labels()))
            }
        })
        .await;
    }
}

/// The sum of every series of metric family `family` (`name{labels} value` lines)
/// whose labels contain `with`.
fn family_sum(m: &Member, family: &str, with: &str) -> Result<f64, String> {
    let text = m.metrics()?;
    let prefix = format!("{family}{{");
    Ok(text
        .lines()
        .filter(|l| l.starts_with(&prefix) && l.contains(with))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// A ConfigMap `ns/name` with `data: {v}` and `annotations`, for `kubectl apply`.
fn configmap_yaml(ns: &str, name: &str, v: &str, annotations: &[(&str, &str)]) -> String {
    let mut meta = format!("  name: {name}\n  namespace: {ns}\n");
    if !annotations.is_empty() {
        meta.push_str("  annotations:\n");
        for (k, v) in annotations {
            meta.push_str(&format!("    {k}: \"{v}\"\n"));
        }
    }
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n{meta}data:\n  v: \"{v}\"\n")
}

fn v_is(v: &'static str) -> impl Fn(&kube::api::DynamicObject) -> Result<(), String> {
    data_is(serde_json::json!({ "v": v }))
}

/// A downsync rule on the hub: the ConfigMaps of `ns` from `role=hub` to `env=prod`.
fn place_rule(name: &str, ns: &str, orphan: &str) -> String {
    RuleBuilder::new(name)
        .sources(&[("role", "hub")])
        .sinks(&[("env", "prod")])
        .spec("createNamespace", true.into())
        .spec("orphanPolicy", orphan.into())
        .namespaces(&[ns])
        .yaml()
}

/// Downsync by labels: prod edges get the hub's objects, the dev edge does
/// not, edges' own objects go nowhere. Relabelling with `fleetbus clusters
/// label` and with kubectl on the edge moves the copies (Delete removes them,
/// Orphan leaves them unmanaged); a create-only source is copied once; a
/// delete at the hub reaches every edge; relabelling a cluster whose agent is
/// stopped fails, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downsync_follows_cluster_labels() {
    let nats = NatsServer::start().unwrap();
    let mut m = fleet(&nats, &["hub", "e1", "e2", "e3"]).await;
    let cm = configmaps();

    // Labels set centrally; each agent answers with its labels after the change.
    let got = label(&nats, &["hub", "role=hub"]).await;
    assert_eq!(got, serde_json::json!({"role": "hub"}));
    for (edge, env) in [("e1", "prod"), ("e2", "prod"), ("e3", "dev")] {
        let got = label(&nats, &[edge, &format!("env={env}"), "role=edge"]).await;
        assert_eq!(got, serde_json::json!({"env": env, "role": "edge"}));
    }
    for (c, k, v) in [
        ("hub", "role", "hub"),
        ("e1", "env", "prod"),
        ("e2", "env", "prod"),
        ("e3", "env", "dev"),
    ] {
        wait_label(&m, c, k, Some(v)).await;
    }
    // Refused: a changed value without --overwrite, an invalid key. Nothing changes.
    let (ok, out, err) = cli(&nats, &["clusters", "label", "e3", "env=prod"]).await;
    assert!(
        !ok && err.contains("e3") && err.contains("overwrite"),
        "{out}{err}"
    );
    let (ok, out, err) = cli(&nats, &["clusters", "label", "e3", "bad key=x"]).await;
    assert!(
        !ok && err.contains("e3") && err.contains("refused") && err.contains("invalid"),
        "{out}{err}"
    );
    // e3's own (Local) object: the hub's Peer copy lags behind it.
    let e3 = m[3].clusters().get("e3").await.unwrap();
    let want: std::collections::BTreeMap<String, String> = [("env", "dev"), ("role", "edge")]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    assert_eq!(e3.labels(), &want, "a refused label request changed e3");
    // A plain NATS client: what cannot be decoded (not JSON, another schema) gets an
    // error reply, never silence.
    let client = async_nats::connect(nats.url()).await.unwrap();
    for bad in [
        "not json",
        r#"{"schema":"fleetbus.io/label-request/v9","set":{"x":"y"}}"#,
    ] {
        let msg = client
            .request("fleetbus.cmd.e3.label", bad.into())
            .await
            .unwrap_or_else(|e| panic!("no reply to {bad:?}: {e}"));
        let reply: serde_json::Value = serde_json::from_slice(&msg.payload).unwrap();
        assert_eq!(reply["schema"], "fleetbus.io/label-reply/v1", "{reply}");
        assert_eq!(reply["cluster"], "e3", "{reply}");
        assert!(
            reply["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{bad:?}: {reply}"
        );
        assert!(reply.get("labels").is_none(), "{bad:?}: {reply}");
    }
    wait_for("e3 counts the refused label commands", SYNC, || async {
        let invalid = family_sum(
            &m[3],
            "fleetbus_commands_rejected_total",
            "reason=\"invalid\"",
        )?;
        let malformed = family_sum(
            &m[3],
            "fleetbus_commands_rejected_total",
            "reason=\"malformed\"",
        )?;
        let exists = family_sum(
            &m[3],
            "fleetbus_commands_rejected_total",
            "reason=\"exists\"",
        )?;
        if (exists, invalid, malformed) == (1.0, 1.0, 2.0) {
            Ok(())
        } else {
            Err(format!(
                "rejected: {exists} exists, {invalid} invalid, {malformed} malformed"
            ))
        }
    })
    .await;

    let (hub, e1, e2, e3) = (&m[0], &m[1], &m[2], &m[3]);
    for ns in ["apps", "keep"] {
        create_ns(hub, ns).await;
    }
    create_ns(e1, "apps").await;
    apply_yaml(hub, &place_rule("place-apps", "apps", "Delete"));
    apply_yaml(hub, &place_rule("place-keep", "keep", "Orphan"));
    for edge in [e1, e2, e3] {
        wait_rule_copy(edge, "place-apps", "hub").await;
        wait_rule_copy(edge, "place-keep", "hub").await;
    }
    // An edge's own object: the edges are no sources of the rule.
    apply_yaml(e1, &configmap_yaml("apps", "local-e1", "1", &[]));
    apply_yaml(hub, &configmap_yaml("apps", "web", "1", &[]));
    apply_yaml(hub, &configmap_yaml("keep", "kept", "1", &[]));
    apply_yaml(
        hub,
        &configmap_yaml(
            "apps",
            "pinned",
            "1",
            &[("fleetbus.io/update-policy", "create-only")],
        ),
    );
    // Create-only, and its source never changes.
    apply_yaml(
        hub,
        &configmap_yaml(
            "apps",
            "once",
            "1",
            &[("fleetbus.io/update-policy", "create-only")],
        ),
    );
    apply_yaml(
        hub,
        &configmap_yaml(
            "apps",
            "odd",
            "1",
            &[("fleetbus.io/update-policy", "sometimes")],
        ),
    );
    for edge in [e1, e2] {
        for name in ["web", "pinned", "once", "odd"] {
            wait_copy(
                edge,
                &cm,
                Some("apps"),
                name,
                "hub",
                "place-apps",
                v_is("1"),
            )
            .await;
        }
        wait_copy(
            edge,
            &cm,
            Some("keep"),
            "kept",
            "hub",
            "place-keep",
            v_is("1"),
        )
        .await;
    }
    wait_rule(
        e3,
        "place-apps",
        "NotSelected",
        ready_is("True", "NotSelected"),
    )
    .await;
    assert_absent(e3, &cm, Some("apps"), "web").await;
    assert_absent(e3, &cm, Some("keep"), "kept").await;
    assert_absent(e2, &cm, Some("apps"), "local-e1").await;
    assert_absent(hub, &cm, Some("apps"), "local-e1").await;

    // Create-only by annotation: the update reaches `web` and `odd` (an unknown
    // value is ignored, and counted), never `pinned`.
    for name in ["web", "pinned", "odd"] {
        apply_yaml(hub, &configmap_yaml_keep(name));
    }
    for edge in [e1, e2] {
        wait_copy(
            edge,
            &cm,
            Some("apps"),
            "web",
            "hub",
            "place-apps",
            v_is("2"),
        )
        .await;
        wait_copy(
            edge,
            &cm,
            Some("apps"),
            "odd",
            "hub",
            "place-apps",
            v_is("2"),
        )
        .await;
        let pinned = get_dynamic(edge, &cm, Some("apps"), "pinned")
            .await
            .unwrap()
            .unwrap();
        v_is("1")(&pinned)
            .unwrap_or_else(|e| panic!("{}: create-only copy updated: {e}", edge.name));
        assert_eq!(
            edge.metric("fleetbus_sync_unknown_update_policy").unwrap(),
            1.0,
            "{}",
            edge.name
        );
    }

    // An edit of a create-only copy is not drift: neither corrected nor reported.
    let edit = r#"{"data":{"v":"edited"}}"#;
    kubectl(
        e1,
        &[
            "patch",
            "configmap",
            "pinned",
            "-n",
            "apps",
            "--type",
            "merge",
            "-p",
            edit,
        ],
    );
    apply_yaml(
        hub,
        &configmap_yaml(
            "apps",
            "odd",
            "3",
            &[("fleetbus.io/update-policy", "sometimes")],
        ),
    );
    // A later change reached e1: the pass that wrote it saw the edit (made
    // first), and a correction or a drift report would have come with it.
    wait_copy(e1, &cm, Some("apps"), "odd", "hub", "place-apps", v_is("3")).await;
    let pinned = get_dynamic(e1, &cm, Some("apps"), "pinned")
        .await
        .unwrap()
        .unwrap();
    v_is("edited")(&pinned).unwrap_or_else(|e| panic!("e1: create-only copy corrected: {e}"));
    assert_no_drift(&nats, e1, "an edited create-only copy").await;

    // A deleted create-only copy is created again, and that is not drift either:
    // from the current source (`pinned`), or the unchanged one (`once`).
    for (name, v) in [("pinned", "2"), ("once", "1")] {
        kubectl(e1, &["delete", "configmap", name, "-n", "apps"]);
        wait_copy(e1, &cm, Some("apps"), name, "hub", "place-apps", v_is(v)).await;
        assert_no_drift(&nats, e1, &format!("a deleted create-only copy ({name})")).await;
    }

    // e3 joins prod through the CLI: it receives the objects within seconds.
    let got = label(&nats, &["e3", "env=prod", "--overwrite"]).await;
    assert_eq!(got["env"], "prod");
    wait_copy(e3, &cm, Some("apps"), "web", "hub", "place-apps", v_is("2")).await;
    wait_copy(e3, &cm, Some("apps"), "odd", "hub", "place-apps", v_is("3")).await;
    wait_copy(
        e3,
        &cm,
        Some("keep"),
        "kept",
        "hub",
        "place-keep",
        v_is("1"),
    )
    .await;

    // e1 leaves prod through the CLI (`env-`): Delete removes, Orphan keeps unmanaged.
    let got = label(&nats, &["e1", "env-"]).await;
    assert_eq!(got, serde_json::json!({"role": "edge"}));
    wait_absent(e1, &cm, Some("apps"), "web").await;
    wait_obj(
        e1,
        &cm,
        Some("keep"),
        "kept",
        "to be kept unmanaged",
        check_unmanaged,
    )
    .await;

    // e2 leaves and rejoins through kubectl on e2 itself.
    kubectl(
        e2,
        &[
            "label",
            "--overwrite",
            "clusters.fleetbus.io",
            "e2",
            "env=staging",
        ],
    );
    wait_absent(e2, &cm, Some("apps"), "web").await;
    kubectl(
        e2,
        &[
            "label",
            "--overwrite",
            "clusters.fleetbus.io",
            "e2",
            "env=prod",
        ],
    );
    wait_copy(e2, &cm, Some("apps"), "web", "hub", "place-apps", v_is("2")).await;

    // A delete at the hub reaches every edge holding a copy.
    kubectl(hub, &["delete", "configmap", "web", "-n", "apps"]);
    for edge in [e2, e3] {
        wait_absent(edge, &cm, Some("apps"), "web").await;
    }

    // No agent for e3: the command fails at once (no responders, not the
    // timeout), naming the cluster.
    m[3].agent.stop();
    let timeout = Duration::from_secs(5);
    let started = Instant::now();
    let (ok, out, err) = cli(
        &nats,
        &["clusters", "label", "e3", "x=y", "--timeout", "5s"],
    )
    .await;
    let took = started.elapsed();
    assert!(!ok, "labelling a stopped cluster succeeded: {out}");
    assert!(
        err.contains("e3") && err.contains("no agent answers"),
        "not a no-responder error naming e3: {err}"
    );
    assert!(took < timeout, "took {took:?}, not less than --timeout");
}

/// `member` has reported no drift: no drift event counted, no drift in `drift ls`.
async fn assert_no_drift(nats: &NatsServer, member: &Member, what: &str) {
    let events = family_sum(member, "fleetbus_drifts_total", "").unwrap();
    assert_eq!(events, 0.0, "{}: drift events for {what}", member.name);
    let (ok, out, err) = cli(
        nats,
        &["drift", "ls", "--cluster", &member.name, "-o", "json"],
    )
    .await;
    assert!(
        ok && !out.contains("pinned") && !out.contains("once"),
        "{}: drift of {what}: {out}{err}",
        member.name
    );
}

/// The second version of the hub's ConfigMaps (`v: "2"`), annotations as first applied.
fn configmap_yaml_keep(name: &str) -> String {
    let ann = match name {
        "pinned" => &[("fleetbus.io/update-policy", "create-only")][..],
        "odd" => &[("fleetbus.io/update-policy", "sometimes")][..],
        _ => &[][..],
    };
    configmap_yaml("apps", name, "2", ann)
}

/// An upsync rule on the hub: `rule` (its kind and what it matches) from
/// `role=edge` to `role=hub`, each edge's copies in namespace `edge-<origin>`.
fn collect_rule(rule: RuleBuilder) -> String {
    rule.sources(&[("role", "edge")])
        .sinks(&[("role", "hub")])
        .spec("createNamespace", true.into())
        .mutations(json!({"overrides": [{
            "type": "replace",
            "path": "/metadata/namespace",
            "value": "edge-{{ .Cluster.name }}",
        }]}))
        .yaml()
}

fn network_policy_yaml(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  podSelector: {{}}\n  policyTypes: [Ingress]\n"
    )
}

/// Upsync: ConfigMaps of the same name on three edges land in `edge-<edge>`
/// on the hub without colliding; the namespace set is a wildcard over names,
/// a rule with no match takes every object of its kind; an edge update and an
/// edge delete reach the hub; the edges get nothing; an edge relabelled out of
/// `sourceClusterSelector` has its copies collected. `clusters ls` lists the fleet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upsync_into_per_edge_namespaces() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["hub", "e1", "e2", "e3"]).await;
    let (hub, e1, e2, e3) = (&m[0], &m[1], &m[2], &m[3]);
    let (cm, np) = (configmaps(), network_policies());
    for x in &m {
        let role = if x.name == "hub" {
            "role=hub"
        } else {
            "role=edge"
        };
        kubectl(x, &["label", "clusters.fleetbus.io", &x.name, role]);
    }
    for x in &m {
        let role = if x.name == "hub" { "hub" } else { "edge" };
        wait_label(&m, &x.name, "role", Some(role)).await;
    }
    // `fleetbus clusters ls` shows the fleet as the registry has it.
    let (ok, out, err) = cli(&nats, &["clusters", "ls", "-o", "json"]).await;
    assert!(ok, "{out}{err}");
    let listed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let roles: Vec<(String, String)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["labels"]["role"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    let want: Vec<(String, String)> = [
        ("e1", "edge"),
        ("e2", "edge"),
        ("e3", "edge"),
        ("hub", "hub"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(roles, want, "{out}");
    apply_yaml(
        hub,
        &collect_rule(RuleBuilder::new("collect-reports").namespaces(&["reports", "audit"])),
    );
    apply_yaml(
        hub,
        &collect_rule(RuleBuilder::new("collect-netpol").kind(
            "networking.k8s.io",
            "v1",
            "NetworkPolicy",
        )),
    );
    for edge in [e1, e2, e3] {
        wait_rule_copy(edge, "collect-reports", "hub").await;
        wait_rule_copy(edge, "collect-netpol", "hub").await;
        for ns in ["reports", "audit", "other"] {
            create_ns(edge, ns).await;
        }
    }
    // Outside the namespace set: stays on the edge.
    apply_yaml(e1, &configmap_yaml("other", "ignored", "1", &[]));
    for edge in [e1, e2, e3] {
        apply_yaml(edge, &configmap_yaml("reports", "summary", &edge.name, &[]));
    }
    apply_yaml(e2, &configmap_yaml("audit", "log", "a", &[]));
    apply_yaml(e1, &network_policy_yaml("other", "deny"));
    apply_yaml(e3, &network_policy_yaml("reports", "deny"));

    for edge in ["e1", "e2", "e3"] {
        let ns = format!("edge-{edge}");
        let want = serde_json::json!({ "v": edge });
        wait_copy(
            hub,
            &cm,
            Some(&ns),
            "summary",
            edge,
            "collect-reports",
            data_is(want),
        )
        .await;
    }
    wait_copy(
        hub,
        &cm,
        Some("edge-e2"),
        "log",
        "e2",
        "collect-reports",
        v_is("a"),
    )
    .await;
    for edge in ["e1", "e3"] {
        let ns = format!("edge-{edge}");
        wait_copy(hub, &np, Some(&ns), "deny", edge, "collect-netpol", |_| {
            Ok(())
        })
        .await;
    }
    assert_absent(hub, &cm, Some("edge-e1"), "ignored").await;
    assert_absent(hub, &cm, Some("other"), "ignored").await;
    // The hub is the only sink: no edge holds another edge's objects.
    for edge in [e1, e2, e3] {
        assert_absent(edge, &cm, Some("edge-e1"), "summary").await;
    }

    // An edge update and an edge delete reach the hub; the other copies stay.
    apply_yaml(e1, &configmap_yaml("reports", "summary", "e1-v2", &[]));
    wait_copy(
        hub,
        &cm,
        Some("edge-e1"),
        "summary",
        "e1",
        "collect-reports",
        v_is("e1-v2"),
    )
    .await;
    kubectl(e2, &["delete", "configmap", "summary", "-n", "reports"]);
    wait_absent(hub, &cm, Some("edge-e2"), "summary").await;
    for edge in ["e1", "e3"] {
        get_dynamic(hub, &cm, Some(&format!("edge-{edge}")), "summary")
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("edge-{edge}/summary went with e2's"));
    }

    // e3 is relabelled out of the sources: its copies on the hub are collected
    // (orphanPolicy Delete), the other edge's stay.
    let got = label(&nats, &["e3", "role=retired", "--overwrite"]).await;
    assert_eq!(got["role"], "retired");
    wait_absent(hub, &cm, Some("edge-e3"), "summary").await;
    wait_absent(hub, &np, Some("edge-e3"), "deny").await;
    wait_copy(
        hub,
        &cm,
        Some("edge-e1"),
        "summary",
        "e1",
        "collect-reports",
        v_is("e1-v2"),
    )
    .await;
}
