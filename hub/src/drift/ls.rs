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
/// it this is not the fleet asked for. Shared with the dashboard's `/api/drift`, which
/// keeps the bucket in memory with the same decoding ([`parse_key`], [`decode_value`])
/// and the same selection ([`select`]).
pub(crate) async fn read_current(
    js: &jetstream::Context,
    prefix: &fleetbus_schemas::subject::Prefix,
    bucket: &str,
    cluster: Option<&str>,
    rule: Option<&str>,
) -> Result<Vec<(DriftKey, DriftEvent)>, DriftError> {
    let (kv, keys) = crate::kv::keys(js, prefix, bucket).await?;
    let err = |e: async_nats::jetstream::kv::EntryError| crate::kv::unreadable_bucket(bucket, e);
    // With the fleet root known, only what each cluster signed is shown.
    let signers = crate::fleet::signers(js, prefix).await?;
    let mut found = Vec::new();
    for key in keys {
        let Some(dk) = parse_key(&key) else {
            continue;
        };
        // Filtered before the value is fetched: one get per shown copy only.
        if cluster.is_some_and(|c| c != dk.cluster) {
            continue;
        }
        // Deleted between the key listing and now: the drift just ended.
        let Some(bytes) = kv.get(&key).await.map_err(err)? else {
            continue;
        };
        if !signed_by_its_cluster(signers.as_ref(), &key, &dk, &bytes) {
            continue;
        }
        let Some(event) = decode_value(&key, &bytes) else {
            continue;
        };
        found.push((dk, event));
    }
    Ok(select(found.iter(), cluster, rule))
}

/// A drift bucket key as a [`DriftKey`]; `None` (logged) when it does not parse.
pub(crate) fn parse_key(key: &str) -> Option<DriftKey> {
    match DriftKey::parse_kv_key(key) {
        Ok(dk) => Some(dk),
        Err(_) => {
            tracing::warn!(key, "skipping a drift key that does not parse");
            None
        }
    }
}

/// Whether the drift event `bytes` stored under `key` (of cluster `dk`)
/// is that cluster's, signed, when `signers` (the fleet root is known);
/// what is not is left out, named on stderr (the table stays what scripts
/// parse): a forger with write access to the bucket cannot show an
/// operator false drift.
fn signed_by_its_cluster(
    signers: Option<&crate::signers::Signers>,
    key: &str,
    dk: &DriftKey,
    bytes: &[u8],
) -> bool {
    match signers.map(|s| s.check(&dk.cluster, bytes)) {
        None | Some(Ok(())) => true,
        Some(Err(why)) => {
            tracing::warn!("drift event {key} left out: {why}");
            false
        }
    }
}

/// The drift event stored under `key`; `None` (logged) when it does not decode.
pub(crate) fn decode_value(key: &str, bytes: &[u8]) -> Option<DriftEvent> {
    match DriftEvent::decode(bytes) {
        Ok(event) => Some(event),
        Err(error) => {
            tracing::warn!(key, error = %error, "skipping a drift value that does not decode");
            None
        }
    }
}

/// The events of `cluster` and `rule` (each when given) among `current`, sorted by key.
pub(crate) fn select<'a>(
    current: impl Iterator<Item = &'a (DriftKey, DriftEvent)>,
    cluster: Option<&str>,
    rule: Option<&str>,
) -> Vec<(DriftKey, DriftEvent)> {
    let mut found: Vec<(DriftKey, DriftEvent)> = current
        .filter(|(dk, e)| {
            cluster.is_none_or(|c| c == dk.cluster) && rule.is_none_or(|r| r == e.rule)
        })
        .cloned()
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    found
}
