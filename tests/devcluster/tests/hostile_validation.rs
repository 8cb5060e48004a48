//! Bodies kube-apiserver refuses with 400/422 are refused here too, with the
//! same Status reason and field causes, and change nothing; DELETE bodies are
//! decoded as DeleteOptions (JSON or client-go's protobuf) or refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::raw;

use crate::raw::{create_cm, get_json, request, send, snapshot, start, CMS};
use k8s_pb::apimachinery::pkg::apis::meta::v1::{DeleteOptions, Preconditions};
use k8s_pb::apimachinery::pkg::runtime::{TypeMeta, Unknown};
use prost::Message;
use serde_json::{json, Value};

fn cm(extra: Value) -> Value {
    let mut o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
    merge(&mut o, extra);
    o
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// (body, expected code, expected reason, expected first cause field or message fragment)
type Case = (Value, u16, &'static str, &'static str);

/// A ConfigMap with `extra` merged in, refused with 422 Invalid naming `field` first.
fn invalid(extra: Value, field: &'static str) -> Case {
    (cm(extra), 422, "Invalid", field)
}

/// A ConfigMap with `extra` merged in, refused with 400 BadRequest saying `fragment`.
fn bad_request(extra: Value, fragment: &'static str) -> Case {
    (cm(extra), 400, "BadRequest", fragment)
}

fn cases() -> Vec<Case> {
    vec![
        invalid(
            json!({"metadata": {"labels": {"a b": "v"}}}),
            "metadata.labels",
        ),
        invalid(
            json!({"metadata": {"labels": {"": "v"}}}),
            "metadata.labels",
        ),
        invalid(
            json!({"metadata": {"labels": {"-a": "v"}}}),
            "metadata.labels",
        ),
        invalid(
            json!({"metadata": {"labels": {"a!": "v"}}}),
            "metadata.labels",
        ),
        invalid(
            json!({"metadata": {"labels": {"x".repeat(64): "v"}}}),
            "metadata.labels",
        ),
        invalid(
            json!({"metadata": {"labels": {"a": "-v"}}}),
            "metadata.labels",
        ),
        invalid(
            json!({"metadata": {"annotations": {"a b": "v"}}}),
            "metadata.annotations",
        ),
        invalid(
            json!({"metadata": {"annotations": {"": "v"}}}),
            "metadata.annotations",
        ),
        invalid(
            json!({"metadata": {"annotations": {"big": "x".repeat(256 * 1024)}}}),
            "metadata.annotations",
        ),
        invalid(
            json!({"metadata": {"finalizers": ["not valid"]}}),
            "metadata.finalizers",
        ),
        invalid(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o"}]}}),
            "metadata.ownerReferences.uid",
        ),
        invalid(
            json!({"metadata": {"ownerReferences": [{"apiVersion": "", "kind": "ConfigMap", "name": "o", "uid": "u"}]}}),
            "metadata.ownerReferences.apiVersion",
        ),
        invalid(json!({"data": {"a b": "v"}}), "data[a b]"),
        invalid(json!({"data": {"..x": "v"}}), "data[..x]"),
        invalid(
            json!({"data": {"k": "v"}, "binaryData": {"k": "dg=="}}),
            "data[k]",
        ),
        invalid(json!({"binaryData": {"a/b": "dg=="}}), "binaryData[a/b]"),
        bad_request(
            json!({"data": {"k": 5}}),
            "cannot unmarshal number into Go struct field ConfigMap.data of type string",
        ),
        bad_request(
            json!({"data": {"k": {"nested": "v"}}}),
            "cannot unmarshal object",
        ),
        bad_request(
            json!({"binaryData": {"k": "not base64!"}}),
            "illegal base64 data at input byte",
        ),
        bad_request(
            json!({"metadata": {"labels": {"a": 5}}}),
            "ObjectMeta.metadata.labels",
        ),
        bad_request(
            json!({"metadata": {"finalizers": [5]}}),
            "ObjectMeta.metadata.finalizers",
        ),
        bad_request(
            json!({"kind": 5}),
            "cannot unmarshal number into Go struct field .kind of type string",
        ),
        bad_request(
            json!({"apiVersion": ["v1"]}),
            "cannot unmarshal array into Go struct field .apiVersion",
        ),
    ]
}

fn check(r: &raw::Resp, code: u16, reason: &str, expect: &str, what: &str) {
    assert_eq!(r.code, code, "{what}: {}", r.text());
    let s = r.json();
    assert_eq!(s["kind"], "Status", "{what}");
    assert_eq!(s["reason"], reason, "{what}: {s}");
    if code == 422 {
        let cause = &s["details"]["causes"][0];
        assert_eq!(cause["field"], expect, "{what}: {s}");
        assert!(
            matches!(
                cause["reason"].as_str(),
                Some("FieldValueInvalid" | "FieldValueTooLong")
            ),
            "{what}: {s}"
        );
        assert!(
            s["message"]
                .as_str()
                .unwrap()
                .starts_with("ConfigMap \"x\" is invalid: "),
            "{what}: {s}"
        );
    } else {
        assert!(
            s["message"].as_str().unwrap().contains(expect),
            "{what}: {s}"
        );
    }
}

#[test]
fn invalid_metadata_and_data_are_refused_on_every_write_path() {
    let dc = start("invalid-objects");
    create_cm(&dc, "x", json!({"k": "v"}));
    let path = format!("{CMS}/x");
    let before = snapshot(&dc, &path);
    for (body, code, reason, expect) in cases() {
        let what = body.to_string();
        let what = &what[..what.len().min(160)];
        let mut create = body.clone();
        create["metadata"]["name"] = json!("y");
        let r = send(&dc, "POST", CMS, "application/json", &create);
        // The create's name differs; the message names it.
        if code == 422 {
            assert_eq!(r.code, 422, "POST {what}: {}", r.text());
        } else {
            check(&r, code, reason, expect, &format!("POST {what}"));
        }
        let r = send(&dc, "PUT", &path, "application/json", &body);
        check(&r, code, reason, expect, &format!("PUT {what}"));
        let mut patch = body.clone();
        if patch.get("apiVersion") == Some(&json!("v1")) {
            patch.as_object_mut().unwrap().remove("apiVersion");
        }
        if patch.get("kind") == Some(&json!("ConfigMap")) {
            patch.as_object_mut().unwrap().remove("kind");
        }
        let r = send(&dc, "PATCH", &path, "application/merge-patch+json", &patch);
        check(&r, code, reason, expect, &format!("merge PATCH {what}"));
        let r = send(
            &dc,
            "PATCH",
            &format!("{path}?fieldManager=t"),
            "application/apply-patch+yaml",
            &body,
        );
        check(&r, code, reason, expect, &format!("apply {what}"));
        assert_eq!(snapshot(&dc, &path), before, "{what} changed the store");
        assert_eq!(
            request(&dc, "GET", &format!("{CMS}/y"), None, b"").code,
            404,
            "{what}"
        );
    }
    // A JSON patch reaching the same result is refused the same way.
    let r = send(
        &dc,
        "PATCH",
        &path,
        "application/json-patch+json",
        &json!([{"op": "add", "path": "/metadata/labels", "value": {"a b": "v"}}]),
    );
    check(&r, 422, "Invalid", "metadata.labels", "json patch");
    // Secrets: keys and base64.
    let secrets = "/api/v1/namespaces/default/secrets";
    let r = send(
        &dc,
        "POST",
        secrets,
        "application/json",
        &json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"k":"%%%"}}),
    );
    assert_eq!(
        (r.code, r.json()["reason"].clone()),
        (400, json!("BadRequest")),
        "{}",
        r.text()
    );
    let r = send(
        &dc,
        "POST",
        secrets,
        "application/json",
        &json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"s"},"data":{"a b":"dg=="}}),
    );
    assert_eq!(r.code, 422, "{}", r.text());
    assert_eq!(r.json()["details"]["causes"][0]["field"], "data[a b]");
    // Valid names of every kind still pass.
    create_cm(
        &dc,
        "ok",
        json!({"key.name": "v", "KEY_NAME": "v", "key-name": "v"}),
    );
    let r = send(
        &dc,
        "PATCH",
        &format!("{CMS}/ok"),
        "application/merge-patch+json",
        &json!({"metadata": {"labels": {"app.kubernetes.io/name": "web"},
            "annotations": {"Example.COM/Some_Thing": "x"}, "finalizers": ["example.com/f"]}}),
    );
    assert_eq!(r.code, 200, "{}", r.text());
}

#[test]
fn put_without_a_name_is_refused_and_keeps_the_data() {
    let dc = start("put-no-name");
    create_cm(&dc, "x", json!({"k": "v"}));
    let path = format!("{CMS}/x");
    let before = snapshot(&dc, &path);
    for body in [
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}),
        json!({"apiVersion": "v1", "kind": "ConfigMap"}),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "other"}}),
    ] {
        let r = send(&dc, "PUT", &path, "application/json", &body);
        assert_eq!(r.code, 400, "{body}: {}", r.text());
        assert_eq!(r.json()["reason"], "BadRequest");
        assert!(
            r.text().contains("does not match the name on the URL (x)"),
            "{}",
            r.text()
        );
    }
    assert_eq!(snapshot(&dc, &path), before);
    assert_eq!(get_json(&dc, &path)["data"]["k"], "v");
}

#[test]
fn delete_bodies_that_are_not_delete_options_delete_nothing() {
    let dc = start("delete-bodies");
    create_cm(&dc, "x", json!({"k": "v"}));
    let path = format!("{CMS}/x");
    let before = snapshot(&dc, &path);
    for body in [
        &b"5"[..],
        b"\"x\"",
        b"[]",
        b"{",
        b"{\"kind\":\"ConfigMap\"}",
        b"{\"propagationPolicy\":7}",
    ] {
        let r = request(&dc, "DELETE", &path, Some("application/json"), body);
        assert_eq!(
            r.code,
            400,
            "{}: {}",
            String::from_utf8_lossy(body),
            r.text()
        );
        assert_eq!(r.json()["reason"], "BadRequest");
    }
    // deletecollection too.
    let r = request(&dc, "DELETE", CMS, Some("application/json"), b"[]");
    assert_eq!(r.code, 400, "{}", r.text());
    assert_eq!(snapshot(&dc, &path), before);
    // What kubectl and the Python client send still works.
    let r = request(
        &dc,
        "DELETE",
        &path,
        Some("application/json"),
        br#"{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Background"}"#,
    );
    assert_eq!(r.code, 200, "{}", r.text());
    create_cm(&dc, "x", json!({}));
    let r = request(&dc, "DELETE", &path, None, b"");
    assert_eq!(r.code, 200, "{}", r.text());
}

/// The body client-go >= 0.32 typed clients (helm v4's uninstall among them) send
/// with `Content-Type: application/vnd.kubernetes.protobuf`.
fn client_go_delete_body(opts: &DeleteOptions) -> Vec<u8> {
    let env = Unknown {
        type_meta: Some(TypeMeta {
            api_version: Some("v1".into()),
            kind: Some("DeleteOptions".into()),
        }),
        raw: Some(opts.encode_to_vec()),
        content_encoding: Some(String::new()),
        content_type: Some(String::new()),
    };
    let mut out = b"k8s\0".to_vec();
    out.extend(env.encode_to_vec());
    out
}

#[test]
fn protobuf_delete_options_from_client_go_are_honoured() {
    let dc = start("delete-protobuf");
    let created = create_cm(&dc, "x", json!({"k": "v"}));
    let path = format!("{CMS}/x");
    let pb = "application/vnd.kubernetes.protobuf";
    // A wrong uid precondition proves the body is read, not ignored.
    let wrong = client_go_delete_body(&DeleteOptions {
        propagation_policy: Some("Background".into()),
        preconditions: Some(Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..Default::default()
    });
    let r = request(&dc, "DELETE", &path, Some(pb), &wrong);
    assert_eq!(r.code, 409, "{}", r.text());
    let right = client_go_delete_body(&DeleteOptions {
        propagation_policy: Some("Background".into()),
        preconditions: Some(Preconditions {
            uid: created["metadata"]["uid"].as_str().map(str::to_string),
            resource_version: None,
        }),
        ..Default::default()
    });
    let r = request(&dc, "DELETE", &path, Some(pb), &right);
    assert_eq!(r.code, 200, "{}", r.text());
    assert_eq!(request(&dc, "GET", &path, None, b"").code, 404);
    // An empty body with the protobuf content type (no options) works too.
    create_cm(&dc, "x", json!({}));
    let r = request(&dc, "DELETE", &path, Some(pb), b"");
    assert_eq!(r.code, 200, "{}", r.text());
}

/// Reads a watch response until `needle` shows up (or the server closes it).
fn watch_until(dc: &fleetbus_testsupport::DevCluster, path: &str, needle: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", dc.port())).unwrap();
    s.set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

#[test]
fn a_huge_watch_timeout_still_streams_events() {
    let dc = start("watch-timeout");
    create_cm(&dc, "x", json!({"k": "v"}));
    for t in ["18446744073709551615", "9223372036854775807"] {
        let got = watch_until(
            &dc,
            &format!("{CMS}?watch=true&resourceVersion=0&timeoutSeconds={t}"),
            "\"ADDED\"",
        );
        assert!(got.contains("\"ADDED\""), "timeoutSeconds={t}: {got}");
    }
    assert!(!dc.log().contains("panicked"), "{}", dc.log());
}
