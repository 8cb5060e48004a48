//! `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`:
//! metadata-only responses (kube's `metadata` client, kube-rs `get_metadata`,
//! `list_metadata`, `metadata_watcher`). kube-apiserver transforms the object it
//! would have returned into `meta.k8s.io/v1` PartialObjectMetadata, on every verb
//! that returns an object and in each watch event.

use serde_json::{json, Value};

/// `apiVersion` of the metadata-only kinds.
pub const API_VERSION: &str = "meta.k8s.io/v1";

/// The object reduced to `{kind: PartialObjectMetadata, apiVersion, metadata}`.
pub fn object(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": API_VERSION,
        "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A list of metadata-only items with the list's own metadata.
pub fn list(meta: Value, items: &[Value]) -> Value {
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": API_VERSION,
        "metadata": meta,
        "items": items.iter().map(object).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_only_metadata() {
        let cm = json!({"kind": "ConfigMap", "apiVersion": "v1",
            "metadata": {"name": "a", "labels": {"x": "y"}}, "data": {"k": "v"}});
        let p = object(&cm);
        assert_eq!(
            p,
            json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                "metadata": {"name": "a", "labels": {"x": "y"}}})
        );
        let l = list(json!({"resourceVersion": "5"}), &[cm]);
        assert_eq!(l["kind"], "PartialObjectMetadataList");
        assert_eq!(l["items"][0], p);
        assert_eq!(l["metadata"]["resourceVersion"], "5");
    }
}
