//! Integrity of what is on the bus, end to end.
//!
//! An attacker with a plain NATS client reads the origin's real last envelope
//! from the objects stream, changes it and publishes it again under the
//! origin's subject: a `contentHash` that is not the object's, or a subject
//! that names another object, is dropped and counted by every receiver and
//! changes no copy; a consistent forgery (its hash recomputed) is overwritten
//! by the origin at once and the sinks converge back. And what must never
//! leave a cluster (ServiceAccount and bootstrap tokens, the peer kubeconfig
//! Secrets fleetbus writes) is never published, whatever a rule selects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use async_nats::jetstream;
use async_nats::HeaderMap;
use common::sync::*;
use common::*;
use fleetbus_schemas::envelope::{content_hash, Envelope};
use fleetbus_schemas::subject::{ObjectKey, Prefix};
use fleetbus_testsupport::{wait_for, NatsServer};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;
use serde_json::json;

/// How long the origin may take to overwrite a forgery in its subtree.
const REPAIR: Duration = Duration::from_secs(5);

/// A forged `creationTimestamp`: older than any real one, it would win every
/// conflict on the sinks (PROTOCOL §4.5), and the content hash leaves it out.
const FORGED_TIME: &str = "2000-01-01T00:00:00Z";

/// a and b, namespace `shared` on both, [`shared_secrets_rule`] created on a, and the
/// Secret `shared/<name>` (`k=v`) of each of `names` created on a and copied
/// to b.
async fn fleet_with(nats: &NatsServer, names: &[&str]) -> Vec<Member> {
    let m = fleet(nats, &["a", "b"]).await;
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(&m[0], &shared_secrets_rule().yaml());
    for name in names {
        create_secret(&m[0], "shared", name, &[("k", "v")]).await;
    }
    for name in names {
        wait_true_copy(&m[1], name).await;
    }
    m
}

/// Waits until b's copy of `shared/<name>` holds a's true value `k=v`.
async fn wait_true_copy(b: &Member, name: &str) {
    wait_copy(
        b,
        &secrets(),
        Some("shared"),
        name,
        "a",
        "shared-secrets",
        data_is(secret_data(&[("k", "v")])),
    )
    .await;
}

/// The subject of Secret `<ns>/<name>` published by `origin`.
fn subject(origin: &str, ns: &str, name: &str) -> String {
    ObjectKey {
        origin: origin.into(),
        group: String::new(),
        version: "v1".into(),
        kind: "Secret".into(),
        namespace: Some(ns.into()),
        name: name.into(),
    }
    .to_subject(&Prefix::default())
}

/// The attacker: a plain JetStream client on the objects stream.
struct Attacker {
    js: jetstream::Context,
    stream: jetstream::stream::Stream,
}

impl Attacker {
    async fn connect(nats: &NatsServer) -> Self {
        let js = jetstream::new(async_nats::connect(nats.url()).await.expect("connect"));
        let stream = js.get_stream("FLEETBUS_OBJECTS").await.expect("stream");
        Self { js, stream }
    }

    /// The last envelope on `subject`, decoded.
    async fn last(&self, subject: &str) -> Result<Envelope, String> {
        let msg = self
            .stream
            .get_last_raw_message_by_subject(subject)
            .await
            .map_err(|e| format!("{subject}: {e}"))?;
        Envelope::decode(&msg.payload).map_err(|e| format!("{subject}: {e}"))
    }

    /// Publishes `env` on `subject` with a new `Nats-Msg-Id` and waits until
    /// the stream stored it.
    async fn publish(&self, subject: &str, env: &Envelope) {
        let mut headers = HeaderMap::new();
        let id = format!(
            "attacker-{}",
            chrono::Utc::now().timestamp_nanos_opt().unwrap()
        );
        headers.insert("Nats-Msg-Id", id.as_str());
        let ack = self
            .js
            .publish_with_headers(subject.to_owned(), headers, env.encode().unwrap().into())
            .await
            .expect("publish")
            .await
            .expect("stored");
        assert!(!ack.duplicate, "the forgery was dropped as a duplicate");
    }
}

/// `env` with its object's `data.k` set to `value` and its resourceVersion
/// one higher, in the object and the envelope alike; `contentHash` untouched.
fn forged(mut env: Envelope, value: &str) -> Envelope {
    let rv: u64 = env
        .resource_version
        .parse()
        .expect("numeric resourceVersion");
    env.resource_version = (rv + 1).to_string();
    let obj = env.object.as_mut().expect("a snapshot");
    obj["data"]["k"] = json!(b64(value));
    obj["metadata"]["resourceVersion"] = json!(env.resource_version);
    env
}

/// Waits until a's own subject for `shared/<name>` holds a's true value again.
async fn wait_true_on_bus(attacker: &Attacker, name: &str) {
    let subject = subject("a", "shared", name);
    wait_for(&format!("{subject} to hold k=v"), REPAIR, || async {
        let env = attacker.last(&subject).await?;
        let k = env
            .object
            .as_ref()
            .and_then(|o| o.pointer("/data/k").cloned());
        let created = env
            .object
            .as_ref()
            .and_then(|o| o.pointer("/metadata/creationTimestamp").cloned());
        if k == Some(json!(b64("v")))
            && created != Some(json!(FORGED_TIME))
            && env
                .check(&ObjectKey::parse_subject(&Prefix::default(), &subject).unwrap())
                .is_ok()
        {
            Ok(())
        } else {
            Err(format!(
                "k={k:?} creationTimestamp={created:?} hash={}",
                env.content_hash
            ))
        }
    })
    .await;
}

/// Publishes `env` on `subject` while a's agent is stopped, and waits until
/// b counted it rejected for `reason`; then restarts a and waits until a
/// counted it too and put its own value back on `subject`. (With a running,
/// its repair could replace the forgery, one message per subject, before b
/// fetched it: b would have nothing to reject.)
async fn forge_while_origin_stopped(
    m: &mut [Member],
    attacker: &Attacker,
    subject: &str,
    env: &Envelope,
    reason: &str,
) {
    m[0].agent.stop();
    attacker.publish(subject, env).await;
    let series = format!("fleetbus_sync_rejected_total{{reason=\"{reason}\"}}");
    m[1].wait_metric_at_least(&series, 1.0).await;
    m[0].agent.restart().unwrap();
    wait_readyz(&m[0], 200, CONVERGE).await;
    m[0].wait_metric_at_least(&series, 1.0).await;
    let name = subject.rsplit('.').next().unwrap();
    wait_true_on_bus(attacker, name).await;
}

/// A changed object under the old `contentHash` is dropped and
/// counted by the sink, whose copy stays as it was; the origin, which drops
/// it too, republishes its own value over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_object_with_a_bogus_hash_is_dropped() {
    let nats = NatsServer::start().unwrap();
    let mut m = fleet_with(&nats, &["real"]).await;
    let attacker = Attacker::connect(&nats).await;
    let subj = subject("a", "shared", "real");
    let env = forged(attacker.last(&subj).await.unwrap(), "forged");
    forge_while_origin_stopped(&mut m, &attacker, &subj, &env, "hash_mismatch").await;

    // Barrier: a Secret created after the forgery is copied, so b has read
    // past the forgery and a's answer.
    let (a, b) = (&m[0], &m[1]);
    create_secret(a, "shared", "after", &[("k", "v")]).await;
    wait_true_copy(b, "after").await;
    let copy = get_dynamic(b, &secrets(), Some("shared"), "real")
        .await
        .unwrap()
        .expect("the copy of real");
    assert_eq!(data(&copy), secret_data(&[("k", "v")]), "the copy changed");
}

/// A consistent forgery (object changed, hash recomputed) cannot be
/// told from a's own message by a sink, but a compares its subtree with what
/// it publishes and overwrites it at once; b converges back to the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_object_with_its_hash_recomputed_is_overwritten_by_the_origin() {
    let nats = NatsServer::start().unwrap();
    let m = fleet_with(&nats, &["real"]).await;
    let b = &m[1];
    let attacker = Attacker::connect(&nats).await;
    let subj = subject("a", "shared", "real");
    let mut env = forged(attacker.last(&subj).await.unwrap(), "forged");
    env.content_hash = content_hash(env.object.as_ref().unwrap());
    let key = ObjectKey::parse_subject(&Prefix::default(), &subj).unwrap();
    assert_eq!(env.check(&key), Ok(()), "the forgery must pass every check");
    let t0 = Instant::now();
    attacker.publish(&subj, &env).await;

    wait_true_on_bus(&attacker, "real").await;
    println!("a overwrote the forgery after {:?}", t0.elapsed());
    // Barrier: b has read past both the forgery and a's answer once a
    // Secret created afterwards is copied; the copy then holds the truth.
    create_secret(&m[0], "shared", "after", &[("k", "v")]).await;
    wait_true_copy(b, "after").await;
    wait_true_copy(b, "real").await;
    println!("b holds the truth again after {:?}", t0.elapsed());
    assert_eq!(sync_rejected(b, "hash_mismatch"), 0.0);

    // What the hash leaves out and sinks read is compared too: an older
    // creationTimestamp (the hash stays valid) is overwritten as well.
    let mut env = forged(attacker.last(&subj).await.unwrap(), "v");
    if let Some(o) = env.object.as_mut() {
        o["metadata"]["creationTimestamp"] = json!(FORGED_TIME);
    }
    assert_eq!(env.check(&key), Ok(()), "the forgery must pass every check");
    let t0 = Instant::now();
    attacker.publish(&subj, &env).await;
    wait_true_on_bus(&attacker, "real").await;
    println!(
        "a overwrote the forged creationTimestamp after {:?}",
        t0.elapsed()
    );
}

/// An envelope of `x` published under `y`'s subject (its hash
/// recomputed, so only the subject disagrees) is dropped and counted; neither
/// copy changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envelope_under_another_objects_subject_is_dropped() {
    let nats = NatsServer::start().unwrap();
    let mut m = fleet_with(&nats, &["x", "y"]).await;
    let attacker = Attacker::connect(&nats).await;
    let x = attacker.last(&subject("a", "shared", "x")).await.unwrap();
    let mut env = forged(x, "x-on-y");
    env.content_hash = content_hash(env.object.as_ref().unwrap());
    let y = subject("a", "shared", "y");
    forge_while_origin_stopped(&mut m, &attacker, &y, &env, "subject_mismatch").await;

    let (a, b) = (&m[0], &m[1]);
    create_secret(a, "shared", "after", &[("k", "v")]).await;
    wait_true_copy(b, "after").await;
    for name in ["x", "y"] {
        let copy = get_dynamic(b, &secrets(), Some("shared"), name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("the copy of {name} is gone"));
        assert_eq!(data(&copy), secret_data(&[("k", "v")]), "{name} changed");
    }
}

/// A Secret `kube-system/<name>` of `type_` with `data`.
async fn create_typed_secret(
    m: &Member,
    name: &str,
    type_: &str,
    annotations: &[(&str, &str)],
    data: &[(&str, &str)],
) {
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("kube-system".into()),
            annotations: Some(
                annotations
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some(type_.into()),
        string_data: Some(
            data.iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        ),
        ..Secret::default()
    };
    Api::<Secret>::namespaced(m.client.clone(), "kube-system")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap_or_else(|e| panic!("{}: create Secret kube-system/{name}: {e}", m.name));
}

/// What must not leave a cluster: a rule selecting kube-system and fleetbus-system Secrets copies
/// the ordinary ones, but never publishes a ServiceAccount token, a bootstrap
/// token or the peer kubeconfig Secret fleetbus wrote; the rule's status on
/// the origin counts them and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_what_fleetbus_writes_are_never_published() {
    let nats = NatsServer::start().unwrap();
    let a = Member::start(&nats, "a", "a", &["--publish-kubeconfig"]).await;
    let b = Member::start(&nats, "b", "b", &["--publish-kubeconfig"]).await;
    wait_mesh(&[&a, &b], &["a", "b"]).await;
    let fb_secrets = Api::<Secret>::namespaced(a.client.clone(), NAMESPACE);
    wait_for("a to store b's kubeconfig Secret", CONVERGE, || async {
        fb_secrets
            .get("b-kubeconfig")
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    create_typed_secret(
        &a,
        "reader-token",
        "kubernetes.io/service-account-token",
        &[("kubernetes.io/service-account.name", "default")],
        &[("token", "sa-token-value")],
    )
    .await;
    create_typed_secret(
        &a,
        "bootstrap-token-abcdef",
        "bootstrap.kubernetes.io/token",
        &[],
        &[("token-id", "abcdef"), ("token-secret", "0123456789abcdef")],
    )
    .await;
    create_secret(&a, "kube-system", "plain", &[("k", "v")]).await;
    create_secret(&a, NAMESPACE, "plain-fb", &[("k", "v")]).await;
    create_secret(&b, NAMESPACE, "plain-b", &[("k", "v")]).await;
    apply_yaml(
        &a,
        &secrets_rule("system-secrets", &["kube-system", "fleetbus-system"]).yaml(),
    );

    // The positive barrier: the ordinary Secrets of both namespaces arrive,
    // and b (a source too) has published its own.
    for (ns, name) in [("kube-system", "plain"), (NAMESPACE, "plain-fb")] {
        wait_copy(
            &b,
            &secrets(),
            Some(ns),
            name,
            "a",
            "system-secrets",
            |_| Ok(()),
        )
        .await;
    }
    wait_copy(
        &a,
        &secrets(),
        Some(NAMESPACE),
        "plain-b",
        "b",
        "system-secrets",
        |_| Ok(()),
    )
    .await;
    let attacker = Attacker::connect(&nats).await;
    for (ns, name) in [
        ("kube-system", "reader-token"),
        ("kube-system", "bootstrap-token-abcdef"),
        (NAMESPACE, "b-kubeconfig"),
        // The key of a's ownership marks: whoever holds it can claim objects.
        (NAMESPACE, "fleetbus-copy-mark"),
    ] {
        let subj = subject("a", ns, name);
        if let Ok(env) = attacker.last(&subj).await {
            panic!("{subj} was published: {env:?}");
        }
    }
    // b's own peer kubeconfig Secret (for a) was not published either.
    assert!(attacker
        .last(&subject("b", NAMESPACE, "a-kubeconfig"))
        .await
        .is_err());
    assert_absent(&b, &secrets(), Some("kube-system"), "reader-token").await;
    assert_absent(
        &b,
        &secrets(),
        Some("kube-system"),
        "bootstrap-token-abcdef",
    )
    .await;
    assert_absent(&b, &secrets(), Some(NAMESPACE), "b-kubeconfig").await;
    let r = wait_rule(&a, "system-secrets", "to report 4 skipped", |r| {
        let s = r.status.as_ref().ok_or("no status")?;
        let c = rule_condition(r, "Skipped").ok_or("no Skipped condition")?;
        if s.skipped == 4 && c.status == "True" && c.reason == "NeverPublished" {
            Ok(())
        } else {
            Err(format!("skipped {}", s.skipped))
        }
    })
    .await;
    let message = &rule_condition(&r, "Skipped").unwrap().message;
    for needle in [
        "4 object(s) never published (BootstrapToken 1, ServiceAccountToken 1, WrittenByFleetbus 2)",
        "Secret kube-system/reader-token: a service account token never leaves its cluster",
        "Secret kube-system/bootstrap-token-abcdef: a bootstrap token never leaves its cluster",
        "Secret fleetbus-system/b-kubeconfig: fleetbus writes it on every cluster itself",
        "Secret fleetbus-system/fleetbus-copy-mark: fleetbus writes it on every cluster itself",
    ] {
        assert!(message.contains(needle), "{needle:?} not in {message:?}");
    }
    assert_eq!(
        a.metric("fleetbus_sync_withheld").unwrap(),
        4.0,
        "fleetbus_sync_withheld on a"
    );
}
