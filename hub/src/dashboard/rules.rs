//! The rules × clusters grid from the rule status bucket (`<prefix>-rulestatus`,
//! PROTOCOL §5.3): one cell per (rule, cluster), the record as its agent wrote it.

use std::collections::{BTreeMap, BTreeSet};

use fleetbus_schemas::registry::{ClusterRecord, MemberState};
use fleetbus_schemas::rule_status::RuleStatusRecord;
use fleetbus_schemas::subject::Prefix;
use serde::Serialize;

use crate::kv::ReadError;
use crate::rules::read::RuleStatuses;
use crate::rules::RulesError;

/// What `/api/rules` returns.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Grid {
    /// Rule names, sorted: the rows.
    pub(crate) rules: Vec<String>,
    /// Cluster names, sorted: the columns (every active cluster of the registry, and
    /// every cluster that reports a status).
    pub(crate) clusters: Vec<String>,
    /// One record per reported (rule, cluster), as its agent wrote it.
    pub(crate) cells: Vec<serde_json::Value>,
    /// Records that did not decode or validate (not shown, counted).
    pub(crate) skipped: u64,
    /// Set when there is nothing to show and why (no bucket yet).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
}

/// Reads the grid (columns: the active clusters of `registry` and every cluster that
/// reports); only `rule`'s row and `cluster`'s column when given. The dashboard reads
/// the bucket this way only until its watch of the bucket has caught up ([`of`]).
pub(crate) async fn grid(
    js: &async_nats::jetstream::Context,
    prefix: &Prefix,
    registry: Vec<ClusterRecord>,
    rule: Option<&str>,
    cluster: Option<&str>,
) -> Result<Grid, ReadError> {
    // The same reader as `fleetbus rules`: one decision on what can be shown.
    match crate::rules::read::read(js, prefix).await {
        Ok(statuses) => Ok(of(registry, statuses, rule, cluster)),
        Err(RulesError::NoRuleStatus { bucket, .. }) => Ok(no_bucket(registry, &bucket)),
        Err(RulesError::Read(e)) => Err(e),
        Err(other) => Err(crate::kv::unreadable_bucket(
            &fleetbus_schemas::rule_status::rule_status_bucket(prefix),
            other,
        )),
    }
}

/// The grid of `statuses` (see [`grid`]).
pub(crate) fn of(
    registry: Vec<ClusterRecord>,
    statuses: RuleStatuses,
    rule: Option<&str>,
    cluster: Option<&str>,
) -> Grid {
    let mut clusters = active(registry);
    let skipped = u64::try_from(statuses.skipped.len()).unwrap_or(u64::MAX);
    let cells = pick(statuses.records, rule, cluster);
    clusters.extend(cells.keys().map(|(_, c)| c.clone()));
    if let Some(c) = cluster {
        clusters.retain(|name| name == c);
    }
    let rules: BTreeSet<String> = cells.keys().map(|(r, _)| r.clone()).collect();
    Grid {
        rules: rules.into_iter().collect(),
        clusters: clusters.into_iter().collect(),
        cells: cells.values().filter_map(to_json).collect(),
        skipped,
        note: None,
    }
}

/// The grid when there is no rule status `bucket`: agents older than the rule status
/// protocol do not create it, so an empty grid that says so, not an error page.
pub(crate) fn no_bucket(registry: Vec<ClusterRecord>, bucket: &str) -> Grid {
    Grid {
        clusters: active(registry).into_iter().collect(),
        note: Some(format!(
            "no bucket {bucket} yet: agents report rule status there once they run a \
             fleetbus version that writes it"
        )),
        ..Grid::default()
    }
}

fn active(registry: Vec<ClusterRecord>) -> BTreeSet<String> {
    registry
        .into_iter()
        .filter(|r| r.state == MemberState::Active)
        .map(|r| r.name)
        .collect()
}

/// One record per (rule, cluster): when a name has two cluster IDs (a cluster
/// re-created, or a conflict), the latest written wins.
fn pick(
    records: Vec<RuleStatusRecord>,
    rule: Option<&str>,
    cluster: Option<&str>,
) -> BTreeMap<(String, String), RuleStatusRecord> {
    let mut cells: BTreeMap<(String, String), RuleStatusRecord> = BTreeMap::new();
    for r in records {
        if rule.is_some_and(|x| x != r.rule) || cluster.is_some_and(|x| x != r.cluster) {
            continue;
        }
        let slot = (r.rule.clone(), r.cluster.clone());
        match cells.get(&slot) {
            Some(old) if old.updated_at >= r.updated_at => {}
            _ => {
                cells.insert(slot, r);
            }
        }
    }
    cells
}

fn to_json(r: &RuleStatusRecord) -> Option<serde_json::Value> {
    serde_json::from_slice(&r.encode().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::rule_status::RuleCellState;

    fn record(rule: &str, cluster: &str, id: &str, at: &str) -> RuleStatusRecord {
        let json = serde_json::json!({
            "schema": "fleetbus.io/rulestatus/v1", "cluster": cluster, "clusterID": id,
            "rule": rule, "state": "Synced", "sink": true, "source": false,
            "updatedAt": at,
        });
        RuleStatusRecord::decode(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn the_latest_record_of_a_name_wins_and_filters_apply() {
        let mut old = record("web", "c2", "old", "2026-11-27T01:00:00Z");
        old.state = RuleCellState::Error;
        let new = record("web", "c2", "new", "2026-11-27T01:00:05Z");
        let other = record("cfg", "c1", "u1", "2026-11-27T01:00:00Z");
        let cells = pick(vec![new.clone(), old.clone(), other.clone()], None, None);
        assert_eq!(cells.len(), 2);
        assert_eq!(
            cells[&("web".to_owned(), "c2".to_owned())].cluster_id,
            "new"
        );
        let cells = pick(vec![old, new, other], Some("cfg"), None);
        let keys: Vec<&(String, String)> = cells.keys().collect();
        assert_eq!(keys, [&("cfg".to_owned(), "c1".to_owned())]);
    }
}
