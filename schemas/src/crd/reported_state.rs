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
    /// Whether the copy is ready (rollout complete, Job complete, `Ready` condition
    /// true; otherwise: it exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
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

/// The name of the ReportedState of `kind`/`name` on `cluster`: `<kind>-<name>-<cluster>`
/// (kind lowercased) when that is a valid object name; otherwise a cleaned-up, shortened
/// form ending in a hash of the three, so distinct triples keep distinct names.
pub fn reported_state_name(kind: &str, name: &str, cluster: &str) -> String {
    let plain = format!("{}-{name}-{cluster}", kind.to_lowercase());
    if crate::k8s_names::is_dns1123_subdomain(&plain) {
        return plain;
    }
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("{kind}/{name}/{cluster}").as_bytes());
    let hash = hex::encode(&digest[..5]);
    let cleaned: String = plain
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

    #[test]
    fn names_are_plain_when_valid_and_hashed_otherwise() {
        assert_eq!(
            reported_state_name("Deployment", "web", "west"),
            "deployment-web-west"
        );
        let long = "x".repeat(300);
        let n = reported_state_name("Widget", &long, "west");
        assert!(crate::k8s_names::is_dns1123_subdomain(&n), "{n}");
        assert_ne!(n, reported_state_name("Widget", &long, "east"));
        let odd = reported_state_name("Widget", "A_B", "west");
        assert!(crate::k8s_names::is_dns1123_subdomain(&odd), "{odd}");
        assert_ne!(odd, reported_state_name("Widget", "a-b", "west"));
    }
}
