//! Multi-cluster Services (KEP-1645, kubernetes-sigs/mcs-api v0.5.0,
//! `multicluster.x-k8s.io`): `ServiceExport` and `ServiceImport` as the
//! storage version (v1beta1) publishes them; v1alpha1's schema is the same.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The API group of both kinds.
pub const MCS_GROUP: &str = "multicluster.x-k8s.io";
/// The versions a cluster may serve, the storage version first: written
/// and read in the first one the cluster serves (the schemas are the same).
pub const MCS_VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];
/// On an EndpointSlice: the multi-cluster service it belongs to.
pub const LABEL_SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";
/// On an EndpointSlice: the cluster its endpoints are in.
pub const LABEL_SOURCE_CLUSTER: &str = "multicluster.kubernetes.io/source-cluster";
/// On an EndpointSlice: the controller that manages it.
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// fleetbus's value of [`LABEL_MANAGED_BY`].
pub const MANAGED_BY: &str = "mcs.fleetbus.io";
/// `ServiceExport` condition: the export is valid (reasons below).
pub const CONDITION_VALID: &str = "Valid";
/// `ServiceExport` condition: the export is published to the ClusterSet.
pub const CONDITION_READY: &str = "Ready";
/// `ServiceExport` condition: its Service conflicts with another cluster's
/// export of the same name (the oldest export wins).
pub const CONDITION_CONFLICT: &str = "Conflict";
/// `Valid=False`: no Service of the export's name.
pub const REASON_NO_SERVICE: &str = "NoService";
/// `Valid=False`: an ExternalName Service cannot be exported.
pub const REASON_INVALID_SERVICE_TYPE: &str = "InvalidServiceType";

/// Declares that the Service of the same name and namespace is consumable
/// from the other clusters of the ClusterSet.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1beta1",
    kind = "ServiceExport",
    plural = "serviceexports",
    namespaced,
    status = "ServiceExportStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core")
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceExportSpec {
    /// Annotations exported with the service (optional for implementations;
    /// fleetbus does not carry them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exported_annotations: Option<BTreeMap<String, String>>,
    /// Labels exported with the service (not carried either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exported_labels: Option<BTreeMap<String, String>>,
}

/// What the implementation says of an export.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ServiceExportStatus {
    /// `Valid`, `Ready`, `Conflict`: a map list keyed by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// A multi-cluster service as a consumer cluster sees it: written by the
/// implementation in every cluster that has the namespace.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "multicluster.x-k8s.io",
    version = "v1beta1",
    kind = "ServiceImport",
    plural = "serviceimports",
    namespaced,
    status = "ServiceImportStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core")
)]
#[serde(rename_all = "camelCase")]
pub struct ServiceImportSpec {
    /// `Cluster` or `Local`, as the exported Services say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<String>,
    /// `IPv4`, `IPv6`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_families: Vec<String>,
    /// The ClusterSet IPs (only for `ClusterSetIP`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ips: Vec<String>,
    /// The ports of the multi-cluster service.
    pub ports: Vec<ServicePort>,
    /// `ClientIP` or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// Session affinity settings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// A routing hint (`PreferClose`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<String>,
    /// `ClusterSetIP` or `Headless`.
    #[serde(rename = "type")]
    pub type_: String,
}

/// One port of a ServiceImport.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// The application protocol.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub app_protocol: Option<String>,
    /// The port's name (required when there are several).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The port number.
    pub port: i32,
    /// `TCP`, `UDP` or `SCTP`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<String>,
}

/// Session affinity settings.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionAffinityConfig {
    /// ClientIP affinity (`clientIP`, as upstream spells it).
    #[serde(default, rename = "clientIP", skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<ClientIpConfig>,
}

/// ClientIP affinity.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientIpConfig {
    /// How long a client sticks to one endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<i32>,
}

/// Which clusters a ServiceImport is derived from.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct ServiceImportStatus {
    /// The exporting clusters: a map list keyed by `cluster`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterStatus>,
    /// Conditions: a map list keyed by type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// One exporting cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
pub struct ClusterStatus {
    /// Its name in the ClusterSet.
    pub cluster: String,
}
