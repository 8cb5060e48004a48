//! `spec.suspend` on a ResourceSyncRule, with real agents and
//! devclusters driven by kubectl: while suspended, edits, new objects and
//! deletes at the source do not reach the sink, drift of a copy is reported
//! on the bus and not corrected, and every cluster's rule status says
//! `Suspended` with how many copies wait; unsuspending converges.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use crate::common;

use common::sync::*;
use common::Member;
use fleetbus_testsupport::NatsServer;
use futures::StreamExt;
use serde_json::{json, Value};

fn suspend(m: &Member, on: bool) {
    let patch = json!({"spec": {"suspend": on}}).to_string();
    kubectl(
        m,
        &[
            "patch",
            "resourcesyncrule",
            "shared-secrets",
            "--type=merge",
            "-p",
            &patch,
        ],
    );
}

/// Sets `data.k` of Secret `shared/<name>` on `m` with kubectl: at the
/// source an edit, on a sink drift.
fn set_k(m: &Member, name: &str, value: &str) {
    let patch = json!({"data": {"k": b64(value)}}).to_string();
    kubectl(
        m,
        &[
            "-n",
            "shared",
            "patch",
            "secret",
            name,
            "--type=merge",
            "-p",
            &patch,
        ],
    );
}

/// Waits until the rule on `m` is Suspended and says `waiting` copies would change.
async fn wait_suspended(m: &Member, waiting: usize) {
    let want = format!("{waiting} copy(ies) would be created or updated");
    wait_rule(
        m,
        "shared-secrets",
        "Suspended",
        move |r| match rule_condition(r, "Ready") {
            Some(c)
                if c.status == "False" && c.reason == "Suspended" && c.message.contains(&want) =>
            {
                Ok(())
            }
            other => Err(format!("Ready is {other:?}, want Suspended with {want:?}")),
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_rule_holds_every_change_reports_drift_and_resumes() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(c1, &shared_secrets_rule().yaml());
    create_secret(c1, "shared", "old", &[("k", "v1")]).await;
    create_secret(c1, "shared", "gone", &[("k", "v1")]).await;
    for name in ["old", "gone"] {
        wait_copy(
            c2,
            &secrets(),
            Some("shared"),
            name,
            "c1",
            "shared-secrets",
            data_is(secret_data(&[("k", "v1")])),
        )
        .await;
    }

    suspend(c1, true);
    wait_suspended(c1, 0).await;
    wait_suspended(c2, 0).await;
    let cell = kubectl(c2, &["get", "resourcesyncrule", "shared-secrets"]);
    assert!(cell.contains("False"), "{cell}");

    // Held: an edit, a new object and a delete at the source.
    set_k(c1, "old", "v2");
    create_secret(c1, "shared", "new", &[("k", "v1")]).await;
    kubectl_delete(c1, "secret", Some("shared"), "gone");
    // The edit and the new object wait; the delete is kept, not counted.
    wait_suspended(c2, 2).await;
    let old = get_dynamic(c2, &secrets(), Some("shared"), "old")
        .await
        .unwrap()
        .expect("old's copy");
    assert_eq!(
        data(&old),
        secret_data(&[("k", "v1")]),
        "the edit reached the sink"
    );
    assert_absent(c2, &secrets(), Some("shared"), "new").await;
    get_dynamic(c2, &secrets(), Some("shared"), "gone")
        .await
        .unwrap()
        .expect("a source delete removed the copy of a suspended rule");

    // Drift of a copy is reported on the bus, not corrected: also of a copy
    // whose new version is held.
    let mut drift = subscribe_drift(&nats).await;
    set_k(c2, "old", "edited");
    let subject = "fleetbus.drift.c2.core.Secret.shared.old";
    let ev: Value = tokio::time::timeout(SYNC, async {
        loop {
            let msg = drift.next().await.expect("the drift subscription ended");
            if msg.subject.as_str() == subject {
                break serde_json::from_slice(&msg.payload).expect("a drift event is JSON");
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("no drift event on {subject} within {SYNC:?}"));
    assert_eq!(ev["action"], "Report", "{ev:#}");
    let old = get_dynamic(c2, &secrets(), Some("shared"), "old")
        .await
        .unwrap()
        .expect("old's copy");
    assert_eq!(
        data(&old),
        secret_data(&[("k", "edited")]),
        "drift was corrected while suspended"
    );

    // Resumed: everything held happens.
    suspend(c1, false);
    wait_rule(c2, "shared-secrets", "Synced", ready_is("True", "Synced")).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "old",
        "c1",
        "shared-secrets",
        data_is(secret_data(&[("k", "v2")])),
    )
    .await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "new",
        "c1",
        "shared-secrets",
        data_is(secret_data(&[("k", "v1")])),
    )
    .await;
    wait_absent(c2, &secrets(), Some("shared"), "gone").await;
}
