//! Correct command JSON: the exact documented request and reply, round trips, typed errors.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use fleetbus_schemas::command::{CorrectFailure, CorrectReply, CorrectRequest};
use fleetbus_schemas::subject::{CommandKey, Prefix};
use fleetbus_schemas::DecodeError;
use fleetbus_schemas::ObjectRef;

mod common;

/// The request example in docs/PROTOCOL.md §6.3; keep them identical.
const REQUEST: &str = r#"{"schema":"fleetbus.io/correct-request/v1","rule":"web","kind":"Deployment","namespace":"team-a","name":null}"#;

/// The reply example in docs/PROTOCOL.md §6.3; keep them identical.
const REPLY: &str = r#"{"schema":"fleetbus.io/correct-reply/v1","cluster":"west","corrected":[{"apiVersion":"apps/v1","kind":"Deployment","namespace":"team-a","name":"web"}],"failed":[{"object":{"apiVersion":"apps/v1","kind":"Deployment","namespace":"team-a","name":"api"},"error":"admission webhook \"policy.example.com\" denied the request"}],"error":null}"#;

fn request() -> CorrectRequest {
    CorrectRequest {
        rule: Some("web".into()),
        kind: Some("Deployment".into()),
        namespace: Some("team-a".into()),
        name: None,
    }
}

fn reply() -> CorrectReply {
    CorrectReply {
        cluster: "west".into(),
        corrected: vec![ObjectRef::new(
            "apps/v1",
            "Deployment",
            Some("team-a"),
            "web",
        )],
        failed: vec![CorrectFailure {
            object: ObjectRef::new("apps/v1", "Deployment", Some("team-a"), "api"),
            error: "admission webhook \"policy.example.com\" denied the request".into(),
        }],
        error: None,
        retry_after_ms: None,
    }
}

#[test]
fn examples_match_documented_json() {
    assert_eq!(
        String::from_utf8(request().encode().unwrap()).unwrap(),
        REQUEST
    );
    assert_eq!(
        CorrectRequest::decode(REQUEST.as_bytes()).unwrap(),
        request()
    );
    assert_eq!(String::from_utf8(reply().encode().unwrap()).unwrap(), REPLY);
    assert_eq!(CorrectReply::decode(REPLY.as_bytes()).unwrap(), reply());
    common::assert_doc_contains(REQUEST);
    common::assert_doc_contains(&common::pretty(REPLY));
    common::assert_doc_contains(&format!(
        "`{}`",
        CommandKey::correct("west").to_subject(&Prefix::default())
    ));
}

#[test]
fn absent_filters_mean_everything() {
    let all = CorrectRequest::decode(br#"{"schema":"fleetbus.io/correct-request/v1"}"#).unwrap();
    assert_eq!(all, CorrectRequest::default());
    let obj = ObjectRef::new("v1", "ConfigMap", None, "x");
    assert!(all.matches("any-rule", &obj));
    // A reply with only the cluster is a valid "nothing was drifted".
    let empty =
        CorrectReply::decode(br#"{"schema":"fleetbus.io/correct-reply/v1","cluster":"c2"}"#)
            .unwrap();
    assert!(empty.corrected.is_empty() && empty.failed.is_empty() && empty.error.is_none());
}

#[test]
fn other_schemas_and_garbage_are_typed_errors() {
    assert!(matches!(
        CorrectRequest::decode(br#"{"schema":"fleetbus.io/correct-request/v2","rule":"x"}"#),
        Err(DecodeError::UnsupportedVersion { found }) if found == "fleetbus.io/correct-request/v2"
    ));
    assert!(matches!(
        CorrectReply::decode(REQUEST.as_bytes()),
        Err(DecodeError::UnsupportedVersion { .. })
    ));
    assert!(matches!(
        CorrectRequest::decode(b"{\"rule\":\"x\"}"),
        Err(DecodeError::Malformed { .. })
    ));
    assert!(matches!(
        CorrectRequest::decode(b"not json"),
        Err(DecodeError::Malformed { .. })
    ));
    assert!(matches!(
        CorrectRequest::decode(br#"{"schema":"fleetbus.io/correct-request/v1","rule":7}"#),
        Err(DecodeError::Malformed { .. })
    ));
    let refused = CorrectReply::refused("c2", "malformed request");
    assert_eq!(
        CorrectReply::decode(&refused.encode().unwrap()).unwrap(),
        refused
    );
}
