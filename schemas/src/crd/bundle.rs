//! The `Bundle` resource: manifests that are inert where the Bundle lives and applied,
//! each as a managed copy, on the clusters a ResourceSyncRule with `unwrap: true` selects.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::free_form_object_list;

/// A set of manifests applied together on selected clusters, never on the Bundle's own.
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
    doc = "Manifests applied, each as a managed copy, by the clusters an unwrap rule selects.",
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Clusters", type_ = "string", json_path = ".status.summary"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct BundleSpec {
    /// Complete Kubernetes objects (apiVersion, kind, metadata, ...). Namespaced objects
    /// without a namespace get the Bundle's. Nothing here is applied where the Bundle lives.
    #[serde(default)]
    #[schemars(schema_with = "free_form_object_list")]
    pub manifests: Vec<serde_json::Value>,
    /// Selects, by Cluster labels, the clusters the manifests are applied on, in addition
    /// to (ANDed with) the rule's `clusterSelector`. Default: every cluster the rule selects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

/// Observed state of a Bundle: per cluster, per manifest (written on the Bundle's origin
/// from the clusters' reports).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleStatus {
    /// Standard conditions. Ready: every reporting cluster applied every manifest and
    /// every manifest is ready.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// `<ready>/<clusters> ready`, e.g. `2/3 ready` (the `Clusters` column).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// One entry per cluster that applies the Bundle, by cluster name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<BundleClusterStatus>,
}

/// State of a Bundle on one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleClusterStatus {
    /// Cluster name.
    pub cluster: String,
    /// Whether every manifest is applied and ready there.
    #[serde(default)]
    pub ready: bool,
    /// Number of manifests applied.
    #[serde(default)]
    pub applied: i64,
    /// Number of manifests with an error.
    #[serde(default)]
    pub errors: i64,
    /// An error of the Bundle as a whole there (its spec or selector), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When the cluster read this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,
    /// One entry per manifest, in the Bundle's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub manifests: Vec<BundleManifestStatus>,
}

/// State of one manifest of a Bundle on one cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleManifestStatus {
    /// `apiVersion` of the manifest (empty if it has none).
    #[serde(default)]
    pub api_version: String,
    /// `kind` of the manifest (empty if it has none).
    #[serde(default)]
    pub kind: String,
    /// Namespace of the copy; absent for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the copy (empty if the manifest has none).
    #[serde(default)]
    pub name: String,
    /// Whether the copy is written and equal to the manifest.
    #[serde(default)]
    pub applied: bool,
    /// Why it is not, if it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether the copy is ready (rollout done, Job complete, Ready condition, or
    /// exists); absent while it is not applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
}

/// What a sink reports for one Bundle it unwraps: the `status` of its
/// `ReportedStatus` message (`<p>.status.<sink>.fleetbus.io.v1alpha1.Bundle.<ns>.<name>`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BundleReport {
    /// An error of the Bundle as a whole (its spec does not parse, a bad clusterSelector).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// One entry per manifest, in the Bundle's order.
    #[serde(default)]
    pub manifests: Vec<BundleManifestStatus>,
    /// Set when the report was cut to fit the bus's message size: only the
    /// manifests not applied, in error or not ready are listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
