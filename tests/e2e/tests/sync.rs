//! Rule sync end to end: where copies go and how they are
//! collected. Real nats-server, devclusters and agent processes; users act
//! through kubectl, state is read with kube-rs.
//!
//! Each test owns its NATS server and members (c1, c2, c3 as needed), so the
//! tests run in parallel. The contract they check is
//! `/work/briefs/sync-design.md` (copy marks, tombstone reasons, orphan policy).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::sync::*;
use common::*;
use fleetbus_schemas::rule_status::{RuleCellState, RuleStatusKey, RuleStatusRecord};
use fleetbus_schemas::well_known::ANNOTATION_ORIGIN_UID;
use fleetbus_testsupport::{repo_root, wait_for, NatsServer};
use kube::ResourceExt;
use serde_json::json;

/// The example of the README tour: a rule on c1 for the Secrets of
/// `shared`; a Secret created on c3 appears on c1 and c2 as a copy with the
/// contract's marks and equal data; the rule itself appears on c2 and c3 as
/// a copy from c1; a Secret outside `shared` is not synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sync_everywhere() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    let example = repo_root().join("deploy/examples/sync-secrets.yaml");
    kubectl(c1, &["apply", "-f", &example.display().to_string()]);
    for sink in [c2, c3] {
        wait_rule_copy(sink, "sync-secrets", "c1").await;
    }

    // Created first: by the time the matching Secret's copies arrived, this
    // one would have too if the namespace match were ignored.
    create_secret(c3, "default", "not-shared", &[("k", "v")]).await;
    let literals = [("password", "s3cret"), ("user", "app")];
    let uid = create_secret(c3, "shared", "db", &literals).await;
    for sink in [c1, c2] {
        let copy = wait_copy(
            sink,
            &secrets(),
            Some("shared"),
            "db",
            "c3",
            "sync-secrets",
            data_is(secret_data(&literals)),
        )
        .await;
        let ann = copy.annotations();
        assert_eq!(ann.get(ANNOTATION_ORIGIN_UID), Some(&uid), "{}", sink.name);
        assert_eq!(
            ann.get(ANNOTATION_ORPHAN_POLICY).map(String::as_str),
            Some("Delete"),
            "{}: {ann:?}",
            sink.name
        );
        assert_eq!(copy.data["type"], "Opaque", "{}", sink.name);
        assert_absent(sink, &secrets(), Some("default"), "not-shared").await;
    }
    // The original is never marked.
    let orig = get_dynamic(c3, &secrets(), Some("shared"), "db")
        .await
        .unwrap()
        .unwrap();
    check_unmanaged(&orig).unwrap();

    // Status per cluster: c1 and c2 each hold one copy, sourced from the peers.
    for (sink, sources) in [(c1, ["c2", "c3"]), (c2, ["c1", "c3"])] {
        wait_rule(sink, "sync-secrets", "Ready with one copy", |r| {
            ready_is("True", "Synced")(r)?;
            let s = r.status.as_ref().ok_or("no status")?;
            if s.source_clusters == sources && s.objects_synced == 1 && s.conflicts == 0 {
                Ok(())
            } else {
                Err("counts/sources differ".into())
            }
        })
        .await;
    }
}

/// `clusterSelector: env=prod` with c2 labelled `env=dev` on its Local
/// Cluster object: c3 gets the copy, c2 none (Ready True, reason SourceOnly:
/// not a sink is no failure), yet c2 is still a source; relabelling c3 out of the selection deletes its copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_selector_excludes() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    let envs = [(c1, "prod"), (c2, "dev"), (c3, "prod")];
    for (x, env) in envs {
        create_ns(x, "shared").await;
        kubectl(
            x,
            &[
                "label",
                "clusters.fleetbus.io",
                &x.name,
                &format!("env={env}"),
            ],
        );
    }
    for (x, env) in envs {
        wait_label(&m, &x.name, env).await;
    }
    let yaml = secrets_rule("prod-secrets", &["shared"])
        .sinks(&[("env", "prod")])
        .yaml();
    apply_yaml(c1, &yaml);
    wait_rule(
        c2,
        "prod-secrets",
        "SourceOnly",
        ready_is("True", "SourceOnly"),
    )
    .await;

    let data = [("level", "prod")];
    create_secret(c1, "shared", "cfg", &data).await;
    // An excluded sink is still a source (sourceClusterSelector is absent).
    create_secret(c2, "shared", "from-dev", &[("a", "b")]).await;
    wait_copy(
        c3,
        &secrets(),
        Some("shared"),
        "cfg",
        "c1",
        "prod-secrets",
        data_is(secret_data(&data)),
    )
    .await;
    for sink in [c1, c3] {
        wait_copy(
            sink,
            &secrets(),
            Some("shared"),
            "from-dev",
            "c2",
            "prod-secrets",
            |_| Ok(()),
        )
        .await;
    }
    assert_absent(c2, &secrets(), Some("shared"), "cfg").await;
    wait_rule(c3, "prod-secrets", "Ready", ready_is("True", "Synced")).await;
    // The same, per cluster, on the bus: one credential shows the fleet.
    let r = wait_bus_cell(
        &nats,
        "prod-secrets",
        "c2",
        RuleCellState::Synced,
        "SourceOnly",
    )
    .await;
    assert!(r.source && !r.sink, "{r:?}");
    let r = wait_bus_cell(&nats, "prod-secrets", "c3", RuleCellState::Synced, "Synced").await;
    assert!(r.source && r.sink, "{r:?}");

    // c3 leaves the selection: its copies go (orphanPolicy Delete), originals stay.
    kubectl(
        c3,
        &[
            "label",
            "--overwrite",
            "clusters.fleetbus.io",
            "c3",
            "env=dev",
        ],
    );
    wait_rule(
        c3,
        "prod-secrets",
        "SourceOnly",
        ready_is("True", "SourceOnly"),
    )
    .await;
    wait_absent(c3, &secrets(), Some("shared"), "cfg").await;
    wait_absent(c3, &secrets(), Some("shared"), "from-dev").await;
    get_dynamic(c1, &secrets(), Some("shared"), "cfg")
        .await
        .unwrap()
        .expect("original cfg");
}

/// A rule deleted while its agent is down leaves its status record on the
/// bus; the agent deletes it when it starts again (it used to delete only
/// the records this process had put, so `fleetbus rules ls` showed the rule
/// for ever), and keeps the records of the rules that still exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_records_of_rules_deleted_while_down_are_deleted_at_start() {
    let nats = NatsServer::start().unwrap();
    let mut m = fleet(&nats, &["c1"]).await;
    for name in ["kept", "gone"] {
        let yaml = secrets_rule(name, &["shared"])
            .annotation("fleetbus.io/resource-sync-disabled", "true")
            .yaml();
        apply_yaml(&m[0], &yaml);
    }
    for name in ["kept", "gone"] {
        wait_for(&format!("{name}'s record on the bus"), CONVERGE, || async {
            let all = bus_rule_status(&nats, name).await?;
            all.get("c1").map(drop).ok_or_else(|| format!("{all:?}"))
        })
        .await;
    }
    m[0].agent.stop();
    kubectl(&m[0], &["delete", "resourcesyncrule", "gone"]);
    m[0].agent.spawn().unwrap();
    wait_for("gone's record deleted", CONVERGE, || async {
        let all = bus_rule_status(&nats, "gone").await?;
        if all.is_empty() {
            Ok(())
        } else {
            Err(format!("{all:?}"))
        }
    })
    .await;
    let kept = bus_rule_status(&nats, "kept").await.unwrap();
    assert!(kept.contains_key("c1"), "{kept:?}");
}

/// The rule status records on the bus (PROTOCOL §5.3) for `rule`, by cluster.
async fn bus_rule_status(
    nats: &NatsServer,
    rule: &str,
) -> Result<std::collections::BTreeMap<String, RuleStatusRecord>, String> {
    use futures::TryStreamExt;
    let client = async_nats::connect(nats.url())
        .await
        .map_err(|e| e.to_string())?;
    let kv = async_nats::jetstream::new(client)
        .get_key_value("fleetbus-rulestatus")
        .await
        .map_err(|e| e.to_string())?;
    let keys: Vec<String> = kv
        .keys()
        .await
        .map_err(|e| e.to_string())?
        .try_collect()
        .await
        .map_err(|e| e.to_string())?;
    let mut found = std::collections::BTreeMap::new();
    for key in keys {
        let k = RuleStatusKey::parse(&key).map_err(|e| e.to_string())?;
        if k.rule != rule {
            continue;
        }
        if let Some(bytes) = kv.get(&key).await.map_err(|e| e.to_string())? {
            let r = RuleStatusRecord::decode(&bytes).map_err(|e| e.to_string())?;
            r.validate(&k).map_err(|e| e.to_string())?;
            found.insert(k.cluster, r);
        }
    }
    Ok(found)
}

/// Waits until the bus says `rule` on `cluster` is `state` with `reason`.
async fn wait_bus_cell(
    nats: &NatsServer,
    rule: &str,
    cluster: &str,
    state: RuleCellState,
    reason: &str,
) -> RuleStatusRecord {
    wait_for(
        &format!("{rule} {state} ({reason}) on {cluster} on the bus"),
        CONVERGE,
        || async {
            let all = bus_rule_status(nats, rule).await?;
            match all.get(cluster) {
                Some(r) if r.state == state && r.reason == reason => Ok(r.clone()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

/// Waits until every member's Cluster object `cluster` carries `env=<env>`
/// (the label of its Local object reached the record and the peers).
async fn wait_label(members: &[Member], cluster: &str, env: &str) {
    for m in members {
        let what = format!("{}: {cluster} labelled env={env}", m.name);
        wait_for(&what, SYNC, || async {
            let c = m.clusters().get(cluster).await.map_err(|e| e.to_string())?;
            match c.labels().get("env") {
                Some(v) if v == env => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }
}

/// The annotation route: the same rule created on c1 and c3 with
/// `fleetbus.io/resource-sync-disabled` is not replicated; c1 and c3 sync
/// with each other, c2 gets neither the rule nor copies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn annotation_route() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    let yaml = secrets_rule("pair-secrets", &["shared"])
        .annotation("fleetbus.io/resource-sync-disabled", "true")
        .yaml();
    apply_yaml(c1, &yaml);
    apply_yaml(c3, &yaml);
    create_secret(c1, "shared", "a", &[("from", "c1")]).await;
    create_secret(c3, "shared", "b", &[("from", "c3")]).await;
    wait_copy(
        c3,
        &secrets(),
        Some("shared"),
        "a",
        "c1",
        "pair-secrets",
        |_| Ok(()),
    )
    .await;
    wait_copy(
        c1,
        &secrets(),
        Some("shared"),
        "b",
        "c3",
        "pair-secrets",
        |_| Ok(()),
    )
    .await;
    // A rule c1 does publish reaches c2: the disabled one, published
    // earlier by the same agent on the same subjects, would have too.
    apply_yaml(
        c1,
        &secrets_rule("marker", &["shared"])
            .sinks(&[("never", "selected")])
            .yaml(),
    );
    wait_rule_copy(c2, "marker", "c1").await;
    // Both rules stay originals: neither was published.
    for x in [c1, c3] {
        let r = rule(x, "pair-secrets").await.unwrap().unwrap();
        assert!(
            !r.annotations()
                .contains_key(fleetbus_schemas::well_known::ANNOTATION_ORIGIN_CLUSTER),
            "{}: {:?}",
            x.name,
            r.annotations()
        );
    }
    assert!(
        rule(c2, "pair-secrets").await.unwrap().is_none(),
        "c2 got the rule"
    );
    assert_absent(c2, &secrets(), Some("shared"), "a").await;
    assert_absent(c2, &secrets(), Some("shared"), "b").await;
}

/// The `clusterFeatureMatch` gate on source c2, then the withdrawal of the
/// feature under `policy`.
async fn feature_gate(policy: &str) {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(
        c1,
        &secrets_rule("istio-secrets", &["shared"])
            .spec("clusterFeatureMatch", json!([{"featureName": "istio"}]))
            .spec("orphanPolicy", json!(policy))
            .yaml(),
    );
    let data = [("ca.crt", "pem")];
    create_secret(c2, "shared", "mesh-ca", &data).await;
    wait_rule_copy(c2, "istio-secrets", "c1").await;
    // c2 lacks the feature: c1 takes nothing from it.
    wait_rule(c1, "istio-secrets", "Ready without sources", |r| {
        ready_is("True", "Synced")(r)?;
        let s = r.status.as_ref().ok_or("no status")?;
        if s.source_clusters.is_empty() && s.observed_generation.is_some() {
            Ok(())
        } else {
            Err("sources".into())
        }
    })
    .await;
    assert_absent(c1, &secrets(), Some("shared"), "mesh-ca").await;

    apply_yaml(
        c2,
        "apiVersion: fleetbus.io/v1alpha1\nkind: ClusterFeature\nmetadata: {name: istio}\nspec: {featureName: istio}\n",
    );
    let copy = wait_copy(
        c1,
        &secrets(),
        Some("shared"),
        "mesh-ca",
        "c2",
        "istio-secrets",
        data_is(secret_data(&data)),
    )
    .await;
    wait_rule(c1, "istio-secrets", "sourcing from c2", |r| {
        match r.status.as_ref().map(|s| s.source_clusters.clone()) {
            Some(s) if s == ["c2"] => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;

    kubectl(c2, &["delete", "clusterfeatures.fleetbus.io", "istio"]);
    if policy == "Delete" {
        wait_absent(c1, &secrets(), Some("shared"), "mesh-ca").await;
    } else {
        let uid = copy.uid();
        wait_obj(c1, &secrets(), Some("shared"), "mesh-ca", "orphaned", |o| {
            check_unmanaged(o)?;
            data_is(secret_data(&data))(o)?;
            if o.uid() == uid {
                Ok(())
            } else {
                Err("recreated".into())
            }
        })
        .await;
    }
    get_dynamic(c2, &secrets(), Some("shared"), "mesh-ca")
        .await
        .unwrap()
        .expect("original");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_gate_and_withdrawal() {
    feature_gate("Delete").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feature_withdrawal_orphans() {
    feature_gate("Orphan").await;
}

/// A copy annotated `fleetbus.io/resource-sync-disabled` is pinned: an
/// origin update does not reach it (nor is the pin itself reverted), yet the
/// origin's delete still deletes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pinned_copy() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    let name = "pin-secrets";
    apply_yaml(c1, &secrets_rule(name, &["shared"]).yaml());
    create_secret(c1, "shared", "s", &[("v", "1")]).await;
    create_secret(c1, "shared", "free", &[("v", "1")]).await;
    for n in ["s", "free"] {
        wait_copy(
            c2,
            &secrets(),
            Some("shared"),
            n,
            "c1",
            name,
            data_is(secret_data(&[("v", "1")])),
        )
        .await;
    }
    kubectl(
        c2,
        &[
            "annotate",
            "secret",
            "s",
            "-n",
            "shared",
            "fleetbus.io/resource-sync-disabled=true",
        ],
    );
    let patch = serde_json::json!({"data": {"v": b64("2")}}).to_string();
    for n in ["s", "free"] {
        kubectl(
            c1,
            &[
                "patch", "secret", n, "-n", "shared", "--type", "merge", "-p", &patch,
            ],
        );
    }
    // The unpinned copy follows; the pinned one, updated alongside, does not.
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "free",
        "c1",
        name,
        data_is(secret_data(&[("v", "2")])),
    )
    .await;
    let o = get_dynamic(c2, &secrets(), Some("shared"), "s")
        .await
        .unwrap()
        .unwrap();
    data_is(secret_data(&[("v", "1")]))(&o).unwrap();
    assert!(
        o.annotations()
            .contains_key("fleetbus.io/resource-sync-disabled"),
        "pin removed: {:?}",
        o.annotations()
    );

    kubectl_delete(c1, "secret", Some("shared"), "s");
    wait_absent(c2, &secrets(), Some("shared"), "s").await;
}

/// An immutable field on the copy (`immutable: true`, set by an override):
/// an origin update is rejected by the sink's API server as a change of an
/// immutable field, so the copy is deleted and created again with the new
/// data (needs the devcluster's immutable Secrets).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_field_recreates() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    let name = "frozen-secrets";
    let yaml = secrets_rule(name, &["shared"])
        .mutations(
            json!({"overrides": [{"type": "replace", "path": "/immutable", "value": "true"}]}),
        )
        .yaml();
    apply_yaml(c1, &yaml);
    create_secret(c1, "shared", "tls", &[("v", "1")]).await;
    let copy = wait_copy(c2, &secrets(), Some("shared"), "tls", "c1", name, |o| {
        data_is(secret_data(&[("v", "1")]))(o)?;
        if o.data["immutable"] == true {
            Ok(())
        } else {
            Err("not immutable".into())
        }
    })
    .await;
    // The devcluster really refuses to change it in place.
    let patch = serde_json::json!({"data": {"v": b64("x")}}).to_string();
    let out = c2.cluster.kubectl(
        KUBECTL,
        &[
            "patch", "secret", "tls", "-n", "shared", "--type", "merge", "-p", &patch,
        ],
    );
    assert!(
        !out.status.success(),
        "an immutable Secret's data was changed in place"
    );

    let patch = serde_json::json!({"data": {"v": b64("2")}}).to_string();
    kubectl(
        c1,
        &[
            "patch", "secret", "tls", "-n", "shared", "--type", "merge", "-p", &patch,
        ],
    );
    let old_uid = copy.uid();
    wait_copy(c2, &secrets(), Some("shared"), "tls", "c1", name, |o| {
        data_is(secret_data(&[("v", "2")]))(o)?;
        if o.uid() != old_uid {
            Ok(())
        } else {
            Err("same object".into())
        }
    })
    .await;
    wait_rule(c2, name, "without errors", |r| match r.status.as_ref() {
        Some(s) if s.errors == 0 && s.objects_synced == 1 => Ok(()),
        _ => Err("counts".into()),
    })
    .await;
}

/// A kubectl edit of a copy (changed value, ADDED data key and label) is
/// reverted to equal again; a deleted copy is recreated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revert_edit_and_recreate() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(c1, &secrets_rule("revert-secrets", &["shared"]).yaml());
    let data = [("mode", "prod")];
    create_secret(c1, "shared", "app-cfg", &data).await;
    let want = secret_data(&data);
    let copy = wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "app-cfg",
        "c1",
        "revert-secrets",
        data_is(want.clone()),
    )
    .await;
    let labels_before = labels_of(&copy);

    let patch = serde_json::json!({
        "metadata": {"labels": {"added": "by-hand"}},
        "data": {"mode": b64("dev"), "extra": b64("x")},
    })
    .to_string();
    let out = kubectl(
        c2,
        &[
            "patch", "secret", "app-cfg", "-n", "shared", "--type", "merge", "-p", &patch, "-o",
            "json",
        ],
    );
    // The edit really landed (the reply is the patched object).
    let edited: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(edited["data"]["extra"], b64("x"), "{edited}");
    assert_eq!(edited["metadata"]["labels"]["added"], "by-hand", "{edited}");

    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "app-cfg",
        "c1",
        "revert-secrets",
        |o| {
            data_is(want.clone())(o)?;
            if labels_of(o) == labels_before {
                Ok(())
            } else {
                Err(format!("labels {:?}", labels_of(o)))
            }
        },
    )
    .await;

    kubectl_delete(c2, "secret", Some("shared"), "app-cfg");
    let old_uid = copy.uid();
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "app-cfg",
        "c1",
        "revert-secrets",
        |o| {
            data_is(want.clone())(o)?;
            if o.uid() != old_uid {
                Ok(())
            } else {
                Err("old copy".into())
            }
        },
    )
    .await;
}

/// An origin delete deletes every copy, even under orphanPolicy Orphan (a
/// `Deleted` tombstone deletes whatever the policy); another copy stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_delete_propagates() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3"]).await;
    let (c1, c2, c3) = (&m[0], &m[1], &m[2]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(
        c1,
        &secrets_rule("del-secrets", &["shared"])
            .spec("orphanPolicy", json!("Orphan"))
            .yaml(),
    );
    create_secret(c1, "shared", "gone", &[("k", "1")]).await;
    create_secret(c1, "shared", "kept", &[("k", "2")]).await;
    for sink in [c2, c3] {
        for name in ["gone", "kept"] {
            wait_copy(
                sink,
                &secrets(),
                Some("shared"),
                name,
                "c1",
                "del-secrets",
                |_| Ok(()),
            )
            .await;
        }
    }
    kubectl_delete(c1, "secret", Some("shared"), "gone");
    for sink in [c2, c3] {
        wait_absent(sink, &secrets(), Some("shared"), "gone").await;
        wait_copy(
            sink,
            &secrets(),
            Some("shared"),
            "kept",
            "c1",
            "del-secrets",
            |_| Ok(()),
        )
        .await;
    }
}

/// Deleting a rule at its origin collects its copies on every cluster by
/// `policy`; originals are untouched, and the rule's copies go too.
async fn rule_delete_gc(policy: &str) {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    let name = "gc-secrets";
    apply_yaml(
        c1,
        &secrets_rule(name, &["shared"])
            .spec("orphanPolicy", json!(policy))
            .yaml(),
    );
    let d1 = [("from", "c1")];
    let d2 = [("from", "c2")];
    create_secret(c1, "shared", "s1", &d1).await;
    create_secret(c2, "shared", "s2", &d2).await;
    let copy1 = wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "s1",
        "c1",
        name,
        data_is(secret_data(&d1)),
    )
    .await;
    let copy2 = wait_copy(
        c1,
        &secrets(),
        Some("shared"),
        "s2",
        "c2",
        name,
        data_is(secret_data(&d2)),
    )
    .await;
    assert_eq!(
        copy1
            .annotations()
            .get(ANNOTATION_ORPHAN_POLICY)
            .map(String::as_str),
        Some(policy)
    );

    for c in ["c1", "c2"] {
        wait_bus_cell(&nats, name, c, RuleCellState::Synced, "Synced").await;
    }
    kubectl(c1, &["delete", "resourcesyncrules.fleetbus.io", name]);
    wait_absent(c2, &rules(), None, name).await;
    // Its status records go with it.
    wait_for("the rule's status records deleted", CONVERGE, || async {
        let left = bus_rule_status(&nats, name).await?;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    for (sink, copy, d) in [(c2, &copy1, &d1), (c1, &copy2, &d2)] {
        let cname = copy.name_any();
        if policy == "Delete" {
            wait_absent(sink, &secrets(), Some("shared"), &cname).await;
        } else {
            let uid = copy.uid();
            wait_obj(sink, &secrets(), Some("shared"), &cname, "orphaned", |o| {
                check_unmanaged(o)?;
                data_is(secret_data(d))(o)?;
                if o.uid() == uid {
                    Ok(())
                } else {
                    Err("recreated".into())
                }
            })
            .await;
        }
    }
    for (x, n) in [(c1, "s1"), (c2, "s2")] {
        let o = get_dynamic(x, &secrets(), Some("shared"), n).await.unwrap();
        assert!(o.is_some(), "{}: original {n} deleted", x.name);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_delete_gc_delete() {
    rule_delete_gc("Delete").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_delete_gc_orphan() {
    rule_delete_gc("Orphan").await;
}

/// `updatePolicy: CreateOnly`: an origin update does not reach the copy, an
/// edit of the copy is not reverted, a deleted copy is created again (from
/// the current source).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_only_policy() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    let name = "once-secrets";
    apply_yaml(
        c1,
        &secrets_rule(name, &["shared"])
            .spec("updatePolicy", json!("CreateOnly"))
            .yaml(),
    );
    create_secret(c1, "shared", "s", &[("v", "1")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "s",
        "c1",
        name,
        data_is(secret_data(&[("v", "1")])),
    )
    .await;

    let patch = serde_json::json!({"data": {"v": b64("2")}}).to_string();
    kubectl(
        c1,
        &[
            "patch", "secret", "s", "-n", "shared", "--type", "merge", "-p", &patch,
        ],
    );
    // A later object of the same kind arrived: the update would have too.
    create_secret(c1, "shared", "marker1", &[("m", "1")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "marker1",
        "c1",
        name,
        |_| Ok(()),
    )
    .await;
    let copy = get_dynamic(c2, &secrets(), Some("shared"), "s")
        .await
        .unwrap()
        .unwrap();
    data_is(secret_data(&[("v", "1")]))(&copy).unwrap();

    let patch = serde_json::json!({"metadata": {"labels": {"edited": "yes"}}}).to_string();
    kubectl(
        c2,
        &[
            "patch", "secret", "s", "-n", "shared", "--type", "merge", "-p", &patch,
        ],
    );
    create_secret(c1, "shared", "marker2", &[("m", "2")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "marker2",
        "c1",
        name,
        |_| Ok(()),
    )
    .await;
    let copy = get_dynamic(c2, &secrets(), Some("shared"), "s")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        copy.labels().get("edited").map(String::as_str),
        Some("yes"),
        "edit reverted"
    );

    kubectl_delete(c2, "secret", Some("shared"), "s");
    let old_uid = copy.uid();
    wait_copy(c2, &secrets(), Some("shared"), "s", "c1", name, |o| {
        data_is(secret_data(&[("v", "2")]))(o)?;
        if o.uid() != old_uid {
            Ok(())
        } else {
            Err("old copy".into())
        }
    })
    .await;
}

/// A copy nothing wants that appears after the copies settled (one restored
/// from a backup, its ownership mark intact) is collected: the sink scans
/// for collectable copies only when something could have become
/// collectable, and a copy it did not want is such a thing. An object that
/// merely looks like a copy — fleetbus's annotations and label written by
/// hand, without the mark only this cluster's agent can make — is someone's
/// own: never deleted, whether its namespace is synced or not (it once was
/// deleted on the strength of one annotation). One copy it wants stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_copy_is_collected_and_a_look_alike_never() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    create_ns(c2, "plain").await;
    let name = "stray-secrets";
    apply_yaml(c1, &secrets_rule(name, &["shared"]).yaml());
    create_secret(c1, "shared", "real", &[("v", "1")]).await;
    create_secret(c1, "shared", "gone", &[("v", "g")]).await;
    for n in ["real", "gone"] {
        wait_copy(c2, &secrets(), Some("shared"), n, "c1", name, |_| Ok(())).await;
    }
    // A backup of the copy `gone`, as `kubectl get -o json` gives it.
    let backup = kubectl(c2, &["get", "secret", "gone", "-n", "shared", "-o", "json"]);
    let mut backup: serde_json::Value = serde_json::from_str(&backup).unwrap();
    let meta = backup["metadata"].as_object_mut().unwrap();
    for server_owned in [
        "uid",
        "resourceVersion",
        "creationTimestamp",
        "managedFields",
    ] {
        meta.remove(server_owned);
    }
    assert!(
        backup["metadata"]["annotations"][fleetbus_schemas::well_known::ANNOTATION_COPY_MARK]
            .is_string(),
        "a copy carries its mark: {backup}"
    );
    kubectl_delete(c1, "secret", Some("shared"), "gone");
    wait_absent(c2, &secrets(), Some("shared"), "gone").await;

    // Look-alikes: c1's copy under the rule in every annotation and label
    // but the mark, in the synced namespace; and only the origin annotation,
    // in a namespace no rule selects.
    let look_alikes = [
        format!(
            r#"apiVersion: v1
kind: Secret
metadata:
  name: stray
  namespace: shared
  labels: {{fleetbus.io/managed: "true"}}
  annotations:
    fleetbus.io/origin-cluster: c1
    fleetbus.io/origin-uid: 00000000-0000-0000-0000-000000000000
    fleetbus.io/rule: {name}
    fleetbus.io/source-hash: sha256:0000
data: {{v: {}}}
"#,
            b64("stray")
        ),
        format!(
            r#"apiVersion: v1
kind: Secret
metadata:
  name: user-owned
  namespace: plain
  annotations: {{fleetbus.io/origin-cluster: c1}}
data: {{v: {}}}
"#,
            b64("mine")
        ),
    ];
    let looked_at = c2.metric("fleetbus_sync_look_alikes_total").unwrap_or(0.0);
    for yaml in &look_alikes {
        apply_yaml(c2, yaml);
    }
    let kept: Vec<_> = [("shared", "stray"), ("plain", "user-owned")]
        .into_iter()
        .map(|(ns, n)| async move {
            let o = get_dynamic(c2, &secrets(), Some(ns), n).await.unwrap();
            let o = o.unwrap_or_else(|| {
                panic!("{ns}/{n} was deleted as soon as it was created: a look-alike collected")
            });
            (ns, n, o.uid().unwrap())
        })
        .collect();
    let mut uids = Vec::new();
    for k in kept {
        uids.push(k.await);
    }
    // The restore: the copy is back, mark and all, and nothing wants it.
    apply_yaml(c2, &backup.to_string());
    wait_absent(c2, &secrets(), Some("shared"), "gone").await;
    // The sink passed both look-alikes by (counted), and they are there.
    c2.wait_metric_at_least("fleetbus_sync_look_alikes_total", looked_at + 2.0)
        .await;
    for (ns, n, uid) in &uids {
        let o = get_dynamic(c2, &secrets(), Some(ns), n).await.unwrap();
        assert_eq!(
            o.as_ref().and_then(ResourceExt::uid).as_ref(),
            Some(uid),
            "{ns}/{n}: a look-alike was deleted or replaced"
        );
    }
    let real = get_dynamic(c2, &secrets(), Some("shared"), "real")
        .await
        .unwrap();
    assert!(real.is_some(), "the wanted copy stays");

    // c1 now publishes a `stray` of its own: the look-alike in its place is
    // a conflict on c2, reported and never overwritten.
    create_secret(c1, "shared", "stray", &[("v", "from-c1")]).await;
    wait_rule(c2, name, "a conflict naming shared/stray", |r| {
        let s = r.status.as_ref().ok_or("no status")?;
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Conflict" && c.status == "True")
            .ok_or(format!("no Conflict condition: {:?}", s.conditions))?;
        if s.conflicts >= 1 && c.message.contains("stray") {
            Ok(())
        } else {
            Err(format!("conflicts {}: {}", s.conflicts, c.message))
        }
    })
    .await;
    let stray = get_dynamic(c2, &secrets(), Some("shared"), "stray")
        .await
        .unwrap()
        .expect("the look-alike");
    assert_eq!(stray.uid().as_ref(), Some(&uids[0].2));
    assert_eq!(
        stray.data["data"]["v"],
        serde_json::json!(b64("stray")),
        "the look-alike was overwritten"
    );
}

/// A change is planned alone: once the copies are in sync, new
/// and changed objects cost the sink and the origin a plan of what changed,
/// never a full plan (every pair planned, every copy decided and looked at
/// for collection). Each live envelope once arrived as the end of a re-read
/// of the bus and made every pass a full one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_is_planned_alone() {
    const FULL: &str = "fleetbus_sync_full_plans_total";
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(c1, &secrets_rule("alone", &["shared"]).yaml());
    let ar = secrets();
    let copy = |name: &'static str, v: &'static str| {
        wait_copy(
            c2,
            &ar,
            Some("shared"),
            name,
            "c1",
            "alone",
            data_is(secret_data(&[("k", v)])),
        )
    };
    create_secret(c1, "shared", "first", &[("k", "0")]).await;
    copy("first", "0").await;
    let before = [c1.metric(FULL).unwrap(), c2.metric(FULL).unwrap()];
    for name in ["a", "b", "c", "d", "e"] {
        create_secret(c1, "shared", name, &[("k", "1")]).await;
        copy(name, "1").await;
    }
    let after = [c1.metric(FULL).unwrap(), c2.metric(FULL).unwrap()];
    // One full plan may fall in the window: the periodic safety net
    // (`plan::FULL_EVERY`) on a slow machine. Five changes made five or more.
    for (i, who) in ["c1", "c2"].into_iter().enumerate() {
        assert!(
            after[i] - before[i] <= 1.0,
            "{who}: {} full plans for five new objects",
            after[i] - before[i]
        );
    }
}
