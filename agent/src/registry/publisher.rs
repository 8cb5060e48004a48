//! The heartbeat: a tiny beat every interval (the beats bucket, with a TTL),
//! this cluster's record at start-up and whenever it changes; a leave record
//! at shutdown if asked.
//!
//! While an agent of an older version (a record without `beats`) is in the
//! fleet, the record is also re-put every interval: that agent reads only
//! record puts as heartbeats (a fleet is upgraded one cluster at a time).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::HeaderMap;
use fleetbus_schemas::registry::{beat_interval, beat_ttl};
use tokio::time::{Instant, Interval, MissedTickBehavior};
use tokio_util::sync::CancellationToken;

use crate::bus::errors::is_stream_missing;

use super::error::RegistryError;
use super::record::{beat_key, cluster_key, BeatRecord, ClusterRecord, MemberSet, MemberState};
use super::shared::Registry;

/// Every how many (base) heartbeat intervals the whole bus layout is checked
/// and repaired: a stream or bucket deleted while the beats bucket lives
/// breaks no beat (7.5 s at the tests' 500 ms, 150 s at the default 10 s).
const LAYOUT_CHECK_BEATS: u32 = 15;

/// Version of this agent, published in the record.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Builds this cluster's record as of now.
pub fn build_record(reg: &Registry, state: MemberState) -> ClusterRecord {
    let info = reg.local_info();
    let mut record = ClusterRecord {
        fitness: true,
        unserved_kinds: info.unserved_kinds,
        name: reg.ctx.cfg.cluster_name.clone(),
        cluster_id: reg.ctx.cluster_id.clone(),
        state,
        labels: info.labels,
        kubernetes_api_endpoints: Vec::new(),
        metadata: info.metadata,
        features: info.features,
        agent_version: AGENT_VERSION.to_owned(),
        protocol: fleetbus_schemas::registry::PROTOCOL_VERSION,
        started_at: reg.ctx.started_at,
        heartbeat_at: chrono::Utc::now(),
        // Whole seconds on the wire; readers here use their own --peer-timeout.
        heartbeat_interval_seconds: u32::try_from(reg.ctx.cfg.heartbeat_interval.as_secs().max(1))
            .unwrap_or(u32::MAX),
        seq: reg.next_seq(),
        members: Vec::new(),
        members_digest: None,
        api: reg.api_health(),
        beats: true,
        certificate: reg
            .ctx
            .cfg
            .trust
            .as_ref()
            .map(|t| t.certificate_text().to_owned()),
    };
    // The digest always, the names in a small fleet (PROTOCOL §5.1): a join
    // makes every agent put its record, N records delivered to N agents.
    record.set_members(&MemberSet::new(reg.membership().members()));
    record
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
    // Secure mode: signed, so that no one else who may write the key (a
    // broker account) can put words in this cluster's mouth (PROTOCOL §5.1).
    let body = match &reg.ctx.cfg.trust {
        Some(id) => record.encode_signed(id.signing_key(), &id.key_id()),
        None => record.encode(),
    }
    .map_err(RegistryError::Encode)?;
    // Noted before the put: this agent's watch may deliver the put before the
    // put's answer arrives, and must know it for its own (an invalid record of
    // ours is not someone else's words to put ours back over, see the
    // watcher). Forgotten if the put fails, so that the next beat puts again.
    reg.note_published(&record);
    if let Err(source) = reg.kv.put(&key, body.into()).await {
        reg.forget_published();
        return Err(RegistryError::Put { key, source });
    }
    reg.note_heartbeat(record.heartbeat_at);
    reg.ctx.readiness.publishing.store(true, Ordering::Relaxed);
    tracing::trace!(
        ?state,
        members = record.member_count(),
        "published cluster record"
    );
    Ok(())
}

/// The beat interval for the fleet as this agent sees it now.
pub fn current_interval(reg: &Registry) -> Duration {
    beat_interval(
        reg.ctx.cfg.heartbeat_interval,
        reg.membership().fleet_size(),
    )
}

/// A ticker of `period` whose first tick is one period away.
fn ticker(period: Duration) -> Interval {
    let mut tick = tokio::time::interval_at(Instant::now() + period, period);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    tick
}

/// Puts this agent's beat: the next `seq`, the run, the interval, with a TTL
/// of the missed beats a reader waits for. A KV put with a `Nats-TTL` header
/// (the KV client puts no TTL but on create).
pub async fn put_beat(reg: &Registry, interval: Duration) -> Result<(), RegistryError> {
    let beat = BeatRecord {
        seq: reg.next_seq(),
        started_at: reg.ctx.started_at,
        interval_ms: u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
    };
    let key = beat_key(&reg.ctx.cfg.cluster_name, &reg.ctx.cluster_id);
    // Signed in the secure mode: a forged beat must not keep a dead or
    // departed cluster alive (PROTOCOL §5.4).
    let body = match reg.ctx.cfg.trust.as_deref() {
        Some(id) => beat.encode_signed(id.signing_key(), &id.key_id()),
        None => beat.encode(),
    }
    .map_err(RegistryError::Encode)?;
    let subject = format!(
        "{}{key}",
        reg.beats.put_prefix.as_deref().unwrap_or(&reg.beats.prefix)
    );
    let mut headers = HeaderMap::new();
    headers.insert(
        "Nats-TTL",
        beat_ttl(interval).as_secs().to_string().as_str(),
    );
    let put = async {
        reg.ctx
            .js
            .publish_with_headers(subject, headers, body.into())
            .await?
            .await
    };
    put.await
        .map_err(|source| RegistryError::Beat { key, source })?;
    reg.note_heartbeat(chrono::Utc::now());
    reg.ctx.readiness.publishing.store(true, Ordering::Relaxed);
    reg.ctx.metrics.heartbeats_published.inc();
    Ok(())
}

/// Beats until `cancel`, putting the record whenever it changed, then
/// publishes the leave record (with `--leave-on-shutdown`). A failed beat is
/// logged and the next tick tries again: peers tolerate missing a few (the
/// peer timeout spans several intervals).
#[tracing::instrument(name = "publisher", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    let mut interval = current_interval(&reg);
    let mut tick = ticker(interval);
    let mut layout_check = ticker(reg.ctx.cfg.heartbeat_interval * LAYOUT_CHECK_BEATS);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            _ = tick.tick() => {}
            _ = layout_check.tick() => {
                repair_layout(&reg).await;
                continue;
            }
            // Sync's object consumer or a publish failed: maybe a stream is gone.
            _ = reg.ctx.check_layout.notified() => {
                repair_layout(&reg).await;
                continue;
            }
            // Whatever changed goes out now, with a beat after it: the
            // newest stamp of a run is then always a beat's, so a reader
            // that replays both buckets sees the beat as news.
            _ = reg.publish_now.notified() => {}
        }
        // The fleet grew or shrank past a step of the interval: the beat
        // going out now announces the new one, before a reader's deadline
        // for the old one can pass.
        let next = current_interval(&reg);
        if next != interval {
            tracing::info!(from = ?interval, to = ?next, fleet = reg.membership().fleet_size(), "beat interval changed with the fleet's size");
            interval = next;
            tick = ticker(interval);
        }
        beat(&reg, interval).await;
    }
    if reg.ctx.cfg.leave_on_shutdown {
        leave(&reg).await
    } else {
        // A stop is a pause: peers see the beats stop (Disconnected) and
        // keep every copy; the next start is Active again.
        tracing::info!("stopping without leaving the fleet (--leave-on-shutdown not set)");
        Ok(())
    }
}

/// Puts the record if it changed (or every time, while an older agent in
/// the fleet needs record puts as heartbeats), then the beat.
async fn beat_once(reg: &Registry, interval: Duration) -> Result<(), RegistryError> {
    let record = build_record(reg, MemberState::Active);
    if reg.membership().has_peer_without_beats() || reg.differs_from_published(&record) {
        publish(reg, MemberState::Active).await?;
    }
    put_beat(reg, interval).await
}

/// One heartbeat. A failed put makes the agent not ready until a put
/// succeeds again; one that failed because a bucket's stream is gone
/// (deleted under us: `nats kv rm`) recreates the bus layout and puts again
/// at once.
async fn beat(reg: &Registry, interval: Duration) {
    let Err(error) = beat_once(reg, interval).await else {
        return;
    };
    reg.ctx.readiness.publishing.store(false, Ordering::Relaxed);
    let missing = match &error {
        RegistryError::Put { source, .. } => is_stream_missing(source),
        RegistryError::Beat { source, .. } => is_stream_missing(source),
        _ => false,
    };
    tracing::warn!(error = %crate::report(&error), stream_missing = missing, "heartbeat failed");
    if missing && repair_layout(reg).await {
        if let Err(e) = beat_once(reg, interval).await {
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
            if ensured.created_beats_bucket {
                reg.rewatch_beats.notify_one();
            }
            let recreated = reg.note_bucket_incarnation(&ensured.bucket_incarnation);
            if ensured.created_bucket || recreated {
                // Empty now: our record must go in again with the next beat.
                reg.forget_published();
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
