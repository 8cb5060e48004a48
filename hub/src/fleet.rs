//! What the bus says about the fleet's clusters, read once: the records of the
//! registry bucket and each cluster's state in the one vocabulary every view
//! uses ([`fleetbus_schemas::registry::peer_state`]). Shared by `clusters ls`,
//! `clusters progress` and every later view (`status`, the dashboard), so they
//! cannot disagree.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use fleetbus_schemas::crd::ClusterState;
use fleetbus_schemas::registry::{
    peer_state, registry_bucket, ClusterRecord, MemberState, PeerFacts, RegistryKey,
};
use fleetbus_schemas::subject::Prefix;

use crate::kv::ReadError;

/// One cluster as a reader of the bus sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterView {
    /// The cluster's latest record.
    pub record: ClusterRecord,
    /// Its state. Never `Disabled`: that is one agent's local decision about a
    /// peer, not a fact on the bus.
    pub state: ClusterState,
    /// Time since the last heartbeat, by the reader's clock (None if in the future).
    pub heartbeat_age: Option<std::time::Duration>,
}

/// Every cluster record of the registry bucket, sorted by name then ID
/// (unreadable ones are skipped, as agents skip them).
pub async fn cluster_records(
    js: &async_nats::jetstream::Context,
    prefix: &Prefix,
) -> Result<Vec<ClusterRecord>, ReadError> {
    let bucket = registry_bucket(prefix);
    let (kv, keys) = crate::kv::keys(js, prefix, &bucket).await?;
    let mut records = Vec::new();
    for key in keys {
        if !matches!(RegistryKey::parse(&key), Ok(RegistryKey::Cluster { .. })) {
            continue;
        }
        let Some(bytes) = kv
            .get(&key)
            .await
            .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?
        else {
            continue;
        };
        if let Ok(r) = ClusterRecord::decode(&bytes) {
            records.push(r);
        }
    }
    records.sort_by(|a, b| (&a.name, &a.cluster_id).cmp(&(&b.name, &b.cluster_id)));
    Ok(records)
}

/// Every cluster with its state at `now`.
pub async fn clusters(
    js: &async_nats::jetstream::Context,
    prefix: &Prefix,
    now: DateTime<Utc>,
) -> Result<Vec<ClusterView>, ReadError> {
    Ok(views(cluster_records(js, prefix).await?, now))
}

/// The pure half of [`clusters`]: states from records. Two live records
/// claiming one name are both `Conflict`.
pub fn views(records: Vec<ClusterRecord>, now: DateTime<Utc>) -> Vec<ClusterView> {
    let mut claims: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &records {
        if r.state == MemberState::Active && r.is_alive(now) {
            *claims.entry(r.name.as_str()).or_default() += 1;
        }
    }
    let conflicted: Vec<String> = claims
        .into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(name, _)| name.to_owned())
        .collect();
    records
        .into_iter()
        .map(|record| {
            let facts = PeerFacts {
                left: record.state == MemberState::Left,
                alive: record.is_alive(now),
                disabled: false,
                name_conflict: conflicted.contains(&record.name),
                api_unreachable: !record.api.is_reachable(),
            };
            ClusterView {
                state: peer_state(facts),
                heartbeat_age: now.signed_duration_since(record.heartbeat_at).to_std().ok(),
                record,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::registry::ApiHealth;

    fn record(name: &str, id: &str, beat_secs_ago: i64, now: DateTime<Utc>) -> ClusterRecord {
        let json = serde_json::json!({
            "schema": "fleetbus.io/cluster/v1", "name": name, "clusterID": id,
            "state": "Active", "agentVersion": "0.1.0",
            "startedAt": "2026-11-27T00:00:00Z",
            "heartbeatAt": (now - chrono::Duration::seconds(beat_secs_ago)).to_rfc3339(),
            "heartbeatIntervalSeconds": 10, "seq": 1, "members": [],
        });
        ClusterRecord::decode(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn one_vocabulary_from_records() {
        let now: DateTime<Utc> = "2026-11-27T01:00:00Z".parse().unwrap();
        let mut api_down = record("c", "3", 1, now);
        api_down.api = ApiHealth::unreachable("GET /readyz did not answer");
        let mut left = record("d", "4", 100, now);
        left.state = MemberState::Left;
        let records = vec![
            record("a", "1", 5, now),
            record("b", "2", 31, now),
            api_down,
            left,
            record("e", "5", 1, now),
            record("e", "6", 2, now),
            // A silent rival does not make the live claimant a Conflict.
            record("f", "7", 1, now),
            record("f", "8", 300, now),
        ];
        let states: Vec<(String, ClusterState)> = views(records, now)
            .into_iter()
            .map(|v| (v.record.name, v.state))
            .collect();
        use ClusterState::*;
        let want = [
            ("a", Ready),
            ("b", Disconnected),
            ("c", ApiUnreachable),
            ("d", Left),
            ("e", Conflict),
            ("e", Conflict),
            ("f", Ready),
            ("f", Disconnected),
        ];
        let want: Vec<(String, ClusterState)> =
            want.iter().map(|(n, s)| ((*n).to_owned(), *s)).collect();
        assert_eq!(states, want);
    }
}
