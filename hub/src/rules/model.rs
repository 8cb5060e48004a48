//! The pure part of the rule views: each rule across the fleet, from the records
//! and the clusters' states. No IO, no clock: fed fixed data in tests.

use std::collections::BTreeMap;

use fleetbus_schemas::crd::ClusterState;
use fleetbus_schemas::rule_status::{RuleCellState, RuleStatusRecord};
use serde::Serialize;

use crate::fleet::ClusterView;

/// How bad a cell is, for the rule's one word: the worst cell wins, and
/// `NotSelected` only when every cell is.
fn rank(s: RuleCellState) -> u8 {
    match s {
        RuleCellState::NotSelected => 0,
        RuleCellState::Synced => 1,
        // An operator's choice, no failure; but not converging either.
        RuleCellState::Suspended => 2,
        RuleCellState::Waiting => 3,
        RuleCellState::Conflict => 4,
        RuleCellState::Error => 5,
        RuleCellState::Invalid => 6,
    }
}

/// One rule's status on one cluster, with that cluster's state.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cell {
    /// The record its agent wrote.
    #[serde(flatten)]
    pub record: RuleStatusRecord,
    /// The cluster's state now (`None`: no record of it in the registry).
    pub cluster_state: Option<ClusterState>,
}

/// Copies reported ready / reported, summed over a rule's origins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Readiness {
    /// Copies reported ready.
    pub ready: u64,
    /// Copies that reported.
    pub reported: u64,
}

/// One rule across the fleet.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleRow {
    /// The rule's name.
    pub name: String,
    /// The worst cell's state.
    pub state: RuleCellState,
    /// Clusters that are sources of it.
    pub sources: Vec<String>,
    /// Clusters that are sinks of it.
    pub sinks_selected: u64,
    /// Sinks in each state.
    pub sinks_synced: u64,
    /// See `sinksSynced`.
    pub sinks_waiting: u64,
    /// See `sinksSynced`.
    pub sinks_error: u64,
    /// See `sinksSynced`.
    pub sinks_conflict: u64,
    /// Ready copies of its origins' objects, when origins return status.
    pub ready: Option<Readiness>,
    /// Objects failing, over all clusters.
    pub errors: u64,
    /// Objects in conflict, over all clusters.
    pub conflicts: u64,
    /// Every cluster that reported it, by name.
    pub cells: Vec<Cell>,
}

/// The cells of every rule, by rule. Records of clusters that left the fleet
/// are not counted: what they said no longer holds.
pub fn rows(records: &[RuleStatusRecord], clusters: &[ClusterView]) -> Vec<RuleRow> {
    let state_of = |r: &RuleStatusRecord| {
        clusters
            .iter()
            .find(|c| c.record.name == r.cluster && c.record.cluster_id == r.cluster_id)
            .map(|c| c.state)
    };
    let mut by_rule: BTreeMap<&str, Vec<Cell>> = BTreeMap::new();
    for r in records {
        let cluster_state = state_of(r);
        if cluster_state == Some(ClusterState::Left) {
            continue;
        }
        by_rule.entry(&r.rule).or_default().push(Cell {
            record: r.clone(),
            cluster_state,
        });
    }
    by_rule
        .into_iter()
        .map(|(name, mut cells)| {
            cells.sort_by(|a, b| a.record.cluster.cmp(&b.record.cluster));
            row(name, cells)
        })
        .collect()
}

fn row(name: &str, cells: Vec<Cell>) -> RuleRow {
    let sinks = || cells.iter().filter(|c| c.record.sink);
    let sinks_in = |s: RuleCellState| sinks().filter(|c| c.record.state == s).count() as u64;
    let reported: Vec<(u64, u64)> = cells
        .iter()
        .filter_map(|c| Some((c.record.ready_copies?, c.record.reported_copies?)))
        .collect();
    RuleRow {
        name: name.to_owned(),
        state: cells
            .iter()
            .map(|c| c.record.state)
            .max_by_key(|s| rank(*s))
            .unwrap_or(RuleCellState::NotSelected),
        sources: cells
            .iter()
            .filter(|c| c.record.source)
            .map(|c| c.record.cluster.clone())
            .collect(),
        sinks_selected: sinks().count() as u64,
        sinks_synced: sinks_in(RuleCellState::Synced),
        sinks_waiting: sinks_in(RuleCellState::Waiting),
        sinks_error: sinks_in(RuleCellState::Error) + sinks_in(RuleCellState::Invalid),
        sinks_conflict: sinks_in(RuleCellState::Conflict),
        ready: (!reported.is_empty()).then(|| Readiness {
            ready: reported.iter().map(|r| r.0).sum(),
            reported: reported.iter().map(|r| r.1).sum(),
        }),
        errors: cells.iter().map(|c| c.record.errors).sum(),
        conflicts: cells.iter().map(|c| c.record.conflicts).sum(),
        cells,
    }
}

/// The role words: `sink`, `source`, `sink+source`, or `-`.
pub fn role(r: &RuleStatusRecord) -> &'static str {
    match (r.sink, r.source) {
        (true, true) => "sink+source",
        (true, false) => "sink",
        (false, true) => "source",
        (false, false) => "-",
    }
}
