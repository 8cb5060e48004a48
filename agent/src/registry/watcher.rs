//! Watches the registry bucket (last value per key, then live) into the membership.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{Entry, Operation};
use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::RegistryError;
use super::membership::decode;
use super::record::RegistryKey;
use super::shared::Registry;

/// Runs the watch until `cancel`, restarting it after errors. A restarted
/// watch replays the last value of every key; the membership treats replayed
/// heartbeats as old news, so nothing flaps.
#[tracing::instrument(name = "registry_watcher", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    const FIRST_DELAY: Duration = Duration::from_millis(100);
    let mut delay = FIRST_DELAY;
    loop {
        let mut delivered = false;
        let result = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            // The bucket was recreated: the old watch's consumer is gone with it.
            _ = reg.rewatch.notified() => {
                tracing::info!("registry bucket recreated; watching it again");
                continue;
            }
            r = watch_once(&reg, &mut delivered) => r,
        };
        if delivered {
            delay = FIRST_DELAY;
        }
        if let Err(error) = result {
            tracing::warn!(error = %crate::report(&error), ?delay, "registry watch ended; restarting");
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = reg.rewatch.notified() => {}
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

async fn watch_once(reg: &Registry, delivered: &mut bool) -> Result<(), RegistryError> {
    let mut watch = reg
        .kv
        .watch_with_history(">")
        .await
        .map_err(|e| RegistryError::Watch(Box::new(e)))?;
    while let Some(entry) = watch.next().await {
        let entry = entry.map_err(|e| RegistryError::Watch(Box::new(e)))?;
        *delivered = true;
        handle(reg, &entry);
    }
    Err(RegistryError::Watch("watch stream ended".into()))
}

/// Folds one entry into the membership and wakes whoever must react.
pub(crate) fn handle(reg: &Registry, entry: &Entry) {
    if entry.operation == Operation::Put {
        match decode(&entry.key, &entry.value) {
            Err(rejection) => {
                reg.ctx.metrics.rejected(rejection.reason());
                tracing::warn!(key = %entry.key, reason = rejection.reason(), revision = entry.revision, "skipped invalid registry entry");
            }
            Ok(decoded) => {
                let applied = reg.membership().apply(decoded, Instant::now());
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
        if let Ok(key) = RegistryKey::parse(&entry.key) {
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
    }
}
