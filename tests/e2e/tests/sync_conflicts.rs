//! Rule sync conflicts end to end: a local object at a copy's
//! name is never touched and is reported three ways; two origins of one
//! object key get the same winner on every sink.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::sync::*;

use fleetbus_testsupport::{wait_for, NatsServer};
use kube::ResourceExt;

/// The fields every conflict message of the contract carries.
fn check_conflict_shape(v: &serde_json::Value, sink: &str) {
    assert_eq!(v["schema"], "fleetbus.io/conflict/v1", "{v}");
    assert_eq!(v["cluster"], sink, "{v}");
    assert_eq!(v["rule"], "shared-secrets", "{v}");
    assert!(v["id"].as_str().is_some_and(|s| !s.is_empty()), "{v}");
    assert!(v["detectedAt"].as_str().is_some(), "{v}");
    assert_eq!(v["object"]["apiVersion"], "v1", "{v}");
    assert_eq!(v["object"]["kind"], "Secret", "{v}");
    assert_eq!(v["object"]["namespace"], "shared", "{v}");
}

/// c2 has its own (unannotated) Secret `db`; c1 publishes one of the same
/// name. c2's object keeps its data and stays unmarked; the conflict shows
/// in c2's rule status (count and condition naming it), as an Event with
/// reason SyncConflict, and as a JSON message on `fleetbus.conflict.c2.>`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_object_conflict() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    // c2's db is an ordinary, unannotated Secret, so c2 publishes it too
    // once it holds the rule. Both exist before the rule: otherwise c2's
    // would reach c1 as a copy before c1's own is created. (Each side then
    // sees the other's as a LocalObject conflict; this test watches c2.)
    let mine = [("owner", "c2-team")];
    create_secret(c2, "shared", "db", &mine).await;
    create_secret(c1, "shared", "db", &[("owner", "c1-team")]).await;
    let mut sub = subscribe_conflicts(&nats, "c2").await;

    apply_yaml(c1, &shared_secrets_rule().yaml());
    // A Secret without a twin still syncs: the rule goes on around the conflict.
    create_secret(c1, "shared", "other", &[("k", "v")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "other",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;

    let (subject, msg) = next_conflict(&mut sub, "LocalObject for db", |v| {
        v["reason"] == "LocalObject" && v["object"]["name"] == "db"
    })
    .await;
    check_conflict_shape(&msg, "c2");
    assert_eq!(msg["origin"], "c1", "{msg}");
    assert!(subject.ends_with(".v1.Secret.shared.db"), "{subject}");
    assert!(subject.starts_with("fleetbus.conflict.c2."), "{subject}");

    wait_rule(c2, "shared-secrets", "reporting the conflict", |r| {
        let s = r.status.as_ref().ok_or("no status")?;
        let c = rule_condition(r, "Conflict").ok_or("no Conflict condition")?;
        if s.conflicts >= 1 && c.status == "True" && c.message.contains("db") {
            Ok(())
        } else {
            Err("not yet".into())
        }
    })
    .await;
    wait_for("c2: a SyncConflict Event on the rule", SYNC, || async {
        let evs = events_with_reason(c2, "SyncConflict").await?;
        evs.iter()
            .find(|e| {
                e.involved_object.kind.as_deref() == Some("ResourceSyncRule")
                    && e.involved_object.name.as_deref() == Some("shared-secrets")
                    && e.message.as_deref().is_some_and(|t| t.contains("db"))
            })
            .map(|_| ())
            .ok_or_else(|| format!("{evs:?}"))
    })
    .await;

    // Never touched.
    let o = get_dynamic(c2, &secrets(), Some("shared"), "db")
        .await
        .unwrap()
        .unwrap();
    // Unannotated before, unannotated now: not turned into a copy.
    check_unmanaged(&o).unwrap();
    data_is(secret_data(&mine))(&o).unwrap();
}

/// The same Secret name is created on c2 first and on c1 more than a second
/// later (creationTimestamp has second resolution; the test waits for the
/// clock to pass c2's timestamp). Sinks c3 and c4 both end with c2's version
/// and both report c1's as an `OtherOrigin` conflict with winner c2.
///
/// c2 is the older origin on purpose: the tie-break by cluster name would
/// pick c1, so this proves the oldest-creationTimestamp rule comes first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_origin_conflict_same_winner() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2", "c3", "c4"]).await;
    let (c1, c2, c3, c4) = (&m[0], &m[1], &m[2], &m[3]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    let older = [("who", "c2")];
    create_secret(c2, "shared", "dup", &older).await;
    let first = get_dynamic(c2, &secrets(), Some("shared"), "dup")
        .await
        .unwrap()
        .unwrap();
    let stamp = first
        .creation_timestamp()
        .expect("creationTimestamp")
        .0
        .as_second();
    wait_for(
        "the clock to pass c2's creationTimestamp",
        SYNC,
        || async move {
            let now = chrono::Utc::now().timestamp();
            if now > stamp {
                Ok(())
            } else {
                Err(format!("now {now}, stamp {stamp}"))
            }
        },
    )
    .await;
    create_secret(c1, "shared", "dup", &[("who", "c1")]).await;
    let second = get_dynamic(c1, &secrets(), Some("shared"), "dup")
        .await
        .unwrap()
        .unwrap();
    assert!(
        second.creation_timestamp().unwrap().0 > first.creation_timestamp().unwrap().0,
        "c1's dup is not younger"
    );

    let mut subs = Vec::new();
    for sink in ["c3", "c4"] {
        subs.push((sink, subscribe_conflicts(&nats, sink).await));
    }
    apply_yaml(c1, &shared_secrets_rule().yaml());

    for sink in [c3, c4] {
        wait_copy(
            sink,
            &secrets(),
            Some("shared"),
            "dup",
            "c2",
            "shared-secrets",
            data_is(secret_data(&older)),
        )
        .await;
    }
    for (sink, sub) in &mut subs {
        let (_, msg) = next_conflict(sub, &format!("OtherOrigin on {sink}"), |v| {
            v["reason"] == "OtherOrigin" && v["object"]["name"] == "dup"
        })
        .await;
        check_conflict_shape(&msg, sink);
        assert_eq!(msg["winner"], "c2", "{sink}: {msg}");
        assert_eq!(msg["origin"], "c1", "{sink}: {msg}");
    }
    for sink in [c3, c4] {
        wait_rule(
            sink,
            "shared-secrets",
            "counting the conflict",
            |r| match r.status.as_ref() {
                Some(s) if s.conflicts >= 1 => Ok(()),
                _ => Err("no conflict counted".into()),
            },
        )
        .await;
        // Still the winner's (a loser's snapshot never overwrote it).
        let o = get_dynamic(sink, &secrets(), Some("shared"), "dup")
            .await
            .unwrap()
            .unwrap();
        check_copy(&o, "c2", "shared-secrets").unwrap();
        data_is(secret_data(&older))(&o).unwrap();
    }
    // The origins keep their own objects (each is a LocalObject conflict there).
    for (x, who) in [(c1, "c1"), (c2, "c2")] {
        let o = get_dynamic(x, &secrets(), Some("shared"), "dup")
            .await
            .unwrap()
            .unwrap();
        check_unmanaged(&o).unwrap();
        data_is(secret_data(&[("who", who)]))(&o).unwrap();
    }
}
