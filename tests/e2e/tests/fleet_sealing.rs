//! Secrets sealed to the clusters that receive them (secure mode, PROTOCOL
//! §4.8), against a real nats-server in operator mode from `fleet init` and
//! agents in the secure mode with the keys `fleetbus join` mints. The
//! attacker is the broker's admin: with `admin.creds` it reads every message
//! of the objects stream raw, and the synced values appear nowhere, neither
//! plain, nor base64, nor inside the decoded zstd/MessagePack. The sink the
//! rule places the objects on applies them; a member it does not place them
//! on counts `not_a_recipient` and has nothing, until it is relabelled into
//! the rule's selector: then it is sealed to, and applies them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;

use common::fleet::*;
use common::rules::{stream, RuleBuilder};
use common::sync::*;
use common::*;
use fleetbus_schemas::envelope::Envelope;
use fleetbus_testsupport::wait_for;

const SECRET_VALUE: &str = "s3cret-value-4242";
const CONFIG_VALUE: &str = "config-value-7777";

/// Secrets and (sealed by the rule) ConfigMaps of `shared`, placed on the
/// clusters labelled `env=prod`.
fn rules() -> String {
    let prod = [("env", "prod")];
    stream(&[
        secrets_rule("prod-secrets", &["shared"]).sinks(&prod),
        RuleBuilder::new("prod-config")
            .sinks(&prod)
            .spec("seal", true.into())
            .matching(serde_json::json!({
                "namespaces": ["shared"],
                "labels": [{"matchLabels": {"sealed": "yes"}}],
            })),
    ])
}

fn config_maps() -> kube::core::ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

/// Every message of the objects stream, raw, as the admin reads them: the
/// payload bytes, and what decoding them shows (the envelope with its object
/// or sealed header, as JSON text).
async fn read_stream_raw(admin: &async_nats::jetstream::Context) -> Vec<(String, Vec<u8>, String)> {
    let mut stream = admin.get_stream("FLEETBUS_OBJECTS").await.unwrap();
    let info = stream.info().await.unwrap().state.clone();
    let mut out = Vec::new();
    for seq in info.first_sequence..=info.last_sequence {
        let Ok(msg) = stream.get_raw_message(seq).await else {
            continue;
        };
        let decoded = match Envelope::decode(&msg.payload) {
            Ok(env) => format!(
                "{:?} {}",
                env,
                serde_json::to_string(&env.object).unwrap_or_default()
            ),
            Err(e) => format!("undecodable: {e}"),
        };
        out.push((msg.subject.to_string(), msg.payload.to_vec(), decoded));
    }
    out
}

/// Waits until `m` has counted at least `n` messages rejected for `reason`.
async fn wait_rejected(m: &Member, reason: &str, n: f64) {
    wait_for(
        &format!("{} counts {reason}", m.name),
        Duration::from_secs(20),
        || async {
            let seen = sync_rejected(m, reason);
            if seen >= n {
                Ok(())
            } else {
                Err(format!("{reason} = {seen}"))
            }
        },
    )
    .await;
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_are_sealed_to_the_members_the_rule_places_them_on() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = fleet_dir(tmp.path(), &["c1", "c2", "c3"]);
    let nats = operator_server(&dir);
    let mut members = Vec::new();
    for name in ["c1", "c2", "c3"] {
        members.push(Member::start_cmd(&nats, name, secure_agent(&dir, name)).await);
    }
    let [c1, c2, c3] = &members[..] else {
        unreachable!()
    };
    wait_mesh(&[c1, c2, c3], &["c1", "c2", "c3"]).await;
    kubectl(c2, &["label", "clusters.fleetbus.io", "c2", "env=prod"]);
    kubectl(c3, &["label", "clusters.fleetbus.io", "c3", "env=dev"]);
    for m in [c1, c2, c3] {
        create_ns(m, "shared").await;
    }
    apply_yaml(c1, &rules());
    create_secret(c1, "shared", "db", &[("password", SECRET_VALUE)]).await;
    kubectl(
        c1,
        &[
            "create",
            "configmap",
            "cfg",
            "-n",
            "shared",
            &format!("--from-literal=key={CONFIG_VALUE}"),
        ],
    );
    kubectl(
        c1,
        &["label", "configmap", "cfg", "-n", "shared", "sealed=yes"],
    );

    // c2 is placed: it opens and applies both.
    let data = secret_data(&[("password", SECRET_VALUE)]);
    wait_copy(
        c2,
        &secrets(),
        Some("shared"),
        "db",
        "c1",
        "prod-secrets",
        data_is(data.clone()),
    )
    .await;
    let cfg = serde_json::json!({"key": CONFIG_VALUE});
    wait_copy(
        c2,
        &config_maps(),
        Some("shared"),
        "cfg",
        "c1",
        "prod-config",
        data_is(cfg.clone()),
    )
    .await;

    // The broker's admin reads everything on the objects stream: the values
    // are nowhere, raw or decoded, and both objects are sealed.
    let admin = connect(&nats, dir.join("admin.creds")).await;
    let messages = read_stream_raw(&admin).await;
    for (subject, payload, decoded) in &messages {
        for needle in [
            SECRET_VALUE,
            CONFIG_VALUE,
            &b64(SECRET_VALUE),
            &b64(CONFIG_VALUE),
        ] {
            assert!(
                !contains(payload, needle),
                "{needle} in the raw bytes of {subject}"
            );
            assert!(
                !decoded.contains(needle),
                "{needle} in the decoded {subject}: {decoded}"
            );
        }
    }
    for subject in [
        "fleetbus.obj.c1.core.v1.Secret.shared.db",
        "fleetbus.obj.c1.core.v1.ConfigMap.shared.cfg",
    ] {
        let last = messages
            .iter()
            .rev()
            .find(|(s, ..)| s == subject)
            .unwrap_or_else(|| panic!("no message on {subject}"));
        let env = Envelope::decode(&last.1).unwrap();
        assert!(env.is_sealed(), "{subject} is not sealed: {}", last.2);
        assert_eq!(env.object, None);
        let to: Vec<&str> = env.sealed_to().collect();
        assert_eq!(to, ["c1", "c2"], "{subject}");
    }

    // c3 is not placed: not a recipient, counted, nothing applied.
    wait_rejected(c3, "not_a_recipient", 2.0).await;
    assert_absent(c3, &secrets(), Some("shared"), "db").await;
    assert_absent(c3, &config_maps(), Some("shared"), "cfg").await;
    assert_eq!(sync_rejected(c2, "not_a_recipient"), 0.0);
    assert_eq!(sync_rejected(c2, "seal_corrupt"), 0.0);

    // The admin (who may write c1's subtree) moves the sealed Secret to
    // another name of c1's, and publishes a sealed header of garbage: c2
    // drops both before opening them (c1's signature covers the subject and
    // the ciphertext's hash; without signatures the sealing's own binding
    // refuses them, schemas::seal's tests), counts them, applies nothing and
    // keeps its copy.
    let sealed_db = messages
        .iter()
        .rev()
        .find(|(s, ..)| s == "fleetbus.obj.c1.core.v1.Secret.shared.db")
        .map(|m| m.1.clone())
        .unwrap();
    let mut garbage = Envelope::decode(&sealed_db).unwrap();
    if let Some(h) = garbage.encryption.as_mut() {
        h.ciphertext = "bm90IGEgY2lwaGVydGV4dA==".into();
        h.recipients.iter_mut().for_each(|r| r.key = "AAAA".into());
    }
    garbage.content_hash = fleetbus_schemas::envelope::sealed::sealed_hash(b"not a ciphertext");
    for (name, payload) in [("moved", sealed_db), ("garbage", garbage.encode().unwrap())] {
        admin
            .publish(
                format!("fleetbus.obj.c1.core.v1.Secret.shared.{name}"),
                payload.into(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }
    wait_for(
        "c2 drops both as bad_signature",
        Duration::from_secs(20),
        || async {
            match common::sync::rejected_messages(c2, "bad_signature") {
                n if n >= 2.0 => Ok(()),
                n => Err(format!("bad_signature = {n}")),
            }
        },
    )
    .await;
    assert_absent(c2, &secrets(), Some("shared"), "moved").await;
    assert_absent(c2, &secrets(), Some("shared"), "garbage").await;
    let copy = get_dynamic(c2, &secrets(), Some("shared"), "db")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(common::sync::data(&copy), data);

    // Relabelled into the selector, c3 is sealed to and gets both.
    let into_prod = "label --overwrite clusters.fleetbus.io c3 env=prod";
    kubectl(c3, &into_prod.split(' ').collect::<Vec<_>>());
    wait_copy(
        c3,
        &secrets(),
        Some("shared"),
        "db",
        "c1",
        "prod-secrets",
        data_is(data),
    )
    .await;
    wait_copy(
        c3,
        &config_maps(),
        Some("shared"),
        "cfg",
        "c1",
        "prod-config",
        data_is(cfg),
    )
    .await;
    let messages = read_stream_raw(&admin).await;
    let last = messages
        .iter()
        .rev()
        .find(|(s, ..)| s == "fleetbus.obj.c1.core.v1.Secret.shared.db")
        .unwrap();
    let env = Envelope::decode(&last.1).unwrap();
    assert_eq!(env.sealed_to().collect::<Vec<_>>(), ["c1", "c2", "c3"]);
    assert!(!contains(&last.1, SECRET_VALUE));
}
