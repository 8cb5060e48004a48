//! When a failed operation on one copy (create, replace, delete, orphan) is
//! tried again: per copy, after 1 s, 2 s, 4 s … at most 5 min, jittered; at
//! once when what it was given changes; never on every pass (pure: the
//! time and the jitter are inputs). The kind of failure decides the wait
//! ([`FailureKind`]): a throttled write is tried again when the server's
//! `Retry-After` says, and nothing else waits for it (the copy writer does
//! not retry it inside the client: `kube::throttle`); a write the server
//! refuses as it is (invalid, forbidden, too large, not found) waits for a
//! change of its input, or [`PERMANENT_WAIT`] at most.
//!
//! The numbers are client-go's for a controller's item (the
//! `ItemExponentialFailureRateLimiter` of `DefaultControllerRateLimiter`
//! doubles to 1000 s; kube-runtime's `DefaultBackoff` to 5 min): one copy
//! the API server keeps refusing costs a few requests an hour, not one per
//! pass, and is still retried, since what refuses it (an admission policy,
//! RBAC, a stricter CRD, a quota) may be fixed without anything fleetbus
//! watches changing.

use std::time::Duration;

use tokio::time::Instant;

use super::outcome::{CopyError, FailureKind};
use crate::sync::digest::Digest;

/// The wait after the first failure.
pub const FIRST: Duration = Duration::from_secs(1);
/// The longest wait.
pub const MAX: Duration = Duration::from_secs(300);
/// How long a refusal that only a change can end waits when nothing the
/// engine sees changes: what fixes it (RBAC, a quota, a webhook, a
/// namespace made by hand) is outside its view.
pub const PERMANENT_WAIT: Duration = Duration::from_secs(600);
/// Up to this share of a wait is taken off at random, so copies that failed
/// together (an API server away) are not retried in lockstep. Taken off, not
/// added: the wait never exceeds [`MAX`].
pub const JITTER: f64 = 0.2;

/// What a failed operation was given: when either part changes, it is tried
/// again at once (the source was fixed, someone changed the copy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    /// The digest of the desired copy (None: a delete or orphan).
    pub desired: Option<Digest>,
    /// The live copy's resourceVersion (None: there was none).
    pub live_rv: Option<String>,
}

/// The failures of one copy in a row.
#[derive(Debug, Clone)]
pub struct Backoff {
    /// Failures in a row.
    pub attempts: u32,
    /// Not tried again before this (unless the input changes).
    pub at: Instant,
    /// The last error (shown in the rule status while waiting).
    pub error: CopyError,
    /// What the last attempt was given.
    pub input: Input,
}

impl Backoff {
    /// The state after one more failure at `now`. `jitter` is a random
    /// number in [0, 1) drawn by the caller.
    pub fn failed(
        prev: Option<&Backoff>,
        input: Input,
        now: Instant,
        jitter: f64,
        error: CopyError,
    ) -> Backoff {
        let attempts = prev.map_or(1, |p| p.attempts.saturating_add(1));
        let wait = match error.kind {
            // The server said when: then, not before and not later.
            FailureKind::Transient {
                retry_after: Some(after),
            } => after.min(MAX),
            kind if kind.is_permanent() => PERMANENT_WAIT,
            _ => wait(attempts, jitter),
        };
        Backoff {
            attempts,
            at: now + wait,
            error,
            input,
        }
    }

    /// Whether the copy waits at `now` given `input`: its step is not over
    /// and its input is what failed.
    pub fn holds(&self, input: &Input, now: Instant) -> bool {
        self.at > now && self.input == *input
    }

    /// Whether a failure with `error` is news (the first, or another error
    /// than the last): what is announced as an Event.
    pub fn is_news(prev: Option<&Backoff>, error: &CopyError) -> bool {
        prev.is_none_or(|p| p.error.message != error.message)
    }
}

/// The wait before the try after failure number `attempts` (1-based): the
/// step `FIRST × 2^(attempts-1)`, capped at [`MAX`], less `jitter × JITTER`
/// of it.
pub fn wait(attempts: u32, jitter: f64) -> Duration {
    let doublings = attempts.saturating_sub(1).min(16);
    let step = FIRST.saturating_mul(1u32 << doublings).min(MAX);
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.0
    };
    step.mul_f64(1.0 - JITTER * jitter)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(rv: &str) -> Input {
        Input {
            desired: None,
            live_rv: Some(rv.to_owned()),
        }
    }

    /// The waits of `n` failures in a row at one instant, in whole seconds.
    fn waits(n: usize, jitter: f64) -> Vec<u64> {
        let now = Instant::now();
        let mut prev: Option<Backoff> = None;
        let mut out = Vec::new();
        for i in 0..n {
            let e = CopyError::transient(format!("e{i}"));
            let b = Backoff::failed(prev.as_ref(), input("1"), now, jitter, e);
            out.push((b.at - now).as_secs());
            prev = Some(b);
        }
        out
    }

    #[test]
    fn waits_double_from_one_second_to_five_minutes() {
        assert_eq!(
            waits(12, 0.0),
            vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]
        );
    }

    #[test]
    fn jitter_only_shortens_a_wait_by_at_most_a_fifth() {
        for j in [0.0, 0.3, 0.999_999, 5.0, -1.0, f64::NAN] {
            for attempts in [1, 2, 9, 10, 40, u32::MAX] {
                let w = wait(attempts, j);
                let step = wait(attempts, 0.0);
                assert!(w <= step && w <= MAX, "{attempts} {j}: {w:?}");
                assert!(w >= step.mul_f64(1.0 - JITTER), "{attempts} {j}: {w:?}");
            }
        }
        assert_eq!(wait(1, 0.5), Duration::from_millis(900));
        assert_eq!(wait(20, 1.0 - f64::EPSILON).as_secs(), 240);
    }

    #[test]
    fn a_copy_waits_until_its_step_is_over_or_its_input_changes() {
        let now = Instant::now();
        let b = Backoff::failed(None, input("7"), now, 0.0, CopyError::transient("refused"));
        assert!(b.holds(&input("7"), now));
        assert!(b.holds(&input("7"), now + Duration::from_millis(999)));
        assert!(!b.holds(&input("7"), now + FIRST), "the step is over");
        assert!(!b.holds(&input("8"), now), "someone changed the copy");
        let desired = Input {
            desired: Some(Digest::of_desired(&serde_json::json!({"a": 1}))),
            live_rv: Some("7".into()),
        };
        assert!(!b.holds(&desired, now), "the desired copy changed");
    }

    #[test]
    fn attempts_saturate_and_the_wait_stays_at_the_cap() {
        let now = Instant::now();
        let worn = Backoff {
            attempts: u32::MAX,
            at: now,
            error: CopyError::transient(""),
            input: input("1"),
        };
        let b = Backoff::failed(
            Some(&worn),
            input("1"),
            now,
            0.0,
            CopyError::transient("again"),
        );
        assert_eq!((b.attempts, b.at - now), (u32::MAX, MAX));
    }

    #[test]
    fn only_a_first_or_different_error_is_news() {
        let now = Instant::now();
        let refused = CopyError::transient("refused");
        assert!(Backoff::is_news(None, &refused));
        let b = Backoff::failed(None, input("1"), now, 0.0, refused.clone());
        assert!(!Backoff::is_news(Some(&b), &refused));
        assert!(Backoff::is_news(
            Some(&b),
            &CopyError::transient("forbidden")
        ));
    }

    fn throttled(seconds: u64) -> CopyError {
        CopyError::new(
            FailureKind::Transient {
                retry_after: Some(Duration::from_secs(seconds)),
            },
            "too many requests",
        )
    }

    #[test]
    fn a_429_with_retry_after_is_tried_again_then_and_not_before() {
        let now = Instant::now();
        // Whatever came before: the server's word, not the doubling step.
        let mut prev = None;
        for _ in 0..6 {
            let b = Backoff::failed(prev.as_ref(), input("1"), now, 0.9, throttled(3));
            assert_eq!(b.at - now, Duration::from_secs(3));
            prev = Some(b);
        }
        let b = prev.unwrap();
        assert!(b.holds(&input("1"), now + Duration::from_millis(2_999)));
        assert!(
            !b.holds(&input("1"), now + Duration::from_secs(3)),
            "tried at 3 s"
        );
        // A Retry-After past the longest step is held to it.
        let long = Backoff::failed(None, input("1"), now, 0.0, throttled(3_600));
        assert_eq!(long.at - now, MAX);
    }

    #[test]
    fn a_422_waits_for_its_input_to_change_or_ten_minutes() {
        let now = Instant::now();
        let invalid = CopyError::new(FailureKind::Invalid, "spec.x: Invalid value");
        let b = Backoff::failed(None, input("1"), now, 0.0, invalid);
        // Not on the doubling schedule: not after 1 s, 5 min or 9 min.
        for later in [1, 300, 540] {
            assert!(
                b.holds(&input("1"), now + Duration::from_secs(later)),
                "{later} s"
            );
        }
        assert!(
            !b.holds(&input("1"), now + PERMANENT_WAIT),
            "at most ten minutes"
        );
        // A new source version (or rule change: a new desired digest) or a
        // changed live copy is tried at once.
        let changed = Input {
            desired: Some(Digest::of_desired(&serde_json::json!({"fixed": true}))),
            live_rv: Some("1".into()),
        };
        assert!(!b.holds(&changed, now));
        assert!(!b.holds(&input("2"), now));
        for kind in [
            FailureKind::Forbidden,
            FailureKind::TooLarge,
            FailureKind::NotFound,
        ] {
            let b = Backoff::failed(None, input("1"), now, 0.0, CopyError::new(kind, "no"));
            assert_eq!(b.at - now, PERMANENT_WAIT, "{kind:?}");
        }
        let conflict = CopyError::new(FailureKind::Conflict, "modified");
        let b = Backoff::failed(None, input("1"), now, 0.0, conflict);
        assert_eq!(b.at - now, FIRST, "a conflict is on the doubling schedule");
    }
}
