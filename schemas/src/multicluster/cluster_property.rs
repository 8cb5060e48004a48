//! `ClusterProperty` (`about.k8s.io`, about-api): cluster-scoped, only `spec.value`.

use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The property naming this cluster in its ClusterSet (a DNS label, unique
/// and stable while a member).
pub const PROPERTY_CLUSTER_ID: &str = "cluster.clusterset.k8s.io";
/// The property naming the ClusterSet: it exists exactly while the cluster
/// is a member.
pub const PROPERTY_CLUSTER_SET: &str = "clusterset.k8s.io";
/// The API group.
pub const CLUSTER_PROPERTY_GROUP: &str = "about.k8s.io";
/// The resource.
pub const CLUSTER_PROPERTY_PLURAL: &str = "clusterproperties";
/// The versions a cluster may serve, the storage version first: written in
/// the first the cluster serves, read in it too (the schema is the same).
pub const CLUSTER_PROPERTY_VERSIONS: [&str; 2] = ["v1beta1", "v1alpha1"];

/// A fact about the cluster for multi-cluster tools (the storage version's
/// type; v1alpha1's schema is the same).
#[derive(
    CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema,
)]
#[kube(
    group = "about.k8s.io",
    version = "v1beta1",
    kind = "ClusterProperty",
    plural = "clusterproperties",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core")
)]
pub struct ClusterPropertySpec {
    /// The property's value (at least one character).
    pub value: String,
}
