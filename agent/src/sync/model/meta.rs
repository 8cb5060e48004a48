//! Reading an object's metadata: annotations, who made it, whether it is
//! being deleted. The one place the `/metadata/annotations` pointer is
//! written, so every stage reads an annotation the same way.

use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::well_known;
use kube::core::GroupVersionKind;
use serde_json::{Map, Value};

/// The annotations of `obj`, when it has a map of them.
pub fn annotations(obj: &Value) -> Option<&Map<String, Value>> {
    obj.pointer("/metadata/annotations")
        .and_then(Value::as_object)
}

/// The annotations of `obj`, to change, when it has a map of them.
pub fn annotations_mut(obj: &mut Value) -> Option<&mut Map<String, Value>> {
    obj.pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
}

/// The value of annotation `key` of `obj`, when it is a string.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    annotations(obj)
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// Whether `obj` carries annotation `key`, whatever its value.
pub fn has_annotation(obj: &Value, key: &str) -> bool {
    annotations(obj).is_some_and(|a| a.contains_key(key))
}

/// The cluster `obj` is a copy from (its origin-cluster annotation); None
/// for an original.
pub fn origin_cluster(obj: &Value) -> Option<&str> {
    annotation(obj, well_known::ANNOTATION_ORIGIN_CLUSTER)
}

/// Whether `obj` is one of our originals (not a copy someone else made).
pub fn is_original(obj: &Value) -> bool {
    !has_annotation(obj, well_known::ANNOTATION_ORIGIN_CLUSTER)
}

/// Whether `obj` is being deleted (it has a deletionTimestamp): it is
/// neither written nor collected again (see ARCHITECTURE.md, invariants).
pub fn is_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
}

/// `Kind ns/name from origin` for messages.
pub fn describe_key(key: &ObjectKey) -> String {
    match &key.namespace {
        Some(ns) => format!("{} {}/{}", key.kind, ns, key.name),
        None => format!("{} {}", key.kind, key.name),
    }
}

/// `group/version Kind` for messages (`v1 Secret` for the core group).
pub fn describe_gvk(gvk: &GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        format!("{} {}", gvk.version, gvk.kind)
    } else {
        format!("{}/{} {}", gvk.group, gvk.version, gvk.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn presence_counts_any_value_and_annotation_only_strings() {
        let obj = json!({"metadata": {"annotations": {"a": "x", "b": 1}}});
        assert_eq!(annotation(&obj, "a"), Some("x"));
        assert_eq!(annotation(&obj, "b"), None);
        assert!(has_annotation(&obj, "b"));
        assert!(!has_annotation(&obj, "c"));
        // Annotations that are not a map are none.
        let odd = json!({"metadata": {"annotations": "a"}});
        assert!(annotations(&odd).is_none() && !has_annotation(&odd, "a"));
    }

    #[test]
    fn a_copy_names_its_origin_and_an_original_none() {
        let copy =
            json!({"metadata": {"annotations": {well_known::ANNOTATION_ORIGIN_CLUSTER: "c1"}}});
        assert_eq!(origin_cluster(&copy), Some("c1"));
        assert!(!is_original(&copy));
        let original = json!({"metadata": {"annotations": {"other": "x"}}});
        assert_eq!(origin_cluster(&original), None);
        assert!(is_original(&original) && is_original(&json!({})));
    }

    #[test]
    fn a_null_deletion_timestamp_is_no_deletion() {
        assert!(!is_terminating(
            &json!({"metadata": {"deletionTimestamp": null}})
        ));
        assert!(is_terminating(
            &json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})
        ));
    }
}
