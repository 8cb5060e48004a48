//! Rule sync under faults and at rest, end to end: a
//! disabled peer, partitions and crashed agents never delete copies on
//! silence, state-based catch-up after a restart, zero writes after
//! convergence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::collections::BTreeMap;

use common::sync::*;
use common::*;
use fleetbus_schemas::crd::ClusterState;
use fleetbus_testsupport::{wait_for, NatsServer};
use kube::ResourceExt;

async fn shared_fleet(nats: &NatsServer, names: &[&str]) -> Vec<Member> {
    let m = fleet(nats, names).await;
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(&m[0], &shared_secrets_rule().yaml());
    m
}

/// Waits for the copy of `shared/<name>` from `origin` on `sink`; returns its uid.
async fn copy_uid(sink: &Member, name: &str, origin: &str) -> String {
    wait_copy(
        sink,
        &secrets(),
        Some("shared"),
        name,
        origin,
        "shared-secrets",
        |_| Ok(()),
    )
    .await
    .uid()
    .expect("uid")
}

/// Asserts that each (member, name) still holds the very copy with that uid
/// (neither deleted nor recreated).
async fn assert_same_copies(copies: &[(&Member, &str, String)]) {
    for (m, name, uid) in copies {
        let o = get_dynamic(m, &secrets(), Some("shared"), name)
            .await
            .unwrap();
        let got = o.as_ref().and_then(ResourceExt::uid);
        assert_eq!(
            got.as_ref(),
            Some(uid),
            "{}: copy {name} was deleted or recreated",
            m.name
        );
    }
}

/// c1 annotates its Peer Cluster c2 `fleetbus.io/cluster-disabled`: c2 no
/// longer qualifies as a source there, so c2's existing copy on c1 goes by
/// orphanPolicy (Delete) and c2's new objects do not reach c1, while c1's
/// objects still reach c2.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabled_peer() {
    let nats = NatsServer::start().unwrap();
    let m = shared_fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    create_secret(c2, "shared", "s1", &[("k", "1")]).await;
    copy_uid(c1, "s1", "c2").await;

    kubectl(
        c1,
        &[
            "annotate",
            "clusters.fleetbus.io",
            "c2",
            "fleetbus.io/cluster-disabled=true",
        ],
    );
    wait_peer_state(c1, "c2", ClusterState::Disabled, SYNC).await;
    wait_absent(c1, &secrets(), Some("shared"), "s1").await;
    wait_rule(c1, "shared-secrets", "without sources", |r| {
        match r.status.as_ref() {
            Some(s) if s.source_clusters.is_empty() => Ok(()),
            _ => Err("sources".into()),
        }
    })
    .await;

    create_secret(c2, "shared", "s2", &[("k", "2")]).await;
    // c1 -> c2 still flows; c2's stream is the same bus, so s2 would be there by now.
    create_secret(c1, "shared", "p", &[("k", "3")]).await;
    copy_uid(c2, "p", "c1").await;
    assert_absent(c1, &secrets(), Some("shared"), "s2").await;
    get_dynamic(c2, &secrets(), Some("shared"), "s1")
        .await
        .unwrap()
        .expect("original s1");
}

/// A crashed agent (c2, silent: Disconnected on its peers) and then a hung
/// NATS server (every peer Disconnected everywhere) delete no copy anywhere:
/// each copy keeps its uid, and sync goes on afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partition_keeps_copies() {
    let nats = NatsServer::start().unwrap();
    let mut m = shared_fleet(&nats, &["c1", "c2", "c3"]).await;
    create_secret(&m[0], "shared", "a", &[("from", "c1")]).await;
    create_secret(&m[1], "shared", "b", &[("from", "c2")]).await;
    let mut copies = Vec::new();
    for (sink, name, origin) in [
        (1, "a", "c1"),
        (2, "a", "c1"),
        (0, "b", "c2"),
        (2, "b", "c2"),
    ] {
        copies.push((sink, name, copy_uid(&m[sink], name, origin).await));
    }

    m[1].agent.kill9();
    for x in [&m[0], &m[2]] {
        wait_peer_state(x, "c2", ClusterState::Disconnected, SYNC).await;
    }
    // Sinks c1 and c3 keep working while c2 is silent (so a delete on
    // silence would have happened by now).
    create_secret(&m[0], "shared", "m1", &[("k", "1")]).await;
    create_secret(&m[2], "shared", "m3", &[("k", "3")]).await;
    copy_uid(&m[2], "m1", "c1").await;
    copy_uid(&m[0], "m3", "c3").await;
    let view: Vec<(&Member, &str, String)> = copies
        .iter()
        .map(|(i, n, u)| (&m[*i], *n, u.clone()))
        .collect();
    assert_same_copies(&view).await;

    m[1].agent.restart().unwrap();
    wait_mesh(&[&m[0], &m[1], &m[2]], &["c1", "c2", "c3"]).await;
    // c2 caught up with what it missed.
    copy_uid(&m[1], "m1", "c1").await;

    nats.pause().unwrap();
    // Every agent's clock now runs without heartbeats.
    for (x, peer) in [(&m[0], "c2"), (&m[1], "c3"), (&m[2], "c1")] {
        wait_peer_state(x, peer, ClusterState::Disconnected, SYNC).await;
    }
    nats.resume().unwrap();
    wait_mesh(&[&m[0], &m[1], &m[2]], &["c1", "c2", "c3"]).await;
    create_secret(&m[1], "shared", "m2", &[("k", "2")]).await;
    for i in [0, 2] {
        copy_uid(&m[i], "m2", "c2").await;
    }
    let view: Vec<(&Member, &str, String)> = copies
        .iter()
        .map(|(i, n, u)| (&m[*i], *n, u.clone()))
        .collect();
    assert_same_copies(&view).await;
}

/// State-based catch-up: c2's agent is down while the origin object is
/// deleted on c1; after c2's restart its copy is gone (the other copy
/// stays). Mirror: c1's agent is down while the object is deleted at the
/// origin; once c1's agent is back it publishes the tombstone and c2's copy goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_down_origin_delete() {
    let nats = NatsServer::start().unwrap();
    let mut m = shared_fleet(&nats, &["c1", "c2"]).await;
    create_secret(&m[0], "shared", "x", &[("k", "x")]).await;
    create_secret(&m[0], "shared", "y", &[("k", "y")]).await;
    let _ = copy_uid(&m[1], "x", "c1").await;
    let y_uid = copy_uid(&m[1], "y", "c1").await;

    m[1].agent.kill9();
    kubectl_delete(&m[0], "secret", Some("shared"), "x");
    m[1].agent.restart().unwrap();
    wait_absent(&m[1], &secrets(), Some("shared"), "x").await;
    assert_same_copies(&[(&m[1], "y", y_uid)]).await;

    m[0].agent.kill9();
    kubectl_delete(&m[0], "secret", Some("shared"), "y");
    wait_peer_state(&m[1], "c1", ClusterState::Disconnected, SYNC).await;
    // Silence deletes nothing: the copy of y is there while c1 is down.
    get_dynamic(&m[1], &secrets(), Some("shared"), "y")
        .await
        .unwrap()
        .expect("copy y kept");
    m[0].agent.restart().unwrap();
    wait_absent(&m[1], &secrets(), Some("shared"), "y").await;
}

/// `--heartbeat-interval` of the members ([`HEARTBEAT`]).
const HEARTBEAT_MS: i64 = 500;

/// The write counters of the synced kinds (and of the rules, whose status
/// is written only on change).
fn synced_writes(w: &serde_json::Value) -> BTreeMap<String, serde_json::Value> {
    [
        "core/secrets",
        "core/namespaces",
        "fleetbus.io/resourcesyncrules",
    ]
    .iter()
    .map(|k| {
        (
            (*k).to_owned(),
            w.get(*k).cloned().unwrap_or(serde_json::Value::Null),
        )
    })
    .collect()
}

/// Every write request (any method but GET, including no-op and dry-run
/// writes, which `/debug/writes` does not count) the devcluster logged for
/// Secrets, Namespaces or rules: its log has one line per such request.
fn write_requests(m: &Member) -> Vec<String> {
    let ansi = |line: &str| {
        // tracing may colour the fields: drop ESC [ ... m sequences.
        let mut out = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            if c == '\u{1b}' {
                for c in chars.by_ref() {
                    if c == 'm' {
                        break;
                    }
                }
            } else {
                out.push(c);
            }
        }
        out
    };
    m.cluster
        .log()
        .lines()
        .map(ansi)
        .filter(|l| {
            let field = |k: &str| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix(k))
                    .unwrap_or_default()
                    .to_owned()
            };
            let (method, path) = (field("method="), field("path="));
            !method.is_empty()
                && method != "GET"
                && (path.contains("/secrets")
                    || path.contains("/resourcesyncrules")
                    || path.ends_with("/namespaces"))
        })
        .collect()
}

/// The status of the rule `shared-secrets` on `m`, for messages.
async fn rule_status(m: &Member) -> String {
    match rule(m, "shared-secrets").await {
        Ok(Some(r)) => serde_json::to_string(&r.status).unwrap_or_default(),
        other => format!("{other:?}"),
    }
}

/// A↔B with objects both ways: once converged, several heartbeats later
/// neither devcluster counted another write of a Secret, Namespace or rule
/// (`/debug/writes` counts state-changing writes only), nor even received a
/// write request for them (no-op or dry-run PUTs, from its request log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_writes_after_convergence() {
    let nats = NatsServer::start().unwrap();
    let m = shared_fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for (x, names) in [(c1, ["a1", "a2"]), (c2, ["b1", "b2"])] {
        for n in names {
            create_secret(x, "shared", n, &[("n", n)]).await;
        }
    }
    for (sink, origin, names) in [(c2, "c1", ["a1", "a2"]), (c1, "c2", ["b1", "b2"])] {
        for n in names {
            copy_uid(sink, n, origin).await;
        }
        wait_rule(sink, "shared-secrets", "converged", |r| {
            ready_is("True", "Synced")(r)?;
            match r.status.as_ref() {
                Some(s) if s.objects_synced == 2 && s.errors == 0 => Ok(()),
                _ => Err("counts".into()),
            }
        })
        .await;
    }
    // Converged is not yet quiet: a status write coalesced behind the last
    // count may still be due. Each agent says when a pass wrote nothing and
    // left nothing queued or due; after that, nothing is written.
    for x in [c1, c2] {
        wait_settled(x, SYNC).await;
    }
    let before = [
        synced_writes(&writes(c1).await),
        synced_writes(&writes(c2).await),
    ];
    let requests_before = [write_requests(c1), write_requests(c2)];
    let statuses_before = [rule_status(c1).await, rule_status(c2).await];
    assert!(
        requests_before[1].len() >= 2,
        "c2's devcluster log shows fewer write requests than the copies it got: {requests_before:#?}"
    );
    assert!(
        before[0]["core/secrets"].as_u64().unwrap_or(0) >= 4,
        "c1 counted fewer Secret writes than it had: {before:?}"
    );

    // Several heartbeat intervals of both agents, observed as beats the
    // server stored (each beat is a full pass of their loops), not slept.
    let beats = beats_kv(&nats).await;
    let since = chrono::Utc::now();
    wait_for("6 more heartbeat intervals of c1 and c2", SYNC, || async {
        let keys = registry_keys(&beats).await;
        let mut ages = Vec::new();
        for name in ["c1", "c2"] {
            let key = keys
                .iter()
                .find(|k| k.starts_with(&format!("beat.{name}.")))
                .ok_or(format!("no beat of {name} in {keys:?}"))?;
            let entry = beats
                .entry(key)
                .await
                .map_err(|e| e.to_string())?
                .ok_or(format!("{key} expired"))?;
            let stored = chrono::DateTime::<chrono::Utc>::from_timestamp(
                entry.created.unix_timestamp(),
                entry.created.nanosecond(),
            )
            .ok_or("a beat stored at no time")?;
            ages.push((stored - since).num_milliseconds());
        }
        if ages.iter().all(|ms| *ms >= 6 * HEARTBEAT_MS) {
            Ok(())
        } else {
            Err(format!("last beats {ages:?} ms after the snapshot"))
        }
    })
    .await;
    let after = [
        synced_writes(&writes(c1).await),
        synced_writes(&writes(c2).await),
    ];
    for (i, (x, old)) in [(c1, &requests_before[0]), (c2, &requests_before[1])]
        .into_iter()
        .enumerate()
    {
        let now = write_requests(x);
        assert_eq!(
            now.len(),
            old.len(),
            "{}: write requests after convergence: {:#?}\nrule status before: {}\nafter: {}",
            x.name,
            &now[old.len().min(now.len())..],
            statuses_before[i],
            rule_status(x).await,
        );
    }
    assert_eq!(before, after, "writes after convergence (c1, c2)");
}
