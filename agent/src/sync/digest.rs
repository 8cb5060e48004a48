//! Digests of desired copies: "did the desired copy change?" answered
//! without keeping the copy (baselines and refusals hold a digest, not a
//! `Value`) and without cloning it to strip the source hash.
//!
//! The digest is SHA-256 over a walk of the JSON value that encodes every
//! node with a type tag and lengths, so two values have the same digest iff
//! they are equal (serde_json maps are sorted, so key order is canonical),
//! the source-hash annotation left out: a source change that does not change
//! the copy (the origin's status, when status is not synced) is no reason to
//! write.

use fleetbus_schemas::well_known;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The digest of a desired copy without its source-hash annotation.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest([u8; 32]);

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Eight bytes tell digests apart in logs and test failures.
        for b in &self.0[..8] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// Where in the object the walk is: only `/metadata/annotations` has a key
/// to leave out.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    Root,
    Metadata,
    Annotations,
    Other,
}

impl Digest {
    /// The digest of `copy` with `metadata.annotations[source-hash]` left out.
    pub fn of_desired(copy: &Value) -> Digest {
        let mut h = Sha256::new();
        feed(&mut h, copy, Place::Root);
        Digest(h.finalize().into())
    }
}

fn feed_str(h: &mut Sha256, s: &str) {
    h.update((s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

fn feed(h: &mut Sha256, v: &Value, place: Place) {
    match v {
        Value::Null => h.update([0u8]),
        Value::Bool(b) => h.update([1u8, u8::from(*b)]),
        Value::Number(n) => {
            // Number's own equality tells 1 from 1.0; so does its text.
            h.update([2u8]);
            feed_str(h, &n.to_string());
        }
        Value::String(s) => {
            h.update([3u8]);
            feed_str(h, s);
        }
        Value::Array(a) => {
            h.update([4u8]);
            h.update((a.len() as u64).to_le_bytes());
            for x in a {
                feed(h, x, Place::Other);
            }
        }
        Value::Object(m) => {
            h.update([5u8]);
            let skip =
                |k: &str| place == Place::Annotations && k == well_known::ANNOTATION_SOURCE_HASH;
            let n = m.keys().filter(|k| !skip(k)).count();
            h.update((n as u64).to_le_bytes());
            for (k, x) in m.iter().filter(|(k, _)| !skip(k)) {
                feed_str(h, k);
                let next = match (place, k.as_str()) {
                    (Place::Root, "metadata") => Place::Metadata,
                    (Place::Metadata, "annotations") => Place::Annotations,
                    _ => Place::Other,
                };
                feed(h, x, next);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::model::meta::annotations_mut;
    use serde_json::json;

    fn copy(hash: &str, data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "c", "namespace": "apps",
                            "annotations": {well_known::ANNOTATION_SOURCE_HASH: hash, "a": "1"}},
               "data": data})
    }

    #[test]
    fn the_source_hash_does_not_count_and_everything_else_does() {
        let a = copy("h1", json!({"k": "v"}));
        assert_eq!(
            Digest::of_desired(&a),
            Digest::of_desired(&copy("h2", json!({"k": "v"})))
        );
        let mut no_hash = a.clone();
        if let Some(m) = annotations_mut(&mut no_hash) {
            m.remove(well_known::ANNOTATION_SOURCE_HASH);
        }
        assert_eq!(Digest::of_desired(&a), Digest::of_desired(&no_hash));
        for other in [
            copy("h1", json!({"k": "w"})),
            copy("h1", json!({"k": "v", "l": "v"})),
            copy("h1", json!({"k": null})),
            copy("h1", json!({"k": 1})),
            copy("h1", json!({"k": 1.0})),
            copy("h1", json!({"k": ["v"]})),
            copy("h1", json!({"kv": ""})),
            copy(
                "h1",
                json!({"k": "v", "annotations": {well_known::ANNOTATION_SOURCE_HASH: "x"}}),
            ),
        ] {
            assert_ne!(
                Digest::of_desired(&a),
                Digest::of_desired(&other),
                "{other}"
            );
        }
        // The source hash is left out only as an annotation, not elsewhere.
        let data_hash = |h: &str| copy("h1", json!({ well_known::ANNOTATION_SOURCE_HASH: h }));
        assert_ne!(
            Digest::of_desired(&data_hash("x")),
            Digest::of_desired(&data_hash("y"))
        );
        // An annotation changed.
        let mut changed = a.clone();
        if let Some(m) = annotations_mut(&mut changed) {
            m.insert("a".to_owned(), json!("2"));
        }
        assert_ne!(Digest::of_desired(&a), Digest::of_desired(&changed));
    }

    #[test]
    fn equal_values_have_equal_digests_and_digests_agree_with_equality_after_stripping() {
        // What `same_desired` did: compare after removing the annotation.
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = annotations_mut(&mut v) {
                m.remove(well_known::ANNOTATION_SOURCE_HASH);
            }
            v
        };
        let values = [
            copy("h1", json!({})),
            copy("h2", json!({})),
            copy("h1", json!({"a": {"b": [1, 2, {"c": true}]}})),
            copy("h1", json!({"a": {"b": [1, 2, {"c": false}]}})),
            json!({"metadata": {}}),
            json!({"metadata": {"annotations": {}}}),
            json!({"metadata": {"annotations": {well_known::ANNOTATION_SOURCE_HASH: "z"}}}),
            json!(null),
            json!([]),
            json!({}),
            json!(""),
        ];
        for x in &values {
            for y in &values {
                assert_eq!(
                    Digest::of_desired(x) == Digest::of_desired(y),
                    strip(x) == strip(y),
                    "{x} vs {y}"
                );
            }
        }
    }
}
