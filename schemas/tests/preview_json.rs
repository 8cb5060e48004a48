//! Preview query JSON: the exact documented request and reply, round trips.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use fleetbus_schemas::drift::DriftChange;
use fleetbus_schemas::preview::{
    DeleteAction, PreviewCreate, PreviewDelete, PreviewReply, PreviewRequest, PreviewSourceReply,
    PreviewSourceRequest, PreviewUpdate, SourceEnvelope,
};
use fleetbus_schemas::subject::{CommandKey, Prefix};
use fleetbus_schemas::ObjectRef;
use serde_json::json;

mod common;

/// The request example in docs/PROTOCOL.md §6.8; keep them identical.
const REQUEST: &str = r#"{"schema":"fleetbus.io/preview-request/v1","rule":{"apiVersion":"fleetbus.io/v1alpha1","kind":"ResourceSyncRule","metadata":{"name":"web"},"spec":{"groupVersionKind":{"group":"","kind":"Secret","version":"v1"},"rules":[{"match":[{"namespaces":["a","b"]}]}]}},"ruleName":null,"source":null}"#;

/// The reply example in docs/PROTOCOL.md §6.8; keep them identical.
const REPLY: &str = r#"{"schema":"fleetbus.io/preview-reply/v1","cluster":"c2","rule":"web","selected":true,"creates":[{"object":{"apiVersion":"v1","kind":"Secret","namespace":"b","name":"db"},"origin":"c1"}],"updates":[{"object":{"apiVersion":"v1","kind":"Secret","namespace":"a","name":"api"},"origin":"c1","changes":[{"path":"/data/token","desired":"(redacted: desired value)","live":"(redacted: live value)"},{"path":"/metadata/labels/tier","desired":"gold","live":null}]}],"deletes":[{"object":{"apiVersion":"v1","kind":"Secret","namespace":"a","name":"old"},"action":"Delete"}],"conflicts":[],"errors":[],"unchanged":12,"held":0,"omitted":0,"incomplete":[],"error":null}"#;

fn secret(ns: &str, name: &str) -> ObjectRef {
    ObjectRef::new("v1", "Secret", Some(ns), name)
}

fn request() -> PreviewRequest {
    PreviewRequest {
        rule: Some(
            json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
            "metadata": {"name": "web"},
            "spec": {"groupVersionKind": {"group": "", "version": "v1", "kind": "Secret"},
                     "rules": [{"match": [{"namespaces": ["a", "b"]}]}]}}),
        ),
        rule_name: None,
        source: None,
        author: None,
        sources: Vec::new(),
        sources_complete: false,
    }
}

fn reply() -> PreviewReply {
    PreviewReply {
        cluster: "c2".into(),
        rule: "web".into(),
        selected: true,
        creates: vec![PreviewCreate {
            object: secret("b", "db"),
            origin: "c1".into(),
        }],
        updates: vec![PreviewUpdate {
            object: secret("a", "api"),
            origin: "c1".into(),
            changes: vec![
                DriftChange {
                    path: "/data/token".into(),
                    desired: json!("(redacted: desired value)"),
                    live: json!("(redacted: live value)"),
                },
                DriftChange {
                    path: "/metadata/labels/tier".into(),
                    desired: json!("gold"),
                    live: serde_json::Value::Null,
                },
            ],
            changes_omitted: 0,
            reason: None,
        }],
        deletes: vec![PreviewDelete {
            object: secret("a", "old"),
            action: DeleteAction::Delete,
            reason: None,
        }],
        unchanged: 12,
        ..PreviewReply::default()
    }
}

#[test]
fn examples_match_documented_json() {
    assert_eq!(
        String::from_utf8(request().encode().unwrap()).unwrap(),
        REQUEST
    );
    assert_eq!(
        PreviewRequest::decode(REQUEST.as_bytes()).unwrap(),
        request()
    );
    assert_eq!(request().validate().unwrap(), "web");
    assert_eq!(String::from_utf8(reply().encode().unwrap()).unwrap(), REPLY);
    assert_eq!(PreviewReply::decode(REPLY.as_bytes()).unwrap(), reply());
    common::assert_doc_contains(REQUEST);
    common::assert_doc_contains(&common::pretty(REPLY));
    common::assert_doc_contains(&format!(
        "`{}`",
        CommandKey::preview("c2").to_subject(&Prefix::default())
    ));
}

/// The `preview-source` examples in docs/PROTOCOL.md §6.8; keep them identical.
const SOURCE_REQUEST: &str = r#"{"schema":"fleetbus.io/preview-source-request/v1","rule":{"apiVersion":"fleetbus.io/v1alpha1","kind":"ResourceSyncRule","metadata":{"name":"web"},"spec":{"groupVersionKind":{"group":"","kind":"Secret","version":"v1"},"rules":[{"match":[{"namespaces":["a","b"]}]}]}},"author":"c2","after":"a/api"}"#;
const SOURCE_REPLY: &str = r#"{"schema":"fleetbus.io/preview-source-reply/v1","cluster":"c1","envelopes":[{"subject":"fleetbus.obj.c1.core.v1.Secret.a.db","data":"3gAO"}],"skipped":[],"next":"a/db","error":null}"#;

#[test]
fn preview_source_examples_match_documented_json() {
    let req = PreviewSourceRequest {
        rule: request().rule.unwrap(),
        author: Some("c2".into()),
        after: Some("a/api".into()),
    };
    assert_eq!(
        String::from_utf8(req.encode().unwrap()).unwrap(),
        SOURCE_REQUEST
    );
    assert_eq!(
        PreviewSourceRequest::decode(SOURCE_REQUEST.as_bytes()).unwrap(),
        req
    );
    let (name, after) = req.validate().unwrap();
    assert_eq!(
        (name.as_str(), after.unwrap().name.as_str()),
        ("web", "api")
    );
    let reply = PreviewSourceReply {
        cluster: "c1".into(),
        envelopes: vec![SourceEnvelope::new(
            "fleetbus.obj.c1.core.v1.Secret.a.db".into(),
            &[0xde, 0x00, 0x0e],
        )],
        next: Some("a/db".into()),
        ..PreviewSourceReply::default()
    };
    assert_eq!(
        String::from_utf8(reply.encode().unwrap()).unwrap(),
        SOURCE_REPLY
    );
    assert_eq!(
        PreviewSourceReply::decode(SOURCE_REPLY.as_bytes()).unwrap(),
        reply
    );
    common::assert_doc_contains(SOURCE_REQUEST);
    common::assert_doc_contains(SOURCE_REPLY);
    common::assert_doc_contains(&format!(
        "`{}`",
        CommandKey::preview_source("c2").to_subject(&Prefix::default())
    ));
}
