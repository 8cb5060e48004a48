//! `ClusterProfile` (`multicluster.x-k8s.io/v1alpha1`, cluster-inventory-api v0.1.2).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The label naming the cluster manager that owns a ClusterProfile.
pub const CLUSTER_MANAGER_LABEL: &str = "x-k8s.io/cluster-manager";
/// The namespace label naming the ClusterSet whose inventory it holds.
pub const CLUSTER_SET_LABEL: &str = "multicluster.x-k8s.io/clusterset";
/// The condition v0.1.2 defines: the cluster's control plane is healthy.
pub const CONDITION_CONTROL_PLANE_HEALTHY: &str = "ControlPlaneHealthy";
/// KEP-4322's condition: the cluster is a member of the ClusterSet.
pub const CONDITION_JOINED: &str = "Joined";
/// The `extensions[].name` whose `extension` a consumer's library passes to
/// an exec credential plugin as `ExecCredential.spec.cluster.config` (KEP-5339).
pub const EXEC_EXTENSION: &str = "client.authentication.k8s.io/exec";

/// One cluster of a multi-cluster inventory, written by the cluster manager
/// that owns it (`spec.clusterManager`, immutable).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1alpha1",
    kind = "ClusterProfile",
    plural = "clusterprofiles",
    namespaced,
    status = "ClusterProfileStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileSpec {
    /// A human-readable name of the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// Which cluster manager owns this profile.
    pub cluster_manager: ClusterManager,
}

/// The cluster manager owning a profile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterManager {
    /// Its name.
    pub name: String,
}

/// What the cluster manager observed of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProfileStatus {
    /// Conditions (`ControlPlaneHealthy`, `Joined`), a map list keyed by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The cluster's versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
    /// Properties of the cluster, a map list keyed by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub properties: Vec<Property>,
    /// How to reach the cluster's API server, a map list keyed by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_providers: Vec<AccessProvider>,
    /// Deprecated alias of `accessProviders` (read, never written).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credential_providers: Vec<AccessProvider>,
}

/// The cluster's versions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct Version {
    /// The Kubernetes version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<String>,
}

/// One property of the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Property {
    /// A well-known (a ClusterProperty's) or manager-defined name.
    pub name: String,
    /// Its value (1 to 1024 characters).
    pub value: String,
    /// When the property was last observed on the cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_observed_time: Option<Time>,
}

/// One way to reach the cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct AccessProvider {
    /// The provider's name: which of a consumer's credential providers applies.
    pub name: String,
    /// The cluster's connection details.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<ClientCluster>,
}

/// A kubeconfig `clusters[].cluster` (client-go's `clientcmd/api/v1.Cluster`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub struct ClientCluster {
    /// `https://host:port` of the API server.
    pub server: String,
    /// The name to check the server's certificate against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_server_name: Option<String>,
    /// Skip the server certificate's check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_skip_tls_verify: Option<bool>,
    /// A CA file's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authority: Option<String>,
    /// PEM CA certificates, base64 (`format: byte`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_authority_data: Option<String>,
    /// A proxy for every request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub proxy_url: Option<String>,
    /// Opt out of response compression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_compression: Option<bool>,
    /// Extra information by name (the exec plugin's config among them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extensions: Vec<NamedExtension>,
}

/// A named extension of a kubeconfig cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct NamedExtension {
    /// Its name.
    pub name: String,
    /// Its content, any object.
    pub extension: serde_json::Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_published_profile_round_trips() {
        let published = json!({
            "apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
            "metadata": {"name": "a", "namespace": "fleetbus-system"},
            "spec": {"displayName": "a", "clusterManager": {"name": "fleetbus"}},
            "status": {
                "conditions": [{"type": "Joined", "status": "True", "reason": "Member",
                                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
                "version": {"kubernetes": "v1.33.1"},
                "properties": [{"name": "clusterset.k8s.io", "value": "f",
                                "lastObservedTime": "2026-01-01T00:00:00Z"}],
                "accessProviders": [{"name": "fleetbus", "cluster": {
                    "server": "https://a:6443", "certificate-authority-data": "Q0E=",
                    "insecure-skip-tls-verify": false,
                    "extensions": [{"name": EXEC_EXTENSION, "extension": {"clusterName": "a"}}]}}],
            }
        });
        let p: ClusterProfile = serde_json::from_value(published.clone()).unwrap();
        assert_eq!(serde_json::to_value(&p).unwrap(), published);
    }
}
