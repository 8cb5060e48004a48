//! `fleetbus fleet init` and `fleetbus join` against a real nats-server in
//! operator mode configured from `fleet init`'s include: agents with the
//! creds `join` mints form a fleet and sync; a plain NATS client holding
//! c1's creds (the attacker: a compromised member) is refused by the server
//! whatever it tries on c2's subtree, registry key, consumers and streams,
//! and c2's data is read back untouched; clients without creds, or with
//! another fleet's, cannot connect. Then the CLI's answers to garbage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use common::fleet::*;
use common::sync::*;
use common::*;
use fleetbus_schemas::crd::ClusterState;
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::trust::{SignedCertificate, SigningKey};
use fleetbus_testsupport::{cargo_bin, wait_for, AgentCommand, NatsServer};
use futures::{FutureExt, StreamExt};

/// c1 and c2 with the creds `join` minted, and c2's Secret `shared/db`
/// synced to c1 under [`shared_secrets_rule`]: the agents work with their creds.
async fn syncing_pair(nats: &NatsServer, dir: &Path) -> (Member, Member) {
    let with_creds = |n: &str| AgentCommand::new(n).nats_creds(creds(dir, n));
    let c1 = Member::start_cmd(nats, "c1", with_creds("c1")).await;
    let c2 = Member::start_cmd(nats, "c2", with_creds("c2")).await;
    wait_mesh(&[&c1, &c2], &["c1", "c2"]).await;
    for m in [&c1, &c2] {
        create_ns(m, "shared").await;
    }
    apply_yaml(&c2, &shared_secrets_rule().yaml());
    create_secret(&c2, "shared", "db", &[("password", "s3cret")]).await;
    let data = secret_data(&[("password", "s3cret")]);
    wait_copy(
        &c1,
        &secrets(),
        Some("shared"),
        "db",
        "c2",
        "shared-secrets",
        data_is(data),
    )
    .await;
    (c1, c2)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_members_sync_and_a_member_cannot_touch_anothers_data() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1", "c2"]);
    let nats = operator_server(&dir);
    let c1_creds = creds(&dir, "c1");
    let (c1, c2) = syncing_pair(&nats, &dir).await;

    // What the admin sees of c2 before the attack.
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let objects = admin.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    let c2_subject = "fleetbus.obj.c2.core.v1.Secret.shared.db";
    let c2_msg = objects
        .get_last_raw_message_by_subject(c2_subject)
        .await
        .unwrap();
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    let c2_key = key_starting(&registry, "cluster.c2.").await;
    let mut consumers: Vec<String> = objects
        .consumer_names()
        .filter_map(|n| async { n.ok() })
        .collect()
        .await;
    consumers.sort();
    assert!(
        !consumers.is_empty(),
        "the agents consume the objects stream"
    );

    // The attacker holds c1's creds.
    let js = connect(&nats, &c1_creds).await;
    let refused = |what: &str, r: Result<(), String>| assert!(r.is_err(), "c1 could {what}");
    refused(
        "publish a snapshot as c2",
        async {
            js.publish(c2_subject, "forged".into())
                .await?
                .await
                .map(|_| ())
        }
        .await
        .map_err(|e| e.to_string()),
    );
    let kv = js.get_key_value("fleetbus-registry").await.unwrap();
    refused(
        "put c2's registry key",
        kv.put(&c2_key, "{}".into())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    );
    for name in &consumers {
        let r = js
            .delete_consumer_from_stream(name, "FLEETBUS_OBJECTS")
            .await;
        refused(
            "delete a consumer",
            r.map(|_| ()).map_err(|e| e.to_string()),
        );
    }
    let mut stream = js.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    refused(
        "purge the stream",
        stream.purge().await.map(|_| ()).map_err(|e| e.to_string()),
    );
    refused(
        "delete c2's message",
        stream
            .delete_message(c2_msg.sequence)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    );
    let mut config = stream.info().await.unwrap().config.clone();
    config.max_messages_per_subject = 1;
    refused(
        "update the stream",
        js.update_stream(&config)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    );
    refused(
        "delete the stream",
        js.delete_stream("FLEETBUS_OBJECTS")
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    );
    // A stream of its own making that would capture c2's command requests
    // (and answer them with stream acks).
    let capture = jetstream::stream::Config {
        name: "CAPTURE".into(),
        subjects: vec!["fleetbus.cmd.c2.*".into()],
        ..Default::default()
    };
    refused(
        "create a stream capturing c2's commands",
        js.create_stream(capture)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string()),
    );
    // Not vacuous: its own subtree is accepted.
    let own = "fleetbus.obj.c1.core.v1.ConfigMap.default.mine";
    js.publish(own, "ok".into()).await.unwrap().await.unwrap();

    // c2's data is untouched, as the admin reads it.
    let after = objects
        .get_last_raw_message_by_subject(c2_subject)
        .await
        .unwrap();
    assert_eq!(
        (after.sequence, &after.payload),
        (c2_msg.sequence, &c2_msg.payload)
    );
    assert_ne!(
        registry.get(&c2_key).await.unwrap().unwrap().as_ref(),
        b"{}"
    );
    for name in &consumers {
        objects
            .consumer_info(name)
            .await
            .unwrap_or_else(|e| panic!("consumer {name}: {e}"));
    }
    assert!(admin.get_stream("FLEETBUS_OBJECTS").await.is_ok());
    assert!(admin.get_stream("CAPTURE").await.is_err());
    // Reads: c1's user may subscribe to its inbox and its commands only,
    // not to c2's commands, anyone else's inbox (replies to the admin's
    // requests, other agents' consumer deliveries) or everything.
    let (_reader, events) = watched_client(&nats, Path::new(&c1_creds)).await;
    for subject in [
        "fleetbus.cmd.c2.*",
        "_INBOX.>",
        "_INBOX_c2.>",
        ">",
        "fleetbus.obj.>",
    ] {
        let _ = _reader.subscribe(subject).await;
    }
    _reader.subscribe("fleetbus.cmd.c1.*").await.unwrap();
    _reader.flush().await.unwrap();
    wait_for("c1's subscriptions refused", CONVERGE, || async {
        let seen = events.lock().unwrap().clone();
        let refused: Vec<&String> = seen
            .iter()
            .filter(|e| e.contains("Permissions Violation for Subscription"))
            .collect();
        if refused.len() == 5 && !seen.iter().any(|e| e.contains("fleetbus.cmd.c1.")) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
    // The agents' commands work with those permissions: relabel, progress
    // and correct, asked with the admin's creds.
    let (code, out, err) = admin_cli(&nats, &dir, &["clusters", "label", "c1", "tier=gold"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = admin_cli(&nats, &dir, &["clusters", "progress", "c1", "c2"]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = admin_cli(&nats, &dir, &["drift", "correct", "--cluster", "c1"]);
    assert_eq!(code, 0, "{out}{err}");

    // The fleet still syncs: a change on c2 reaches c1.
    still_syncs(&c2, &c1, "attack").await;
}

/// A member cannot publish into another client's reply inbox: with c1's
/// creds, a message to `_INBOX.victim.1` (where the admin's CLI would wait
/// for an agent's answer) is refused and never delivered, while c1's agent
/// still answers the commands it receives (`allow_responses`). Before,
/// members were granted `_INBOX.>` and the admin received it. Its ack of
/// another consumer's message is refused too (members were granted `$JS.ACK.>`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_cannot_publish_into_anothers_reply_inbox() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1", "c2"]);
    let nats = operator_server(&dir);
    let (c1, _c2) = syncing_pair(&nats, &dir).await;
    let admin = async_nats::ConnectOptions::with_credentials_file(dir.join("admin.creds"))
        .await
        .unwrap()
        .connect(nats.url())
        .await
        .unwrap();
    let mut victim = admin.subscribe("_INBOX.victim.>").await.unwrap();
    admin.flush().await.unwrap();
    let (attacker, events) = watched_client(&nats, Path::new(&creds(&dir, "c1"))).await;
    attacker
        .publish("_INBOX.victim.1", "INJECTED-BY-C1".into())
        .await
        .unwrap();
    attacker.flush().await.unwrap();
    publish_refused(&events, "_INBOX.victim.1").await;
    // The server refused it, so nothing can be on its way to the admin:
    // a marker the admin publishes itself comes first.
    admin
        .publish("_INBOX.victim.marker", "marker".into())
        .await
        .unwrap();
    let first = tokio::time::timeout(CONVERGE, victim.next())
        .await
        .expect("the admin's marker")
        .expect("a message");
    assert_eq!(
        first.subject.as_str(),
        "_INBOX.victim.marker",
        "{:?}",
        first.payload
    );
    // Nor may it ack another consumer's messages: with `$JS.ACK.>` it could
    // ack what the notify bridge's durable consumer has yet to send, and
    // silence its alerts. Its agent acks nothing (ordered consumers).
    let ack = "$JS.ACK.FLEETBUS_DRIFT.fleetbus-notify.1.1.1.0.0";
    attacker.publish(ack, "+ACK".into()).await.unwrap();
    attacker.flush().await.unwrap();
    publish_refused(&events, ack).await;
    // c1's agent still answers a command (one reply to a request it got).
    let (code, out, err) = admin_cli(&nats, &dir, &["clusters", "progress", "c1"]);
    assert_eq!(code, 0, "{out}{err}");
    drop(c1);
}

#[tokio::test]
async fn no_creds_or_another_fleets_creds_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1"]);
    let nats = operator_server(&dir);
    let err = async_nats::connect(nats.url()).await.unwrap_err();
    assert!(err.to_string().contains("authorization"), "{err}");
    let other = tempfile::tempdir().unwrap();
    let other = fleet_dir(other.path(), &["c1"]);
    for foreign in [
        other.join("admin.creds"),
        PathBuf::from(creds(&other, "c1")),
    ] {
        let err = async_nats::ConnectOptions::with_credentials_file(&foreign)
            .await
            .unwrap()
            .connect(nats.url())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("authorization"), "{err}");
    }
    // This fleet's own creds connect (the refusals are not vacuous).
    let js = connect(&nats, creds(&dir, "c1")).await;
    js.query_account().await.unwrap();
}

/// `name`'s certificate as `join` wrote it.
fn cert_of(dir: &Path, name: &str) -> SignedCertificate {
    let text = std::fs::read_to_string(dir.join("clusters").join(name).join("cluster.cert"));
    SignedCertificate::decode(&text.unwrap()).unwrap()
}

/// `env` as its origin reads it: a sealed one (a Secret) opened with the
/// origin's own key from the fleet dir (the origin is always a recipient).
fn opened(dir: &Path, key: &ObjectKey, env: Envelope) -> Result<Envelope, String> {
    if !env.is_sealed() {
        return Ok(env);
    }
    let file = dir.join("clusters").join(&key.origin).join("cluster.key");
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let keys = fleetbus_schemas::trust::ClusterKeys::decode(&text).map_err(|e| e.to_string())?;
    let secret = fleetbus_schemas::seal::SealingSecretKey::from_bytes(keys.sealing_secret())
        .map_err(|e| format!("{e:?}"))?;
    env.open(key, &key.origin, &secret)
        .map_err(|e| e.to_string())
}

/// Waits until the last value of `subject` is `origin`'s own again: signed
/// by the key of `cert`, with `password` (base64) in its object (a Secret
/// is sealed: opened with the origin's own key, from `dir`, as the origin is
/// always one of its recipients).
async fn wait_republished(
    dir: &Path,
    objects: &jetstream::stream::Stream,
    subject: &str,
    cert: &SignedCertificate,
    password: &str,
) {
    let prefix = fleetbus_schemas::subject::Prefix::default();
    let key = ObjectKey::parse_subject(&prefix, subject).unwrap();
    let signer = cert.verifying_key().unwrap();
    fleetbus_testsupport::wait_for(
        &format!("the origin republished {subject} over the forged value"),
        SYNC,
        || async {
            let msg = objects
                .get_last_raw_message_by_subject(subject)
                .await
                .map_err(|e| e.to_string())?;
            let env = Envelope::decode(&msg.payload).map_err(|e| e.to_string())?;
            env.verify_signature(&key, &signer)
                .map_err(|e| e.to_string())?;
            env.check(&key).map_err(|e| e.to_string())?;
            let env = opened(dir, &key, env)?;
            let got = env
                .object
                .as_ref()
                .and_then(|o| o.pointer("/data/password"));
            match got.and_then(|v| v.as_str()) {
                Some(p) if p == b64(password) => Ok(()),
                other => Err(format!("password {other:?}")),
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_replayed_and_unsigned_messages_are_dropped_and_counted() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, c1, c2) = secure_pair(tmp.path(), &[]).await;
    for m in [&c1, &c2] {
        create_ns(m, "shared").await;
    }
    apply_yaml(&c2, &shared_secrets_rule().yaml());
    create_secret(&c2, "shared", "db", &[("password", "v1")]).await;
    let copy_is = |p: &str| data_is(secret_data(&[("password", p)]));
    wait_copy(
        &c1,
        &secrets(),
        Some("shared"),
        "db",
        "c2",
        "shared-secrets",
        copy_is("v1"),
    )
    .await;

    // What c2 published is signed by the key its certificate names.
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let objects = admin.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    let subject = "fleetbus.obj.c2.core.v1.Secret.shared.db";
    let c2_cert = cert_of(&dir, "c2");
    wait_republished(&dir, &objects, subject, &c2_cert, "v1").await;
    let v1 = objects
        .get_last_raw_message_by_subject(subject)
        .await
        .unwrap();
    let v1 = Envelope::decode(&v1.payload).unwrap();
    assert_eq!(
        v1.signature.as_ref().unwrap().key_id,
        c2_cert.cert.serial_hex()
    );
    // A newer version, so that v1 becomes a replay.
    kubectl(
        &c2,
        &[
            "patch",
            "secret",
            "db",
            "-n",
            "shared",
            "-p",
            &format!("{{\"data\":{{\"password\":\"{}\"}}}}", b64("v2")),
        ],
    );
    wait_copy(
        &c1,
        &secrets(),
        Some("shared"),
        "db",
        "c2",
        "shared-secrets",
        copy_is("v2"),
    )
    .await;
    wait_republished(&dir, &objects, subject, &c2_cert, "v2").await;
    let v2 = objects
        .get_last_raw_message_by_subject(subject)
        .await
        .unwrap();
    let v2 = Envelope::decode(&v2.payload).unwrap();
    let key =
        ObjectKey::parse_subject(&fleetbus_schemas::subject::Prefix::default(), subject).unwrap();

    // The attacker may write c2's subtree (the admin's creds: a compromised
    // broker account). Each forgery: dropped and counted on c1, and c2
    // publishes its own value over it again.
    let pwned = |env: &Envelope| {
        let mut e = env.clone();
        // In clear (an opened envelope keeps its recipients' names and does
        // not encode): the forger has no business sealing.
        e.encryption = None;
        let obj = e.object.as_mut().unwrap();
        obj["data"]["password"] = b64("pwned").into();
        obj["metadata"]["resourceVersion"] = "99999999".into();
        e.resource_version = "99999999".into();
        e.content_hash = fleetbus_schemas::envelope::content_hash(obj);
        e.time = chrono::Utc::now();
        e
    };
    // Forgeries start from c2's v2 as c2 reads it (a Secret is sealed).
    let v2_open = opened(&dir, &key, v2.clone()).unwrap();
    // (a) signed by a key the root never certified, under c2's key id.
    let mut a = pwned(&v2_open);
    a.sign(
        &key,
        &SigningKey::from_bytes(&[42; 32]),
        &c2_cert.cert.serial_hex(),
    );
    // (b) c2's valid signature over content changed afterwards (for a
    // sealed one, its ciphertext: the hash the signature covers no longer
    // matches what is there).
    let mut b = v2.clone();
    match (b.object.as_mut(), b.encryption.as_mut()) {
        (Some(obj), _) => obj["data"]["password"] = b64("pwned").into(),
        (None, Some(h)) => h.ciphertext = "cHduZWQgcHduZWQgcHduZWQ=".into(),
        (None, None) => panic!("v2 has neither an object nor a sealed payload"),
    }
    // (c) c2's own older version, validly signed, replayed.
    let c = v1.clone();
    // (d) unsigned.
    let mut d = pwned(&v2_open);
    d.signature = None;
    for (env, reason) in [
        (a, "bad_signature"),
        (b, "content_hash"),
        (c, "replay"),
        (d, "unsigned"),
    ] {
        let series = rejected_series(reason);
        let before = c1.metric(&series).unwrap_or(0.0);
        let bytes = env.encode().unwrap();
        publish_until_counted(&admin, subject, &bytes, &c1, &series, before).await;
        wait_republished(&dir, &objects, subject, &c2_cert, "v2").await;
    }

    // (e) c2's record with a forged certificate (another root's), with
    // c1's certificate, and with garbage: dropped and counted.
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    let c2_key = key_starting(&registry, "cluster.c2.").await;
    let record: serde_json::Value =
        serde_json::from_slice(&registry.get(&c2_key).await.unwrap().unwrap()).unwrap();
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let other = fleet_dir(&other, &["c2"]);
    let forged_cert = cert_of(&other, "c2").encode();
    let genuine = record["certificate"].as_str().unwrap().to_owned();
    let c1_cert = cert_of(&dir, "c1").encode();
    let cases: [(&str, Option<&str>, &str); 6] = [
        // c2's own certificate and signature, a label added: the signature breaks.
        ("labels changed", Some(&genuine), "bad_signature"),
        ("unsigned", None, "unsigned"),
        (
            "another root's certificate",
            Some(&forged_cert),
            "bad_signature",
        ),
        ("c1's certificate", Some(&c1_cert), "signer_mismatch"),
        (
            "garbage certificate",
            Some("!!not base64!!"),
            "bad_signature",
        ),
        (
            "truncated certificate",
            Some(&forged_cert[..forged_cert.len() / 2]),
            "bad_signature",
        ),
    ];
    for (what, cert, reason) in cases {
        let series = rejected_series(reason);
        let before = c1.metric(&series).unwrap_or(0.0);
        let mut r = record.clone();
        r["certificate"] = cert.unwrap_or(&genuine).into();
        r["labels"]["forged"] = "yes".into();
        if cert.is_none() {
            r.as_object_mut().unwrap().remove("signature");
        }
        registry
            .put(&c2_key, serde_json::to_vec(&r).unwrap().into())
            .await
            .unwrap();
        eprintln!("forged record: {what}");
        c1.wait_metric_at_least(&series, before + 1.0).await;
    }
    // Every rejection is raised as an Event on c1 (rate-limited).
    fleetbus_testsupport::wait_for("a RejectedMessage Event on c1", SYNC, || async {
        let events = events_with_reason(&c1, "RejectedMessage").await?;
        events
            .iter()
            .find(|e| e.involved_object.name.as_deref() == Some("c2"))
            .map(|_| ())
            .ok_or_else(|| format!("{} events", events.len()))
    })
    .await;

    // The copies never changed: a later change on c2 still arrives, and
    // the copy holds c2's value, not a forger's.
    change_arrives_after_attack(&c2, &c1, copy_is("v2")).await;
    let c1_peer = c1.clusters().get("c2").await.unwrap();
    let labels = c1_peer.metadata.labels.unwrap_or_default();
    assert!(!labels.contains_key("forged"), "{labels:?}");
}

#[test]
fn an_agent_refuses_a_certificate_that_is_not_its_own() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1", "c2"]);
    let run = |cmd: AgentCommand| {
        let out = std::process::Command::new(cargo_bin("fleetbus-agent"))
            .args(cmd.argv())
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // c2's files for c1.
    let (code, err) = run(secure_files(AgentCommand::new("c1"), &dir, "c2"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--cluster-cert") && err.contains("names cluster \"c2\""),
        "{err}"
    );
    // Another fleet's root.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let other = fleet_dir(&other, &[]);
    let (code, err) = run(secure_agent(&dir, "c1").fleet_root(other.join("root.pub")));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not signed by the fleet root"), "{err}");
    // Half the flags.
    let half = AgentCommand::new("c1")
        .nats_creds(creds(&dir, "c1"))
        .fleet_root(dir.join("root.pub"));
    let (code, err) = run(half);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--fleet-root needs --cluster-key"), "{err}");
}

#[test]
fn init_and_join_answer_garbage_with_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &[]);
    let d = dir.to_str().unwrap();
    // init again: idempotent; a non-empty directory without a fleet: refused.
    let (code, out, _) = cli(&["fleet", "init", "--dir", d]);
    assert_eq!(code, 0);
    assert!(out.contains("nothing changed"), "{out}");
    let busy = tmp.path().join("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("x"), "x").unwrap();
    let (code, _, err) = cli(&["fleet", "init", "--dir", busy.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not empty") && err.contains("--force"),
        "{err}"
    );

    for bad in ["*", ">", "c1.>", "a.b", "", "UPPER"] {
        let (code, _, err) = cli(&["join", bad, "--dir", d]);
        assert_eq!(code, 2, "{bad:?}: {err}");
        assert!(err.contains("DNS-1123"), "{err}");
    }
    let absent = tmp.path().join("absent");
    let (code, _, err) = cli(&["join", "c1", "--dir", absent.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("fleetbus fleet init"), "{err}");
    let (code, _, err) = cli(&["join", "c1"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--dir"), "{err}");

    // A tampered creds file: one byte of the JWT's claims changed.
    let (code, first, _) = cli(&["join", "c1", "--dir", d]);
    assert_eq!(code, 0);
    let path = creds(&dir, "c1");
    let jwt = first.lines().nth(1).unwrap();
    let mid = jwt.len() / 2;
    let flipped = if &jwt[mid..=mid] == "A" { "B" } else { "A" };
    let tampered = format!("{}{flipped}{}", &jwt[..mid], &jwt[mid + 1..]);
    std::fs::write(&path, first.replace(jwt, &tampered)).unwrap();
    let (code, out, err) = cli(&["join", "c1", "--dir", d]);
    assert_eq!(code, 1, "{err}");
    assert!(out.is_empty(), "{out}");
    assert!(
        err.contains("nats.creds") && err.contains("--rotate"),
        "{err}"
    );
    let (code, rotated, err) = cli(&["join", "c1", "--dir", d, "--rotate"]);
    assert_eq!(code, 0, "{err}");
    assert_ne!(rotated, first);
    let (_, again, _) = cli(&["join", "c1", "--dir", d]);
    assert_eq!(again, rotated, "join is idempotent");

    // leave: bad names are usage errors, strangers and missing fleets errors.
    for bad in ["*", ">", "c1.>", "", "UPPER", "../c1"] {
        let (code, _, err) = cli(&["leave", bad, "--dir", d]);
        assert_eq!(code, 2, "{bad:?}: {err}");
    }
    let (code, _, err) = cli(&["leave", "c9", "--dir", d]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("c9 never joined"), "{err}");
    let (code, _, err) = cli(&["leave", "c1", "--dir", absent.to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("fleetbus fleet init"), "{err}");
    // Without a bus the revocation is done, the registry half is not: exit 1, saying so.
    let (code, out, err) = cli(&["leave", "c1", "--dir", d]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("c1 left"), "{out}");
    assert!(
        err.contains("not marked Left") && err.contains("--nats-url"),
        "{err}"
    );
    let (code, out, err) = cli(&["leave", "c1", "--dir", d]);
    assert_eq!(code, 1, "{err}");
    assert!(out.contains("had left already"), "{out}");
    // A bus that does not answer: a clear error, the revocation stays.
    let (code, _, err) = cli(&[
        "leave",
        "c1",
        "--dir",
        d,
        "--nats-url",
        "nats://127.0.0.1:1",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("marking c1 Left"), "{err}");
}

/// A plain client holding `creds`, and the events of its connection.
/// Waits until the server has told a [`watched_client`] that its publish on
/// `subject` was refused.
async fn publish_refused(events: &std::sync::Mutex<Vec<String>>, subject: &str) {
    wait_for(
        &format!("the publish on {subject} refused"),
        CONVERGE,
        || async {
            let seen = events.lock().unwrap().clone();
            seen.iter()
                .any(|e| e.contains("Permissions Violation for Publish") && e.contains(subject))
                .then_some(())
                .ok_or(format!("{seen:?}"))
        },
    )
    .await;
}

async fn watched_client(
    nats: &NatsServer,
    creds: &Path,
) -> (
    async_nats::Client,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = events.clone();
    let client = async_nats::ConnectOptions::with_credentials_file(creds)
        .await
        .unwrap()
        .event_callback(move |e| {
            let seen = seen.clone();
            async move { seen.lock().unwrap().push(e.to_string()) }
        })
        .connect(nats.url())
        .await
        .unwrap();
    (client, events)
}

/// Waits until the server has closed `client`'s connection and refuses its
/// reconnects (it stays disconnected).
async fn wait_closed(
    what: &str,
    client: &async_nats::Client,
    events: &std::sync::Mutex<Vec<String>>,
) {
    wait_for(what, CONVERGE, || async {
        let seen = events.lock().unwrap().clone();
        let state = client.connection_state();
        if seen.iter().any(|e| e == "disconnected")
            && state != async_nats::connection::State::Connected
        {
            Ok(())
        } else {
            Err(format!("state {state:?}, events {seen:?}"))
        }
    })
    .await;
}

async fn refused(nats: &NatsServer, creds: &Path) -> Result<(), String> {
    match async_nats::ConnectOptions::with_credentials_file(creds)
        .await
        .unwrap()
        .connect(nats.url())
        .await
    {
        Err(e) if e.to_string().contains("authorization") => Ok(()),
        Err(e) => Err(format!("refused, but not for authorization: {e}")),
        Ok(_) => Err("connected".into()),
    }
}

/// `join --rotate` and `leave` against a running server: after a config
/// reload (what `fleetbus mesh` does, and the operator elsewhere) the
/// server closes the revoked user's live connection and refuses it again;
/// the creds from before the rotation die at the rotation; c1 never notices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_and_rotate_revoke_on_a_running_server() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1", "c2"]);
    let d = dir.to_str().unwrap();
    let mut nats = operator_server(&dir);
    let reload = |nats: &NatsServer| {
        let include = std::fs::read_to_string(dir.join("nats-operator.conf")).unwrap();
        nats.reload(&include).unwrap();
    };
    let old = tmp.path().join("c2-old.creds");
    std::fs::copy(creds(&dir, "c2"), &old).unwrap();
    let (c1, c1_events) = watched_client(&nats, Path::new(&creds(&dir, "c1"))).await;
    let (c2_old, old_events) = watched_client(&nats, &old).await;

    let (code, _, err) = cli(&["join", "c2", "--dir", d, "--rotate"]);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("revoked c2's earlier credentials"), "{err}");
    // The rotation is in the include; the server learns it on reload.
    reload(&nats);
    wait_closed(
        "the pre-rotation creds' connection closed",
        &c2_old,
        &old_events,
    )
    .await;
    refused(&nats, &old).await.unwrap();
    let new = PathBuf::from(creds(&dir, "c2"));
    let (c2_new, new_events) = watched_client(&nats, &new).await;
    c2_new.flush().await.unwrap();
    // The creds as c2 still holds them after `leave` removed the fleet's copy.
    let kept = tmp.path().join("c2-new.creds");
    std::fs::copy(&new, &kept).unwrap();

    let (code, out, err) = cli(&["leave", "c2", "--dir", d, "--nats-url", &nats.url()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("c2 left"), "{out}");
    assert!(out.contains("no Active record of c2"), "{out}");
    assert!(err.contains("nats-server --signal reload"), "{err}");
    assert!(!new.exists(), "c2's stored creds are removed");
    reload(&nats);
    wait_closed("c2's connection closed", &c2_new, &new_events).await;
    refused(&nats, &kept).await.unwrap();
    refused(&nats, &old).await.unwrap();
    // c1 kept its connection throughout and still works.
    c1.flush().await.unwrap();
    assert_eq!(
        c1.connection_state(),
        async_nats::connection::State::Connected
    );
    assert!(
        !c1_events
            .lock()
            .unwrap()
            .iter()
            .any(|e| e == "disconnected"),
        "{:?}",
        c1_events.lock().unwrap()
    );
    // A restart keeps the revocations (they are in the include).
    nats.restart().unwrap();
    refused(&nats, &kept).await.unwrap();
    connect(&nats, creds(&dir, "c1"))
        .await
        .query_account()
        .await
        .unwrap();
}

/// A Secret rule on namespace `ns` with `orphan_policy`.
fn secret_rule(name: &str, ns: &str, orphan_policy: &str) -> String {
    secrets_rule(name, &[ns])
        .spec("orphanPolicy", orphan_policy.into())
        .yaml()
}

/// `fleetbus leave c2` on a running fleet whose c2 rotated its creds once:
/// the server closes c2's connection and refuses its creds, old and new;
/// c1 shows c2 Left and collects c2's copies per orphanPolicy (Delete:
/// gone; Orphan: kept), and `fleetbus clusters ls` says Left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leave_revokes_a_member_and_its_copies_follow_orphan_policy() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1", "c2"]);
    let d = dir.to_str().unwrap();
    let nats = operator_server(&dir);
    let reload = || {
        let include = std::fs::read_to_string(dir.join("nats-operator.conf")).unwrap();
        nats.reload(&include).unwrap();
    };
    let old = tmp.path().join("c2-old.creds");
    std::fs::copy(creds(&dir, "c2"), &old).unwrap();
    let (code, _, err) = cli(&["join", "c2", "--dir", d, "--rotate"]);
    assert_eq!(code, 0, "{err}");
    reload();
    let c2_creds = tmp.path().join("c2.creds");
    std::fs::copy(creds(&dir, "c2"), &c2_creds).unwrap();
    // Secure agents (signatures verified): the Left record the operator
    // writes must be signed in c2's name, or c1 drops it as unsigned.
    let c1 = Member::start_cmd(&nats, "c1", secure_agent(&dir, "c1")).await;
    let c2 = Member::start_cmd(&nats, "c2", secure_agent(&dir, "c2").nats_creds(&c2_creds)).await;
    wait_mesh(&[&c1, &c2], &["c1", "c2"]).await;
    for m in [&c1, &c2] {
        create_ns(m, "shared").await;
        create_ns(m, "kept").await;
    }
    // The rules live on c1: rules c2 had put would be collected with c2's
    // other copies once it leaves, and c1 would stop reading c2's Secrets
    // before the revoked message below reaches it.
    apply_yaml(&c1, &secret_rule("shared-delete", "shared", "Delete"));
    apply_yaml(&c1, &secret_rule("kept-orphan", "kept", "Orphan"));
    create_secret(&c2, "shared", "db", &[("password", "s3cret")]).await;
    create_secret(&c2, "kept", "keep", &[("k", "v")]).await;
    for (ns, name, rule) in [
        ("shared", "db", "shared-delete"),
        ("kept", "keep", "kept-orphan"),
    ] {
        wait_copy(&c1, &secrets(), Some(ns), name, "c2", rule, |_| Ok(())).await;
    }

    // A revocation of c2 not signed by the root (a forger who may write
    // the registry: the admin's creds) revokes nothing: counted, and c2's
    // changes still arrive.
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    let c2_serial = cert_of(&dir, "c2").cert.serial_hex();
    let forged = fleetbus_schemas::registry::RevokedRecord {
        name: "c2".into(),
        serials: vec![c2_serial.clone()],
        revoked_at: chrono::Utc::now(),
    };
    let active = {
        let k = key_starting(&registry, "cluster.c2.").await;
        let v = registry.get(&k).await.unwrap().unwrap();
        (k, v)
    };
    let series = rejected_series("bad_signature");
    let before = c1.metric(&series).unwrap_or(0.0);
    let forged = forged.encode_signed(&SigningKey::from_bytes(&[42; 32]));
    registry
        .put("revoked.c2", forged.unwrap().into())
        .await
        .unwrap();
    c1.wait_metric_at_least(&series, before + 1.0).await;
    create_secret(&c2, "shared", "after-forgery", &[("k", "v")]).await;
    wait_copy(
        &c1,
        &secrets(),
        Some("shared"),
        "after-forgery",
        "c2",
        "shared-delete",
        |_| Ok(()),
    )
    .await;

    // Revoke first (the include), reload, then mark c2 Left on the bus:
    // the order of a deployment that is not a `fleetbus mesh`.
    let (code, out, err) = cli(&["leave", "c2", "--dir", d]);
    assert_eq!(code, 1, "revoked, registry not marked: {err}");
    assert!(out.contains("c2 left"), "{out}");
    reload();
    wait_for_blocking_log(&c2, "NATS connection lost").await;
    refused(&nats, &c2_creds).await.unwrap();
    refused(&nats, &old).await.unwrap();
    let (code, out, err) = cli(&["leave", "c2", "--dir", d, "--nats-url", &nats.url()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("had left already")
            && out.contains("marked c2 Left")
            && out.contains("revoked c2's certificates"),
        "{out}"
    );

    wait_peer_state(&c1, "c2", ClusterState::Left, CONVERGE).await;
    // `leave` puts the Left records before the revocation entry (they are
    // signed with the key being revoked), so Left alone does not say c1
    // has read the revocation yet: wait for it, or the message below may
    // race ahead of it.
    wait_for_blocking_log(&c1, "the fleet root revoked certificates").await;
    // The broker that did not revoke c2's NATS user (simulated: the admin's
    // creds) lets c2's still valid key publish: c1 refuses it as revoked,
    // whatever its signature says.
    let series = rejected_series("revoked");
    let before = c1.metric(&series).unwrap_or(0.0);
    let key = ObjectKey::from_api_version("c2", "v1", "Secret", Some("shared"), "pwn");
    let obj = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": "shared", "name": "pwn", "uid": "u-pwn", "resourceVersion": "1"},
        "data": {"k": b64("pwned")}});
    let mut env = Envelope::snapshot("c2", None, obj, chrono::Utc::now()).unwrap();
    let keys = std::fs::read_to_string(dir.join("clusters/c2/cluster.key")).unwrap();
    let keys = fleetbus_schemas::trust::ClusterKeys::decode(&keys).unwrap();
    env.sign(&key, keys.signing(), &c2_serial);
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let prefix = fleetbus_schemas::subject::Prefix::default();
    publish_raw(&admin, &key.to_subject(&prefix), env.encode().unwrap()).await;
    c1.wait_metric_at_least(&series, before + 1.0).await;
    wait_absent(&c1, &secrets(), Some("shared"), "db").await;
    assert!(
        dynamic(&c1, &secrets(), Some("kept"))
            .get_opt("keep")
            .await
            .unwrap()
            .is_some(),
        "orphanPolicy Orphan keeps c2's copy"
    );
    let (code, out, err) = admin_cli(&nats, &dir, &["clusters", "ls"]);
    assert_eq!(code, 0, "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("c2 "))
        .unwrap_or_default();
    assert!(line.contains("Left"), "{out}");
    // Last (`clusters ls` reads the bucket unverified): c2's Active record
    // from before the leave, replayed, is refused by c1 too, and c2 stays
    // Left there.
    let before = c1.metric(&series).unwrap_or(0.0);
    registry.put(&active.0, active.1.clone()).await.unwrap();
    c1.wait_metric_at_least(&series, before + 1.0).await;
    wait_peer_state(&c1, "c2", ClusterState::Left, CONVERGE).await;
}

/// Freshness of records (PROTOCOL §5.1): c2 leaves on shutdown (its own
/// signed Left record); its Active record from before, validly signed and
/// replayed by whoever may write the registry (the admin's creds), is
/// refused as a replay on c1, and c2 stays Left there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_older_record_does_not_bring_a_left_cluster_back() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1", "c2"]);
    let nats = operator_server(&dir);
    let c2_leaves = secure_agent(&dir, "c2").extra(["--leave-on-shutdown"]);
    let c1 = Member::start_cmd(&nats, "c1", secure_agent(&dir, "c1")).await;
    let mut c2 = Member::start_cmd(&nats, "c2", c2_leaves).await;
    wait_mesh(&[&c1, &c2], &["c1", "c2"]).await;
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    let key = key_starting(&registry, "cluster.c2.").await;
    let active = registry.get(&key).await.unwrap().unwrap();
    let record: serde_json::Value = serde_json::from_slice(&active).unwrap();
    assert_eq!(record["state"], "Active");
    c2.agent.stop();
    wait_peer_state(&c1, "c2", ClusterState::Left, CONVERGE).await;

    let series = rejected_series("replay");
    let before = c1.metric(&series).unwrap_or(0.0);
    registry.put(&key, active.clone()).await.unwrap();
    c1.wait_metric_at_least(&series, before + 1.0).await;
    let peer = c1.clusters().get("c2").await.unwrap();
    let state = peer.status.and_then(|s| s.state);
    assert_eq!(state, Some(ClusterState::Left));
}

/// Waits until `m`'s agent log says `what`.
async fn wait_for_blocking_log(m: &Member, what: &str) {
    wait_for(
        &format!("{}'s agent to log {what:?}", m.name),
        CONVERGE,
        || async {
            let log = m.agent.log();
            if log.contains(what) {
                Ok(())
            } else {
                Err(log.lines().rev().take(5).collect::<Vec<_>>().join("\n"))
            }
        },
    )
    .await;
}

/// `fleetbus clusters forget`: a killed peer disappears from every
/// cluster's Cluster objects and from the bus; a Ready peer is refused
/// without --force; garbage and unknown names are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forget_removes_a_dead_peer_everywhere_and_refuses_a_live_one() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1", "c2", "c3"]);
    let nats = operator_server(&dir);
    let mut members = Vec::new();
    for n in ["c1", "c2", "c3"] {
        let cmd = AgentCommand::new(n).nats_creds(creds(&dir, n));
        members.push(Member::start_cmd(&nats, n, cmd).await);
    }
    let refs: Vec<&Member> = members.iter().collect();
    wait_mesh(&refs, &["c1", "c2", "c3"]).await;
    members[2].agent.kill9();
    for m in &members[..2] {
        wait_peer_state(m, "c3", ClusterState::Disconnected, CONVERGE).await;
    }

    let (code, _, err) = admin_cli(&nats, &dir, &["clusters", "forget", "c2"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("c2 is Ready") && err.contains("--force"),
        "{err}"
    );
    for bad in ["*", ">", "c1.>", "", "UPPER", "../c1"] {
        let (code, _, err) = admin_cli(&nats, &dir, &["clusters", "forget", bad]);
        assert_eq!(code, 2, "{bad:?}: {err}");
    }
    let (code, _, err) = admin_cli(&nats, &dir, &["clusters", "forget", "c9"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no cluster \"c9\""), "{err}");
    // A member may not forget another: the server refuses its writes.
    let c1_bus = ["clusters", "forget", "c3", "--nats-url", &nats.url()];
    let c1_creds = creds(&dir, "c1");
    let mut args: Vec<&str> = c1_bus.to_vec();
    args.extend(["--creds", &c1_creds]);
    let (code, _, err) = cli(&args);
    assert_eq!(code, 1, "a member forgot c3: {err}");

    let (code, out, err) = admin_cli(&nats, &dir, &["clusters", "forget", "c3"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("forgot c3"), "{out}");
    for m in &members[..2] {
        wait_for(
            &format!("{} to delete Cluster c3", m.name),
            CONVERGE,
            || async {
                match m
                    .clusters()
                    .get_opt("c3")
                    .await
                    .map_err(|e| e.to_string())?
                {
                    None => Ok(()),
                    Some(c) => Err(format!("{:?}", c.status)),
                }
            },
        )
        .await;
        // The live peer is untouched.
        assert!(m
            .clusters()
            .get_opt(if m.name == "c1" { "c2" } else { "c1" })
            .await
            .unwrap()
            .is_some());
    }
    let (code, out, _) = admin_cli(&nats, &dir, &["clusters", "ls"]);
    assert_eq!(code, 0);
    assert!(!out.lines().any(|l| l.starts_with("c3 ")), "{out}");
    // Again: harmless.
    let (code, out, err) = admin_cli(&nats, &dir, &["clusters", "forget", "c3"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("forgot c3"), "{out}");
    // --force forgets a live one (its agent will announce it again).
    let (code, _, err) = admin_cli(&nats, &dir, &["clusters", "forget", "c2", "--force"]);
    assert_eq!(code, 0, "{err}");
}

/// The fleet account's consumer limit from `fleet init --js-max-consumers`:
/// a member (c1's creds) creating consumers past it is refused by the
/// server, and the agents, whose consumers exist already, keep syncing.
/// nats-server counts the limit per stream, not per account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_creating_consumers_past_the_limit_is_refused_and_sync_goes_on() {
    const LIMIT: usize = 40;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fleet");
    let d = dir.to_str().unwrap();
    let (code, out, err) = cli(&[
        "fleet",
        "init",
        "--dir",
        d,
        "--js-max-consumers",
        &LIMIT.to_string(),
    ]);
    assert_eq!(code, 0, "{out}{err}");
    for n in ["c1", "c2"] {
        let (code, _, err) = cli(&["join", n, "--dir", d]);
        assert_eq!(code, 0, "{err}");
    }
    let nats = operator_server(&dir);
    let (c1, c2) = syncing_pair(&nats, &dir).await;
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let before = admin.query_account().await.unwrap().consumers;
    assert!(before < LIMIT, "the agents need {before} consumers");

    let js = connect(&nats, creds(&dir, "c1")).await;
    let stream = js.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    let mut made = 0;
    let refusal = loop {
        let config = jetstream::consumer::pull::Config {
            inactive_threshold: Duration::from_secs(120),
            ..Default::default()
        };
        match stream.create_consumer(config).await {
            Ok(_) => made += 1,
            Err(e) => break e.to_string(),
        }
        assert!(
            made <= LIMIT,
            "made {made} consumers past the limit of {LIMIT}"
        );
    };
    assert!(refusal.contains("maximum consumers"), "{refusal}");
    // nats-server applies the account's consumer limit to each stream (as
    // measured: the account as a whole then holds more).
    let mut objects = admin.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    let on_stream = objects.info().await.unwrap().state.consumer_count;
    assert_eq!(on_stream, LIMIT, "made {made}");
    let account = admin.query_account().await.unwrap();
    assert_eq!(account.limits.max_consumers, Some(LIMIT as i64));
    assert!(account.consumers > LIMIT, "{account:?}");

    // The agents' consumers exist: a change on c2 still reaches c1.
    still_syncs(&c2, &c1, "limit").await;
}

/// The fleet still syncs: labelling c2's Secret `shared/db` with
/// `after=<word>` reaches c1's copy.
async fn still_syncs(c2: &Member, c1: &Member, word: &str) {
    kubectl(
        c2,
        &[
            "label",
            "secret",
            "db",
            "-n",
            "shared",
            &format!("after={word}"),
        ],
    );
    wait_obj(
        c1,
        &secrets(),
        Some("shared"),
        "db",
        &format!("labelled after the {word}"),
        |o| match o.metadata.labels.as_ref().and_then(|l| l.get("after")) {
            Some(v) if v == word => Ok(()),
            other => Err(format!("label {other:?}")),
        },
    )
    .await;
}

/// A change of `db` on `origin` after an attack reaches `sink`, whose copy
/// then passes `check`: the fleet still syncs, and what the attack did (or
/// did not do) to the copy is read after that later, positive observation.
async fn change_arrives_after_attack(
    origin: &Member,
    sink: &Member,
    check: impl Fn(&kube::api::DynamicObject) -> Result<(), String>,
) {
    kubectl(
        origin,
        &["label", "secret", "db", "-n", "shared", "after=attack"],
    );
    wait_obj(
        sink,
        &secrets(),
        Some("shared"),
        "db",
        "labelled after the attack",
        |o| match o.metadata.labels.as_ref().and_then(|l| l.get("after")) {
            Some(v) if v == "attack" => check(o),
            other => Err(format!("label {other:?}")),
        },
    )
    .await;
}

/// A member may create a push consumer whose deliver subject it may not
/// publish to (nats-server does not check it: nats-io/nats-server#8274). The
/// fleet's streams live in an account of their own with no users, so such a
/// consumer delivers there, where no client is (SECURITY.md, "Deliveries a
/// member steers"). c2, with its own creds, stores a well-formed label
/// request, a copy of its own record and a forged drift event in its drift
/// subtree, and has consumers deliver them to c1's command subject (c1's
/// agent subscribes there), to an admin's reply inbox and to the drift
/// subjects a plain client follows (both subscribed here), and to c1's
/// registry key. None of them has a subscriber to deliver to: nothing is
/// delivered, nothing received. With one account (what the fleet was before),
/// the first three had one: c1 refused 20 unsigned requests and the admin
/// received `INJECTED-BY-B`. Whoever may write the bucket itself (a broker's
/// creds) can still put a record under c1's key, or put back c1's validly
/// signed record of an earlier run: c1 then puts its own record back, since
/// an agent that starts reads only the latest value of each key and would
/// not know c1, or believe it as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_a_member_steers_reach_no_one_and_puts_on_a_key_are_repaired() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, mut c1, _c2) = secure_pair(tmp.path(), &[]).await;
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    let c1_key = key_starting(&registry, "cluster.c1.").await;
    let c2_key = key_starting(&registry, "cluster.c2.").await;
    let c2_record = registry.get(&c2_key).await.unwrap().unwrap();
    let c1_first_run = registry.get(&c1_key).await.unwrap().unwrap();
    let attacker = connect(&nats, creds(&dir, "c2")).await;
    // Subscribers a steered delivery could reach in the members account.
    let plain = admin.client();
    let mut inbox = plain.subscribe("_INBOX.victim.1").await.unwrap();
    let mut drift = plain.subscribe("fleetbus.drift.>").await.unwrap();
    plain.flush().await.unwrap();
    let unsigned = "fleetbus_commands_rejected_total{verb=\"label\",reason=\"unsigned\"}";
    let before = c1.metric(unsigned).unwrap_or(0.0);

    let request =
        br#"{"schema":"fleetbus.io/label-request/v1","set":{"tier":"pwned"},"overwrite":true}"#;
    let steered = [
        (
            "request",
            request.to_vec(),
            "fleetbus.cmd.c1.label".to_owned(),
        ),
        (
            "inbox",
            b"INJECTED-BY-B".to_vec(),
            "_INBOX.victim.1".to_owned(),
        ),
        (
            "event",
            b"{}".to_vec(),
            "fleetbus.drift.c1.forged".to_owned(),
        ),
        (
            "record",
            c2_record.to_vec(),
            format!("$KV.fleetbus-registry.{c1_key}"),
        ),
    ];
    let mut consumers = Vec::new();
    for (token, payload, onto) in steered {
        consumers.push((
            onto.clone(),
            store_and_steer(&attacker, token, payload, &onto).await,
        ));
    }
    // Onto the JetStream API and its advisories, which nats-server serves in
    // the streams account itself: a delivered request would run with the
    // account's own rights (delete a stream), an advisory would have every
    // agent read a stream anew. Neither happens (nor did it with one account:
    // nats-server delivers a consumer's messages to neither).
    let objects = admin.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    let stored = objects.cached_info().state.messages;
    let logged = c1.agent.log().len();
    for (token, onto) in [
        ("api", "$JS.API.STREAM.DELETE.FLEETBUS_OBJECTS"),
        (
            "advisory",
            "$JS.EVENT.ADVISORY.STREAM.CREATED.FLEETBUS_OBJECTS",
        ),
    ] {
        store_and_steer(&attacker, token, b"{}".to_vec(), onto).await;
    }
    // The plain follower is live: a marker c2 publishes in its own drift
    // subtree reaches it, and nothing before it came from c1's subtree.
    let forged = "fleetbus.drift.c1.forged";
    let marker = "fleetbus.drift.c2.marker";
    attacker.client().publish(marker, "".into()).await.unwrap();
    attacker.client().flush().await.unwrap();
    let mut followed = Vec::new();
    while followed.last().map(String::as_str) != Some(marker) {
        let got = tokio::time::timeout(CONVERGE, drift.next()).await;
        let got = got.unwrap_or_else(|_| panic!("no marker; followed {followed:?}"));
        followed.push(got.expect("the subscription goes on").subject.to_string());
    }
    assert!(!followed.iter().any(|s| s == forged), "{followed:?}");
    for (onto, consumer) in &mut consumers {
        let info = consumer.info().await.unwrap();
        // What the server knows at once: it has no subscriber of the deliver
        // subject where the consumer lives, so it delivers nothing.
        assert!(
            !info.push_bound,
            "{onto}: the consumer found a subscriber: {info:?}"
        );
        assert_eq!(info.delivered.consumer_sequence, 0, "{onto}: {info:?}");
        assert_eq!(info.num_pending, 1, "{onto}: {info:?}");
    }
    // And a request c1's agent does not get is not refused either; its labels
    // are untouched, its key holds its record, and the subscribers got
    // nothing but c2's own publishes above.
    assert_eq!(c1.metric(unsigned).unwrap_or(0.0), before);
    let labels = c1.clusters().get("c1").await.unwrap().metadata.labels;
    assert!(!labels.unwrap_or_default().contains_key("tier"));
    assert_eq!(record_name(&registry, &c1_key).await, "c1");
    assert!(inbox.next().now_or_never().is_none());
    let mut objects = admin.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    assert_eq!(objects.info().await.unwrap().state.messages, stored);
    let log = c1.agent.log();
    let since = log.get(logged..).unwrap_or_default();
    assert!(
        !since.contains("was recreated; consuming it anew"),
        "{since}"
    );
    while let Some(Some(got)) = drift.next().now_or_never() {
        assert_ne!(got.subject.as_str(), forged);
    }

    put_and_see_put_back(&registry, &c1_key, c2_record.to_vec(), "c2's record").await;
    assert_eq!(record_name(&registry, &c1_key).await, "c1");
    assert_eq!(
        c1.metric("fleetbus_registry_foreign_puts_total").unwrap(),
        1.0
    );

    // c1's record of its first run, validly signed, put back after a restart.
    c1.agent.restart().unwrap();
    c1.wait_ready().await;
    let started = |v: &[u8]| {
        let r: serde_json::Value = serde_json::from_slice(v).unwrap();
        r["startedAt"].as_str().unwrap_or_default().to_owned()
    };
    let first = started(&c1_first_run);
    wait_for("c1's second run's record", CONVERGE, || async {
        let now = started(&registry.get(&c1_key).await.unwrap().unwrap());
        (now != first).then_some(()).ok_or(now)
    })
    .await;
    put_and_see_put_back(&registry, &c1_key, c1_first_run.to_vec(), "c1's first run").await;
    let latest = started(&registry.get(&c1_key).await.unwrap().unwrap());
    assert_ne!(latest, first);
    assert_eq!(
        c1.metric("fleetbus_registry_foreign_puts_total").unwrap(),
        1.0
    );
}

/// Puts `value` (`what`) under c1's `key` as a broker may, and waits until
/// c1's agent has put a record of its running agent back after it.
async fn put_and_see_put_back(
    registry: &jetstream::kv::Store,
    key: &str,
    value: Vec<u8>,
    what: &str,
) {
    let (mut puts, _) = pull_watch(registry, key, false).await;
    registry.put(key, value.clone().into()).await.unwrap();
    let mut landed = false;
    let deadline = tokio::time::Instant::now() + CONVERGE;
    loop {
        let ((_, _, entry), _) = tokio::time::timeout_at(deadline, puts.next())
            .await
            .unwrap_or_else(|_| panic!("c1's key: {what} landed {landed}, c1's not put back"))
            .expect("the watch goes on");
        if entry == value {
            landed = true;
        } else if landed {
            break;
        }
    }
}

/// The `name` of the record under `key`.
async fn record_name(registry: &jetstream::kv::Store, key: &str) -> String {
    let value = registry.get(key).await.unwrap().unwrap();
    let record: serde_json::Value = serde_json::from_slice(&value).unwrap();
    record["name"].as_str().unwrap_or_default().to_owned()
}

/// Publishes `payload` in c2's own drift (or conflict) subtree (which c2 may) and creates
/// a push consumer delivering it onto `onto` (which c2 may not publish to).
async fn store_and_steer(
    js: &jetstream::Context,
    token: &str,
    payload: Vec<u8>,
    onto: &str,
) -> jetstream::consumer::Consumer<jetstream::consumer::push::Config> {
    // A consumer may not deliver onto its own stream's subjects (a cycle,
    // refused): what goes to the drift subjects is stored in c2's conflicts.
    let (kind, stream) = if onto.starts_with("fleetbus.drift.") {
        ("conflict", "FLEETBUS_CONFLICTS")
    } else {
        ("drift", "FLEETBUS_DRIFT")
    };
    let from = format!("fleetbus.{kind}.c2.steer-{token}");
    js.publish(from.clone(), payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
    let stream = js.get_stream(stream).await.unwrap();
    let made = stream
        .create_consumer(jetstream::consumer::push::Config {
            deliver_subject: onto.to_owned(),
            filter_subject: from,
            deliver_policy: jetstream::consumer::DeliverPolicy::Last,
            ack_policy: jetstream::consumer::AckPolicy::None,
            inactive_threshold: Duration::from_secs(60),
            ..Default::default()
        })
        .await;
    made.unwrap_or_else(|e| {
        panic!(
            "nats-server refused a deliver subject its creator may not publish to \
             (nats-io/nats-server#8274 fixed?): {e}; SECURITY.md's open item is closed: \
             say so there and make this test expect the refusal"
        )
    })
}
