//! Every message signed (the secure mode): status reports are signed by the sink
//! that publishes them and the origin believes only those; command
//! requests that change state (label, correct) must be signed by the fleet
//! root, and replies are signed by the answering cluster. The attacker is a
//! plain NATS client with the admin's creds (a broker that lets anyone
//! write anywhere) holding a member's keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::path::Path;

use common::fleet::*;
use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_schemas::subject::{Prefix, StatusKey};
use fleetbus_schemas::trust::{sign_json, sign_request, ClusterKeys, SignedCertificate};
use fleetbus_testsupport::{wait_for, NatsServer};
use serde_json::{json, Value};

/// Namespace `apps` on both, the rule `cfgs` (ConfigMaps of `apps`, with
/// `spec.<key>` set to `value`) on c1, and the ConfigMap `apps/cfg`.
async fn cfgs_rule(c1: &Member, c2: &Member, key: &str, value: Value) {
    for m in [c1, c2] {
        create_ns(m, "apps").await;
    }
    let rule = RuleBuilder::new("cfgs")
        .namespaces(&["apps"])
        .spec(key, value);
    apply_yaml(c1, &rule.yaml());
    apply_yaml(
        c1,
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg, namespace: apps}\ndata: {k: v}\n",
    );
}

/// [`secure_pair`] with the rule `cfgs` in Report mode and c1's `apps/cfg`
/// copied to c2: a copy whose edits c2 reports as drift.
async fn reporting_pair(tmp: &Path) -> (std::path::PathBuf, NatsServer, Member, Member) {
    let (dir, nats, c1, c2) = secure_pair(tmp, &[]).await;
    cfgs_rule(&c1, &c2, "drift", json!({"mode": "Report"})).await;
    let cms = resource("", "v1", "ConfigMap", "configmaps");
    wait_copy(
        &c2,
        &cms,
        Some("apps"),
        "cfg",
        "c1",
        "cfgs",
        data_is(json!({"k": "v"})),
    )
    .await;
    (dir, nats, c1, c2)
}

/// Edits c2's copy of `apps/cfg` (drift, reported: the rule is in Report mode).
fn edit_cfg(c2: &Member) {
    kubectl(
        c2,
        &[
            "-n",
            "apps",
            "patch",
            "configmap",
            "cfg",
            "--type=merge",
            "-p",
            r#"{"data":{"k":"edited"}}"#,
        ],
    );
}

/// c2's drift subject of `apps/cfg`.
fn c2_cfg_drift_subject() -> String {
    fleetbus_schemas::subject::DriftKey {
        cluster: "c2".into(),
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: "cfg".into(),
    }
    .to_subject(&Prefix::default())
}

/// Publishes on c2's drift subject of `apps/cfg` `event("forged")` unsigned
/// and `event("posing")` signed by c1 (a member speaking for another).
async fn publish_forgeries(
    admin: &async_nats::jetstream::Context,
    dir: &Path,
    event: impl Fn(&str) -> Vec<u8>,
) {
    let subject = c2_cfg_drift_subject();
    let (c1_keys, c1_serial) = keys_of(dir, "c1");
    let posing = sign_json(&event("posing"), c1_keys.signing(), &c1_serial).unwrap();
    for payload in [event("forged"), posing] {
        let ack = admin
            .publish(subject.clone(), payload.into())
            .await
            .unwrap();
        ack.await.unwrap();
    }
}

/// Publishes on c2's drift subject of `apps/cfg` `event("masked")` signed by
/// c2 but naming c1 as its cluster: c2 speaking as c1.
async fn publish_masked(
    admin: &async_nats::jetstream::Context,
    dir: &Path,
    event: impl Fn(&str) -> Vec<u8>,
) {
    let mut masked: Value = serde_json::from_slice(&event("masked")).unwrap();
    masked["cluster"] = json!("c1");
    let (c2_keys, c2_serial) = keys_of(dir, "c2");
    let signed = serde_json::to_vec(&masked).unwrap();
    let signed = sign_json(&signed, c2_keys.signing(), &c2_serial).unwrap();
    let ack = admin
        .publish(c2_cfg_drift_subject(), signed.into())
        .await
        .unwrap();
    ack.await.unwrap();
}

/// `name`'s keys and certificate serial from the fleet dir.
fn keys_of(dir: &Path, name: &str) -> (ClusterKeys, String) {
    let c = dir.join("clusters").join(name);
    let keys = ClusterKeys::decode(&std::fs::read_to_string(c.join("cluster.key")).unwrap());
    let cert = SignedCertificate::decode(&std::fs::read_to_string(c.join("cluster.cert")).unwrap());
    (keys.unwrap(), cert.unwrap().cert.serial_hex())
}

/// c2's ReportedState on c1 of ConfigMap `apps/cfg`, as its `status`.
async fn reported_by_c2(c1: &Member) -> Result<Value, String> {
    let list = dynamic(
        c1,
        &resource("fleetbus.io", "v1alpha1", "ReportedState", "reportedstates"),
        Some("apps"),
    )
    .list(&Default::default())
    .await
    .map_err(|e| e.to_string())?;
    list.items
        .into_iter()
        .find(|o| o.data["spec"]["cluster"] == "c2" && o.data["spec"]["objectRef"]["name"] == "cfg")
        .and_then(|o| o.data.get("status").cloned())
        .ok_or_else(|| "no ReportedState of c2".to_owned())
}

/// A report forged over c2's, signed by c1's certified key (a member
/// speaking for another), unsigned, or c2's signature over altered content:
/// each dropped on c1 and counted; c1's ReportedState of c2 never shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_status_report_does_not_change_the_origins_reported_state() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, c1, c2) = secure_pair(tmp.path(), &[]).await;
    cfgs_rule(&c1, &c2, "statusReturn", json!("PerCluster")).await;
    wait_for("c1 holds c2's ReportedState of cfg", SYNC, || {
        reported_by_c2(&c1)
    })
    .await;

    let admin = connect(&nats, dir.join("admin.creds")).await;
    let stream = admin.get_stream("FLEETBUS_STATUS").await.unwrap();
    let subject = StatusKey {
        cluster: "c2".into(),
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: "cfg".into(),
    }
    .to_subject(&Prefix::default());
    let genuine = stream
        .get_last_raw_message_by_subject(&subject)
        .await
        .unwrap();
    let genuine: Value = serde_json::from_slice(&genuine.payload).unwrap();
    let (c2_keys, c2_serial) = keys_of(&dir, "c2");
    // c2 signed it, with the key its certificate names.
    fleetbus_schemas::trust::verify_json(&genuine, &c2_keys.signing().verifying_key()).unwrap();
    assert_eq!(genuine["signature"]["keyId"], c2_serial.as_str());

    let mut forged = genuine.clone();
    forged.as_object_mut().unwrap().remove("signature");
    forged["status"] = json!({"forged": "yes"});
    forged["observedAt"] =
        json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    let unsigned = serde_json::to_vec(&forged).unwrap();
    let (c1_keys, c1_serial) = keys_of(&dir, "c1");
    let by_c1 = sign_json(&unsigned, c1_keys.signing(), &c1_serial).unwrap();
    let mut altered = genuine.clone();
    altered["status"] = json!({"forged": "yes"});
    for (payload, reason) in [
        (unsigned, "unsigned"),
        (by_c1, "signer_mismatch"),
        (serde_json::to_vec(&altered).unwrap(), "bad_signature"),
    ] {
        let series = rejected_series(reason);
        let before = c1.metric(&series).unwrap_or(0.0);
        publish_until_counted(&admin, &subject, &payload, &c1, &series, before).await;
        let state = reported_by_c2(&c1).await.unwrap();
        assert!(!state.to_string().contains("forged"), "{reason}: {state}");
    }
    // c2's own next report still arrives (a change of its copy's labels
    // does not change the report; a change of the source does).
    kubectl(
        &c1,
        &["label", "configmap", "cfg", "-n", "apps", "after=attack"],
    );
    wait_for("c2's copy updated", SYNC, || async {
        let copy = dynamic(
            &c2,
            &resource("", "v1", "ConfigMap", "configmaps"),
            Some("apps"),
        )
        .get("cfg")
        .await
        .map_err(|e| e.to_string())?;
        let labels = copy.metadata.labels.unwrap_or_default();
        (labels.get("after").map(String::as_str) == Some("attack"))
            .then_some(())
            .ok_or_else(|| format!("{labels:?}"))
    })
    .await;
    let state = reported_by_c2(&c1).await.unwrap();
    assert!(!state.to_string().contains("forged"), "{state}");
}

/// The labels of `m`'s own Cluster object.
async fn own_labels(m: &Member) -> std::collections::BTreeMap<String, String> {
    let c = m.clusters().get(&m.name).await.unwrap();
    c.metadata.labels.unwrap_or_default()
}

/// `clusters label` and `drift correct` without the root key (an admin's
/// creds alone) are refused by a secure agent and say why; with `--dir`
/// naming the fleet dir (its root.key) they work. A request signed by a
/// member's key, or by the root for another cluster, is refused too; the
/// reply is signed by the answering cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_that_change_state_must_be_signed_by_the_fleet_root() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, c1, _c2) = secure_pair(tmp.path(), &[]).await;
    let d = dir.to_str().unwrap();
    let unsigned = rejected_series("unsigned");

    let (code, out, err) = admin_cli(&nats, &dir, &["clusters", "label", "c1", "tier=gold"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("not signed by the fleet root"), "{err}");
    let (code, out, err) = admin_cli(&nats, &dir, &["drift", "correct", "--cluster", "c1"]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("not signed by the fleet root"), "{err}");
    c1.wait_metric_at_least(&unsigned, 2.0).await;
    assert!(!own_labels(&c1).await.contains_key("tier"));

    let (code, out, err) = admin_cli(
        &nats,
        &dir,
        &["clusters", "label", "c1", "tier=gold", "--dir", d],
    );
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = admin_cli(
        &nats,
        &dir,
        &["drift", "correct", "--cluster", "c1", "--dir", d],
    );
    assert_eq!(code, 0, "{out}{err}");
    wait_for("c1 labelled tier=gold", SYNC, || async {
        let labels = own_labels(&c1).await;
        (labels.get("tier").map(String::as_str) == Some("gold"))
            .then_some(())
            .ok_or_else(|| format!("{labels:?}"))
    })
    .await;

    // A plain client: a request signed by c2's certified key, and one the
    // root signed for c2, sent to c1.
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let client = admin.client();
    let request =
        br#"{"schema":"fleetbus.io/label-request/v1","set":{"tier":"pwned"},"overwrite":true}"#;
    let to_c1 = "fleetbus.cmd.c1.label";
    let (c2_keys, _) = keys_of(&dir, "c2");
    let root = std::fs::read_to_string(dir.join("root.key")).unwrap();
    let root = fleetbus_schemas::trust::parse_root_key(&root).unwrap();
    let now = chrono::Utc::now();
    let (c1_keys, c1_serial) = keys_of(&dir, "c1");
    for (payload, says) in [
        (
            sign_request(request, to_c1, c2_keys.signing(), now).unwrap(),
            "not the fleet root's",
        ),
        (
            sign_request(request, "fleetbus.cmd.c2.label", &root, now).unwrap(),
            "signed for",
        ),
        (
            sign_request(request, to_c1, &root, now - chrono::Duration::hours(1)).unwrap(),
            "stale or replayed",
        ),
    ] {
        let reply = client
            .request(to_c1.to_owned(), payload.into())
            .await
            .unwrap();
        let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
        let error = reply["error"].as_str().unwrap_or_default();
        assert!(error.contains(says), "{says}: {reply}");
        let sig = fleetbus_schemas::trust::verify_json(&reply, &c1_keys.signing().verifying_key());
        assert_eq!(sig.unwrap().key_id, c1_serial, "the reply is c1's");
    }
    // The verbs added beside them: rollout (it changes what the fleet runs)
    // and preview (it shows what a cluster holds, at the cost of dry runs)
    // take the fleet root's signed word too, and their replies are c1's.
    for (verb, request) in [
        (
            "rollout",
            &br#"{"schema":"fleetbus.io/rollout-request/v1","rule":"web","action":"Pause"}"#[..],
        ),
        (
            "preview",
            br#"{"schema":"fleetbus.io/preview-request/v1","ruleName":"web"}"#,
        ),
    ] {
        let to = format!("fleetbus.cmd.c1.{verb}");
        let signed = sign_request(request, &to, &root, chrono::Utc::now()).unwrap();
        for (payload, refused) in [(request.to_vec(), true), (signed, false)] {
            let reply = client.request(to.clone(), payload.into()).await.unwrap();
            let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
            let error = reply["error"].as_str().unwrap_or_default();
            assert_eq!(
                error.contains("not signed by the fleet root"),
                refused,
                "{verb}: {reply}"
            );
            let sig =
                fleetbus_schemas::trust::verify_json(&reply, &c1_keys.signing().verifying_key());
            assert_eq!(sig.unwrap().key_id, c1_serial, "{verb}: the reply is c1's");
        }
    }
    // Garbage on the command subjects: refused with a reason, never a panic.
    for (subject, payload) in [
        (to_c1, &b"garbage"[..]),
        (to_c1, b"{}"),
        (to_c1, b"null"),
        ("fleetbus.cmd.c1.correct", b"\xff\xfe"),
        (
            "fleetbus.cmd.c1.correct",
            br#"{"schema":"fleetbus.io/correct-request/v1","signature":{"algorithm":"ed25519","keyId":"root","value":"AAAA"}}"#,
        ),
    ] {
        let reply = client
            .request(subject.to_owned(), payload.to_vec().into())
            .await
            .unwrap();
        let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
        let error = reply["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("refused:"), "{payload:?}: {reply}");
    }
    assert_eq!(
        own_labels(&c1).await.get("tier").map(String::as_str),
        Some("gold")
    );
}

/// A root-signed command seen on the bus and sent again while it is still
/// fresh is refused: the operator labels c1 `tier=gold` (a request captured
/// here as whoever could read the subject would), then `tier=silver`; the
/// captured request replayed is answered "taken before", counted as a
/// replay, and c1 stays silver. A new request signed the same way is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_command_sent_again_while_fresh_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, c1, _c2) = secure_pair(tmp.path(), &[]).await;
    let d = dir.to_str().unwrap();
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let client = admin.client();
    let root = std::fs::read_to_string(dir.join("root.key")).unwrap();
    let root = fleetbus_schemas::trust::parse_root_key(&root).unwrap();
    let to_c1 = "fleetbus.cmd.c1.label";
    let label = |tier: &str| {
        let request = json!({"schema": "fleetbus.io/label-request/v1",
                             "set": {"tier": tier}, "overwrite": true});
        let bytes = serde_json::to_vec(&request).unwrap();
        sign_request(&bytes, to_c1, &root, chrono::Utc::now()).unwrap()
    };
    let send = |payload: Vec<u8>| {
        let client = client.clone();
        async move {
            let reply = client.request(to_c1, payload.into()).await.unwrap();
            serde_json::from_slice::<Value>(&reply.payload).unwrap()
        }
    };
    let wait_tier = |tier: &'static str| {
        let c1 = &c1;
        async move {
            wait_for(&format!("c1 labelled tier={tier}"), SYNC, || async {
                let labels = own_labels(c1).await;
                (labels.get("tier").map(String::as_str) == Some(tier))
                    .then_some(())
                    .ok_or_else(|| format!("{labels:?}"))
            })
            .await;
        }
    };
    let captured = label("gold");
    let reply = send(captured.clone()).await;
    assert!(reply.get("error").is_none_or(Value::is_null), "{reply}");
    wait_tier("gold").await;
    let (code, out, err) = admin_cli(
        &nats,
        &dir,
        &[
            "clusters",
            "label",
            "c1",
            "tier=silver",
            "--overwrite",
            "--dir",
            d,
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    wait_tier("silver").await;

    let replays = rejected_series("replay");
    let before = c1.metric(&replays).unwrap_or(0.0);
    let reply = send(captured).await;
    let error = reply["error"].as_str().unwrap_or_default();
    assert!(error.contains("taken before (a replay)"), "{reply}");
    c1.wait_metric_at_least(&replays, before + 1.0).await;
    // A new request for the same change is the operator's: taken.
    let reply = send(label("gold")).await;
    assert!(reply.get("error").is_none_or(Value::is_null), "{reply}");
    wait_tier("gold").await;
}

/// `--publish-kubeconfig` in the secure mode: the record in the registry
/// holds the reader kubeconfig sealed to the peers and signed by its
/// cluster; the admin reading the bucket does not see the token, the peer
/// opens it into its kubeconfig Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_published_kubeconfig_is_sealed_to_the_peers() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, c1, _c2) = secure_pair(tmp.path(), &["--publish-kubeconfig"]).await;
    let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> =
        kube::Api::namespaced(c1.client.clone(), NAMESPACE);
    let secret = wait_for("c1 to store c2's kubeconfig", SYNC, || async {
        secrets
            .get("c2-kubeconfig")
            .await
            .map_err(|e| e.to_string())
    })
    .await;
    let kubeconfig = String::from_utf8(secret.data.unwrap()["kubeconfig"].0.clone()).unwrap();
    let doc: Value = fleetbus_schemas::yaml::from_str(&kubeconfig).unwrap();
    let token = doc["users"][0]["user"]["token"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(token.len() > 8, "{kubeconfig}");

    let admin = connect(&nats, dir.join("admin.creds")).await;
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    let key = key_starting(&registry, "kubeconfig.c2.").await;
    let raw = registry.get(&key).await.unwrap().unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(
        !text.contains(&token),
        "the token is readable in the bucket"
    );
    let record: Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(record["kubeconfig"], "");
    assert_eq!(record["sealed"]["algorithm"], "fleetbus-seal-v1");
    let names: Vec<&str> = record["sealed"]["recipients"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["cluster"].as_str())
        .collect();
    assert_eq!(names, ["c1", "c2"]);
    let (c2_keys, c2_serial) = keys_of(&dir, "c2");
    let sig = fleetbus_schemas::trust::verify_json(&record, &c2_keys.signing().verifying_key());
    assert_eq!(sig.unwrap().key_id, c2_serial);

    // Forged over it (the admin may write the key): unsigned, dropped.
    let series = rejected_series("unsigned");
    let before = c1.metric(&series).unwrap_or(0.0);
    let mut forged = record.clone();
    forged.as_object_mut().unwrap().remove("signature");
    forged.as_object_mut().unwrap().remove("sealed");
    forged["kubeconfig"] = "apiVersion: v1\nkind: Config\n".into();
    registry
        .put(&key, serde_json::to_vec(&forged).unwrap().into())
        .await
        .unwrap();
    c1.wait_metric_at_least(&series, before + 1.0).await;
    let kept = secrets.get("c2-kubeconfig").await.unwrap();
    assert_eq!(
        String::from_utf8(kept.data.unwrap()["kubeconfig"].0.clone()).unwrap(),
        kubeconfig
    );
}

/// Beats (PROTOCOL §5.4) are signed: once c2's agent is dead, unsigned beats
/// forged in its name (newer `seq`, whoever may write the beats bucket) are
/// dropped and counted on c1, and c2 turns Disconnected there all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_beats_do_not_keep_a_dead_cluster_alive() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, c1, mut c2) = secure_pair(tmp.path(), &[]).await;
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let beats = admin.get_key_value("fleetbus-beats").await.unwrap();
    let key = key_starting(&beats, "beat.c2.").await;
    let genuine: Value = serde_json::from_slice(&beats.get(&key).await.unwrap().unwrap()).unwrap();
    assert!(genuine.get("signature").is_some(), "{genuine}");
    c2.agent.kill9();
    let forger = tokio::spawn(async move {
        let mut beat = genuine;
        beat.as_object_mut().unwrap().remove("signature");
        for n in 1..200u64 {
            beat["seq"] = json!(beat["seq"].as_u64().unwrap_or(0) + n);
            let _ = beats
                .put(&key, serde_json::to_vec(&beat).unwrap().into())
                .await;
            // The forger's pace (a beat every 300 ms, faster than the real
            // one), not a wait for a condition.
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        }
    });
    c1.wait_metric_at_least(&rejected_series("unsigned"), 1.0)
        .await;
    wait_peer_state(
        &c1,
        "c2",
        fleetbus_schemas::crd::ClusterState::Disconnected,
        CONVERGE,
    )
    .await;
    forger.abort();
}

/// A rollout record in c1's subtree that c1 did not sign (written with the
/// admin's credentials, as a broker operator could) admits nothing: c2
/// refuses it (`unsigned`), and one signed by c2's key (`signer_mismatch`)
/// too. Only c1's signed word decides which version c2 runs of c1's objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollout_records_not_signed_by_their_origin_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, _c1, c2) = secure_pair(tmp.path(), &[]).await;
    let target = "b".repeat(64);
    let mut admitted = serde_json::Map::new();
    admitted.insert(target.clone(), json!(["c2"]));
    let record = json!({
        "schema": "fleetbus.io/rollout/v1", "origin": "c1", "rule": "web",
        "source": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": "web", "uid": "u-1"},
        "revision": 1, "stable": null, "target": target, "phase": "Progressing",
        "admitted": admitted, "admittedAt": {"c2": "2026-11-27T05:00:09.000Z"},
        "failed": {}, "step": 1, "steps": 1, "pausedBy": null, "reason": "", "message": "",
        "updatedAt": "2026-11-27T05:00:09.000Z"
    });
    let bytes = serde_json::to_vec(&record).unwrap();
    let parsed = fleetbus_schemas::rollout::RolloutRecord::decode(&bytes).unwrap();
    let subject = parsed.subject_key().to_subject(&Prefix::default());
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let (c2_keys, c2_serial) = keys_of(&dir, "c2");
    let by_c2 = sign_json(&bytes, c2_keys.signing(), &c2_serial).unwrap();
    for (payload, reason) in [(bytes.clone(), "unsigned"), (by_c2, "signer_mismatch")] {
        let series = rejected_series(reason);
        let before = c2.metric(&series).unwrap_or(0.0);
        publish_until_counted(&admin, &subject, &payload, &c2, &series, before).await;
    }
}

/// `fleetbus clusters ls --dir FLEET` shows what secure agents believe:
/// records a broker operator (the admin's creds) put in the registry, one
/// unsigned for a cluster that does not exist and one in c1's name signed
/// with c2's key, are left out with a warning naming each; without the
/// fleet root (no `--dir`) the view cannot tell and shows them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_ls_with_the_fleet_root_leaves_out_forged_records() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, _c1, _c2) = secure_pair(tmp.path(), &[]).await;
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let registry = admin.get_key_value("fleetbus-registry").await.unwrap();
    let c2_key = key_starting(&registry, "cluster.c2.").await;
    let genuine: Value =
        serde_json::from_slice(&registry.get(&c2_key).await.unwrap().unwrap()).unwrap();
    let mut evil = genuine.clone();
    evil.as_object_mut().unwrap().remove("signature");
    evil["name"] = json!("evil");
    evil["clusterID"] = json!("evil-id");
    registry
        .put(
            "cluster.evil.evil-id",
            serde_json::to_vec(&evil).unwrap().into(),
        )
        .await
        .unwrap();
    let mut posing = genuine;
    posing.as_object_mut().unwrap().remove("signature");
    posing["name"] = json!("c1");
    posing["clusterID"] = json!("posing-id");
    let (c2_keys, c2_serial) = keys_of(&dir, "c2");
    let posing = sign_json(
        &serde_json::to_vec(&posing).unwrap(),
        c2_keys.signing(),
        &c2_serial,
    );
    registry
        .put("cluster.c1.posing-id", posing.unwrap().into())
        .await
        .unwrap();

    let d = dir.to_str().unwrap();
    let (code, out, err) = admin_cli(&nats, &dir, &["clusters", "ls", "--dir", d]);
    assert_eq!(code, 0, "{err}");
    let names: Vec<&str> = out
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(names, ["c1", "c2"], "{out}");
    assert!(!out.contains("Conflict"), "{out}");
    for key in ["cluster.evil.evil-id", "cluster.c1.posing-id"] {
        assert!(
            err.contains(&format!("registry record {key} left out")),
            "{key}: {err}"
        );
    }
    // Without the root the view shows the forgeries: c1 claimed twice.
    let (code, out, err) = admin_cli(&nats, &dir, &["clusters", "ls"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("evil"), "{out}");
}

/// `fleetbus drift ls`, given the fleet root, shows a drift event only when
/// the cluster it is stored under signed it: c2's genuine event (its copy
/// edited, the rule in Report mode) is shown; an unsigned forgery stored
/// under c2, and an event c1 signed stored under c2, are left out and named
/// on stderr; the dashboard's `/api/drift` names them in `unverified`.
/// Without the root the view cannot tell and shows all three. Drift history
/// and rule status (`fleetbus rules`) are checked the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_ls_with_the_fleet_root_shows_only_what_each_cluster_signed() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, _c1, c2) = reporting_pair(tmp.path()).await;
    edit_cfg(&c2);
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let drift = admin.get_key_value("fleetbus-drift").await.unwrap();
    let genuine_key = wait_for("c2's drift of cfg in the bucket", SYNC, || async {
        let keys = registry_keys(&drift).await;
        let found = keys
            .iter()
            .find(|k| k.starts_with("c2.") && k.ends_with(".cfg"));
        found.cloned().ok_or(format!("keys: {keys:?}"))
    })
    .await;
    let genuine: Value =
        serde_json::from_slice(&drift.get(&genuine_key).await.unwrap().unwrap()).unwrap();
    let as_named = |name: &str| {
        let mut v = genuine.clone();
        v.as_object_mut().unwrap().remove("signature");
        v["object"]["name"] = json!(name);
        v
    };
    let unsigned_key = genuine_key.replace(".cfg", ".forged");
    drift
        .put(
            &unsigned_key,
            serde_json::to_vec(&as_named("forged")).unwrap().into(),
        )
        .await
        .unwrap();
    let (c1_keys, c1_serial) = keys_of(&dir, "c1");
    let by_c1 = sign_json(
        &serde_json::to_vec(&as_named("posing")).unwrap(),
        c1_keys.signing(),
        &c1_serial,
    )
    .unwrap();
    let posing_key = genuine_key.replace(".cfg", ".posing");
    drift.put(&posing_key, by_c1.into()).await.unwrap();

    let names = |out: &str| -> Vec<String> {
        let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let mut names: Vec<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["object"]["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    };
    let d = dir.to_str().unwrap();
    let (code, out, err) = admin_cli(&nats, &dir, &["drift", "ls", "-o", "json", "--dir", d]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(names(&out), ["cfg"], "{out}");
    assert!(
        err.contains(&format!(
            "drift event {unsigned_key} left out: it is not signed"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "drift event {posing_key} left out: its signature does not verify with cluster c2's key"
        )),
        "{err}"
    );
    // The dashboard, given the root, shows what `drift ls` shows and names
    // the rest in `unverified`.
    let addr = fleetbus_testsupport::free_addr();
    let creds = dir.join("admin.creds");
    let args = [
        "dashboard",
        "--listen",
        &addr,
        "--dir",
        d,
        "--creds",
        creds.to_str().unwrap(),
    ];
    let dashboard = fleetbus_testsupport::Agent::start_bin(
        &fleetbus_testsupport::cargo_bin("fleetbus"),
        args,
        [("FLEETBUS_NATS_URL", nats.url())],
    )
    .unwrap();
    let url = format!("http://{addr}/api/drift");
    wait_for("the dashboard's drift, checked", SYNC, || async {
        let r = fleetbus_testsupport::http_request("GET", &url, &[], None)
            .map_err(|e| format!("{e}\n{}", dashboard.log()))?;
        let v: Value = serde_json::from_str(&r.body).map_err(|e| format!("{e}: {}", r.body))?;
        if !v["drifted"].is_array() {
            return Err(r.body);
        }
        let shown = names(&v["drifted"].to_string());
        let mut left_out: Vec<&str> = v["unverified"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|u| u["key"].as_str())
            .collect();
        left_out.sort();
        let mut want = vec![posing_key.as_str(), unsigned_key.as_str()];
        want.sort();
        (shown == ["cfg"] && left_out == want)
            .then_some(())
            .ok_or(r.body)
    })
    .await;

    // Without the root the view shows the forgeries.
    let (code, out, err) = admin_cli(&nats, &dir, &["drift", "ls", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(names(&out), ["cfg", "forged", "posing"], "{out}");

    // The history too: events of cfg on c2's subject, one unsigned (rule
    // `forged`), one c1 signed (rule `posing`) and one c2 signed that names
    // c1 (rule `masked`), are left out with the root.
    let of_rule = |rule: &str| {
        let mut v = as_named("cfg");
        v["rule"] = json!(rule);
        serde_json::to_vec(&v).unwrap()
    };
    publish_forgeries(&admin, &dir, &of_rule).await;
    publish_masked(&admin, &dir, &of_rule).await;
    let history_rules = |dir_args: &[&str]| {
        let mut args = vec![
            "drift",
            "history",
            "ConfigMap/apps/cfg",
            "--cluster",
            "c2",
            "-o",
            "json",
        ];
        args.extend_from_slice(dir_args);
        let (code, out, err) = admin_cli(&nats, &dir, &args);
        assert_eq!(code, 0, "{err}");
        let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let rules: std::collections::BTreeSet<String> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["rule"].as_str().unwrap().to_owned())
            .collect();
        (rules, err)
    };
    let (rules, err) = history_rules(&["--dir", d]);
    assert_eq!(rules, ["cfgs".to_owned()].into(), "{err}");
    assert_eq!(err.matches("left out: ").count(), 3, "{err}");
    let (rules, _) = history_rules(&[]);
    let all = ["cfgs", "forged", "masked", "posing"]
        .map(str::to_owned)
        .into();
    assert_eq!(rules, all);

    // Rule status the same way: records of rules `ghost` (unsigned) and
    // `ghost2` (signed by c1) stored under c2's key are skipped with the root.
    let statuses = admin.get_key_value("fleetbus-rulestatus").await.unwrap();
    let c2_status = wait_for("c2's status of cfgs", SYNC, || async {
        let keys = registry_keys(&statuses).await;
        let found = keys
            .iter()
            .find(|k| k.starts_with("status.c2.") && k.ends_with(".cfgs"));
        found.cloned().ok_or(format!("keys: {keys:?}"))
    })
    .await;
    let genuine: Value =
        serde_json::from_slice(&statuses.get(&c2_status).await.unwrap().unwrap()).unwrap();
    let of_rule = |rule: &str| {
        let mut v = genuine.clone();
        v.as_object_mut().unwrap().remove("signature");
        v["rule"] = json!(rule);
        serde_json::to_vec(&v).unwrap()
    };
    let ghost_key = c2_status.replace(".cfgs", ".ghost");
    statuses
        .put(&ghost_key, of_rule("ghost").into())
        .await
        .unwrap();
    let by_c1 = sign_json(&of_rule("ghost2"), c1_keys.signing(), &c1_serial).unwrap();
    statuses
        .put(c2_status.replace(".cfgs", ".ghost2"), by_c1.into())
        .await
        .unwrap();
    let rules = |out: &str| -> (Vec<String>, u64) {
        let v: Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
        let mut names: Vec<String> = v["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        (names, v["unreadableRecords"].as_u64().unwrap())
    };
    let (code, out, err) = admin_cli(&nats, &dir, &["rules", "ls", "-o", "json", "--dir", d]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(rules(&out), (vec!["cfgs".to_owned()], 2), "{out}");
    assert!(
        err.contains(&ghost_key) && err.contains("not signed by its cluster"),
        "{err}"
    );
    let rules_url = format!("http://{addr}/api/rules");
    wait_for("the dashboard's rules, checked", SYNC, || async {
        let r = fleetbus_testsupport::http_request("GET", &rules_url, &[], None)
            .map_err(|e| format!("{e}\n{}", dashboard.log()))?;
        let v: Value = serde_json::from_str(&r.body).map_err(|e| format!("{e}: {}", r.body))?;
        (v["rules"] == json!(["cfgs"]) && v["skipped"] == json!(2))
            .then_some(())
            .ok_or(r.body)
    })
    .await;
    let (code, out, err) = admin_cli(&nats, &dir, &["rules", "ls", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let all = ["cfgs", "ghost", "ghost2"].map(str::to_owned).to_vec();
    assert_eq!(rules(&out), (all, 0), "{out}");
}

/// A `fleetbus notify` process, killed on drop.
struct NotifyBridge(std::process::Child);

impl Drop for NotifyBridge {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `fleetbus notify` on a secure fleet, run as users would: with the
/// credentials `fleet init` made for it and the fleet root from the fleet
/// directory. It sends c2's genuine drift; an unsigned event, one c1 signed,
/// and one c2 signed that names c1 as its cluster, all on c2's subject, are
/// not sent and are named in its log; when c2's agent dies, it says c2 is
/// Disconnected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_sends_only_what_clusters_signed_and_says_when_one_dies() {
    use std::sync::{Arc, Mutex};
    let tmp = tempfile::tempdir().unwrap();
    let (dir, nats, _c1, mut c2) = reporting_pair(tmp.path()).await;

    let got: Arc<Mutex<Vec<Value>>> = Arc::default();
    let store = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
            let store = store.clone();
            async move { store.lock().unwrap().push(body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    let conf = tmp.path().join("notify");
    std::fs::create_dir_all(&conf).unwrap();
    std::fs::write(conf.join("url"), url).unwrap();
    std::fs::write(
        conf.join("targets.yaml"),
        "targets:\n- name: ops\n  format: json\n  urlFile: url\n",
    )
    .unwrap();
    let log = tmp.path().join("notify.log");
    let bridge = std::process::Command::new(fleetbus_testsupport::cargo_bin("fleetbus"))
        .args(["notify", "--nats-url", &nats.url(), "--window", "1s"])
        .args([
            "--fleet-interval",
            "500ms",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .arg("--creds")
        .arg(dir.join("notify.creds"))
        .arg("--dir")
        .arg(&dir)
        .arg("--targets")
        .arg(conf.join("targets.yaml"))
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let _bridge = NotifyBridge(bridge);
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let consumer = || {
        let admin = admin.clone();
        async move {
            let stream = admin
                .get_stream("FLEETBUS_DRIFT")
                .await
                .map_err(|e| e.to_string())?;
            stream
                .consumer_info("fleetbus-notify")
                .await
                .map_err(|e| e.to_string())
        }
    };
    wait_for("the bridge's consumer", CONVERGE, || async {
        consumer().await.map(|_| ())
    })
    .await;

    let said = |pred: Box<dyn Fn(&Value) -> bool + Send>| {
        let got = got.clone();
        async move {
            let seen = got.lock().unwrap().clone();
            seen.iter()
                .any(&pred)
                .then_some(())
                .ok_or(format!("{seen:?}"))
        }
    };
    edit_cfg(&c2);
    wait_for("c2's drift sent", SYNC, || {
        said(Box::new(|v| {
            v["kind"] == "drift" && v["cluster"] == "c2" && v["rule"] == "cfgs"
        }))
    })
    .await;

    // Forgeries on c2's subject: unsigned, and signed by c1.
    let event = |rule: &str| {
        serde_json::to_vec(&json!({
            "schema": "fleetbus.io/drift/v1", "id": rule, "cluster": "c2", "rule": rule, "origin": "c1",
            "object": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": "cfg"},
            "phase": "Fight", "type": "Modified", "detectedAt": "2026-12-03T00:00:00.000Z",
            "action": "Report",
        }))
        .unwrap()
    };
    publish_forgeries(&admin, &dir, &event).await;
    publish_masked(&admin, &dir, &event).await;
    wait_for("the forgeries read and terminated", CONVERGE, || async {
        let info = consumer().await?;
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        (info.num_pending == 0
            && info.num_ack_pending == 0
            && log.matches("not sent: ").count() == 3)
            .then_some(())
            .ok_or(format!(
                "{} pending, {} unacknowledged; log:\n{log}",
                info.num_pending, info.num_ack_pending
            ))
    })
    .await;
    let seen = got.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|v| v["rule"] == "forged" || v["rule"] == "posing"),
        "{seen:?}"
    );

    c2.agent.kill9();
    wait_for("c2 said Disconnected", CONVERGE, || {
        said(Box::new(|v| {
            v["kind"] == "cluster" && v["cluster"] == "c2" && v["phase"] == "Disconnected"
        }))
    })
    .await;
}
