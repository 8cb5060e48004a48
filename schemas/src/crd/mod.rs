//! fleetbus custom resources (`fleetbus.io/v1alpha1`) and their CRDs.

// clippy's duplicated_attributes misreads repeated `printcolumn(type_ = ..)` arguments
// of the kube derive as duplicate attributes.
#[allow(clippy::duplicated_attributes)]
mod bundle;
#[allow(clippy::duplicated_attributes)]
mod cluster;
#[allow(clippy::duplicated_attributes)]
mod cluster_feature;
mod placement;
#[allow(clippy::duplicated_attributes)]
mod reported_state;
#[allow(clippy::duplicated_attributes)]
mod resource_sync_rule;
mod rule_validation;
mod schema;
#[allow(clippy::duplicated_attributes)]
mod sync_policy;

pub use bundle::{
    Bundle, BundleClusterStatus, BundleManifestStatus, BundleReport, BundleSpec, BundleStatus,
};
pub use cluster::{
    Allocatable, AuthInfo, Cluster, ClusterMetadata, ClusterSpec, ClusterState, ClusterStatus,
    ClusterType, KubernetesApiEndpoint, Locality, NamespacedName,
};
pub use cluster_feature::{ClusterFeature, ClusterFeatureSpec, ClusterFeatureStatus};
pub use placement::{
    divide, Capacity, ClusterCount, ClusterTaint, Divide, Failback, Failover, Placement,
    PlacementMode, Preference, Purge, ReplicaDivision, SpreadConstraint, TaintEffect, Toleration,
    TolerationOperator,
};
pub use reported_state::{
    reported_state_name, ReportedState, ReportedStateSpec, ReportedStateStatus,
};
pub use resource_sync_rule::{
    AddRemove, AnnotationSelector, ClusterFeatureMatch, ConfigMapRef, ContentMatch, DriftExclusion,
    DriftMode, DriftPolicy, DriftTarget, GroupVersionKind, HealthCheck, MatchEntry, MaxUnavailable,
    Mutations, ObjectKeyMatch, OnFailure, OrphanPolicy, Override, OverrideType, ResourceSyncRule,
    ResourceSyncRuleSpec, ResourceSyncRuleStatus, Rollout, RolloutGroup, RolloutSummary,
    StatusReturn, SyncRule, UpdatePolicy, ValuesFrom,
};
pub use rule_validation::{RuleError, RuleErrorKind};
pub use sync_policy::{
    PolicyAction, PolicyDirection, PolicyEntry, PolicyKind, SyncPolicy, SyncPolicySpec,
    SyncPolicyStatus, SYNC_POLICY_NAME,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube_core::CustomResourceExt;

/// Every fleetbus CRD, in install order (the agent installs them at startup).
pub fn all_crds() -> Vec<CustomResourceDefinition> {
    vec![
        Cluster::crd(),
        ClusterFeature::crd(),
        ResourceSyncRule::crd(),
        Bundle::crd(),
        ReportedState::crd(),
        SyncPolicy::crd(),
    ]
}
