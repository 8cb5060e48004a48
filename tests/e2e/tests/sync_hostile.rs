//! Rule sync under attack and bad luck, end to end: garbage and
//! spoofed messages on the bus, an oversize object, a copy the sink refuses,
//! invalid rules, NATS and API servers paused or restarted, a burst of
//! objects. Every probe checks that the bad input is skipped and counted or
//! reported, and that everything else goes on syncing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::{ObjectKey, Prefix};
use fleetbus_testsupport::{wait_for, NatsServer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::Api;
use serde_json::json;

/// The rule the probes use: Secrets in namespace `shared`.
/// c1 and c2 with namespace `shared` on both and [`shared_secrets_rule`] created on c1.
async fn shared_fleet(nats: &NatsServer) -> Vec<Member> {
    let m = fleet(nats, &["c1", "c2"]).await;
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(&m[0], &shared_secrets_rule().yaml());
    m
}

/// The subject of Secret `shared/<name>` published by `origin`.
fn secret_subject(origin: &str, name: &str) -> String {
    ObjectKey {
        origin: origin.into(),
        group: String::new(),
        version: "v1".into(),
        kind: "Secret".into(),
        namespace: Some("shared".into()),
        name: name.into(),
    }
    .to_subject(&Prefix::default())
}

/// A JetStream context on a plain client: a stranger on the bus.
async fn stranger(nats: &NatsServer) -> jetstream::Context {
    jetstream::new(async_nats::connect(nats.url()).await.expect("connect nats"))
}

/// Creates `shared/<name>` (`k: value`) on `c1` and waits for its copy on `c2`.
async fn secret_synced(c1: &Member, c2: &Member, name: &str, value: &str) {
    create_secret(c1, "shared", name, &[("k", value)]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        name,
        "c1",
        "shared-secrets",
        data_is(secret_data(&[("k", value)])),
    )
    .await;
}

/// Publishes `bytes` on `subject` and waits until the stream stored it.
async fn publish_raw(js: &jetstream::Context, subject: &str, bytes: Vec<u8>) {
    js.publish(subject.to_owned(), bytes.into())
        .await
        .expect("publish")
        .await
        .unwrap_or_else(|e| panic!("{subject} not stored: {e}"));
}

/// A Secret `shared/<name>` as an origin's API server would hold it.
fn secret_json(name: &str, uid: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": "shared",
            "uid": uid,
            "resourceVersion": "7",
            "creationTimestamp": "2020-01-01T00:00:00Z",
        },
        "type": "Opaque",
        "data": {"k": b64("spoofed")},
    })
}

/// A valid v1 envelope of [`secret_json`] claiming `origin`.
fn envelope_bytes(origin: &str, obj: serde_json::Value) -> Vec<u8> {
    Envelope::snapshot(origin, None, obj, chrono::Utc::now())
        .expect("snapshot")
        .encode()
        .expect("encode")
}

/// Deterministic bytes that look random (no structure a decoder could use).
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            // xorshift64
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Waits until `m` counted at least `min` rejections for `reason`.
async fn wait_rejected(m: &Member, reason: &str, min: f64) {
    let what = format!("{}: sync_rejected{{reason={reason}}} >= {min}", m.name);
    wait_for(&what, SYNC, || async {
        match sync_rejected(m, reason) {
            n if n >= min => Ok(()),
            n => Err(format!(
                "{n}; metrics:\n{}",
                m.metrics()
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("sync_"))
                    .collect::<Vec<_>>()
                    .join("\n")
            )),
        }
    })
    .await;
}

/// Probe 1: random bytes, a truncated envelope, a schemaVersion 2 envelope,
/// an envelope whose origin is not its subject's and one whose object is not
/// its subject's are skipped and counted by every consumer; nothing is
/// written for them, and a Secret published afterwards still syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_bus_is_skipped_and_counted() {
    let nats = NatsServer::start().unwrap();
    let m = shared_fleet(&nats).await;
    let (c1, c2) = (&m[0], &m[1]);
    // The rule has reached c2, whose Secret consumer now runs.
    secret_synced(c1, c2, "before", "0").await;

    let js = stranger(&nats).await;
    let valid = envelope_bytes("c1", secret_json("g2", "uid-g2"));
    // schemaVersion 2 (a fixmap of one entry: "schemaVersion": 2).
    let mut v2 = vec![0x81, 0xa0 | 13];
    v2.extend_from_slice(b"schemaVersion");
    v2.push(0x02);
    let garbage: Vec<(&str, Vec<u8>)> = vec![
        ("g1", noise(300, 42)),
        ("g2", valid[..valid.len() / 2].to_vec()),
        ("g3", v2),
        // Claims c3 under c1's subject.
        ("g4", envelope_bytes("c3", secret_json("g4", "uid-g4"))),
        // The object is shared/other, the subject says shared/g5.
        ("g5", envelope_bytes("c1", secret_json("other", "uid-g5"))),
    ];
    for (name, bytes) in garbage {
        publish_raw(&js, &secret_subject("c1", name), bytes).await;
    }
    for x in [c1, c2] {
        wait_rejected(x, "malformed", 2.0).await;
        wait_rejected(x, "unsupported_version", 1.0).await;
        wait_rejected(x, "subject_mismatch", 2.0).await;
    }

    create_secret(c1, "shared", "after", &[("k", "1")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "after",
        "c1",
        "shared-secrets",
        data_is(secret_data(&[("k", "1")])),
    )
    .await;
    for x in [c1, c2] {
        for name in ["g1", "g2", "g3", "g4", "g5", "other"] {
            assert_absent(x, &secrets(), Some("shared"), name).await;
        }
    }
    // The copy made before the garbage is untouched.
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "before",
        "c1",
        "shared-secrets",
        data_is(secret_data(&[("k", "0")])),
    )
    .await;
}

/// A flood of garbage (2,000 malformed messages in one origin's subtree) is
/// counted message by message, and logged a few times, not 2,000 times, on
/// every other agent: each once wrote a WARN line per message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_garbage_is_counted_each_and_logged_a_few_times() {
    const FLOOD: usize = 2_000;
    let nats = NatsServer::start().unwrap();
    let m = shared_fleet(&nats).await;
    let (c1, c2) = (&m[0], &m[1]);
    secret_synced(c1, c2, "before", "0").await;
    let before = sync_rejected(c2, "malformed");
    let js = stranger(&nats).await;
    // Published without waiting for each ack, then the acks: quicker.
    let mut acks = Vec::with_capacity(FLOOD);
    for i in 0..FLOOD {
        let subject = secret_subject("c1", &format!("flood-{i}"));
        acks.push(
            js.publish(subject, noise(64, i as u64 + 1).into())
                .await
                .expect("publish"),
        );
    }
    for ack in acks {
        ack.await.expect("stored");
    }
    wait_rejected(c2, "malformed", before + FLOOD as f64).await;
    let lines = c2
        .agent
        .log()
        .lines()
        .filter(|l| l.contains("skipped a message"))
        .count();
    assert!(
        (1..=20).contains(&lines),
        "{lines} 'skipped a message' lines for {FLOOD} malformed messages"
    );
    // Nothing else was lost: a Secret published now still syncs.
    create_secret(c1, "shared", "after", &[("k", "1")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "after",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
}

/// Probe 1, continued: garbage published over the subject of an object the
/// origin publishes replaces its last value on the bus, so a sink that
/// (re)starts would see no snapshot and collect its copy. The origin sees the
/// unreadable message in its own subtree and publishes the object again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn origin_repairs_its_subject_after_garbage() {
    let nats = NatsServer::start().unwrap();
    let mut m = shared_fleet(&nats).await;
    create_secret(&m[0], "shared", "real", &[("k", "v")]).await;
    let uid = wait_copy(
        &m[1],
        &secrets(),
        Some("shared"),
        "real",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await
    .metadata
    .uid
    .expect("uid");

    let js = stranger(&nats).await;
    let subject = secret_subject("c1", "real");
    publish_raw(&js, &subject, noise(100, 7)).await;
    let stream = js
        .get_stream("FLEETBUS_OBJECTS")
        .await
        .expect("objects stream");
    let what = format!("the last message on {subject} to be c1's envelope again");
    wait_for(&what, SYNC, || async {
        let msg = stream
            .get_last_raw_message_by_subject(&subject)
            .await
            .map_err(|e| e.to_string())?;
        let env = Envelope::decode(&msg.payload).map_err(|e| format!("{e}"))?;
        if env.origin == "c1" && !env.tombstone {
            Ok(())
        } else {
            Err(format!("{env:?}"))
        }
    })
    .await;

    // A sink starting now reads only last values: the copy stays the same.
    m[1].agent.kill9();
    m[1].agent.restart().unwrap();
    wait_readyz(&m[1], 200, CONVERGE).await;
    create_secret(&m[0], "shared", "later", &[("k", "l")]).await;
    wait_copy(
        &m[1],
        &secrets(),
        Some("shared"),
        "later",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
    let now = get_dynamic(&m[1], &secrets(), Some("shared"), "real")
        .await
        .unwrap()
        .and_then(|o| o.metadata.uid);
    assert_eq!(
        now.as_deref(),
        Some(uid.as_str()),
        "the copy of real was deleted or recreated"
    );
}

/// Probe 2: an envelope claiming origin c9 (no such cluster) under c9's
/// subject is never applied: c9 is no member, so no source. (One claiming a
/// real member cannot be told apart without signatures.) It is counted as
/// `reason="unknown_origin"`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_origin_is_not_applied() {
    let nats = NatsServer::start().unwrap();
    let m = shared_fleet(&nats).await;
    let (c1, c2) = (&m[0], &m[1]);
    secret_synced(c1, c2, "before", "0").await;
    let js = stranger(&nats).await;
    publish_raw(
        &js,
        &secret_subject("c9", "spoof"),
        envelope_bytes("c9", secret_json("spoof", "uid-spoof")),
    )
    .await;
    for x in [c1, c2] {
        wait_rejected(x, "unknown_origin", 1.0).await;
    }
    create_secret(c1, "shared", "after", &[("k", "1")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "after",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
    // The rule's status on c2 reports its sources: c1 only.
    wait_rule(c2, "shared-secrets", "sourced from c1 only", |r| {
        match r.status.as_ref().map(|s| s.source_clusters.clone()) {
            Some(s) if s == vec!["c1".to_owned()] => Ok(()),
            other => Err(format!("sources {other:?}")),
        }
    })
    .await;
    for x in [c1, c2] {
        assert_absent(x, &secrets(), Some("shared"), "spoof").await;
    }
}

/// Probe 3: a Secret whose envelope exceeds max_payload even compressed is
/// not published, is reported on the origin's rule status and counted, and
/// other Secrets still sync. The check is on the bytes sent (PROTOCOL §4.4):
/// a Secret as large whose envelope compresses well is synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_object_is_reported_on_the_origin() {
    // 512 KiB: random data (base64 in the Secret) compresses only back to
    // about its own size, so 900 KiB of it cannot fit.
    let nats = NatsServer::start_with_config("max_payload: 524288").unwrap();
    let m = shared_fleet(&nats).await;
    let (c1, c2) = (&m[0], &m[1]);
    let dir = tempfile::tempdir().unwrap();
    let squeezable = "the same line of text, again and again\n".repeat(900 * 1024 / 39);
    let file = dir.path().join("squeezable");
    std::fs::write(&file, &squeezable).unwrap();
    let from = format!("--from-file=blob={}", file.display());
    kubectl(
        c1,
        &[
            "create",
            "secret",
            "generic",
            "squeezable",
            "-n",
            "shared",
            &from,
        ],
    );
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "squeezable",
        "c1",
        "shared-secrets",
        data_is(secret_data(&[("blob", &squeezable)])),
    )
    .await;
    let file = dir.path().join("blob");
    std::fs::write(&file, noise(900 * 1024, 99)).unwrap();
    let from = format!("--from-file=blob={}", file.display());
    kubectl(
        c1,
        &["create", "secret", "generic", "big", "-n", "shared", &from],
    );
    create_secret(c1, "shared", "small", &[("k", "s")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "small",
        "c1",
        "shared-secrets",
        data_is(secret_data(&[("k", "s")])),
    )
    .await;
    wait_rule(c1, "shared-secrets", "to report the oversize Secret", |r| {
        let errors = r.status.as_ref().map_or(0, |s| s.errors);
        match rule_condition(r, "Ready") {
            Some(c)
                if c.status == "False"
                    && c.reason == "SyncErrors"
                    && c.message.contains("shared/big")
                    && errors >= 1 =>
            {
                Ok(())
            }
            other => Err(format!("errors {errors}, Ready {other:?}")),
        }
    })
    .await;
    wait_rejected(c1, "too_large", 1.0).await;
    assert_absent(c2, &secrets(), Some("shared"), "big").await;
    // The Secret shrinks: now it is published and the error goes.
    kubectl(c1, &["delete", "secret", "big", "-n", "shared"]);
    create_secret(c1, "shared", "big", &[("k", "b")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "big",
        "c1",
        "shared-secrets",
        data_is(secret_data(&[("k", "b")])),
    )
    .await;
    wait_rule(
        c1,
        "shared-secrets",
        "Ready again",
        ready_is("True", "Synced"),
    )
    .await;
}

/// The Secrets of `hostile`, and those labelled `broken=yes` with a label
/// value the sink's API server refuses.
fn bad_label_rule() -> String {
    secrets_rule("hostile-secrets", &["hostile"])
        .matching(json!({"labels": [{"matchLabels": {"broken": "yes"}}]}))
        .mutations(json!({"overrides": [{
            "type": "replace",
            "path": "/metadata/labels/bad",
            "value": "not a valid label value!!",
        }]}))
        .yaml()
}

/// How many times `m`'s agent logged that it could not write `copy`.
fn write_failures(m: &Member, copy: &str) -> usize {
    m.agent
        .log()
        .lines()
        .filter(|l| l.contains("copy not written") && l.contains(copy))
        .count()
}

/// Probe 4: a copy the sink's API server refuses (a label value a rule
/// override makes invalid) is an error on that object in the sink's rule
/// status; the rule's other objects sync; and the refused write is not
/// retried on every pass, only as its backoff allows (what refuses it may
/// be fixed unseen, so it is tried again now and then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_copy_is_an_error_on_that_object_only() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "hostile").await;
    }
    apply_yaml(c1, &bad_label_rule());
    // Labelled from the start: the copy's first write, a create, is refused.
    apply_yaml(
        c1,
        r#"apiVersion: v1
kind: Secret
metadata: {name: bad, namespace: hostile, labels: {broken: "yes"}}
stringData: {k: v}
"#,
    );
    create_secret(c1, "hostile", "good0", &[("k", "0")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("hostile"),
        "good0",
        "c1",
        "hostile-secrets",
        |_| Ok(()),
    )
    .await;
    wait_rule(c2, "hostile-secrets", "to report the refused copy", |r| {
        let errors = r.status.as_ref().map_or(0, |s| s.errors);
        match rule_condition(r, "Ready") {
            Some(c)
                if c.status == "False"
                    && c.reason == "SyncErrors"
                    && c.message.contains("hostile/bad")
                    && errors == 1 =>
            {
                Ok(())
            }
            other => Err(format!("errors {errors}, Ready {other:?}")),
        }
    })
    .await;
    let what = format!("{}: a logged refusal of hostile/bad", c2.name);
    wait_for(&what, SYNC, || async {
        match write_failures(c2, "hostile/bad") {
            0 => Err("none yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await;
    let failures = write_failures(c2, "hostile/bad");
    let secret_writes = writes(c2).await["core/secrets"].clone();
    let started = Instant::now();

    // More objects of the rule: each is a pass on c2, none of which may
    // try the refused copy again.
    for i in 1..=5 {
        let name = format!("good{i}");
        create_secret(c1, "hostile", &name, &[("k", "x")]).await;
        wait_copy(
            c2,
            &secrets(),
            Some("hostile"),
            &name,
            "c1",
            "hostile-secrets",
            |_| Ok(()),
        )
        .await;
    }
    let after = write_failures(c2, "hostile/bad");
    let bound = backoff_tries_bound(started.elapsed());
    assert!(
        after <= failures + bound,
        "the refused copy was tried again and again ({failures} then {after} times, \
         at most {bound} more fit its backoff):\n{}",
        c2.agent.log()
    );
    // Five creates, nothing else (a refused write changes nothing).
    assert_eq!(
        writes(c2).await["core/secrets"].as_u64(),
        secret_writes.as_u64().map(|n| n + 5),
        "Secret writes on c2"
    );
    assert_absent(c2, &secrets(), Some("hostile"), "bad").await;

    // The origin fixes its object (no longer labelled broken): it syncs.
    kubectl(c1, &["label", "secret", "bad", "-n", "hostile", "broken-"]);
    wait_copy(
        c2,
        &secrets(),
        Some("hostile"),
        "bad",
        "c1",
        "hostile-secrets",
        |_| Ok(()),
    )
    .await;
    wait_rule(
        c2,
        "hostile-secrets",
        "Ready again",
        ready_is("True", "Synced"),
    )
    .await;
}

/// Probe 5: each invalid rule (bad selector operator, bad template, bad
/// pointer, unknown kind) is `Ready=False` reason `Invalid` with a message,
/// on its origin and on the cluster it was replicated to; a valid rule
/// created at the same time syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_rules_are_reported_and_disturb_no_other() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    // Left as YAML text: hostile rules, each written as its author would.
    let bad = r#"apiVersion: fleetbus.io/v1alpha1
kind: ResourceSyncRule
metadata:
  name: bad-selector
spec:
  groupVersionKind: {group: "", version: v1, kind: Secret}
  clusterSelector:
    matchExpressions: [{key: env, operator: Sometimes, values: [x]}]
---
apiVersion: fleetbus.io/v1alpha1
kind: ResourceSyncRule
metadata:
  name: bad-template
spec:
  groupVersionKind: {group: "", version: v1, kind: Secret}
  rules:
    - mutations:
        overrides:
          - {type: replace, path: /metadata/labels/x, value: "{{ .Object.metadata.name "}
---
apiVersion: fleetbus.io/v1alpha1
kind: ResourceSyncRule
metadata:
  name: bad-pointer
spec:
  groupVersionKind: {group: "", version: v1, kind: Secret}
  rules:
    - mutations:
        overrides:
          - {type: replace, path: "metadata~labels", value: "x"}
---
apiVersion: fleetbus.io/v1alpha1
kind: ResourceSyncRule
metadata:
  name: unknown-kind
spec:
  groupVersionKind: {group: nowhere.example.com, version: v1, kind: Nothing}
---
"#;
    apply_yaml(c1, &format!("{bad}{}", shared_secrets_rule().yaml()));
    create_secret(c1, "shared", "s", &[("k", "v")]).await;
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "s",
        "c1",
        "shared-secrets",
        data_is(secret_data(&[("k", "v")])),
    )
    .await;
    for x in [c1, c2] {
        for name in [
            "bad-selector",
            "bad-template",
            "bad-pointer",
            "unknown-kind",
        ] {
            let r = wait_rule(x, name, "Invalid", ready_is("False", "Invalid")).await;
            let msg = rule_condition(&r, "Ready")
                .map(|c| c.message.clone())
                .unwrap_or_default();
            assert!(!msg.is_empty(), "{}: rule {name}: empty message", x.name);
        }
        wait_rule(x, "shared-secrets", "Synced", ready_is("True", "Synced")).await;
    }
    // Only the valid rule wrote copies: the invalid ones (all Secrets, no
    // namespace restriction) made none of s elsewhere.
    let copies = dynamic(c2, &secrets(), None)
        .list(&ListParams::default())
        .await
        .unwrap();
    for o in copies.items {
        if let Some(rule) = o
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("fleetbus.io/rule"))
        {
            assert_eq!(rule, "shared-secrets", "a copy by another rule: {o:?}");
        }
    }
}

/// Waits until the copy of `shared/<name>` on `sink` has `.data` from `literals`.
async fn wait_data(sink: &Member, name: &str, literals: &[(&str, &str)]) {
    wait_copy(
        sink,
        &secrets(),
        Some("shared"),
        name,
        "c1",
        "shared-secrets",
        data_is(secret_data(literals)),
    )
    .await;
}

/// `kubectl patch` the data of Secret `shared/<name>` on `m`.
fn set_secret(m: &Member, name: &str, literals: &[(&str, &str)]) {
    let patch = json!({"data": secret_data(literals)}).to_string();
    kubectl(
        m,
        &[
            "patch",
            "secret",
            name,
            "-n",
            "shared",
            "--type=merge",
            "-p",
            &patch,
        ],
    );
}

/// Probe 6: NATS hung (SIGSTOP) while objects change on the origin, NATS
/// restarted (same store), the sink's API server hung: after each, the
/// copies converge to the origin's latest state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_and_restarted_dependencies_converge() {
    let mut nats = NatsServer::start().unwrap();
    let m = shared_fleet(&nats).await;
    let (c1, c2) = (&m[0], &m[1]);
    create_secret(c1, "shared", "a", &[("k", "1")]).await;
    create_secret(c1, "shared", "gone", &[("k", "1")]).await;
    wait_data(c2, "a", &[("k", "1")]).await;
    wait_data(c2, "gone", &[("k", "1")]).await;

    nats.pause().unwrap();
    set_secret(c1, "a", &[("k", "2")]);
    create_secret(c1, "shared", "b", &[("k", "b")]).await;
    kubectl_delete(c1, "secret", Some("shared"), "gone");
    set_secret(c1, "a", &[("k", "3")]);
    nats.resume().unwrap();
    wait_data(c2, "a", &[("k", "3")]).await;
    wait_data(c2, "b", &[("k", "b")]).await;
    wait_absent(c2, &secrets(), Some("shared"), "gone").await;

    nats.restart().unwrap();
    set_secret(c1, "a", &[("k", "4")]);
    create_secret(c1, "shared", "c", &[("k", "c")]).await;
    wait_data(c2, "a", &[("k", "4")]).await;
    wait_data(c2, "c", &[("k", "c")]).await;

    c2.cluster.pause().unwrap();
    set_secret(c1, "a", &[("k", "5")]);
    kubectl_delete(c1, "secret", Some("shared"), "b");
    create_secret(c1, "shared", "d", &[("k", "d")]).await;
    c2.cluster.resume().unwrap();
    wait_data(c2, "a", &[("k", "5")]).await;
    wait_data(c2, "d", &[("k", "d")]).await;
    wait_absent(c2, &secrets(), Some("shared"), "b").await;
}

/// How many copies from c1 `m` holds in namespace `shared`.
async fn copies_in_shared(m: &Member) -> Result<usize, String> {
    Api::<Secret>::namespaced(m.client.clone(), "shared")
        .list(&ListParams::default().labels("fleetbus.io/managed=true"))
        .await
        .map(|l| l.items.len())
        .map_err(|e| e.to_string())
}

/// Probe 8: 300 Secrets created on the origin at once all reach the sink
/// within a minute; deleted at once, all copies go within a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn burst_of_300_objects() {
    const N: usize = 300;
    const DEADLINE: Duration = Duration::from_secs(60);
    let nats = NatsServer::start().unwrap();
    let m = shared_fleet(&nats).await;
    let (c1, c2) = (&m[0], &m[1]);
    // The rule is in effect on c2 before the burst.
    create_secret(c1, "shared", "first", &[("k", "0")]).await;
    wait_data(c2, "first", &[("k", "0")]).await;

    let api: Api<Secret> = Api::namespaced(c1.client.clone(), "shared");
    let start = Instant::now();
    let created: Vec<Result<Secret, kube::Error>> = futures::stream::iter(0..N)
        .map(|i| {
            let api = api.clone();
            async move {
                let s = Secret {
                    metadata: ObjectMeta {
                        name: Some(format!("burst-{i:03}")),
                        ..Default::default()
                    },
                    string_data: Some([("i".to_owned(), i.to_string())].into()),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &s).await
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(created.iter().all(Result::is_ok), "creates failed");
    let created_in = start.elapsed();
    wait_for(&format!("c2: {} copies", N + 1), DEADLINE, || async {
        match copies_in_shared(c2).await? {
            n if n == N + 1 => Ok(()),
            n => Err(format!("{n} copies")),
        }
    })
    .await;
    let synced_in = start.elapsed();

    let start = Instant::now();
    let deleted: Vec<Result<_, kube::Error>> = futures::stream::iter(0..N)
        .map(|i| {
            let api = api.clone();
            async move {
                api.delete(&format!("burst-{i:03}"), &DeleteParams::default())
                    .await
            }
        })
        .buffer_unordered(32)
        .collect()
        .await;
    assert!(deleted.iter().all(Result::is_ok), "deletes failed");
    wait_for("c2: only the first copy left", DEADLINE, || async {
        match copies_in_shared(c2).await? {
            1 => Ok(()),
            n => Err(format!("{n} copies")),
        }
    })
    .await;
    let collected_in = start.elapsed();
    println!(
        "burst of {N}: created on c1 in {created_in:?}, all copies on c2 after {synced_in:?}; \
         all copies gone {collected_in:?} after the deletes started"
    );
    wait_data(c2, "first", &[("k", "0")]).await;
}

fn configmaps() -> kube::api::ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

/// The ConfigMap rule, optionally with an override of `/data/extra`.
fn configmap_rule(extra: Option<&str>) -> String {
    let rule = RuleBuilder::new("shared-configmaps").namespaces(&["shared"]);
    match extra {
        Some(v) => rule.mutations(json!({"overrides": [
            {"type": "replace", "path": "/data/extra", "value": v}
        ]})),
        None => rule,
    }
    .yaml()
}

fn frozen_configmap(v: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ConfigMap
metadata: {{name: frozen, namespace: shared}}
immutable: true
data: {{v: "{v}"}}
"#
    )
}

/// Probe 7: an immutable ConfigMap replaced on the origin (delete and
/// create, `kubectl replace --force`), and then a rule change that changes
/// the copy's data: the copy, immutable too, is deleted and recreated each
/// time, and ends equal to the desired state with no error on the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn immutable_copy_is_recreated() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(c1, &configmap_rule(None));
    apply_yaml(c1, &frozen_configmap("1"));
    let rule = "shared-configmaps";
    let immutable_with = |want: serde_json::Value| {
        move |o: &kube::api::DynamicObject| {
            if o.data.get("immutable") != Some(&json!(true)) {
                return Err("not immutable".to_owned());
            }
            data_is(want.clone())(o)
        }
    };
    let first = wait_copy(
        c2,
        &configmaps(),
        Some("shared"),
        "frozen",
        "c1",
        rule,
        immutable_with(json!({"v": "1"})),
    )
    .await;

    let mut f = tempfile::Builder::new().suffix(".yaml").tempfile().unwrap();
    std::io::Write::write_all(&mut f, frozen_configmap("2").as_bytes()).unwrap();
    let path = f.path().display().to_string();
    kubectl(c1, &["replace", "--force", "-f", &path]);
    let second = wait_copy(
        c2,
        &configmaps(),
        Some("shared"),
        "frozen",
        "c1",
        rule,
        immutable_with(json!({"v": "2"})),
    )
    .await;
    assert_ne!(
        first.metadata.uid, second.metadata.uid,
        "copy not recreated"
    );

    // The origin's object is unchanged; only the desired copy's data changes.
    apply_yaml(c1, &configmap_rule(Some("x")));
    let third = wait_copy(
        c2,
        &configmaps(),
        Some("shared"),
        "frozen",
        "c1",
        rule,
        immutable_with(json!({"v": "2", "extra": "x"})),
    )
    .await;
    assert_ne!(
        second.metadata.uid, third.metadata.uid,
        "copy not recreated"
    );
    wait_rule(c2, rule, "Synced", ready_is("True", "Synced")).await;
}

/// Probe 6, continued: the sink's API server killed (SIGKILL) while the
/// origin changes, then started again on its data dir: the agent's watches
/// and writes recover and the copies converge; a copy deleted behind the
/// agent's back while the server was down is recreated. (Failed before:
/// a create answered AlreadyExists while the watch re-listed was taken as a
/// refusal for good, so the copy deleted meanwhile was never recreated.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_sink_api_server_converges() {
    let nats = NatsServer::start().unwrap();
    let mut m = shared_fleet(&nats).await;
    create_secret(&m[0], "shared", "a", &[("k", "1")]).await;
    create_secret(&m[0], "shared", "b", &[("k", "1")]).await;
    wait_data(&m[1], "a", &[("k", "1")]).await;
    wait_data(&m[1], "b", &[("k", "1")]).await;

    m[1].cluster.kill9();
    set_secret(&m[0], "a", &[("k", "2")]);
    kubectl_delete(&m[0], "secret", Some("shared"), "b");
    create_secret(&m[0], "shared", "c", &[("k", "c")]).await;
    m[1].cluster.restart().unwrap();
    let c2 = &m[1];
    wait_data(c2, "a", &[("k", "2")]).await;
    wait_data(c2, "c", &[("k", "c")]).await;
    wait_absent(c2, &secrets(), Some("shared"), "b").await;
    // The copies are still watched and reverted after the restart.
    kubectl_delete(c2, "secret", Some("shared"), "c");
    wait_data(c2, "c", &[("k", "c")]).await;
}

/// An operator deletes the objects stream. The origin notices (a publish is
/// not acknowledged), has the layout repaired at once and publishes again,
/// so the new object is on the recreated stream, and the failed publishes
/// stay few. (Found by hand: failed publishes were retried thousands of times
/// a second until the periodic layout check; the one-second hold after a
/// failed acknowledgement is what stops that loop.)
/// The sink consumes the recreated stream anew (it resumed at its old
/// sequence before, and the copy never came); copies made before are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_objects_stream_is_recreated_and_republished() {
    let nats = NatsServer::start().unwrap();
    let m = shared_fleet(&nats).await;
    create_secret(&m[0], "shared", "before", &[("k", "1")]).await;
    wait_data(&m[1], "before", &[("k", "1")]).await;
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    js.delete_stream("FLEETBUS_OBJECTS").await.unwrap();
    create_secret(&m[0], "shared", "after", &[("k", "2")]).await;
    let subject = "fleetbus.obj.c1.core.v1.Secret.shared.after";
    wait_for(
        "c1's envelope of `after` on the recreated stream",
        SYNC,
        || {
            let js = js.clone();
            async move {
                let stream = js
                    .get_stream("FLEETBUS_OBJECTS")
                    .await
                    .map_err(|e| e.to_string())?;
                stream
                    .get_last_raw_message_by_subject(subject)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        },
    )
    .await;
    let failed = m[0]
        .metric("fleetbus_sync_rejected_total{reason=\"publish_failed\"}")
        .unwrap_or(0.0);
    assert!(
        failed < 10.0,
        "{failed} failed publishes: retried in a loop"
    );
    // The sink consumes the recreated stream anew: the copy arrives.
    wait_data(&m[1], "after", &[("k", "2")]).await;
    wait_data(&m[1], "before", &[("k", "1")]).await;
}
