//! Folding a storm: the first event of a kind, cluster, rule and phase goes out at
//! once; the ones after it within the window become one summary with their count.
//! Each event carries a token (the bridge's JetStream message) that comes back with
//! the message it went out in, so it is acknowledged only once that was delivered.

use std::collections::HashMap;

use tokio::time::{Duration, Instant};

use super::message::Notification;

type Key = (&'static str, String, String, String);

struct Window<A> {
    closes: Instant,
    /// The first event folded into this window, counting the others.
    folded: Option<Notification>,
    /// The tokens of the folded events.
    tokens: Vec<A>,
}

/// Open windows, one per (kind, cluster, rule, phase).
pub struct Coalescer<A = ()> {
    window: Duration,
    open: HashMap<Key, Window<A>>,
}

impl<A> Coalescer<A> {
    /// Folds events of one key that come within `window` of the first.
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            open: HashMap::new(),
        }
    }

    /// Takes `n`: returns it with its token if it opens a window (send it now),
    /// else keeps its count and token for the summary.
    pub fn add(&mut self, n: Notification, token: A, now: Instant) -> Option<(Notification, A)> {
        let key = (n.kind, n.cluster.clone(), n.rule.clone(), n.phase.clone());
        match self.open.get_mut(&key) {
            Some(w) if now < w.closes => {
                match &mut w.folded {
                    Some(f) => f.count = f.count.saturating_add(n.count),
                    None => w.folded = Some(n),
                }
                w.tokens.push(token);
                None
            }
            _ => {
                self.open.insert(
                    key,
                    Window {
                        closes: now + self.window,
                        folded: None,
                        tokens: Vec::new(),
                    },
                );
                Some((n, token))
            }
        }
    }

    /// Closes the windows that end by `now`: one summary for each that folded
    /// events, with their tokens.
    pub fn due(&mut self, now: Instant) -> Vec<(Notification, Vec<A>)> {
        let mut out = Vec::new();
        self.open.retain(|_, w| {
            if w.closes > now {
                return true;
            }
            if let Some(mut f) = w.folded.take() {
                f.summary = format!("{} and others like it", f.summary);
                out.push((f, std::mem::take(&mut w.tokens)));
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
            sent.extend(
                c.add(n(&format!("cm{i}"), DriftPhase::Detected), i, now)
                    .map(|s| s.0),
            );
            sent.extend(c.due(now).into_iter().map(|(s, tokens)| {
                assert_eq!(tokens, (1..500).collect::<Vec<_>>());
                s
            }));
        }
        // Another phase is another storm.
        sent.extend(c.add(n("cm0", DriftPhase::Corrected), 0, t0).map(|s| s.0));
        assert_eq!(sent.len(), 2);
        assert_eq!(c.next_due(), Some(t0 + Duration::from_secs(10)));
        sent.extend(
            c.due(t0 + Duration::from_secs(10))
                .into_iter()
                .map(|(s, tokens)| {
                    assert_eq!(tokens, (1..500).collect::<Vec<u64>>());
                    s
                }),
        );
        assert_eq!(sent.len(), 3);
        let summary = &sent[2];
        assert_eq!((summary.count, summary.phase.as_str()), (499, "Detected"));
        assert!(summary.summary.ends_with("and others like it"));
        assert_eq!(c.next_due(), None);
        // After the window, the next event goes out at once again.
        assert!(c
            .add(
                n("cm1", DriftPhase::Detected),
                1,
                t0 + Duration::from_secs(11)
            )
            .is_some());
    }
}
