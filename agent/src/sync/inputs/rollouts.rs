//! The rollout consumer (`<p>.rollout.>`, PROTOCOL §6.9) and the version
//! store's reads: what a sink needs to run the version a record gives it,
//! and what an origin reads back after a restart.

use std::sync::Arc;

use fleetbus_schemas::rollout::RolloutRecord;
use fleetbus_schemas::subject::{Prefix, RolloutKey, VersionKey};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::follow::Follow;
use super::watches::{decode, Opener};
use crate::context::Context;
use crate::sync::model::Input;

/// Reads `<p>.rollout.>` (last record per subject, then live ones) into
/// the engine until `cancel`.
pub async fn rollout_consumer(
    ctx: Arc<Context>,
    tx: mpsc::Sender<Input>,
    cancel: CancellationToken,
) {
    let f = Follow {
        stream: ctx.layout.rollouts_stream().name,
        filter: fleetbus_schemas::subject::all_rollouts(ctx.layout.prefix()),
        what: "rollouts",
        decode: {
            let ctx = ctx.clone();
            Box::new(move |prefix, subject, payload| {
                let (key, rec) = decode_record(prefix, subject, payload)?;
                super::follow::signed_by(&ctx, &key.origin, subject, payload)?;
                Ok((key, rec))
            })
        },
        key_of: |prefix, subject| RolloutKey::parse_subject(prefix, subject).ok(),
        input: Box::new(Input::Rollout),
    };
    super::follow::follow(ctx, f, tx, cancel).await;
}

/// Decodes one record; the reason is the metric label when it is skipped.
/// Only the origin may write its subtree (the server's permissions), and a
/// record must be about what its subject names: one that is not (written
/// with another's credentials, or malformed) is never acted on.
pub(in crate::sync) fn decode_record(
    prefix: &Prefix,
    subject: &str,
    payload: &[u8],
) -> Result<(RolloutKey, RolloutRecord), &'static str> {
    let key = RolloutKey::parse_subject(prefix, subject).map_err(|_| "rollout_bad_subject")?;
    let rec = RolloutRecord::decode(payload).map_err(|e| match e {
        fleetbus_schemas::DecodeError::UnsupportedVersion { .. } => "rollout_unsupported_version",
        _ => "rollout_malformed",
    })?;
    rec.validate(&key).map_err(|_| "rollout_malformed")?;
    Ok((key, rec))
}

/// Reads one version from the store and tells the engine: checked like
/// any envelope of its object (origin, key, content hash; signature in
/// secure mode; opened when sealed to us), and it must be the version asked.
pub async fn fetch_version(ctx: Arc<Context>, v: VersionKey, tx: mpsc::Sender<Input>) {
    let result = read_version(&ctx, &v).await;
    if let Err(e) = &result {
        tracing::warn!(version = %v.to_subject(ctx.layout.prefix()), error = %e, "could not read a stored version; retrying");
    }
    let _ = tx.send(Input::Version(v, result.map(Box::new))).await;
}

async fn read_version(
    ctx: &Arc<Context>,
    v: &VersionKey,
) -> Result<fleetbus_schemas::envelope::Envelope, String> {
    let prefix = ctx.layout.prefix();
    let stream = ctx
        .js
        .get_stream(ctx.layout.versions_stream().name)
        .await
        .map_err(|e| format!("versions stream: {e}"))?;
    let msg = stream
        .direct_get_last_for_subject(v.to_subject(prefix))
        .await
        .map_err(|e| format!("version {}: {e}", short(&v.hash)))?;
    let opener = Opener {
        me: ctx.cfg.cluster_name.clone(),
        key: ctx.sealing.as_ref().map(|k| k.secret.clone()),
    };
    let (_, env) = decode(
        &opener,
        Some(ctx),
        prefix,
        &v.object.to_subject(prefix),
        &msg.payload,
    )
    .map_err(|reason| {
        ctx.metrics.sync_rejected(reason);
        format!("version {} refused: {reason}", short(&v.hash))
    })?;
    if env.tombstone || env.content_hash != v.hash {
        ctx.metrics.sync_rejected("version_mismatch");
        return Err(format!(
            "the store holds another version than {} under its subject",
            short(&v.hash)
        ));
    }
    Ok(env)
}

fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(origin: &str) -> RolloutRecord {
        RolloutRecord {
            origin: origin.into(),
            ..crate::sync::rollout::sink::tests::rec()
        }
    }

    #[test]
    fn records_that_are_not_what_their_subject_says_are_refused() {
        let p = Prefix::default();
        let good = record("hub");
        let subject = good.subject_key().to_subject(&p);
        let bytes = good.encode().unwrap();
        assert_eq!(decode_record(&p, &subject, &bytes).unwrap().1, good);
        // Written under hub's subject, claiming to be another origin's.
        let forged = record("evil").encode().unwrap();
        assert_eq!(
            decode_record(&p, &subject, &forged),
            Err("rollout_malformed")
        );
        // A version that is no hash, garbage, another schema, a bad subject.
        let mut bad = good.clone();
        bad.target = Some("../../etc".into());
        assert_eq!(
            decode_record(&p, &subject, &bad.encode().unwrap()),
            Err("rollout_malformed")
        );
        assert_eq!(
            decode_record(&p, &subject, b"\xff{"),
            Err("rollout_malformed")
        );
        assert_eq!(
            decode_record(&p, &subject, br#"{"schema":"fleetbus.io/rollout/v9"}"#),
            Err("rollout_unsupported_version")
        );
        assert_eq!(
            decode_record(&p, "fleetbus.rollout.hub", &bytes),
            Err("rollout_bad_subject")
        );
    }
}
