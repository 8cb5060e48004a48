//! Rendering `clusters ls|describe` for people: pure functions of the views
//! (snapshot-tested), and the JSON both print for scripts.

use std::io::Write;

use chrono::{DateTime, Utc};
use fleetbus_schemas::drift::DriftEvent;
use serde_json::json;

use crate::drift::render::{age, table};
use crate::fleet::ClusterView;
use crate::rules::model::Cell;

const LS_HEADER: [&str; 8] = [
    "NAME",
    "STATE",
    "HEARTBEAT",
    "VERSION",
    "DISTRIBUTION",
    "REGION",
    "LABELS",
    "FEATURES",
];

fn or_dash(s: Option<&str>) -> String {
    s.filter(|s| !s.is_empty()).unwrap_or("-").to_owned()
}

fn heartbeat(v: &ClusterView) -> String {
    v.heartbeat_age.map_or_else(
        || "0s".to_owned(),
        |d| age(chrono::TimeDelta::from_std(d).unwrap_or_default()),
    )
}

fn labels(v: &ClusterView) -> String {
    let l: Vec<String> = v
        .record
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if l.is_empty() {
        "-".to_owned()
    } else {
        l.join(",")
    }
}

fn features(v: &ClusterView) -> String {
    let f: Vec<&str> = v
        .record
        .features
        .iter()
        .map(|f| f.feature_name.as_str())
        .collect();
    if f.is_empty() {
        "-".to_owned()
    } else {
        f.join(",")
    }
}

/// `fleetbus clusters ls`.
pub fn ls(out: &mut impl Write, views: &[ClusterView]) -> std::io::Result<()> {
    let rows: Vec<[String; 8]> = views
        .iter()
        .map(|v| {
            let m = &v.record.metadata;
            [
                v.record.name.clone(),
                format!("{:?}", v.state),
                heartbeat(v),
                or_dash(m.kubernetes_version.as_deref()),
                or_dash(m.distribution.as_deref()),
                or_dash(m.locality.as_ref().and_then(|l| l.region.as_deref())),
                labels(v),
                features(v),
            ]
        })
        .collect();
    table(out, LS_HEADER, &rows)
}

/// One cluster as JSON: its record, state and heartbeat age.
pub fn cluster_json(v: &ClusterView) -> serde_json::Value {
    let r = &v.record;
    json!({
        "name": r.name, "clusterId": r.cluster_id, "state": v.state,
        "heartbeatAgeSeconds": v.heartbeat_age.map(|d| d.as_secs()),
        "agentVersion": r.agent_version,
        "protocol": r.protocol,
        "kubernetesVersion": r.metadata.kubernetes_version,
        "distribution": r.metadata.distribution,
        "region": r.metadata.locality.as_ref().and_then(|l| l.region.clone()),
        "labels": r.labels,
        "features": r.features.iter().map(|f| &f.feature_name).collect::<Vec<_>>(),
    })
}

/// `fleetbus clusters describe NAME`.
pub fn describe(
    out: &mut impl Write,
    views: &[&ClusterView],
    cells: &[&Cell],
    drifted: &[DriftEvent],
    now: DateTime<Utc>,
) -> std::io::Result<()> {
    for v in views {
        let r = &v.record;
        let m = &r.metadata;
        writeln!(out, "Name:          {}", r.name)?;
        writeln!(out, "Cluster ID:    {}", r.cluster_id)?;
        writeln!(out, "State:         {:?}", v.state)?;
        writeln!(out, "Heartbeat:     {} ago", heartbeat(v))?;
        writeln!(
            out,
            "Agent:         {} (protocol {})",
            r.agent_version, r.protocol
        )?;
        writeln!(
            out,
            "Kubernetes:    {}",
            or_dash(m.kubernetes_version.as_deref())
        )?;
        writeln!(out, "Distribution:  {}", or_dash(m.distribution.as_deref()))?;
        writeln!(out, "Provider:      {}", or_dash(m.provider.as_deref()))?;
        writeln!(
            out,
            "Region:        {}",
            or_dash(m.locality.as_ref().and_then(|l| l.region.as_deref()))
        )?;
        writeln!(out, "Labels:        {}", labels(v))?;
        writeln!(out, "Features:      {}", features(v))?;
        if !r.api.reachable {
            writeln!(out, "API:           unreachable: {}", r.api.message)?;
        }
        writeln!(out)?;
    }
    writeln!(out, "Rules:")?;
    if cells.is_empty() {
        writeln!(out, "  none reported by this cluster")?;
    } else {
        let rows: Vec<[String; 6]> = cells
            .iter()
            .map(|c| {
                let r = &c.record;
                [
                    format!("  {}", r.rule),
                    crate::rules::model::role(r).to_owned(),
                    r.state.to_string(),
                    r.objects_synced.to_string(),
                    r.errors.to_string(),
                    r.conflicts.to_string(),
                ]
            })
            .collect();
        table(
            out,
            ["  RULE", "ROLE", "STATE", "COPIES", "ERRORS", "CONFLICTS"],
            &rows,
        )?;
    }
    writeln!(out)?;
    writeln!(out, "Drifted copies: {}", drifted.len())?;
    for e in drifted {
        let o = &e.object;
        let ns = o
            .namespace
            .as_deref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default();
        writeln!(
            out,
            "  {} {ns}{} (rule {}) {} for {}",
            o.kind,
            o.name,
            e.rule,
            e.phase.as_str(),
            age(now.signed_duration_since(e.detected_at))
        )?;
    }
    Ok(())
}
