//! Writing Cluster objects only when something changed.

use std::collections::HashMap;
use std::sync::Mutex;

use fleetbus_schemas::crd::{Cluster, ClusterStatus};
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use super::{Registry, RegistryError};

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
}

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
        let api = Api::<Cluster>::all(reg.client.clone());
        let patch = serde_json::json!({ "status": status_patch(&status)? });
        let updated = api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| RegistryError::Kube {
                action: "patch status of Cluster",
                object: name.clone(),
                source,
            })?;
        reg.metrics.kube_write("cluster_status");
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
