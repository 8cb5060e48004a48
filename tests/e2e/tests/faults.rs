//! Faults end to end: hostile records, a hung or dead API server, a paused NATS, the bus layout deleted.
//!
//! Real nats-server, devclusters and agent processes, as in `registry.rs`;
//! hostile input is written with a plain async-nats client, faults are
//! SIGSTOP/SIGKILL of the real processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use fleetbus_schemas::crd::{Cluster, ClusterState};
use fleetbus_schemas::registry::ClusterRecord;
use fleetbus_testsupport::{http_get, wait_for, NatsServer};

async fn put(kv: &async_nats::jetstream::kv::Store, r: &ClusterRecord) {
    let key = format!("cluster.{}.{}", r.name, r.cluster_id);
    kv.put(&key, r.encode().unwrap().into()).await.unwrap();
}

/// Asserts that each of `members` still holds `count` Cluster objects.
async fn assert_nothing_deleted(members: &[&Member], count: usize) {
    for m in members {
        assert_eq!(
            m.list().await.unwrap().len(),
            count,
            "{}: objects deleted",
            m.name
        );
    }
}

fn ready_reason(c: &Cluster) -> Option<String> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == "Ready")
        .map(|x| format!("{}/{}", x.status, x.reason))
}

/// The members `m`'s own record in the bucket lists.
async fn published_members(
    kv: &async_nats::jetstream::kv::Store,
    m: &Member,
) -> Result<Vec<String>, String> {
    let keys = registry_keys(kv).await;
    let key = keys
        .iter()
        .find(|k| k.starts_with(&format!("cluster.{}.", m.name)))
        .ok_or_else(|| format!("no record of {} in {keys:?}", m.name))?;
    let entry = kv
        .get(key)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("no value")?;
    Ok(ClusterRecord::decode(&entry)
        .map_err(|e| e.to_string())?
        .members)
}

/// Item 17: a record Kubernetes would refuse is rejected at decode and
/// counted; it never blocks readiness (also after a restart) nor other
/// peers; a purged key leaves memory but its object stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_kubernetes_refuses_are_rejected_and_never_block_readiness() {
    let nats = NatsServer::start().unwrap();
    let mut a = Member::start(&nats, "a", "a", &[]).await;
    wait_mesh(&[&a], &["a"]).await;
    let kv = registry_kv(&nats).await;

    let bad_value = BTreeMap::from([("env".into(), "not a valid label value!".into())]);
    put(&kv, &peer_record("evil", "id-e", bad_value)).await;
    let huge: BTreeMap<String, String> = (0..2000)
        .map(|i| (format!("label-{i}"), "v".into()))
        .collect();
    put(&kv, &peer_record("many", "id-m", huge)).await;
    let mut bad_member = peer_record("odd", "id-o", BTreeMap::new());
    bad_member.members.push("Not_A_DNS_Label".into());
    put(&kv, &bad_member).await;
    // A valid record afterwards proves the agent read past the hostile ones.
    let good_labels = BTreeMap::from([("env".into(), "prod".into())]);
    put(&kv, &peer_record("good", "id-g", good_labels)).await;

    // Invalid records counted.
    a.wait_metric_at_least(
        "fleetbus_registry_rejected_total{reason=\"invalid_record\"}",
        3.0,
    )
    .await;
    a.wait_cluster("good").await;
    let names = a.cluster_names().await;
    assert_eq!(names, vec!["a", "good"], "hostile records created objects");
    wait_readyz(&a, 200, CONVERGE).await;

    // An agent (re)started with the hostile records in the bucket gets ready.
    a.agent.restart().unwrap();
    wait_readyz(&a, 200, CONVERGE).await;
    assert!(
        !a.agent.log().contains("reconcile failed"),
        "hostile records reached the API server:\n{}",
        a.agent.log()
    );

    // A purged key is an operator action: the peer leaves memory (and the
    // members a publishes), its object stays and turns Disconnected.
    wait_for("a to list good as a member", CONVERGE, || async {
        let m = published_members(&kv, &a).await?;
        m.contains(&"good".to_owned())
            .then_some(())
            .ok_or(format!("{m:?}"))
    })
    .await;
    kv.purge("cluster.good.id-g").await.unwrap();
    wait_for("a to forget the purged peer", CONVERGE, || async {
        let m = published_members(&kv, &a).await?;
        (m == vec!["a".to_owned()])
            .then_some(())
            .ok_or(format!("{m:?}"))
    })
    .await;
    wait_peer_state(&a, "good", ClusterState::Disconnected, CONVERGE).await;
    assert!(a.agent.is_running(), "{}", a.agent.log());
}

/// Item 18: an API server that hangs (SIGSTOP) or dies (SIGKILL) makes its
/// agent not ready within seconds and shows on peers as ApiUnreachable
/// while heartbeats keep flowing; both recover by themselves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_or_dead_api_server_shows_as_api_unreachable_and_recovers() {
    let nats = NatsServer::start().unwrap();
    let mut a = Member::start(&nats, "a", "a", &[]).await;
    let b = Member::start(&nats, "b", "b", &[]).await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;

    for fault in ["SIGSTOP", "SIGKILL"] {
        let t0 = Instant::now();
        if fault == "SIGSTOP" {
            a.cluster.pause().unwrap();
        } else {
            a.cluster.kill9();
        }
        // The API probe names `kubernetes`; a broken local watch may say
        // `local-watch` a moment earlier (it sees a killed server first).
        wait_for(
            &format!("a /readyz 503 naming kubernetes ({fault})"),
            Duration::from_secs(6),
            || async {
                match http_get(&format!("http://{}/readyz", a.metrics_addr)) {
                    Ok((503, body)) if body.contains("kubernetes") => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
        let not_ready_after = t0.elapsed();
        // Peers learn it from the heartbeat: within probe timeout + interval +
        // one heartbeat, well inside the peer timeout after that.
        wait_for(
            &format!("b to show a ApiUnreachable ({fault})"),
            Duration::from_secs(8),
            || async {
                let c = b.clusters().get("a").await.map_err(|e| e.to_string())?;
                let reason = ready_reason(&c);
                if state(&c) == Some(ClusterState::ApiUnreachable)
                    && reason.as_deref() == Some("False/ApiUnreachable")
                {
                    Ok(())
                } else {
                    Err(format!("{:?} {reason:?}", state(&c)))
                }
            },
        )
        .await;
        let peer_after = t0.elapsed();
        eprintln!("{fault}: a not ready after {not_ready_after:?}, b shows ApiUnreachable after {peer_after:?}");
        // The heartbeat keeps flowing: b keeps receiving, and a stays
        // ApiUnreachable (not Disconnected) well past the peer timeout.
        let before = b.metric("fleetbus_heartbeats_received_total").unwrap();
        wait_for("heartbeats to keep arriving at b", CONVERGE, || async {
            let now = b.metric("fleetbus_heartbeats_received_total")?;
            if now < before + 2.0 * PEER_TIMEOUT.as_secs_f64() / 0.5 {
                return Err(format!("{now} (from {before})"));
            }
            let c = b.clusters().get("a").await.map_err(|e| e.to_string())?;
            if state(&c) == Some(ClusterState::ApiUnreachable) {
                Ok(())
            } else {
                panic!("a turned {:?} while its heartbeats arrived", state(&c));
            }
        })
        .await;

        if fault == "SIGSTOP" {
            a.cluster.resume().unwrap();
        } else {
            a.cluster.restart().unwrap();
        }
        wait_readyz(&a, 200, CONVERGE).await;
        wait_peer_state(&b, "a", ClusterState::Ready, CONVERGE).await;
    }
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    assert!(a.agent.is_running(), "{}", a.agent.log());
}

/// Item 19: the registry bucket and the objects stream deleted under running
/// agents are recreated with the same configuration, re-watched, and the
/// mesh recovers; nothing is deleted meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_bus_layout_is_recreated_and_the_mesh_recovers() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &["--publish-kubeconfig"]).await;
    let b = Member::start(&nats, "b", "b", &["--publish-kubeconfig"]).await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;

    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    let both_records = |kind: &'static str| {
        let js = js.clone();
        move || {
            let js = js.clone();
            async move {
                let kv = js.get_key_value(BUCKET).await.map_err(|e| e.to_string())?;
                let keys = registry_keys(&kv).await;
                let has = |n: &str| keys.iter().any(|k| k.starts_with(&format!("{kind}.{n}.")));
                (has("a") && has("b"))
                    .then_some(())
                    .ok_or(format!("{keys:?}"))
            }
        }
    };
    wait_for(
        "both kubeconfig records",
        CONVERGE,
        both_records("kubeconfig"),
    )
    .await;
    let objects = js
        .get_stream("FLEETBUS_OBJECTS")
        .await
        .unwrap()
        .cached_info()
        .config
        .clone();
    js.delete_key_value(BUCKET).await.unwrap();
    js.delete_stream("FLEETBUS_OBJECTS").await.unwrap();

    wait_for(
        "both agents' records in a recreated bucket",
        CONVERGE,
        both_records("cluster"),
    )
    .await;
    // The reader kubeconfigs are put only when minted: they must come back too,
    // or a cluster joining later never gets them.
    wait_for(
        "both kubeconfig records in the recreated bucket",
        CONVERGE,
        both_records("kubeconfig"),
    )
    .await;
    wait_for("the objects stream recreated", CONVERGE, || async {
        let mut s = js
            .get_stream("FLEETBUS_OBJECTS")
            .await
            .map_err(|e| e.to_string())?;
        let info = s.info().await.map_err(|e| e.to_string())?;
        let same = info.config.subjects == objects.subjects
            && info.config.max_age == objects.max_age
            && info.config.max_messages_per_subject == objects.max_messages_per_subject;
        same.then_some(()).ok_or(format!("{:?}", info.config))
    })
    .await;
    let recreated = a
        .metric("fleetbus_bus_layout_recreated_total")
        .unwrap_or(0.0)
        + b.metric("fleetbus_bus_layout_recreated_total")
            .unwrap_or(0.0);
    assert!(recreated >= 1.0, "nobody counted the recreation");
    // Re-watched: each sees the other's new heartbeats, so both stay Ready.
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    wait_readyz(&a, 200, CONVERGE).await;
    wait_readyz(&b, 200, CONVERGE).await;
    let before = b.metric("fleetbus_heartbeats_received_total").unwrap();
    wait_for(
        "b to receive a's heartbeats from the new bucket",
        CONVERGE,
        || async {
            let now = b.metric("fleetbus_heartbeats_received_total")?;
            (now >= before + 4.0)
                .then_some(())
                .ok_or(format!("{now} (from {before})"))
        },
    )
    .await;
    assert_nothing_deleted(&[&a, &b], 2).await;
}

/// A stream deleted while the registry bucket lives breaks no heartbeat; the
/// periodic layout check (every 15 heartbeats) recreates it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_deleted_alone_is_recreated_by_the_periodic_check() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    wait_mesh(&[&a], &["a"]).await;
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    js.delete_stream("FLEETBUS_DRIFT").await.unwrap();
    // 15 heartbeats of 500ms.
    wait_for(
        "FLEETBUS_DRIFT recreated",
        Duration::from_secs(20),
        || async {
            js.get_stream("FLEETBUS_DRIFT")
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    // The recreation counted.
    a.wait_metric_at_least("fleetbus_bus_layout_recreated_total", 1.0)
        .await;
    wait_readyz(&a, 200, CONVERGE).await;
}

/// NATS hung (SIGSTOP) rather than killed: puts time out, so agents turn
/// not ready and peers Disconnected; after SIGCONT everything recovers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_nats_makes_agents_not_ready_and_they_recover() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    let b = Member::start(&nats, "b", "b", &[]).await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;

    nats.pause().unwrap();
    let body = wait_readyz(&a, 503, CONVERGE).await;
    assert!(body.contains("registry-publish"), "{body}");
    // The metric the chart's FleetbusAgentNotReady alert reads says the same.
    assert_eq!(a.metric("fleetbus_ready"), Ok(0.0));
    nats.resume().unwrap();
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    wait_readyz(&a, 200, CONVERGE).await;
    assert_eq!(a.metric("fleetbus_ready"), Ok(1.0));
    wait_readyz(&b, 200, CONVERGE).await;
    assert_nothing_deleted(&[&a, &b], 2).await;
}

/// The hard way, one fault after another on one mesh: garbage and forged
/// records, a paused API server, NATS killed, the bucket deleted. After each,
/// `/readyz` and the peers tell the truth, and nothing is ever deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_fault_after_another_health_tells_the_truth_and_nothing_is_deleted() {
    let mut nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    let b = Member::start(&nats, "b", "b", &[]).await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    let all_there = || async {
        for m in [&a, &b] {
            let names = m.cluster_names().await;
            assert!(
                names.contains(&"a".to_owned()) && names.contains(&"b".to_owned()),
                "{}: objects deleted: {names:?}",
                m.name
            );
        }
    };

    // Garbage and forgeries: a body under b's key claiming another cluster,
    // a record under a's name with bad labels, bytes that are no record.
    let kv = registry_kv(&nats).await;
    kv.put(
        "cluster.b.forged",
        b"{\"schema\":\"fleetbus.io/cluster/v1\"}"[..]
            .to_vec()
            .into(),
    )
    .await
    .unwrap();
    let forged = peer_record("c", "not-b", BTreeMap::new());
    kv.put("cluster.b.not-b", forged.encode().unwrap().into())
        .await
        .unwrap();
    let bad = BTreeMap::from([("x".into(), "\u{0}".into())]);
    put(&kv, &peer_record("a", "forged-id", bad)).await;
    kv.put("cluster.zz.id", b"\xff\xfe"[..].to_vec().into())
        .await
        .unwrap();
    wait_for("garbage counted by b", CONVERGE, || async {
        let text = b.metrics()?;
        let n: f64 = ["undecodable", "invalid_record", "name_mismatch"]
            .iter()
            .filter_map(|r| {
                text.lines().find_map(|l| {
                    l.strip_prefix(&format!(
                        "fleetbus_registry_rejected_total{{reason=\"{r}\"}} "
                    ))
                    .and_then(|v| v.trim().parse::<f64>().ok())
                })
            })
            .sum();
        (n >= 4.0).then_some(()).ok_or(format!(
            "{n}: {}",
            text.lines()
                .filter(|l| l.contains("rejected"))
                .collect::<Vec<_>>()
                .join(" ")
        ))
    })
    .await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    wait_readyz(&a, 200, CONVERGE).await;
    wait_readyz(&b, 200, CONVERGE).await;

    // a's API server hangs: a is not ready, b shows it ApiUnreachable.
    a.cluster.pause().unwrap();
    wait_readyz(&a, 503, Duration::from_secs(6)).await;
    wait_peer_state(
        &b,
        "a",
        ClusterState::ApiUnreachable,
        Duration::from_secs(8),
    )
    .await;
    assert_eq!(readyz(&b).unwrap().0, 200, "b's own health is unaffected");
    a.cluster.resume().unwrap();
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    all_there().await;

    // NATS dies: both are not ready and see each other Disconnected.
    nats.kill();
    for m in [&a, &b] {
        wait_readyz(m, 503, CONVERGE).await;
    }
    wait_peer_state(&a, "b", ClusterState::Disconnected, CONVERGE).await;
    all_there().await;
    nats.restart().unwrap();
    wait_mesh(&[&a, &b], &["a", "b"]).await;

    // The bucket deleted: recreated, and the mesh recovers.
    let client = async_nats::connect(nats.url()).await.unwrap();
    async_nats::jetstream::new(client)
        .delete_key_value(BUCKET)
        .await
        .unwrap();
    wait_for("a recreated bucket", CONVERGE, || async {
        registry_kv_opt(&nats).await.map(|_| ())
    })
    .await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    for m in [&a, &b] {
        wait_readyz(m, 200, CONVERGE).await;
    }
    all_there().await;
}

async fn registry_kv_opt(nats: &NatsServer) -> Result<async_nats::jetstream::kv::Store, String> {
    let client = async_nats::connect(nats.url())
        .await
        .map_err(|e| e.to_string())?;
    async_nats::jetstream::new(client)
        .get_key_value(BUCKET)
        .await
        .map_err(|e| e.to_string())
}

/// Item 17, the API side: a peer whose writes the API server refuses (here:
/// its kubeconfig Secret, 403 because the namespace is terminating) is an
/// error on that peer alone: reported once (metric + Event on the Local
/// object), other peers are materialised, and an agent restarted in that
/// state still becomes ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_the_api_server_refuses_blocks_neither_readiness_nor_other_peers() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{DeleteParams, Patch, PatchParams};
    use kube::Api;

    let nats = NatsServer::start().unwrap();
    let mut a = Member::start(&nats, "a", "a", &[]).await;
    wait_mesh(&[&a], &["a"]).await;

    // Hold the namespace of the kubeconfig Secrets in Terminating: every
    // create in it is now 403 Forbidden.
    let namespaces: Api<Namespace> = Api::all(a.client.clone());
    namespaces
        .patch(
            NAMESPACE,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"finalizers": ["example.com/hold"]}})),
        )
        .await
        .unwrap();
    namespaces
        .delete(NAMESPACE, &DeleteParams::default())
        .await
        .unwrap();

    let kv = registry_kv(&nats).await;
    // p publishes a kubeconfig (its Secret will be refused); q does not.
    let p = peer_record("p", "id-p", BTreeMap::new());
    let kubeconfig = fleetbus_schemas::registry::KubeconfigRecord {
        name: "p".into(),
        cluster_id: "id-p".into(),
        kubeconfig: "apiVersion: v1\nkind: Config\n".into(),
        expires_at: None,
        sealed: None,
    };
    kv.put("kubeconfig.p.id-p", kubeconfig.encode().unwrap().into())
        .await
        .unwrap();
    put(&kv, &p).await;
    put(&kv, &peer_record("q", "id-q", BTreeMap::new())).await;

    wait_for("q materialised although p fails", CONVERGE, || async {
        a.clusters()
            .get("q")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await;
    // p itself is materialised too, only without the refused Secret.
    let obj = wait_for("p materialised without its Secret", CONVERGE, || async {
        a.clusters().get("p").await.map_err(|e| e.to_string())
    })
    .await;
    assert_eq!(obj.spec.auth_info, None);
    // Restarted in that state, the agent still becomes ready (before, it
    // retried p every second and never finished its initial reconcile).
    a.agent.restart().unwrap();
    wait_readyz(&a, 200, CONVERGE).await;
    wait_for("the refusal reported once", CONVERGE, || async {
        let n = a.metric("fleetbus_peer_rejected_total{write=\"create Secret\"}")?;
        (n == 1.0).then_some(()).ok_or(format!("{n}"))
    })
    .await;
    wait_for(
        "a PeerRejected Event on the Local object",
        CONVERGE,
        || async {
            let events = a.events().await?;
            events
                .iter()
                .find(|e| {
                    e.reason.as_deref() == Some("PeerRejected")
                        && e.involved_object.name.as_deref() == Some("a")
                        && e.message.as_deref().is_some_and(|m| m.contains("peer p"))
                })
                .map(|_| ())
                .ok_or_else(|| {
                    let log = a.agent.log();
                    let lines: Vec<&str> = log
                        .lines()
                        .filter(|l| l.contains("refused") || l.contains("event"))
                        .collect();
                    format!("{} events; log: {lines:?}", events.len())
                })
        },
    )
    .await;
    wait_readyz(&a, 200, CONVERGE).await;

    // Many heartbeats of p later, the refusal was still reported only once
    // per agent run: p is not retried on every pass.
    let before = a
        .metric("fleetbus_heartbeats_received_total")
        .unwrap_or(0.0);
    put(&kv, &{
        let mut r = p.clone();
        r.seq = 2;
        r.heartbeat_at = chrono::Utc::now();
        r
    })
    .await;
    wait_for("p's next heartbeat received", CONVERGE, || async {
        let n = a.metric("fleetbus_heartbeats_received_total")?;
        (n > before).then_some(()).ok_or(format!("{n}"))
    })
    .await;
    assert_eq!(
        a.metric("fleetbus_peer_rejected_total{write=\"create Secret\"}")
            .unwrap(),
        1.0
    );
    assert_eq!(a.metric("fleetbus_peers_failing").unwrap(), 1.0);
    assert!(a.agent.is_running(), "{}", a.agent.log());
}

/// A cluster whose own record would be rejected by its peers (here: more
/// labels on its Local object than the protocol allows) says so itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_whose_own_record_peers_would_reject_says_so() {
    use kube::api::{Patch, PatchParams};

    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    wait_mesh(&[&a], &["a"]).await;
    assert_eq!(a.metric("fleetbus_own_record_invalid").unwrap(), 0.0);
    let labels: serde_json::Map<String, serde_json::Value> = (0..300)
        .map(|i| (format!("l{i}"), serde_json::Value::from("v")))
        .collect();
    a.clusters()
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": labels}})),
        )
        .await
        .unwrap();
    wait_for("a to report its record invalid", CONVERGE, || async {
        match a.metric("fleetbus_own_record_invalid") {
            Ok(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_logged(&a, "record is invalid");
    // Its own record, refused by its own watch too, is not put back (it would
    // be refused again) nor counted as someone else's.
    assert_eq!(
        a.metric("fleetbus_registry_foreign_puts_total").unwrap(),
        0.0
    );
}

/// The bucket deleted and recreated by someone else (an operator, or another
/// agent that noticed first): agents whose puts never failed still watch
/// the new bucket, so records put into it right away are not missed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_recreated_elsewhere_is_watched_anew() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &[]).await;
    wait_mesh(&[&a], &["a"]).await;
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    // Let the old stream's sequence run ahead of what the new one will hold.
    let old = registry_kv(&nats).await;
    for i in 0..50 {
        put(
            &old,
            &peer_record(&format!("filler{i}"), "id", BTreeMap::new()),
        )
        .await;
    }
    wait_for("the fillers materialised", CONVERGE, || async {
        let n = a.list().await?.len();
        (n == 51).then_some(()).ok_or(format!("{n}"))
    })
    .await;
    js.delete_key_value(BUCKET).await.unwrap();
    let kv = js
        .create_key_value(async_nats::jetstream::kv::Config {
            bucket: BUCKET.into(),
            history: 1,
            max_value_size: 1024 * 1024,
            ..Default::default()
        })
        .await
        .unwrap();
    put(&kv, &peer_record("late", "id-late", BTreeMap::new())).await;
    // The periodic layout check runs every 15 heartbeats (7.5 s here).
    wait_for(
        "the record put into the new bucket materialised",
        Duration::from_secs(20),
        || async {
            a.clusters()
                .get("late")
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await;
    assert_eq!(a.list().await.unwrap().len(), 52, "objects deleted");
}
