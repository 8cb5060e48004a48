//! `fleetbus drift ls`: the current drift of the fleet, one read of the drift KV bucket.

use std::io::Write;

use async_nats::jetstream;
use fleetbus_schemas::drift::DriftEvent;
use fleetbus_schemas::subject::DriftKey;

use super::render::{event_json, ls_row, table, LS_HEADER};
use super::{connect, DriftError};
use crate::cli::{DriftLsArgs, OutputFormat};

/// Lists the drifted objects (filtered by `--cluster` and `--rule`), sorted by cluster
/// and object. A fleet without drift prints the header only (`[]` in JSON); a prefix
/// without a drift bucket is an error.
pub async fn ls(args: &DriftLsArgs, out: &mut impl Write) -> Result<(), DriftError> {
    let (_client, js) = connect(&args.bus).await?;
    let layout = fleetbus_schemas::jetstream::Layout::new(args.bus.subject_prefix.clone(), 1);
    let events = read_current(
        &js,
        &args.bus.subject_prefix,
        &layout.drift_bucket().bucket,
        args.cluster.as_deref(),
        args.rule.as_deref(),
    )
    .await?;
    match args.out.output {
        format @ (OutputFormat::Json | OutputFormat::Yaml) => {
            let all: Vec<serde_json::Value> = events.iter().map(|(_, e)| event_json(e)).collect();
            crate::output::data(out, format, &all)?;
        }
        OutputFormat::Table => {
            let now = chrono::Utc::now();
            let rows: Vec<_> = events.iter().map(|(_, e)| ls_row(e, now)).collect();
            table(out, LS_HEADER, &rows)?;
        }
    }
    Ok(())
}

/// Every current drift event of `bucket` (only `cluster`'s, only `rule`'s when given),
/// sorted by key. A missing bucket is an error: agents create it at start, so without
/// it this is not the fleet asked for. Shared with the dashboard's `/api/drift`.
pub(crate) async fn read_current(
    js: &jetstream::Context,
    prefix: &fleetbus_schemas::subject::Prefix,
    bucket: &str,
    cluster: Option<&str>,
    rule: Option<&str>,
) -> Result<Vec<(DriftKey, DriftEvent)>, DriftError> {
    let (kv, keys) = crate::kv::keys(js, prefix, bucket).await?;
    let err = |e: async_nats::jetstream::kv::EntryError| crate::kv::unreadable_bucket(bucket, e);
    let mut found = Vec::new();
    for key in keys {
        let Ok(dk) = DriftKey::parse_kv_key(&key) else {
            tracing::warn!(key, "skipping a drift key that does not parse");
            continue;
        };
        if cluster.is_some_and(|c| c != dk.cluster) {
            continue;
        }
        // Deleted between the key listing and now: the drift just ended.
        let Some(bytes) = kv.get(&key).await.map_err(err)? else {
            continue;
        };
        let event = match DriftEvent::decode(&bytes) {
            Ok(event) => event,
            Err(error) => {
                tracing::warn!(key, error = %error, "skipping a drift value that does not decode");
                continue;
            }
        };
        if rule.is_some_and(|r| r != event.rule) {
            continue;
        }
        found.push((dk, event));
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(found)
}
