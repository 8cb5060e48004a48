//! Membership and copies: stopping an agent is a pause (its copies stay
//! everywhere, so a rolling update does not churn them); leaving the fleet
//! for good (`--leave-on-shutdown`) collects them per orphanPolicy.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::rules::RuleBuilder;
use common::sync::*;
use common::{wait_peer_state, Member, MemberExt};
use fleetbus_schemas::crd::ClusterState;
use fleetbus_testsupport::NatsServer;
use kube::ResourceExt;
use serde_json::json;
use std::time::Duration;

/// The Secrets of `shared`, the rule named `name`. Its `group` is left out,
/// as a user may write it: the core group is the default.
fn shared_rule(name: &str) -> RuleBuilder {
    RuleBuilder::new(name)
        .spec(
            "groupVersionKind",
            json!({"version": "v1", "kind": "Secret"}),
        )
        .namespaces(&["shared"])
}

async fn two(nats: &NatsServer, origin_flags: &[&str]) -> (Member, Member) {
    let origin = Member::start(nats, "c1", "c1", origin_flags).await;
    let sink = Member::start(nats, "c2", "c2", &[]).await;
    common::wait_mesh(&[&origin, &sink], &["c1", "c2"]).await;
    for m in [&origin, &sink] {
        create_ns(m, "shared").await;
    }
    apply_yaml(&sink, &shared_rule("shared-secrets").yaml());
    wait_rule_copy(&origin, "shared-secrets", "c2").await;
    create_secret(&origin, "shared", "db", &[("k", "v")]).await;
    (origin, sink)
}

#[tokio::test]
async fn stop_without_leave_keeps_copies_and_resumes() {
    let nats = NatsServer::start().unwrap();
    let (mut origin, sink) = two(&nats, &[]).await;
    let uid = wait_copy(
        &sink,
        &secrets(),
        Some("shared"),
        "db",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await
    .uid();
    let status = origin.agent.stop();
    assert!(status.success(), "agent exit {status:?}");
    // A graceful stop without --leave-on-shutdown looks like silence.
    wait_peer_state(
        &sink,
        "c1",
        ClusterState::Disconnected,
        Duration::from_secs(30),
    )
    .await;
    let copy = get_dynamic(&sink, &secrets(), Some("shared"), "db")
        .await
        .unwrap()
        .expect("the copy survives its origin's stop");
    assert_eq!(copy.uid(), uid, "the copy was recreated, not kept");
    // Back: the same copy, untouched (no delete-and-recreate churn).
    origin.agent.restart().unwrap();
    wait_peer_state(&sink, "c1", ClusterState::Ready, Duration::from_secs(30)).await;
    kubectl(
        &origin,
        &[
            "-n",
            "shared",
            "create",
            "secret",
            "generic",
            "db2",
            "--from-literal=k=w",
        ],
    );
    wait_copy(
        &sink,
        &secrets(),
        Some("shared"),
        "db2",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
    let copy = get_dynamic(&sink, &secrets(), Some("shared"), "db")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(copy.uid(), uid, "the copy was recreated after the restart");
}

#[tokio::test]
async fn leaving_for_good_collects_copies() {
    let nats = NatsServer::start().unwrap();
    let (mut origin, sink) = two(&nats, &["--leave-on-shutdown"]).await;
    wait_copy(
        &sink,
        &secrets(),
        Some("shared"),
        "db",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
    let status = origin.agent.stop();
    assert!(status.success(), "agent exit {status:?}");
    wait_peer_state(&sink, "c1", ClusterState::Left, Duration::from_secs(30)).await;
    // orphanPolicy Delete (the default): the copy from the cluster that left goes.
    wait_absent(&sink, &secrets(), Some("shared"), "db").await;
}

/// A restart must not change who is a source, not even for a moment: the
/// first record after a restart already carries the cluster's labels, so a
/// rule selecting sources by label keeps the very same copies (found by
/// review: the first record used to go out with no labels, and peers
/// collected and recreated every copy).
#[tokio::test]
async fn a_restarted_source_keeps_its_copies_under_a_label_selector() {
    let nats = NatsServer::start().unwrap();
    let mut origin = Member::start(&nats, "c1", "c1", &[]).await;
    let sink = Member::start(&nats, "c2", "c2", &[]).await;
    common::wait_mesh(&[&origin, &sink], &["c1", "c2"]).await;
    for m in [&origin, &sink] {
        create_ns(m, "shared").await;
    }
    kubectl(
        &origin,
        &["label", "clusters.fleetbus.io", "c1", "tier=core"],
    );
    apply_yaml(
        &sink,
        &shared_rule("core-secrets")
            .sources(&[("tier", "core")])
            .yaml(),
    );
    wait_rule_copy(&origin, "core-secrets", "c2").await;
    create_secret(&origin, "shared", "db", &[("k", "v")]).await;
    let uid = wait_copy(
        &sink,
        &secrets(),
        Some("shared"),
        "db",
        "c1",
        "core-secrets",
        |_| Ok(()),
    )
    .await
    .uid();
    // Every record the restarted agent puts, the very first included, must
    // carry its labels (peers decide who is a source from them).
    let kv = common::registry_kv(&nats).await;
    let mut records = kv
        .watch_with_history("cluster.c1.>")
        .await
        .expect("watch c1 record");
    let before = record_started_at(&mut records).await;
    origin.agent.restart().unwrap();
    origin.wait_ready().await;
    // Records are put at start-up and on change only (liveness is in the
    // beats bucket): the first record of the new run is the one that counts.
    let mut seen = 0;
    while seen < 1 {
        let r = next_record(&mut records).await;
        if r["startedAt"] == before {
            continue;
        }
        assert_eq!(
            r["labels"]["tier"], "core",
            "a record of the restarted agent went out without its labels: {r}"
        );
        seen += 1;
    }
    // A marker created after the restart arrives: c1 is a source again and
    // every pass in between has run.
    kubectl(
        &origin,
        &[
            "-n",
            "shared",
            "create",
            "secret",
            "generic",
            "marker",
            "--from-literal=k=m",
        ],
    );
    wait_copy(
        &sink,
        &secrets(),
        Some("shared"),
        "marker",
        "c1",
        "core-secrets",
        |_| Ok(()),
    )
    .await;
    let copy = get_dynamic(&sink, &secrets(), Some("shared"), "db")
        .await
        .unwrap()
        .expect("copy");
    assert_eq!(
        copy.uid(),
        uid,
        "the copy was collected and recreated across the restart"
    );
}

/// Deleting a rule's copy on a sink is undone by the built-in rule, and the
/// copies that rule made there are not collected meanwhile (found by review:
/// they were deleted in the pass that saw the rule gone, then recreated).
#[tokio::test]
async fn a_deleted_rule_copy_comes_back_without_touching_its_copies() {
    let nats = NatsServer::start().unwrap();
    let (origin, sink) = two(&nats, &[]).await;
    let uid = wait_copy(
        &sink,
        &secrets(),
        Some("shared"),
        "db",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await
    .uid();
    let _ = origin;
    // The rule was applied on the sink (c2): its copy lives on c1.
    kubectl_delete(&origin, "resourcesyncrule", None, "shared-secrets");
    wait_rule_copy(&origin, "shared-secrets", "c2").await;
    let copy = get_dynamic(&sink, &secrets(), Some("shared"), "db")
        .await
        .unwrap()
        .expect("copy");
    assert_eq!(copy.uid(), uid, "the sink's copy churned");
}

/// The next record put under the watched key, as JSON.
async fn next_record(w: &mut async_nats::jetstream::kv::Watch) -> serde_json::Value {
    use futures::StreamExt;
    let entry = tokio::time::timeout(Duration::from_secs(20), w.next())
        .await
        .expect("a record within 20s")
        .expect("watch open")
        .expect("entry");
    serde_json::from_slice(&entry.value).expect("record JSON")
}

/// `startedAt` of the current record (the watch delivers it first).
async fn record_started_at(w: &mut async_nats::jetstream::kv::Watch) -> serde_json::Value {
    next_record(w).await["startedAt"].clone()
}
