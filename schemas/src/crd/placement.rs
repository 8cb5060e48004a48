//! `spec.placement` of a ResourceSyncRule: on how many of the clusters its
//! `clusterSelector` matches each source object's copy lives, which ones,
//! and when a chosen cluster is replaced (PROTOCOL §6.10). Types and their
//! arithmetic only; the decision is the origin agent's (`agent::sync::placement`).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where each source object's copies live, among the clusters the rule's
/// `clusterSelector` matches. Absent: on every one of them.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// How many clusters hold each object's copy: a count (at least 1) or a
    /// percent of the clusters the selector matches ("50%", rounded up, at
    /// least 1). Absent: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<IntOrString>,
    /// Spread the chosen clusters over the values of a Cluster label.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spread: Vec<SpreadConstraint>,
    /// Scores: a cluster's score is the sum of the weights of the entries it
    /// satisfies (a capacity entry gives its weight times the cluster's share
    /// of the largest capacity among the candidates). Higher wins; ties go by
    /// a stable hash of (rule, object, cluster).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prefer: Vec<Preference>,
    /// Cluster taints this rule's copies tolerate.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// `Steady`: keep a decision until a chosen cluster fails or stops
    /// matching. `Rebalance`: decide again on every fleet change.
    #[serde(default)]
    pub mode: PlacementMode,
    /// When and how a failed chosen cluster is replaced.
    #[serde(default)]
    pub failover: Failover,
    /// Divide a workload's replicas over the chosen clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicaDivision>,
    /// Rules naming the same group share one decision per origin: a
    /// Deployment and the ConfigMap and Secret it needs land on the same
    /// clusters. The group is placed by the placement of its rule first by
    /// name; every rule of a group must have the same `placement` (else the
    /// later ones are Invalid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
}

/// One spread constraint.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SpreadConstraint {
    /// The Cluster label whose values are the domains (a region, a zone).
    pub topology_key: String,
    /// How many more chosen clusters one domain may hold than another (at least 1).
    #[serde(default = "one")]
    pub max_skew: u32,
}

fn one() -> u32 {
    1
}

/// One scoring entry: exactly one of `clusterSelector` or `capacity`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Preference {
    /// 1 to 100.
    pub weight: i32,
    /// Clusters whose labels match get the weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
    /// More allocatable capacity (summed over the cluster's Nodes) scores higher.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<Capacity>,
}

/// A resource whose allocatable amount scores.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Capacity {
    /// Allocatable CPU.
    Cpu,
    /// Allocatable memory.
    Memory,
}

/// A taint a rule's copies tolerate (Kubernetes' toleration, for clusters).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Toleration {
    /// The taint key (empty with `Exists`: every taint).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub key: String,
    /// `Equal` (the default) or `Exists`.
    #[serde(default)]
    pub operator: TolerationOperator,
    /// The value `Equal` compares with.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// The effect tolerated; absent: every effect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<TaintEffect>,
}

/// How a toleration matches a taint's value.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum TolerationOperator {
    /// Key and value equal.
    #[default]
    Equal,
    /// The key exists (any value).
    Exists,
}

/// What a cluster taint does to placement.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
pub enum TaintEffect {
    /// No new placement on the cluster; existing ones stay.
    NoSchedule,
    /// Existing placements move away after `failover.afterSeconds`.
    NoExecute,
}

impl TaintEffect {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NoSchedule => "NoSchedule",
            Self::NoExecute => "NoExecute",
        }
    }

    /// Reads `NoSchedule` or `NoExecute`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "NoSchedule" => Some(Self::NoSchedule),
            "NoExecute" => Some(Self::NoExecute),
            _ => None,
        }
    }
}

/// A taint on a cluster, as an operator put it (`fleetbus clusters taint`).
#[derive(
    Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTaint {
    /// A qualified name.
    pub key: String,
    /// A label value (may be empty).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub value: String,
    /// What it does.
    pub effect: TaintEffect,
}

impl Toleration {
    /// Whether this toleration tolerates `t`.
    pub fn tolerates(&self, t: &ClusterTaint) -> bool {
        if self.effect.is_some_and(|e| e != t.effect) {
            return false;
        }
        match self.operator {
            TolerationOperator::Exists => self.key.is_empty() || self.key == t.key,
            TolerationOperator::Equal => self.key == t.key && self.value == t.value,
        }
    }
}

/// `mode` of a placement.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PlacementMode {
    /// Keep a decision until a chosen cluster fails or stops matching.
    #[default]
    Steady,
    /// Decide again on every fleet change.
    Rebalance,
}

/// `failover` of a placement.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// A chosen cluster Disconnected or ApiUnreachable this long, or tainted
    /// NoExecute (untolerated) this long, is replaced.
    #[serde(default = "default_after")]
    pub after_seconds: u32,
    /// What happens when a replaced cluster is healthy again.
    #[serde(default)]
    pub failback: Failback,
    /// When the replaced cluster's copy goes.
    #[serde(default)]
    pub purge: Purge,
}

impl Default for Failover {
    fn default() -> Self {
        Self {
            after_seconds: default_after(),
            failback: Failback::default(),
            purge: Purge::default(),
        }
    }
}

fn default_after() -> u32 {
    30
}

/// `failover.failback`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Failback {
    /// The replacement stays.
    #[default]
    Never,
    /// The returned cluster is chosen again, the replacement released.
    Immediate,
}

/// `failover.purge`: when a cluster that is no longer chosen loses its copy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Purge {
    /// Once every chosen cluster's copy is healthy (Current).
    #[default]
    Graciously,
    /// At once.
    Immediately,
    /// Never: the copy stays, no longer updated.
    Never,
}

/// `replicas` of a placement.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaDivision {
    /// JSON Pointer of the replica count in the copy (`/spec/replicas`).
    pub path: String,
    /// `Equal` or `Weighted` (by the chosen clusters' scores).
    #[serde(default)]
    pub divide: Divide,
}

/// How replicas are divided.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Divide {
    /// The same share each (remainders to the first clusters by name).
    #[default]
    Equal,
    /// In proportion to the chosen clusters' scores (largest remainders first).
    Weighted,
}

/// A `clusters` count as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterCount {
    /// Exactly this many (at least 1).
    Count(u32),
    /// This percent of the matched clusters, rounded up (1 to 100).
    Percent(u32),
}

impl ClusterCount {
    /// Reads `v`: an int at least 1, or `"N%"` with 1 <= N <= 100.
    pub fn parse(v: &IntOrString) -> Result<Self, String> {
        match v {
            IntOrString::Int(n) if *n >= 1 => Ok(Self::Count(n.unsigned_abs())),
            IntOrString::Int(n) => Err(format!("{n}: a count must be at least 1")),
            IntOrString::String(s) => match s.strip_suffix('%').map(str::parse::<u32>) {
                Some(Ok(p)) if (1..=100).contains(&p) => Ok(Self::Percent(p)),
                _ => match s.parse::<u32>() {
                    Ok(n) if n >= 1 => Ok(Self::Count(n)),
                    _ => Err(format!("{s:?}: want a count or a percent from 1% to 100%")),
                },
            },
        }
    }

    /// How many of `matched` clusters: a percent rounds up (at least N% of
    /// the clusters hold a copy), never more than `matched`, at least 1
    /// when any matched.
    pub fn of(self, matched: usize) -> usize {
        let n = match self {
            Self::Count(n) => usize::try_from(n).unwrap_or(usize::MAX),
            Self::Percent(p) => (matched.saturating_mul(p as usize)).div_ceil(100),
        };
        n.max(1).min(matched)
    }
}

/// Divides `total` over `weights` (one per chosen cluster, in order): shares
/// in proportion, floored, the remainder given one by one to the largest
/// fractional parts (ties: earlier first). All weights 0 (or none positive):
/// equal shares. The shares always sum to `total`.
pub fn divide(total: i64, weights: &[f64]) -> Vec<i64> {
    let n = weights.len();
    if n == 0 || total <= 0 {
        return vec![0; n];
    }
    let sum: f64 = weights.iter().filter(|w| **w > 0.0).sum();
    let w: Vec<f64> = if sum > 0.0 {
        weights.iter().map(|x| x.max(0.0) / sum).collect()
    } else {
        vec![1.0 / n as f64; n]
    };
    let exact: Vec<f64> = w.iter().map(|x| x * total as f64).collect();
    let mut shares: Vec<i64> = exact.iter().map(|x| x.floor() as i64).collect();
    let mut left = total - shares.iter().sum::<i64>();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| {
        let fa = exact[*a] - exact[*a].floor();
        let fb = exact[*b] - exact[*b].floor();
        fb.partial_cmp(&fa)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then(a.cmp(b))
    });
    for i in order.into_iter().cycle() {
        if left <= 0 {
            break;
        }
        shares[i] += 1;
        left -= 1;
    }
    shares
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_percents_round_up_within_what_matched() {
        let p = |s: &str| ClusterCount::parse(&IntOrString::String(s.into()));
        assert_eq!(p("50%").unwrap().of(3), 2, "50% of 3 rounds up");
        assert_eq!(p("1%").unwrap().of(3), 1);
        assert_eq!(p("100%").unwrap().of(7), 7);
        assert_eq!(ClusterCount::Count(5).of(3), 3, "never more than matched");
        assert_eq!(ClusterCount::Count(2).of(0), 0);
        assert_eq!(p("2").unwrap(), ClusterCount::Count(2));
        for bad in ["0%", "101%", "x", "-1", "0"] {
            assert!(p(bad).is_err(), "{bad}");
        }
        assert!(ClusterCount::parse(&IntOrString::Int(0)).is_err());
    }

    #[test]
    fn replicas_divide_by_weight_and_always_sum_to_the_total() {
        assert_eq!(divide(10, &[50.0, 30.0, 20.0]), vec![5, 3, 2]);
        assert_eq!(divide(10, &[1.0, 1.0, 1.0]), vec![4, 3, 3]);
        assert_eq!(divide(10, &[0.0, 0.0]), vec![5, 5]);
        assert_eq!(divide(1, &[1.0, 1.0, 1.0]), vec![1, 0, 0]);
        assert_eq!(divide(7, &[]), Vec::<i64>::new());
        for total in 0..40 {
            for w in [&[3.0, 7.0][..], &[1.0, 2.0, 3.0, 4.0], &[0.3, 0.3, 0.4]] {
                assert_eq!(divide(total, w).iter().sum::<i64>(), total);
            }
        }
    }

    #[test]
    fn tolerations_match_taints_like_kubernetes_ones() {
        let t = ClusterTaint {
            key: "maintenance".into(),
            value: String::new(),
            effect: TaintEffect::NoSchedule,
        };
        let exists = Toleration {
            key: "maintenance".into(),
            operator: TolerationOperator::Exists,
            ..Toleration::default()
        };
        assert!(exists.tolerates(&t));
        let other_effect = Toleration {
            effect: Some(TaintEffect::NoExecute),
            ..exists.clone()
        };
        assert!(!other_effect.tolerates(&t));
        let equal_wrong_value = Toleration {
            key: "maintenance".into(),
            value: "yes".into(),
            ..Toleration::default()
        };
        assert!(!equal_wrong_value.tolerates(&t));
        let everything = Toleration {
            operator: TolerationOperator::Exists,
            ..Toleration::default()
        };
        assert!(everything.tolerates(&t));
    }
}
