//! The pure part of `fleetbus status`: what needs attention, from the clusters,
//! the rule rows and the drifted copies. No IO, no clock.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use fleetbus_schemas::crd::ClusterState;
use fleetbus_schemas::drift::DriftEvent;
use serde::Serialize;

use crate::drift::render::age;
use crate::fleet::ClusterView;
use crate::rules::model::RuleRow;

/// One thing an operator should look at.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Attention {
    /// `cluster`, `rule` or `drift`.
    pub kind: &'static str,
    /// The cluster, rule or object concerned.
    pub name: String,
    /// Its state word.
    pub state: String,
    /// What is wrong, for people.
    pub detail: String,
}

/// Clusters that need attention: those not Ready and not Left.
fn cluster_needs_attention(s: ClusterState) -> bool {
    matches!(
        s,
        ClusterState::Disconnected | ClusterState::ApiUnreachable | ClusterState::Conflict
    )
}

/// How many clusters are in each state, by the state's word.
pub fn clusters_by_state(clusters: &[ClusterView]) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for c in clusters {
        *by.entry(format!("{:?}", c.state)).or_default() += 1;
    }
    by
}

/// Everything that needs attention, clusters first, then rules, then drift.
pub fn attention(
    clusters: &[ClusterView],
    rules: &[RuleRow],
    drifted: &[DriftEvent],
    now: DateTime<Utc>,
) -> Vec<Attention> {
    let mut out = Vec::new();
    for c in clusters.iter().filter(|c| cluster_needs_attention(c.state)) {
        let r = &c.record;
        let detail = match c.state {
            ClusterState::ApiUnreachable => format!(
                "its agent cannot reach its API server{}",
                if r.api.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.api.message)
                }
            ),
            ClusterState::Conflict => format!(
                "two live agents claim the name (this one has cluster ID {})",
                r.cluster_id
            ),
            _ => format!(
                "no heartbeat for {}",
                age(now.signed_duration_since(r.heartbeat_at))
            ),
        };
        out.push(Attention {
            kind: "cluster",
            name: r.name.clone(),
            state: format!("{:?}", c.state),
            detail,
        });
    }
    for row in rules {
        for c in row
            .cells
            .iter()
            .filter(|c| c.record.state.needs_attention())
        {
            let r = &c.record;
            let first = r
                .problems
                .first()
                .map(|p| format!("{}: {}", p.object, p.message))
                .unwrap_or_else(|| r.message.clone());
            out.push(Attention {
                kind: "rule",
                name: row.name.clone(),
                state: r.state.to_string(),
                detail: format!("on {}: {first}", r.cluster),
            });
        }
    }
    for e in drifted {
        let o = &e.object;
        let object = match &o.namespace {
            Some(ns) => format!("{} {ns}/{}", o.kind, o.name),
            None => format!("{} {}", o.kind, o.name),
        };
        out.push(Attention {
            kind: "drift",
            name: object,
            state: e.phase.as_str().to_owned(),
            detail: format!(
                "on {} (rule {}), for {}",
                e.cluster,
                e.rule,
                age(now.signed_duration_since(e.detected_at))
            ),
        });
    }
    out
}
