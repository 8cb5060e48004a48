//! Every decoder a request body or query string reaches, callable as a library:
//! the entry points of the fuzz targets (`tests/devcluster/fuzz/`) and the
//! property tests. Each returns the decoded value or the refusal a client gets.

use crate::patch::{self, PatchType};
use crate::resources::{self, ResourceDef};
use crate::status::ApiError;
use serde_json::Value;

/// What a client is told when its input is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// HTTP status code (4xx for bad input).
    pub code: u16,
    /// metav1.Status reason.
    pub reason: &'static str,
    /// metav1.Status message.
    pub message: String,
}

impl From<ApiError> for Refusal {
    fn from(e: ApiError) -> Self {
        Refusal {
            code: e.code,
            reason: e.reason,
            message: e.message,
        }
    }
}

/// A create/update body of content type `ct` (JSON, YAML or protobuf).
pub fn object_body(bytes: &[u8], ct: &str) -> Result<Value, Refusal> {
    Ok(crate::api::request::decode_object_as(bytes, ct)?)
}

/// A server-side apply body (JSON or YAML).
pub fn apply_body(bytes: &[u8]) -> Result<Value, Refusal> {
    Ok(crate::write::parse_apply_body(bytes)?)
}

/// A json/merge/strategic PATCH body applied to `live`, as `def`.
pub fn patch(
    pt: PatchType,
    live: &Value,
    body: &[u8],
    def: &ResourceDef,
) -> Result<Value, Refusal> {
    patch::apply_patch(pt, live, body, def).map_err(|e| Refusal {
        code: e.code(),
        reason: e.reason(),
        message: e.to_string(),
    })
}

/// A DELETE body (DeleteOptions as JSON or protobuf) and the query string.
pub fn delete_options(bytes: &[u8], ct: &str, query: &str) -> Result<Value, Refusal> {
    let v = crate::delete_body::decode(bytes, ct)?;
    let q = crate::api::request::Query::parse(Some(query));
    crate::delete_body::options(&q.0, &v)?;
    Ok(v)
}

/// The list/watch/write query parameters the server parses: selectors,
/// `fieldValidation`, `dryRun`, `force`, `limit`, `timeoutSeconds`.
pub fn query(query: &str, def: &ResourceDef) -> Result<(), Refusal> {
    let q = crate::api::request::Query::parse(Some(query));
    crate::selectors::LabelSelector::parse(q.get("labelSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    crate::selectors::FieldSelector::parse(
        q.get("fieldSelector").unwrap_or(""),
        &def.group,
        &def.plural,
    )
    .map_err(|e| ApiError::bad_request(e.to_string()))?;
    q.field_validation()?;
    q.dry_run()?;
    q.force()?;
    Ok(())
}

/// Whether a decoded value is within the nesting limit stored objects keep.
pub fn within_limits(v: &Value) -> bool {
    crate::limits::check_value(v).is_ok()
}

/// The built-in ConfigMap resource, for targets that need a `ResourceDef`.
pub fn configmaps() -> Option<ResourceDef> {
    resources::builtins()
        .into_iter()
        .find(|d| d.group.is_empty() && d.plural == "configmaps")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    const CONTENT_TYPES: &[&str] = &[
        "application/json",
        "application/yaml",
        "application/vnd.kubernetes.protobuf",
        "",
        "text/plain",
    ];

    /// Nesting of `depth` levels mixing lists and maps, JSON or YAML flow style.
    fn deep(depth: usize, kinds: &[bool], yaml: bool) -> String {
        let mut open = String::new();
        let mut close = String::new();
        for i in 0..depth {
            if kinds[i % kinds.len()] {
                open.push('[');
                close.insert(0, ']');
            } else {
                open.push_str(if yaml { "{k: " } else { "{\"k\": " });
                close.insert(0, '}');
            }
        }
        format!("{open}1{close}")
    }

    /// A ConfigMap whose keys `l0`..`l{levels}` hold "billion laughs": ten aliases of
    /// the level before each, 10^levels strings from a few hundred bytes.
    fn laughs(levels: usize) -> String {
        let mut doc = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\nl0: &l0 [{}]\n",
            ["lol"; 10].join(", ")
        );
        for i in 1..levels {
            let refs = vec![format!("*l{}", i - 1); 10].join(", ");
            doc += &format!("l{i}: &l{i} [{refs}]\n");
        }
        doc
    }

    /// Alias expansion is bounded: a million strings from 400 bytes (and a
    /// billion) are refused with a 4xx, quickly, by every YAML entry point.
    #[test]
    fn alias_bombs_are_refused() {
        let started = std::time::Instant::now();
        for levels in [6, 9] {
            let body = laughs(levels);
            let r = object_body(body.as_bytes(), "application/yaml").unwrap_err();
            assert_eq!(r.code, 400, "{r:?}");
            assert!(r.message.contains("budget breached"), "{}", r.message);
            assert_eq!(apply_body(body.as_bytes()).unwrap_err().code, 400);
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
        let v = object_body(laughs(2).as_bytes(), "application/yaml").unwrap();
        assert_eq!(v["l1"][9][9], "lol");
    }

    /// One anchored 2 MiB scalar replayed eight times is 16 MiB of strings from a
    /// body under the 3 MiB limit: past the reader's scalar budget.
    #[test]
    fn scalars_amplified_by_aliases_are_refused() {
        let big = "x".repeat(2 << 20);
        let body = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata: {{a: &a {big}}}\ncopies: [{}]\n",
            ["*a"; 8].join(", ")
        );
        assert!(body.len() < crate::body::MAX_BODY);
        let r = object_body(body.as_bytes(), "application/yaml").unwrap_err();
        assert_eq!(r.code, 400, "{r:?}");
        assert!(r.message.contains("budget breached"), "{}", r.message);
        assert_eq!(apply_body(body.as_bytes()).unwrap_err().code, 400);
        let once =
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata: {{a: {big}}}\n");
        assert!(object_body(once.as_bytes(), "application/yaml").is_ok());
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(8, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".{0,10}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn any_bytes_decode_or_are_refused_with_a_4xx(
            bytes in prop::collection::vec(any::<u8>(), 0..512),
            ct in prop::sample::select(CONTENT_TYPES),
        ) {
            match object_body(&bytes, ct) {
                Ok(v) => prop_assert!(v.is_object() && within_limits(&v)),
                Err(r) => prop_assert!((400..500).contains(&r.code), "{r:?}"),
            }
            if let Err(r) = apply_body(&bytes) {
                prop_assert_eq!(r.code, 400);
            }
            if let Err(r) = delete_options(&bytes, ct, "") {
                prop_assert!((400..500).contains(&r.code), "{r:?}");
            }
        }

        /// Bounded work: anything past the limit is refused by the pre-scan
        /// (its message), never handed to the decoder (which would say
        /// "recursion limit exceeded" after spending time on it).
        #[test]
        fn too_deep_bodies_are_refused_before_decoding(
            depth in (crate::limits::MAX_DEPTH + 1)..20_000usize,
            kinds in prop::collection::vec(any::<bool>(), 1..5),
            yaml in any::<bool>(),
        ) {
            let ct = if yaml { "application/yaml" } else { "application/json" };
            let doc = deep(depth, &kinds, yaml);
            let body = if yaml {
                format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x}}\ndata: {{x: {doc}}}\n")
            } else {
                format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"data\":{{\"x\":{doc}}}}}")
            };
            let r = object_body(body.as_bytes(), ct).unwrap_err();
            prop_assert_eq!(r.code, 400);
            prop_assert!(r.message.contains("exceeded max depth of 100"), "{}", r.message);
            let def = configmaps().unwrap();
            let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
            let patch_body = format!("{{\"data\":{{\"x\":{}}}}}", deep(depth, &kinds, false));
            for pt in [PatchType::Merge, PatchType::Strategic] {
                let r = patch(pt, &live, patch_body.as_bytes(), &def).unwrap_err();
                prop_assert!(r.message.contains("exceeded max depth"), "{}", r.message);
            }
            let r = apply_body(patch_body.as_bytes()).unwrap_err();
            prop_assert!(r.message.contains("exceeded max depth"), "{}", r.message);
        }

        #[test]
        fn structured_bodies_and_patches_never_panic(v in json_value(), p in json_value()) {
            let bytes = serde_json::to_vec(&v).unwrap();
            if let Ok(o) = object_body(&bytes, "application/json") {
                prop_assert!(within_limits(&o));
            }
            let yaml = crate::yaml::to_string(&v).unwrap();
            let _ = object_body(yaml.as_bytes(), "application/yaml");
            let def = configmaps().unwrap();
            let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "b"}});
            let pbytes = serde_json::to_vec(&p).unwrap();
            for pt in [PatchType::Json, PatchType::Merge, PatchType::Strategic] {
                if let Err(r) = patch(pt, &live, &pbytes, &def) {
                    prop_assert!((400..500).contains(&r.code), "{r:?}");
                }
            }
            let _ = delete_options(&bytes, "application/json", "");
        }

        #[test]
        fn query_strings_never_panic(q in ".{0,80}", sel in "[a-z!=(), .]{0,40}") {
            let def = configmaps().unwrap();
            let _ = query(&q, &def);
            let enc: String = url::form_urlencoded::byte_serialize(sel.as_bytes()).collect();
            let r = query(&format!("labelSelector={enc}&fieldSelector={enc}"), &def);
            if let Err(r) = r {
                prop_assert_eq!(r.code, 400);
            }
        }
    }
}
