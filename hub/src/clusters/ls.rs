//! `fleetbus clusters ls`: every cluster in the registry bucket with its state and labels.

use std::io::Write;

use fleetbus_schemas::registry::{registry_bucket, ClusterRecord, MemberState, RegistryKey};

use super::ClustersError;
use crate::cli::{ClustersLsArgs, OutputFormat};

/// Lists the cluster records, sorted by name: name, state (`Left`, `Active` or
/// `Active (silent)` when heartbeats stopped), labels.
pub async fn ls(args: &ClustersLsArgs, out: &mut impl Write) -> Result<(), ClustersError> {
    let (_client, js) = crate::command::connect(&args.bus).await?;
    let records = records(&js, &args.bus.subject_prefix).await?;
    let now = chrono::Utc::now();
    match args.out.output {
        OutputFormat::Json => {
            let all: Vec<_> = records
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "name": r.name, "clusterId": r.cluster_id, "state": r.state,
                        "alive": r.is_alive(now), "labels": r.labels,
                    })
                })
                .collect();
            serde_json::to_writer_pretty(&mut *out, &all).map_err(std::io::Error::from)?;
            writeln!(out)?;
        }
        OutputFormat::Table => {
            writeln!(out, "{:<24} {:<16} LABELS", "NAME", "STATE")?;
            for r in &records {
                let mut state = format!("{:?}", r.state);
                if r.state == MemberState::Active && !r.is_alive(now) {
                    state.push_str(" (silent)");
                }
                let labels: Vec<String> =
                    r.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
                writeln!(out, "{:<24} {:<16} {}", r.name, state, labels.join(","))?;
            }
        }
    }
    Ok(())
}

/// Every cluster record of the registry bucket this fleetbus can read, sorted by name
/// (unreadable ones are skipped, as agents skip them).
pub(super) async fn records(
    js: &async_nats::jetstream::Context,
    prefix: &fleetbus_schemas::subject::Prefix,
) -> Result<Vec<ClusterRecord>, ClustersError> {
    let bucket = registry_bucket(prefix);
    let (kv, keys) = crate::kv::keys(js, prefix, &bucket).await?;
    let mut records = Vec::new();
    for key in keys {
        if !matches!(RegistryKey::parse(&key), Ok(RegistryKey::Cluster { .. })) {
            continue;
        }
        let Some(bytes) = kv
            .get(&key)
            .await
            .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?
        else {
            continue;
        };
        if let Ok(r) = ClusterRecord::decode(&bytes) {
            records.push(r);
        }
    }
    records.sort_by(|a, b| (&a.name, &a.cluster_id).cmp(&(&b.name, &b.cluster_id)));
    Ok(records)
}
