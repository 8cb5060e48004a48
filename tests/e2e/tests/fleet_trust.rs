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
use common::fleet::*;
use common::sync::*;
use common::*;
use fleetbus_schemas::crd::ClusterState;
use fleetbus_testsupport::{wait_for, NatsServer};
use futures::StreamExt;

/// c1 and c2 with the creds `join` minted, and c2's Secret `shared/db`
/// synced to c1 under SHARED_SECRETS_RULE: the agents work with their creds.
async fn syncing_pair(nats: &NatsServer, dir: &Path) -> (Member, Member) {
    let c1 = Member::start(nats, "c1", "c1", &["--nats-creds", &creds(dir, "c1")]).await;
    let c2 = Member::start(nats, "c2", "c2", &["--nats-creds", &creds(dir, "c2")]).await;
    wait_mesh(&[&c1, &c2], &["c1", "c2"]).await;
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
    format!(
        "apiVersion: fleetbus.io/v1alpha1\nkind: ResourceSyncRule\nmetadata:\n  name: {name}\n\
         spec:\n  groupVersionKind: {{group: \"\", version: v1, kind: Secret}}\n  \
         orphanPolicy: {orphan_policy}\n  rules:\n    - match:\n        - namespaces: [{ns}]\n"
    )
}

/// `fleetbus <args> --nats-url <nats> --creds <admin>`: an operator's command.
fn admin_cli(nats: &NatsServer, dir: &Path, args: &[&str]) -> (i32, String, String) {
    let url = nats.url();
    let admin = dir.join("admin.creds");
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--nats-url", &url, "--creds", admin.to_str().unwrap()]);
    cli(&all)
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
    let c1 = Member::start(&nats, "c1", "c1", &["--nats-creds", &creds(&dir, "c1")]).await;
    let c2 = Member::start(
        &nats,
        "c2",
        "c2",
        &["--nats-creds", c2_creds.to_str().unwrap()],
    )
    .await;
    wait_mesh(&[&c1, &c2], &["c1", "c2"]).await;
    for m in [&c1, &c2] {
        create_ns(m, "shared").await;
        create_ns(m, "kept").await;
    }
    apply_yaml(&c2, &secret_rule("shared-delete", "shared", "Delete"));
    apply_yaml(&c2, &secret_rule("kept-orphan", "kept", "Orphan"));
    create_secret(&c2, "shared", "db", &[("password", "s3cret")]).await;
    create_secret(&c2, "kept", "keep", &[("k", "v")]).await;
    for (ns, name, rule) in [
        ("shared", "db", "shared-delete"),
        ("kept", "keep", "kept-orphan"),
    ] {
        wait_copy(&c1, &secrets(), Some(ns), name, "c2", rule, |_| Ok(())).await;
    }

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
        out.contains("had left already") && out.contains("marked c2 Left"),
        "{out}"
    );

    wait_peer_state(&c1, "c2", ClusterState::Left, CONVERGE).await;
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
        members.push(Member::start(&nats, n, n, &["--nats-creds", &creds(&dir, n)]).await);
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
