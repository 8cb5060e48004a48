//! `fleetbus fleet init` and `fleetbus join` against a real nats-server in
//! operator mode configured from `fleet init`'s include: agents with the
//! creds `join` mints form a fleet and sync; a plain NATS client holding
//! c1's creds (the attacker: a compromised member) is refused by the server
//! whatever it tries on c2's subtree, registry key, consumers and streams,
//! and c2's data is read back untouched; clients without creds, or with
//! another fleet's, cannot connect. Then the CLI's answers to garbage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use async_nats::jetstream;
use common::sync::*;
use common::*;
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::trust::{SignedCertificate, SigningKey};
use fleetbus_testsupport::{cargo_bin, NatsServer};
use futures::StreamExt;

/// Runs `fleetbus <args>` (no bus needed); returns (exit code, stdout, stderr).
fn cli(args: &[&str]) -> (i32, String, String) {
    let out = std::process::Command::new(cargo_bin("fleetbus"))
        .args(args)
        .env_remove("FLEETBUS_FLEET_DIR")
        .env_remove("FLEETBUS_SUBJECT_PREFIX")
        .output()
        .expect("run fleetbus");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `fleetbus fleet init --dir <tmp>/fleet` and `join` of each of `names`;
/// returns the fleet dir.
fn fleet_dir(tmp: &Path, names: &[&str]) -> PathBuf {
    let dir = tmp.join("fleet");
    let d = dir.to_str().unwrap();
    let (code, out, err) = cli(&["fleet", "init", "--dir", d]);
    assert_eq!(code, 0, "{out}{err}");
    for n in names {
        let (code, out, err) = cli(&["join", n, "--dir", d]);
        assert_eq!(code, 0, "{err}");
        assert!(out.starts_with("-----BEGIN NATS USER JWT-----"), "{out}");
    }
    dir
}

fn creds(dir: &Path, name: &str) -> String {
    dir.join("clusters")
        .join(name)
        .join("nats.creds")
        .display()
        .to_string()
}

/// A nats-server in operator mode from `fleet init`'s include (inlined: a
/// relative include would be resolved against the test server's own dir).
fn operator_server(dir: &Path) -> NatsServer {
    let include = std::fs::read_to_string(dir.join("nats-operator.conf")).unwrap();
    NatsServer::start_with_config(&include).unwrap()
}

async fn connect(nats: &NatsServer, creds: impl AsRef<Path>) -> jetstream::Context {
    let client = async_nats::ConnectOptions::with_credentials_file(creds.as_ref())
        .await
        .unwrap()
        .connect(nats.url())
        .await
        .unwrap();
    let mut js = jetstream::new(client);
    js.set_timeout(Duration::from_secs(2));
    js
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_members_sync_and_a_member_cannot_touch_anothers_data() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1", "c2"]);
    let nats = operator_server(&dir);
    let (c1_creds, c2_creds) = (creds(&dir, "c1"), creds(&dir, "c2"));
    let c1 = Member::start(&nats, "c1", "c1", &["--nats-creds", &c1_creds]).await;
    let c2 = Member::start(&nats, "c2", "c2", &["--nats-creds", &c2_creds]).await;
    wait_mesh(&[&c1, &c2], &["c1", "c2"]).await;
    // With their creds the agents sync: c2's Secret reaches c1.
    for m in [&c1, &c2] {
        create_ns(m, "shared").await;
    }
    apply_yaml(&c2, SHARED_SECRETS_RULE);
    create_secret(&c2, "shared", "db", &[("password", "s3cret")]).await;
    let data = secret_data(&[("password", "s3cret")]);
    wait_copy(
        &c1,
        &secrets(),
        Some("shared"),
        "db",
        "c2",
        "shared-secrets",
        data_is(data.clone()),
    )
    .await;

    // What the admin sees of c2 before the attack.
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let objects = admin.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    let c2_subject = "fleetbus.obj.c2.core.v1.Secret.shared.db";
    let c2_msg = objects
        .get_last_raw_message_by_subject(c2_subject)
        .await
        .unwrap();
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    let c2_key = registry_keys(&registry)
        .await
        .into_iter()
        .find(|k| k.starts_with("cluster.c2."))
        .expect("c2's record");
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
    // The fleet still syncs: a change on c2 reaches c1.
    change_arrives_after_attack(&c2, &c1, |_| Ok(())).await;
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

/// The agent flags of the secure mode for `name`, from `fleet_dir`.
fn secure_flags(dir: &Path, name: &str) -> Vec<String> {
    let c = dir.join("clusters").join(name);
    let p = |p: PathBuf| p.display().to_string();
    vec![
        "--nats-creds".into(),
        creds(dir, name),
        "--fleet-root".into(),
        p(dir.join("root.pub")),
        "--cluster-key".into(),
        p(c.join("cluster.key")),
        "--cluster-cert".into(),
        p(c.join("cluster.cert")),
    ]
}

/// `name`'s certificate as `join` wrote it.
fn cert_of(dir: &Path, name: &str) -> SignedCertificate {
    let text = std::fs::read_to_string(dir.join("clusters").join(name).join("cluster.cert"));
    SignedCertificate::decode(&text.unwrap()).unwrap()
}

/// `fleetbus_rejected_messages_total{reason}` of `m`.
fn rejected_series(reason: &str) -> String {
    format!("fleetbus_rejected_messages_total{{reason=\"{reason}\"}}")
}

/// Publishes `env` on `subject` as an attacker does: a fresh `Nats-Msg-Id`,
/// so the server's duplicate window does not drop it.
async fn publish_raw(js: &jetstream::Context, subject: &str, payload: Vec<u8>) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut headers = async_nats::HeaderMap::new();
    headers.insert("Nats-Msg-Id", format!("forged-{n}").as_str());
    js.publish_with_headers(subject.to_owned(), headers, payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// Waits until the last value of `subject` is `origin`'s own again: signed
/// by the key of `cert`, with `password` (base64) in its object.
async fn wait_republished(
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
    let dir = fleet_dir(tmp.path(), &["c1", "c2"]);
    let nats = operator_server(&dir);
    let flags = |n: &str| secure_flags(&dir, n);
    let (f1, f2) = (flags("c1"), flags("c2"));
    fn refs(f: &[String]) -> Vec<&str> {
        f.iter().map(String::as_str).collect()
    }
    let c1 = Member::start(&nats, "c1", "c1", &refs(&f1)).await;
    let c2 = Member::start(&nats, "c2", "c2", &refs(&f2)).await;
    wait_mesh(&[&c1, &c2], &["c1", "c2"]).await;
    for m in [&c1, &c2] {
        create_ns(m, "shared").await;
    }
    apply_yaml(&c2, SHARED_SECRETS_RULE);
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
    wait_republished(&objects, subject, &c2_cert, "v1").await;
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
    wait_republished(&objects, subject, &c2_cert, "v2").await;
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
        let obj = e.object.as_mut().unwrap();
        obj["data"]["password"] = b64("pwned").into();
        obj["metadata"]["resourceVersion"] = "99999999".into();
        e.resource_version = "99999999".into();
        e.content_hash = fleetbus_schemas::envelope::content_hash(obj);
        e.time = chrono::Utc::now();
        e
    };
    // (a) signed by a key the root never certified, under c2's key id.
    let mut a = pwned(&v2);
    a.sign(
        &key,
        &SigningKey::from_bytes(&[42; 32]),
        &c2_cert.cert.serial_hex(),
    );
    // (b) c2's valid signature over an object changed afterwards.
    let mut b = v2.clone();
    b.object.as_mut().unwrap()["data"]["password"] = b64("pwned").into();
    // (c) c2's own older version, validly signed, replayed.
    let c = v1.clone();
    // (d) unsigned.
    let mut d = pwned(&v2);
    d.signature = None;
    for (env, reason) in [
        (a, "bad_signature"),
        (b, "content_hash"),
        (c, "replay"),
        (d, "unsigned"),
    ] {
        let series = rejected_series(reason);
        let before = c1.metric(&series).unwrap_or(0.0);
        publish_raw(&admin, subject, env.encode().unwrap()).await;
        c1.wait_metric_at_least(&series, before + 1.0).await;
        wait_republished(&objects, subject, &c2_cert, "v2").await;
    }

    // (e) c2's record with a forged certificate (another root's), with
    // c1's certificate, and with garbage: dropped and counted.
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    let c2_key = registry_keys(&registry)
        .await
        .into_iter()
        .find(|k| k.starts_with("cluster.c2."))
        .expect("c2's record");
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
    let run = |name: &str, flags: &[String]| {
        let out = std::process::Command::new(cargo_bin("fleetbus-agent"))
            .args(["--cluster-name", name])
            .args(flags)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // c2's files for c1.
    let (code, err) = run("c1", &secure_flags(&dir, "c2"));
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--cluster-cert") && err.contains("names cluster \"c2\""),
        "{err}"
    );
    // Another fleet's root.
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let other = fleet_dir(&other, &[]);
    let mut flags = secure_flags(&dir, "c1");
    flags[3] = other.join("root.pub").display().to_string();
    let (code, err) = run("c1", &flags);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("not signed by the fleet root"), "{err}");
    // Half the flags.
    let (code, err) = run("c1", &secure_flags(&dir, "c1")[..4]);
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
}
