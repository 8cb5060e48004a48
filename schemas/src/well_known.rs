//! Well-known annotation, label, condition and Secret names (documented in docs/PROTOCOL.md).

/// API group of every fleetbus custom resource.
pub const GROUP: &str = "fleetbus.io";
/// The one served and stored version of the fleetbus API.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` string of fleetbus custom resources.
pub const API_VERSION: &str = "fleetbus.io/v1alpha1";

/// Annotation on a copy: name of the cluster the object was copied from.
/// Set only if absent, so the first origin survives multi-hop copies.
pub const ANNOTATION_ORIGIN_CLUSTER: &str = "fleetbus.io/origin-cluster";
/// Annotation on a copy: the sink agent's ownership mark, an HMAC under a key
/// only that agent holds of the copy's group, kind, namespace, name and
/// origin. Without it (or the managed label) an object that names an origin
/// is not a copy: never overwritten nor deleted (agent `sync::model::mark`).
pub const ANNOTATION_COPY_MARK: &str = "fleetbus.io/copy-mark";
/// Annotation on a copy: `metadata.uid` of the object on its origin cluster.
pub const ANNOTATION_ORIGIN_UID: &str = "fleetbus.io/origin-uid";
/// Annotation on a copy: name of the ResourceSyncRule that produced it.
pub const ANNOTATION_RULE: &str = "fleetbus.io/rule";
/// Annotation on a copy: content hash (see `envelope::content_hash`) of the source it was built from.
pub const ANNOTATION_SOURCE_HASH: &str = "fleetbus.io/source-hash";
/// Annotation on a copy: the rule's `orphanPolicy` (`Delete` or `Orphan`) when the copy
/// was written, so a copy whose rule is gone is still collected the way the rule said.
pub const ANNOTATION_ORPHAN_POLICY: &str = "fleetbus.io/orphan-policy";
/// Annotation on a copy unwrapped from a Bundle: `<namespace>/<name>` of the Bundle on
/// its origin cluster (`origin-uid` is then the Bundle's uid).
pub const ANNOTATION_BUNDLE: &str = "fleetbus.io/bundle";
/// Annotation on an object a sink stopped managing and left in place (its rule's
/// `orphanPolicy: Orphan`, or kept because deleting it would take objects fleetbus
/// does not manage): the cluster it was a copy from. No rule publishes such an
/// object from where it was left (it would travel back as this cluster's own
/// original and fight its origin's copies); removing the annotation makes it one.
pub const ANNOTATION_ORPHANED_FROM: &str = "fleetbus.io/orphaned-from";
/// Kind of the fleetbus resource holding manifests (with [`GROUP`] and [`VERSION`]).
pub const BUNDLE_KIND: &str = "Bundle";
/// Annotation (any value): on a source object, do not publish it; on a copy, pin it
/// (no updates; deletes still propagate); on a ResourceSyncRule, do not sync the rule itself.
pub const ANNOTATION_RESOURCE_SYNC_DISABLED: &str = "fleetbus.io/resource-sync-disabled";
/// Annotation on a source object: with value [`UPDATE_POLICY_CREATE_ONLY`], its copies
/// are created once and never updated (as under the rule's `updatePolicy: CreateOnly`);
/// any other value is ignored (logged and counted).
pub const ANNOTATION_UPDATE_POLICY: &str = "fleetbus.io/update-policy";
/// The value of [`ANNOTATION_UPDATE_POLICY`] that makes copies create-only.
pub const UPDATE_POLICY_CREATE_ONLY: &str = "create-only";
/// Annotation (any value) on a Cluster: stop syncing from that peer (state Disabled).
pub const ANNOTATION_CLUSTER_DISABLED: &str = "fleetbus.io/cluster-disabled";
/// Annotation on a copy: comma-separated JSON Pointers excluded from drift detection,
/// or `*` to ignore all drift on this object.
pub const ANNOTATION_DRIFT_IGNORE: &str = "fleetbus.io/drift-ignore";
/// Annotation (any value) on a copy: drift is still reported but not corrected.
pub const ANNOTATION_CORRECTION_PAUSED: &str = "fleetbus.io/correction-paused";

/// The key prefix fleetbus owns: `fleetbus.io/…` labels and annotations are its stamps
/// and instructions, which a rule's mutations may not write (PROTOCOL §8.1).
pub const RESERVED_KEY_PREFIX: &str = "fleetbus.io";

/// Whether a label or annotation key is in fleetbus's own prefix ([`RESERVED_KEY_PREFIX`]
/// or a subdomain of it, as Kubernetes reserves `kubernetes.io` and `*.kubernetes.io`).
pub fn is_reserved_key(key: &str) -> bool {
    key.split_once('/').is_some_and(|(prefix, _)| {
        prefix == RESERVED_KEY_PREFIX
            || prefix
                .strip_suffix(RESERVED_KEY_PREFIX)
                .is_some_and(|sub| sub.ends_with('.'))
    })
}

/// Label on every object fleetbus created or manages; value [`LABEL_MANAGED_VALUE`].
pub const LABEL_MANAGED: &str = "fleetbus.io/managed";
/// The value of [`LABEL_MANAGED`].
pub const LABEL_MANAGED_VALUE: &str = "true";

/// Field manager of the status the origin's agent writes into a source object
/// (`statusReturn: Singleton`), distinct from the copy writer's.
pub const FIELD_MANAGER_STATUS: &str = "fleetbus-status";
/// Label on a ReportedState: the sink cluster whose report it holds.
pub const LABEL_REPORTED_CLUSTER: &str = "fleetbus.io/reported-cluster";
/// Label on a ReportedState: the kind of the source object.
pub const LABEL_REPORTED_KIND: &str = "fleetbus.io/reported-kind";

/// Kind of the fleetbus rule resource (with [`GROUP`] and [`VERSION`], see
/// [`RESOURCE_SYNC_RULE_GVK`]); rules are synced by a built-in implicit rule.
pub const RESOURCE_SYNC_RULE_KIND: &str = "ResourceSyncRule";
/// `(group, version, kind)` of ResourceSyncRule.
pub const RESOURCE_SYNC_RULE_GVK: (&str, &str, &str) = (GROUP, VERSION, RESOURCE_SYNC_RULE_KIND);

/// Kubernetes Event reason on a ResourceSyncRule when a copy is not written because of a
/// conflict (an object not made by fleetbus at the target, or another origin winning it).
pub const EVENT_SYNC_CONFLICT: &str = "SyncConflict";

/// Type of the Secret holding a cluster's copy-mark key (never published).
pub const SECRET_TYPE_COPY_MARK_KEY: &str = "fleetbus.io/copy-mark-key";
/// `type` of a Secret holding a reader kubeconfig for a cluster (referenced by `Cluster.spec.authInfo`).
pub const SECRET_TYPE_CLUSTER_KUBECONFIG: &str = "fleetbus.io/cluster-kubeconfig";
/// Key in a [`SECRET_TYPE_CLUSTER_KUBECONFIG`] Secret's `data` holding the kubeconfig.
pub const SECRET_KEY_KUBECONFIG: &str = "kubeconfig";

/// `type` of a Secret holding a ServiceAccount's token (Kubernetes'); never published.
pub const SECRET_TYPE_SERVICE_ACCOUNT_TOKEN: &str = "kubernetes.io/service-account-token";
/// `type` of a Secret holding a bootstrap token (Kubernetes'); never published.
pub const SECRET_TYPE_BOOTSTRAP_TOKEN: &str = "bootstrap.kubernetes.io/token";

/// Kubernetes' recommended label naming the tool that manages an object; the agent sets
/// it to [`MANAGED_BY_AGENT`] on what it creates for itself (the reader ServiceAccount
/// and its RBAC).
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
/// The [`LABEL_MANAGED_BY`] value of objects the agent creates for itself.
pub const MANAGED_BY_AGENT: &str = "fleetbus-agent";

/// `reportingComponent` (`reportingController` in `events.k8s.io/v1`) of the Kubernetes
/// Events the agent records.
pub const EVENT_REPORTING_COMPONENT: &str = "fleetbus.io/agent";
/// `source.component` (`deprecatedSource.component` in `events.k8s.io/v1`) of the
/// Kubernetes Events the agent records.
pub const EVENT_SOURCE_COMPONENT: &str = "fleetbus-agent";

/// Condition types used in `status.conditions` of fleetbus resources.
pub mod condition {
    /// Cluster: the agent for this cluster is alive and syncing. ResourceSyncRule: the rule is applied.
    pub const READY: &str = "Ready";
    /// Cluster: this cluster sees the same member set as the local cluster.
    pub const CLUSTERS_SYNCED: &str = "ClustersSynced";
    /// Cluster: more than one Cluster object claims to be the local cluster.
    pub const LOCAL_CONFLICT: &str = "LocalConflict";
    /// Cluster: two agents claim this cluster name with different cluster IDs.
    pub const NAME_CONFLICT: &str = "NameConflict";
    /// ResourceSyncRule: the spec failed validation; the message says why.
    pub const INVALID: &str = "Invalid";
    /// ResourceSyncRule: True while at least one copy is not written because of a
    /// conflict; the message names the object(s).
    pub const SYNC_CONFLICT: &str = "Conflict";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserved_keys_are_fleetbus_io_and_its_subdomains() {
        for key in [LABEL_MANAGED, ANNOTATION_ORIGIN_CLUSTER, "x.fleetbus.io/y"] {
            assert!(is_reserved_key(key), "{key}");
        }
        for key in [
            "fleetbus.io",
            "app",
            "notfleetbus.io/x",
            "fleetbus.io.evil/x",
            "example.com/fleetbus.io",
        ] {
            assert!(!is_reserved_key(key), "{key}");
        }
    }
}
