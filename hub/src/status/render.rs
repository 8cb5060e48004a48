//! Rendering `fleetbus status` for people: a pure function of the summary
//! (snapshot-tested).

use std::collections::BTreeMap;
use std::io::Write;

use chrono::{DateTime, Utc};
use fleetbus_schemas::drift::DriftEvent;

use super::model::Attention;
use crate::drift::render::{event_line, table};
use crate::rules::model::RuleRow;

/// Everything `status` shows.
pub struct Summary<'a> {
    /// What needs attention.
    pub attention: &'a [Attention],
    /// Clusters by state word.
    pub clusters: &'a BTreeMap<String, u64>,
    /// One row per rule.
    pub rules: &'a [RuleRow],
    /// Copies drifted now.
    pub drifted: usize,
    /// The last drift events, newest last, with when they were stored.
    pub last_events: &'a [(DriftEvent, Option<DateTime<Utc>>)],
    /// Rule status records that could not be shown.
    pub skipped: usize,
}

const RULES_HEADER: [&str; 7] = [
    "RULE", "SINKS", "SYNCED", "WAITING", "ERROR", "CONFLICT", "STATE",
];

/// The one screen.
pub fn summary(out: &mut impl Write, s: &Summary<'_>) -> std::io::Result<()> {
    if s.attention.is_empty() {
        writeln!(out, "NEEDS ATTENTION: nothing")?;
    } else {
        writeln!(out, "NEEDS ATTENTION ({})", s.attention.len())?;
        let rows: Vec<[String; 4]> = s
            .attention
            .iter()
            .map(|a| {
                [
                    format!("  {}", a.kind),
                    a.name.clone(),
                    a.state.clone(),
                    a.detail.clone(),
                ]
            })
            .collect();
        table(out, ["  WHAT", "NAME", "STATE", "DETAIL"], &rows)?;
    }
    writeln!(out)?;
    let total: u64 = s.clusters.values().sum();
    let states: Vec<String> = s.clusters.iter().map(|(k, n)| format!("{n} {k}")).collect();
    writeln!(out, "CLUSTERS: {total} ({})", states.join(", "))?;
    writeln!(out)?;
    writeln!(out, "RULES: {}", s.rules.len())?;
    if !s.rules.is_empty() {
        let rows: Vec<[String; 7]> = s
            .rules
            .iter()
            .map(|r| {
                [
                    format!("  {}", r.name),
                    r.sinks_selected.to_string(),
                    r.sinks_synced.to_string(),
                    r.sinks_waiting.to_string(),
                    r.sinks_error.to_string(),
                    r.sinks_conflict.to_string(),
                    r.state.to_string(),
                ]
            })
            .collect();
        let mut header = RULES_HEADER;
        header[0] = "  RULE";
        table(out, header, &rows)?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "DRIFTED NOW: {} cop{}",
        s.drifted,
        if s.drifted == 1 { "y" } else { "ies" }
    )?;
    if !s.last_events.is_empty() {
        writeln!(out)?;
        writeln!(out, "LAST DRIFT EVENTS")?;
        for (e, at) in s.last_events {
            writeln!(out, "  {}", event_line(e, *at))?;
        }
    }
    crate::rules::render::skipped_line(out, s.skipped)
}
