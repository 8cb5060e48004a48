//! One log line per kind of trouble and interval: a peer (or a forger)
//! publishing thousands of bad messages costs every agent a counter
//! increment each, and a log line every few seconds, not thousands of lines.
//! The metrics count every message; the line says how many it stands for.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Keys remembered at most: past that the gate forgets them all (a flood
/// of distinct keys then logs a line a key again, still bounded by the
/// flood's own rate, and the memory stays small).
const MAX_KEYS: usize = 1024;

/// Lets one log line per key through each `interval`.
#[derive(Debug)]
pub struct LogGate {
    interval: Duration,
    /// When each key was last let through, and how many were held back since.
    seen: Mutex<BTreeMap<String, (Instant, u64)>>,
}

impl LogGate {
    /// A gate letting one line per key through each `interval`.
    pub const fn new(interval: Duration) -> Self {
        LogGate {
            interval,
            seen: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether a line for `key` may be logged now: Some(how many lines of
    /// that key were held back since the last one let through), else None
    /// (counted). A poisoned lock lets the line through: a log line too many
    /// is better than none.
    pub fn admit(&self, key: &str) -> Option<u64> {
        self.admit_at(key, Instant::now())
    }

    fn admit_at(&self, key: &str, now: Instant) -> Option<u64> {
        let Ok(mut seen) = self.seen.lock() else {
            return Some(0);
        };
        if seen.len() >= MAX_KEYS && !seen.contains_key(key) {
            seen.clear();
        }
        match seen.get_mut(key) {
            Some((at, held)) if now.duration_since(*at) < self.interval => {
                *held += 1;
                None
            }
            Some((at, held)) => {
                *at = now;
                Some(std::mem::take(held))
            }
            None => {
                seen.insert(key.to_owned(), (now, 0));
                Some(0)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_key_and_interval_and_the_next_says_how_many_were_held() {
        let gate = LogGate::new(Duration::from_secs(10));
        let t0 = Instant::now();
        assert_eq!(gate.admit_at("a", t0), Some(0));
        for i in 1..2000 {
            assert_eq!(gate.admit_at("a", t0 + Duration::from_millis(i)), None);
        }
        // Another key has its own line.
        assert_eq!(gate.admit_at("b", t0), Some(0));
        // After the interval: one line, standing for the 1,999 held back.
        assert_eq!(gate.admit_at("a", t0 + Duration::from_secs(10)), Some(1999));
        assert_eq!(gate.admit_at("a", t0 + Duration::from_secs(11)), None);
    }

    #[test]
    fn a_flood_of_keys_keeps_the_memory_bounded() {
        let gate = LogGate::new(Duration::from_secs(10));
        let t0 = Instant::now();
        for i in 0..10 * MAX_KEYS {
            assert_eq!(gate.admit_at(&format!("k{i}"), t0), Some(0));
        }
        assert!(gate.seen.lock().unwrap().len() <= MAX_KEYS);
    }
}
