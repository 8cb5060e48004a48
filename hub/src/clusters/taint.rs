//! `fleetbus clusters taint|cordon|uncordon`: the operator's taints on a
//! cluster, a `taints.<name>` record in the registry bucket (PROTOCOL
//! §6.10). Written with the admin's credentials and, when `--dir` holds the
//! fleet root key, signed by it (secure agents believe nothing else). The
//! tainted cluster's agent is not asked: a dead cluster can be tainted.

use std::io::Write;
use std::process::ExitCode;

use chrono::Utc;
use fleetbus_schemas::crd::{ClusterTaint, TaintEffect};
use fleetbus_schemas::registry::{
    registry_bucket, taints_key, TaintsRecord, TimedTaint, CORDONED_TAINT_KEY,
};

use super::ClustersError;
use crate::cli::BusArgs;

/// One change to a cluster's taints.
pub struct Change {
    taint: ClusterTaint,
    remove: bool,
}

impl Change {
    /// Put (or, with `remove`, take off) `taint`.
    pub fn of(taint: &ClusterTaint, remove: bool) -> Self {
        Change {
            taint: taint.clone(),
            remove,
        }
    }

    /// The cordon taint, put or taken off.
    pub fn cordon(on: bool) -> Self {
        Change {
            taint: ClusterTaint {
                key: CORDONED_TAINT_KEY.to_owned(),
                value: String::new(),
                effect: TaintEffect::NoSchedule,
            },
            remove: !on,
        }
    }
}

/// Applies `change` to `cluster`'s taints record. A cluster the registry
/// has no record of: exit 1 (a typo would taint nobody, silently).
pub async fn taint(
    bus: &BusArgs,
    cluster: &str,
    change: Change,
    out: &mut impl Write,
) -> Result<ExitCode, ClustersError> {
    let (_client, js) = crate::command::connect(bus).await?;
    let prefix = &bus.subject_prefix;
    let views = crate::fleet::clusters(&js, prefix, Utc::now()).await?;
    if !views.iter().any(|v| v.record.name == cluster) {
        eprintln!(
            "fleetbus: no cluster {cluster:?} in the registry (`fleetbus clusters ls` lists them)"
        );
        return Ok(ExitCode::FAILURE);
    }
    let bucket = registry_bucket(prefix);
    let kv = js
        .get_key_value(&bucket)
        .await
        .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?;
    let key = taints_key(cluster);
    let mut taints = match kv
        .get(&key)
        .await
        .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?
    {
        Some(bytes) => TaintsRecord::decode(&bytes)
            .map(|r| r.taints)
            .unwrap_or_default(),
        None => Vec::new(),
    };
    let same =
        |t: &TimedTaint| t.taint.key == change.taint.key && t.taint.effect == change.taint.effect;
    let had = taints.iter().any(same);
    taints.retain(|t| !same(t));
    if !change.remove {
        taints.push(TimedTaint {
            taint: change.taint.clone(),
            added_at: Utc::now(),
        });
    }
    let record = TaintsRecord {
        name: cluster.to_owned(),
        taints,
    };
    if record.validate().is_ok() && (change.remove && !had) {
        writeln!(out, "{cluster}: no such taint; taints: {}", shown(&record))?;
        return Ok(ExitCode::SUCCESS);
    }
    if let Err(e) = record.validate() {
        eprintln!("fleetbus: {e}");
        return Ok(ExitCode::FAILURE);
    }
    let bytes = match crate::command::root_signer() {
        Some(root) => record.encode_signed(root),
        None => record.encode(),
    }
    .map_err(ClustersError::Encode)?;
    kv.put(&key, bytes.into())
        .await
        .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?;
    writeln!(out, "{cluster}: taints: {}", shown(&record))?;
    Ok(ExitCode::SUCCESS)
}

fn shown(r: &TaintsRecord) -> String {
    if r.taints.is_empty() {
        return "none".to_owned();
    }
    r.taints
        .iter()
        .map(|t| {
            let t = &t.taint;
            match t.value.as_str() {
                "" => format!("{}:{}", t.key, t.effect.as_str()),
                v => format!("{}={v}:{}", t.key, t.effect.as_str()),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}
