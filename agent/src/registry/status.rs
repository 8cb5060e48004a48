//! Writing Cluster objects only when something changed, despite a watch cache that lags our own writes.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use fleetbus_schemas::crd::{Cluster, ClusterStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use super::error::RegistryError;
use super::shared::Registry;

/// Resource versions known to predate a status write, and the status written.
type Written = (Vec<Option<String>>, ClusterStatus);

/// Remembers the statuses this agent wrote, so that a watch cache that has
/// not yet caught up with our own write does not cause the same write again.
#[derive(Debug, Default)]
pub struct StatusWriter {
    /// Object name -> (resourceVersions older than our write, status written).
    /// A std mutex: held for a map lookup or insert, never across an await.
    written: Mutex<HashMap<String, Written>>,
    /// Object name -> resourceVersion our last spec/labels patch was based on.
    spec_patched: Mutex<HashMap<String, Option<String>>>,
    /// Object name -> (when, object) for objects we created (or found to
    /// exist) that the watch cache did not show yet.
    created: Mutex<HashMap<String, (Instant, Cluster)>>,
}

/// How long an object we created stands in for the watch cache's view. A
/// cache that lags longer is broken; past this the create is tried again
/// (and an AlreadyExists answer re-reads the object).
const CREATED_GRACE: Duration = Duration::from_secs(30);

impl StatusWriter {
    /// The status to compare a desired status against: our own last write
    /// while the cached object is still the one that write was based on, else
    /// what the cache shows.
    pub fn current(&self, obj: &Cluster) -> Option<ClusterStatus> {
        let written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        match written.get(&obj.name_any()) {
            Some((stale, status)) if stale.contains(&obj.resource_version()) => {
                Some(status.clone())
            }
            _ => obj.status.clone(),
        }
    }

    /// Whether `obj` (from the watch cache) predates our last spec/labels
    /// patch of it, so it must not be patched again on its say-so.
    pub fn spec_pending(&self, obj: &Cluster) -> bool {
        let patched = self.spec_patched.lock().unwrap_or_else(|p| p.into_inner());
        patched.get(&obj.name_any()) == Some(&obj.resource_version())
    }

    /// Records an object we created or read because the cache lacked it.
    pub fn note_created(&self, obj: &Cluster, now: Instant) {
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        created.insert(obj.name_any(), (now, obj.clone()));
    }

    /// The object to use for `name` when the watch cache does not show it:
    /// one we created within [`CREATED_GRACE`]. Without this every pass
    /// until the cache catches up would try to create it again (409
    /// AlreadyExists each time). `in_cache` drops the memory: the cache is
    /// the truth again.
    pub fn created_not_cached(&self, name: &str, in_cache: bool, now: Instant) -> Option<Cluster> {
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        if in_cache {
            created.remove(name);
            return None;
        }
        match created.get(name) {
            Some((at, obj)) if now.saturating_duration_since(*at) < CREATED_GRACE => {
                Some(obj.clone())
            }
            Some(_) => {
                created.remove(name);
                None
            }
            None => None,
        }
    }

    /// Records that we patched the spec/labels of `obj` (as the cache showed it).
    pub fn note_spec_patch(&self, obj: &Cluster) {
        let mut patched = self.spec_patched.lock().unwrap_or_else(|p| p.into_inner());
        patched.insert(obj.name_any(), obj.resource_version());
    }

    /// Patches `status` onto `obj` if it differs from [`StatusWriter::current`];
    /// returns whether it wrote. `older` names another resourceVersion known
    /// to predate `obj` (the cached version a spec patch was based on).
    pub async fn write(
        &self,
        reg: &Registry,
        obj: &Cluster,
        older: Option<Option<String>>,
        status: ClusterStatus,
    ) -> Result<bool, RegistryError> {
        if self.current(obj).as_ref() == Some(&status) {
            return Ok(false);
        }
        let name = obj.name_any();
        let api = Api::<Cluster>::all(reg.ctx.client.clone());
        let patch = serde_json::json!({ "status": status_patch(&status)? });
        let updated = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| RegistryError::Kube {
                action: "patch status of Cluster",
                object: name.clone(),
                source,
            })?;
        reg.ctx.metrics.kube_write("cluster_status");
        let mut written = self.written.lock().unwrap_or_else(|p| p.into_inner());
        // Keyed by the version the cache showed: when the cache moves past it
        // (our write or anyone's) the cache is the truth again.
        let mut stale = vec![obj.resource_version()];
        stale.extend(older);
        written.insert(name, (stale, status));
        drop(written);
        tracing::debug!(cluster = %updated.name_any(), "patched status");
        Ok(true)
    }
}

/// How often a steady object's `lastHeartbeatTime` is refreshed (peers and
/// the Local object alike). Writing it on every heartbeat would make a quiet
/// mesh write N objects per interval; state changes are written at once
/// whatever this says.
pub const HEARTBEAT_REFRESH: Duration = Duration::from_secs(30);

/// Keeps the previous `lastHeartbeatTime` when it is recent and nothing else
/// changed, so a steady object is written every [`HEARTBEAT_REFRESH`], not
/// every beat. Returns how long until the kept time is due for refresh (None
/// when the new time stands).
pub fn keep_coarse_heartbeat(prev: &ClusterStatus, next: &mut ClusterStatus) -> Option<Duration> {
    let (Some(p), Some(n)) = (&prev.last_heartbeat_time, &next.last_heartbeat_time) else {
        return None;
    };
    let age = n.0.as_second() - p.0.as_second();
    let refresh = i64::try_from(HEARTBEAT_REFRESH.as_secs()).unwrap_or(i64::MAX);
    if (0..refresh).contains(&age) {
        let mut candidate = next.clone();
        candidate.last_heartbeat_time = prev.last_heartbeat_time.clone();
        if candidate == *prev {
            *next = candidate;
            return Some(Duration::from_secs(
                u64::try_from(refresh - age).unwrap_or(0),
            ));
        }
    }
    None
}

/// Keeps the previous `lastHeartbeatTime` whenever nothing else changed (no
/// refresh at all): for peers that beat, whose liveness the Ready condition
/// shows. Any other change writes the new time with it.
pub fn keep_heartbeat_while_steady(prev: &ClusterStatus, next: &mut ClusterStatus) {
    if prev.last_heartbeat_time.is_none() || next.last_heartbeat_time.is_none() {
        return;
    }
    let mut candidate = next.clone();
    candidate.last_heartbeat_time = prev.last_heartbeat_time.clone();
    if candidate == *prev {
        *next = candidate;
    }
}

/// A heartbeat time as a whole-second Time (what the API stores).
pub fn heartbeat_time(t: &chrono::DateTime<chrono::Utc>) -> Option<Time> {
    k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
        .ok()
        .map(Time)
}

/// A JSON merge patch that sets every status field, with explicit nulls for
/// absent ones: a merge patch leaves out-of-patch fields untouched, so a
/// cleared message would otherwise linger.
fn status_patch(status: &ClusterStatus) -> Result<serde_json::Value, RegistryError> {
    let mut value = serde_json::to_value(status).map_err(RegistryError::Serialise)?;
    if let Some(map) = value.as_object_mut() {
        for field in [
            "type",
            "state",
            "message",
            "lastHeartbeatTime",
            "agentVersion",
            "metadata",
        ] {
            map.entry(field).or_insert(serde_json::Value::Null);
        }
        for field in ["conditions", "features"] {
            map.entry(field)
                .or_insert(serde_json::Value::Array(Vec::new()));
        }
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::crd::{ClusterSpec, ClusterState, ClusterType};

    #[test]
    fn patch_clears_absent_fields() {
        let p = status_patch(&ClusterStatus {
            type_: Some(ClusterType::Peer),
            state: Some(ClusterState::Ready),
            ..ClusterStatus::default()
        })
        .unwrap();
        assert_eq!(p["type"], "Peer");
        assert_eq!(p["state"], "Ready");
        assert!(p["message"].is_null());
        assert_eq!(p["conditions"], serde_json::json!([]));
    }

    #[test]
    fn stale_cache_compares_against_our_write() {
        let w = StatusWriter::default();
        let mut obj = Cluster::new("b", ClusterSpec::default());
        obj.metadata.resource_version = Some("1".into());
        let ours = ClusterStatus {
            state: Some(ClusterState::Ready),
            ..ClusterStatus::default()
        };
        w.written.lock().unwrap().insert(
            "b".into(),
            (vec![Some("0".into()), Some("1".into())], ours.clone()),
        );
        assert_eq!(
            w.current(&obj),
            Some(ours.clone()),
            "cache still at the version we wrote over"
        );
        obj.metadata.resource_version = Some("0".into());
        assert_eq!(w.current(&obj), Some(ours), "cache even older");
        obj.metadata.resource_version = Some("2".into());
        assert_eq!(w.current(&obj), None, "cache caught up: it is the truth");
    }
}

#[cfg(test)]
mod created_tests {
    use super::*;
    use fleetbus_schemas::crd::ClusterSpec;

    #[tokio::test(start_paused = true)]
    async fn created_object_stands_in_until_cached_or_stale() {
        let w = StatusWriter::default();
        let obj = Cluster::new("b", ClusterSpec::default());
        assert_eq!(w.created_not_cached("b", false, Instant::now()), None);
        w.note_created(&obj, Instant::now());
        assert_eq!(
            w.created_not_cached("b", false, Instant::now()),
            Some(obj.clone()),
            "cache lags: use what we created instead of creating again"
        );
        assert_eq!(w.created_not_cached("b", true, Instant::now()), None);
        assert_eq!(
            w.created_not_cached("b", false, Instant::now()),
            None,
            "once cached, the memory is gone (a later delete is seen)"
        );
        w.note_created(&obj, Instant::now());
        tokio::time::advance(CREATED_GRACE).await;
        assert_eq!(w.created_not_cached("b", false, Instant::now()), None);
    }
}

#[cfg(test)]
mod spec_tests {
    use super::*;
    use fleetbus_schemas::crd::ClusterSpec;

    #[test]
    fn spec_patch_pending_until_cache_moves() {
        let w = StatusWriter::default();
        let mut obj = Cluster::new("b", ClusterSpec::default());
        obj.metadata.resource_version = Some("5".into());
        assert!(!w.spec_pending(&obj));
        w.note_spec_patch(&obj);
        assert!(w.spec_pending(&obj));
        obj.metadata.resource_version = Some("6".into());
        assert!(!w.spec_pending(&obj));
    }
}

#[cfg(test)]
mod heartbeat_tests {
    use super::*;
    use fleetbus_schemas::crd::ClusterState;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Option<Time> {
        Some(Time(Timestamp::from_second(secs).unwrap()))
    }

    #[test]
    fn steady_peer_keeps_heartbeat_time_until_refresh() {
        let prev = ClusterStatus {
            state: Some(ClusterState::Ready),
            last_heartbeat_time: at(1000),
            ..ClusterStatus::default()
        };
        let mut next = ClusterStatus {
            last_heartbeat_time: at(1010),
            ..prev.clone()
        };
        let due = keep_coarse_heartbeat(&prev, &mut next);
        assert_eq!(next, prev, "10s later, nothing else changed: no write");
        assert_eq!(
            due,
            Some(Duration::from_secs(20)),
            "refresh due 30s after 1000"
        );

        let mut next = ClusterStatus {
            last_heartbeat_time: at(1030),
            ..prev.clone()
        };
        assert_eq!(keep_coarse_heartbeat(&prev, &mut next), None);
        assert_eq!(next.last_heartbeat_time, at(1030), "refresh period reached");

        let mut next = ClusterStatus {
            state: Some(ClusterState::Disconnected),
            last_heartbeat_time: at(1005),
            ..prev.clone()
        };
        keep_coarse_heartbeat(&prev, &mut next);
        assert_eq!(
            next.last_heartbeat_time,
            at(1005),
            "a state change writes the latest heartbeat"
        );
    }

    #[test]
    fn heartbeat_time_is_whole_seconds() {
        let t = chrono::DateTime::from_timestamp(1_700_000_000, 678_000_000).unwrap();
        assert_eq!(heartbeat_time(&t), at(1_700_000_000));
    }
}
