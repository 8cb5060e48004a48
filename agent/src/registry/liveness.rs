//! Peer liveness, decided from local receive times (pure, no IO). The state
//! words themselves are [`fleetbus_schemas::registry::peer_state`], shared with
//! the `fleetbus` CLI and dashboard.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::time::Instant;

/// When a peer's heartbeats were last seen to advance, by our own clock.
///
/// A heartbeat "arrives" when the record's `heartbeatAt` differs from the one
/// seen before: a redelivered record (watch restart, NATS reconnect) carries an
/// old `heartbeatAt` and must not make a dead peer look alive. Only equality of
/// the sender's timestamps is used, never arithmetic against our clock, so
/// clock skew between clusters cannot matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    last_heartbeat_at: String,
    last_received: Instant,
    advanced: bool,
}

impl Liveness {
    /// A peer first seen now with heartbeat stamp `heartbeat_at`.
    pub fn first_seen(heartbeat_at: &str, now: Instant) -> Self {
        Liveness {
            last_heartbeat_at: heartbeat_at.to_owned(),
            last_received: now,
            advanced: false,
        }
    }

    /// Records a (re)delivered record; returns whether it was a new heartbeat.
    pub fn observe(&mut self, heartbeat_at: &str, now: Instant) -> bool {
        if heartbeat_at == self.last_heartbeat_at {
            return false;
        }
        heartbeat_at.clone_into(&mut self.last_heartbeat_at);
        self.last_received = now;
        self.advanced = true;
        true
    }

    /// Whether a heartbeat arrived within `timeout` before `now`.
    pub fn alive(&self, now: Instant, timeout: Duration) -> bool {
        now.saturating_duration_since(self.last_received) <= timeout
    }

    /// Whether a heartbeat newer than the first one seen has arrived. Until
    /// then the first value may be an old record of a dead peer, replayed to
    /// us at start-up.
    pub fn advanced(&self) -> bool {
        self.advanced
    }

    /// When this peer turns Disconnected if nothing arrives (for timers).
    pub fn deadline(&self, timeout: Duration) -> Instant {
        self.last_received + timeout
    }
}

/// ClustersSynced: both sides list the same members (order and duplicates ignored).
pub fn members_match(ours: &[String], theirs: &[String]) -> bool {
    let a: BTreeSet<&str> = ours.iter().map(String::as_str).collect();
    let b: BTreeSet<&str> = theirs.iter().map(String::as_str).collect();
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(6);

    #[tokio::test(start_paused = true)]
    async fn heartbeats_keep_a_peer_alive_until_timeout() {
        let start = Instant::now();
        let mut l = Liveness::first_seen("t0", start);
        assert!(l.alive(Instant::now(), T));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(l.observe("t1", Instant::now()));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(l.alive(Instant::now(), T), "5s after the last heartbeat");
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert!(!l.alive(Instant::now(), T), "6s+ after the last heartbeat");
        assert_eq!(l.deadline(T), start + Duration::from_secs(11));
    }

    #[tokio::test(start_paused = true)]
    async fn redelivered_record_is_not_a_heartbeat() {
        let mut l = Liveness::first_seen("t0", Instant::now());
        assert!(!l.advanced());
        tokio::time::advance(Duration::from_secs(7)).await;
        assert!(!l.observe("t0", Instant::now()));
        assert!(!l.alive(Instant::now(), T));
        assert!(l.observe("t1", Instant::now()));
        assert!(l.alive(Instant::now(), T));
        assert!(l.advanced());
    }

    #[test]
    fn members_compare_as_sets() {
        let s = |v: &[&str]| v.iter().map(|x| (*x).to_owned()).collect::<Vec<_>>();
        assert!(members_match(&s(&["a", "b", "c"]), &s(&["c", "a", "b"])));
        assert!(members_match(&s(&["a", "b"]), &s(&["b", "a", "a"])));
        assert!(!members_match(&s(&["a", "b", "c"]), &s(&["a", "b"])));
        assert!(!members_match(&s(&["a"]), &s(&[])));
    }
}
