//! What is worth a message in records that are put again and again (rollout
//! and placement records, rule status, cluster health): a change, not every
//! put. Pure: each follower remembers what it last saw per subject and says
//! what turned.
//!
//! What is remembered is in memory: a bridge that restarts sees the next put
//! of a record as new and may say once more what it said before (delivery is
//! at least once, `bridge`). Health starts silent: the first read of the
//! registry is what "now" is, as a new bridge's consumers start at new
//! events.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::Utc;
use fleetbus_schemas::crd::ClusterState;
use fleetbus_schemas::placement::PlacementRecord;
use fleetbus_schemas::rollout::{RolloutPhase, RolloutRecord};
use fleetbus_schemas::rule_status::RuleStatusRecord;

use super::message::{Notification, Severity};
use crate::fleet::ClusterView;

/// What a placement record said last: its degradation and the failovers
/// (replaced, replacement) it lists.
type PlacementSeen = (Option<String>, BTreeSet<(String, String)>);

/// Records remembered per kind, at most: any member may publish records
/// under distinct subjects of its own. Past it, an arbitrary one is
/// forgotten (its next put may be said once more).
const REMEMBERED: usize = 100_000;

/// `map[key] = value`, the value before returned; at [`REMEMBERED`]
/// entries, one other entry is forgotten first.
fn remember<V>(map: &mut HashMap<String, V>, key: &str, value: V) -> Option<V> {
    if map.len() >= REMEMBERED && !map.contains_key(key) {
        if let Some(other) = map.keys().next().cloned() {
            map.remove(&other);
        }
    }
    map.insert(key.to_owned(), value)
}

/// The last rollout, placement and rule status seen per subject or key.
#[derive(Debug, Default)]
pub struct Transitions {
    rollouts: HashMap<String, (RolloutPhase, BTreeSet<String>)>,
    placements: HashMap<String, PlacementSeen>,
    refused: HashMap<String, u64>,
}

impl Transitions {
    /// A rollout record at `subject`: clusters newly failed (critical), or the
    /// rollout newly paused (warning).
    pub fn rollout(&mut self, subject: &str, r: &RolloutRecord) -> Option<Notification> {
        let failed: BTreeSet<String> = r.failed.keys().cloned().collect();
        let seen = if r.phase == RolloutPhase::Gone {
            self.rollouts.remove(subject)
        } else {
            remember(&mut self.rollouts, subject, (r.phase, failed.clone()))
        };
        let (was_phase, was_failed) = seen.unwrap_or((RolloutPhase::Progressing, BTreeSet::new()));
        let object = super::message::shown(&r.source);
        let newly: Vec<&String> = failed.difference(&was_failed).collect();
        let (severity, phase, what) = if !newly.is_empty() {
            let why: Vec<String> = newly
                .iter()
                .map(|c| format!("{c} ({})", r.failed.get(*c).map_or("", String::as_str)))
                .collect();
            // Paused by the same failure, in the same record: said with it.
            let paused = if r.phase == RolloutPhase::Paused && was_phase != RolloutPhase::Paused {
                "; paused"
            } else {
                ""
            };
            (
                Severity::Critical,
                "Failed",
                format!("failed on {}{paused}", why.join(", ")),
            )
        } else if r.phase == RolloutPhase::Paused && was_phase != RolloutPhase::Paused {
            let by = r
                .paused_by
                .as_ref()
                .map(|p| format!(" ({p:?})"))
                .unwrap_or_default();
            (Severity::Warning, "Paused", format!("paused{by}"))
        } else {
            return None;
        };
        let mut n = Notification::new("rollout", severity, &r.origin, &r.rule, phase);
        n.summary = format!(
            "rollout of {object} (rule {}, revision {}) from {} {what}{}",
            r.rule,
            r.revision,
            r.origin,
            if r.message.is_empty() {
                String::new()
            } else {
                format!(": {}", r.message)
            }
        );
        n.object = object;
        n.at = r.updated_at;
        Some(n)
    }

    /// A placement record of `origin` at `subject`: clusters newly replaced
    /// by a failover (warning), or the placement newly degraded (warning).
    pub fn placement(
        &mut self,
        subject: &str,
        origin: &str,
        r: &PlacementRecord,
    ) -> Option<Notification> {
        let replaced: BTreeSet<(String, String)> = r.replaced.iter().cloned().collect();
        let (was_degraded, was_replaced) = remember(
            &mut self.placements,
            subject,
            (r.degraded.clone(), replaced.clone()),
        )
        .unwrap_or_default();
        let newly: Vec<String> = replaced
            .difference(&was_replaced)
            .map(|(from, to)| format!("{from} by {to}"))
            .collect();
        // Both may turn in one record: one message says both.
        let degraded = r
            .degraded
            .as_ref()
            .filter(|why| was_degraded.as_ref() != Some(*why))
            .map(|why| format!("degraded: {why}"));
        let (phase, what) = match (newly.is_empty(), degraded) {
            (false, None) => ("Failover", format!("replaced {}", newly.join(", "))),
            (false, Some(d)) => ("Failover", format!("replaced {}; {d}", newly.join(", "))),
            (true, Some(d)) => ("PlacementDegraded", d),
            (true, None) => return None,
        };
        let mut n = Notification::new("placement", Severity::Warning, origin, &r.rule, phase);
        n.summary = format!(
            "placement of rule {} from {origin} {what} (now on {})",
            r.rule,
            r.chosen
                .iter()
                .map(|c| c.cluster.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
        n.at = r.decided_at;
        Some(n)
    }

    /// A rule status record at bucket key `key`: the cluster's SyncPolicy
    /// refusing more of the rule's objects than before (warning).
    pub fn rule_status(&mut self, key: &str, r: &RuleStatusRecord) -> Option<Notification> {
        let was = remember(&mut self.refused, key, r.refused).unwrap_or(0);
        if r.refused <= was {
            return None;
        }
        let mut n = Notification::new(
            "policy",
            Severity::Warning,
            &r.cluster,
            &r.rule,
            "PolicyRefused",
        );
        n.summary = format!(
            "the SyncPolicy of {} refuses {} object(s) of rule {} (was {was})",
            r.cluster, r.refused, r.rule
        );
        n.count = u32::try_from(r.refused - was).unwrap_or(u32::MAX);
        n.at = r.updated_at;
        Some(n)
    }

    /// A rule status deleted (the rule went): forgotten.
    pub fn rule_status_gone(&mut self, key: &str) {
        self.refused.remove(key);
    }
}

/// Each cluster's state at the last read of the registry, by (name, ID).
#[derive(Debug, Default)]
pub struct Health {
    states: Option<BTreeMap<(String, String), ClusterState>>,
}

impl Health {
    /// The clusters whose state changed since the last read (none at the
    /// first): a cluster turning Disconnected, ApiUnreachable or Conflict
    /// (critical), Left (warning), joining or Ready again (info).
    pub fn update(&mut self, views: &[ClusterView]) -> Vec<Notification> {
        let now: BTreeMap<(String, String), ClusterState> = views
            .iter()
            .map(|v| {
                (
                    (v.record.name.clone(), v.record.cluster_id.clone()),
                    v.state,
                )
            })
            .collect();
        let Some(before) = self.states.replace(now) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for v in views {
            let key = (v.record.name.clone(), v.record.cluster_id.clone());
            let was = before.get(&key).copied();
            if was == Some(v.state) {
                continue;
            }
            let (severity, what) = match (was, v.state) {
                (None, ClusterState::Ready) => (Severity::Info, "joined".to_owned()),
                (_, ClusterState::Ready) => (Severity::Info, "is Ready again".to_owned()),
                (_, ClusterState::Left) => (Severity::Warning, "left the fleet".to_owned()),
                (_, s) => (Severity::Critical, format!("is {s:?}")),
            };
            let phase = format!("{:?}", v.state);
            let mut n = Notification::new("cluster", severity, &v.record.name, "", &phase);
            n.summary = format!("cluster {} {what}", v.record.name);
            if v.state == ClusterState::ApiUnreachable && !v.record.api.message.is_empty() {
                n.summary.push_str(&format!(": {}", v.record.api.message));
            }
            n.labels = v.record.labels.clone();
            n.at = Utc::now();
            out.push(n);
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use fleetbus_schemas::registry::ClusterRecord;
    use serde_json::json;

    fn rollout(phase: &str, failed: serde_json::Value) -> RolloutRecord {
        serde_json::from_value(json!({
            "origin": "a", "rule": "web",
            "source": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": "cfg"},
            "revision": 2, "stable": null, "target": "0".repeat(64), "phase": phase,
            "failed": failed, "updatedAt": "2026-12-03T00:00:00.000Z",
        }))
        .unwrap()
    }

    #[test]
    fn a_rollout_says_when_it_pauses_and_when_a_cluster_fails_not_every_put() {
        let mut t = Transitions::default();
        let s = "fleetbus.rollout.a.web.core.v1.ConfigMap.apps.cfg";
        assert!(t.rollout(s, &rollout("Progressing", json!({}))).is_none());
        let n = t.rollout(s, &rollout("Paused", json!({}))).unwrap();
        assert_eq!(
            (n.kind, n.phase.as_str(), n.severity),
            ("rollout", "Paused", Severity::Warning)
        );
        assert!(
            t.rollout(s, &rollout("Paused", json!({}))).is_none(),
            "put again"
        );
        let n = t
            .rollout(s, &rollout("Paused", json!({"b": "CrashLoopBackOff"})))
            .unwrap();
        assert_eq!(
            (n.phase.as_str(), n.severity),
            ("Failed", Severity::Critical)
        );
        assert!(n.summary.contains("b (CrashLoopBackOff)"), "{}", n.summary);
        assert!(t
            .rollout(s, &rollout("Paused", json!({"b": "CrashLoopBackOff"})))
            .is_none());
    }

    #[test]
    fn a_placement_says_a_failover_and_a_degradation_that_turn_together() {
        let mut t = Transitions::default();
        let record = |replaced: serde_json::Value, degraded: Option<&str>| -> PlacementRecord {
            serde_json::from_value(json!({
                "rule": "web", "revision": 1,
                "chosen": [{"cluster": "c", "score": 1.0, "reason": "x"}],
                "replaced": replaced, "degraded": degraded,
                "decidedAt": "2026-12-03T00:00:00.000Z",
            }))
            .unwrap()
        };
        let s = "fleetbus.placement.a.g|web";
        assert!(t.placement(s, "a", &record(json!([]), None)).is_none());
        let n = t
            .placement(
                s,
                "a",
                &record(json!([["b", "c"]]), Some("1 of 2 clusters")),
            )
            .unwrap();
        assert_eq!(n.phase, "Failover");
        assert!(
            n.summary
                .contains("replaced b by c; degraded: 1 of 2 clusters"),
            "{}",
            n.summary
        );
        assert!(t
            .placement(
                s,
                "a",
                &record(json!([["b", "c"]]), Some("1 of 2 clusters"))
            )
            .is_none());
        let n = t
            .placement(
                s,
                "a",
                &record(json!([["b", "c"]]), Some("0 of 2 clusters")),
            )
            .unwrap();
        assert_eq!(n.phase, "PlacementDegraded");
    }

    #[test]
    fn what_is_remembered_is_bounded() {
        let mut map = HashMap::new();
        for i in 0..REMEMBERED + 10 {
            remember(&mut map, &format!("k{i}"), i);
        }
        assert_eq!(map.len(), REMEMBERED);
        assert_eq!(
            remember(&mut map, &format!("k{}", REMEMBERED + 9), 0),
            Some(REMEMBERED + 9)
        );
    }

    #[test]
    fn policy_refusals_are_said_when_they_grow() {
        let mut t = Transitions::default();
        let record = |refused: u64| -> RuleStatusRecord {
            serde_json::from_value(json!({
                "cluster": "b", "clusterID": "id-b", "rule": "cfgs", "state": "Synced",
                "sink": true, "source": false, "refused": refused,
                "updatedAt": "2026-12-03T00:00:00.000Z",
            }))
            .unwrap()
        };
        let k = "status.b.id-b.cfgs";
        assert!(t.rule_status(k, &record(0)).is_none());
        let n = t.rule_status(k, &record(3)).unwrap();
        assert_eq!((n.kind, n.cluster.as_str(), n.count), ("policy", "b", 3));
        assert!(t.rule_status(k, &record(3)).is_none());
        assert!(t.rule_status(k, &record(1)).is_none(), "fewer is no news");
        assert!(t.rule_status(k, &record(2)).is_some());
    }

    fn view(name: &str, state: ClusterState) -> ClusterView {
        let record: ClusterRecord = ClusterRecord::decode(
            json!({
                "schema": "fleetbus.io/cluster/v1", "name": name, "clusterID": format!("id-{name}"),
                "state": "Active", "agentVersion": "0.1.0", "startedAt": "2026-11-27T00:00:00Z",
                "heartbeatAt": "2026-11-27T00:00:00Z", "heartbeatIntervalSeconds": 10, "seq": 1,
                "members": [], "labels": {"env": "prod"},
            })
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        ClusterView {
            record,
            state,
            heartbeat_age: None,
        }
    }

    #[test]
    fn health_starts_silent_then_says_each_change_once() {
        use ClusterState::*;
        let mut h = Health::default();
        assert!(h
            .update(&[view("a", Ready), view("b", Disconnected)])
            .is_empty());
        let said = |h: &mut Health, views: &[ClusterView]| -> Vec<(String, String, Severity)> {
            h.update(views)
                .into_iter()
                .map(|n| (n.cluster, n.phase, n.severity))
                .collect()
        };
        assert_eq!(
            said(
                &mut h,
                &[
                    view("a", Disconnected),
                    view("b", Disconnected),
                    view("c", Ready)
                ]
            ),
            [
                ("a".into(), "Disconnected".into(), Severity::Critical),
                ("c".into(), "Ready".into(), Severity::Info)
            ]
        );
        assert!(said(
            &mut h,
            &[
                view("a", Disconnected),
                view("b", Disconnected),
                view("c", Ready)
            ]
        )
        .is_empty());
        let back = h.update(&[view("a", Ready), view("b", Left), view("c", Ready)]);
        assert_eq!(back.len(), 2);
        assert_eq!(back[0].labels.get("env").map(String::as_str), Some("prod"));
        assert!(
            back[0].summary.contains("Ready again"),
            "{}",
            back[0].summary
        );
        assert_eq!(
            (back[1].phase.as_str(), back[1].severity),
            ("Left", Severity::Warning)
        );
    }
}
