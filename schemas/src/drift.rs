//! Drift events: JSON messages on `<p>.drift.<cluster>...` describing local changes to copies.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::crd::DriftMode;
use crate::object_ref::ObjectRef;
use crate::subject::{split_api_version, DriftKey, Prefix};
use crate::time::{rfc3339_ms, rfc3339_ms_opt};

/// `schema` of a [`DriftEvent`].
pub const DRIFT_EVENT_SCHEMA: &str = "fleetbus.io/drift/v1";

/// Suffix of the drift state bucket name: `<prefix>-drift`, e.g. `fleetbus-drift`.
pub const DRIFT_BUCKET_SUFFIX: &str = "drift";

/// Name of the drift state KV bucket for a prefix (`fleetbus` -> `fleetbus-drift`). Key
/// [`DriftKey::to_kv_key`], value the last [`DriftEvent`] of the object while it is drifted
/// (phase Detected or CorrectionFailed); the key is deleted when the drift ends.
pub fn drift_bucket(prefix: &Prefix) -> String {
    prefix.bucket_name(DRIFT_BUCKET_SUFFIX)
}

/// One step in the life of a drift on one object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DriftEvent {
    /// Unique id of the event, also its `Nats-Msg-Id` (see [`drift_event_id`]).
    pub id: String,
    /// Cluster where the copy drifted (the publisher).
    pub cluster: String,
    /// Name of the ResourceSyncRule that manages the copy.
    pub rule: String,
    /// Cluster the copy was synced from.
    pub origin: String,
    /// The drifted copy (with its `uid` and the drifted `resourceVersion`).
    pub object: ObjectRef,
    /// Detected, Corrected, CorrectionFailed or Resolved.
    pub phase: DriftPhase,
    /// Whether the copy was modified or deleted.
    #[serde(rename = "type")]
    pub type_: DriftType,
    /// When the drift was first seen.
    #[serde(with = "rfc3339_ms")]
    pub detected_at: DateTime<Utc>,
    /// The fields that differ (empty for Deleted).
    #[serde(default)]
    pub changes: Vec<DriftChange>,
    /// Who made the change, from `managedFields`, if known.
    #[serde(default)]
    pub changed_by: Option<ChangedBy>,
    /// What the rule's drift mode (or the object's annotations) made the agent do.
    pub action: DriftMode,
    /// Why a correction failed (phase CorrectionFailed), else null.
    #[serde(default)]
    pub error: Option<String>,
    /// How many times this phase happened to the copy since the last event of the same
    /// phase was published: drift storms are coalesced into one event per phase and window.
    /// Absent in events of older agents: 1.
    #[serde(default = "one")]
    pub count: u32,
    /// Phase Fight: when the agent will try correcting the copy again if the other writer
    /// has stopped by then (an operator's `fleetbus drift correct` does it at once); else null.
    #[serde(default, with = "rfc3339_ms_opt")]
    pub resume_at: Option<DateTime<Utc>>,
}

fn one() -> u32 {
    1
}

impl DriftPhase {
    /// Whether the object is still drifted after this event (its drift KV key is kept).
    pub fn is_open(self) -> bool {
        matches!(self, Self::Detected | Self::CorrectionFailed | Self::Fight)
    }

    /// The phase as it is spelled on the wire (`Detected`, `Fight`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Detected => "Detected",
            Self::Corrected => "Corrected",
            Self::CorrectionFailed => "CorrectionFailed",
            Self::Resolved => "Resolved",
            Self::Fight => "Fight",
        }
    }
}

/// Where a drift is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DriftPhase {
    /// The copy differs from what the rule wants.
    Detected,
    /// The agent reverted the copy.
    Corrected,
    /// The agent tried to revert the copy and failed (see `error`).
    CorrectionFailed,
    /// The copy matches again without a correction (the change was undone, or the source moved).
    Resolved,
    /// Another field manager (`changedBy`) changed the copy back after every correction, too
    /// often: the agent stopped correcting it and backs off (see `resumeAt`). The drift stays
    /// open; `drift.exclusions` is the durable fix for fields another controller owns.
    Fight,
}

/// What happened to the copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DriftType {
    /// Fields of the copy were changed.
    Modified,
    /// The copy was deleted.
    Deleted,
}

/// One differing field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DriftChange {
    /// JSON Pointer of the field.
    pub path: String,
    /// Value the rule wants; null if the field should be absent.
    #[serde(default)]
    pub desired: Value,
    /// Value found on the copy; null if the field is absent.
    #[serde(default)]
    pub live: Value,
}

/// The field manager that last touched the drifted fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangedBy {
    /// `managedFields[].manager`.
    pub manager: String,
    /// `managedFields[].operation` (Apply or Update).
    pub operation: String,
    /// `managedFields[].time`, if set.
    #[serde(default, with = "rfc3339_ms_opt")]
    pub time: Option<DateTime<Utc>>,
}

impl DriftEvent {
    /// JSON with `"schema": "fleetbus.io/drift/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(DRIFT_EVENT_SCHEMA, self)
    }

    /// Decodes an event; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(DRIFT_EVENT_SCHEMA, bytes)
    }

    /// The key naming this event's subject.
    pub fn subject_key(&self) -> DriftKey {
        let (group, _) = split_api_version(&self.object.api_version);
        DriftKey {
            cluster: self.cluster.clone(),
            group: group.to_owned(),
            kind: self.object.kind.clone(),
            namespace: self.object.namespace.clone(),
            name: self.object.name.clone(),
        }
    }
}

/// The recommended event id: `<cluster>:<uid>:<resourceVersion>:<phase>`. Re-detecting the
/// same live version yields the same id, so JetStream drops the duplicate.
pub fn drift_event_id(
    cluster: &str,
    uid: &str,
    resource_version: &str,
    phase: DriftPhase,
) -> String {
    format!("{cluster}:{uid}:{resource_version}:{}", phase.as_str())
}
