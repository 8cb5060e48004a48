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

    /// This event encoded in at most `max` bytes, so that a drift is never
    /// lost to its size (the server refuses a message over its
    /// `max_payload`). Whatever is cut, every change keeps its path while
    /// one fits; what is cut is said where it was:
    /// 1. values over [`TRUNCATE_VALUE_OVER`] bytes of JSON become a
    ///    [`truncated`] marker (their size and SHA-256, so two sides can
    ///    still be compared);
    /// 2. then every value larger than a marker does;
    /// 3. then the changes that do not fit are dropped and a last change,
    ///    path [`DROPPED_PATH`], says how many.
    ///
    /// None only when not even an event without changes fits.
    pub fn encode_within(&self, max: usize) -> Option<Vec<u8>> {
        let fits = |e: &DriftEvent| e.encode().ok().filter(|b| b.len() <= max);
        if let Some(b) = fits(self) {
            return Some(b);
        }
        let mut e = self.clone();
        for c in &mut e.changes {
            for v in [&mut c.desired, &mut c.live] {
                if json_len(v) > TRUNCATE_VALUE_OVER {
                    *v = truncated(v);
                }
            }
        }
        if let Some(b) = fits(&e) {
            return Some(b);
        }
        // A marker is about 110 bytes: smaller values stay.
        for c in &mut e.changes {
            for v in [&mut c.desired, &mut c.live] {
                if !is_truncated(v) && json_len(v) > MARKER_BYTES {
                    *v = truncated(v);
                }
            }
        }
        if let Some(b) = fits(&e) {
            return Some(b);
        }
        // Paths alone are too many: as many as fit, and how many did not.
        let all = std::mem::take(&mut e.changes);
        let total = all.len();
        let dropped = |kept: usize| DriftChange {
            path: DROPPED_PATH.to_owned(),
            desired: Value::Null,
            live: serde_json::json!({ TRUNCATED_KEY: { "droppedChanges": total - kept } }),
        };
        // The largest prefix that fits, by halving: a storm of paths is
        // encoded O(log n) times, not n.
        let (mut lo, mut hi) = (0usize, total);
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            e.changes = all[..mid].to_vec();
            e.changes.push(dropped(mid));
            if fits(&e).is_some() {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        e.changes = all[..lo].to_vec();
        e.changes.push(dropped(lo));
        fits(&e)
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

/// Values of a change larger than this many bytes of JSON are the first cut
/// when an event is too large for the bus ([`DriftEvent::encode_within`]).
pub const TRUNCATE_VALUE_OVER: usize = 1024;

/// About the size of a [`truncated`] marker as JSON: no smaller value is cut.
const MARKER_BYTES: usize = 128;

/// The key of a truncation marker: `{"fleetbus.io/truncated": {...}}`.
pub const TRUNCATED_KEY: &str = "fleetbus.io/truncated";

/// The path of the last change of an event whose changes did not all fit.
pub const DROPPED_PATH: &str = "/fleetbus.io~1dropped-changes";

/// What stands for a value cut from an event: its size as JSON and the
/// SHA-256 of that JSON (`{"fleetbus.io/truncated": {"bytes": N, "sha256": "…"}}`).
pub fn truncated(v: &Value) -> Value {
    use sha2::Digest as _;
    let json = serde_json::to_vec(v).unwrap_or_default();
    serde_json::json!({ TRUNCATED_KEY: {
        "bytes": json.len(),
        "sha256": hex::encode(sha2::Sha256::digest(&json)),
    }})
}

/// Whether `v` is a [`truncated`] marker.
pub fn is_truncated(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|m| m.len() == 1 && m.contains_key(TRUNCATED_KEY))
}

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
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
