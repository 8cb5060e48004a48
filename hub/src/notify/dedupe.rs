//! Folding a storm: the first event of a kind, cluster, rule and phase goes out at
//! once; the ones after it within the window become one summary with their count.

use std::collections::HashMap;

use tokio::time::{Duration, Instant};

use super::message::Notification;

type Key = (&'static str, String, String, String);

struct Window {
    closes: Instant,
    /// The first event folded into this window and how many (0: none yet).
    folded: Option<Notification>,
}

/// Open windows, one per (kind, cluster, rule, phase).
pub struct Coalescer {
    window: Duration,
    open: HashMap<Key, Window>,
}

impl Coalescer {
    /// Folds events of one key that come within `window` of the first.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            open: HashMap::new(),
        }
    }

    /// Takes `n`: returns it if it opens a window (send it now), else keeps its count.
    pub fn add(&mut self, n: Notification, now: Instant) -> Option<Notification> {
        let key = (n.kind, n.cluster.clone(), n.rule.clone(), n.phase.clone());
        match self.open.get_mut(&key) {
            Some(w) if now < w.closes => {
                match &mut w.folded {
                    Some(f) => f.count = f.count.saturating_add(n.count),
                    None => w.folded = Some(n),
                }
                None
            }
            _ => {
                self.open.insert(
                    key,
                    Window {
                        closes: now + self.window,
                        folded: None,
                    },
                );
                Some(n)
            }
        }
    }

    /// Closes the windows that end by `now`: one summary for each that folded events.
    pub fn due(&mut self, now: Instant) -> Vec<Notification> {
        let mut out = Vec::new();
        self.open.retain(|_, w| {
            if w.closes > now {
                return true;
            }
            if let Some(mut f) = w.folded.take() {
                f.summary = format!("{} and others like it", f.summary);
                out.push(f);
            }
            false
        });
        out
    }

    /// When the next window closes.
    pub fn next_due(&self) -> Option<Instant> {
        self.open.values().map(|w| w.closes).min()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::notify::message::tests::drift;
    use fleetbus_schemas::drift::DriftPhase;

    #[test]
    fn a_storm_is_the_first_event_and_one_summary_with_its_count() {
        let mut c = Coalescer::new(Duration::from_secs(10));
        let t0 = Instant::now();
        let n = |name: &str, phase| Notification::from_drift(&drift("b", "web", name, phase));
        let mut sent = Vec::new();
        for i in 0..500u64 {
            let now = t0 + Duration::from_millis(i);
            sent.extend(c.add(n(&format!("cm{i}"), DriftPhase::Detected), now));
            sent.extend(c.due(now));
        }
        // Another phase is another storm.
        sent.extend(c.add(n("cm0", DriftPhase::Corrected), t0));
        assert_eq!(sent.len(), 2);
        assert_eq!(c.next_due(), Some(t0 + Duration::from_secs(10)));
        sent.extend(c.due(t0 + Duration::from_secs(10)));
        assert_eq!(sent.len(), 3);
        let summary = &sent[2];
        assert_eq!((summary.count, summary.phase.as_str()), (499, "Detected"));
        assert!(summary.summary.ends_with("and others like it"));
        assert_eq!(c.next_due(), None);
        // After the window, the next event goes out at once again.
        assert!(c.add(n("cm1", DriftPhase::Detected), t0 + Duration::from_secs(11)).is_some());
    }
}
