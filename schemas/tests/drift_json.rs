//! Drift event JSON: the exact documented shape, round trips, typed decode errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use chrono::{DateTime, Utc};
use fleetbus_schemas::crd::DriftMode;
use fleetbus_schemas::drift::{
    drift_event_id, ChangedBy, DriftChange, DriftEvent, DriftPhase, DriftType,
};
use fleetbus_schemas::subject::Prefix;
use fleetbus_schemas::time::parse_rfc3339;
use fleetbus_schemas::DecodeError;
use fleetbus_schemas::ObjectRef;
use proptest::prelude::*;
use serde_json::{json, Value};

mod common;

/// The example in docs/PROTOCOL.md; keep them identical.
const EXAMPLE: &str = r#"{"schema":"fleetbus.io/drift/v1","id":"west:9d8e7f60-1a2b-4c3d-8e9f-0a1b2c3d4e5f:1187:Corrected","cluster":"west","rule":"team-config","origin":"east","object":{"apiVersion":"v1","kind":"ConfigMap","namespace":"team-a","name":"settings","uid":"9d8e7f60-1a2b-4c3d-8e9f-0a1b2c3d4e5f","resourceVersion":"1187"},"phase":"Corrected","type":"Modified","detectedAt":"2026-11-22T04:31:07.412Z","changes":[{"path":"/data/color","desired":"blue","live":"red"},{"path":"/data/extra","desired":null,"live":"1"}],"changedBy":{"manager":"kubectl-edit","operation":"Update","time":"2026-11-22T04:31:07.000Z"},"action":"Correct","error":null,"count":1,"resumeAt":null}"#;

fn example() -> DriftEvent {
    DriftEvent {
        id: drift_event_id(
            "west",
            "9d8e7f60-1a2b-4c3d-8e9f-0a1b2c3d4e5f",
            "1187",
            DriftPhase::Corrected,
        ),
        cluster: "west".into(),
        rule: "team-config".into(),
        origin: "east".into(),
        object: ObjectRef {
            uid: Some("9d8e7f60-1a2b-4c3d-8e9f-0a1b2c3d4e5f".into()),
            resource_version: Some("1187".into()),
            ..ObjectRef::new("v1", "ConfigMap", Some("team-a"), "settings")
        },
        phase: DriftPhase::Corrected,
        type_: DriftType::Modified,
        detected_at: parse_rfc3339("2026-11-22T04:31:07.412Z").unwrap(),
        changes: vec![
            DriftChange {
                path: "/data/color".into(),
                desired: json!("blue"),
                live: json!("red"),
            },
            DriftChange {
                path: "/data/extra".into(),
                desired: Value::Null,
                live: json!("1"),
            },
        ],
        changed_by: Some(ChangedBy {
            manager: "kubectl-edit".into(),
            operation: "Update".into(),
            time: Some(parse_rfc3339("2026-11-22T04:31:07Z").unwrap()),
        }),
        action: DriftMode::Correct,
        error: None,
        count: 1,
        resume_at: None,
    }
}

#[test]
fn example_matches_documented_json() {
    assert_eq!(
        String::from_utf8(example().encode().unwrap()).unwrap(),
        EXAMPLE
    );
    assert_eq!(DriftEvent::decode(EXAMPLE.as_bytes()).unwrap(), example());
    common::assert_doc_contains(&common::pretty(EXAMPLE));
    assert_eq!(
        example().subject_key().to_subject(&Prefix::default()),
        "fleetbus.drift.west.core.ConfigMap.team-a.settings"
    );
}

#[test]
fn cluster_scoped_and_unknown_author_are_null() {
    let mut e = example();
    e.object.namespace = None;
    e.changed_by = None;
    e.type_ = DriftType::Deleted;
    e.changes.clear();
    let v: Value = serde_json::from_slice(&e.encode().unwrap()).unwrap();
    assert_eq!(v["object"]["namespace"], Value::Null);
    assert_eq!(v["changedBy"], Value::Null);
    assert_eq!(v["type"], "Deleted");
    assert_eq!(v["changes"], json!([]));
    let keys: Vec<_> = v.as_object().unwrap().keys().cloned().collect();
    let mut want = vec![
        "schema",
        "id",
        "cluster",
        "rule",
        "origin",
        "object",
        "phase",
        "type",
        "detectedAt",
        "changes",
        "changedBy",
        "action",
        "error",
        "count",
        "resumeAt",
    ];
    want.sort();
    assert_eq!(keys, want);
}

/// Events of agents that predate coalescing and fights have neither `count` nor
/// `resumeAt`: they read as one occurrence, no resume time (PROTOCOL §7).
#[test]
fn events_without_count_read_as_one() {
    let old = EXAMPLE.replace(r#","count":1,"resumeAt":null"#, "");
    assert!(!old.contains("count"));
    assert_eq!(DriftEvent::decode(old.as_bytes()).unwrap(), example());
    let mut fight = example();
    fight.phase = DriftPhase::Fight;
    fight.count = 5;
    fight.resume_at = Some(parse_rfc3339("2026-11-22T04:32:07Z").unwrap());
    let v: Value = serde_json::from_slice(&fight.encode().unwrap()).unwrap();
    assert_eq!(v["phase"], "Fight");
    assert_eq!(v["count"], 5);
    assert_eq!(v["resumeAt"], "2026-11-22T04:32:07.000Z");
    assert!(DriftPhase::Fight.is_open());
}

#[test]
fn other_versions_are_rejected() {
    let v2 = EXAMPLE.replace("fleetbus.io/drift/v1", "fleetbus.io/drift/v2");
    assert!(matches!(
        DriftEvent::decode(v2.as_bytes()),
        Err(DecodeError::UnsupportedVersion { found }) if found == "fleetbus.io/drift/v2"
    ));
    assert!(matches!(
        DriftEvent::decode(br#"{"schema":"fleetbus.io/drift/v1","id":"x"}"#),
        Err(DecodeError::Malformed { .. })
    ));
    let bad_phase = EXAMPLE.replace(r#""phase":"Corrected""#, r#""phase":"Exploded""#);
    assert!(matches!(
        DriftEvent::decode(bad_phase.as_bytes()),
        Err(DecodeError::Malformed { .. })
    ));
    // Deep nesting inside `changes` is refused (serde_json's 128-level limit), not a crash.
    let deep = EXAMPLE.replace(
        r#""desired":"blue""#,
        &format!(
            r#""desired":{}1{}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        ),
    );
    assert!(matches!(
        DriftEvent::decode(deep.as_bytes()),
        Err(DecodeError::Malformed { .. })
    ));
}

/// A drift too large for the bus is still announced: cut to fit, paths
/// kept, values replaced by a marker with their size and hash, and what
/// could not fit counted.
#[test]
fn a_drift_too_large_for_the_bus_is_cut_to_fit_keeping_its_paths() {
    use fleetbus_schemas::drift::{is_truncated, truncated, DROPPED_PATH, TRUNCATED_KEY};
    let max = 64 * 1024;
    // Small: unchanged.
    let small = example();
    assert_eq!(small.encode_within(max), Some(small.encode().unwrap()));
    // One 600 KB value each side, as in a copy edited with a large value.
    let big = "x".repeat(600_000);
    let mut e = example();
    e.changes[0].desired = json!(big);
    e.changes[0].live = json!(format!("{big}y"));
    assert!(e.encode().unwrap().len() > 1_200_000);
    let cut = DriftEvent::decode(&e.encode_within(max).expect("fits")).unwrap();
    assert!(e.encode_within(max).unwrap().len() <= max);
    let paths = |e: &DriftEvent| e.changes.iter().map(|c| c.path.clone()).collect::<Vec<_>>();
    assert_eq!(paths(&cut), paths(&e), "every path is kept");
    assert!(is_truncated(&cut.changes[0].desired) && is_truncated(&cut.changes[0].live));
    // The two sides differ, and their markers say so.
    assert_ne!(cut.changes[0].desired, cut.changes[0].live);
    assert_eq!(
        cut.changes[0].desired[TRUNCATED_KEY]["bytes"],
        json!(600_002),
        "the size of the JSON string cut"
    );
    assert_eq!(cut.changes[0].desired, truncated(&e.changes[0].desired));
    // Small values stay as they were.
    assert_eq!(cut.changes[1], e.changes[1]);
    assert_eq!((cut.id.as_str(), cut.phase), (e.id.as_str(), e.phase));
    // Many paths: as many as fit, then how many were dropped.
    let mut storm = example();
    storm.changes = (0..20_000)
        .map(|i| DriftChange {
            path: format!("/data/key-{i:05}"),
            desired: json!("a"),
            live: json!("b"),
        })
        .collect();
    let bytes = storm.encode_within(max).expect("fits");
    assert!(bytes.len() <= max);
    let cut = DriftEvent::decode(&bytes).unwrap();
    let last = cut.changes.last().unwrap();
    assert_eq!(last.path, DROPPED_PATH);
    let kept = cut.changes.len() - 1;
    assert!(kept > 100, "most of what fits is kept: {kept}");
    assert_eq!(
        last.live[TRUNCATED_KEY]["droppedChanges"],
        json!(20_000 - kept)
    );
    assert!(
        cut.changes[..kept] == storm.changes[..kept],
        "the changes kept are the first ones, as they were"
    );
    // Nothing fits: None, never an oversized event.
    assert_eq!(example().encode_within(10), None);
}

proptest! {
    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256),
                            cut in 0usize..EXAMPLE.len()) {
        let _ = DriftEvent::decode(&bytes);
        // Every truncation of a valid event is an error.
        prop_assert!(DriftEvent::decode(&EXAMPLE.as_bytes()[..cut]).is_err());
    }
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(any::<String>(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn ms_time() -> impl Strategy<Value = DateTime<Utc>> {
    (0i64..4_102_444_800_000).prop_map(|ms| DateTime::from_timestamp_millis(ms).unwrap())
}

fn phase() -> impl Strategy<Value = DriftPhase> {
    prop_oneof![
        Just(DriftPhase::Detected),
        Just(DriftPhase::Corrected),
        Just(DriftPhase::CorrectionFailed),
        Just(DriftPhase::Resolved),
        Just(DriftPhase::Fight)
    ]
}

fn mode() -> impl Strategy<Value = DriftMode> {
    prop_oneof![
        Just(DriftMode::Correct),
        Just(DriftMode::Report),
        Just(DriftMode::Ignore)
    ]
}

proptest! {
    #[test]
    fn round_trips(s in proptest::collection::vec(any::<String>(), 9), ns in proptest::option::of(any::<String>()),
                   phase in phase(), deleted in any::<bool>(), at in ms_time(), action in mode(),
                   changes in proptest::collection::vec((any::<String>(), json_value(), json_value()), 0..4),
                   changed_by in proptest::option::of((any::<String>(), any::<String>(), proptest::option::of(ms_time()))),
                   error in proptest::option::of(any::<String>()), count in any::<u32>(),
                   resume_at in proptest::option::of(ms_time())) {
        let e = DriftEvent {
            id: s[0].clone(), cluster: s[1].clone(), rule: s[2].clone(), origin: s[3].clone(),
            object: ObjectRef { api_version: s[4].clone(), kind: s[5].clone(), namespace: ns,
                name: s[6].clone(), uid: Some(s[7].clone()), resource_version: Some(s[8].clone()) },
            phase,
            type_: if deleted { DriftType::Deleted } else { DriftType::Modified },
            detected_at: at,
            changes: changes.into_iter().map(|(path, desired, live)| DriftChange { path, desired, live }).collect(),
            changed_by: changed_by.map(|(manager, operation, time)| ChangedBy { manager, operation, time }),
            action, error, count, resume_at,
        };
        prop_assert_eq!(DriftEvent::decode(&e.encode().unwrap()).unwrap(), e);
    }
}
