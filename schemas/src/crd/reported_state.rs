//! The `ReportedState` resource: the status of one copy on one sink cluster, written on
//! the origin for rules with `statusReturn: PerCluster`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::object_ref::ObjectRef;

/// The status of one synced object on one sink cluster, written on the origin cluster
/// (in the source object's namespace; the agent's namespace for cluster-scoped
/// sources) when the rule's `statusReturn` is `PerCluster`. Deleted when the copy goes
/// away, the cluster stops holding it, or the source object is deleted.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleetbus.io",
    version = "v1alpha1",
    kind = "ReportedState",
    plural = "reportedstates",
    namespaced,
    status = "ReportedStateStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "Status of a synced object on one sink cluster, reported to its origin.",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.objectRef.kind"),
    printcolumn(name = "Object", type_ = "string", json_path = ".spec.objectRef.name"),
    printcolumn(name = "Ready", type_ = "boolean", json_path = ".status.ready"),
    printcolumn(name = "Observed", type_ = "date", json_path = ".status.observedAt"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ReportedStateSpec {
    /// The source object on the origin cluster whose copy this status belongs to.
    pub object_ref: ObjectRef,
    /// Name of the sink cluster the status was read on.
    pub cluster: String,
    /// The ResourceSyncRule that made the copy.
    #[serde(default)]
    pub rule: String,
}

/// What the sink reported last.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReportedStateStatus {
    /// The copy's `.status`, verbatim.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::any_json_value")]
    pub status: Option<serde_json::Value>,
    /// Whether the copy is ready: its health is `Current`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// The copy's health (kstatus, or the rule's `spec.health`; PROTOCOL §6.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<crate::health::Health>,
    /// When the sink read the status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,
    /// Namespace of the copy on the sink (null if cluster-scoped).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_namespace: Option<String>,
    /// Name of the copy on the sink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_name: Option<String>,
}

/// Longest shortened name: one DNS-1123 label, so valid wherever a name is.
const MAX_SHORT: usize = 63;

/// The name of the ReportedState of `source` on `cluster`:
/// `<kind>.<name>.<cluster>.<hash>` (kind lowercased; hash: 10 hex of sha256 over API
/// group, kind, namespace, name and cluster). The readable part alone parses back
/// uniquely (kinds and cluster names have no dots) but does not tell groups apart, so
/// two sources of the same kind name in different groups, or names that had to be
/// cleaned up, still get distinct names through the hash. When the whole is no valid
/// object name it is shortened to `<cleaned prefix>-<hash>` (one DNS-1123 label).
pub fn reported_state_name(source: &ObjectRef, cluster: &str) -> String {
    use sha2::{Digest, Sha256};
    let (group, _) = crate::subject::split_api_version(&source.api_version);
    let namespace = source.namespace.as_deref().unwrap_or("");
    let (kind, name) = (&source.kind, &source.name);
    // NUL cannot occur in any of the parts, so distinct tuples hash distinct inputs.
    let digest =
        Sha256::digest(format!("{group}\0{kind}\0{namespace}\0{name}\0{cluster}").as_bytes());
    let hash = hex::encode(&digest[..5]);
    let plain = format!("{}.{name}.{cluster}.{hash}", kind.to_lowercase());
    if crate::k8s_names::is_dns1123_subdomain(&plain) {
        return plain;
    }
    let cleaned: String = format!("{}-{name}-{cluster}", kind.to_lowercase())
        .to_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let head: String = cleaned
        .trim_start_matches('-')
        .chars()
        .take(MAX_SHORT - hash.len() - 1)
        .collect();
    if head.is_empty() {
        hash
    } else {
        format!("{head}-{hash}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(api_version: &str, kind: &str, name: &str) -> ObjectRef {
        ObjectRef::new(api_version, kind, Some("apps"), name)
    }

    #[test]
    fn names_are_readable_when_valid_and_shortened_otherwise() {
        let n = reported_state_name(&src("apps/v1", "Deployment", "web"), "west");
        assert!(n.starts_with("deployment.web.west."), "{n}");
        assert!(crate::k8s_names::is_dns1123_subdomain(&n), "{n}");
        let long = "x".repeat(300);
        let n = reported_state_name(&src("v1", "Widget", &long), "west");
        assert!(crate::k8s_names::is_dns1123_subdomain(&n), "{n}");
        assert_ne!(n, reported_state_name(&src("v1", "Widget", &long), "east"));
        let odd = reported_state_name(&src("v1", "Widget", "A_B"), "west");
        assert!(crate::k8s_names::is_dns1123_subdomain(&odd), "{odd}");
        assert_ne!(
            odd,
            reported_state_name(&src("v1", "Widget", "a-b"), "west")
        );
    }

    #[test]
    fn former_collisions_get_distinct_names() {
        // `<kind>-<name>-<cluster>` gave both `deployment-app-east-prod`.
        let a = reported_state_name(&src("apps/v1", "Deployment", "app"), "east-prod");
        let b = reported_state_name(&src("apps/v1", "Deployment", "app-east"), "prod");
        assert_ne!(a, b);
        // Same kind name and object name in two API groups.
        let c = reported_state_name(&src("apps/v1", "Deployment", "app"), "prod");
        let d = reported_state_name(&src("example.com/v1", "Deployment", "app"), "prod");
        assert_ne!(c, d);
        // The version does not take part: a source read at another version keeps its name.
        let e = reported_state_name(&src("apps/v1beta1", "Deployment", "app"), "prod");
        assert_eq!(c, e);
    }
}
