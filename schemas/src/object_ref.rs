//! [`ObjectRef`]: the identity of one Kubernetes object, as carried in JSON messages and CRDs.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Identity of one object: `{apiVersion, kind, namespace, name, uid?, resourceVersion?}`.
///
/// `namespace` is always written (`null` for cluster-scoped objects); `uid` and
/// `resourceVersion` are written only when known, so messages that never carried them
/// (the reported state's `source`) keep their wire format.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `apiVersion` of the object (`v1`, `apps/v1`).
    pub api_version: String,
    /// Kind of the object.
    pub kind: String,
    /// Namespace, null for cluster-scoped objects.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Name of the object.
    pub name: String,
    /// `metadata.uid`, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// `metadata.resourceVersion`, if known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
}

impl ObjectRef {
    /// A reference without uid and resourceVersion.
    pub fn new(api_version: &str, kind: &str, namespace: Option<&str>, name: &str) -> Self {
        Self {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
            uid: None,
            resource_version: None,
        }
    }

    /// Reads the reference from an object's `apiVersion`, `kind` and `metadata`; `None`
    /// when `apiVersion`, `kind` or `metadata.name` is missing.
    pub fn from_object(object: &serde_json::Value) -> Option<Self> {
        let text = |v: Option<&serde_json::Value>| v.and_then(|v| v.as_str()).map(str::to_owned);
        let meta = object.get("metadata");
        Some(Self {
            api_version: text(object.get("apiVersion"))?,
            kind: text(object.get("kind"))?,
            namespace: text(meta.and_then(|m| m.get("namespace"))),
            name: text(meta.and_then(|m| m.get("name")))?,
            uid: text(meta.and_then(|m| m.get("uid"))),
            resource_version: text(meta.and_then(|m| m.get("resourceVersion"))),
        })
    }
}

impl std::fmt::Display for ObjectRef {
    /// `apiVersion/kind/namespace/name` (`v1/ConfigMap/team-a/settings`; `_` for no namespace).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.api_version,
            self.kind,
            self.namespace.as_deref().unwrap_or("_"),
            self.name
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wire_form_keeps_null_namespace_and_skips_unknown_ids() {
        let r = ObjectRef::new("rbac.authorization.k8s.io/v1", "ClusterRole", None, "x");
        assert_eq!(
            serde_json::to_value(&r).unwrap(),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "namespace": null, "name": "x"})
        );
        let full: ObjectRef = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "namespace": "a", "name": "b",
            "uid": "u", "resourceVersion": "7"
        }))
        .unwrap();
        assert_eq!(full.uid.as_deref(), Some("u"));
        assert_eq!(full.resource_version.as_deref(), Some("7"));
        assert_eq!(full.to_string(), "v1/ConfigMap/a/b");
        // A reader accepts an absent namespace as cluster-scoped.
        let absent: ObjectRef =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "name": "a"}))
                .unwrap();
        assert_eq!(absent.namespace, None);
    }

    #[test]
    fn from_object_reads_metadata() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "b", "namespace": "a", "uid": "u", "resourceVersion": "7"}});
        let r = ObjectRef::from_object(&obj).unwrap();
        assert_eq!(
            r,
            ObjectRef {
                uid: Some("u".into()),
                resource_version: Some("7".into()),
                ..ObjectRef::new("v1", "ConfigMap", Some("a"), "b")
            }
        );
        assert_eq!(ObjectRef::from_object(&json!({"kind": "ConfigMap"})), None);
    }
}
