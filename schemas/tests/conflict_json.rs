//! Conflict event JSON: the exact documented shape, round trips, typed decode errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use chrono::{DateTime, Utc};
use fleetbus_schemas::conflict::{conflict_event_id, ConflictEvent, ConflictReason};
use fleetbus_schemas::subject::{ConflictKey, Prefix};
use fleetbus_schemas::time::parse_rfc3339;
use fleetbus_schemas::{DecodeError, ObjectRef};
use proptest::prelude::*;
use serde_json::Value;

mod common;

/// The example in docs/PROTOCOL.md §6.2; keep them identical.
const EXAMPLE: &str = r#"{"schema":"fleetbus.io/conflict/v1","id":"west:team-config:east:v1/ConfigMap/team-a/settings:OtherOrigin:north","cluster":"west","rule":"team-config","origin":"east","object":{"apiVersion":"v1","kind":"ConfigMap","namespace":"team-a","name":"settings","uid":"4c1d2e3f-5a6b-4c7d-8e9f-0a1b2c3d4e5f","resourceVersion":"1190"},"reason":"OtherOrigin","winner":"north","detectedAt":"2026-11-22T04:32:00.000Z","message":"ConfigMap team-a/settings from east conflicts with the copy from north (older source)"}"#;

fn target() -> ObjectRef {
    ObjectRef {
        uid: Some("4c1d2e3f-5a6b-4c7d-8e9f-0a1b2c3d4e5f".into()),
        resource_version: Some("1190".into()),
        ..ObjectRef::new("v1", "ConfigMap", Some("team-a"), "settings")
    }
}

fn example() -> ConflictEvent {
    ConflictEvent {
        id: conflict_event_id(
            "west",
            "team-config",
            "east",
            &target(),
            ConflictReason::OtherOrigin,
            Some("north"),
        ),
        cluster: "west".into(),
        rule: "team-config".into(),
        origin: "east".into(),
        object: target(),
        reason: ConflictReason::OtherOrigin,
        winner: Some("north".into()),
        detected_at: parse_rfc3339("2026-11-22T04:32:00Z").unwrap(),
        message:
            "ConfigMap team-a/settings from east conflicts with the copy from north (older source)"
                .into(),
    }
}

#[test]
fn example_matches_documented_json() {
    assert_eq!(
        String::from_utf8(example().encode().unwrap()).unwrap(),
        EXAMPLE
    );
    assert_eq!(
        ConflictEvent::decode(EXAMPLE.as_bytes()).unwrap(),
        example()
    );
    common::assert_doc_contains(&common::pretty(EXAMPLE));
    let subject = example().subject_key().to_subject(&Prefix::default());
    assert_eq!(
        subject,
        "fleetbus.conflict.west.core.v1.ConfigMap.team-a.settings"
    );
    common::assert_doc_contains(&format!("`{subject}`"));
    assert_eq!(
        ConflictKey::parse_subject(&Prefix::default(), &subject).unwrap(),
        example().subject_key()
    );
}

#[test]
fn local_object_has_null_winner_and_every_member() {
    let mut e = example();
    e.reason = ConflictReason::LocalObject;
    e.winner = None;
    e.object.namespace = None;
    let v: Value = serde_json::from_slice(&e.encode().unwrap()).unwrap();
    assert_eq!(v["reason"], "LocalObject");
    assert_eq!(v["winner"], Value::Null);
    assert_eq!(v["object"]["namespace"], Value::Null);
    let mut keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    let mut want = [
        "schema",
        "id",
        "cluster",
        "rule",
        "origin",
        "object",
        "reason",
        "winner",
        "detectedAt",
        "message",
    ];
    want.sort();
    assert_eq!(keys, want);
    // A target that does not exist yet (or whose ids are unknown) omits uid and resourceVersion.
    e.object.uid = None;
    e.object.resource_version = None;
    let v: Value = serde_json::from_slice(&e.encode().unwrap()).unwrap();
    assert!(v["object"].get("uid").is_none());
    assert_eq!(ConflictEvent::decode(&e.encode().unwrap()).unwrap(), e);
}

#[test]
fn other_versions_and_unknown_reasons_are_rejected() {
    let v2 = EXAMPLE.replace("fleetbus.io/conflict/v1", "fleetbus.io/conflict/v2");
    assert!(matches!(
        ConflictEvent::decode(v2.as_bytes()),
        Err(DecodeError::UnsupportedVersion { found }) if found == "fleetbus.io/conflict/v2"
    ));
    let bad = EXAMPLE.replace(r#""reason":"OtherOrigin""#, r#""reason":"Bored""#);
    assert!(matches!(
        ConflictEvent::decode(bad.as_bytes()),
        Err(DecodeError::Malformed { .. })
    ));
    assert!(matches!(
        ConflictEvent::decode(br#"{"schema":"fleetbus.io/conflict/v1","id":"x"}"#),
        Err(DecodeError::Malformed { .. })
    ));
}

fn ms_time() -> impl Strategy<Value = DateTime<Utc>> {
    (0i64..4_102_444_800_000).prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap())
}

proptest! {
    #[test]
    fn round_trips(s in proptest::collection::vec(any::<String>(), 8), ns in proptest::option::of(any::<String>()),
                   uid in proptest::option::of(any::<String>()), rv in proptest::option::of(any::<String>()),
                   local in any::<bool>(), winner in proptest::option::of(any::<String>()), at in ms_time()) {
        let e = ConflictEvent {
            id: s[0].clone(), cluster: s[1].clone(), rule: s[2].clone(), origin: s[3].clone(),
            object: ObjectRef { api_version: s[4].clone(), kind: s[5].clone(), namespace: ns,
                name: s[6].clone(), uid, resource_version: rv },
            reason: if local { ConflictReason::LocalObject } else { ConflictReason::OtherOrigin },
            winner, detected_at: at, message: s[7].clone(),
        };
        prop_assert_eq!(ConflictEvent::decode(&e.encode().unwrap()).unwrap(), e);
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256),
                            cut in 0usize..EXAMPLE.len()) {
        let _ = ConflictEvent::decode(&bytes);
        prop_assert!(ConflictEvent::decode(&EXAMPLE.as_bytes()[..cut]).is_err());
    }
}
