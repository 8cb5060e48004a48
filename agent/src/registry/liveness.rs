//! Peer liveness, decided from local receive times (pure, no IO). The state
//! words themselves are [`fleetbus_schemas::registry::peer_state`], shared with
//! the `fleetbus` CLI and dashboard.

use std::time::Duration;

use fleetbus_schemas::registry::beat_ttl;
use tokio::time::Instant;

/// When a peer's heartbeats (record puts and beats alike) were last seen to
/// advance, by our own clock.
///
/// A heartbeat "arrives" when its stamp — the sender's run (`startedAt`) and
/// `seq`, shared by its record puts and its beats — is newer than the one
/// seen before: a new run, or a higher `seq` within the run. A redelivered
/// record or beat (watch restart, NATS reconnect) carries an old stamp and
/// must not make a dead peer look alive. The stamps are only compared with
/// each other, never with our clock, so clock skew between clusters cannot
/// matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Liveness {
    run: i64,
    seq: u64,
    last_received: Instant,
    advanced: bool,
    /// The server expired the peer's beat (its delete marker arrived): dead
    /// now, whatever our own timer says, until a newer heartbeat.
    expired: bool,
    /// The beat interval the peer announced (None: it does not beat).
    interval: Option<Duration>,
    /// Until the peer announces its interval (with its first beat): the
    /// interval the fleet's size calls for, which the peer will beat at.
    /// Judged by `--peer-timeout` alone instead, every peer that joins a
    /// fleet of more than 200 clusters turned Disconnected before its first
    /// beat could arrive (and Ready again at it: a status write and an
    /// Event each, for every joining peer).
    expected: Option<Duration>,
}

impl Liveness {
    /// A peer first seen now with stamp (`run`, `seq`). `live`: seen as it
    /// was put (not replayed from the bucket at start-up), so it is news.
    pub fn first_seen(run: i64, seq: u64, now: Instant, live: bool) -> Self {
        Liveness {
            run,
            seq,
            last_received: now,
            advanced: live,
            expired: false,
            interval: None,
            expected: None,
        }
    }

    /// Records a (re)delivered record or beat; returns whether it was a new heartbeat.
    pub fn observe(&mut self, run: i64, seq: u64, now: Instant) -> bool {
        if run == self.run && seq <= self.seq {
            return false;
        }
        self.run = run;
        self.seq = seq;
        self.last_received = now;
        self.advanced = true;
        self.expired = false;
        true
    }

    /// Records the beat interval the peer announced; returns whether it changed.
    pub fn set_interval(&mut self, interval: Duration) -> bool {
        let changed = self.interval != Some(interval);
        self.interval = Some(interval);
        changed
    }

    /// Sets the interval the fleet's size calls for, used until the peer
    /// announces its own (see the field).
    pub fn expect_interval(&mut self, interval: Duration) {
        self.expected = Some(interval);
    }

    /// Whether the peer has announced its beat interval.
    pub fn announced(&self) -> bool {
        self.interval.is_some()
    }

    /// The server expired the peer's beat; returns whether that is news.
    pub fn expire(&mut self) -> bool {
        !std::mem::replace(&mut self.expired, true)
    }

    /// How long after a heartbeat the peer stays alive: our `--peer-timeout`,
    /// or the TTL of its beats when that is longer (its interval grew with
    /// the fleet, see `fleetbus_schemas::registry::beat_interval`).
    pub fn timeout(&self, peer_timeout: Duration) -> Duration {
        match self.interval.or(self.expected) {
            Some(i) => peer_timeout.max(beat_ttl(i)),
            None => peer_timeout,
        }
    }

    /// Whether a heartbeat arrived within the timeout before `now` and the
    /// server has not expired the peer's beat since.
    pub fn alive(&self, now: Instant, peer_timeout: Duration) -> bool {
        !self.expired
            && now.saturating_duration_since(self.last_received) <= self.timeout(peer_timeout)
    }

    /// Whether a heartbeat newer than the first one seen has arrived. Until
    /// then the first value may be an old record of a dead peer, replayed to
    /// us at start-up.
    pub fn advanced(&self) -> bool {
        self.advanced
    }

    /// When this peer turns Disconnected if nothing arrives (for timers).
    pub fn deadline(&self, peer_timeout: Duration) -> Instant {
        self.last_received + self.timeout(peer_timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_secs(6);

    #[tokio::test(start_paused = true)]
    async fn heartbeats_keep_a_peer_alive_until_timeout() {
        let start = Instant::now();
        let mut l = Liveness::first_seen(1, 1, start, false);
        assert!(l.alive(Instant::now(), T));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(l.observe(1, 2, Instant::now()));
        tokio::time::advance(Duration::from_secs(5)).await;
        assert!(l.alive(Instant::now(), T), "5s after the last heartbeat");
        tokio::time::advance(Duration::from_millis(1001)).await;
        assert!(!l.alive(Instant::now(), T), "6s+ after the last heartbeat");
        assert_eq!(l.deadline(T), start + Duration::from_secs(11));
    }

    #[tokio::test(start_paused = true)]
    async fn redelivered_or_older_stamps_are_not_heartbeats() {
        let mut l = Liveness::first_seen(1, 5, Instant::now(), false);
        assert!(!l.advanced());
        tokio::time::advance(Duration::from_secs(7)).await;
        assert!(!l.observe(1, 5, Instant::now()), "the same stamp again");
        assert!(!l.observe(1, 4, Instant::now()), "an older put of the run");
        assert!(!l.alive(Instant::now(), T));
        assert!(l.observe(1, 6, Instant::now()));
        assert!(l.alive(Instant::now(), T));
        assert!(l.advanced());
        assert!(
            l.observe(2, 1, Instant::now()),
            "a new run starts again at 1"
        );
        assert!(Liveness::first_seen(1, 1, Instant::now(), true).advanced());
    }

    #[tokio::test(start_paused = true)]
    async fn beats_stretch_the_timeout_and_an_expired_beat_is_dead_at_once() {
        let mut l = Liveness::first_seen(1, 1, Instant::now(), true);
        assert!(l.set_interval(Duration::from_secs(10)));
        assert!(!l.set_interval(Duration::from_secs(10)));
        assert_eq!(l.timeout(T), Duration::from_secs(30), "3 intervals of 10 s");
        assert_eq!(l.timeout(Duration::from_secs(60)), Duration::from_secs(60));
        tokio::time::advance(Duration::from_secs(29)).await;
        assert!(l.alive(Instant::now(), T));
        assert!(l.expire(), "the server's delete marker");
        assert!(!l.expire(), "twice is no news");
        assert!(!l.alive(Instant::now(), T));
        assert!(
            !l.observe(1, 1, Instant::now()),
            "a replay does not revive it"
        );
        assert!(!l.alive(Instant::now(), T));
        assert!(l.observe(1, 2, Instant::now()));
        assert!(l.alive(Instant::now(), T));
    }
}
