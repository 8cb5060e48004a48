//! docs/PROTOCOL.md is the spec for non-Rust clients: every example, constant and golden
//! byte listing in it must be what this crate produces.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use fleetbus_schemas::envelope::{content_hash, HEADER_ALLOWANCE, MAX_MSGPACK_DEPTH};
use fleetbus_schemas::jetstream::{Layout, MIN_NATS_SERVER_VERSION};
use fleetbus_schemas::subject::{
    decode_token, encode_group, encode_namespace, encode_token, ObjectFilter, ObjectKey, Prefix,
};
use fleetbus_schemas::well_known;

mod common;

use common::{assert_doc_contains, protocol_doc};

/// The lines of the first fenced block after `heading`.
fn block_after(doc: &str, heading: &str) -> Vec<String> {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("{heading:?} not in doc"));
    let rest = &doc[start..];
    let open = rest.find("```").unwrap();
    let body = &rest[open..];
    let body = &body[body.find('\n').unwrap() + 1..];
    let close = body.find("```").unwrap();
    body[..close].lines().map(str::to_owned).collect()
}

#[test]
fn golden_tombstone_listing_is_complete_and_exact() {
    let lines = block_after(&protocol_doc(), "Golden bytes of a v1 tombstone");
    let hex: String = lines
        .iter()
        .map(|l| l.split('#').next().unwrap())
        .flat_map(|l| l.split_whitespace())
        .collect();
    let golden = std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/golden/envelope_v1_tombstone.hex"),
    )
    .unwrap();
    assert_eq!(hex, golden.trim());
}

#[test]
fn subject_examples_are_what_the_code_writes() {
    let p = Prefix::default();
    let doc = protocol_doc();
    // Every example subject in §2.3 parses and re-encodes to itself.
    let examples = block_after(&doc, "Examples:");
    let mut checked = 0;
    for line in &examples {
        let line = line.trim();
        if line.starts_with("fleetbus.obj.") {
            let key = ObjectKey::parse_subject(&p, line).unwrap();
            assert_eq!(key.to_subject(&p), line);
            checked += 1;
        }
    }
    assert_eq!(checked, 3, "{examples:#?}");
    let cr = ObjectKey::from_api_version(
        "prod.eu-1",
        "rbac.authorization.k8s.io/v1",
        "ClusterRole",
        None,
        "system:controller:foo",
    );
    assert_doc_contains(&cr.to_subject(&p));
    assert_doc_contains(&format!(
        "`{}`",
        ObjectFilter::any()
            .gvk("", "v1", "ConfigMap")
            .to_subject(&p)
    ));
    // The escaping table.
    for (value, token) in [
        ("apps", "apps"),
        ("networking.k8s.io", "=bmV0d29ya2luZy5rOHMuaW8"),
        ("system:controller:foo", "=c3lzdGVtOmNvbnRyb2xsZXI6Zm9v"),
        ("prod.eu-1", "=cHJvZC5ldS0x"),
        (
            "rbac.authorization.k8s.io",
            "=cmJhYy5hdXRob3JpemF0aW9uLms4cy5pbw",
        ),
        ("_", "=Xw"),
    ] {
        assert_eq!(encode_token(value), token);
        assert_eq!(decode_token(token).unwrap(), value);
        assert_doc_contains(&format!("`{token}`"));
    }
    assert_eq!(encode_group("core"), "=Y29yZQ");
    assert_eq!(encode_group(""), "core");
    assert_eq!(encode_namespace(None), "_");
    assert_doc_contains("| group `core` (a real group)    | `=Y29yZQ`");
}

#[test]
fn jetstream_names_and_limits_match_the_layout() {
    let default = Layout::default();
    let names: Vec<_> = default.streams().into_iter().map(|s| s.name).collect();
    assert_eq!(
        names,
        [
            "FLEETBUS_OBJECTS",
            "FLEETBUS_DRIFT",
            "FLEETBUS_STATUS",
            "FLEETBUS_CONFLICTS",
            "FLEETBUS_ROLLOUTS",
            "FLEETBUS_VERSIONS",
            "FLEETBUS_PLACEMENTS",
            "FLEETBUS_SERVICES"
        ]
    );
    for s in default.streams() {
        assert_doc_contains(&format!("| `{}`", s.name));
        assert_doc_contains(&format!("`{}`", s.subjects[0]));
        assert_eq!(s.duplicate_window.as_secs(), 120);
        assert!(s.deny_delete && !s.allow_rollup && !s.deny_purge);
    }
    assert_doc_contains("duplicate window 2 minutes");
    assert_doc_contains(&format!("KV `{}`", default.registry_bucket().bucket));
    let acme = Layout::new(Prefix::new("acme.fleetbus").unwrap(), 3);
    assert_doc_contains(&format!("`{}`", acme.objects_stream().name));
    assert_doc_contains(&format!("`{}`", acme.registry_bucket().bucket));
    assert_doc_contains(&format!("KV `{}`", default.drift_bucket().bucket));
    assert_doc_contains(&format!("`{}`", acme.drift_bucket().bucket));
    assert_doc_contains(&format!("KV `{}`", default.rule_status_bucket().bucket));
    // §5.3: the example key is what the code writes, and the example record decodes.
    let key = fleetbus_schemas::rule_status::RuleStatusKey {
        cluster: "east".into(),
        cluster_id: "6f1c2d3e-8a9b-4c5d-9e0f-112233445566".into(),
        rule: "cfg.shared".into(),
    };
    assert_doc_contains(&format!("e.g. `{}`", key.to_key()));
    let doc = protocol_doc();
    let example = doc
        .lines()
        .find(|l| l.starts_with(r#"{"schema":"fleetbus.io/rulestatus/v1""#))
        .expect("a rule status example in §5.3");
    let record =
        fleetbus_schemas::rule_status::RuleStatusRecord::decode(example.as_bytes()).unwrap();
    assert_eq!(record.problems.len() as u64, record.problems_total);
    // §6: the drift KV key is the drift subject without `<p>.drift.`.
    let key = fleetbus_schemas::subject::DriftKey::parse_subject(
        &Prefix::default(),
        "fleetbus.drift.west.core.ConfigMap.team-a.settings",
    )
    .unwrap();
    assert_doc_contains(&format!("e.g. `{}`", key.to_kv_key()));
    assert_doc_contains(&format!("**{MIN_NATS_SERVER_VERSION}**"));
    assert_doc_contains(&format!("max_payload - {HEADER_ALLOWANCE}"));
    assert_doc_contains(&format!("deeper than {MAX_MSGPACK_DEPTH} levels"));
    assert_doc_contains(&content_hash(&serde_json::json!({})));
}

#[test]
fn every_well_known_name_is_in_the_table() {
    for name in [
        well_known::ANNOTATION_ORIGIN_CLUSTER,
        well_known::ANNOTATION_ORIGIN_UID,
        well_known::ANNOTATION_RULE,
        well_known::ANNOTATION_SOURCE_HASH,
        well_known::ANNOTATION_ORPHAN_POLICY,
        well_known::ANNOTATION_RESOURCE_SYNC_DISABLED,
        well_known::ANNOTATION_CLUSTER_DISABLED,
        well_known::ANNOTATION_DRIFT_IGNORE,
        well_known::ANNOTATION_CORRECTION_PAUSED,
        well_known::LABEL_MANAGED,
        well_known::SECRET_TYPE_CLUSTER_KUBECONFIG,
        well_known::condition::SYNC_CONFLICT,
        well_known::EVENT_SYNC_CONFLICT,
    ] {
        assert_doc_contains(&format!("| `{name}` |"));
    }
    assert_doc_contains(&format!(
        "| `{}` | label, value `{}` |",
        well_known::LABEL_MANAGED,
        well_known::LABEL_MANAGED_VALUE
    ));
}

#[test]
fn content_hash_test_vector_is_documented() {
    use fleetbus_schemas::envelope::{canonical_json, normalize_for_hash};
    let doc = protocol_doc();
    let input = block_after(&doc, "Test vector: the object").join("\n");
    let object: serde_json::Value = serde_json::from_str(&input).unwrap();
    let canonical = canonical_json(&normalize_for_hash(&object));
    assert_eq!(
        block_after(&doc, "normalizes and canonicalizes to").join("\n"),
        canonical
    );
    assert_doc_contains(&format!("whose hash is `{}`", content_hash(&object)));
}

#[test]
fn tombstone_reasons_and_ids_are_documented() {
    use fleetbus_schemas::envelope::{tombstone_msg_id, TombstoneReason};
    for reason in [TombstoneReason::Deleted, TombstoneReason::Unpublished] {
        assert_doc_contains(&format!("`\"{reason}\"`"));
        let id = tombstone_msg_id("<origin>", "<uid>", "<resourceVersion>", reason);
        assert_doc_contains(&format!("`{id}`"));
    }
    let republish = fleetbus_schemas::envelope::republish_msg_id(
        "<origin>",
        "<uid>",
        "<resourceVersion>",
        chrono::DateTime::UNIX_EPOCH,
    );
    assert_doc_contains(&format!("`{}<time>`", republish.trim_end_matches('0')));
    assert_doc_contains("emit exactly these 13 entries");
    assert_doc_contains("| `tombstoneReason` |");
}

#[test]
fn subject_length_limit_is_documented() {
    use fleetbus_schemas::subject::MAX_SUBJECT_LEN;
    assert_doc_contains(&format!("longer than **{MAX_SUBJECT_LEN} bytes**"));
}
