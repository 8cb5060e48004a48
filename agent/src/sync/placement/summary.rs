//! A rule's placement on its status: on its origin, how many of this
//! cluster's units are placed, and which the fleet could not satisfy (the
//! records' `degraded`), for the `PlacementDegraded` condition; on a sink,
//! how many of every origin's units chose it. Pure: the book and the rule
//! in, the report's fields out.

use fleetbus_schemas::placement::PlacementUnit;

use super::state::PlacementBook;
use crate::sync::model::RuleReport;
use crate::sync::rules::compile::CompiledRule;

/// At most this many degraded units are named in the condition's message.
const NAMED: usize = 3;

/// Fills `report.placed` and `report.placement_degraded` for `rule` from
/// this origin's (`local`) decisions: its own objects' units, and its
/// group's unit when the rule belongs to a placement group; and, on a sink
/// (`report.selected`), `report.placed_here` from every origin's.
pub(in crate::sync) fn placement_summary(
    book: &PlacementBook,
    local: &str,
    rule: &CompiledRule,
    report: &mut RuleReport,
) {
    let Some(spec) = &rule.spec.placement else {
        return;
    };
    let ours = |unit: &PlacementUnit| match unit {
        PlacementUnit::Object { rule: r, .. } => *r == rule.name,
        PlacementUnit::Group(g) => spec.group.as_deref() == Some(g.as_str()),
    };
    let mut placed = 0;
    let mut degraded = Vec::new();
    let (mut here, mut elsewhere) = (0u64, 0u64);
    for (key, record) in &book.read.records {
        if !ours(&key.unit) {
            continue;
        }
        if report.selected {
            match record.role(local) {
                fleetbus_schemas::placement::Role::Chosen(_) => here += 1,
                _ => elsewhere += 1,
            }
        }
        if key.origin != local {
            continue;
        }
        placed += 1;
        if let Some(why) = &record.degraded {
            degraded.push(format!("{}: {why}", unit_name(&key.unit)));
        }
    }
    report.placed = placed;
    report.placed_here = report.selected.then_some((here, elsewhere));
    report.placement_degraded = (!degraded.is_empty()).then(|| {
        let more = degraded.len().saturating_sub(NAMED);
        let mut message = format!(
            "{} of {placed} placements degraded: {}",
            degraded.len(),
            degraded[..degraded.len().min(NAMED)].join("; ")
        );
        if more > 0 {
            message.push_str(&format!("; and {more} more"));
        }
        message
    });
}

/// A unit as an operator reads it: `Kind ns/name` or `group G`.
fn unit_name(unit: &PlacementUnit) -> String {
    match unit {
        PlacementUnit::Object { object, .. } => match &object.namespace {
            Some(ns) => format!("{} {ns}/{}", object.kind, object.name),
            None => format!("{} {}", object.kind, object.name),
        },
        PlacementUnit::Group(g) => format!("group {g}"),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use chrono::Utc;
    use fleetbus_schemas::placement::{PlacementKey, PlacementRecord};
    use fleetbus_schemas::subject::ObjectKey;
    use serde_json::json;

    use super::*;
    use crate::sync::rules::compile as rules;

    fn rule(name: &str, group: Option<&str>) -> CompiledRule {
        let obj = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
                         "metadata": {"name": name, "generation": 1},
                         "spec": {"groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
                                  "placement": {"clusters": 2, "group": group}}});
        rules::compile(&[&obj])[name].clone()
    }

    fn object(name: &str) -> ObjectKey {
        ObjectKey {
            origin: "hub".into(),
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("web".into()),
            name: name.into(),
        }
    }

    fn put(book: &mut PlacementBook, origin: &str, unit: PlacementUnit, degraded: Option<&str>) {
        put_chosen(book, origin, unit, degraded, &[]);
    }

    fn put_chosen(
        book: &mut PlacementBook,
        origin: &str,
        unit: PlacementUnit,
        degraded: Option<&str>,
        chosen: &[&str],
    ) {
        let record = PlacementRecord {
            rule: "r".into(),
            revision: 1,
            chosen: chosen
                .iter()
                .map(|c| fleetbus_schemas::placement::Chosen {
                    cluster: (*c).into(),
                    score: 0.0,
                    replicas: None,
                    reason: "test".into(),
                })
                .collect(),
            draining: Vec::new(),
            kept: Vec::new(),
            failing: Vec::new(),
            replaced: Vec::new(),
            passed: Vec::new(),
            degraded: degraded.map(str::to_owned),
            decided_at: Utc::now(),
            last_release: None,
        };
        let key = PlacementKey {
            origin: origin.into(),
            unit,
        };
        book.read.records.insert(key, record);
    }

    fn of(rule_name: &str, name: &str) -> PlacementUnit {
        PlacementUnit::Object {
            rule: rule_name.into(),
            object: object(name),
        }
    }

    #[test]
    fn counts_this_origins_units_of_the_rule_and_names_the_degraded() {
        let mut book = PlacementBook::default();
        put(&mut book, "hub", of("r", "a"), None);
        put(
            &mut book,
            "hub",
            of("r", "b"),
            Some("1 of 2 clusters: 1 eligible"),
        );
        // Another rule's, another origin's: not ours.
        put(&mut book, "hub", of("other", "c"), Some("no"));
        put(&mut book, "c1", of("r", "d"), Some("no"));
        let mut report = RuleReport::default();
        placement_summary(&book, "hub", &rule("r", None), &mut report);
        assert_eq!(report.placed, 2);
        assert_eq!(
            report.placement_degraded.as_deref(),
            Some("1 of 2 placements degraded: ConfigMap web/b: 1 of 2 clusters: 1 eligible")
        );
    }

    #[test]
    fn a_sink_counts_every_origins_units_of_the_rule_that_chose_it() {
        let mut book = PlacementBook::default();
        put_chosen(&mut book, "hub", of("r", "a"), None, &["s1", "s2"]);
        put_chosen(&mut book, "c1", of("r", "b"), None, &["s1"]);
        put_chosen(&mut book, "c1", of("r", "c"), None, &["s2"]);
        // Another rule's: not counted.
        put_chosen(&mut book, "c1", of("other", "d"), None, &["s1"]);
        let mut report = RuleReport {
            selected: true,
            ..RuleReport::default()
        };
        placement_summary(&book, "s1", &rule("r", None), &mut report);
        assert_eq!(report.placed_here, Some((2, 1)));
        assert_eq!(report.placed, 0, "s1 is no origin of these");
        // Not a sink of the rule: nothing to mark.
        let mut report = RuleReport::default();
        placement_summary(&book, "s1", &rule("r", None), &mut report);
        assert_eq!(report.placed_here, None);
    }

    #[test]
    fn a_group_unit_counts_for_each_rule_of_the_group_and_long_lists_are_cut() {
        let mut book = PlacementBook::default();
        put(
            &mut book,
            "hub",
            PlacementUnit::Group("shop".into()),
            Some("spread"),
        );
        for i in 0..5 {
            put(&mut book, "hub", of("r", &format!("o{i}")), Some("few"));
        }
        let mut report = RuleReport::default();
        placement_summary(&book, "hub", &rule("r", Some("shop")), &mut report);
        assert_eq!(report.placed, 6);
        let message = report.placement_degraded.unwrap();
        assert!(
            message.starts_with("6 of 6 placements degraded: "),
            "{message}"
        );
        assert!(message.ends_with("; and 3 more"), "{message}");
        // A rule without placement says nothing.
        let plain = rules::compile(&[&json!({"apiVersion": "fleetbus.io/v1alpha1",
            "kind": "ResourceSyncRule", "metadata": {"name": "p", "generation": 1},
            "spec": {"groupVersionKind": {"version": "v1", "kind": "ConfigMap"}}})])["p"]
            .clone();
        let mut report = RuleReport::default();
        placement_summary(&book, "hub", &plain, &mut report);
        assert_eq!((report.placed, report.placement_degraded), (0, None));
    }
}
