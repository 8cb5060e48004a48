//! The `Cluster` resource: one per member cluster, on every member.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A member of the fleet. Every agent keeps one Cluster object per member it sees
/// in the registry; the one whose `clusterID` equals the local kube-system UID is `Local`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleetbus.io",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    shortname = "fbc",
    status = "ClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "A member cluster of the fleet, as seen by the local agent.",
    // Default view: NAME TYPE STATE SYNCED VERSION REGION AGE; the rest is `-o wide` only.
    printcolumn(name = "Type", type_ = "string", json_path = ".status.type"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(
        name = "Synced",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"ClustersSynced\")].status"
    ),
    printcolumn(
        name = "Version",
        type_ = "string",
        json_path = ".status.metadata.kubernetesVersion"
    ),
    printcolumn(
        name = "Region",
        type_ = "string",
        json_path = ".status.metadata.locality.region"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(
        name = "ID",
        type_ = "string",
        json_path = ".spec.clusterID",
        priority = 1
    ),
    printcolumn(
        name = "Provider",
        type_ = "string",
        json_path = ".status.metadata.provider",
        priority = 1
    ),
    printcolumn(
        name = "Distribution",
        type_ = "string",
        json_path = ".status.metadata.distribution",
        priority = 1
    ),
    printcolumn(
        name = "Heartbeat",
        type_ = "date",
        json_path = ".status.lastHeartbeatTime",
        priority = 1
    ),
    printcolumn(
        name = "Agent",
        type_ = "string",
        json_path = ".status.agentVersion",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// UID of the cluster's kube-system namespace: the cluster's stable identity.
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// Where to find credentials to read this cluster's API (optional; fleetbus syncs over NATS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_info: Option<AuthInfo>,
    /// API server endpoints of this cluster, one per client network.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubernetes_api_endpoints: Vec<KubernetesApiEndpoint>,
}

/// Credentials for reaching a cluster's API server.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthInfo {
    /// A Secret of type `fleetbus.io/cluster-kubeconfig` holding key `kubeconfig`.
    pub secret_ref: NamespacedName,
}

/// Name and namespace of a namespaced object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NamespacedName {
    /// Object name.
    pub name: String,
    /// Object namespace.
    pub namespace: String,
}

/// An API server endpoint valid from one client network.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesApiEndpoint {
    /// Name of the network the endpoint is reachable from (empty: any).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub client_network: String,
    /// `host:port` or URL of the API server.
    pub server_address: String,
    /// PEM CA bundle, base64-encoded, to verify the server.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub ca_bundle: String,
}

/// Observed state of a member cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `Local` for the cluster this agent runs in, `Peer` for the others.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<ClusterType>,
    /// Summary state of the member.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<ClusterState>,
    /// Human-readable detail for `state`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The operator's taints on the cluster (`fleetbus clusters taint|cordon`):
    /// placement keeps new copies off (NoSchedule) or moves them (NoExecute).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub taints: Vec<super::placement::ClusterTaint>,
    /// Standard conditions: Ready, ClustersSynced, LocalConflict, NameConflict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// Last heartbeat seen from this cluster's agent in the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    /// Version of the fleetbus agent running in this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Facts about the cluster gathered from its Nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ClusterMetadata>,
    /// Names of the ClusterFeatures the cluster advertises.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<String>,
}

/// Whether a Cluster object describes the local cluster or a peer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ClusterType {
    /// The cluster this agent runs in.
    Local,
    /// Another member of the fleet.
    Peer,
}

/// Summary state of a member cluster.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ClusterState {
    /// Heartbeats are current and objects are syncing.
    Ready,
    /// Heartbeats stopped (agent crashed, partitioned or NATS unreachable).
    Disconnected,
    /// Sync from this peer is disabled by the `fleetbus.io/cluster-disabled` annotation.
    Disabled,
    /// A name or local-cluster conflict; see the conditions.
    Conflict,
    /// The agent announced it left the fleet.
    Left,
    /// Heartbeats are current, but the cluster's agent reports that its own
    /// API server does not answer (record member `api`).
    ApiUnreachable,
}

/// Facts about a cluster gathered from its Nodes (shared by the Cluster status and the registry record).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterMetadata {
    /// Infrastructure provider (amazon, azure, google, vsphere, kind, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Kubernetes distribution (EKS, GKE, AKS, KIND, OPENSHIFT, RKE, K3S, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distribution: Option<String>,
    /// API server version (`gitVersion`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// Distinct kubelet versions of the Nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubelet_versions: Vec<String>,
    /// Distinct kube-proxy versions of the Nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kube_proxy_versions: Vec<String>,
    /// Topology from the `topology.kubernetes.io/*` Node labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locality: Option<Locality>,
    /// Allocatable capacity summed over the Nodes' `status.allocatable`
    /// (what placement's `prefer: [{capacity: cpu|memory}]` scores). Absent
    /// while no Node reports it, and in records of agents before placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocatable: Option<Allocatable>,
}

/// A cluster's allocatable CPU and memory, in integers so that a record
/// compares exactly and is republished only when a Node's capacity changes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Allocatable {
    /// CPU in millicores (`3800m` is 3800, `4` is 4000).
    pub cpu_millis: u64,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

/// Where a cluster's Nodes run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Locality {
    /// The region most Nodes are in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// All regions of the Nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<String>,
    /// All zones of the Nodes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub zones: Vec<String>,
}
