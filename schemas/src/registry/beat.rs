//! Beats: liveness apart from the record. Each agent puts a tiny value at
//! `beat.<name>.<clusterID>` in the beats bucket (`<prefix>-beats`) every beat
//! interval, with a per-message TTL (`Nats-TTL`) of
//! [`MISSED_HEARTBEATS_BEFORE_DISCONNECTED`] intervals. The server forgets a
//! silent peer's beat on its own and leaves a delete marker that tells
//! watchers at once, so a one-shot reader (the CLI) needs no clock: a beat key
//! present means alive.
//!
//! The interval grows with the fleet ([`beat_interval`]) so that what each
//! agent receives per second stays bounded: the fleet's beats delivered grow
//! linearly in N, not as N².

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::record::MISSED_HEARTBEATS_BEFORE_DISCONNECTED;
use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::subject::Prefix;
use crate::time::rfc3339_ms;

/// `schema` of a [`BeatRecord`].
pub const BEAT_RECORD_SCHEMA: &str = "fleetbus.io/beat/v1";
/// Suffix of the beats bucket name: `<prefix>-beats`.
pub const BEATS_BUCKET_SUFFIX: &str = "beats";
/// Key filter matching every beat.
pub const ALL_BEAT_KEYS: &str = "beat.>";
/// How many beats per second one agent is made to receive at most, summed
/// over its peers: the interval of every agent grows with the fleet to keep
/// this. 100 beats of ~250 bytes on the wire is ~25 KB/s per agent.
pub const TARGET_BEATS_PER_SECOND: usize = 100;
/// How long the server keeps the delete marker of an expired beat: long
/// enough for every watcher to see it, short enough that markers of clusters
/// gone for good do not pile up.
pub const BEAT_MARKER_TTL: Duration = Duration::from_secs(60);

/// Name of the beats KV bucket for a prefix (`fleetbus` -> `fleetbus-beats`).
pub fn beats_bucket(prefix: &Prefix) -> String {
    prefix.bucket_name(BEATS_BUCKET_SUFFIX)
}

/// One beat: proof that the agent run `startedAt` is alive, and when to
/// expect the next one. No wall-clock time: readers use their own receive
/// times (and the server's TTL), never the sender's clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BeatRecord {
    /// The sender's sequence number; shared with its record puts, so that the
    /// newest of a beat and a record is the higher `seq` within one run.
    pub seq: u64,
    /// When the sending agent process started (identifies the run).
    #[serde(with = "rfc3339_ms")]
    pub started_at: DateTime<Utc>,
    /// Milliseconds until the next beat.
    pub interval_ms: u64,
}

impl BeatRecord {
    /// JSON with `"schema": "fleetbus.io/beat/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(BEAT_RECORD_SCHEMA, self)
    }

    /// [`Self::encode`] with the cluster's `signature` member (secure mode,
    /// PROTOCOL §5.4): by `signer`, the key its certificate (serial `key_id`) names.
    pub fn encode_signed(
        &self,
        signer: &crate::trust::SigningKey,
        key_id: &str,
    ) -> Result<Vec<u8>, EncodeError> {
        crate::trust::sign_json(&self.encode()?, signer, key_id).map_err(EncodeError::new)
    }

    /// Decodes a beat; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(BEAT_RECORD_SCHEMA, bytes)
    }

    /// The interval this beat announces (at least 1 ms).
    pub fn interval(&self) -> Duration {
        Duration::from_millis(self.interval_ms.max(1))
    }
}

/// The beat interval of an agent with the configured `base` interval in a
/// fleet of `clusters` (itself included): `base`, or longer once the fleet
/// is so large that every agent would receive more than
/// [`TARGET_BEATS_PER_SECOND`] beats a second; then whole seconds, so that a
/// fleet whose size wobbles does not change its interval at every join.
///
/// N = 10 -> 2 s, 100 -> 2 s, 300 -> 3 s, 1,000 -> 10 s (base 2 s).
pub fn beat_interval(base: Duration, clusters: usize) -> Duration {
    // n beats per interval stay within the target while n / interval <= target.
    let base_allows = base.as_millis() * TARGET_BEATS_PER_SECOND as u128;
    if (clusters as u128) * 1000 <= base_allows {
        return base;
    }
    let needed_secs = clusters.div_ceil(TARGET_BEATS_PER_SECOND);
    Duration::from_secs(u64::try_from(needed_secs).unwrap_or(u64::MAX)).max(base)
}

/// The TTL of a beat sent with `interval`: [`MISSED_HEARTBEATS_BEFORE_DISCONNECTED`]
/// intervals, in whole seconds (the `Nats-TTL` header's unit), at least one.
/// It is also the longest a reader waits for the next beat before calling
/// the peer Disconnected, so the detection time of a dead agent is this TTL
/// (plus the server's expiry tick, about a second).
pub fn beat_ttl(interval: Duration) -> Duration {
    let grace = interval.saturating_mul(MISSED_HEARTBEATS_BEFORE_DISCONNECTED);
    let secs = grace.as_millis().div_ceil(1000).max(1);
    Duration::from_secs(u64::try_from(secs).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_secs(2);

    #[test]
    fn interval_grows_with_the_fleet_so_each_agent_receives_a_bounded_rate() {
        assert_eq!(beat_interval(BASE, 1), BASE);
        assert_eq!(beat_interval(BASE, 10), BASE);
        assert_eq!(beat_interval(BASE, 200), BASE);
        assert_eq!(beat_interval(BASE, 201), Duration::from_secs(3));
        assert_eq!(beat_interval(BASE, 1000), Duration::from_secs(10));
        assert_eq!(
            beat_interval(Duration::from_millis(500), 10),
            Duration::from_millis(500)
        );
        assert_eq!(
            beat_interval(Duration::from_millis(500), 51),
            Duration::from_secs(1)
        );
        for n in [1usize, 10, 30, 100, 101, 999, 1000, 5000, 100_000] {
            let i = beat_interval(BASE, n);
            // What one agent receives: n - 1 peers, one beat each per interval.
            let per_second = (n - 1) as f64 / i.as_secs_f64();
            assert!(
                per_second <= TARGET_BEATS_PER_SECOND as f64,
                "n={n}: {per_second}/s"
            );
            // Fleet-wide delivered beats grow at most linearly.
            let fleet = n as f64 * per_second;
            assert!(fleet <= (n * TARGET_BEATS_PER_SECOND) as f64, "n={n}");
        }
    }

    #[test]
    fn ttl_is_missed_intervals_in_whole_seconds() {
        assert_eq!(beat_ttl(BASE), Duration::from_secs(6));
        assert_eq!(beat_ttl(Duration::from_millis(500)), Duration::from_secs(2));
        assert_eq!(beat_ttl(Duration::from_millis(100)), Duration::from_secs(1));
        assert_eq!(beat_ttl(Duration::from_secs(10)), Duration::from_secs(30));
        assert_eq!(beat_ttl(Duration::ZERO), Duration::from_secs(1));
    }

    #[test]
    fn beat_round_trips_and_rejects_other_schemas() {
        let b = BeatRecord {
            seq: 7,
            started_at: "2026-11-27T01:00:00.123Z".parse().unwrap(),
            interval_ms: 2000,
        };
        let bytes = b.encode().unwrap();
        assert!(
            bytes.len() < 120,
            "a beat stays tiny: {} bytes",
            bytes.len()
        );
        assert_eq!(BeatRecord::decode(&bytes).unwrap(), b);
        assert!(matches!(
            BeatRecord::decode(br#"{"schema":"fleetbus.io/beat/v2","seq":1}"#),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
        assert!(matches!(
            BeatRecord::decode(b"\xff"),
            Err(DecodeError::Malformed { .. })
        ));
        assert_eq!(beats_bucket(&Prefix::default()), "fleetbus-beats");
    }
}
