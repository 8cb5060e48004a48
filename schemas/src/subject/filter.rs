//! Wildcard subject filters (for consumers, subscriptions and permissions).

use super::keys::{ObjectKey, CMD, CONFLICT, DRIFT, OBJ, STATUS};
use super::prefix::Prefix;
use super::rollout::{ROLLOUT, VER};
use super::token::{encode_group, encode_namespace, encode_token};

/// A filter over object snapshot subjects; unset fields match any value (`*`).
///
/// ```
/// # use fleetbus_schemas::subject::{ObjectFilter, Prefix};
/// let p = Prefix::default();
/// assert_eq!(ObjectFilter::any().origin("east").to_subject(&p), "fleetbus.obj.east.*.*.*.*.*");
/// assert_eq!(
///     ObjectFilter::any().gvk("", "v1", "ConfigMap").to_subject(&p),
///     "fleetbus.obj.*.core.v1.ConfigMap.*.*"
/// );
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ObjectFilter {
    origin: Option<String>,
    group: Option<String>,
    version: Option<String>,
    kind: Option<String>,
    namespace: Option<Option<String>>,
    name: Option<String>,
}

impl ObjectFilter {
    /// Matches every object snapshot.
    pub fn any() -> Self {
        Self::default()
    }

    /// Only objects published by `origin`.
    pub fn origin(mut self, origin: &str) -> Self {
        self.origin = Some(origin.to_owned());
        self
    }

    /// Only objects of this exact group, version and kind.
    pub fn gvk(mut self, group: &str, version: &str, kind: &str) -> Self {
        self.group = Some(group.to_owned());
        self.version = Some(version.to_owned());
        self.kind = Some(kind.to_owned());
        self
    }

    /// Only objects of this group and kind, any version.
    pub fn group_kind(mut self, group: &str, kind: &str) -> Self {
        self.group = Some(group.to_owned());
        self.kind = Some(kind.to_owned());
        self
    }

    /// Only objects in `namespace`.
    pub fn namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(Some(namespace.to_owned()));
        self
    }

    /// Only cluster-scoped objects.
    pub fn cluster_scoped(mut self) -> Self {
        self.namespace = Some(None);
        self
    }

    /// Only objects named `name`.
    pub fn name(mut self, name: &str) -> Self {
        self.name = Some(name.to_owned());
        self
    }

    /// The subject filter, with `*` for each unset token.
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        let star = || "*".into();
        let tokens = [
            self.origin.as_deref().map_or_else(star, encode_token),
            self.group.as_deref().map_or_else(star, encode_group),
            self.version.as_deref().map_or_else(star, encode_token),
            self.kind.as_deref().map_or_else(star, encode_token),
            self.namespace
                .as_ref()
                .map_or_else(star, |ns| encode_namespace(ns.as_deref())),
            self.name.as_deref().map_or_else(star, encode_token),
        ];
        format!("{prefix}.{OBJ}.{}", tokens.join("."))
    }

    /// True if the filter's subject would match `key`'s subject.
    pub fn matches(&self, key: &ObjectKey) -> bool {
        fn eq(want: &Option<String>, have: &str) -> bool {
            want.as_deref().is_none_or(|w| w == have)
        }
        eq(&self.origin, &key.origin)
            && eq(&self.group, &key.group)
            && eq(&self.version, &key.version)
            && eq(&self.kind, &key.kind)
            && self
                .namespace
                .as_ref()
                .is_none_or(|ns| *ns == key.namespace)
            && eq(&self.name, &key.name)
    }
}

/// `<p>.obj.>`: every object snapshot (the OBJECTS stream's subjects).
pub fn all_objects(prefix: &Prefix) -> String {
    format!("{prefix}.{OBJ}.>")
}

/// `<p>.drift.>`: every drift event (the DRIFT stream's subjects).
pub fn all_drift(prefix: &Prefix) -> String {
    format!("{prefix}.{DRIFT}.>")
}

/// `<p>.status.>`: every reported state (the STATUS stream's subjects).
pub fn all_status(prefix: &Prefix) -> String {
    format!("{prefix}.{STATUS}.>")
}

/// `<p>.conflict.>`: every conflict event (the CONFLICTS stream's subjects).
pub fn all_conflicts(prefix: &Prefix) -> String {
    format!("{prefix}.{CONFLICT}.>")
}

/// `<p>.drift.<cluster>.>`: drift events detected on one cluster.
pub fn drift_of_cluster(prefix: &Prefix, cluster: &str) -> String {
    format!("{prefix}.{DRIFT}.{}.>", encode_token(cluster))
}

/// `<p>.status.<cluster>.>`: state reported by one cluster.
pub fn status_of_cluster(prefix: &Prefix, cluster: &str) -> String {
    format!("{prefix}.{STATUS}.{}.>", encode_token(cluster))
}

/// `<p>.conflict.<cluster>.>`: conflict events detected on one cluster.
pub fn conflicts_of_cluster(prefix: &Prefix, cluster: &str) -> String {
    format!("{prefix}.{CONFLICT}.{}.>", encode_token(cluster))
}

/// `<p>.cmd.<cluster>.*`: every command addressed to one cluster.
pub fn commands_for(prefix: &Prefix, cluster: &str) -> String {
    format!("{prefix}.{CMD}.{}.*", encode_token(cluster))
}

/// The subject subtrees only `cluster` may publish to (for NATS permissions):
/// its object snapshots, its drift events, its reported state, its conflict
/// events, its rollout records, its version store, its placement decisions
/// and its exported Services.
pub fn owned_subtrees(prefix: &Prefix, cluster: &str) -> [String; 8] {
    let c = encode_token(cluster);
    [
        format!("{prefix}.{OBJ}.{c}.>"),
        format!("{prefix}.{DRIFT}.{c}.>"),
        format!("{prefix}.{STATUS}.{c}.>"),
        format!("{prefix}.{CONFLICT}.{c}.>"),
        format!("{prefix}.{ROLLOUT}.{c}.>"),
        format!("{prefix}.{VER}.{c}.>"),
        format!("{prefix}.{}.{c}.>", crate::placement::PLACEMENT),
        format!("{prefix}.{}.{c}.>", crate::multicluster::SVC),
    ]
}
