//! Watches the registry bucket (last value per key, then live) into the membership.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::kv::{Entry, Operation};
use futures::StreamExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::membership::decode;
use super::{Registry, RegistryError};

/// Runs the watch until `cancel`, restarting it after errors. A restarted
/// watch replays the last value of every key; the membership treats replayed
/// heartbeats as old news, so nothing flaps.
#[tracing::instrument(name = "registry_watcher", skip_all, fields(cluster = %reg.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    let mut delay = Duration::from_millis(100);
    loop {
        let result = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            r = watch_once(&reg) => r,
        };
        if let Err(error) = result {
            tracing::warn!(error = %crate::report(&error), ?delay, "registry watch ended; restarting");
        }
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tokio::time::sleep(delay) => {}
        }
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

async fn watch_once(reg: &Registry) -> Result<(), RegistryError> {
    let mut watch = reg
        .kv
        .watch_with_history(">")
        .await
        .map_err(|e| RegistryError::Watch(Box::new(e)))?;
    while let Some(entry) = watch.next().await {
        let entry = entry.map_err(|e| RegistryError::Watch(Box::new(e)))?;
        handle(reg, &entry);
    }
    Err(RegistryError::Watch("watch stream ended".into()))
}

/// Folds one entry into the membership and wakes whoever must react.
pub(crate) fn handle(reg: &Registry, entry: &Entry) {
    if entry.operation == Operation::Put {
        match decode(&entry.key, &entry.value) {
            Err(rejection) => {
                reg.metrics.rejected(rejection.reason());
                tracing::warn!(key = %entry.key, reason = rejection.reason(), revision = entry.revision, "skipped invalid registry entry");
            }
            Ok(decoded) => {
                let applied = reg.membership().apply(decoded, Instant::now());
                if applied.heartbeat {
                    reg.metrics.heartbeats_received.inc();
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
        // Deletes and purges are operator actions on the bucket; the Cluster
        // objects stay (nothing is deleted because a record went away).
        tracing::info!(key = %entry.key, op = ?entry.operation, "registry entry removed");
    }
    if entry.seen_current && !reg.readiness.registry_synced.swap(true, Ordering::Relaxed) {
        tracing::info!("registry caught up");
        reg.membership_changed.notify_one();
    }
}
