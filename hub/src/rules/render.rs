//! Rendering the rule views for people: pure functions of the model (snapshot-tested).

use std::io::Write;

use chrono::{DateTime, Utc};

use super::model::{role, RuleRow};
use crate::drift::render::{age, table};

/// Columns of `fleetbus rules ls`.
const LS_HEADER: [&str; 7] = [
    "RULE",
    "SOURCES",
    "SINKS",
    "READY",
    "ERRORS",
    "CONFLICTS",
    "STATE",
];

/// `3/4`, or `-` when nothing reports.
fn ratio(n: u64, of: u64) -> String {
    format!("{n}/{of}")
}

/// The footer every view prints when records were skipped.
pub(crate) fn skipped_line(out: &mut impl Write, skipped: usize) -> std::io::Result<()> {
    if skipped > 0 {
        writeln!(
            out,
            "{skipped} unreadable rule status record(s) skipped (see the log with RUST_LOG=warn)"
        )?;
    }
    Ok(())
}

/// `fleetbus rules ls`: one line per rule; SINKS is synced/selected.
pub fn ls(out: &mut impl Write, rows: &[RuleRow], skipped: usize) -> std::io::Result<()> {
    let lines: Vec<[String; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.name.clone(),
                if r.sources.is_empty() {
                    "-".to_owned()
                } else {
                    r.sources.join(",")
                },
                ratio(r.sinks_synced, r.sinks_selected),
                r.ready
                    .map_or_else(|| "-".to_owned(), |x| ratio(x.ready, x.reported)),
                r.errors.to_string(),
                r.conflicts.to_string(),
                r.state.to_string(),
            ]
        })
        .collect();
    if rows.is_empty() {
        writeln!(
            out,
            "no rule status on the bus (no ResourceSyncRule, or no agent reported yet)"
        )?;
    } else {
        table(out, LS_HEADER, &lines)?;
    }
    skipped_line(out, skipped)
}

/// Columns of `fleetbus rules describe`.
const DESCRIBE_HEADER: [&str; 8] = [
    "CLUSTER",
    "CLUSTER-STATE",
    "ROLE",
    "STATE",
    "COPIES",
    "READY",
    "ERRORS",
    "CONFLICTS",
];

/// `fleetbus rules describe NAME`: per cluster, its role and state, why, and the
/// objects with a problem.
pub fn describe(
    out: &mut impl Write,
    row: &RuleRow,
    skipped: usize,
    now: DateTime<Utc>,
) -> std::io::Result<()> {
    writeln!(out, "Rule:     {}", row.name)?;
    writeln!(out, "State:    {}", row.state)?;
    let sources = if row.sources.is_empty() {
        "-".to_owned()
    } else {
        row.sources.join(", ")
    };
    writeln!(out, "Sources:  {sources}")?;
    writeln!(
        out,
        "Sinks:    {} selected: {} synced, {} waiting, {} in error, {} in conflict",
        row.sinks_selected,
        row.sinks_synced,
        row.sinks_waiting,
        row.sinks_error,
        row.sinks_conflict
    )?;
    writeln!(out)?;
    let lines: Vec<[String; 8]> = row
        .cells
        .iter()
        .map(|c| {
            let r = &c.record;
            [
                r.cluster.clone(),
                c.cluster_state
                    .map_or_else(|| "Unknown".to_owned(), |s| format!("{s:?}")),
                role(r).to_owned(),
                r.state.to_string(),
                r.objects_synced.to_string(),
                match (r.ready_copies, r.reported_copies) {
                    (Some(n), Some(m)) => ratio(n, m),
                    _ => "-".to_owned(),
                },
                r.errors.to_string(),
                r.conflicts.to_string(),
            ]
        })
        .collect();
    table(out, DESCRIBE_HEADER, &lines)?;
    writeln!(out)?;
    writeln!(out, "Why, per cluster:")?;
    for c in &row.cells {
        let r = &c.record;
        writeln!(
            out,
            "  {}: {} ({}; reported {} ago)",
            r.cluster,
            if r.message.is_empty() {
                "-"
            } else {
                &r.message
            },
            if r.reason.is_empty() {
                "no reason"
            } else {
                &r.reason
            },
            age(now.signed_duration_since(r.updated_at))
        )?;
    }
    let problems: Vec<_> = row
        .cells
        .iter()
        .flat_map(|c| c.record.problems.iter().map(move |p| (&c.record, p)))
        .collect();
    if !problems.is_empty() {
        writeln!(out)?;
        writeln!(out, "Problems:")?;
        for (r, p) in problems {
            writeln!(
                out,
                "  {}  {:?}  {}: {}",
                r.cluster, p.kind, p.object, p.message
            )?;
        }
        for c in &row.cells {
            let r = &c.record;
            let shown = r.problems.len() as u64;
            if r.problems_total > shown {
                writeln!(
                    out,
                    "  {}: and {} more (see kubectl get resourcesyncrule {} -o yaml there)",
                    r.cluster,
                    r.problems_total - shown,
                    row.name
                )?;
            }
        }
    }
    skipped_line(out, skipped)
}
