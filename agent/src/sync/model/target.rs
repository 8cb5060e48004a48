//! Where a copy lives: its kind and local key.

use kube::core::GroupVersionKind;
use serde_json::Value;

/// A local object's place: namespace (None if cluster-scoped) and name.
pub type LocalKey = (Option<String>, String);

/// The place of a copy: kind and local key.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target {
    /// `apiVersion` of the copy.
    pub api_version: String,
    /// Kind of the copy.
    pub kind: String,
    /// Namespace, None if cluster-scoped.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl Target {
    /// The place of `obj`, if it names one.
    pub fn of(obj: &Value) -> Option<Target> {
        let s = |p: &str| {
            obj.pointer(p)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
        };
        Some(Target {
            api_version: s("/apiVersion")?.to_owned(),
            kind: s("/kind")?.to_owned(),
            namespace: s("/metadata/namespace").map(str::to_owned),
            name: s("/metadata/name")?.to_owned(),
        })
    }

    /// The kind as kube names it.
    pub fn gvk(&self) -> GroupVersionKind {
        let (group, version) = fleetbus_schemas::subject::split_api_version(&self.api_version);
        GroupVersionKind::gvk(group, version, &self.kind)
    }

    /// The key in the kind's local map.
    pub fn local_key(&self) -> LocalKey {
        (self.namespace.clone(), self.name.clone())
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {}/{}", self.kind, ns, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}
