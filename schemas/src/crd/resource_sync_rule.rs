//! The `ResourceSyncRule` resource: which objects of one kind to sync, from where, to where, how.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    Condition, LabelSelector, LabelSelectorRequirement, Time,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema::any_json_value;

/// Syncs objects of one kind from source clusters into the clusters selected as sinks.
///
/// A rule on cluster C makes C a sink: C pulls matching objects published by the
/// clusters selected by `sourceClusterSelector` and `clusterFeatureMatch`, applies
/// `mutations`, and writes them locally.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleetbus.io",
    version = "v1alpha1",
    kind = "ResourceSyncRule",
    plural = "resourcesyncrules",
    shortname = "rsr",
    status = "ResourceSyncRuleStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "Syncs objects of one kind between clusters of the fleet.",
    printcolumn(
        name = "Kind",
        type_ = "string",
        json_path = ".spec.groupVersionKind.kind"
    ),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Synced",
        type_ = "integer",
        json_path = ".status.objectsSynced"
    ),
    printcolumn(
        name = "Ready Copies",
        type_ = "string",
        json_path = ".status.readiness"
    ),
    printcolumn(name = "Conflicts", type_ = "integer", json_path = ".status.conflicts"),
    printcolumn(name = "Errors", type_ = "integer", json_path = ".status.errors"),
    printcolumn(name = "Last Sync", type_ = "date", json_path = ".status.lastSyncTime"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSyncRuleSpec {
    /// The kind of object to sync (exact group, version and kind; the core group is "").
    pub group_version_kind: GroupVersionKind,
    /// Every entry must be satisfied by a ClusterFeature of a source cluster. Empty: no gate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_feature_match: Vec<ClusterFeatureMatch>,
    /// Matching and mutation rules. An object is synced if any rule matches it; the
    /// mutations of every matching rule are applied in order. Empty: sync every object unchanged.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<SyncRule>,
    /// Selects, by Cluster labels, the sink clusters this rule applies on. Default: all clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// Selects, by Cluster labels, the clusters objects are taken from. Default: all peers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_cluster_selector: Option<LabelSelector>,
    /// What happens to a copy when its source is gone or stops matching.
    #[serde(default)]
    pub orphan_policy: OrphanPolicy,
    /// Whether existing copies are updated when their source changes.
    #[serde(default)]
    pub update_policy: UpdatePolicy,
    /// Create the target namespace if it does not exist (otherwise the object waits and an error is reported).
    #[serde(default, skip_serializing_if = "is_false")]
    pub create_namespace: bool,
    /// Drift handling: what to do when a copy is changed locally.
    #[serde(default)]
    pub drift: DriftPolicy,
    /// Whether and how the copies' status is reported back to the origin cluster.
    #[serde(default)]
    pub status_return: StatusReturn,
    /// Apply the manifests a Bundle holds (`spec.manifests[]`), each as a managed copy,
    /// instead of the Bundle itself. Only for the kind `fleetbus.io/v1alpha1 Bundle`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unwrap: bool,
    /// How a copy's health is judged on each sink. Absent: kstatus's rules for the
    /// built-in kinds, a `Ready` (else `Available`) condition for others (PROTOCOL §6.1).
    /// Each expression is at most 1 KiB, and its loops are bounded: one whose
    /// estimated cost is above 100,000 makes the rule Invalid (the cost: the elements
    /// its loops, `all`, `exists`, `exists_one`, `map`, `filter` and `in` over a list,
    /// walk, nested loops multiplying, a list it does not write out counted as 100);
    /// an evaluation whose loops would walk, or whose values would hold, more than
    /// 100,000 elements (100 bytes of a string counting as one), or that would build a
    /// string over 1 MiB, is stopped, and the copy is Unknown, saying so. A copy is
    /// evaluated once per resourceVersion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthCheck>,
    /// Pause the rule: on every sink nothing is created, updated or deleted
    /// (source deletes included); drift is reported, not corrected; the status
    /// says `Suspended`. Sources keep publishing; unsuspending converges.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
    /// Rules (by name) whose copies must be in sync and healthy (`Current`) on a
    /// sink before this rule creates or updates its copies there: CRDs before
    /// their objects, a namespace's quota before its workloads. A cycle makes
    /// every rule on it Invalid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// ConfigMaps on each sink whose `data` templates read as `.Values`: values
    /// each cluster owns (an endpoint, a region's image registry). Merged in
    /// order, later entries winning.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_from: Vec<ValuesFrom>,
    /// Seal the objects this rule selects to the clusters it places them on, as Secrets
    /// always are (PROTOCOL §4.8): only those clusters and the origin can read them on the
    /// bus. Takes effect on origins that hold a sealing key.
    #[serde(default, skip_serializing_if = "is_false")]
    pub seal: bool,
    /// Stage each new version of a source object across the selected clusters
    /// instead of writing it everywhere at once: the origin admits clusters a
    /// few at a time (groups in order, `maxUnavailable` at once), each once the
    /// earlier ones' copies are healthy (`spec.health`, else kstatus) for
    /// `minReadySeconds`; sinks keep the previous version until admitted.
    /// Source deletes are not staged. Every agent must understand the field
    /// (an older sink applies at once): PROTOCOL §6.9.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<Rollout>,
    /// On how many, and which, of the clusters `clusterSelector` matches each
    /// source object's copy lives, and when a chosen cluster is replaced:
    /// decided by the object's origin and followed by the sinks (PROTOCOL
    /// §6.10). Absent: every matched cluster holds a copy. Every agent must
    /// understand the field (an older sink copies everywhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<super::placement::Placement>,
}

/// A progressive rollout of a rule's source versions (`spec.rollout`).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Rollout {
    /// Clusters that may be updating or unhealthy at once: a count (at least 1)
    /// or a percent of the selected clusters ("25%", rounded down, at least 1).
    #[serde(default = "one_cluster")]
    pub max_unavailable: IntOrString,
    /// Ordered groups (canary clusters first, then regions): a cluster belongs
    /// to the first group whose selector matches it; clusters no group selects
    /// form a last, implicit group. A group starts once every cluster of the
    /// groups before it runs the new version healthily.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<RolloutGroup>,
    /// A copy counts as updated once healthy (Current) for this long.
    #[serde(default)]
    pub min_ready_seconds: u32,
    /// An admitted copy not updated this long after its admission has failed.
    #[serde(default = "default_progress_deadline")]
    pub progress_deadline_seconds: u32,
    /// What a failed copy does to the rollout: `Pause` (no more admissions
    /// until `fleetbus rules rollout resume`) or `Continue`.
    #[serde(default)]
    pub on_failure: OnFailure,
}

impl Default for Rollout {
    fn default() -> Self {
        Self {
            max_unavailable: one_cluster(),
            groups: Vec::new(),
            min_ready_seconds: 0,
            progress_deadline_seconds: default_progress_deadline(),
            on_failure: OnFailure::default(),
        }
    }
}

/// A `maxUnavailable` as read: a count of clusters or a percent of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MaxUnavailable {
    /// At most this many clusters (at least 1).
    Count(u32),
    /// This percent of the selected clusters, rounded down, at least 1 (1 to 100).
    Percent(u32),
}

impl MaxUnavailable {
    /// Reads `v`: an int at least 1, or `"N%"` with 1 <= N <= 100. The error
    /// says what was wrong, for the rule's Invalid condition.
    pub fn parse(v: &IntOrString) -> Result<Self, String> {
        match v {
            IntOrString::Int(n) if *n >= 1 => Ok(Self::Count(n.unsigned_abs())),
            IntOrString::Int(n) => Err(format!("{n}: a count must be at least 1")),
            IntOrString::String(s) => match s.strip_suffix('%').map(str::parse::<u32>) {
                Some(Ok(p)) if (1..=100).contains(&p) => Ok(Self::Percent(p)),
                _ => Err(format!("{s:?}: want a count or a percent from 1% to 100%")),
            },
        }
    }

    /// The number of clusters out of `selected`: never 0, so a rollout can always
    /// move (a percent of 3 clusters that rounds down to 0 is 1).
    pub fn of(self, selected: usize) -> usize {
        let n = match self {
            Self::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Self::Percent(p) => selected.saturating_mul(p as usize) / 100,
        };
        n.max(1)
    }
}

/// `maxUnavailable` when absent: one cluster at a time.
fn one_cluster() -> IntOrString {
    IntOrString::Int(1)
}

/// `progressDeadlineSeconds` when absent: as a Deployment's.
fn default_progress_deadline() -> u32 {
    600
}

/// One ordered group of a rollout.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutGroup {
    /// Its name (a DNS-1123 label, unique in the rollout), shown in the status.
    pub name: String,
    /// The clusters it holds, by Cluster labels.
    pub cluster_selector: LabelSelector,
    /// Overrides the rollout's `maxUnavailable` while this group rolls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unavailable: Option<IntOrString>,
}

/// What a copy that fails (health `Failed`, or not updated within
/// `progressDeadlineSeconds`) does to its rollout.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum OnFailure {
    /// Stop admitting clusters until an operator resumes the rollout.
    #[default]
    Pause,
    /// Go on; the failed cluster no longer counts against `maxUnavailable`.
    Continue,
}

/// One source of per-cluster values: a ConfigMap on the sink.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ValuesFrom {
    /// The ConfigMap.
    pub config_map_ref: ConfigMapRef,
    /// A missing ConfigMap contributes nothing instead of failing the rule's copies.
    #[serde(default, skip_serializing_if = "is_false")]
    pub optional: bool,
}

/// A ConfigMap by name, on the cluster that reads it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapRef {
    /// Its name.
    pub name: String,
    /// Its namespace; absent: the agent's own namespace (`--namespace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A rule's own health check: CEL expressions over `object`, the live copy
/// (the language of `x-kubernetes-validations`). An expression that does not
/// compile, or whose estimated cost is above the limit, makes the rule Invalid
/// (the bounds: `ResourceSyncRuleSpec::health`).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// True: the copy is Current (healthy); false: InProgress; no boolean (an
    /// error, the cost budget spent): Unknown, with why.
    pub current: String,
    /// Evaluated first. True: the copy is Failed. Absent: a copy is never Failed
    /// (but Terminating while it is being deleted). Bounded as `current` is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A group, version and kind (the core group is the empty string).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GroupVersionKind {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `ConfigMap`.
    pub kind: String,
}

/// A requirement on the ClusterFeatures of a source cluster: some feature with this
/// name whose labels satisfy the selector must exist.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterFeatureMatch {
    /// `spec.featureName` of the required ClusterFeature.
    pub feature_name: String,
    /// Labels the ClusterFeature must carry.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Label selector requirements on the ClusterFeature (AND'd).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One matching rule and the mutations applied to the objects it matches.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncRule {
    /// Match entries, OR'd. Empty: match every object.
    #[serde(default, rename = "match", skip_serializing_if = "Vec::is_empty")]
    pub match_: Vec<MatchEntry>,
    /// Changes applied to matching objects before they are written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutations: Option<Mutations>,
}

/// A match entry: every criterion that is set must hold (AND).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatchEntry {
    /// Exact name and/or namespace of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_key: Option<ObjectKeyMatch>,
    /// The object's namespace must be one of these.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Label selectors over the object's labels, OR'd.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub labels: Vec<LabelSelector>,
    /// Selectors over the object's annotations, OR'd.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub annotations: Vec<AnnotationSelector>,
    /// Content matches, AND'd.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ContentMatch>,
}

/// Exact name/namespace match; unset fields are not compared.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ObjectKeyMatch {
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Object namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A label-selector-shaped matcher evaluated over annotations.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnnotationSelector {
    /// Annotations that must be present with exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_annotations: BTreeMap<String, String>,
    /// Requirements on annotations (AND'd), with label-selector operators.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// The value at `key` must equal `value`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentMatch {
    /// JSON Pointer (RFC 6901) into the object, e.g. `/spec/type`.
    pub key: String,
    /// Expected JSON value at `key` (absent: `null`).
    #[serde(default)]
    #[schemars(schema_with = "any_json_value")]
    pub value: serde_json::Value,
}

/// Changes applied to an object before it is written to the sink cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Mutations {
    /// Labels to add (merged) then remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<AddRemove>,
    /// Annotations to add (merged) then remove.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<AddRemove>,
    /// JSON-Pointer overrides applied in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overrides: Vec<Override>,
    /// Write the object under this GVK instead of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_version_kind: Option<GroupVersionKind>,
    /// Also copy `.status` onto the copy.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sync_status: bool,
}

/// Keys to add (with values) and keys to remove.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddRemove {
    /// Entries to set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub add: BTreeMap<String, String>,
    /// Keys to delete (applied after `add`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remove: Vec<String>,
}

/// One override of a field of the object.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Override {
    /// `replace` sets the value at `path` (creating it), `remove` deletes it.
    #[serde(rename = "type")]
    pub type_: OverrideType,
    /// JSON Pointer (RFC 6901) of the field, e.g. `/metadata/namespace`.
    pub path: String,
    /// For `replace`: a template rendered to the new value. `{{ .Object... }}` refers to the
    /// source object, `{{ .Cluster... }}` to the origin Cluster, `{{ .LocalCluster... }}` to the
    /// sink Cluster, `{{ .Values... }}` to the sink's `valuesFrom` data. The rendered text is parsed as JSON if it parses, else used as a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
}

impl Override {
    /// `replace` of `path` with the template `value`.
    pub fn replace(path: &str, value: &str) -> Override {
        Override {
            type_: OverrideType::Replace,
            path: path.into(),
            value: Some(value.into()),
        }
    }

    /// `remove` of `path`.
    pub fn remove(path: &str) -> Override {
        Override {
            type_: OverrideType::Remove,
            path: path.into(),
            value: None,
        }
    }
}

/// Kind of override.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OverrideType {
    /// Set the value at the path.
    #[default]
    Replace,
    /// Remove the value at the path.
    Remove,
}

/// What happens to a copy when its source is deleted, stops matching, or the rule goes away.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum OrphanPolicy {
    /// Delete the copy.
    #[default]
    Delete,
    /// Keep the copy, unmanaged.
    Orphan,
}

/// Whether existing copies follow their source.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum UpdatePolicy {
    /// Create and update copies.
    #[default]
    Update,
    /// Create copies once; never update them.
    CreateOnly,
}

/// How drift (a local change to a copy) is handled.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftPolicy {
    /// Correct: revert the change and report it. Report: only report it. Ignore: do nothing.
    #[serde(default)]
    pub mode: DriftMode,
    /// Fields that may differ without counting as drift. The durable fix for fields another
    /// controller owns (an autoscaler's `/spec/replicas`): without an exclusion the agent and
    /// that controller fight, and after a few rounds the agent stops correcting the copy and
    /// reports drift phase `Fight` until the other writer leaves it alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclusions: Vec<DriftExclusion>,
}

/// Drift handling mode.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum DriftMode {
    /// Revert local changes and report them.
    #[default]
    Correct,
    /// Report local changes, keep them.
    Report,
    /// Neither report nor correct.
    Ignore,
}

/// Paths excluded from drift detection, optionally only for some objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftExclusion {
    /// JSON Pointers; a `*` token matches any list index or map key, e.g. `/spec/containers/*/image`.
    pub paths: Vec<String>,
    /// Restrict the exclusion to these objects. Default: every object of the rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<DriftTarget>,
}

/// Objects a drift exclusion applies to; set fields are AND'd.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DriftTarget {
    /// Kind of the object (useful when mutations change the GVK).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Namespace of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Labels of the object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
}

/// Whether the status of copies is reported back to the origin.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum StatusReturn {
    /// Do not report status.
    #[default]
    None,
    /// When exactly one cluster holds a copy, that copy's `.status` is written into the
    /// source object's `.status` on the origin (server-side apply, field manager
    /// `fleetbus-status`, so status fleetbus did not write is kept).
    Singleton,
    /// One ReportedState per object and sink cluster.
    PerCluster,
}

/// Observed state of a ResourceSyncRule on the local cluster.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceSyncRuleStatus {
    /// `metadata.generation` this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions: Ready, Invalid (with the validation message).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// Names of the clusters currently used as sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub source_clusters: Vec<String>,
    /// Number of copies currently in sync.
    #[serde(default)]
    pub objects_synced: i64,
    /// Number of objects not written because a local object or another origin owns the name.
    #[serde(default)]
    pub conflicts: i64,
    /// Number of objects that failed to sync.
    #[serde(default)]
    pub errors: i64,
    /// Number of this cluster's objects the rule selects that are never published
    /// (ServiceAccount and bootstrap tokens, objects fleetbus writes itself); the
    /// `Skipped` condition says which and why.
    #[serde(default)]
    pub skipped: i64,
    /// Last time an object was written by this rule.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_sync_time: Option<Time>,
    /// On the origin of a rule with `statusReturn`: `ready <ready>/<reported>` over the
    /// copies of this cluster's objects that sinks report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readiness: Option<String>,
    /// Copies of this cluster's objects reported ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_copies: Option<i64>,
    /// Copies of this cluster's objects whose status sinks report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_copies: Option<i64>,
    /// On the origin of a rule with `spec.rollout`: its rollouts of this
    /// cluster's objects (at most 20, those not Complete first), from the
    /// records it put (PROTOCOL §6.9).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rollouts: Vec<RolloutSummary>,
    /// How many rollouts there are in all (`rollouts` may show fewer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollouts_total: Option<i64>,
}

/// One rollout of a source object, as the rule's status shows it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RolloutSummary {
    /// The source object, `Kind namespace/name`.
    pub object: String,
    /// `Progressing`, `Paused`, `Complete`, `Aborted`, `RolledBack` or `Gone`.
    pub phase: String,
    /// The rollout's revision (one per new source version).
    pub revision: i64,
    /// The group being rolled (1-based) and the number of groups.
    pub step: String,
    /// Clusters admitted to the newest version.
    pub admitted: i64,
    /// What it waits for, or why it stopped.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}
