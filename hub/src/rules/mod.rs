//! `fleetbus rules ls|describe`: every ResourceSyncRule as each cluster's agent
//! reports it in the rule status bucket (PROTOCOL §5.3), with the clusters' states
//! from [`crate::fleet`]. `read` reads the bucket, `model` (pure) folds the records
//! into one row per rule, `render` (pure) draws the tables.

mod error;
pub mod model;
pub mod placement;
pub mod preview;
mod preview_source;
pub mod read;
pub mod render;
pub mod rollout;

use std::io::Write;
use std::process::ExitCode;

use chrono::Utc;
use serde_json::json;

use crate::cli::{OutputFormat, RulesCommand, RulesDescribeArgs, RulesLsArgs};

pub use error::{PreviewError, RulesError};

/// Runs one rules command: exit 0, or 1 when `describe` finds no such rule.
pub async fn run(cmd: RulesCommand) -> Result<ExitCode, RulesError> {
    let mut out = std::io::stdout().lock();
    match cmd {
        RulesCommand::Ls(args) => ls(&args, &mut out).await.map(|()| ExitCode::SUCCESS),
        RulesCommand::Describe(args) => describe(&args, &mut out).await,
        // Its errors exit 2, not 1 (1 means "changes", as for `kubectl diff`).
        RulesCommand::Preview(args) => Ok(preview::run(&args, &mut out).await),
        RulesCommand::Rollout(args) => rollout::rollout(&args, &mut out).await,
    }
}

/// The rows of every rule, and how many records were skipped.
pub(crate) async fn gather(
    js: &async_nats::jetstream::Context,
    prefix: &fleetbus_schemas::subject::Prefix,
) -> Result<(Vec<crate::fleet::ClusterView>, Vec<model::RuleRow>, usize), RulesError> {
    let clusters = crate::fleet::clusters(js, prefix, Utc::now()).await?;
    let statuses = read::read(js, prefix).await?;
    let rows = model::rows(&statuses.records, &clusters);
    Ok((clusters, rows, statuses.skipped.len()))
}

/// `fleetbus rules ls`.
pub async fn ls(args: &RulesLsArgs, out: &mut impl Write) -> Result<(), RulesError> {
    let (_client, js) = crate::command::connect(&args.bus).await?;
    let (_, rows, skipped) = gather(&js, &args.bus.subject_prefix).await?;
    match args.out.output {
        OutputFormat::Table => render::ls(out, &rows, skipped)?,
        format => {
            let rules: Vec<_> = rows
                .iter()
                .map(|r| {
                    let mut v = serde_json::to_value(r).unwrap_or_default();
                    if let Some(m) = v.as_object_mut() {
                        m.remove("cells");
                        let cells: serde_json::Map<_, _> = r
                            .cells
                            .iter()
                            .map(|c| (c.record.cluster.clone(), json!(c.record.state)))
                            .collect();
                        m.insert("clusters".into(), cells.into());
                    }
                    v
                })
                .collect();
            let value = json!({"rules": rules, "unreadableRecords": skipped});
            crate::output::data(out, format, &value)?;
        }
    }
    Ok(())
}

/// `fleetbus rules describe NAME`: exit 1 when no cluster reports the rule.
pub async fn describe(
    args: &RulesDescribeArgs,
    out: &mut impl Write,
) -> Result<ExitCode, RulesError> {
    let (_client, js) = crate::command::connect(&args.bus).await?;
    let (_, rows, skipped) = gather(&js, &args.bus.subject_prefix).await?;
    let Some(row) = rows.iter().find(|r| r.name == args.rule) else {
        eprintln!(
            "fleetbus: no rule {:?} on the bus: no agent reports it (kubectl get resourcesyncrules lists the rules of one cluster; `fleetbus rules ls` those reported)",
            args.rule
        );
        return Ok(ExitCode::FAILURE);
    };
    // A fleet that predates rollouts has no stream: no section.
    let (rollouts, unreadable) = rollout::records(&js, &args.bus.subject_prefix, &args.rule)
        .await
        .unwrap_or_default();
    let (placements, bad_placements) =
        placement::records(&js, &args.bus.subject_prefix, &args.rule)
            .await
            .unwrap_or_default();
    match args.out.output {
        OutputFormat::Table => {
            render::describe(out, row, skipped, Utc::now())?;
            rollout::render(out, &rollouts, unreadable)?;
            placement::render(out, &placements, bad_placements)?;
        }
        format => {
            let mut v = serde_json::to_value(row).unwrap_or_default();
            if let Some(m) = v.as_object_mut() {
                m.insert("unreadableRecords".into(), json!(skipped));
                if !rollouts.is_empty() {
                    m.insert("rollouts".into(), json!(rollouts));
                }
                if !placements.is_empty() {
                    m.insert("placements".into(), json!(placements));
                }
            }
            crate::output::data(out, format, &v)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
