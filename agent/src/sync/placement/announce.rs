//! Events on the rule when the origin's placement changes (the pure half:
//! which changes, and their messages).
//!
//! A decision that moves copies is something an operator wants to see where
//! they look first, `kubectl describe rsr NAME`: `Placed` (Normal) when the
//! chosen clusters change (a first placement, a taint, a rebalance), and
//! `PlacementFailover` (Warning) when a failed cluster is replaced. One
//! Event per rule, reason and pass, naming the first [`NAMED`] units and how
//! many more: a first placement of 1,000 objects is one Event, not 1,000.

use std::collections::BTreeMap;

use fleetbus_schemas::placement::{PlacementKey, PlacementRecord, PlacementUnit};

use crate::kube::events::EventType;
use crate::sync::model::meta::describe_key;

/// Units named in one Event.
const NAMED: usize = 5;

/// What one put changed, as an Event tells it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Change {
    /// The rule whose Event it is (a group's deciding rule).
    rule: String,
    /// A failover (else a new choice).
    failover: bool,
    /// The unit and what happened to it.
    line: String,
}

/// The change from `old` to `new` at `key`, if an Event should say it.
pub(super) fn change(
    key: &PlacementKey,
    old: Option<&PlacementRecord>,
    new: &PlacementRecord,
) -> Option<Change> {
    let names = |r: &PlacementRecord| -> Vec<String> {
        let mut c: Vec<String> = r.chosen.iter().map(|c| c.cluster.clone()).collect();
        c.sort();
        c
    };
    let unit = match &key.unit {
        PlacementUnit::Object { object, .. } => describe_key(object),
        PlacementUnit::Group(g) => format!("group {g}"),
    };
    let replaced: Vec<&(String, String)> = new
        .replaced
        .iter()
        .filter(|r| old.is_none_or(|o| !o.replaced.contains(r)))
        .collect();
    if !replaced.is_empty() {
        let swaps: Vec<String> = replaced
            .iter()
            .map(|(failed, by)| format!("{failed} replaced by {by}"))
            .collect();
        return Some(Change {
            rule: new.rule.clone(),
            failover: true,
            line: format!("{unit}: {}", swaps.join(", ")),
        });
    }
    let now = names(new);
    let was = old.map(names);
    if was.as_ref() == Some(&now) {
        return None;
    }
    let line = match was {
        Some(was) => format!("{unit} on {} (was {})", list(&now), list(&was)),
        None => format!("{unit} on {}", list(&now)),
    };
    Some(Change {
        rule: new.rule.clone(),
        failover: false,
        line,
    })
}

fn list(clusters: &[String]) -> String {
    if clusters.is_empty() {
        "no cluster".to_owned()
    } else {
        clusters.join(", ")
    }
}

/// The Events of one pass: (rule, type, reason, message), one per rule and
/// reason, naming the first [`NAMED`] units and how many more.
pub(super) fn events(changes: Vec<Change>) -> Vec<(String, EventType, &'static str, String)> {
    let mut grouped: BTreeMap<(String, bool), Vec<String>> = BTreeMap::new();
    for c in changes {
        grouped
            .entry((c.rule, c.failover))
            .or_default()
            .push(c.line);
    }
    grouped
        .into_iter()
        .map(|((rule, failover), lines)| {
            let (type_, reason, verb) = match failover {
                true => (EventType::Warning, "PlacementFailover", "failed over"),
                false => (EventType::Normal, "Placed", "placed"),
            };
            let more = lines.len().saturating_sub(NAMED);
            let mut message = format!(
                "{verb} {} unit(s): {}",
                lines.len(),
                lines
                    .iter()
                    .take(NAMED)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            if more > 0 {
                message.push_str(&format!("; and {more} more"));
            }
            (rule, type_, reason, message)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;
    use fleetbus_schemas::placement::Chosen;
    use fleetbus_schemas::subject::ObjectKey;

    fn key(name: &str) -> PlacementKey {
        PlacementKey {
            origin: "hub".into(),
            unit: PlacementUnit::Object {
                rule: "web".into(),
                object: ObjectKey {
                    origin: "hub".into(),
                    group: String::new(),
                    version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("apps".into()),
                    name: name.into(),
                },
            },
        }
    }

    fn record(chosen: &[&str], replaced: &[(&str, &str)]) -> PlacementRecord {
        PlacementRecord {
            rule: "web".into(),
            revision: 1,
            chosen: chosen
                .iter()
                .map(|c| Chosen {
                    cluster: (*c).into(),
                    score: 0.0,
                    replicas: None,
                    reason: String::new(),
                })
                .collect(),
            draining: vec![],
            kept: vec![],
            failing: vec![],
            replaced: replaced
                .iter()
                .map(|(a, b)| ((*a).into(), (*b).into()))
                .collect(),
            passed: vec![],
            degraded: None,
            decided_at: Utc::now(),
            last_release: None,
        }
    }

    #[test]
    fn a_new_choice_and_a_failover_are_told_an_unchanged_one_is_not() {
        let first = change(&key("a"), None, &record(&["c2", "c1"], &[])).unwrap();
        assert_eq!(first.line, "ConfigMap apps/a on c1, c2");
        let same = record(&["c1", "c2"], &[]);
        assert_eq!(
            change(&key("a"), Some(&same), &record(&["c2", "c1"], &[])),
            None
        );
        let moved = change(&key("a"), Some(&same), &record(&["c1", "c3"], &[])).unwrap();
        assert_eq!(moved.line, "ConfigMap apps/a on c1, c3 (was c1, c2)");
        assert!(!moved.failover);
        let failed = record(&["c1", "c3"], &[("c2", "c3")]);
        let over = change(&key("a"), Some(&same), &failed).unwrap();
        assert_eq!(
            (over.failover, over.line.as_str()),
            (true, "ConfigMap apps/a: c2 replaced by c3")
        );
        // Told once: the next record that still lists it is not a new failover.
        assert_eq!(change(&key("a"), Some(&failed), &failed.clone()), None);
    }

    #[test]
    fn one_event_per_rule_and_reason_naming_five_units_and_how_many_more() {
        let changes: Vec<Change> = (0..7)
            .map(|i| change(&key(&format!("o{i}")), None, &record(&["c1"], &[])).unwrap())
            .chain(change(
                &key("x"),
                Some(&record(&["c1"], &[])),
                &record(&["c2"], &[("c1", "c2")]),
            ))
            .collect();
        let ev = events(changes);
        assert_eq!(ev.len(), 2);
        let (rule, type_, reason, message) = &ev[0];
        assert_eq!(
            (rule.as_str(), *type_, *reason),
            ("web", EventType::Normal, "Placed")
        );
        assert!(
            message.starts_with("placed 7 unit(s): ConfigMap apps/o0 on c1; "),
            "{message}"
        );
        assert!(
            message.ends_with("ConfigMap apps/o4 on c1; and 2 more"),
            "{message}"
        );
        assert_eq!(
            (ev[1].1, ev[1].2),
            (EventType::Warning, "PlacementFailover")
        );
        assert_eq!(
            ev[1].3,
            "failed over 1 unit(s): ConfigMap apps/x: c1 replaced by c2"
        );
    }
}
