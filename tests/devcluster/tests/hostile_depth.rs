//! Nesting limits end to end: deep bodies are refused before they are decoded,
//! no write path can grow an object past the limit, and an unreadable stored
//! record costs only itself on restart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::raw::{create_cm, get_json, request, send, snapshot, start, CMS};
use serde_json::{json, Value};

fn nested_list(depth: usize) -> String {
    format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
}

#[test]
fn deep_yaml_and_json_bodies_are_refused_by_the_depth_limit() {
    let dc = start("deep-bodies");
    create_cm(&dc, "keep", json!({"a": "b"}));
    let before = snapshot(&dc, &format!("{CMS}/keep"));
    // 40,000 nested flow lists took ~6 s of libyaml time before the pre-scan.
    let yaml = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: deep}}\ndata: {{x: {}}}\n",
        nested_list(40_000)
    );
    let r = request(&dc, "POST", CMS, Some("application/yaml"), yaml.as_bytes());
    assert_eq!(r.code, 400, "{}", r.text());
    assert_eq!(r.json()["reason"], "BadRequest");
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .contains("yaml: exceeded max depth of 100"),
        "{}",
        r.text()
    );
    let body = format!(
        "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"deep\"}},\"data\":{{\"x\":{}}}}}",
        nested_list(500)
    );
    for (method, path) in [("POST", CMS.to_string()), ("PUT", format!("{CMS}/keep"))] {
        let r = request(
            &dc,
            method,
            &path,
            Some("application/json"),
            body.as_bytes(),
        );
        assert_eq!(r.code, 400, "{method}: {}", r.text());
        assert!(
            r.text().contains("exceeded max depth of 100"),
            "{method}: {}",
            r.text()
        );
    }
    for ct in [
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
    ] {
        let patch = format!("{{\"data\":{{\"x\":{}}}}}", nested_list(500));
        let r = request(
            &dc,
            "PATCH",
            &format!("{CMS}/keep"),
            Some(ct),
            patch.as_bytes(),
        );
        assert_eq!(r.code, 400, "{ct}: {}", r.text());
        assert!(
            r.text().contains("exceeded max depth of 100"),
            "{ct}: {}",
            r.text()
        );
    }
    // Block-style nesting is bounded after decoding.
    let mut block =
        String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: deep}\ndata:\n");
    for i in 0..120 {
        block += &format!("{}k:\n", " ".repeat(2 + 2 * i));
    }
    let r = request(&dc, "POST", CMS, Some("application/yaml"), block.as_bytes());
    assert_eq!(r.code, 400, "{}", r.text());
    assert_eq!(snapshot(&dc, &format!("{CMS}/keep")), before);
    // The server is still serving.
    assert_eq!(request(&dc, "GET", "/healthz", None, b"").code, 200);
}

const BLOBS: &str = "/apis/example.com/v1/namespaces/default/blobs";

/// A CRD whose `spec` keeps anything: the one place a client may nest freely.
fn blob_crd(dc: &fleetbus_testsupport::DevCluster) {
    let crd = json!({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
        "metadata":{"name":"blobs.example.com"},
        "spec":{"group":"example.com","scope":"Namespaced",
          "names":{"kind":"Blob","plural":"blobs","singular":"blob","listKind":"BlobList"},
          "versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{
            "type":"object","properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}}}]}});
    let r = send(
        dc,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        "application/json",
        &crd,
    );
    assert_eq!(r.code, 201, "{}", r.text());
    fleetbus_testsupport::wait_for_blocking(
        "blobs served",
        std::time::Duration::from_secs(20),
        || {
            let r = request(dc, "GET", BLOBS, None, b"");
            if r.code == 200 {
                Ok(())
            } else {
                Err(r.text())
            }
        },
    );
}

/// Serves the Blob CRD and creates the empty Blob `b` in it; returns its path.
fn create_blob(dc: &fleetbus_testsupport::DevCluster) -> String {
    blob_crd(dc);
    let blob =
        json!({"apiVersion":"example.com/v1","kind":"Blob","metadata":{"name":"b"},"spec":{}});
    let r = send(dc, "POST", BLOBS, "application/json", &blob);
    assert_eq!(r.code, 201, "{}", r.text());
    format!("{BLOBS}/b")
}

#[test]
fn patches_cannot_grow_an_object_past_the_depth_limit() {
    let dc = start("deep-patches");
    let path = create_blob(&dc);
    let deep60: Value = serde_json::from_str(&nested_list(60)).unwrap();
    // Depth 62: accepted.
    let first = json!([{"op": "add", "path": "/spec/a", "value": deep60}]);
    let r = send(&dc, "PATCH", &path, "application/json-patch+json", &first);
    assert_eq!(r.code, 200, "{}", r.text());
    let before = snapshot(&dc, &path);
    // Each body is shallow enough; the result (depth 121) is not.
    let inner = format!("/spec/a{}/-", "/0".repeat(59));
    let grow = json!([{"op": "add", "path": inner, "value": deep60}]);
    let r = send(&dc, "PATCH", &path, "application/json-patch+json", &grow);
    assert_eq!(r.code, 400, "{}", r.text());
    assert!(
        r.text().contains("exceeded max depth of 100"),
        "{}",
        r.text()
    );
    // Merge patch and server-side apply: a 61-deep body under spec.a's deepest list.
    let mut merge = json!({"spec": {"c": deep60.clone()}});
    for _ in 0..40 {
        merge = json!({"spec": {"c": [merge["spec"]["c"].clone()]}});
    }
    let r = send(&dc, "PATCH", &path, "application/merge-patch+json", &merge);
    assert_eq!(r.code, 400, "{}", r.text());
    let mut applied = merge.clone();
    applied["apiVersion"] = json!("example.com/v1");
    applied["kind"] = json!("Blob");
    applied["metadata"] = json!({"name": "b"});
    let r = send(
        &dc,
        "PATCH",
        &format!("{path}?fieldManager=t"),
        "application/apply-patch+yaml",
        &applied,
    );
    assert_eq!(r.code, 400, "{}", r.text());
    // PUT of the same.
    let mut put = before.0.clone();
    put["spec"] = merge["spec"].clone();
    let r = send(&dc, "PUT", &path, "application/json", &put);
    assert_eq!(r.code, 400, "{}", r.text());
    assert_eq!(
        snapshot(&dc, &path),
        before,
        "a refused write changed the store"
    );
}

#[test]
fn an_unreadable_stored_record_is_skipped_and_counted_on_restart() {
    let mut dc = start("corrupt-record");
    create_cm(&dc, "good", json!({"a": "b"}));
    dc.kill9();
    {
        let db = redb::Database::create(dc.data_dir().join("state.redb")).unwrap();
        let table: redb::TableDefinition<'_, &str, &[u8]> = redb::TableDefinition::new("objects");
        let tx = db.begin_write().unwrap();
        {
            let mut t = tx.open_table(table).unwrap();
            let deep = format!(
                "{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"deep\",\"namespace\":\"default\"}},\"x\":{}}}",
                nested_list(3_000)
            );
            t.insert(r#"["","configmaps","default","deep"]"#, deep.as_bytes())
                .unwrap();
            t.insert(
                r#"["","configmaps","default","junk"]"#,
                b"{not json".as_slice(),
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    dc.restart()
        .expect("the server starts despite unreadable records");
    let good = get_json(&dc, &format!("{CMS}/good"));
    assert_eq!(good["data"]["a"], "b");
    let debug = get_json(&dc, "/debug/store");
    assert_eq!(debug["skippedRecords"], 2, "{debug}");
    assert_eq!(
        request(&dc, "GET", &format!("{CMS}/junk"), None, b"").code,
        404
    );
    // The name is free again: creating it replaces the unreadable record.
    create_cm(&dc, "junk", json!({"c": "d"}));
    dc.restart().unwrap();
    assert_eq!(get_json(&dc, "/debug/store")["skippedRecords"], 1);
    assert_eq!(get_json(&dc, &format!("{CMS}/junk"))["data"]["c"], "d");
}

#[test]
fn repeated_patches_cannot_grow_an_object_past_the_body_limit() {
    let dc = start("big-patches");
    let path = create_blob(&dc);
    // Each body is 1 MiB, well under the 3 MiB body limit; the third result is not.
    let mib = "x".repeat(1024 * 1024);
    for i in 0..2 {
        let p = json!([{"op": "add", "path": format!("/spec/k{i}"), "value": mib}]);
        let r = send(&dc, "PATCH", &path, "application/json-patch+json", &p);
        assert_eq!(r.code, 200, "patch {i}: {:.200}", r.text());
    }
    let before = snapshot(&dc, &path);
    let p = json!([{"op": "add", "path": "/spec/k2", "value": mib}]);
    let r = send(&dc, "PATCH", &path, "application/json-patch+json", &p);
    assert_eq!(r.code, 413, "{:.200}", r.text());
    assert_eq!(r.json()["reason"], "RequestEntityTooLarge");
    let m = json!({"spec": {"k2": mib}});
    let r = send(&dc, "PATCH", &path, "application/merge-patch+json", &m);
    assert_eq!(r.code, 413, "{:.200}", r.text());
    assert_eq!(
        snapshot(&dc, &path),
        before,
        "a refused write changed the store"
    );
}
