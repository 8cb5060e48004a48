//! The `SyncPolicy` resource: what this cluster publishes for rules created
//! elsewhere, and what copies it accepts. Local to its cluster, never
//! replicated (no built-in rule syncs it).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube_derive::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The one policy object the agent reads (others are reported as ignored).
pub const SYNC_POLICY_NAME: &str = "default";

/// What leaves this cluster and what enters it, whatever rules say.
///
/// `export` is asked for each of this cluster's objects a rule created on
/// another cluster selects; `import` for each copy any rule would write here.
/// A direction left out keeps the built-in default (PROTOCOL §8, "SyncPolicy"). Unknown
/// fields are kept by the API server so the agent can refuse the object
/// (status `Valid=False`) rather than silently read a typo as absent.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleetbus.io",
    version = "v1alpha1",
    kind = "SyncPolicy",
    plural = "syncpolicies",
    shortname = "sp",
    status = "SyncPolicyStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "This cluster's policy on what it publishes for, and accepts from, rules (local, not replicated).",
    printcolumn(
        name = "Valid",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Valid\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct SyncPolicySpec {
    /// What this cluster publishes for rules created on other clusters.
    /// Absent: the built-in default (no Secret out of `kube-system`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export: Option<PolicyDirection>,
    /// Which copies this cluster accepts, whoever created the rule.
    /// Absent: the built-in default (no cluster-wide RBAC, admission
    /// webhook configuration or CustomResourceDefinition in).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub import: Option<PolicyDirection>,
}

/// One direction: entries tried in order, the first that matches decides;
/// `otherwise` when none does.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PolicyDirection {
    /// Entries, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rules: Vec<PolicyEntry>,
    /// What happens when no entry matches. Default: Allow.
    #[serde(default)]
    pub otherwise: PolicyAction,
}

/// One entry: it matches an object when every list it sets matches (an
/// empty or absent list matches everything).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct PolicyEntry {
    /// Allow or Deny.
    pub action: PolicyAction,
    /// Kinds (group and kind, every version; the core group is ""; kind `*`
    /// is every kind of the group).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kinds: Vec<PolicyKind>,
    /// Namespaces. Set, it never matches a cluster-scoped object.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Clusters the rule was created on (its author cluster). For `export`
    /// these are other clusters (this cluster's own rules are not asked);
    /// for `import` this cluster's own name matches its local rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub authors: Vec<String>,
}

/// A kind, every version.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PolicyKind {
    /// API group; empty for the core group.
    #[serde(default)]
    pub group: String,
    /// Kind, e.g. `Secret`; `*` for every kind of the group.
    pub kind: String,
}

/// What a policy entry decides.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PolicyAction {
    /// Publish (export) or write (import).
    #[default]
    Allow,
    /// Do not.
    Deny,
}

/// Observed state of a SyncPolicy.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicyStatus {
    /// `Valid`: True when the agent applies this policy; False (reason
    /// `Invalid` or `Ignored`) when it does not (`Invalid`: the message
    /// says which policy is in force instead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
