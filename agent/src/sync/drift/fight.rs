//! Fights: another writer (a controller, an autoscaler, a script) changes a
//! copy back after every correction. Correcting forever costs two writes, a
//! drift event and an Event per round and settles nothing, so after
//! `threshold` drifts of one copy by the same field manager with the same
//! values within `window`, the agent stops correcting that copy, reports a
//! `Fight` (PROTOCOL §6) and backs off: it tries again once the copy has been
//! left alone for the backoff (which doubles, up to [`MAX_BACKOFF_FACTOR`]
//! times, each time the other writer is still there), or at once when an
//! operator runs `fleetbus drift correct`. The durable fix is a
//! `drift.exclusions` entry for the fields the other writer owns.
//!
//! Pure: instants are passed in; the engine asks and acts (`sink`).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::FightPolicy;

/// The backoff grows to at most this multiple of the first one.
pub const MAX_BACKOFF_FACTOR: u32 = 16;

/// One drift of a copy, as the detector sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The field manager that made it (`managedFields`).
    pub manager: String,
    /// A digest of the changed paths and the values found there: the same
    /// digest again means the manager set the same values back.
    pub values: u64,
}

/// What to do with a drifted copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Correct it (no fight, or a try after the backoff).
    Correct,
    /// A fight starts now: `changes` drifts by `manager` within the window;
    /// leave the copy alone until `resume_at`.
    Fight {
        /// The other writer.
        manager: String,
        /// How many of its drifts made the fight.
        changes: u32,
        /// When the agent tries again if the copy is left alone until then.
        resume_at: Instant,
    },
}

#[derive(Debug, Clone)]
enum State {
    /// Recent drifts, oldest first.
    Watching(VecDeque<(Instant, Change)>),
    /// Not correcting until `resume_at`; `rv` is the copy's version when the
    /// fight was last seen (a new one restarts the wait).
    Fighting {
        manager: String,
        rv: Option<String>,
        resume_at: Instant,
        backoff: Duration,
    },
    /// Corrected again after a backoff: one more drift by `manager` within
    /// the window means the fight goes on, with the backoff doubled.
    /// `tried`: the drift that was left alone has been let through (it is
    /// the one the try corrects, not a new one).
    Probing {
        manager: String,
        until: Instant,
        backoff: Duration,
        tried: bool,
    },
}

/// Fight state per copy.
#[derive(Debug)]
pub struct Fights<K> {
    policy: FightPolicy,
    copies: HashMap<K, State>,
}

impl<K: Eq + Hash + Clone> Fights<K> {
    /// No fights yet.
    pub fn new(policy: FightPolicy) -> Self {
        Fights {
            policy,
            copies: HashMap::new(),
        }
    }

    /// While `key` is in a fight: when the agent may correct it again, or
    /// `None` when it may now (the backoff has passed: this is the try). A
    /// new version of the copy (`rv`) means the other writer is still at
    /// it: the wait starts again.
    pub fn holding(&mut self, key: &K, rv: Option<&str>, now: Instant) -> Option<Instant> {
        let probe_window = self.policy.window;
        let state = self.copies.get_mut(key)?;
        let State::Fighting {
            manager,
            rv: seen,
            resume_at,
            backoff,
        } = state
        else {
            return None;
        };
        if seen.as_deref() != rv {
            *seen = rv.map(str::to_owned);
            *resume_at = now + *backoff;
        }
        if now < *resume_at {
            return Some(*resume_at);
        }
        let next = backoff
            .saturating_mul(2)
            .min(self.policy.backoff.saturating_mul(MAX_BACKOFF_FACTOR));
        *state = State::Probing {
            manager: manager.clone(),
            until: now + probe_window,
            backoff: next,
            tried: false,
        };
        None
    }

    /// A drift of `key` by `change` was found at `now`, and the agent would
    /// correct it: whether it should.
    pub fn on_drift(&mut self, key: &K, change: &Change, now: Instant) -> Verdict {
        let p = self.policy;
        if p.threshold == 0 {
            return Verdict::Correct;
        }
        let state = self
            .copies
            .entry(key.clone())
            .or_insert_with(|| State::Watching(VecDeque::new()));
        if let State::Probing {
            manager,
            until,
            backoff,
            tried,
        } = state
        {
            if !*tried {
                *tried = true;
                return Verdict::Correct;
            }
            if now <= *until && *manager == change.manager {
                let resume_at = now + *backoff;
                let (manager, backoff) = (manager.clone(), *backoff);
                *state = State::Fighting {
                    manager: manager.clone(),
                    rv: None,
                    resume_at,
                    backoff,
                };
                return Verdict::Fight {
                    manager,
                    changes: 1,
                    resume_at,
                };
            }
            *state = State::Watching(VecDeque::new());
        }
        let State::Watching(recent) = state else {
            // Fighting: `holding` said the agent may correct, or was not
            // asked (an operator's request): the caller decides.
            return Verdict::Correct;
        };
        while recent
            .front()
            .is_some_and(|(at, _)| now.saturating_duration_since(*at) > p.window)
        {
            recent.pop_front();
        }
        recent.push_back((now, change.clone()));
        let same = recent.iter().filter(|(_, c)| c == change).count();
        let same = u32::try_from(same).unwrap_or(u32::MAX);
        if same < p.threshold {
            return Verdict::Correct;
        }
        let resume_at = now + p.backoff;
        *state = State::Fighting {
            manager: change.manager.clone(),
            rv: None,
            resume_at,
            backoff: p.backoff,
        };
        Verdict::Fight {
            manager: change.manager.clone(),
            changes: same,
            resume_at,
        }
    }

    /// Sets the version of the copy the fight was declared at (the one the
    /// agent leaves alone).
    pub fn seen_at(&mut self, key: &K, rv: Option<&str>) {
        if let Some(State::Fighting { rv: seen, .. }) = self.copies.get_mut(key) {
            *seen = rv.map(str::to_owned);
        }
    }

    /// Whether `key` is in a fight now (the tests ask; the engine acts on
    /// `holding`).
    #[cfg(test)]
    pub fn fighting(&self, key: &K) -> bool {
        matches!(self.copies.get(key), Some(State::Fighting { .. }))
    }

    /// Forgets `key` (an operator asked for a correction: it is made, and
    /// counting starts over).
    pub fn forget(&mut self, key: &K) {
        self.copies.remove(key);
    }

    /// Keeps the copies `keep` says yes to, and drops what is stale: drifts
    /// older than the window, finished tries.
    pub fn retain(&mut self, now: Instant, mut keep: impl FnMut(&K) -> bool) {
        let window = self.policy.window;
        self.copies.retain(|k, s| {
            keep(k)
                && match s {
                    State::Watching(recent) => recent
                        .back()
                        .is_some_and(|(at, _)| now.saturating_duration_since(*at) <= window),
                    State::Fighting { .. } => true,
                    State::Probing { until, .. } => now <= *until,
                }
        });
    }

    /// When the next fight's wait ends (the engine runs a pass then).
    pub fn wake_at(&self) -> Option<Instant> {
        self.copies
            .values()
            .filter_map(|s| match s {
                State::Fighting { resume_at, .. } => Some(*resume_at),
                _ => None,
            })
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn policy() -> FightPolicy {
        FightPolicy {
            threshold: 3,
            window: 60 * S,
            backoff: 30 * S,
        }
    }

    fn by(manager: &str, values: u64) -> Change {
        Change {
            manager: manager.into(),
            values,
        }
    }

    /// A copy `x` that "hpa" set to the same values 3 times, 1 s apart.
    fn fought() -> (Fights<&'static str>, Instant, Change) {
        let mut f = Fights::new(policy());
        let t0 = Instant::now();
        let hpa = by("hpa", 7);
        for i in 0..3 {
            f.on_drift(&"x", &hpa, t0 + i * S);
        }
        (f, t0, hpa)
    }

    #[test]
    fn the_same_values_set_back_threshold_times_is_a_fight() {
        let mut f = Fights::new(policy());
        let t0 = Instant::now();
        let hpa = by("hpa", 7);
        assert_eq!(f.on_drift(&"x", &hpa, t0), Verdict::Correct);
        assert_eq!(f.on_drift(&"x", &hpa, t0 + S), Verdict::Correct);
        assert_eq!(
            f.on_drift(&"x", &hpa, t0 + 2 * S),
            Verdict::Fight {
                manager: "hpa".into(),
                changes: 3,
                resume_at: t0 + 32 * S
            }
        );
        assert!(f.fighting(&"x"));
        assert_eq!(f.wake_at(), Some(t0 + 32 * S));
        // Another copy is not involved.
        assert_eq!(f.on_drift(&"y", &hpa, t0 + 2 * S), Verdict::Correct);
    }

    #[test]
    fn a_storm_of_different_values_or_writers_is_no_fight() {
        let mut f = Fights::new(policy());
        let t0 = Instant::now();
        for i in 0..50 {
            let manager = if i % 2 == 0 { "a" } else { "b" };
            let v = by(manager, i / 2);
            assert_eq!(
                f.on_drift(&"x", &v, t0 + i as u32 * S / 10),
                Verdict::Correct
            );
        }
        // Spread beyond the window: old drifts do not count.
        let mut f = Fights::new(policy());
        let same = by("hpa", 1);
        for i in 0..10u32 {
            assert_eq!(f.on_drift(&"x", &same, t0 + i * 40 * S), Verdict::Correct);
        }
    }

    #[test]
    fn a_fight_waits_for_quiet_then_tries_and_backs_off_more() {
        let (mut f, t0, hpa) = fought();
        f.seen_at(&"x", Some("10"));
        assert_eq!(f.holding(&"x", Some("10"), t0 + 10 * S), Some(t0 + 32 * S));
        // The other writer wrote again at 20 s: wait 30 s from then.
        assert_eq!(f.holding(&"x", Some("11"), t0 + 20 * S), Some(t0 + 50 * S));
        assert_eq!(f.holding(&"x", Some("11"), t0 + 49 * S), Some(t0 + 50 * S));
        // Quiet long enough: correct (a try) the drift that was left alone.
        assert_eq!(f.holding(&"x", Some("11"), t0 + 50 * S), None);
        assert!(!f.fighting(&"x"));
        assert_eq!(f.on_drift(&"x", &hpa, t0 + 50 * S), Verdict::Correct);
        // Changed back by the same writer at once: the fight goes on, 60 s.
        assert_eq!(
            f.on_drift(&"x", &hpa, t0 + 51 * S),
            Verdict::Fight {
                manager: "hpa".into(),
                changes: 1,
                resume_at: t0 + 111 * S
            }
        );
        // Backoff doubles up to 16 times the first.
        let mut at = t0 + 111 * S;
        for _ in 0..10 {
            assert_eq!(f.holding(&"x", None, at), None);
            assert_eq!(f.on_drift(&"x", &hpa, at), Verdict::Correct, "the try");
            match f.on_drift(&"x", &hpa, at) {
                Verdict::Fight { resume_at, .. } => {
                    assert!(resume_at - at <= 16 * 30 * S);
                    at = resume_at;
                }
                Verdict::Correct => panic!("the writer is still there"),
            }
        }
        assert_eq!(f.wake_at(), Some(at));
    }

    #[test]
    fn after_a_quiet_try_the_copy_is_watched_afresh() {
        let (mut f, t0, hpa) = fought();
        assert_eq!(f.holding(&"x", None, t0 + 40 * S), None);
        assert_eq!(f.on_drift(&"x", &hpa, t0 + 40 * S), Verdict::Correct);
        // Nothing within the window after the try: the fight is over.
        f.retain(t0 + 101 * S, |_| true);
        assert_eq!(f.wake_at(), None);
        assert_eq!(f.on_drift(&"x", &hpa, t0 + 200 * S), Verdict::Correct);
    }

    #[test]
    fn an_operator_or_a_zero_threshold_ends_it() {
        let (mut f, t0, hpa) = fought();
        f.forget(&"x");
        assert!(!f.fighting(&"x"));
        assert_eq!(f.holding(&"x", None, t0 + 3 * S), None);
        let mut off = Fights::new(FightPolicy {
            threshold: 0,
            ..policy()
        });
        for i in 0..10 {
            assert_eq!(off.on_drift(&"x", &hpa, t0 + i * S), Verdict::Correct);
        }
    }
}
