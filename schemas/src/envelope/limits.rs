//! Message ids for JetStream de-duplication and the payload size check.

use chrono::{DateTime, Utc};
use thiserror::Error;

use super::TombstoneReason;

/// NATS server default `max_payload` (1 MiB).
pub const DEFAULT_MAX_PAYLOAD: usize = 1024 * 1024;

/// Bytes kept free for NATS headers (`Nats-Msg-Id` and the like) within `max_payload`,
/// which limits headers and payload together.
pub const HEADER_ALLOWANCE: usize = 1024;

/// An encoded message too large to publish. v1 does not chunk: the object is not
/// published and the agent reports the error on the rule and as an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("encoded message is {encoded_len} bytes; the server accepts at most {limit} (max_payload minus header allowance)")]
pub struct TooLarge {
    /// Size of the encoded message.
    pub encoded_len: usize,
    /// Largest message that fits: `max_payload - HEADER_ALLOWANCE`.
    pub limit: usize,
}

/// Checks that a message of `encoded_len` bytes fits in the server's `max_payload`
/// (from the server INFO) with [`HEADER_ALLOWANCE`] to spare.
pub fn check_size(encoded_len: usize, max_payload: usize) -> Result<(), TooLarge> {
    let limit = max_payload.saturating_sub(HEADER_ALLOWANCE);
    if encoded_len <= limit {
        Ok(())
    } else {
        Err(TooLarge { encoded_len, limit })
    }
}

/// `Nats-Msg-Id` of a snapshot: `<origin>:<uid>:<resourceVersion>`. Publishing the same
/// object version twice within the stream's duplicate window stores it once.
pub fn msg_id(origin: &str, uid: &str, resource_version: &str) -> String {
    format!("{origin}:{uid}:{resource_version}")
}

/// `Nats-Msg-Id` of a snapshot published again after an `Unpublished` tombstone of the
/// same version (its rule came back, or it matches again, before the object changed):
/// `<origin>:<uid>:<resourceVersion>:republished:<time>`, `time` the envelope's publication
/// time in Unix milliseconds. With the plain [`msg_id`] the server would drop it as a
/// duplicate of the first snapshot for the duplicate window, leaving the tombstone as the
/// subject's last message; a retry of the same envelope still gets the same id.
pub fn republish_msg_id(
    origin: &str,
    uid: &str,
    resource_version: &str,
    time: DateTime<Utc>,
) -> String {
    format!(
        "{origin}:{uid}:{resource_version}:republished:{}",
        time.timestamp_millis()
    )
}

/// `Nats-Msg-Id` of a tombstone: `<origin>:<uid>:<resourceVersion>:deleted` (reason
/// `Deleted`) or `...:unpublished` (reason `Unpublished`), distinct from the snapshot of the
/// same version (a tombstone built from the last known version must not be dropped as a
/// duplicate of that snapshot) and from each other (an object unpublished, then deleted
/// before its resourceVersion moved, must still send its `Deleted`).
pub fn tombstone_msg_id(
    origin: &str,
    uid: &str,
    resource_version: &str,
    reason: TombstoneReason,
) -> String {
    let suffix = match reason {
        TombstoneReason::Deleted => "deleted",
        TombstoneReason::Unpublished => "unpublished",
    };
    format!("{origin}:{uid}:{resource_version}:{suffix}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_limit() {
        assert_eq!(check_size(0, DEFAULT_MAX_PAYLOAD), Ok(()));
        let limit = DEFAULT_MAX_PAYLOAD - HEADER_ALLOWANCE;
        assert_eq!(check_size(limit, DEFAULT_MAX_PAYLOAD), Ok(()));
        assert_eq!(
            check_size(limit + 1, DEFAULT_MAX_PAYLOAD),
            Err(TooLarge {
                encoded_len: limit + 1,
                limit
            })
        );
        assert!(check_size(1, 100).is_err());
    }

    #[test]
    fn ids() {
        assert_eq!(msg_id("east", "u-1", "42"), "east:u-1:42");
        let t = DateTime::from_timestamp_millis(1_795_000_000_123).unwrap();
        assert_eq!(
            republish_msg_id("east", "u-1", "42", t),
            "east:u-1:42:republished:1795000000123"
        );
        assert_eq!(
            tombstone_msg_id("east", "u-1", "42", TombstoneReason::Deleted),
            "east:u-1:42:deleted"
        );
        assert_eq!(
            tombstone_msg_id("east", "u-1", "42", TombstoneReason::Unpublished),
            "east:u-1:42:unpublished"
        );
    }
}
