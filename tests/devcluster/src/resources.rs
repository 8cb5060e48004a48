//! The servable resource type and the static table of built-in resources.

/// One servable resource: a built-in table entry or a served version of a CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceDef {
    /// "" for the core group.
    pub group: String,
    /// e.g. "v1".
    pub version: String,
    /// e.g. "ConfigMap".
    pub kind: String,
    /// e.g. "ConfigMapList".
    pub list_kind: String,
    /// e.g. "configmaps".
    pub plural: String,
    /// e.g. "configmap".
    pub singular: String,
    /// Whether objects live in a namespace.
    pub namespaced: bool,
    /// kubectl short names ("cm").
    pub short_names: Vec<String>,
    /// Categories ("all").
    pub categories: Vec<String>,
    /// Which subresources exist.
    pub subresources: Subresources,
    /// openAPIV3Schema for CRD versions; None for built-ins.
    pub schema: Option<serde_json::Value>,
    /// true for CRD-defined resources (custom resources refuse strategic merge patch).
    pub custom: bool,
}

/// Subresources a resource serves.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Subresources {
    /// `/status`.
    pub status: bool,
    /// `/scale` (autoscaling/v1 Scale).
    pub scale: bool,
    /// `/token` (serviceaccounts only).
    pub token: bool,
}

impl ResourceDef {
    /// "v1" for the core group, else "group/version".
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// "configmaps" or "deployments.apps": the resource as named in error messages.
    pub fn qualified_plural(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// True for the create-only virtual resources (authorization.k8s.io reviews,
    /// authentication.k8s.io TokenReview): POST answers from the request, nothing is
    /// stored, no other verb exists.
    pub fn create_only(&self) -> bool {
        !self.custom
            && (self.group == "authorization.k8s.io" || self.group == "authentication.k8s.io")
    }

    /// True for the list-only virtual resource `componentstatuses`: GET (one or
    /// all) answers computed objects, no other verb exists.
    pub fn read_only(&self) -> bool {
        !self.custom && self.group.is_empty() && self.plural == "componentstatuses"
    }

    /// `certificatesigningrequests/approval`: writes change only `status.conditions`.
    pub fn has_approval(&self) -> bool {
        !self.custom
            && self.group == "certificates.k8s.io"
            && self.plural == "certificatesigningrequests"
    }

    /// `pods/ephemeralcontainers`: writes change only `spec.ephemeralContainers`.
    pub fn has_ephemeral_containers(&self) -> bool {
        !self.custom && self.group.is_empty() && self.plural == "pods"
    }

    /// Whether DELETE answers with the deleted object rather than a Status: kube's
    /// `ReturnDeletedObject` (the `return_deleted` column of the built-in table).
    /// Custom resources answer with a Status (apiextensions' store leaves it unset).
    pub fn returns_deleted_object(&self) -> bool {
        !self.custom
            && BUILTINS
                .iter()
                .any(|b| b.group == self.group && b.plural == self.plural && b.return_deleted)
    }

    /// Key used by /debug/writes: "core/configmaps", "apps/deployments".
    pub fn writes_key(&self) -> String {
        let g = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{g}/{}", self.plural)
    }
}

/// One row of the built-in table.
struct Builtin {
    group: &'static str,
    version: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    categories: &'static [&'static str],
    status: bool,
    scale: bool,
    token: bool,
    /// kube's `ReturnDeletedObject` in the resource's registry store
    /// (`pkg/registry/*/storage/storage.go`): pods, services, serviceaccounts.
    /// Namespaces also answer with the object, from their own Delete (Terminating).
    return_deleted: bool,
}

const ALL: &[&str] = &["all"];
const NONE: &[&str] = &[];

#[rustfmt::skip]
const BUILTINS: &[Builtin] = &[
    Builtin { group: "", version: "v1", kind: "Namespace", plural: "namespaces", namespaced: false, short: &["ns"], categories: NONE, status: true, scale: false, token: false, return_deleted: true },
    Builtin { group: "", version: "v1", kind: "ConfigMap", plural: "configmaps", namespaced: true, short: &["cm"], categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "", version: "v1", kind: "Secret", plural: "secrets", namespaced: true, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "", version: "v1", kind: "ServiceAccount", plural: "serviceaccounts", namespaced: true, short: &["sa"], categories: NONE, status: false, scale: false, token: true, return_deleted: true },
    Builtin { group: "", version: "v1", kind: "Service", plural: "services", namespaced: true, short: &["svc"], categories: ALL, status: true, scale: false, token: false, return_deleted: true },
    Builtin { group: "", version: "v1", kind: "Event", plural: "events", namespaced: true, short: &["ev"], categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "", version: "v1", kind: "Pod", plural: "pods", namespaced: true, short: &["po"], categories: ALL, status: true, scale: false, token: false, return_deleted: true },
    Builtin { group: "", version: "v1", kind: "Node", plural: "nodes", namespaced: false, short: &["no"], categories: NONE, status: true, scale: false, token: false, return_deleted: false },
    Builtin { group: "", version: "v1", kind: "Endpoints", plural: "endpoints", namespaced: true, short: &["ep"], categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "apps", version: "v1", kind: "Deployment", plural: "deployments", namespaced: true, short: &["deploy"], categories: ALL, status: true, scale: true, token: false, return_deleted: false },
    Builtin { group: "apps", version: "v1", kind: "StatefulSet", plural: "statefulsets", namespaced: true, short: &["sts"], categories: ALL, status: true, scale: true, token: false, return_deleted: false },
    Builtin { group: "apps", version: "v1", kind: "DaemonSet", plural: "daemonsets", namespaced: true, short: &["ds"], categories: ALL, status: true, scale: false, token: false, return_deleted: false },
    Builtin { group: "apps", version: "v1", kind: "ReplicaSet", plural: "replicasets", namespaced: true, short: &["rs"], categories: ALL, status: true, scale: true, token: false, return_deleted: false },
    Builtin { group: "batch", version: "v1", kind: "Job", plural: "jobs", namespaced: true, short: NONE, categories: ALL, status: true, scale: false, token: false, return_deleted: false },
    Builtin { group: "batch", version: "v1", kind: "CronJob", plural: "cronjobs", namespaced: true, short: &["cj"], categories: ALL, status: true, scale: false, token: false, return_deleted: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "Role", plural: "roles", namespaced: true, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "RoleBinding", plural: "rolebindings", namespaced: true, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRole", plural: "clusterroles", namespaced: false, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "rbac.authorization.k8s.io", version: "v1", kind: "ClusterRoleBinding", plural: "clusterrolebindings", namespaced: false, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "Ingress", plural: "ingresses", namespaced: true, short: &["ing"], categories: NONE, status: true, scale: false, token: false, return_deleted: false },
    Builtin { group: "networking.k8s.io", version: "v1", kind: "NetworkPolicy", plural: "networkpolicies", namespaced: true, short: &["netpol"], categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "coordination.k8s.io", version: "v1", kind: "Lease", plural: "leases", namespaced: true, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "policy", version: "v1", kind: "PodDisruptionBudget", plural: "poddisruptionbudgets", namespaced: true, short: &["pdb"], categories: NONE, status: true, scale: false, token: false, return_deleted: false },
    Builtin { group: "apiextensions.k8s.io", version: "v1", kind: "CustomResourceDefinition", plural: "customresourcedefinitions", namespaced: false, short: &["crd", "crds"], categories: NONE, status: true, scale: false, token: false, return_deleted: false },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectAccessReview", plural: "selfsubjectaccessreviews", namespaced: false, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "authorization.k8s.io", version: "v1", kind: "SelfSubjectRulesReview", plural: "selfsubjectrulesreviews", namespaced: false, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "events.k8s.io", version: "v1", kind: "Event", plural: "events", namespaced: true, short: &["ev"], categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "", version: "v1", kind: "ReplicationController", plural: "replicationcontrollers", namespaced: true, short: &["rc"], categories: ALL, status: true, scale: true, token: false, return_deleted: false },
    Builtin { group: "", version: "v1", kind: "ComponentStatus", plural: "componentstatuses", namespaced: false, short: &["cs"], categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "discovery.k8s.io", version: "v1", kind: "EndpointSlice", plural: "endpointslices", namespaced: true, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "authentication.k8s.io", version: "v1", kind: "TokenReview", plural: "tokenreviews", namespaced: false, short: NONE, categories: NONE, status: false, scale: false, token: false, return_deleted: false },
    Builtin { group: "certificates.k8s.io", version: "v1", kind: "CertificateSigningRequest", plural: "certificatesigningrequests", namespaced: false, short: &["csr"], categories: NONE, status: true, scale: false, token: false, return_deleted: false },
    Builtin { group: "apiregistration.k8s.io", version: "v1", kind: "APIService", plural: "apiservices", namespaced: false, short: NONE, categories: &["api-extensions"], status: true, scale: false, token: false, return_deleted: false },
];

/// The built-in resources, in table order.
pub fn builtins() -> Vec<ResourceDef> {
    BUILTINS
        .iter()
        .map(|b| ResourceDef {
            group: b.group.to_string(),
            version: b.version.to_string(),
            kind: b.kind.to_string(),
            list_kind: format!("{}List", b.kind),
            plural: b.plural.to_string(),
            singular: b.kind.to_ascii_lowercase(),
            namespaced: b.namespaced,
            short_names: b.short.iter().map(|s| s.to_string()).collect(),
            categories: b.categories.iter().map(|s| s.to_string()).collect(),
            subresources: Subresources {
                status: b.status,
                scale: b.scale,
                token: b.token,
            },
            schema: None,
            custom: false,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_version_and_names() {
        let defs = builtins();
        let cm = defs.iter().find(|d| d.plural == "configmaps").unwrap();
        assert_eq!(cm.api_version(), "v1");
        assert_eq!(cm.qualified_plural(), "configmaps");
        assert_eq!(cm.writes_key(), "core/configmaps");
        let dep = defs.iter().find(|d| d.plural == "deployments").unwrap();
        assert_eq!(dep.api_version(), "apps/v1");
        assert_eq!(dep.qualified_plural(), "deployments.apps");
        assert!(dep.subresources.scale);
        assert!(!dep.create_only());
        let ssar = defs
            .iter()
            .find(|d| d.kind == "SelfSubjectAccessReview")
            .unwrap();
        assert!(ssar.create_only() && !ssar.namespaced);
    }
}
