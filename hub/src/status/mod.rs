//! `fleetbus status`: the fleet on one screen, from the bus only: the registry
//! ([`crate::fleet`]), the rule status bucket ([`crate::rules`]), the drift bucket
//! and stream. `model` decides what needs attention (pure), `render` draws it (pure).

pub mod model;
pub mod render;

use std::io::Write;
use std::process::ExitCode;

use chrono::Utc;
use serde_json::json;

use crate::cli::{OutputFormat, StatusArgs};
use crate::drift::render::event_json;
use crate::rules::RulesError;

/// Exit code when something needs attention.
pub const NEEDS_ATTENTION: u8 = 1;
/// Exit code when the bus cannot be read.
pub const CANNOT_READ: u8 = 2;

/// Runs `status`: exit 0 all well, 1 something needs attention, 2 the bus cannot be read
/// (the error is printed to stderr).
pub async fn run(args: StatusArgs) -> ExitCode {
    let mut out = std::io::stdout().lock();
    match status(&args, &mut out).await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(NEEDS_ATTENTION),
        Err(e) => {
            eprintln!("fleetbus: error: {:#}", anyhow::Error::new(e));
            ExitCode::from(CANNOT_READ)
        }
    }
}

/// Writes the screen; `Ok(true)` when nothing needs attention.
pub async fn status(args: &StatusArgs, out: &mut impl Write) -> Result<bool, RulesError> {
    let (_client, js) = crate::command::connect(&args.bus).await?;
    let prefix = &args.bus.subject_prefix;
    let (clusters, rules, skipped) = crate::rules::gather(&js, prefix).await?;
    let drifted: Vec<_> = crate::drift::current(&js, prefix, None, None)
        .await?
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    let last = crate::drift::last_events(&js, prefix, args.events).await?;
    let now = Utc::now();
    let attention = model::attention(&clusters, &rules, &drifted, now);
    let by_state = model::clusters_by_state(&clusters);
    match args.out.output {
        OutputFormat::Table => render::summary(
            out,
            &render::Summary {
                attention: &attention,
                clusters: &by_state,
                rules: &rules,
                drifted: drifted.len(),
                last_events: &last,
                skipped,
            },
        )?,
        format => {
            let rules: Vec<_> = rules
                .iter()
                .map(|r| {
                    json!({
                        "name": r.name, "state": r.state, "sinksSelected": r.sinks_selected,
                        "sinksSynced": r.sinks_synced, "sinksWaiting": r.sinks_waiting,
                        "sinksError": r.sinks_error, "sinksConflict": r.sinks_conflict,
                    })
                })
                .collect();
            let value = json!({
                "ok": attention.is_empty(),
                "needsAttention": attention,
                "clusters": by_state,
                "rules": rules,
                "drifted": drifted.iter().map(event_json).collect::<Vec<_>>(),
                "lastDriftEvents": last.iter().map(|(e, _)| event_json(e)).collect::<Vec<_>>(),
                "unreadableRecords": skipped,
            });
            crate::output::data(out, format, &value)?;
        }
    }
    Ok(attention.is_empty())
}
