//! Where a copy lives: its kind and local key.

use std::ops::Deref;
use std::sync::Arc;

use kube::core::GroupVersionKind;
use serde_json::Value;

/// A local object's place: namespace (None if cluster-scoped) and name.
pub type LocalKey = (Option<String>, String);

/// The place of a copy: kind and local key, shared. Every map of the
/// engine that is keyed by copy (the plan's index and tallies, baselines,
/// held copies, watch times) holds a clone of it: one allocation per copy,
/// a pointer per map, instead of four strings per map (docs/design/memory.md).
/// Compares, hashes and orders as its [`Place`]; reads its fields
/// through `Deref`.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Target(Arc<Place>);

/// What a [`Target`] names.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    /// `apiVersion` of the copy.
    pub api_version: String,
    /// Kind of the copy.
    pub kind: String,
    /// Namespace, None if cluster-scoped.
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
}

impl From<Place> for Target {
    fn from(place: Place) -> Self {
        Target(Arc::new(place))
    }
}

impl Deref for Target {
    type Target = Place;

    fn deref(&self) -> &Place {
        &self.0
    }
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl Target {
    /// The place of `obj`, if it names one.
    pub fn of(obj: &Value) -> Option<Target> {
        let s = |p: &str| {
            obj.pointer(p)
                .and_then(Value::as_str)
                .filter(|v| !v.is_empty())
        };
        Some(Target::from(Place {
            api_version: s("/apiVersion")?.to_owned(),
            kind: s("/kind")?.to_owned(),
            namespace: s("/metadata/namespace").map(str::to_owned),
            name: s("/metadata/name")?.to_owned(),
        }))
    }

    /// Whether `a` and `b` are one allocation (not only equal).
    #[cfg(test)]
    pub fn same(a: &Target, b: &Target) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
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
