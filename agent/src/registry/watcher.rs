//! Watches the registry bucket (last value per key, then live) into the membership.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{Entry, Operation};
use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::RegistryError;
use super::membership::{beat_owner, decode, decode_beat, Applied, Decoded};
use super::record::RegistryKey;
use super::shared::Registry;
use fleetbus_schemas::envelope::SignatureError;
use fleetbus_schemas::registry::{parse_forgotten_key, RevokedRecord, Skew, PROTOCOL_VERSION};

/// Which bucket a watch follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bucket {
    /// The registry bucket: records and kubeconfigs.
    Records,
    /// The beats bucket.
    Beats,
}

/// Runs the watch of the registry bucket until `cancel`, restarting it after
/// errors. A restarted watch replays the last value of every key; the
/// membership treats replayed heartbeats as old news, so nothing flaps.
#[tracing::instrument(name = "registry_watcher", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    watch_loop(&reg, &cancel, Bucket::Records).await
}

/// Runs the watch of the beats bucket until `cancel`, once the records watch
/// has caught up (a beat of a cluster whose record is not known is dropped).
#[tracing::instrument(name = "beats_watcher", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run_beats(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    if !reg.ctx.readiness.registry_synced.load(Ordering::Relaxed) {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = reg.records_caught_up.notified() => {}
        }
    }
    watch_loop(&reg, &cancel, Bucket::Beats).await
}

async fn watch_loop(
    reg: &Registry,
    cancel: &CancellationToken,
    bucket: Bucket,
) -> Result<(), RegistryError> {
    const FIRST_DELAY: Duration = Duration::from_millis(100);
    let rewatch = match bucket {
        Bucket::Records => &reg.rewatch,
        Bucket::Beats => &reg.rewatch_beats,
    };
    let mut delay = FIRST_DELAY;
    loop {
        let mut delivered = false;
        let result = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            // The bucket was recreated: the old watch's consumer is gone with it.
            _ = rewatch.notified() => {
                tracing::info!(?bucket, "bucket recreated; watching it again");
                continue;
            }
            r = watch_once(reg, bucket, &mut delivered) => r,
        };
        if delivered {
            delay = FIRST_DELAY;
        }
        if let Err(error) = result {
            tracing::warn!(error = %crate::report(&error), ?bucket, ?delay, "registry watch ended; restarting");
            // A deleted bucket ends its watch. Records are put only on change
            // now, so no failed put would tell the publisher: have it check the
            // layout at once (it recreates the bucket and puts our record).
            reg.ctx.check_layout.notify_one();
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = rewatch.notified() => {}
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

async fn watch_once(
    reg: &Registry,
    bucket: Bucket,
    delivered: &mut bool,
) -> Result<(), RegistryError> {
    let store = match bucket {
        Bucket::Records => &reg.kv,
        Bucket::Beats => &reg.beats,
    };
    // A pull watch (crate::bus::kv_watch says why not async-nats' push one).
    let watch = crate::bus::kv_watch::watch_all(store)
        .await
        .map_err(RegistryError::Watch)?;
    let mut watch = std::pin::pin!(watch);
    while let Some(entry) = watch.next().await {
        let entry = entry.map_err(RegistryError::Watch)?;
        *delivered = true;
        match bucket {
            Bucket::Records => handle(reg, &entry),
            Bucket::Beats => handle_beat(reg, &entry),
        }
    }
    Err(RegistryError::Watch("watch stream ended".into()))
}

/// Folds one beat (or its expiry) into the membership; wakes the reconciler
/// only when a peer's state changes (came alive, expired, new interval).
pub(crate) fn handle_beat(reg: &Registry, entry: &Entry) {
    let applied = if entry.operation == Operation::Put {
        match decode_beat(&entry.key, &entry.value) {
            Err(rejection) => {
                reg.ctx.metrics.rejected(rejection.reason());
                tracing::warn!(key = %entry.key, reason = rejection.reason(), revision = entry.revision, "skipped invalid beat");
                Applied::default()
            }
            Ok(beat) if reg.ctx.cfg.trust.is_some() && !beat_trusted(reg, &beat.name, entry) => {
                Applied::default()
            }
            Ok(beat) => {
                let applied =
                    reg.membership()
                        .apply_beat(&beat, Instant::now(), chrono::Utc::now());
                if applied.heartbeat {
                    reg.ctx.metrics.heartbeats_received.inc();
                }
                applied
            }
        }
    } else {
        // The server's delete marker of an expired beat (KV reads it as a
        // purge), or an operator's delete: either way the peer is silent.
        match beat_owner(&entry.key) {
            Some((name, id)) => {
                tracing::debug!(peer = %name, op = ?entry.operation, "beat expired");
                reg.membership().expire_beat(&name, &id, Instant::now())
            }
            None => Applied::default(),
        }
    };
    if applied.changed {
        reg.membership_changed.notify_one();
    }
    if entry.seen_current && !reg.beats_synced.swap(true, Ordering::Relaxed) {
        tracing::info!("beats caught up");
        reg.membership_changed.notify_one();
    }
}

/// Secure mode: a beat is believed only when signed by the certified key of
/// the cluster its key names (PROTOCOL §5.4); else it is dropped, counted
/// and raised like any rejected message.
fn beat_trusted(reg: &Registry, name: &str, entry: &Entry) -> bool {
    match reg
        .ctx
        .signers
        .check_json(name, &entry.value, chrono::Utc::now())
    {
        Ok(()) => true,
        Err(reason) => {
            reg.ctx.metrics.rejected("untrusted");
            reg.ctx.reject(name, reason, &entry.key);
            false
        }
    }
}

/// Says how a peer's protocol stands to ours (PROTOCOL §7.1), once per
/// peer run that announces it: N−1 and N+1 are kept in step with, nothing
/// changes for them; further apart, the operator is told to upgrade, and
/// the agent goes on as it can (what an unknown newer protocol expects is
/// unknown; refusing the peer would stop the fleet's sync mid-upgrade).
fn log_skew(peer: &str, theirs: u32) {
    let skew = Skew::of(PROTOCOL_VERSION, theirs);
    match skew {
        Skew::Same => {}
        Skew::Previous | Skew::Next => tracing::info!(
            peer,
            protocol = theirs,
            ours = PROTOCOL_VERSION,
            skew = skew.as_str(),
            "peer speaks another fleet protocol, within the supported skew"
        ),
        Skew::TooOld | Skew::TooNew => tracing::warn!(
            peer,
            protocol = theirs,
            ours = PROTOCOL_VERSION,
            skew = skew.as_str(),
            "peer speaks a fleet protocol outside the supported skew (one version apart): \
             upgrade the older agent"
        ),
    }
}

/// Folds one entry into the membership and wakes whoever must react.
pub(crate) fn handle(reg: &Registry, entry: &Entry) {
    if entry.operation == Operation::Put {
        match decode(&entry.key, &entry.value) {
            Err(rejection) => {
                reg.ctx.metrics.rejected(rejection.reason());
                tracing::warn!(key = %entry.key, reason = rejection.reason(), revision = entry.revision, "skipped invalid registry entry");
                put_back_if_own(reg, &entry.key);
            }
            Ok(decoded) => {
                if let Err(reason) = trusted(reg, &decoded, &entry.value) {
                    let name = match &decoded {
                        Decoded::Cluster(r) => r.name.as_str(),
                        Decoded::Kubeconfig(k) => k.name.as_str(),
                        Decoded::Forgotten(name) => name.as_str(),
                        Decoded::Revoked(r) => r.name.as_str(),
                        Decoded::Taints(t) => t.name.as_str(),
                    };
                    reg.ctx.metrics.rejected("untrusted");
                    reg.ctx.reject(name, reason, &entry.key);
                    put_back_if_own(reg, &entry.key);
                    return;
                }
                let live = reg.ctx.readiness.registry_synced.load(Ordering::Relaxed);
                // A record of an earlier run of ours put back as news (a
                // broker replaying it; readers that run refuse it as older,
                // one that starts would believe it). Our own puts carry this
                // run's start (to the millisecond, as `startedAt` is written),
                // and the watch's replay of the bucket is old news.
                if let Decoded::Cluster(r) = &decoded {
                    let ours = reg.ctx.started_at.timestamp_millis();
                    if live && r.started_at.timestamp_millis() < ours {
                        put_back_if_own(reg, &entry.key);
                    }
                }
                let peer = match &decoded {
                    Decoded::Cluster(r) => Some(r.name.clone()),
                    _ => None,
                };
                let applied = reg.membership().apply(decoded, Instant::now(), live);
                if let (Some(peer), Some(protocol)) = (peer, applied.protocol) {
                    log_skew(&peer, protocol);
                }
                if applied.heartbeat {
                    reg.ctx.metrics.heartbeats_received.inc();
                }
                if applied.changed {
                    reg.membership_changed.notify_one();
                }
                if applied.members_changed {
                    tracing::info!(members = ?reg.membership().members(), "fleet membership changed");
                    reg.publish_now.notify_one();
                }
            }
        }
    } else {
        // A delete or purge is an operator action on the bucket (a live agent
        // never deletes its key; silence is a missing heartbeat, not this).
        // The record leaves memory, so it no longer counts as a member or a
        // rival; its Cluster object stays and turns Disconnected ("no record
        // of this cluster in the registry"), to be deleted by the operator.
        tracing::info!(key = %entry.key, op = ?entry.operation, "registry entry removed");
        if let Some(Ok(name)) = parse_forgotten_key(&entry.key) {
            if reg.membership().unforget(&name).changed {
                reg.membership_changed.notify_one();
            }
        } else if let Some(Ok(name)) = fleetbus_schemas::registry::parse_taints_key(&entry.key) {
            if reg.membership().untaint(&name) {
                reg.membership_changed.notify_one();
            }
        } else if let Ok(key) = RegistryKey::parse(&entry.key) {
            let applied = reg.membership().remove(&key);
            if applied.changed {
                reg.membership_changed.notify_one();
            }
            if applied.members_changed {
                reg.publish_now.notify_one();
            }
        }
    }
    if entry.seen_current
        && !reg
            .ctx
            .readiness
            .registry_synced
            .swap(true, Ordering::Relaxed)
    {
        tracing::info!("registry caught up");
        reg.membership_changed.notify_one();
        reg.records_caught_up.notify_one();
    }
}

/// A refused put on this cluster's own record key, or one of an earlier run
/// put back, is someone else's words where every reader looks for ours: a
/// broker's write (a member's push consumer cannot deliver there: no client
/// subscribes to a key, SECURITY.md).
/// Running readers keep the record they hold, but one that starts reads only
/// the latest value of each key and would not know this cluster: the record
/// is put again with the next beat (`fleetbus_registry_foreign_puts_total`).
/// The next beat, not at once: should our own record be refused (a
/// certificate revoked under a running agent), that is one put per beat, as
/// with an older agent in the fleet, not a loop.
fn put_back_if_own(reg: &Registry, key: &str) {
    let own = RegistryKey::cluster(&reg.ctx.cfg.cluster_name, &reg.ctx.cluster_id).to_key();
    if key != own {
        return;
    }
    // Our own record refused (invalid: `own_record_invalid` says so) is not
    // someone else's, and putting it back would only be refused again.
    if reg.published_is_valid() {
        reg.ctx.metrics.registry_foreign_puts.inc();
        tracing::warn!(
            key,
            "a record this cluster did not put is under its key; putting its own back with the next beat"
        );
        reg.forget_published();
    }
}

/// In the secure mode, a cluster record is believed only with a certificate
/// that verifies against the fleet root, names the record's cluster and is
/// not revoked, a signature by the key it certifies over the record as
/// received (PROTOCOL §5.1), and when it is not older than the record held
/// for its key (freshness, §5.1 `seq`); that key then verifies the
/// cluster's messages. A revocation entry is believed only with the root's
/// own signature (§5.5). The error is the `fleetbus_rejected_messages_total`
/// reason.
fn trusted(reg: &Registry, decoded: &Decoded, raw: &[u8]) -> Result<(), &'static str> {
    let Some(identity) = &reg.ctx.cfg.trust else {
        return Ok(());
    };
    let now = chrono::Utc::now();
    match decoded {
        Decoded::Cluster(record) => {
            let signers = &reg.ctx.signers;
            let cert = record.certificate.as_deref();
            let signed = signers.verify_record(identity.root(), &record.name, cert, raw, now)?;
            if reg.membership().is_replay(record) {
                return Err(crate::trust::reason::REPLAY);
            }
            // Checked above: learnt without checking the certificate again.
            signers.learn_certified(&record.name, &signed)
        }
        Decoded::Revoked(r) => {
            RevokedRecord::verify(raw, identity.root()).map_err(|e| match e {
                SignatureError::Unsigned => crate::trust::reason::UNSIGNED,
                SignatureError::BadSignature => crate::trust::reason::BAD_SIGNATURE,
            })?;
            if reg.ctx.signers.revoke(r.serials.iter().map(String::as_str)) {
                tracing::warn!(cluster = %r.name, serials = ?r.serials, "the fleet root revoked certificates: messages signed with them are refused from now on");
            }
            Ok(())
        }
        // Signed by the cluster it names (PROTOCOL §5.2).
        Decoded::Kubeconfig(k) => reg.ctx.signers.check_json(&k.name, raw, now),
        Decoded::Forgotten(_) => Ok(()),
        // The fleet root's word, like a revocation: whoever may write the
        // bucket cannot taint a cluster (nor untaint it by a new value).
        Decoded::Taints(_) => {
            fleetbus_schemas::registry::TaintsRecord::verify(raw, identity.root()).map_err(|e| {
                match e {
                    SignatureError::Unsigned => crate::trust::reason::UNSIGNED,
                    SignatureError::BadSignature => crate::trust::reason::BAD_SIGNATURE,
                }
            })
        }
    }
}
