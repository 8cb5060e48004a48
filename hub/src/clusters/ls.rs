//! `fleetbus clusters ls`: every cluster in the registry bucket, and `clusters
//! describe`: one cluster with its rules and drifted copies.

use std::io::Write;
use std::process::ExitCode;

use serde_json::json;

use super::render;
use super::ClustersError;
use crate::cli::{ClustersDescribeArgs, ClustersLsArgs, OutputFormat};

/// Lists the clusters, sorted by name: name, state (the words of the Cluster
/// objects: Ready, ApiUnreachable, Disconnected, Left, Conflict), heartbeat age,
/// Kubernetes version, distribution, region, labels, features.
pub async fn ls(args: &ClustersLsArgs, out: &mut impl Write) -> Result<(), ClustersError> {
    let (_client, js) = crate::command::connect(&args.bus).await?;
    let prefix = &args.bus.subject_prefix;
    let read = crate::fleet::read_records(&js, prefix, Some(&mut Default::default())).await?;
    let beats = crate::fleet::beating(&js, prefix).await?;
    // On stderr: the table stays what scripts parse.
    for u in &read.unverified {
        eprintln!(
            "fleetbus: warning: registry record {} left out: it does not verify against the \
             fleet root ({}); agents refuse it too",
            u.key, u.why
        );
    }
    let views = crate::fleet::views(read.records, &beats, chrono::Utc::now());
    match args.out.output {
        OutputFormat::Table => render::ls(out, &views)?,
        format => {
            let all: Vec<_> = views.iter().map(render::cluster_json).collect();
            crate::output::data(out, format, &all)?;
        }
    }
    Ok(())
}

/// One cluster (every record claiming the name): exit 1 if there is none.
pub async fn describe(
    args: &ClustersDescribeArgs,
    out: &mut impl Write,
) -> Result<ExitCode, ClustersError> {
    let (_client, js) = crate::command::connect(&args.bus).await?;
    let prefix = &args.bus.subject_prefix;
    let now = chrono::Utc::now();
    let (clusters, rows, skipped) = crate::rules::gather(&js, prefix).await?;
    let views: Vec<_> = clusters
        .iter()
        .filter(|v| v.record.name == args.cluster)
        .collect();
    if views.is_empty() {
        eprintln!(
            "fleetbus: no cluster {:?} in the registry (`fleetbus clusters ls` lists them)",
            args.cluster
        );
        return Ok(ExitCode::FAILURE);
    }
    let cells: Vec<_> = rows
        .iter()
        .flat_map(|r| r.cells.iter())
        .filter(|c| c.record.cluster == args.cluster)
        .collect();
    let drifted: Vec<_> = crate::drift::current(&js, prefix, Some(&args.cluster), None)
        .await?
        .into_iter()
        .map(|(_, e)| e)
        .collect();
    match args.out.output {
        OutputFormat::Table => {
            render::describe(out, &views, &cells, &drifted, now)?;
            crate::rules::render::skipped_line(out, skipped)?;
        }
        format => {
            let value = json!({
                "clusters": views.iter().map(|v| render::cluster_json(v)).collect::<Vec<_>>(),
                "rules": cells,
                "drifted": drifted.iter().map(crate::drift::render::event_json).collect::<Vec<_>>(),
                "unreadableRecords": skipped,
            });
            crate::output::data(out, format, &value)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
