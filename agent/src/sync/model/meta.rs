//! Reading an object's metadata: annotations, who made it, whether it is
//! being deleted. The one place the `/metadata/annotations` pointer is
//! written, so every stage reads an annotation the same way.

use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::well_known;
use kube::core::GroupVersionKind;
use serde_json::{Map, Value};

/// Keeps of `metadata.managedFields` only what sync reads of a stored object
/// (a local object as the watch saw it, a baseline): each entry's manager,
/// operation, time and subresource (who changed a copy, whether status was
/// returned). `fieldsV1`, the set of every field each manager owns, is a
/// good part of a parsed object's size and is never read from these
/// (docs/design/memory.md). A stored object is never sent back with its
/// managedFields (see `mutate::unmanage`).
pub fn compact_managed_fields(obj: &mut Value) {
    let Some(entries) = obj
        .pointer_mut("/metadata/managedFields")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for e in entries {
        if let Some(m) = e.as_object_mut() {
            m.retain(|k, _| matches!(k.as_str(), "manager" | "operation" | "time" | "subresource"));
        }
    }
}

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

/// The namespace and name of an object.
pub fn local_key(obj: &Value) -> Option<super::LocalKey> {
    let name = obj.pointer("/metadata/name").and_then(Value::as_str)?;
    let ns = obj
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .map(str::to_owned);
    Some((ns, name.to_owned()))
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

/// A reference to the ResourceSyncRule `name`, for the Events raised on it.
pub fn rule_ref(name: &str) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(fleetbus_schemas::well_known::API_VERSION.to_owned()),
        kind: Some("ResourceSyncRule".to_owned()),
        name: Some(name.to_owned()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compacting_keeps_who_changed_what_when_and_drops_the_field_sets() {
        let entry = |manager: &str| {
            json!({"manager": manager, "operation": "Update", "apiVersion": "v1",
                   "time": "2026-11-27T01:00:00Z", "fieldsType": "FieldsV1",
                   "subresource": "status", "fieldsV1": {"f:data": {"f:v": {}}}})
        };
        let mut obj = json!({"metadata": {"name": "c", "managedFields": [entry("a"), entry("b")]},
                             "data": {"v": "1"}});
        let before = obj.clone();
        compact_managed_fields(&mut obj);
        let kept = json!({"manager": "a", "operation": "Update",
                          "time": "2026-11-27T01:00:00Z", "subresource": "status"});
        assert_eq!(obj["metadata"]["managedFields"][0], kept);
        assert_eq!(obj["metadata"]["managedFields"][1]["manager"], "b");
        // Nothing else changes, and a second pass changes nothing.
        assert_eq!(obj["data"], before["data"]);
        let once = obj.clone();
        compact_managed_fields(&mut obj);
        assert_eq!(obj, once);
        let mut bare = json!({"metadata": {"name": "c"}});
        compact_managed_fields(&mut bare);
        assert_eq!(bare, json!({"metadata": {"name": "c"}}));
    }

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
