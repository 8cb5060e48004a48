//! `fleetbus drift watch`: one line per drift event as it is stored; Ctrl-C ends it.

use std::io::Write;

use fleetbus_schemas::subject::{all_drift, drift_of_cluster};

use super::events::EventReader;
use super::render::{event_json, event_line};
use super::{connect, DriftError};
use crate::cli::{DriftWatchArgs, OutputFormat};

/// Follows the drift stream (new events, or every stored one first with `--all`) until
/// Ctrl-C (a normal end: `Ok`) or the connection ends for good.
pub async fn watch(args: &DriftWatchArgs, out: &mut impl Write) -> Result<(), DriftError> {
    let (_client, js) = connect(&args.bus).await?;
    let prefix = &args.bus.subject_prefix;
    let filter = match &args.cluster {
        Some(cluster) => drift_of_cluster(prefix, cluster),
        None => all_drift(prefix),
    };
    let mut reader = EventReader::open(&js, prefix, filter, args.all).await?;
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let read = tokio::select! {
            _ = &mut ctrl_c => return Ok(()),
            read = reader.next() => read?,
        };
        let Some(read) = read else {
            return Ok(());
        };
        let Some(event) = read.event else {
            continue;
        };
        match args.out.output {
            // One compact JSON object per line (NDJSON), or one YAML document each.
            format @ (OutputFormat::Json | OutputFormat::Yaml) => {
                crate::output::item(out, format, &event_json(&event))?
            }
            OutputFormat::Table => writeln!(out, "{}", event_line(&event, read.published))?,
        }
        // A pipe would otherwise buffer lines that a reader waits for.
        out.flush()?;
    }
}
