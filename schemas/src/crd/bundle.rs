//! The `Bundle` resource (sketch): a set of manifests delivered to selected clusters.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::free_form_object_list;

/// A set of arbitrary manifests applied together on the clusters selected by `clusterSelector`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleetbus.io",
    version = "v1alpha1",
    kind = "Bundle",
    plural = "bundles",
    namespaced,
    status = "BundleStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A set of manifests applied together on selected clusters (sketch).",
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BundleSpec {
    /// Complete Kubernetes objects (apiVersion, kind, metadata, ...), applied as given.
    #[serde(default)]
    #[schemars(schema_with = "free_form_object_list")]
    pub manifests: Vec<serde_json::Value>,
    /// Selects, by Cluster labels, the clusters the bundle is applied on. Default: all clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

/// Observed state of a Bundle, per cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleStatus {
    /// Standard conditions (Ready: applied on every selected cluster).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// One entry per selected cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<BundleClusterStatus>,
}

/// State of a Bundle on one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleClusterStatus {
    /// Cluster name.
    pub cluster: String,
    /// Whether every manifest is applied and current.
    #[serde(default)]
    pub ready: bool,
    /// Number of manifests applied.
    #[serde(default)]
    pub objects_applied: i64,
    /// Error or progress detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Last time the bundle was applied on this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
}
