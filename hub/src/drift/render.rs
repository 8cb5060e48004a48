//! Rendering drift events: the `ls` table, one line per event for `watch` and `history`, JSON.

use std::io::Write;

use chrono::{DateTime, SecondsFormat, Utc};
use fleetbus_schemas::drift::{DriftEvent, DriftType};

/// Columns of `fleetbus drift ls`.
pub(crate) const LS_HEADER: [&str; 9] = [
    "CLUSTER",
    "RULE",
    "KIND",
    "NAMESPACE",
    "NAME",
    "PHASE",
    "ACTION",
    "CHANGED-BY",
    "AGE",
];

/// Writes rows under `header`, each column as wide as its widest cell (kubectl style).
pub(crate) fn table<const N: usize>(
    out: &mut impl Write,
    header: [&str; N],
    rows: &[[String; N]],
) -> std::io::Result<()> {
    let mut widths = header.map(str::len);
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut dyn Write, cells: &[&str]| -> std::io::Result<()> {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<w$}   "));
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(out, &header)?;
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(out, &cells)?;
    }
    Ok(())
}

/// One `ls` row for the current drift of an object.
pub(crate) fn ls_row(e: &DriftEvent, now: DateTime<Utc>) -> [String; 9] {
    [
        e.cluster.clone(),
        e.rule.clone(),
        e.object.kind.clone(),
        e.object.namespace.clone().unwrap_or_else(|| "-".to_owned()),
        e.object.name.clone(),
        e.phase.as_str().to_owned(),
        format!("{:?}", e.action),
        e.changed_by
            .as_ref()
            .map_or_else(|| "-".to_owned(), |c| c.manager.clone()),
        age(now.signed_duration_since(e.detected_at)),
    ]
}

/// One readable line per event: when it was published (or detected), where, what, who.
/// `2026-11-22T04:31:07.412Z west Detected Modified ConfigMap team-a/settings rule=team-config
/// action=Report by=kubectl-edit changes=/data/color`.
pub(crate) fn event_line(e: &DriftEvent, at: Option<DateTime<Utc>>) -> String {
    let at = at.unwrap_or(e.detected_at);
    let object = match &e.object.namespace {
        Some(ns) => format!("{ns}/{}", e.object.name),
        None => e.object.name.clone(),
    };
    let mut line = format!(
        "{} {} {} {} {} {} rule={} action={:?}",
        at.to_rfc3339_opts(SecondsFormat::Millis, true),
        e.cluster,
        e.phase.as_str(),
        match e.type_ {
            DriftType::Modified => "Modified",
            DriftType::Deleted => "Deleted",
        },
        e.object.kind,
        object,
        e.rule,
        e.action,
    );
    if let Some(by) = &e.changed_by {
        line.push_str(&format!(" by={}", by.manager));
    }
    if !e.changes.is_empty() {
        let paths: Vec<&str> = e.changes.iter().map(|c| c.path.as_str()).collect();
        line.push_str(&format!(" changes={}", paths.join(",")));
    }
    if let Some(err) = &e.error {
        line.push_str(&format!(" error={err:?}"));
    }
    // A coalesced event stands for several occurrences (PROTOCOL §6).
    if e.count > 1 {
        line.push_str(&format!(" count={}", e.count));
    }
    if let Some(at) = e.resume_at {
        line.push_str(&format!(
            " resumeAt={}",
            at.to_rfc3339_opts(SecondsFormat::Secs, true)
        ));
    }
    line
}

/// The event as the protocol's JSON value (schema member first).
pub(crate) fn event_json(e: &DriftEvent) -> serde_json::Value {
    e.encode()
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        // Events decoded from JSON always re-encode; the plain value is the fallback.
        .unwrap_or_else(|| serde_json::to_value(e).unwrap_or_default())
}

/// kubectl-style age: `45s`, `3m`, `5h`, `2d` (negative clock skew shows as `0s`).
pub(crate) fn age(d: chrono::TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=7199 => format!("{}m", s / 60),
        7200..=172_799 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_like_kubectl() {
        let s = chrono::TimeDelta::seconds;
        assert_eq!(age(s(-5)), "0s");
        assert_eq!(age(s(45)), "45s");
        assert_eq!(age(s(600)), "10m");
        assert_eq!(age(s(3 * 3600)), "3h");
        assert_eq!(age(s(3 * 86_400)), "3d");
    }

    #[test]
    fn a_fight_shows_its_phase_manager_count_and_resume_time() {
        use fleetbus_schemas::crd::DriftMode;
        use fleetbus_schemas::drift::{ChangedBy, DriftChange, DriftPhase};
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-22T04:31:07Z")
            .unwrap()
            .with_timezone(&Utc);
        let e = DriftEvent {
            id: "c2:u:7:Fight".into(),
            cluster: "c2".into(),
            rule: "cfg".into(),
            origin: "c1".into(),
            object: fleetbus_schemas::ObjectRef::new("v1", "ConfigMap", Some("a"), "x"),
            phase: DriftPhase::Fight,
            type_: DriftType::Modified,
            detected_at: at,
            changes: vec![DriftChange {
                path: "/data/v".into(),
                desired: "ours".into(),
                live: "theirs".into(),
            }],
            changed_by: Some(ChangedBy {
                manager: "hpa".into(),
                operation: "Update".into(),
                time: None,
            }),
            action: DriftMode::Report,
            error: None,
            count: 5,
            resume_at: Some(at + chrono::TimeDelta::minutes(1)),
        };
        assert_eq!(
            event_line(&e, None),
            "2026-11-22T04:31:07.000Z c2 Fight Modified ConfigMap a/x rule=cfg action=Report \
             by=hpa changes=/data/v count=5 resumeAt=2026-11-22T04:32:07Z"
        );
        let row = ls_row(&e, at);
        assert_eq!((row[5].as_str(), row[7].as_str()), ("Fight", "hpa"));
    }

    #[test]
    fn table_pads_columns_to_the_widest_cell() {
        let mut out = Vec::new();
        table(
            &mut out,
            ["A", "BB"],
            &[["long".to_owned(), "x".to_owned()]],
        )
        .unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "A      BB\nlong   x\n");
    }
}
