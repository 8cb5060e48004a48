//! The Placement section of `fleetbus rules describe` (PROTOCOL §6.10): per
//! source object (or placement group), the clusters chosen and why, those
//! passed over and why, failovers with their time, and what the fleet could
//! not satisfy.

use std::io::Write;

use fleetbus_schemas::placement::{PlacementKey, PlacementRecord, PlacementUnit};
use fleetbus_schemas::subject::Prefix;
use serde::Serialize;

/// One decision as `describe -o json` shows it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// The origin.
    pub origin: String,
    /// The object (`Kind namespace/name`) or `group NAME`.
    pub unit: String,
    /// The record.
    pub record: PlacementRecord,
}

/// Every placement record of `rule` (the rule that decided it), and how
/// many records could not be read.
pub async fn records(
    js: &async_nats::jetstream::Context,
    prefix: &Prefix,
    rule: &str,
) -> Result<(Vec<Decision>, usize), String> {
    let layout = fleetbus_schemas::jetstream::Layout::new(prefix.clone(), 1);
    let filter = fleetbus_schemas::placement::all_placements(prefix);
    let messages =
        super::rollout::last_per_subject(js, &layout.placements_stream().name, filter).await?;
    let (mut out, mut skipped) = (Vec::new(), 0);
    for (subject, payload) in messages {
        let decoded = PlacementKey::parse_subject(prefix, &subject)
            .ok()
            .and_then(|k| {
                let r = PlacementRecord::decode(&payload).ok()?;
                r.validate().ok().map(|()| (k, r))
            });
        match decoded {
            Some((k, r)) if r.rule == rule => out.push(Decision {
                origin: k.origin.clone(),
                unit: unit(&k.unit),
                record: r,
            }),
            Some(_) => {}
            None => skipped += 1,
        }
    }
    Ok((out, skipped))
}

fn unit(u: &PlacementUnit) -> String {
    match u {
        PlacementUnit::Object { object: o, .. } => match &o.namespace {
            Some(ns) => format!("{} {ns}/{}", o.kind, o.name),
            None => format!("{} {}", o.kind, o.name),
        },
        PlacementUnit::Group(g) => format!("group {g}"),
    }
}

/// Writes the section (nothing for a rule without placement records).
pub fn render(
    out: &mut impl Write,
    decisions: &[Decision],
    unreadable: usize,
) -> std::io::Result<()> {
    if decisions.is_empty() && unreadable == 0 {
        return Ok(());
    }
    writeln!(out, "\nPlacement:")?;
    for d in decisions {
        let r = &d.record;
        writeln!(
            out,
            "  {} (from {}, revision {}, decided {}):",
            d.unit,
            d.origin,
            r.revision,
            r.decided_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )?;
        for c in &r.chosen {
            let share = c
                .replicas
                .map(|n| format!(", {n} replicas"))
                .unwrap_or_default();
            writeln!(out, "    chosen   {}  {}{share}", c.cluster, c.reason)?;
        }
        for f in &r.failing {
            writeln!(
                out,
                "    failing  {}  {} since {}",
                f.cluster,
                f.reason,
                f.since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
            )?;
        }
        for (gone, by) in &r.replaced {
            writeln!(out, "    failover {gone} -> {by}")?;
        }
        for p in &r.passed {
            writeln!(out, "    passed   {}  {}", p.cluster, p.reason)?;
        }
        for d in &r.draining {
            writeln!(out, "    draining {}  {}", d.cluster, d.reason)?;
        }
        for k in &r.kept {
            writeln!(out, "    kept     {}  {}", k.cluster, k.reason)?;
        }
        if let Some(why) = &r.degraded {
            writeln!(out, "    PlacementDegraded: {why}")?;
        }
    }
    if unreadable > 0 {
        writeln!(
            out,
            "  ({unreadable} placement record(s) could not be read)"
        )?;
    }
    Ok(())
}
