//! The heartbeat: this cluster's record, re-put every interval and on change; a leave record at shutdown if asked.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::bus::errors::is_stream_missing;

use super::error::RegistryError;
use super::record::{cluster_key, ClusterRecord, MemberState};
use super::shared::Registry;

/// Every this many heartbeat intervals the whole bus layout is checked (and
/// repaired): 30 s at the default 2 s interval.
const LAYOUT_CHECK_BEATS: u32 = 15;

/// Version of this agent, published in the record.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Builds this cluster's record as of now.
pub fn build_record(reg: &Registry, state: MemberState) -> ClusterRecord {
    let info = reg.local_info();
    ClusterRecord {
        name: reg.ctx.cfg.cluster_name.clone(),
        cluster_id: reg.ctx.cluster_id.clone(),
        state,
        labels: info.labels,
        kubernetes_api_endpoints: Vec::new(),
        metadata: info.metadata,
        features: info.features,
        agent_version: AGENT_VERSION.to_owned(),
        started_at: reg.ctx.started_at,
        heartbeat_at: chrono::Utc::now(),
        // Whole seconds on the wire; readers here use their own --peer-timeout.
        heartbeat_interval_seconds: u32::try_from(reg.ctx.cfg.heartbeat_interval.as_secs().max(1))
            .unwrap_or(u32::MAX),
        seq: reg.next_seq(),
        members: reg.membership().members(),
        api: reg.api_health(),
    }
}

/// Puts this cluster's record once.
pub async fn publish(reg: &Registry, state: MemberState) -> Result<(), RegistryError> {
    let record = build_record(reg, state);
    // Peers apply this validation and skip a record that fails it; say so
    // here, where it can be fixed (e.g. too many labels on the Local object).
    match record.validate() {
        Ok(()) => {
            reg.ctx.metrics.own_record_invalid.set(0);
        }
        Err(e) => {
            if reg.ctx.metrics.own_record_invalid.set(1) == 0 {
                tracing::error!(error = %e, "this cluster's record is invalid: peers will skip it");
            }
        }
    }
    let key = cluster_key(&record.name, &record.cluster_id);
    let body = record.encode().map_err(RegistryError::Encode)?;
    reg.kv
        .put(&key, body.into())
        .await
        .map_err(|source| RegistryError::Put { key, source })?;
    reg.note_heartbeat(record.heartbeat_at);
    reg.ctx.readiness.publishing.store(true, Ordering::Relaxed);
    reg.ctx.metrics.heartbeats_published.inc();
    tracing::trace!(
        ?state,
        members = record.members.len(),
        "published cluster record"
    );
    Ok(())
}

/// Heartbeats until `cancel`, then publishes the leave record (with
/// `--leave-on-shutdown`). A failed
/// heartbeat is logged and the next tick tries again: peers tolerate missing
/// a few (the peer timeout spans several intervals).
#[tracing::instrument(name = "publisher", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    let mut tick = tokio::time::interval(reg.ctx.cfg.heartbeat_interval);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let every = reg.ctx.cfg.heartbeat_interval * LAYOUT_CHECK_BEATS;
    let mut layout_check = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    layout_check.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tick.tick() => {}
            // A stream deleted while the bucket lives breaks no heartbeat;
            // look for it now and then (a few stream-info requests).
            _ = layout_check.tick() => {
                repair_layout(&reg).await;
                continue;
            }
            // Sync's object consumer or a publish failed: maybe a stream is gone.
            _ = reg.ctx.check_layout.notified() => {
                repair_layout(&reg).await;
                continue;
            }
            _ = reg.publish_now.notified() => {
                // Whatever changed goes out now; the next regular beat is a full interval away.
                tick.reset();
            }
        }
        beat(&reg).await;
    }
    if reg.ctx.cfg.leave_on_shutdown {
        leave(&reg).await
    } else {
        // A stop is a pause: peers see the heartbeat stop (Disconnected) and
        // keep every copy; the next start is Active again.
        tracing::info!("stopping without leaving the fleet (--leave-on-shutdown not set)");
        Ok(())
    }
}

/// One heartbeat. A failed put makes the agent not ready until a put
/// succeeds again; one that failed because the bucket's stream is gone
/// (deleted under us: `nats kv rm`) recreates the bus layout and puts again
/// at once.
async fn beat(reg: &Registry) {
    let Err(error) = publish(reg, MemberState::Active).await else {
        return;
    };
    reg.ctx.readiness.publishing.store(false, Ordering::Relaxed);
    let missing = matches!(&error, RegistryError::Put { source, .. } if is_stream_missing(source));
    tracing::warn!(error = %crate::report(&error), stream_missing = missing, "heartbeat failed");
    if missing && repair_layout(reg).await {
        if let Err(e) = publish(reg, MemberState::Active).await {
            tracing::warn!(error = %crate::report(&e), "heartbeat after recreating the bus layout failed");
        }
    }
}

/// Recreates whatever of the bus layout is missing, with the start-up
/// configuration (idempotent: several agents may do it at once), and makes
/// the watcher watch a recreated bucket. Returns whether the layout is
/// complete now.
pub(crate) async fn repair_layout(reg: &Registry) -> bool {
    match crate::bus::layout::ensure(&reg.ctx.js, &reg.ctx.layout).await {
        Ok(ensured) => {
            if ensured.created_any() {
                tracing::warn!(
                    bucket = ensured.created_bucket,
                    streams = ensured.created_streams,
                    "parts of the bus layout were deleted; recreated them"
                );
                reg.ctx.metrics.bus_layout_recreated.inc();
            }
            // A bucket recreated here or elsewhere (by another agent, whose
            // put failed first, or an operator) is a new stream: the old
            // watch's consumer went with the old one, and its sequence
            // numbers start again, so watch it anew.
            let recreated = reg.note_bucket_incarnation(&ensured.bucket_incarnation);
            if ensured.created_bucket || recreated {
                if !ensured.created_bucket {
                    tracing::info!(
                        "the registry bucket was recreated elsewhere; watching it again"
                    );
                }
                reg.rewatch.notify_one();
                // Heartbeats refill the bucket with our record; the kubeconfig
                // record is put only when minted, so mint it again now.
                reg.republish_kubeconfig.notify_one();
            }
            true
        }
        Err(e) => {
            tracing::warn!(
                error = %crate::report(&e),
                transient = e.is_transient(),
                "could not ensure the bus layout; trying again later"
            );
            false
        }
    }
}

/// Publishes the leave record, trying for a few seconds (shutdown must not hang).
async fn leave(reg: &Registry) -> Result<(), RegistryError> {
    let mut last = None;
    for _ in 0..3 {
        match tokio::time::timeout(Duration::from_secs(2), publish(reg, MemberState::Left)).await {
            Ok(Ok(())) => {
                tracing::info!("published leave record");
                return Ok(());
            }
            Ok(Err(e)) => last = Some(e),
            Err(_) => tracing::warn!("leave record timed out"),
        }
    }
    match last {
        Some(e) => Err(e),
        None => Ok(()),
    }
}
