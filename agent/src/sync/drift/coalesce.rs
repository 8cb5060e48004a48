//! Coalescing drift announcements. A copy edited 500 times in ten seconds is
//! one story, not a thousand events: the first drift of a copy is announced
//! as it happens (Detected, then its Corrected or Resolved), and opens a
//! window; what happens to the copy during the window is held and counted,
//! and announced when the window closes as one event per phase with `count`
//! (PROTOCOL §6), which opens the next window. A copy that drifts once costs
//! what it did before; a storm costs a few events per window.
//!
//! Pure: instants are passed in; `announce` announces what this returns.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::time::Duration;

use fleetbus_schemas::drift::{DriftEvent, DriftPhase};
use tokio::time::Instant;

/// Whether to announce an event now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// Announce it now.
    Announce,
    /// Held: it is announced, counted, when the window closes.
    Held,
}

#[derive(Debug)]
struct Window {
    closes: Instant,
    /// The drift that opened the window was announced and has not ended:
    /// its end is announced at once too.
    lead_open: bool,
    /// Per phase (in the order they are announced): how many, and the last.
    held: BTreeMap<u8, (u32, DriftEvent)>,
}

/// Open windows per copy.
#[derive(Debug)]
pub struct Coalescer<K> {
    window: Duration,
    copies: HashMap<K, Window>,
}

/// The order phases are announced in when a window closes.
fn rank(p: DriftPhase) -> u8 {
    match p {
        DriftPhase::Detected => 0,
        DriftPhase::CorrectionFailed => 1,
        DriftPhase::Corrected => 2,
        DriftPhase::Resolved => 3,
        DriftPhase::Fight => 4,
    }
}

impl<K: Eq + Hash + Clone> Coalescer<K> {
    /// Windows of `window` (zero: every event is announced).
    pub fn new(window: Duration) -> Self {
        Coalescer {
            window,
            copies: HashMap::new(),
        }
    }

    /// Whether `event` about `key` is announced now or held.
    pub fn admit(&mut self, key: &K, event: &DriftEvent, now: Instant) -> Gate {
        if self.window.is_zero() {
            return Gate::Announce;
        }
        let open = self.copies.get_mut(key).filter(|w| now < w.closes);
        let Some(w) = open else {
            // No window: a Detected opens one; the end of a drift detected
            // before any window (or one that closed) is announced as is.
            if event.phase == DriftPhase::Detected {
                self.copies.insert(
                    key.clone(),
                    Window {
                        closes: now + self.window,
                        lead_open: true,
                        held: BTreeMap::new(),
                    },
                );
            }
            return Gate::Announce;
        };
        if w.lead_open && event.phase != DriftPhase::Detected {
            // The end (or a failed correction) of the announced drift.
            w.lead_open = !matches!(event.phase, DriftPhase::Corrected | DriftPhase::Resolved);
            return Gate::Announce;
        }
        w.lead_open = false;
        let slot = w
            .held
            .entry(rank(event.phase))
            .or_insert_with(|| (0, event.clone()));
        slot.0 = slot.0.saturating_add(event.count.max(1));
        slot.1 = event.clone();
        Gate::Held
    }

    /// The held events of windows that closed by `now`, each with its count,
    /// in phase order per copy. A window that held something is followed by
    /// a new one (the storm may go on); one that held nothing is dropped.
    pub fn due(&mut self, now: Instant) -> Vec<(K, Vec<DriftEvent>)> {
        let mut out = Vec::new();
        let window = self.window;
        self.copies.retain(|k, w| {
            if now < w.closes {
                return true;
            }
            if w.held.is_empty() {
                return false;
            }
            out.push((k.clone(), drain(w)));
            w.closes = now + window;
            true
        });
        out
    }

    /// Takes what is held for `key` now, closing its window (a fight is
    /// announced after the drifts that led to it).
    pub fn take(&mut self, key: &K) -> Vec<DriftEvent> {
        self.copies
            .remove(key)
            .map(|mut w| drain(&mut w))
            .unwrap_or_default()
    }

    /// When the next window with something held closes.
    pub fn wake_at(&self) -> Option<Instant> {
        self.copies
            .values()
            .filter(|w| !w.held.is_empty())
            .map(|w| w.closes)
            .min()
    }
}

fn drain(w: &mut Window) -> Vec<DriftEvent> {
    std::mem::take(&mut w.held)
        .into_values()
        .map(|(count, last)| DriftEvent { count, ..last })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::crd::DriftMode;
    use fleetbus_schemas::drift::DriftType;
    use fleetbus_schemas::ObjectRef;

    const MS: Duration = Duration::from_millis(1);

    fn ev(phase: DriftPhase, rv: u32) -> DriftEvent {
        let mut object = ObjectRef::new("v1", "ConfigMap", Some("a"), "x");
        object.resource_version = Some(rv.to_string());
        DriftEvent {
            id: format!("c:u:{rv}:{}", phase.as_str()),
            cluster: "c".into(),
            rule: "r".into(),
            origin: "o".into(),
            object,
            phase,
            type_: DriftType::Modified,
            detected_at: chrono::Utc::now(),
            changes: Vec::new(),
            changed_by: None,
            action: DriftMode::Correct,
            error: None,
            count: 1,
            resume_at: None,
        }
    }

    #[test]
    fn one_drift_is_announced_as_it_happens() {
        let mut c = Coalescer::new(5000 * MS);
        let t0 = Instant::now();
        assert_eq!(
            c.admit(&"x", &ev(DriftPhase::Detected, 1), t0),
            Gate::Announce
        );
        assert_eq!(
            c.admit(&"x", &ev(DriftPhase::Corrected, 1), t0 + MS),
            Gate::Announce
        );
        assert_eq!(c.wake_at(), None, "nothing held");
        assert!(c.due(t0 + 5000 * MS).is_empty());
        // A later drift, after the window, again at once.
        let t1 = t0 + 6000 * MS;
        assert_eq!(
            c.admit(&"x", &ev(DriftPhase::Detected, 2), t1),
            Gate::Announce
        );
        // Another copy has its own window.
        assert_eq!(
            c.admit(&"y", &ev(DriftPhase::Detected, 3), t1),
            Gate::Announce
        );
    }

    #[test]
    fn a_storm_is_one_pair_per_window_and_the_counts_add_up() {
        let mut c = Coalescer::new(1000 * MS);
        let t0 = Instant::now();
        let (mut announced, mut detected, mut corrected) = (0, 0u32, 0u32);
        let mut count = |events: &[DriftEvent]| {
            for e in events {
                match e.phase {
                    DriftPhase::Detected => detected += e.count,
                    DriftPhase::Corrected => corrected += e.count,
                    _ => {}
                }
            }
        };
        // 500 drifts 20 ms apart, each corrected 5 ms later.
        for i in 0..500u32 {
            let at = t0 + i * 20 * MS;
            for (phase, t) in [
                (DriftPhase::Detected, at),
                (DriftPhase::Corrected, at + 5 * MS),
            ] {
                let flushed = c.due(t);
                announced += flushed.iter().map(|(_, v)| v.len()).sum::<usize>();
                flushed.iter().for_each(|(_, v)| count(v));
                let e = ev(phase, i);
                if c.admit(&"x", &e, t) == Gate::Announce {
                    announced += 1;
                    count(std::slice::from_ref(&e));
                }
            }
        }
        let end = c
            .wake_at()
            .expect("the last window holds the end of the storm");
        let flushed = c.due(end);
        announced += flushed.iter().map(|(_, v)| v.len()).sum::<usize>();
        flushed.iter().for_each(|(_, v)| count(v));
        assert_eq!((detected, corrected), (500, 500));
        // 10 s of storm, 1 s windows: a pair per window, plus the first.
        assert!(announced <= 24, "{announced}");
        assert!(c.due(end + 2000 * MS).is_empty());
        assert_eq!(c.wake_at(), None);
    }

    #[test]
    fn held_events_come_in_phase_order_with_the_last_content() {
        let mut c = Coalescer::new(1000 * MS);
        let t0 = Instant::now();
        c.admit(&"x", &ev(DriftPhase::Detected, 1), t0);
        c.admit(&"x", &ev(DriftPhase::Corrected, 1), t0);
        for (phase, rv) in [
            (DriftPhase::Corrected, 2),
            (DriftPhase::Detected, 2),
            (DriftPhase::CorrectionFailed, 3),
            (DriftPhase::Detected, 4),
        ] {
            assert_eq!(c.admit(&"x", &ev(phase, rv), t0 + MS), Gate::Held);
        }
        let out = c.take(&"x");
        let got: Vec<(DriftPhase, u32, Option<String>)> = out
            .iter()
            .map(|e| (e.phase, e.count, e.object.resource_version.clone()))
            .collect();
        assert_eq!(
            got,
            [
                (DriftPhase::Detected, 2, Some("4".into())),
                (DriftPhase::CorrectionFailed, 1, Some("3".into())),
                (DriftPhase::Corrected, 1, Some("2".into())),
            ]
        );
        assert!(c.take(&"x").is_empty());
        // No window: the end of an old drift goes out as is.
        assert_eq!(
            c.admit(&"x", &ev(DriftPhase::Corrected, 5), t0),
            Gate::Announce
        );
    }

    #[test]
    fn a_zero_window_announces_everything() {
        let mut c = Coalescer::new(Duration::ZERO);
        let t0 = Instant::now();
        for i in 0..10 {
            assert_eq!(
                c.admit(&"x", &ev(DriftPhase::Detected, i), t0),
                Gate::Announce
            );
        }
    }
}
