//! Content hash: sha256 over a canonical JSON of the object without server-managed metadata.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// `metadata` fields the API server changes on its own; excluded from the content hash
/// so that only real content changes produce a new hash.
pub const VOLATILE_METADATA_FIELDS: [&str; 7] = [
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
];

/// The object with [`VOLATILE_METADATA_FIELDS`] removed from `metadata` (everything else,
/// including `status`, is kept). Idempotent.
pub fn normalize_for_hash(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in VOLATILE_METADATA_FIELDS {
            meta.remove(field);
        }
    }
    out
}

/// Canonical JSON: no whitespace, object members sorted by key (byte order of the UTF-8
/// key), strings and numbers as serde_json writes them. Independent of map insertion order.
pub fn canonical_json(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<_> = map.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                write_canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// Lowercase hex sha256 of the canonical JSON of the normalized object.
pub fn content_hash(object: &Value) -> String {
    let digest = Sha256::digest(canonical_json(&normalize_for_hash(object)).as_bytes());
    hex::encode(digest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn canonical_form() {
        let v = json!({"b": [1, 2.5, "x\"y"], "a": {"d": null, "c": true}});
        assert_eq!(
            canonical_json(&v),
            r#"{"a":{"c":true,"d":null},"b":[1,2.5,"x\"y"]}"#
        );
    }

    #[test]
    fn hash_ignores_volatile_metadata_only() {
        let a = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "resourceVersion": "1", "uid": "u1"}, "data": {"k": "v"}});
        let b = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "resourceVersion": "2", "uid": "u2",
                         "managedFields": [{"manager": "kubectl"}]}, "data": {"k": "v"}});
        let c = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x"}, "data": {"k": "w"}});
        assert_eq!(content_hash(&a), content_hash(&b));
        assert_ne!(content_hash(&a), content_hash(&c));
        assert_eq!(content_hash(&a).len(), 64);
        // Pinned: a change here changes every hash on the wire.
        assert_eq!(
            content_hash(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
