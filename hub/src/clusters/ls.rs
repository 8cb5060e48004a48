//! `fleetbus clusters ls`: every cluster in the registry bucket with its state and labels.

use std::io::Write;

use super::ClustersError;
use crate::cli::{ClustersLsArgs, OutputFormat};

/// Lists the clusters, sorted by name: name, state (the words of the Cluster
/// objects: Ready, ApiUnreachable, Disconnected, Left, Conflict), labels.
pub async fn ls(args: &ClustersLsArgs, out: &mut impl Write) -> Result<(), ClustersError> {
    let (_client, js) = crate::command::connect(&args.bus).await?;
    let views = crate::fleet::clusters(&js, &args.bus.subject_prefix, chrono::Utc::now()).await?;
    match args.out.output {
        OutputFormat::Json => {
            let all: Vec<_> = views
                .iter()
                .map(|v| {
                    let r = &v.record;
                    serde_json::json!({
                        "name": r.name, "clusterId": r.cluster_id, "state": v.state,
                        "labels": r.labels,
                    })
                })
                .collect();
            serde_json::to_writer_pretty(&mut *out, &all).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        OutputFormat::Table => {
            writeln!(out, "{:<24} {:<16} LABELS", "NAME", "STATE")?;
            for v in &views {
                let r = &v.record;
                let state = format!("{:?}", v.state);
                let labels: Vec<String> =
                    r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                writeln!(out, "{:<24} {:<16} {}", r.name, state, labels.join(","))?;
            }
        }
    }
    Ok(())
}
