//! SIG Multicluster's standard kinds as published upstream, field by field:
//! `ClusterProfile` (KEP-4322, kubernetes-sigs/cluster-inventory-api v0.1.2,
//! `multicluster.x-k8s.io/v1alpha1`) and `ClusterProperty` (KEP-2149, the
//! About API, `about.k8s.io`, v1beta1 stored, v1alpha1 also served). Their
//! CRDs are not fleetbus's: platform teams install them from upstream, and
//! other cluster managers share them, so they are not in `crd::all_crds`.

mod cluster_profile;
mod cluster_property;

pub use cluster_profile::{
    AccessProvider, ClientCluster, ClusterManager, ClusterProfile, ClusterProfileSpec,
    ClusterProfileStatus, NamedExtension, Property, Version, CLUSTER_MANAGER_LABEL,
    CLUSTER_SET_LABEL, CONDITION_CONTROL_PLANE_HEALTHY, CONDITION_JOINED, EXEC_EXTENSION,
};
pub use cluster_property::{
    ClusterProperty, ClusterPropertySpec, CLUSTER_PROPERTY_GROUP, CLUSTER_PROPERTY_PLURAL,
    CLUSTER_PROPERTY_VERSIONS, PROPERTY_CLUSTER_ID, PROPERTY_CLUSTER_SET,
};
