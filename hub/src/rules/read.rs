//! Reading the rule status bucket (PROTOCOL §5.3): every record every agent wrote,
//! with what cannot be shown skipped and counted, never fatal.

use async_nats::jetstream;
use fleetbus_schemas::rule_status::{rule_status_bucket, RuleStatusKey, RuleStatusRecord};
use fleetbus_schemas::subject::Prefix;

use super::RulesError;
use crate::kv::ReadError;

/// What the bucket holds, as far as it can be shown.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleStatuses {
    /// Records that decode and validate against their key, sorted by rule then cluster.
    pub records: Vec<RuleStatusRecord>,
    /// Keys whose value could not be shown, with why (wrong key, bad JSON, another
    /// schema, a record that fails validation or claims another key).
    pub skipped: Vec<(String, String)>,
}

/// The pure half of [`read`]: decodes and checks each `(key, value)`.
pub fn parse(entries: impl IntoIterator<Item = (String, Vec<u8>)>) -> RuleStatuses {
    parse_signed(entries, None)
}

/// [`parse`], each record first checked against its cluster's key when
/// `signers` (the fleet root is known): one its cluster did not sign is
/// skipped like an unreadable one.
pub fn parse_signed(
    entries: impl IntoIterator<Item = (String, Vec<u8>)>,
    signers: Option<&crate::signers::Signers>,
) -> RuleStatuses {
    collect(entries.into_iter().map(|(key, bytes)| {
        let checked = signed(&key, &bytes, signers)
            .inspect_err(|why| tracing::warn!(%key, %why, "skipping a rule status record"))
            .and_then(|()| check(&key, &bytes));
        (key, checked)
    }))
}

/// Whether the record `bytes` at `key` was signed by the cluster the key
/// names, when `signers`; why not otherwise (not logged: the dashboard asks
/// on every request). A forger with write access to the bucket cannot show
/// an operator a false rule status.
pub fn signed(
    key: &str,
    bytes: &[u8],
    signers: Option<&crate::signers::Signers>,
) -> Result<(), String> {
    let Some(signers) = signers else {
        return Ok(());
    };
    let cluster = RuleStatusKey::parse(key)
        .map_err(|e| e.to_string())?
        .cluster;
    signers
        .check(&cluster, bytes)
        .map_err(|why| format!("not signed by its cluster: {why}"))
}

/// One `(key, value)` of the bucket as a record that validates against its key, or
/// why it cannot be shown (logged).
pub fn check(key: &str, bytes: &[u8]) -> Result<RuleStatusRecord, String> {
    let checked = RuleStatusKey::parse(key)
        .map_err(|e| e.to_string())
        .and_then(|k| {
            let r = RuleStatusRecord::decode(bytes).map_err(|e| e.to_string())?;
            r.validate(&k).map_err(|e| e.to_string())?;
            Ok(r)
        });
    if let Err(why) = &checked {
        tracing::warn!(%key, %why, "skipping a rule status record");
    }
    checked
}

/// Checked entries (see [`check`]) as [`RuleStatuses`]: records sorted by rule, cluster
/// and cluster ID, the rest skipped.
pub fn collect(
    checked: impl IntoIterator<Item = (String, Result<RuleStatusRecord, String>)>,
) -> RuleStatuses {
    let mut out = RuleStatuses::default();
    for (key, checked) in checked {
        match checked {
            Ok(r) => out.records.push(r),
            Err(why) => out.skipped.push((key, why)),
        }
    }
    out.records.sort_by(|a, b| {
        (&a.rule, &a.cluster, &a.cluster_id).cmp(&(&b.rule, &b.cluster, &b.cluster_id))
    });
    out
}

/// Every record of the rule status bucket. No bucket means no agent of this
/// version has written there: [`RulesError::NoRuleStatus`].
pub async fn read(js: &jetstream::Context, prefix: &Prefix) -> Result<RuleStatuses, RulesError> {
    let bucket = rule_status_bucket(prefix);
    let (kv, keys) = match crate::kv::keys(js, prefix, &bucket).await {
        Ok(found) => found,
        Err(ReadError::Missing { .. }) => {
            return Err(RulesError::NoRuleStatus {
                bucket,
                prefix: prefix.to_string(),
            })
        }
        Err(e) => return Err(e.into()),
    };
    // With the fleet root known, only what each cluster signed is shown.
    let signers = crate::fleet::signers(js, prefix).await?;
    let mut entries = Vec::with_capacity(keys.len());
    for key in keys {
        // Deleted between the listing and now: the rule just went.
        if let Some(bytes) = kv
            .get(&key)
            .await
            .map_err(|e| crate::kv::unreadable_bucket(&bucket, e))?
        {
            entries.push((key, bytes.to_vec()));
        }
    }
    Ok(parse_signed(entries, signers.as_ref()))
}
