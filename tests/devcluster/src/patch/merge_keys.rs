//! How each list field merges: by merge keys, as a set, or atomically.
//!
//! Built-in kinds use a table transcribed from the `patchMergeKey` /
//! `patchStrategy` struct tags of `k8s.io/api` (core/v1, apps/v1, batch/v1) and
//! ObjectMeta. Custom resources read `x-kubernetes-list-type` and
//! `x-kubernetes-list-map-keys` from their openAPIV3Schema, as kube-apiserver
//! does for server-side apply.

use crate::resources::ResourceDef;
use serde_json::Value;

/// How a list merges (strategic merge patch and server-side apply).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListKind {
    /// A list of objects identified by these key fields (the first is the
    /// strategic-merge `patchMergeKey`).
    Map(Vec<String>),
    /// A list of primitives merged as a set (`finalizers`).
    Set,
    /// Replaced whole.
    Atomic,
}

impl ListKind {
    fn map(key: &str) -> ListKind {
        ListKind::Map(vec![key.to_string()])
    }
}

/// Where the PodSpec sits inside each workload kind.
fn pod_spec_prefix(group: &str, kind: &str) -> Option<&'static [&'static str]> {
    match (group, kind) {
        ("", "Pod") => Some(&["spec"]),
        ("", "PodTemplate") => Some(&["template", "spec"]),
        ("", "ReplicationController")
        | ("apps", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch", "Job") => Some(&["spec", "template", "spec"]),
        ("batch", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    }
}

/// Lists inside a PodSpec, `rest` being the path below the PodSpec.
fn pod_spec_list(rest: &[&str]) -> Option<ListKind> {
    const CONTAINER_LISTS: [&str; 3] = ["containers", "initContainers", "ephemeralContainers"];
    match rest {
        [field] => match *field {
            "containers"
            | "initContainers"
            | "ephemeralContainers"
            | "imagePullSecrets"
            | "schedulingGates"
            | "volumes"
            | "resourceClaims" => Some(ListKind::map("name")),
            "hostAliases" => Some(ListKind::map("ip")),
            "topologySpreadConstraints" => Some(ListKind::map("topologyKey")),
            _ => None,
        },
        [list, field] if CONTAINER_LISTS.contains(list) => match *field {
            "ports" => Some(ListKind::map("containerPort")),
            "env" => Some(ListKind::map("name")),
            "volumeMounts" => Some(ListKind::map("mountPath")),
            "volumeDevices" => Some(ListKind::map("devicePath")),
            _ => None,
        },
        [list, "resources", "claims"] if CONTAINER_LISTS.contains(list) => {
            Some(ListKind::map("name"))
        }
        _ => None,
    }
}

/// The merge behaviour of the list at `path` (field names from the object
/// root, list indices omitted) for objects of `def`.
pub fn list_kind(def: &ResourceDef, path: &[&str]) -> ListKind {
    if def.custom {
        return def
            .schema
            .as_ref()
            .map_or(ListKind::Atomic, |s| schema_list_kind(s, path));
    }
    builtin_list_kind(&def.group, &def.kind, path)
}

/// Table lookup for built-in kinds.
pub fn builtin_list_kind(group: &str, kind: &str, path: &[&str]) -> ListKind {
    // ObjectMeta, wherever it appears (object root or a pod template).
    match path {
        [.., "metadata", "ownerReferences"] => return ListKind::map("uid"),
        [.., "metadata", "finalizers"] => return ListKind::Set,
        _ => {}
    }
    if let Some(prefix) = pod_spec_prefix(group, kind) {
        if let Some(rest) = path.strip_prefix(prefix) {
            if let Some(k) = pod_spec_list(rest) {
                return k;
            }
        }
    }
    match (group, kind, path) {
        (_, _, ["status", "conditions"]) => ListKind::map("type"),
        ("", "Service", ["spec", "ports"]) => ListKind::map("port"),
        ("", "ServiceAccount", ["secrets"]) => ListKind::map("name"),
        ("", "Node", ["status", "addresses"]) => ListKind::map("type"),
        ("", "Node", ["spec", "podCIDRs"]) => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

/// Follows `path` through an openAPIV3Schema and reads the list extensions.
fn schema_list_kind(schema: &Value, path: &[&str]) -> ListKind {
    let mut node = schema;
    for field in path {
        // Descend through list items transparently: paths omit indices.
        while node.get("type").and_then(Value::as_str) == Some("array") {
            match node.get("items") {
                Some(items) => node = items,
                None => return ListKind::Atomic,
            }
        }
        let next = node
            .get("properties")
            .and_then(|p| p.get(*field))
            .or_else(|| node.get("additionalProperties").filter(|a| a.is_object()));
        match next {
            Some(n) => node = n,
            None => return ListKind::Atomic,
        }
    }
    match node.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<String> = node
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            if keys.is_empty() {
                ListKind::Atomic
            } else {
                ListKind::Map(keys)
            }
        }
        Some("set") => ListKind::Set,
        _ => ListKind::Atomic,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pod_templates_get_pod_spec_keys() {
        let c = ["spec", "template", "spec", "containers"];
        assert_eq!(
            builtin_list_kind("apps", "Deployment", &c),
            ListKind::map("name")
        );
        assert_eq!(
            builtin_list_kind("apps", "StatefulSet", &c),
            ListKind::map("name")
        );
        assert_eq!(builtin_list_kind("batch", "Job", &c), ListKind::map("name"));
        let cj = [
            "spec",
            "jobTemplate",
            "spec",
            "template",
            "spec",
            "containers",
            "env",
        ];
        assert_eq!(
            builtin_list_kind("batch", "CronJob", &cj),
            ListKind::map("name")
        );
        let ports = ["spec", "containers", "ports"];
        assert_eq!(
            builtin_list_kind("", "Pod", &ports),
            ListKind::map("containerPort")
        );
        let mounts = ["spec", "initContainers", "volumeMounts"];
        assert_eq!(
            builtin_list_kind("", "Pod", &mounts),
            ListKind::map("mountPath")
        );
        // The same path on a kind without a PodSpec there is atomic.
        assert_eq!(builtin_list_kind("", "ConfigMap", &c), ListKind::Atomic);
        let args = ["spec", "template", "spec", "containers", "args"];
        assert_eq!(
            builtin_list_kind("apps", "Deployment", &args),
            ListKind::Atomic
        );
        let tol = ["spec", "template", "spec", "tolerations"];
        assert_eq!(
            builtin_list_kind("apps", "Deployment", &tol),
            ListKind::Atomic
        );
    }

    #[test]
    fn metadata_service_and_conditions() {
        let fin = ["metadata", "finalizers"];
        assert_eq!(builtin_list_kind("", "ConfigMap", &fin), ListKind::Set);
        let own = ["metadata", "ownerReferences"];
        assert_eq!(
            builtin_list_kind("apps", "ReplicaSet", &own),
            ListKind::map("uid")
        );
        let sp = ["spec", "ports"];
        assert_eq!(builtin_list_kind("", "Service", &sp), ListKind::map("port"));
        let cond = ["status", "conditions"];
        assert_eq!(
            builtin_list_kind("apps", "Deployment", &cond),
            ListKind::map("type")
        );
    }

    #[test]
    fn crd_schema_extensions() {
        let schema = json!({"type":"object","properties":{"spec":{"type":"object","properties":{
            "items":{"type":"array","x-kubernetes-list-type":"map","x-kubernetes-list-map-keys":["id"],
                "items":{"type":"object","properties":{"tags":{"type":"array","x-kubernetes-list-type":"set","items":{"type":"string"}}}}},
            "plain":{"type":"array","items":{"type":"string"}}}}}});
        let def = ResourceDef {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            list_kind: "WidgetList".into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            namespaced: true,
            short_names: vec![],
            categories: vec![],
            subresources: Default::default(),
            schema: Some(schema),
            custom: true,
        };
        assert_eq!(list_kind(&def, &["spec", "items"]), ListKind::map("id"));
        assert_eq!(list_kind(&def, &["spec", "items", "tags"]), ListKind::Set);
        assert_eq!(list_kind(&def, &["spec", "plain"]), ListKind::Atomic);
        assert_eq!(list_kind(&def, &["spec", "nope"]), ListKind::Atomic);
    }
}
