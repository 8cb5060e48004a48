//! `fleetbus clusters forget NAME`: remove a cluster that will never come
//! back from the bus (PROTOCOL §5.5), and the registry half of `fleetbus
//! leave` ([`mark_left`]). Both write with the admin's credentials what a
//! member may not: another cluster's keys.

use std::io::Write;
use std::process::ExitCode;

use chrono::Utc;
use fleetbus_schemas::crd::ClusterState;
use fleetbus_schemas::drift::drift_bucket;
use fleetbus_schemas::registry::{
    beats_bucket, forgotten_key, registry_bucket, revoked_key, ForgottenRecord, MemberState,
};
use fleetbus_schemas::rule_status::rule_status_bucket;
use fleetbus_schemas::subject::{encode_token, Prefix};

use super::ClustersError;
use crate::cli::{BusArgs, ClustersForgetArgs};
use crate::kv::ReadError;

/// Forgets `args.cluster`: puts `forgotten.<name>` (agents then delete their
/// Peer object of it), then purges its records, kubeconfigs, beats, rule
/// status and drift keys. Refuses a cluster that is alive (Ready,
/// ApiUnreachable, Conflict) unless `--force`: its agent would put its
/// record again. A name with neither a record nor a forgotten key: exit 1.
pub async fn forget(
    args: &ClustersForgetArgs,
    out: &mut impl Write,
) -> Result<ExitCode, ClustersError> {
    let (_client, js) = crate::command::connect(&args.bus).await?;
    let prefix = &args.bus.subject_prefix;
    let name = args.cluster.as_str();
    let views = crate::fleet::clusters(&js, prefix, Utc::now()).await?;
    let mine: Vec<_> = views.iter().filter(|v| v.record.name == name).collect();
    let registry = js
        .get_key_value(registry_bucket(prefix))
        .await
        .map_err(|e| crate::kv::unreadable_bucket(&registry_bucket(prefix), e))?;
    let marker = forgotten_key(name);
    let already = registry
        .get(&marker)
        .await
        .map_err(|e| crate::kv::unreadable_bucket(&registry_bucket(prefix), e))?
        .is_some();
    if mine.is_empty() && !already {
        eprintln!(
            "fleetbus: no cluster {name:?} in the registry (`fleetbus clusters ls` lists them)"
        );
        return Ok(ExitCode::FAILURE);
    }
    let alive: Vec<_> = mine
        .iter()
        .filter(|v| {
            matches!(
                v.state,
                ClusterState::Ready | ClusterState::ApiUnreachable | ClusterState::Conflict
            )
        })
        .collect();
    if let Some(v) = alive.first() {
        if !args.force {
            eprintln!(
                "fleetbus: cluster {name} is {:?}: its agent runs and would announce it again. \
                 Revoke it first (`fleetbus leave {name} --dir FLEET`), or pass --force",
                v.state
            );
            return Ok(ExitCode::FAILURE);
        }
    }
    // The marker first: when the records go, agents already know to delete
    // the Peer object rather than turn it Disconnected.
    let record = ForgottenRecord {
        name: name.to_owned(),
        forgotten_at: Utc::now(),
    };
    let bytes = record.encode().map_err(ClustersError::Encode)?;
    registry
        .put(&marker, bytes.into())
        .await
        .map_err(|e| crate::kv::unreadable_bucket(&registry_bucket(prefix), e))?;
    let token = encode_token(name);
    let mut purged = 0;
    for (bucket, key_prefixes) in [
        (
            registry_bucket(prefix),
            vec![format!("cluster.{token}."), format!("kubeconfig.{token}.")],
        ),
        (beats_bucket(prefix), vec![format!("beat.{token}.")]),
        (rule_status_bucket(prefix), vec![format!("status.{token}.")]),
        (drift_bucket(prefix), vec![format!("{token}.")]),
    ] {
        purged += purge(&js, prefix, &bucket, &key_prefixes).await?;
    }
    writeln!(
        out,
        "forgot {name}: {purged} key(s) purged; every agent deletes its Cluster object {name}"
    )?;
    Ok(ExitCode::SUCCESS)
}

/// Purges every key of `bucket` starting with one of `key_prefixes`; a
/// missing bucket holds none.
async fn purge(
    js: &async_nats::jetstream::Context,
    prefix: &Prefix,
    bucket: &str,
    key_prefixes: &[String],
) -> Result<usize, ClustersError> {
    let (kv, keys) = match crate::kv::keys(js, prefix, bucket).await {
        Ok(found) => found,
        Err(ReadError::Missing { .. }) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut n = 0;
    for key in keys
        .iter()
        .filter(|k| key_prefixes.iter().any(|p| k.starts_with(p.as_str())))
    {
        kv.purge(key)
            .await
            .map_err(|e| crate::kv::unreadable_bucket(bucket, e))?;
        n += 1;
    }
    Ok(n)
}

/// `leave`'s registry half: every Active record of `name` is put again as
/// `Left` (seq + 1), as its agent would on `--leave-on-shutdown`, so every
/// peer shows it Left and its copies follow their rules' `orphanPolicy`.
/// With the cluster's keys from the fleet dir (`signer`) the record is
/// signed in its name, as secure agents accept only signed records.
/// Returns how many records changed.
pub async fn mark_left(
    bus: &BusArgs,
    name: &str,
    signer: Option<&crate::trust::identity::RecordSigner>,
) -> Result<usize, ClustersError> {
    let (_client, js) = crate::command::connect(bus).await?;
    let prefix = &bus.subject_prefix;
    let records = match crate::fleet::cluster_records(&js, prefix).await {
        Ok(records) => records,
        // No registry yet: no agent ever ran, nothing to mark.
        Err(ReadError::Missing { .. }) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let bucket = registry_bucket(prefix);
    let kv = js
        .get_key_value(&bucket)
        .await
        .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?;
    let mut n = 0;
    for record in records {
        if record.name != name || record.state != MemberState::Active {
            continue;
        }
        let mut left = record.clone();
        left.state = MemberState::Left;
        left.seq = record.seq.saturating_add(1);
        left.heartbeat_at = Utc::now();
        let bytes = match signer {
            Some(s) => {
                left.certificate = Some(s.certificate.clone());
                left.encode_signed(&s.key, &s.key_id)
            }
            None => left.encode(),
        }
        .map_err(ClustersError::Encode)?;
        kv.put(left.key().to_key(), bytes.into())
            .await
            .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?;
        n += 1;
    }
    Ok(n)
}

/// `leave`'s last step: puts the fleet root's revocation entry `bytes`
/// (signed, [`crate::trust::identity::revocation`]) at `revoked.<name>`.
/// After the Left records: those are signed with the key being revoked, and
/// a reader that reads the entry first refuses them.
/// Returns false when there is no registry yet (no agent ever ran: nobody
/// to tell; `leave` again once agents run puts it).
pub async fn put_revoked(bus: &BusArgs, name: &str, bytes: Vec<u8>) -> Result<bool, ClustersError> {
    let (_client, js) = crate::command::connect(bus).await?;
    let bucket = registry_bucket(&bus.subject_prefix);
    let kv = match crate::kv::keys(&js, &bus.subject_prefix, &bucket).await {
        Ok((kv, _)) => kv,
        Err(ReadError::Missing { .. }) => return Ok(false),
        Err(e) => return Err(e.into()),
    };
    kv.put(revoked_key(name), bytes.into())
        .await
        .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?;
    Ok(true)
}
