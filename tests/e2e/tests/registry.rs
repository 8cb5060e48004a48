//! Cluster registry end to end: real nats-server, devclusters and agent processes.
//!
//! Each test owns its NATS server and devclusters, so tests run in parallel.
//! Agents run with a 500ms heartbeat and a 2s peer timeout to keep tests fast.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use fleetbus_schemas::crd::{Cluster, ClusterFeature, ClusterSpec, ClusterState, ClusterType};
use fleetbus_schemas::multicluster::ClusterProfile;
use fleetbus_schemas::registry::{beat_interval, beat_ttl, BeatRecord};
use fleetbus_testsupport::{
    cargo_bin, free_socket_addr, kubectl_bin, wait_for, wait_for_blocking, Agent, AgentCommand,
    DevCluster, DevClusterOpts, NatsServer,
};
use k8s_openapi::api::core::v1::{Namespace, Node, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clusters_form_a_group_and_a_fourth_joins() {
    let nats = NatsServer::start().unwrap();
    let mut a = Member::start(&nats, "a", "a", &[]).await;
    let b = Member::start(&nats, "b", "b", &[]).await;
    let c = Member::start(&nats, "c", "c", &[]).await;
    wait_mesh(&[&a, &b, &c], &["a", "b", "c"]).await;
    a.wait_ready().await;

    // Peer objects carry what the peer published.
    let peer_b = a.clusters().get("b").await.unwrap();
    let local_b = b.clusters().get("b").await.unwrap();
    assert_eq!(peer_b.spec.cluster_id, local_b.spec.cluster_id);
    let md = peer_b
        .status
        .as_ref()
        .unwrap()
        .metadata
        .clone()
        .expect("peer metadata");
    assert_eq!(md.provider.as_deref(), Some("kind"), "{md:?}");
    assert_eq!(
        peer_b.status.as_ref().unwrap().agent_version.as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );

    // The Local object shows our own heartbeat (a recent publish) and version.
    let local_a = a.clusters().get("a").await.unwrap();
    let status = local_a.status.as_ref().unwrap();
    assert_eq!(status.type_, Some(ClusterType::Local));
    assert_eq!(
        status.agent_version.as_deref(),
        Some(env!("CARGO_PKG_VERSION"))
    );
    let beat = status
        .last_heartbeat_time
        .as_ref()
        .unwrap_or_else(|| panic!("Local object without lastHeartbeatTime: {status:?}"))
        .0
        .as_second();
    let age = chrono::Utc::now().timestamp() - beat;
    // Refreshed every 30 s while steady, plus an interval and a second of slack.
    assert!(
        (-2..=35).contains(&age),
        "Local lastHeartbeatTime is {age}s old: {status:?}"
    );

    // Labels of a Local object are the cluster's labels: published, and shown on peers.
    let patch = serde_json::json!({"metadata": {"labels": {"env": "prod"}}});
    b.clusters()
        .patch("b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    for m in [&a, &c] {
        wait_for(
            &format!("{} to see b's label", m.name),
            CONVERGE,
            || async {
                let obj = m.clusters().get("b").await.map_err(|e| e.to_string())?;
                match obj.labels().get("env") {
                    Some(v) if v == "prod" => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }

    // The record owns a peer object's labels: a label removed from b's Local
    // object disappears from b's peer objects (not just additions propagate).
    let patch = serde_json::json!({"metadata": {"labels": {"env": null, "tier": "gold"}}});
    b.clusters()
        .patch("b", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    for m in [&a, &c] {
        wait_for(
            &format!("{} to see b's label removed", m.name),
            CONVERGE,
            || async {
                let obj = m.clusters().get("b").await.map_err(|e| e.to_string())?;
                let labels = obj.labels();
                if !labels.contains_key("env")
                    && labels.get("tier").map(String::as_str) == Some("gold")
                {
                    Ok(())
                } else {
                    Err(format!("{labels:?}"))
                }
            },
        )
        .await;
    }

    // ClusterFeatures are advertised: a's view of b lists b's feature.
    let feature: ClusterFeature = serde_json::from_value(serde_json::json!({
        "apiVersion": "fleetbus.io/v1alpha1",
        "kind": "ClusterFeature",
        "metadata": {"name": "gpu"},
        "spec": {"featureName": "gpu"},
    }))
    .unwrap();
    Api::<ClusterFeature>::all(b.client.clone())
        .create(&PostParams::default(), &feature)
        .await
        .unwrap();
    wait_for("a to see b's feature", CONVERGE, || async {
        let obj = a.clusters().get("b").await.map_err(|e| e.to_string())?;
        let features = obj.status.map(|s| s.features).unwrap_or_default();
        if features == vec!["gpu".to_owned()] {
            Ok(())
        } else {
            Err(format!("{features:?}"))
        }
    })
    .await;

    let d = Member::start(&nats, "d", "d", &[]).await;
    wait_mesh(&[&a, &b, &c, &d], &["a", "b", "c", "d"]).await;

    // A steady mesh does not keep writing: count our writes over ~6 heartbeats.
    let writes = |m: &Member| m.metric("fleetbus_kube_writes_total{kind=\"cluster_status\"}");
    let before = writes(&a).unwrap();
    let beats = a.metric("fleetbus_heartbeats_published_total").unwrap();
    wait_for("6 more heartbeats", CONVERGE, || async {
        let now = a.metric("fleetbus_heartbeats_published_total")?;
        if now >= beats + 6.0 {
            Ok(())
        } else {
            Err(format!("{now}"))
        }
    })
    .await;
    let after = writes(&a).unwrap();
    // At most one lastHeartbeatTime refresh per object (three peers and the
    // Local one) may fall into the window; writing every beat would be ~24.
    assert!(
        after - before <= 4.0,
        "status writes went from {before} to {after} in a steady mesh"
    );
    // The API server agrees (it counts every write, not just the ones we meant).
    let server_writes = |v: serde_json::Value| {
        v["fleetbus.io/clusters"]
            .as_u64()
            .unwrap_or_else(|| panic!("no fleetbus.io/clusters in /debug/writes: {v}"))
    };
    let before = server_writes(b.cluster.writes().await.unwrap());
    let beats = b.metric("fleetbus_heartbeats_published_total").unwrap();
    wait_for("6 more heartbeats of b", CONVERGE, || async {
        let now = b.metric("fleetbus_heartbeats_published_total")?;
        if now >= beats + 6.0 {
            Ok(())
        } else {
            Err(format!("{now}"))
        }
    })
    .await;
    let after = server_writes(b.cluster.writes().await.unwrap());
    assert!(
        after - before <= 4,
        "the API server saw {} Cluster writes in a steady mesh",
        after - before
    );
    for m in [&a, &b, &c, &d] {
        assert_quiet_log(m);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_agent_turns_disconnected_then_recovers_without_duplicates() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    let b = Member::start(&nats, "b", "b", &[]).await;
    let mut c = Member::start(&nats, "c", "c", &[]).await;
    wait_mesh(&[&a, &b, &c], &["a", "b", "c"]).await;

    c.agent.kill9();
    let killed = Instant::now();
    // The documented detection time (PROTOCOL §5.4): the beat's TTL or our
    // peer timeout, whichever is longer, plus the server's expiry tick (about
    // a second), plus slack for polling and a busy machine.
    let interval = beat_interval(HEARTBEAT, 3);
    let detection = PEER_TIMEOUT.max(beat_ttl(interval)) + Duration::from_secs(1);
    let bound = detection + Duration::from_millis(1500);
    wait_peer_state(&a, "c", ClusterState::Disconnected, bound).await;
    wait_peer_state(&b, "c", ClusterState::Disconnected, bound).await;
    assert!(killed.elapsed() <= bound, "took {:?}", killed.elapsed());
    // The server forgot c's beat: a one-shot reader sees it Disconnected
    // with no clock of its own, and the others still Ready.
    wait_for("clusters ls to show c Disconnected", bound, || async {
        let (code, out, err) = fleetbus_cli(&nats, &["clusters", "ls", "-o", "json"]).await;
        if code != Some(0) {
            return Err(format!("exit {code:?}: {err}"));
        }
        let all: serde_json::Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        let state = |name: &str| {
            all.as_array()
                .and_then(|a| a.iter().find(|c| c["name"] == name))
                .map(|c| c["state"].as_str().unwrap_or_default().to_owned())
        };
        match (state("a"), state("b"), state("c")) {
            (Some(a), Some(b), Some(c)) if a == "Ready" && b == "Ready" && c == "Disconnected" => {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // An Event records the transition.
    wait_for("a PeerDisconnected event about c", CONVERGE, || async {
        let events = a.events().await?;
        events
            .iter()
            .find(|e| {
                e.reason.as_deref() == Some("PeerDisconnected")
                    && e.involved_object.name.as_deref() == Some("c")
                    && e.involved_object.kind.as_deref() == Some("Cluster")
            })
            .map(|_| ())
            .ok_or_else(|| format!("{} events", events.len()))
    })
    .await;

    c.agent.restart().unwrap();
    wait_mesh(&[&a, &b, &c], &["a", "b", "c"]).await;
    // No duplicates: one object per cluster everywhere, one record per cluster.
    for m in [&a, &b, &c] {
        let items = m.list().await.unwrap();
        assert_eq!(items.len(), 3, "{}: {}", m.name, summary(&items));
        assert_quiet_log(m);
    }
    let kv = registry_kv(&nats).await;
    let keys: Vec<_> = registry_keys(&kv)
        .await
        .into_iter()
        .filter(|k| k.starts_with("cluster."))
        .collect();
    assert_eq!(keys.len(), 3, "{keys:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_stop_is_left_and_disabled_annotation_is_honoured() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    let mut b = Member::start(&nats, "b", "b", &["--leave-on-shutdown"]).await;
    let c = Member::start(&nats, "c", "c", &[]).await;
    wait_mesh(&[&a, &b, &c], &["a", "b", "c"]).await;

    // Disable c on a: only a's view of c changes.
    let patch =
        serde_json::json!({"metadata": {"annotations": {"fleetbus.io/cluster-disabled": "true"}}});
    a.clusters()
        .patch("c", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_peer_state(&a, "c", ClusterState::Disabled, CONVERGE).await;
    wait_peer_state(&b, "c", ClusterState::Ready, CONVERGE).await;

    let status = b.agent.stop();
    assert!(
        status.success(),
        "agent exit status {status:?}; log:\n{}",
        b.agent.log()
    );
    wait_peer_state(&a, "b", ClusterState::Left, CONVERGE).await;
    wait_peer_state(&c, "b", ClusterState::Left, CONVERGE).await;
    // Left is final until it comes back; it does not decay to Disconnected.
    let beats = a.metric("fleetbus_heartbeats_published_total").unwrap();
    wait_for(
        "a to publish for longer than the peer timeout",
        CONVERGE,
        || async {
            let now = a.metric("fleetbus_heartbeats_published_total")?;
            if now >= beats + 6.0 {
                Ok(())
            } else {
                Err(format!("{now}"))
            }
        },
    )
    .await;
    let obj = a.clusters().get("b").await.unwrap();
    assert_eq!(state(&obj), Some(ClusterState::Left));
    // Nothing was deleted.
    assert_eq!(a.list().await.unwrap().len(), 3);
}

/// The Local object's lastHeartbeatTime in Unix seconds.
async fn local_heartbeat(m: &Member) -> Result<i64, String> {
    let c = m.clusters().get(&m.name).await.map_err(|e| e.to_string())?;
    c.status
        .and_then(|s| s.last_heartbeat_time)
        .map(|t| t.0.as_second())
        .ok_or_else(|| "no lastHeartbeatTime".to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_heartbeat_time_is_refreshed_every_30s_without_peers() {
    let nats = NatsServer::start().unwrap();
    let mut a = Member::start(&nats, "a", "a", &[]).await;
    wait_mesh(&[&a], &["a"]).await;
    a.wait_ready().await;
    let writes = || {
        a.metric("fleetbus_kube_writes_total{kind=\"cluster_status\"}")
            .unwrap()
    };
    let (t0, w0) = (local_heartbeat(&a).await.unwrap(), writes());
    // No peer heartbeat wakes the reconciler here: the refresh must come on
    // its own, after 30 s and not on every beat.
    // The write is counted once its answer is back, which a loaded machine
    // may let the test's read of the object beat: wait for both.
    wait_for(
        "the Local heartbeat to be refreshed and its write counted",
        Duration::from_secs(45),
        || async {
            let (t, w) = (local_heartbeat(&a).await?, writes());
            if t > t0 && w > w0 {
                Ok(())
            } else {
                Err(format!("still {t}, {} writes", w - w0))
            }
        },
    )
    .await;
    let (t1, w1) = (local_heartbeat(&a).await.unwrap(), writes());
    assert!(
        (30..=34).contains(&(t1 - t0)),
        "refreshed after {}s",
        t1 - t0
    );
    assert_eq!(w1 - w0, 1.0, "one status write per refresh");
    assert_quiet_log(&a);
}

/// The zones a's view of `peer` shows in status.metadata.locality.
async fn peer_zones(m: &Member, peer: &str) -> Result<Vec<String>, String> {
    let c = m.clusters().get(peer).await.map_err(|e| e.to_string())?;
    Ok(c.status
        .and_then(|s| s.metadata)
        .and_then(|md| md.locality)
        .map(|l| l.zones)
        .unwrap_or_default())
}

async fn wait_zones(m: &Member, peer: &str, want: &[&str]) {
    // Nodes are watched: a change shows on peers within a heartbeat or two.
    wait_for(
        &format!("{} to show zones {want:?} for {peer}", m.name),
        Duration::from_secs(5),
        || async {
            let zones = peer_zones(m, peer).await?;
            if zones == want {
                Ok(())
            } else {
                Err(format!("{zones:?}"))
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_changes_reach_peers_and_node_heartbeats_do_not() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    let b = Member::start(&nats, "b", "b", &[]).await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    wait_zones(&a, "b", &["dev-region-1a", "dev-region-1b"]).await;
    let changes = || b.metric("fleetbus_metadata_changes_total").unwrap();
    let before = changes();
    let nodes = Api::<Node>::all(b.client.clone());

    // Kubelet-style status updates (heartbeat times, conditions) are not
    // metadata: they must not be republished nor written anywhere.
    for i in 0..5 {
        let at = format!("2026-01-01T00:00:0{i}Z");
        let patch = serde_json::json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "lastHeartbeatTime": at, "lastTransitionTime": "2026-01-01T00:00:00Z"}
        ]}});
        nodes
            .patch_status("node-1", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }
    // A zone label change is metadata: a peer shows it within seconds.
    let patch = serde_json::json!({"metadata": {"labels": {"topology.kubernetes.io/zone": "dev-region-1z"}}});
    nodes
        .patch("node-2", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    wait_zones(&a, "b", &["dev-region-1a", "dev-region-1z"]).await;
    // Watch events arrive in order: the status updates were seen before the
    // label change, and only the label change counted.
    assert_eq!(
        changes(),
        before + 1.0,
        "status-only Node updates republished"
    );

    // So is a new Node, and b's own Local object shows it too.
    let node: Node = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "node-9", "labels": {
            "topology.kubernetes.io/region": "dev-region-1",
            "topology.kubernetes.io/zone": "dev-region-1q",
        }},
        "spec": {"providerID": "kind://docker/b/node-9"},
        "status": {"nodeInfo": {"kubeletVersion": "v1.33.2"}},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    wait_zones(
        &a,
        "b",
        &["dev-region-1a", "dev-region-1q", "dev-region-1z"],
    )
    .await;
    wait_zones(
        &b,
        "b",
        &["dev-region-1a", "dev-region-1q", "dev-region-1z"],
    )
    .await;
    let md = b
        .clusters()
        .get("b")
        .await
        .unwrap()
        .status
        .unwrap()
        .metadata
        .unwrap();
    assert_eq!(md.kubelet_versions, vec!["v1.33.1", "v1.33.2"], "{md:?}");
    assert_eq!(changes(), before + 2.0);
    for m in [&a, &b] {
        assert_quiet_log(m);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_local_cluster_objects_are_reported() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    wait_mesh(&[&a], &["a"]).await;
    let local = a.clusters().get("a").await.unwrap();
    let imposter = Cluster {
        metadata: ObjectMeta {
            name: Some("imposter".into()),
            ..ObjectMeta::default()
        },
        spec: ClusterSpec {
            cluster_id: local.spec.cluster_id.clone(),
            ..ClusterSpec::default()
        },
        status: None,
    };
    a.clusters()
        .create(&PostParams::default(), &imposter)
        .await
        .unwrap();
    for name in ["a", "imposter"] {
        wait_for(&format!("LocalConflict on {name}"), CONVERGE, || async {
            let c = a.clusters().get(name).await.map_err(|e| e.to_string())?;
            match condition(&c, "LocalConflict").as_deref() {
                Some("True") => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
    }
    // Both objects are left alone.
    let after = a.clusters().get("imposter").await.unwrap();
    assert_eq!(after.spec, imposter.spec);
    assert_eq!(a.list().await.unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_cluster_names_are_reported_by_both() {
    let nats = NatsServer::start().unwrap();
    let x1 = Member::start(&nats, "x1", "x", &[]).await;
    let x2 = Member::start(&nats, "x2", "x", &[]).await;
    let w = Member::start(&nats, "w", "w", &[]).await;
    for m in [&x1, &x2] {
        wait_for(
            &format!("NameConflict on {}", m.cluster.name),
            CONVERGE,
            || async {
                let c = m.clusters().get("x").await.map_err(|e| e.to_string())?;
                let metric = m.metric("fleetbus_cluster_name_conflicts")?;
                match condition(&c, "NameConflict").as_deref() {
                    Some("True") if metric >= 1.0 => Ok(()),
                    other => Err(format!("condition {other:?}, metric {metric}")),
                }
            },
        )
        .await;
        assert_eq!(
            type_of(&m.clusters().get("x").await.unwrap()),
            Some(ClusterType::Local)
        );
    }
    wait_peer_state(&w, "x", ClusterState::Conflict, CONVERGE).await;
    // Neither overwrote the other: two records, keyed by clusterID.
    let kv = registry_kv(&nats).await;
    let keys: Vec<_> = registry_keys(&kv)
        .await
        .into_iter()
        .filter(|k| k.starts_with("cluster.x."))
        .collect();
    assert_eq!(keys.len(), 2, "{keys:?}");
    for m in [&x1, &x2] {
        assert_logged(m, "claims this cluster's name");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn published_kubeconfig_lets_a_peer_read_the_origin() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &["--publish-kubeconfig"]).await;
    // The origin serves TLS and demands a bearer token: the published kubeconfig
    // must carry the CA and a token the origin accepts.
    let origin = DevClusterOpts {
        tls: true,
        token: Some("admin-only-token".into()),
        ..DevClusterOpts::new("b")
    };
    let b = Member::start_with(&nats, origin, "b", &["--publish-kubeconfig"]).await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    // Something only the origin has.
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("only-on-b".into()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(b.client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    let secrets: Api<Secret> = Api::namespaced(a.client.clone(), NAMESPACE);
    let secret = wait_for("a to store b's kubeconfig", CONVERGE, || async {
        secrets.get("b-kubeconfig").await.map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(
        secret.type_.as_deref(),
        Some("fleetbus.io/cluster-kubeconfig")
    );
    let peer = wait_for("b's spec.authInfo on a", CONVERGE, || async {
        let c = a.clusters().get("b").await.map_err(|e| e.to_string())?;
        c.spec
            .auth_info
            .clone()
            .ok_or_else(|| "no authInfo".to_owned())
    })
    .await;
    assert_eq!(peer.secret_ref.name, "b-kubeconfig");
    assert_eq!(peer.secret_ref.namespace, NAMESPACE);

    let kubeconfig = &secret.data.as_ref().unwrap()["kubeconfig"].0;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("b.kubeconfig");
    std::fs::write(&path, kubeconfig).unwrap();
    let out = std::process::Command::new(kubectl_bin("1.33"))
        .arg("--kubeconfig")
        .arg(&path)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args(["get", "ns", "-o", "name"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("namespace/only-on-b"), "{stdout}");
    assert!(stdout.contains("namespace/kube-system"), "{stdout}");
    let text = String::from_utf8_lossy(kubeconfig);
    assert!(text.contains("https://"), "{text}");
    assert!(text.contains("certificate-authority-data"), "{text}");
    assert!(
        !text.contains("admin-only-token"),
        "the agent's own credentials leaked"
    );

    // The devcluster does not enforce RBAC, so what the token may do is checked
    // on the ClusterRole the origin's agent applied: read-only, never Secrets.
    let role = Api::<ClusterRole>::all(b.client.clone())
        .get("fleetbus-reader")
        .await
        .unwrap();
    let rules = role.rules.unwrap_or_default();
    assert!(!rules.is_empty());
    for rule in &rules {
        let groups = rule.api_groups.clone().unwrap_or_default();
        let resources = rule.resources.clone().unwrap_or_default();
        assert!(!groups.iter().any(|g| g == "*"), "{rule:?}");
        if groups.iter().any(String::is_empty) {
            assert!(
                !resources
                    .iter()
                    .any(|r| r == "*" || r.starts_with("secrets")),
                "{rule:?}"
            );
            assert!(resources.iter().any(|r| r == "namespaces"), "{rule:?}");
        }
        assert!(
            rule.verbs
                .iter()
                .all(|v| ["get", "list", "watch"].contains(&v.as_str())),
            "{rule:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_broad_reader_role_is_narrowed() {
    let nats = NatsServer::start().unwrap();
    let cluster = DevCluster::start(DevClusterOpts::new("old-role")).unwrap();
    let client = cluster.client().await.unwrap();
    // What agents before the Secrets fix applied, with the same field manager.
    let broad = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "fleetbus-reader"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch"]}],
    });
    let roles = Api::<ClusterRole>::all(client.clone());
    roles
        .patch(
            "fleetbus-reader",
            &PatchParams::apply("fleetbus-agent").force(),
            &Patch::Apply(&broad),
        )
        .await
        .unwrap();
    let cmd = AgentCommand::new("old-role")
        .nats_url(nats.url())
        .kubeconfig(cluster.kubeconfig())
        .metrics_addr(free_socket_addr())
        .publish_kubeconfig(true);
    let mut agent = Agent::start(cmd.argv()).unwrap();
    wait_for("the reader role to be narrowed", CONVERGE, || async {
        let role = roles
            .get("fleetbus-reader")
            .await
            .map_err(|e| e.to_string())?;
        let rules = role.rules.unwrap_or_default();
        let wildcard = rules.iter().any(|r| {
            r.api_groups
                .as_deref()
                .unwrap_or_default()
                .iter()
                .any(|g| g == "*")
        });
        if wildcard || rules.is_empty() {
            Err(format!("{rules:?}"))
        } else {
            Ok(())
        }
    })
    .await;
    assert!(agent.is_running(), "{}", agent.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_registry_records_are_skipped_and_counted() {
    let nats = NatsServer::start().unwrap();
    let mut a = Member::start(&nats, "a", "a", &[]).await;
    wait_mesh(&[&a], &["a"]).await;
    let kv = registry_kv(&nats).await;
    // Valid records are built with the schemas crate; the bad ones are edited JSON.
    let record = |schema: &str, name: &str, id: &str| {
        let r = peer_record(name, id, Default::default());
        let mut json: serde_json::Value = serde_json::from_slice(&r.encode().unwrap()).unwrap();
        json["schema"] = schema.into();
        serde_json::to_vec(&json).unwrap()
    };
    kv.put("cluster.junk.id-1", b"\xff\x00not json"[..].to_vec().into())
        .await
        .unwrap();
    kv.put(
        "cluster.wrong.id-2",
        record("fleetbus.io/cluster/v99", "wrong", "id-2").into(),
    )
    .await
    .unwrap();
    kv.put(
        "cluster.mismatch.id-3",
        record("fleetbus.io/cluster/v1", "other", "id-3").into(),
    )
    .await
    .unwrap();
    // A valid record afterwards proves the agent read past the garbage.
    kv.put(
        "cluster.good.id-4",
        record("fleetbus.io/cluster/v1", "good", "id-4").into(),
    )
    .await
    .unwrap();
    wait_for("rejections counted", CONVERGE, || async {
        let text = a.metrics()?;
        let get = |reason: &str| {
            metric_value(
                &text,
                &format!("fleetbus_registry_rejected_total{{reason=\"{reason}\"}}"),
            )
        };
        match (
            get("undecodable"),
            get("wrong_schema"),
            get("name_mismatch"),
        ) {
            (Some(u), Some(w), Some(n)) if u >= 1.0 && w >= 1.0 && n >= 1.0 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    a.wait_cluster("good").await;
    let names = a.cluster_names().await;
    assert_eq!(
        names,
        vec!["a".to_owned(), "good".to_owned()],
        "garbage created objects"
    );
    assert!(a.agent.is_running(), "agent died:\n{}", a.agent.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_and_malformed_beats_are_counted_and_ignored_and_do_not_revive_a_left_peer() {
    let nats = NatsServer::start().unwrap();
    let mut a = Member::start(&nats, "a", "a", &[]).await;
    let mut b = Member::start(&nats, "b", "b", &["--leave-on-shutdown"]).await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    let b_id = a.clusters().get("b").await.unwrap().spec.cluster_id;
    assert!(b.agent.stop().success(), "{}", b.agent.log());
    wait_peer_state(&a, "b", ClusterState::Left, CONVERGE).await;

    let beats = beats_kv(&nats).await;
    let before = |text: &str, reason: &str| {
        metric_value(
            text,
            &format!("fleetbus_registry_rejected_total{{reason=\"{reason}\"}}"),
        )
        .unwrap_or(0.0)
    };
    let text = a.metrics().unwrap();
    let (u0, w0, k0) = (
        before(&text, "undecodable"),
        before(&text, "wrong_schema"),
        before(&text, "bad_key"),
    );
    let forged = |seq: u64| {
        BeatRecord {
            seq,
            started_at: chrono::Utc::now(),
            interval_ms: 500,
        }
        .encode()
        .unwrap()
    };
    // A well-formed beat for the peer that left, from a new "run", again
    // and again; then garbage, so the counters below prove these were read.
    for seq in 1..=5 {
        beats
            .put(format!("beat.b.{b_id}"), forged(seq).into())
            .await
            .unwrap();
    }
    beats
        .put("beat.junk.id-1", b"\xff\x00not json"[..].to_vec().into())
        .await
        .unwrap();
    let record = peer_record("wrong", "id-2", Default::default());
    beats
        .put("beat.wrong.id-2", record.encode().unwrap().into())
        .await
        .unwrap();
    beats.put("cluster.b.x", forged(1).into()).await.unwrap();
    wait_for("bad beats counted", CONVERGE, || async {
        let text = a.metrics()?;
        let (u, w, k) = (
            before(&text, "undecodable"),
            before(&text, "wrong_schema"),
            before(&text, "bad_key"),
        );
        if u > u0 && w > w0 && k > k0 {
            Ok(())
        } else {
            Err(format!("{u} {w} {k}"))
        }
    })
    .await;
    // The agent read past the beats for b: b is still Left, nothing new appeared.
    // Longer than the peer timeout (a beats every 500 ms): no pass in
    // between made b alive.
    let published = a.metric("fleetbus_heartbeats_published_total").unwrap();
    a.wait_metric_at_least("fleetbus_heartbeats_published_total", published + 6.0)
        .await;
    let b_obj = a.clusters().get("b").await.unwrap();
    assert_eq!(state(&b_obj), Some(ClusterState::Left), "{b_obj:?}");
    assert_eq!(
        a.cluster_names().await,
        vec!["a".to_owned(), "b".to_owned()]
    );
    assert!(a.agent.is_running(), "agent died:\n{}", a.agent.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mesh_survives_a_nats_restart() {
    let mut nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    let b = Member::start(&nats, "b", "b", &[]).await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;

    nats.kill();
    // Without the bus nobody hears anybody: both see the other go silent.
    wait_peer_state(&a, "b", ClusterState::Disconnected, CONVERGE).await;
    wait_peer_state(&b, "a", ClusterState::Disconnected, CONVERGE).await;
    // a is not ready without NATS.
    wait_readyz(&a, 503, CONVERGE).await;

    nats.restart().unwrap();
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    for m in [&a, &b] {
        assert_eq!(m.list().await.unwrap().len(), 2, "{}", m.name);
    }
}

/// Speaks just enough NATS for a client to connect: an INFO line claiming
/// `version`, then PONG for every PING.
async fn fake_nats_server(listener: tokio::net::TcpListener, version: &'static str) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    while let Ok((sock, _)) = listener.accept().await {
        tokio::spawn(async move {
            let (read, mut write) = sock.into_split();
            let info = serde_json::json!({
                "server_id": "FAKE", "server_name": "fake", "version": version,
                "proto": 1, "headers": true, "max_payload": 1_048_576,
            });
            if write
                .write_all(format!("INFO {info}\r\n").as_bytes())
                .await
                .is_err()
            {
                return;
            }
            let mut lines = BufReader::new(read).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                if line.starts_with("PING") && write.write_all(b"PONG\r\n").await.is_err() {
                    return;
                }
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_a_nats_server_older_than_2_11() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("nats://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(fake_nats_server(listener, "2.10.29"));
    let cluster = DevCluster::start(DevClusterOpts::new("old")).unwrap();
    // The URL comes from the environment: every flag also reads FLEETBUS_*.
    let cmd = AgentCommand::new("old")
        .kubeconfig(cluster.kubeconfig())
        .metrics_addr(free_socket_addr());
    let mut agent =
        Agent::start_with_env(cmd.argv(), [("FLEETBUS_NATS_URL", url.as_str())]).unwrap();
    let status = tokio::task::block_in_place(|| {
        wait_for_blocking("the agent to exit", CONVERGE, || {
            agent
                .exit_status()
                .ok_or_else(|| "still running".to_owned())
        })
    });
    server.abort();
    let log = agent.log();
    assert_eq!(status.code(), Some(1), "{log}");
    // The one `error:` line; not necessarily the last line, as the NATS client
    // may still log its connection closing after it.
    let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{log}");
    assert!(
        errors[0].contains("2.10.29") && errors[0].contains("2.11.0"),
        "{log}"
    );
}

#[test]
fn bad_flags_exit_with_usage_code() {
    for args in [
        vec![],
        vec!["--cluster-name", "Not_A_Label"],
        vec!["--cluster-name", "a", "--heartbeat-interval", "soon"],
        vec![
            "--cluster-name",
            "a",
            "--heartbeat-interval",
            "2s",
            "--peer-timeout",
            "1s",
        ],
    ] {
        let out = std::process::Command::new(cargo_bin("fleetbus-agent"))
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("error:"), "{args:?}: {stderr}");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
}

/// A reconcile pass walks every peer, so one pass per Cluster
/// watch event made a fleet's joins cost N passes of N peers. 150 peers
/// joining at once are 300 and more watch events (each object's create and
/// status write); the agent must fold the events waiting before a pass into
/// it. Without that, each event woke a pass of its own (577 here, checked);
/// folding only the events already queued still gave 88 in CI, where the
/// writes came one by one; folding until 50 ms of quiet gives 2 to 4 here
/// with four busy loops on the two cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_joining_at_once_wake_few_reconcile_passes() {
    const PEERS: usize = 150;
    const WATCH_PASSES: &str = "fleetbus_registry_passes_total{wake=\"cluster_watch\"}";
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    wait_mesh(&[&a], &["a"]).await;
    let before = a.metric(WATCH_PASSES).unwrap_or(0.0);
    let kv = registry_kv(&nats).await;
    for i in 0..PEERS {
        let r = peer_record(&format!("p{i:03}"), &format!("id-{i}"), Default::default());
        kv.put(
            format!("cluster.{}.{}", r.name, r.cluster_id),
            r.encode().unwrap().into(),
        )
        .await
        .unwrap();
    }
    wait_for(
        &format!("{PEERS} peer objects with a status"),
        CONVERGE,
        || async {
            let items = a.list().await?;
            let with_status = items.iter().filter(|c| state(c).is_some()).count();
            if with_status > PEERS {
                Ok(())
            } else {
                Err(format!("{with_status} objects with a status"))
            }
        },
    )
    .await;
    // The watch events of those objects reach the agent after the writes:
    // wait until its passes settle (no new one for 2 s), then count.
    let last = std::sync::Mutex::new((f64::NAN, Instant::now()));
    wait_for("the agent's passes to settle", CONVERGE, || async {
        let now = a.metric(WATCH_PASSES)?;
        let mut last = last.lock().unwrap();
        if now != last.0 {
            *last = (now, Instant::now());
        }
        if last.1.elapsed() >= Duration::from_secs(2) {
            Ok(())
        } else {
            Err(format!("{now} passes, still moving"))
        }
    })
    .await;
    let passes = a.metric(WATCH_PASSES).unwrap() - before;
    assert!(
        passes < (PEERS / 2) as f64,
        "{passes} passes woken by the Cluster watch for {PEERS} joining peers"
    );
}

fn profiles(m: &Member) -> Api<ClusterProfile> {
    Api::namespaced(m.client.clone(), NAMESPACE)
}

/// The status of condition `type_` of profile `name` on `m`.
async fn profile_condition(m: &Member, name: &str, type_: &str) -> Result<String, String> {
    let p = profiles(m).get(name).await.map_err(|e| e.to_string())?;
    p.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
        .map(|c| c.status.clone())
        .ok_or_else(|| format!("{name} has no {type_} condition yet"))
}

async fn wait_profile(m: &Member, name: &str, type_: &str, want: &str) {
    wait_for(
        &format!("{}: ClusterProfile {name} {type_}={want}", m.name),
        CONVERGE,
        || async {
            let got = profile_condition(m, name, type_).await?;
            if got == want {
                Ok(())
            } else {
                Err(got)
            }
        },
    )
    .await;
}

/// `kubectl get clusterproperty <name>`'s value on `m`, as a user reads it.
fn property(m: &Member, name: &str) -> Option<String> {
    let out = m.cluster.kubectl(
        "1.33",
        &[
            "get",
            "clusterproperty",
            name,
            "-o",
            "jsonpath={.spec.value}",
        ],
    );
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_inventory_and_identity_follow_the_fleet() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    let b = Member::start(
        &nats,
        "b",
        "b",
        &["--leave-on-shutdown", "--fleet-name", "prod"],
    )
    .await;
    let mut c = Member::start(&nats, "c", "c", &["--publish-kubeconfig"]).await;
    wait_mesh(&[&a, &b, &c], &["a", "b", "c"]).await;
    // The CRDs are not the chart's: until a platform team installs them the
    // agent says so, and it starts writing once they are served.
    let missing = "fleetbus_standard_crd_missing{crd=\"clusterprofiles.multicluster.x-k8s.io\"}";
    wait_for("a to report the missing CRD", CONVERGE, || async {
        match a.metric(missing)? {
            1.0 => Ok(()),
            v => Err(format!("{v}")),
        }
    })
    .await;
    assert_logged(&a, "is not installed");
    for m in [&a, &b, &c] {
        install_upstream_crds(
            m,
            &[
                "multicluster.x-k8s.io_clusterprofiles.yaml",
                "about.k8s.io_clusterproperties.yaml",
            ],
        );
    }
    for name in ["a", "b", "c"] {
        wait_profile(&a, name, "Joined", "True").await;
        wait_profile(&a, name, "ControlPlaneHealthy", "True").await;
    }
    assert_eq!(a.metric(missing).unwrap(), 0.0);
    let p = profiles(&a).get("c").await.unwrap();
    assert_eq!(p.spec.cluster_manager.name, "fleetbus");
    assert_eq!(p.spec.display_name.as_deref(), Some("c"));
    assert_eq!(
        p.labels()
            .get("x-k8s.io/cluster-manager")
            .map(String::as_str),
        Some("fleetbus")
    );
    let status = p.status.clone().unwrap();
    assert!(status
        .version
        .and_then(|v| v.kubernetes)
        .is_some_and(|v| v.starts_with("v1.")));
    let prop = |name: &str| {
        status
            .properties
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.value.clone())
    };
    assert_eq!(prop("cluster.clusterset.k8s.io").as_deref(), Some("c"));
    assert_eq!(prop("clusterset.k8s.io").as_deref(), Some("fleetbus"));
    assert!(status
        .properties
        .iter()
        .all(|p| p.last_observed_time.is_some()));
    let ns = Api::<Namespace>::all(a.client.clone())
        .get(NAMESPACE)
        .await
        .unwrap();
    assert_eq!(
        ns.labels()
            .get("multicluster.x-k8s.io/clusterset")
            .map(String::as_str),
        Some("fleetbus")
    );
    // Each cluster's identity, as `kubectl get clusterproperty` reads it.
    for (m, set) in [(&a, "fleetbus"), (&b, "prod"), (&c, "fleetbus")] {
        let (id, m_set) = wait_for(
            &format!("{}'s ClusterProperties", m.name),
            CONVERGE,
            || async {
                match (
                    property(m, "cluster.clusterset.k8s.io"),
                    property(m, "clusterset.k8s.io"),
                ) {
                    (Some(id), Some(set)) => Ok((id, set)),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        assert_eq!((id.as_str(), m_set.as_str()), (m.name.as_str(), set));
    }

    // Only c publishes a kubeconfig: its profile alone says how to reach it,
    // and a kubeconfig made of that and the exec plugin reads c.
    let access = wait_for("c's access provider on a", CONVERGE, || async {
        let p = profiles(&a).get("c").await.map_err(|e| e.to_string())?;
        p.status
            .and_then(|s| s.access_providers.into_iter().next())
            .ok_or_else(|| "none yet".to_owned())
    })
    .await;
    assert_eq!(access.name, "fleetbus");
    let b_profile = profiles(&a).get("b").await.unwrap();
    assert!(b_profile.status.unwrap().access_providers.is_empty());
    let cluster = access.cluster.unwrap();
    let extension = &cluster.extensions[0];
    assert_eq!(extension.name, "client.authentication.k8s.io/exec");
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {
            "server": cluster.server,
            "certificate-authority-data": cluster.certificate_authority_data,
            "extensions": [{"name": extension.name, "extension": extension.extension}],
        }}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "fleetbus"}}],
        "users": [{"name": "fleetbus", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": cargo_bin("fleetbus-credentials").display().to_string(),
            "provideClusterInfo": true,
            "interactiveMode": "Never",
            // The plugin reads the reader Secret in the consumer's cluster, a.
            "env": [{"name": "KUBECONFIG", "value": a.cluster.kubeconfig().display().to_string()}],
        }}}],
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("from-profile.kubeconfig");
    std::fs::write(&path, serde_json::to_vec(&kubeconfig).unwrap()).unwrap();
    c.create_namespace("only-on-c").await.unwrap();
    let out = std::process::Command::new(kubectl_bin("1.33"))
        .arg("--kubeconfig")
        .arg(&path)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .args(["get", "ns", "-o", "name"])
        .env_remove("KUBERNETES_EXEC_INFO")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kubectl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("namespace/only-on-c"), "{stdout}");

    // The devcluster refuses what kube-apiserver refuses: clusterManager is
    // immutable (the CRD's CEL rule), and a map list's keys are unique.
    let patch = serde_json::json!({"spec": {"clusterManager": {"name": "someone-else"}}});
    let err = profiles(&a)
        .patch("c", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap_err();
    match err {
        kube::Error::Api(s) => {
            assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"), "{s:?}");
            assert!(
                s.message.contains(
                    "spec.clusterManager: Invalid value: \"object\": ClusterManager is immutable"
                ),
                "{}",
                s.message
            );
        }
        other => panic!("{other:?}"),
    }
    // Another manager's profile in the same namespace is left alone.
    let foreign = serde_json::json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
        "metadata": {"name": "elsewhere", "namespace": NAMESPACE,
                     "labels": {"x-k8s.io/cluster-manager": "fleetbus"}},
        "spec": {"clusterManager": {"name": "other-manager"}},
    });
    let foreign: ClusterProfile = serde_json::from_value(foreign).unwrap();
    profiles(&a)
        .create(&PostParams::default(), &foreign)
        .await
        .unwrap();

    // Conditions follow the peer: killed, Unknown; back, True.
    c.agent.kill9();
    wait_profile(&a, "c", "ControlPlaneHealthy", "Unknown").await;
    assert_eq!(profile_condition(&a, "c", "Joined").await.unwrap(), "True");
    c.agent.restart().unwrap();
    wait_profile(&a, "c", "ControlPlaneHealthy", "True").await;

    // A member that leaves is no longer Joined, and its ClusterSet property goes.
    let mut b = b;
    assert!(b.agent.stop().success(), "{}", b.agent.log());
    wait_profile(&a, "b", "Joined", "False").await;
    wait_profile(&c, "b", "Joined", "False").await;
    assert_eq!(property(&b, "clusterset.k8s.io"), None);
    assert_eq!(
        property(&b, "cluster.clusterset.k8s.io").as_deref(),
        Some("b")
    );
    let left = profiles(&a).get("b").await.unwrap().status.unwrap();
    assert!(!left
        .properties
        .iter()
        .any(|p| p.name == "clusterset.k8s.io"));
    let foreign = profiles(&a).get("elsewhere").await.unwrap();
    assert!(
        foreign.status.is_none(),
        "another manager's profile was written"
    );
    assert_eq!(foreign.spec.cluster_manager.name, "other-manager");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflicting_cluster_name_in_its_clusterset_stops_the_agent() {
    let opts = DevClusterOpts::new("x");
    let dc = DevCluster::start(opts).unwrap();
    let dir = fleetbus_testsupport::upstream_crds();
    let path = dir.join("about.k8s.io_clusterproperties.yaml");
    let out = dc.kubectl("1.33", &["create", "-f", path.to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let property = r#"{"apiVersion":"about.k8s.io/v1alpha1","kind":"ClusterProperty","metadata":{"name":"cluster.clusterset.k8s.io"},"spec":{"value":"known-as-y"}}"#;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), property).unwrap();
    let out = dc.kubectl("1.33", &["create", "-f", file.path().to_str().unwrap()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let nats = NatsServer::start().unwrap();
    let out = std::process::Command::new(cargo_bin("fleetbus-agent"))
        .args(
            AgentCommand::new("x")
                .nats_url(nats.url())
                .kubeconfig(dc.kubeconfig())
                .metrics_addr(free_socket_addr())
                .argv(),
        )
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    assert!(
        format!("{stdout}{stderr}").contains(
            "says this cluster is \"known-as-y\" in its ClusterSet, but --cluster-name is \"x\""
        ),
        "{stdout}{stderr}"
    );
}
