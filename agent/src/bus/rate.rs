//! Rate limits on the requests an agent answers (`<p>.cmd.<self>.<verb>`, PROTOCOL §6):
//! one token bucket per verb, so a flood of one verb costs little and starves no other.

use std::time::{Duration, Instant};

/// How many requests of one verb an agent takes: `burst` at once, then `per_second`
/// sustained (`--command-rate`, `--command-burst`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    /// Tokens added per second.
    pub per_second: f64,
    /// Bucket size: requests taken at once after a quiet spell.
    pub burst: u32,
}

impl RateLimit {
    /// The defaults: an operator's `drift correct`, `clusters label` and a few
    /// `clusters progress --watch` loops (one request a second each) stay far below them,
    /// and a flood is answered with refusals that cost a reply each.
    pub const DEFAULT: RateLimit = RateLimit {
        per_second: 5.0,
        burst: 20,
    };
}

/// A request refused because its verb's bucket is empty.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error(
    "rate limited: more than {burst} {verb} requests at once or {per_second}/s to this \
     cluster; retry in {}", humantime::format_duration(Duration::from_millis(self.retry_after_ms()))
)]
pub struct RateRefused {
    /// The verb (`correct`, `label`, `progress`, `preview`, `preview-source`, …).
    pub verb: &'static str,
    /// The limit's burst.
    pub burst: u32,
    /// The limit's sustained rate (requests per second).
    pub per_second: f64,
    /// When a token will be there again.
    pub retry_after: Duration,
}

impl RateRefused {
    /// `retry_after` in whole milliseconds, rounded up (never 0: "retry at once" would
    /// be refused again).
    pub fn retry_after_ms(&self) -> u64 {
        u64::try_from(self.retry_after.as_micros().div_ceil(1000))
            .unwrap_or(u64::MAX)
            .max(1)
    }
}

/// A token bucket, pure: the caller passes the time, so tests need no clock.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    verb: &'static str,
    limit: RateLimit,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket for `verb` at `now`.
    pub fn new(verb: &'static str, limit: RateLimit, now: Instant) -> Self {
        Self {
            verb,
            limit,
            tokens: f64::from(limit.burst),
            at: now,
        }
    }

    /// Takes a token for one request at `now`, or says when one will be there.
    pub fn take(&mut self, now: Instant) -> Result<(), RateRefused> {
        let burst = f64::from(self.limit.burst);
        // An earlier `now` (instants passed out of order) adds nothing.
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.limit.per_second).min(burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        let missing = 1.0 - self.tokens;
        let retry_after =
            Duration::try_from_secs_f64(missing / self.limit.per_second).unwrap_or(Duration::MAX);
        Err(RateRefused {
            verb: self.verb,
            burst: self.limit.burst,
            per_second: self.limit.per_second,
            retry_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: RateLimit = RateLimit {
        per_second: 4.0,
        burst: 3,
    };

    #[test]
    fn a_burst_is_taken_then_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new("correct", LIMIT, t0);
        for _ in 0..3 {
            assert_eq!(b.take(t0), Ok(()));
        }
        let refused = b.take(t0).unwrap_err();
        assert_eq!(refused.retry_after, Duration::from_millis(250));
        assert_eq!(refused.retry_after_ms(), 250);
        assert_eq!(refused.verb, "correct");
        // A quarter second later exactly one token is back.
        let t1 = t0 + Duration::from_millis(250);
        assert_eq!(b.take(t1), Ok(()));
        let refused = b.take(t1).unwrap_err();
        assert_eq!(refused.retry_after_ms(), 250);
        // Half a token's wait left after 125 ms.
        let t2 = t1 + Duration::from_millis(125);
        assert_eq!(b.take(t2).unwrap_err().retry_after_ms(), 125);
    }

    #[test]
    fn a_quiet_spell_refills_to_the_burst_and_no_more() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new("label", LIMIT, t0);
        for _ in 0..3 {
            b.take(t0).unwrap();
        }
        let later = t0 + Duration::from_secs(3600);
        for _ in 0..3 {
            assert_eq!(b.take(later), Ok(()));
        }
        assert!(b.take(later).is_err());
    }

    #[test]
    fn instants_out_of_order_add_nothing() {
        let t0 = Instant::now();
        let t1 = t0 + Duration::from_secs(1);
        let mut b = TokenBucket::new("progress", LIMIT, t1);
        for _ in 0..3 {
            b.take(t1).unwrap();
        }
        assert!(b.take(t0).is_err(), "an older instant refills nothing");
        assert_eq!(b.take(t1 + Duration::from_millis(250)), Ok(()));
    }

    #[test]
    fn the_refusal_says_why_and_when_in_whole_milliseconds() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new("correct", RateLimit::DEFAULT, t0);
        for _ in 0..20 {
            b.take(t0).unwrap();
        }
        let msg = b.take(t0).unwrap_err().to_string();
        assert_eq!(
            msg,
            "rate limited: more than 20 correct requests at once or 5/s to this cluster; \
             retry in 200ms"
        );
        let slow = RateLimit {
            per_second: 0.3,
            burst: 1,
        };
        let mut b = TokenBucket::new("label", slow, t0);
        b.take(t0).unwrap();
        let msg = b.take(t0).unwrap_err().to_string();
        assert!(
            msg.ends_with("or 0.3/s to this cluster; retry in 3s 334ms"),
            "{msg}"
        );
    }
}
