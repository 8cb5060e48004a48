//! Membership and copies: stopping an agent is a pause (its copies stay
//! everywhere, so a rolling update does not churn them); leaving the fleet
//! for good (`--leave-on-shutdown`) collects them per orphanPolicy.

mod common;

use common::sync::*;
use common::{wait_peer_state, Member};
use fleetbus_schemas::crd::ClusterState;
use fleetbus_testsupport::NatsServer;
use kube::ResourceExt;
use std::time::Duration;

const RULE: &str = r#"
apiVersion: fleetbus.io/v1alpha1
kind: ResourceSyncRule
metadata:
  name: shared-secrets
spec:
  groupVersionKind: {version: v1, kind: Secret}
  rules:
  - match:
    - namespaces: [shared]
"#;

async fn two(nats: &NatsServer, origin_flags: &[&str]) -> (Member, Member) {
    let origin = Member::start(nats, "c1", "c1", origin_flags).await;
    let sink = Member::start(nats, "c2", "c2", &[]).await;
    common::wait_mesh(&[&origin, &sink], &["c1", "c2"]).await;
    for m in [&origin, &sink] {
        create_ns(m, "shared").await;
    }
    apply_yaml(&sink, RULE);
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
