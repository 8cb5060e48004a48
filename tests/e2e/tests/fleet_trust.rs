//! `fleetbus fleet init` and `fleetbus join` against a real nats-server in
//! operator mode configured from `fleet init`'s include: agents with the
//! creds `join` mints form a fleet and sync; a plain NATS client holding
//! c1's creds (the attacker: a compromised member) is refused by the server
//! whatever it tries on c2's subtree, registry key, consumers and streams,
//! and c2's data is read back untouched; clients without creds, or with
//! another fleet's, cannot connect. Then the CLI's answers to garbage.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use async_nats::jetstream;
use common::fleet::*;
use common::sync::*;
use common::*;
use futures::StreamExt;

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
    kubectl(
        &c2,
        &["label", "secret", "db", "-n", "shared", "after=attack"],
    );
    wait_obj(
        &c1,
        &secrets(),
        Some("shared"),
        "db",
        "labelled after the attack",
        |o| match o.metadata.labels.as_ref().and_then(|l| l.get("after")) {
            Some(v) if v == "attack" => Ok(()),
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
