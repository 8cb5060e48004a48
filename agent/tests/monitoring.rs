//! The chart's Grafana dashboard and alerts (`deploy/helm/fleetbus-agent/monitoring/`)
//! read only metrics the agent exports, under the names and types it exports them:
//! a renamed metric breaks this test, not an operator's dashboard in silence.
//! (The PromQL itself is checked by `promtool check rules` in `scripts/test`.)

// A test program: a missing or malformed file is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

fn monitoring(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy/helm/fleetbus-agent/monitoring")
        .join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every metric family the agent registers, by name, with its OpenMetrics type.
/// A labelled family is rendered once it has a series: those whose label values
/// come from data (reasons, rules, kinds) get one here, as the agent would count
/// them; the others the agent creates at 0 itself.
fn exported() -> BTreeMap<String, String> {
    let m = fleetbus_agent::Metrics::new();
    m.rejected("undecodable");
    m.sync_rejected("malformed");
    m.command_rejected("label", "rate");
    m.kube_write("ConfigMap");
    m.peer_rejected
        .get_or_create(&vec![("write", "cluster")])
        .inc();
    m.drifts
        .get_or_create(&vec![("phase".to_owned(), "Detected".to_owned())])
        .inc();
    m.sync_lag("r", std::time::Duration::from_millis(5));
    m.set_rule_objects(&[fleetbus_agent::RuleObjects {
        rule: "r".to_owned(),
        synced: 1,
        conflicts: 0,
        errors: 0,
    }]);
    let text = m.render().unwrap();
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let mut parts = l.split_whitespace();
            let name = parts.next().unwrap().to_owned();
            (name, parts.next().unwrap_or_default().to_owned())
        })
        .collect()
}

/// The `fleetbus_…` metric names a PromQL expression reads.
fn metrics_in(expr: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("fleetbus_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    out
}

/// Why `name` is not a sample the agent exposes, or `None` if it is: a counter's
/// samples end in `_total`, a histogram's in `_bucket`, `_sum` or `_count`.
fn unknown(name: &str, families: &BTreeMap<String, String>) -> Option<String> {
    let sample = |family: &str, kind: &str| families.get(family).is_some_and(|t| t == kind);
    let known = sample(name, "gauge")
        || name
            .strip_suffix("_total")
            .is_some_and(|f| sample(f, "counter"))
        || ["_bucket", "_sum", "_count"]
            .iter()
            .any(|s| name.strip_suffix(s).is_some_and(|f| sample(f, "histogram")));
    (!known).then(|| format!("{name} (exported: {families:?})"))
}

#[test]
fn the_dashboard_reads_only_metrics_the_agent_exports() {
    let dashboard: serde_json::Value = serde_json::from_str(&monitoring("dashboard.json")).unwrap();
    let families = exported();
    let panels = dashboard["panels"].as_array().unwrap();
    let mut read = BTreeSet::new();
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        let title = panel["title"].as_str().unwrap();
        let targets = panel["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "panel {title:?} has no query");
        for t in targets {
            let expr = t["expr"].as_str().unwrap();
            let names = metrics_in(expr);
            assert!(
                !names.is_empty(),
                "panel {title:?}: {expr} reads no fleetbus metric"
            );
            for n in &names {
                assert_eq!(unknown(n, &families), None, "panel {title:?}: {expr}");
            }
            read.extend(names);
        }
    }
    // What the dashboard must show, by the metric behind it.
    for (what, metric) in [
        ("clusters by state", "fleetbus_peers"),
        ("errors per rule", "fleetbus_rule_objects"),
        ("drift events by phase and cluster", "fleetbus_drifts_total"),
        ("publish rate", "fleetbus_sync_published_total"),
        ("apply rate", "fleetbus_sync_writes_total"),
        ("bus rejections", "fleetbus_sync_rejected_total"),
    ] {
        assert!(
            read.contains(metric),
            "the dashboard shows no {what} ({metric})"
        );
    }
}

#[test]
fn every_alert_reads_exported_metrics_and_says_what_to_do() {
    let rules: serde_json::Value =
        fleetbus_schemas::yaml::from_str(&monitoring("alerts.yaml")).unwrap();
    let families = exported();
    let mut alerts = BTreeSet::new();
    for group in rules["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"].as_str().unwrap();
            let expr = rule["expr"].as_str().unwrap();
            let names = metrics_in(expr);
            assert!(!names.is_empty(), "{name}: {expr} reads no fleetbus metric");
            for n in &names {
                assert_eq!(unknown(n, &families), None, "{name}: {expr}");
            }
            assert!(
                rule["for"].as_str().is_some(),
                "{name}: no `for` (it would fire on one scrape)"
            );
            assert!(
                rule["labels"]["severity"].as_str().is_some(),
                "{name}: no severity"
            );
            for a in ["summary", "description"] {
                assert!(
                    rule["annotations"][a]
                        .as_str()
                        .is_some_and(|s| !s.is_empty()),
                    "{name}: no {a}"
                );
            }
            alerts.insert(name.to_owned());
        }
    }
    // The alerts an operator needs.
    for a in [
        "FleetbusPeerDisconnected",
        "FleetbusRuleInError",
        "FleetbusDriftNotCorrected",
        "FleetbusBusRejecting",
        "FleetbusAgentNotReady",
    ] {
        assert!(alerts.contains(a), "missing alert {a}: {alerts:?}");
    }
}

#[test]
fn a_misspelt_or_mistyped_metric_is_caught() {
    let families = exported();
    assert_eq!(unknown("fleetbus_peers", &families), None);
    assert_eq!(unknown("fleetbus_sync_writes_total", &families), None);
    assert_eq!(
        unknown("fleetbus_drift_detection_seconds_bucket", &families),
        None
    );
    assert!(
        unknown("fleetbus_peer", &families).is_some(),
        "no such family"
    );
    assert!(
        unknown("fleetbus_sync_writes", &families).is_some(),
        "a counter without _total"
    );
    assert!(
        unknown("fleetbus_peers_total", &families).is_some(),
        "a gauge with _total"
    );
    assert_eq!(
        metrics_in("sum by (rule) (fleetbus_rule_objects{state=\"errors\"}) / fleetbus_ready"),
        BTreeSet::from([
            "fleetbus_rule_objects".to_owned(),
            "fleetbus_ready".to_owned()
        ])
    );
}
