//! The `ClusterFeature` resource: a capability a cluster advertises as a sync source.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A capability of the local cluster. Its name and labels are published in the
/// cluster's registry record; `ResourceSyncRule.spec.clusterFeatureMatch` selects
/// source clusters by them.
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "fleetbus.io",
    version = "v1alpha1",
    kind = "ClusterFeature",
    plural = "clusterfeatures",
    shortname = "cf",
    status = "ClusterFeatureStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A capability the local cluster advertises to the fleet.",
    printcolumn(name = "Feature", type_ = "string", json_path = ".spec.featureName"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFeatureSpec {
    /// Name of the feature, matched by `clusterFeatureMatch[].featureName`.
    pub feature_name: String,
}

/// Observed state of a ClusterFeature.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFeatureStatus {
    /// Standard conditions (Ready: the feature is published in the registry).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions")]
    pub conditions: Vec<Condition>,
}
