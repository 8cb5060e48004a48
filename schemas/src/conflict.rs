//! Conflict events: JSON messages on `<p>.conflict.<cluster>...` naming a copy a sink would not write.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::object_ref::ObjectRef;
use crate::subject::{split_api_version, ConflictKey};
use crate::time::rfc3339_ms;

/// `schema` of a [`ConflictEvent`].
pub const CONFLICT_EVENT_SCHEMA: &str = "fleetbus.io/conflict/v1";

/// A sink found that a source object maps to a target it must not (or cannot) write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConflictEvent {
    /// Deterministic id, also its `Nats-Msg-Id` (see [`conflict_event_id`]).
    pub id: String,
    /// Sink cluster that detected the conflict (the publisher).
    pub cluster: String,
    /// ResourceSyncRule that wanted to write the target.
    pub rule: String,
    /// Cluster of the source object that lost (was not written).
    pub origin: String,
    /// The target object on the sink (with `uid` and `resourceVersion` when it exists).
    pub object: ObjectRef,
    /// Why the source was not written.
    pub reason: ConflictReason,
    /// Origin cluster whose object holds the target (`OtherOrigin`), else null.
    #[serde(default)]
    pub winner: Option<String>,
    /// When the conflict was detected.
    #[serde(with = "rfc3339_ms")]
    pub detected_at: DateTime<Utc>,
    /// Human-readable explanation (also used in the rule's `Conflict` condition).
    pub message: String,
}

/// Why a source object was not written to its target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConflictReason {
    /// An object not made by fleetbus (no `fleetbus.io/origin-cluster`) exists at the
    /// target name; fleetbus never touches it.
    LocalObject,
    /// Another source maps to the same target and wins (oldest `creationTimestamp`, then
    /// origin cluster name, then rule name).
    OtherOrigin,
}

impl ConflictReason {
    /// The wire string (`LocalObject` or `OtherOrigin`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::LocalObject => "LocalObject",
            Self::OtherOrigin => "OtherOrigin",
        }
    }
}

impl ConflictEvent {
    /// JSON with `"schema": "fleetbus.io/conflict/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(CONFLICT_EVENT_SCHEMA, self)
    }

    /// Decodes an event; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(CONFLICT_EVENT_SCHEMA, bytes)
    }

    /// The key naming this event's subject: publisher cluster + target object.
    pub fn subject_key(&self) -> ConflictKey {
        let (group, version) = split_api_version(&self.object.api_version);
        ConflictKey {
            cluster: self.cluster.clone(),
            group: group.to_owned(),
            version: version.to_owned(),
            kind: self.object.kind.clone(),
            namespace: self.object.namespace.clone(),
            name: self.object.name.clone(),
        }
    }
}

/// The recommended event id:
/// `<cluster>:<rule>:<origin>:<apiVersion>/<kind>/<namespace or _>/<name>:<reason>:<winner or ->`.
/// It has no time or resourceVersion in it, so re-detecting the same conflict (every
/// resync, every restart) within the stream's duplicate window gives the same id and
/// JetStream stores it once; a different winner is a new event.
pub fn conflict_event_id(
    cluster: &str,
    rule: &str,
    origin: &str,
    object: &ObjectRef,
    reason: ConflictReason,
    winner: Option<&str>,
) -> String {
    format!(
        "{cluster}:{rule}:{origin}:{object}:{}:{}",
        reason.as_str(),
        winner.unwrap_or("-")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_is_deterministic_and_names_every_part() {
        let obj = ObjectRef {
            uid: Some("u".into()),
            resource_version: Some("9".into()),
            ..ObjectRef::new("v1", "ConfigMap", Some("team-a"), "settings")
        };
        let id = conflict_event_id(
            "west",
            "r",
            "east",
            &obj,
            ConflictReason::OtherOrigin,
            Some("north"),
        );
        assert_eq!(
            id,
            "west:r:east:v1/ConfigMap/team-a/settings:OtherOrigin:north"
        );
        // The live object's resourceVersion does not change the id (re-detection dedups).
        let moved = ObjectRef {
            resource_version: Some("10".into()),
            ..obj.clone()
        };
        assert_eq!(
            conflict_event_id(
                "west",
                "r",
                "east",
                &moved,
                ConflictReason::OtherOrigin,
                Some("north")
            ),
            id
        );
        assert_ne!(
            conflict_event_id("west", "r", "east", &obj, ConflictReason::LocalObject, None),
            id
        );
        let cluster_scoped =
            ObjectRef::new("rbac.authorization.k8s.io/v1", "ClusterRole", None, "x");
        assert_eq!(
            conflict_event_id(
                "west",
                "r",
                "east",
                &cluster_scoped,
                ConflictReason::LocalObject,
                None
            ),
            "west:r:east:rbac.authorization.k8s.io/v1/ClusterRole/_/x:LocalObject:-"
        );
    }
}
