//! The spec and labels of a Peer Cluster object, and the merge patch that brings an object there.
//!
//! A peer object's labels belong to the peer's record: they are the labels of
//! the peer's Local Cluster object, i.e. its selection labels in the
//! cluster-registry sense. A label removed there is removed here. The only
//! labels kept that the record does not carry are under the `fleetbus.io/`
//! prefix, reserved for fleetbus's own bookkeeping on this side.

use std::collections::BTreeMap;

use fleetbus_schemas::crd::{AuthInfo, Cluster};
use kube::ResourceExt;

use super::error::RegistryError;

/// Label keys with this prefix are never removed because a record lacks them.
pub const RESERVED_LABEL_PREFIX: &str = "fleetbus.io/";

/// What a peer object's spec and labels should be.
#[derive(Debug, Clone, Copy)]
pub struct DesiredSpec<'a> {
    /// The record's clusterID; `None` while two clusterIDs claim the name
    /// (then the object keeps whichever identity it already has).
    pub cluster_id: Option<&'a str>,
    /// Where the peer's reader kubeconfig is stored, if it publishes one.
    /// `None` leaves `spec.authInfo` as it is (a Secret is never withdrawn).
    pub auth_info: Option<&'a AuthInfo>,
    /// The record's labels.
    pub labels: &'a BTreeMap<String, String>,
}

/// The labels `current` should carry: the record's, plus reserved ones already there.
pub fn desired_labels(
    current: &BTreeMap<String, String>,
    record: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    let mut out = record.clone();
    for (k, v) in current {
        if k.starts_with(RESERVED_LABEL_PREFIX) && !out.contains_key(k) {
            out.insert(k.clone(), v.clone());
        }
    }
    out
}

/// The JSON merge patch that makes `current` match `desired`, or `None` when
/// it already does. Removed labels are set to `null`, which is how a merge
/// patch deletes a key.
pub fn spec_patch(
    current: &Cluster,
    desired: &DesiredSpec<'_>,
) -> Result<Option<serde_json::Value>, RegistryError> {
    let mut spec = serde_json::Map::new();
    if let Some(id) = desired.cluster_id {
        if current.spec.cluster_id != id {
            spec.insert("clusterID".into(), id.into());
        }
    }
    if let Some(a) = desired.auth_info {
        if current.spec.auth_info.as_ref() != Some(a) {
            spec.insert(
                "authInfo".into(),
                serde_json::to_value(a).map_err(RegistryError::Serialise)?,
            );
        }
    }
    let have = current.labels();
    let want = desired_labels(have, desired.labels);
    let mut labels = serde_json::Map::new();
    for (k, v) in &want {
        if have.get(k) != Some(v) {
            labels.insert(k.clone(), v.clone().into());
        }
    }
    for k in have.keys().filter(|k| !want.contains_key(*k)) {
        labels.insert(k.clone(), serde_json::Value::Null);
    }
    if spec.is_empty() && labels.is_empty() {
        return Ok(None);
    }
    let mut patch = serde_json::Map::new();
    if !labels.is_empty() {
        patch.insert("metadata".into(), serde_json::json!({ "labels": labels }));
    }
    if !spec.is_empty() {
        patch.insert("spec".into(), spec.into());
    }
    Ok(Some(patch.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::crd::{ClusterSpec, NamespacedName};

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn object(id: &str, l: &[(&str, &str)]) -> Cluster {
        let mut c = Cluster::new(
            "b",
            ClusterSpec {
                cluster_id: id.into(),
                ..ClusterSpec::default()
            },
        );
        c.metadata.labels = Some(labels(l));
        c
    }

    #[test]
    fn matching_object_needs_no_patch() {
        let record = labels(&[("env", "prod")]);
        let d = DesiredSpec {
            cluster_id: Some("id-b"),
            auth_info: None,
            labels: &record,
        };
        assert_eq!(
            spec_patch(&object("id-b", &[("env", "prod")]), &d).unwrap(),
            None
        );
    }

    #[test]
    fn removed_labels_are_deleted_and_reserved_ones_kept() {
        let record = labels(&[("env", "staging"), ("team", "x")]);
        let d = DesiredSpec {
            cluster_id: Some("id-b"),
            auth_info: None,
            labels: &record,
        };
        let current = object(
            "id-b",
            &[
                ("env", "prod"),
                ("tier", "gold"),
                ("fleetbus.io/managed", "true"),
            ],
        );
        let patch = spec_patch(&current, &d).unwrap().unwrap();
        assert_eq!(
            patch,
            serde_json::json!({"metadata": {"labels": {
                "env": "staging",
                "team": "x",
                "tier": null,
            }}})
        );
    }

    #[test]
    fn identity_and_auth_are_patched_unless_conflicting() {
        let record = BTreeMap::new();
        let auth = AuthInfo {
            secret_ref: NamespacedName {
                name: "b-kubeconfig".into(),
                namespace: "fleetbus-system".into(),
            },
        };
        let d = DesiredSpec {
            cluster_id: Some("id-b"),
            auth_info: Some(&auth),
            labels: &record,
        };
        let patch = spec_patch(&object("stale", &[]), &d).unwrap().unwrap();
        assert_eq!(patch["spec"]["clusterID"], "id-b");
        assert_eq!(
            patch["spec"]["authInfo"]["secretRef"]["name"],
            "b-kubeconfig"
        );
        assert!(patch.get("metadata").is_none());

        let conflicting = DesiredSpec {
            cluster_id: None,
            auth_info: None,
            labels: &record,
        };
        assert_eq!(
            spec_patch(&object("other", &[]), &conflicting).unwrap(),
            None
        );
    }
}
