//! Property test against a real devcluster: random hostile requests on every
//! write verb never crash or stall it, and a refused request leaves the store as
//! it was (same resourceVersion and content, `/debug/writes` unchanged).
//! Short enough for CI (a few seconds); the fuzz targets in `../fuzz` go deeper.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::raw::{create_cm, get_json, request, snapshot, start, CMS};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

#[derive(Debug, Clone)]
enum Body {
    /// Random bytes.
    Bytes(Vec<u8>),
    /// Nesting past the limit (JSON or YAML flow style).
    Deep { depth: usize, yaml: bool },
    /// A ConfigMap with a hostile metadata or data map.
    Object {
        field: &'static str,
        key: String,
        value: Value,
    },
    /// A JSON value that is not an object.
    NotAnObject(Value),
    /// YAML aliases expanding past the reader's budget: `levels` of ten aliases
    /// each ("billion laughs").
    Laughs { levels: usize },
    /// YAML with one anchored scalar of `kib` KiB replayed `copies` times: a body
    /// under 3 MiB that would decode to more scalar bytes than the reader allows.
    Amplified { kib: usize, copies: usize },
}

impl Body {
    fn render(&self) -> (Vec<u8>, bool) {
        match self {
            Body::Bytes(b) => (b.clone(), false),
            Body::Deep { depth, yaml } => {
                let doc = format!("{}1{}", "[".repeat(*depth), "]".repeat(*depth));
                let s = if *yaml {
                    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata: {{k: {doc}}}\n")
                } else {
                    format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"x\"}},\"data\":{{\"k\":{doc}}}}}")
                };
                (s.into_bytes(), *yaml)
            }
            Body::Object { field, key, value } => {
                let mut o =
                    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
                let map = json!({ key.clone(): value.clone() });
                match *field {
                    "labels" | "annotations" => o["metadata"][*field] = map,
                    other => o[other] = map,
                }
                (o.to_string().into_bytes(), false)
            }
            Body::NotAnObject(v) => (v.to_string().into_bytes(), false),
            Body::Laughs { levels } => {
                let mut s = format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\nl0: &l0 [{}]\n",
                    ["lol"; 10].join(", ")
                );
                for i in 1..*levels {
                    s += &format!(
                        "l{i}: &l{i} [{}]\n",
                        vec![format!("*l{}", i - 1); 10].join(", ")
                    );
                }
                (s.into_bytes(), true)
            }
            Body::Amplified { kib, copies } => {
                let s = format!(
                    "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata: {{k: &a {}}}\nc: [{}]\n",
                    "x".repeat(kib * 1024),
                    vec!["*a"; *copies].join(", ")
                );
                (s.into_bytes(), true)
            }
        }
    }
}

fn body() -> impl Strategy<Value = Body> {
    prop_oneof![
        // A blank body is not hostile: a DELETE without one is a plain delete,
        // as kube-apiserver takes it (seen once in CI, deleting the object under test).
        prop::collection::vec(any::<u8>(), 1..200)
            .prop_filter("a blank DELETE body is a valid delete", |b| {
                !b.iter().all(u8::is_ascii_whitespace)
            })
            .prop_map(Body::Bytes),
        (101usize..30_000, any::<bool>()).prop_map(|(depth, yaml)| Body::Deep { depth, yaml }),
        (
            prop::sample::select(vec!["labels", "annotations", "data", "binaryData"]),
            // Always invalid as a key of any of these maps.
            "[ !@#%^&*]{1,3}[a-z]{0,3}",
            prop_oneof![
                Just(json!("v")),
                Just(json!(5)),
                Just(json!(["x"])),
                Just(json!("!!notbase64"))
            ],
        )
            .prop_map(|(field, key, value)| Body::Object { field, key, value }),
        prop_oneof![
            Just(json!(5)),
            Just(json!("x")),
            Just(json!([])),
            Just(json!(null))
        ]
        .prop_map(Body::NotAnObject),
        (6usize..=7).prop_map(|levels| Body::Laughs { levels }),
        // At least 1.5 MiB × 9 = 13.5 MiB decoded, past the reader's 12 MiB.
        (1536usize..2560, 8usize..30).prop_map(|(kib, copies)| Body::Amplified { kib, copies }),
    ]
}

#[derive(Debug, Clone, Copy)]
enum Verb {
    Post,
    Put,
    JsonPatch,
    MergePatch,
    StrategicPatch,
    Apply,
    Delete,
}

fn verb() -> impl Strategy<Value = Verb> {
    prop::sample::select(vec![
        Verb::Post,
        Verb::Put,
        Verb::JsonPatch,
        Verb::MergePatch,
        Verb::StrategicPatch,
        Verb::Apply,
        Verb::Delete,
    ])
}

#[test]
fn hostile_requests_are_refused_without_changing_the_store() {
    let dc = start("proptest");
    create_cm(&dc, "x", json!({"k": "v"}));
    let path = format!("{CMS}/x");
    let mut runner = TestRunner::new(Config {
        cases: std::env::var("FLEETBUS_PROPTEST_CASES")
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(48),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(verb(), body()), |(verb, body)| {
            let before = snapshot(&dc, &path);
            let (bytes, yaml) = body.render();
            let ct = if yaml { "application/yaml" } else { "application/json" };
            let r = match verb {
                Verb::Post => request(&dc, "POST", CMS, Some(ct), &bytes),
                Verb::Put => request(&dc, "PUT", &path, Some(ct), &bytes),
                Verb::JsonPatch => request(&dc, "PATCH", &path, Some("application/json-patch+json"), &bytes),
                Verb::MergePatch => request(&dc, "PATCH", &path, Some("application/merge-patch+json"), &bytes),
                Verb::StrategicPatch => {
                    request(&dc, "PATCH", &path, Some("application/strategic-merge-patch+json"), &bytes)
                }
                Verb::Apply => request(
                    &dc,
                    "PATCH",
                    &format!("{path}?fieldManager=p"),
                    Some("application/apply-patch+yaml"),
                    &bytes,
                ),
                Verb::Delete => request(&dc, "DELETE", &path, Some("application/json"), &bytes),
            };
            // Every generated body is invalid, except `[]` as a JSON patch: a
            // valid no-op (200, nothing written).
            let noop = matches!((&verb, &body), (Verb::JsonPatch, Body::NotAnObject(Value::Array(a))) if a.is_empty());
            if noop {
                prop_assert_eq!(r.code, 200, "{}", r.text());
            } else {
                prop_assert!(
                    (400..500).contains(&r.code),
                    "{verb:?} {body:?} was not refused: {} {}",
                    r.code,
                    r.text()
                );
                let status = r.json();
                // Refused by the YAML reader's budget, not after decoding it whole.
                if matches!(body, Body::Laughs { .. } | Body::Amplified { .. })
                    && matches!(verb, Verb::Post | Verb::Put | Verb::Apply)
                {
                    prop_assert!(r.text().contains("budget breached"), "{verb:?} {body:?}: {}", r.text());
                }
                prop_assert_eq!(&status["kind"], "Status");
                prop_assert_eq!(status["code"].as_u64(), Some(u64::from(r.code)));
            }
            prop_assert_eq!(snapshot(&dc, &path), before, "{:?} {:?} changed the store", verb, body);
            prop_assert_eq!(request(&dc, "GET", "/healthz", None, b"").code, 200);
            Ok(())
        })
        .unwrap();
    assert_eq!(get_json(&dc, &path)["data"]["k"], "v");
}
