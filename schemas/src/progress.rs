//! Sync progress of one agent (`fleetbus sync progress`): the reply to `<p>.cmd.<cluster>.progress`.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};

/// Schema tag of a progress reply.
pub const SYNC_PROGRESS_SCHEMA: &str = "fleetbus.io/sync-progress/v1";

/// Where one agent's sync stands after its last pass: how much of the bus it has read and
/// how many of the copies it should hold are in sync. The request carries no body (any
/// payload is ignored); the agent answers from its last pass, without doing any work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SyncProgress {
    /// The answering cluster.
    pub cluster: String,
    /// The registry has been read and at least one full pass ran (before that every
    /// count below is 0).
    pub started: bool,
    /// Kinds sync follows (watched locally; consumed from the bus when a rule's source).
    pub kinds: u64,
    /// Of those, kinds listed locally and, if consumed, whose bus consumer has delivered
    /// every last value at least once.
    pub kinds_ready: u64,
    /// Envelopes read from the bus and held (the last one of each object, every origin).
    pub envelopes: u64,
    /// Copies the last pass wanted on this cluster.
    pub copies_wanted: u64,
    /// Of those, copies in sync.
    pub copies_in_sync: u64,
    /// Objects failing (rule status errors).
    pub errors: u64,
    /// Objects in conflict.
    pub conflicts: u64,
    /// When the last pass ended.
    pub updated_at: DateTime<Utc>,
    /// Why the question was not answered (refused for rate); the counts are then those
    /// of [`SyncProgress::starting`] and mean nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Refused for rate: milliseconds until the agent answers again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl SyncProgress {
    /// Nothing known yet: the agent has not finished a pass.
    pub fn starting(cluster: &str, now: DateTime<Utc>) -> Self {
        Self {
            cluster: cluster.to_owned(),
            started: false,
            kinds: 0,
            kinds_ready: 0,
            envelopes: 0,
            copies_wanted: 0,
            copies_in_sync: 0,
            errors: 0,
            conflicts: 0,
            updated_at: now,
            error: None,
            retry_after_ms: None,
        }
    }

    /// Every kind has been read (bus included) and every wanted copy is in sync.
    pub fn in_sync(&self) -> bool {
        self.bus_read() && self.copies_in_sync >= self.copies_wanted
    }

    /// Started, and every kind's local list and bus consumer have caught up.
    pub fn bus_read(&self) -> bool {
        self.started && self.kinds_ready >= self.kinds
    }

    /// Whether `other` says the same, whatever its `updated_at`.
    pub fn same_counts(&self, other: &Self) -> bool {
        Self {
            updated_at: other.updated_at,
            ..self.clone()
        } == *other
    }

    /// JSON with `"schema": "fleetbus.io/sync-progress/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(SYNC_PROGRESS_SCHEMA, self)
    }

    /// Decodes a reply; another schema is [`DecodeError::UnsupportedVersion`], anything
    /// else unreadable [`DecodeError::Malformed`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(SYNC_PROGRESS_SCHEMA, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_state() {
        let now = DateTime::from_timestamp_millis(1_795_000_000_000).unwrap_or_default();
        let mut p = SyncProgress::starting("c3", now);
        assert!(!p.in_sync(), "not started");
        p.started = true;
        p.kinds = 3;
        p.kinds_ready = 2;
        p.copies_wanted = 10;
        p.copies_in_sync = 10;
        assert!(!p.in_sync(), "a consumer still reading");
        p.kinds_ready = 3;
        assert!(p.in_sync());
        p.copies_in_sync = 9;
        assert!(!p.in_sync());
        let bytes = p.encode().unwrap();
        assert!(bytes.starts_with(br#"{"schema":"fleetbus.io/sync-progress/v1","cluster":"c3""#));
        assert_eq!(SyncProgress::decode(&bytes).unwrap(), p);
        let later = SyncProgress {
            updated_at: now + chrono::Duration::seconds(1),
            ..p.clone()
        };
        assert!(p.same_counts(&later));
        assert!(!p.same_counts(&SyncProgress { errors: 1, ..later }));
        assert!(matches!(
            SyncProgress::decode(b"\x00garbage"),
            Err(DecodeError::Malformed { .. })
        ));
        assert!(matches!(
            SyncProgress::decode(br#"{"schema":"fleetbus.io/sync-progress/v2"}"#),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
    }
}
