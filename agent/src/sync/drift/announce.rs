//! Announcing drift: one JSON event per phase on
//! `<p>.drift.<self>.<group>.<kind>.<namespace>.<name>` (stream
//! `FLEETBUS_DRIFT`), the current state in the drift KV bucket (key deleted
//! when the drift ends), a Kubernetes Event on the copy, and metrics.

use std::time::Duration;

use async_nats::jetstream::kv;
use async_nats::HeaderMap;
use fleetbus_schemas::crd::DriftMode;
use fleetbus_schemas::drift::{drift_event_id, DriftChange, DriftEvent, DriftPhase, DriftType};
use fleetbus_schemas::ObjectRef;
use serde_json::Value;
use tokio::time::Instant;

use std::hash::{Hash, Hasher};

use super::coalesce::Gate;

/// Room left in a message for the signature member (secure mode) and the
/// headers (`Nats-Msg-Id`, and the KV's own), which count against the
/// server's `max_payload` too.
const WIRE_MARGIN: usize = 4096;
use super::fight::{Change, Verdict};
use super::policy;
use super::state::{DriftState, OpenDrift};
use crate::context::Context;
use crate::kube::events::EventType;
use crate::sync::model::{Candidate, Outcome, Target};
use crate::sync::model::{CopyError, FailureKind};
use crate::sync::world::World;

/// What was found, for [`drift_detected`].
pub struct Found<'a> {
    /// The copy as it is (for a deletion: as it was last known).
    pub live: &'a Value,
    /// What it should be (the baseline).
    pub baseline: &'a Value,
    /// Modified or Deleted.
    pub type_: DriftType,
    /// What the agent will do.
    pub action: DriftMode,
    /// Paths that may differ.
    pub exclude: &'a [String],
    /// Whether status is part of the copy.
    pub with_status: bool,
}

/// The changed paths of a drift event, comma separated.
fn paths(event: Option<&DriftEvent>) -> String {
    event
        .map(|e| {
            e.changes
                .iter()
                .map(|c| c.path.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

fn object_ref(target: &Target, obj: &Value) -> ObjectRef {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let mut r = ObjectRef::new(
        &target.api_version,
        &target.kind,
        target.namespace.as_deref(),
        &target.name,
    );
    r.uid = s("/metadata/uid");
    r.resource_version = s("/metadata/resourceVersion");
    r
}

/// Reports a drift (once per drifted version of the copy). `world` says
/// who this cluster is and whether the copy's rule seals its values.
pub(in crate::sync) async fn drift_detected(
    drift: &mut DriftState,
    ctx: &Context,
    world: &World,
    target: &Target,
    c: &Candidate,
    f: Found<'_>,
) {
    let object = object_ref(target, f.live);
    if let Some(open) = drift.open.get(target) {
        if open.event.object.resource_version == object.resource_version
            && open.event.type_ == f.type_
        {
            return;
        }
    }
    let mut changes: Vec<DriftChange> = match f.type_ {
        DriftType::Modified => policy::changes(f.baseline, f.live, f.with_status, f.exclude),
        DriftType::Deleted => Vec::new(),
    };
    if target.api_version == "v1" && target.kind == "Secret" {
        policy::redact_secret_values(&mut changes);
    }
    if world.rules.get(&c.rule).is_some_and(|r| r.spec.seal) {
        policy::redact_sealed_values(&mut changes);
    }
    let event = DriftEvent {
        id: drift_event_id(
            &world.fleet.local.name,
            object.uid.as_deref().unwrap_or_default(),
            object.resource_version.as_deref().unwrap_or_default(),
            DriftPhase::Detected,
        ),
        cluster: world.fleet.local.name.clone(),
        rule: c.rule.clone(),
        origin: c.key.origin.clone(),
        object,
        phase: DriftPhase::Detected,
        type_: f.type_,
        detected_at: chrono::Utc::now(),
        changes,
        changed_by: match f.type_ {
            DriftType::Modified => policy::changed_by(f.live),
            DriftType::Deleted => None,
        },
        action: f.action,
        error: None,
        count: 1,
        resume_at: None,
    };
    let seen = drift.seen.get(target).copied().unwrap_or_else(Instant::now);
    tracing::warn!(copy = %target, rule = %c.rule, action = ?f.action, by = ?event.changed_by.as_ref().map(|b| &b.manager), "drift detected");
    if !report(drift, ctx, target, &event).await {
        // Not on the bus: not recorded either, so the next pass (soon)
        // detects and announces it again.
        drift.announce_failed(Instant::now());
        return;
    }
    ctx.metrics
        .drift_detection_seconds
        .observe(seen.elapsed().as_secs_f64());
    drift.open.insert(target.clone(), OpenDrift { event, seen });
    ctx.metrics.drifted.set(drift.open.len() as i64);
}

/// The correction was written: the drift ends.
pub(in crate::sync) async fn drift_corrected(
    drift: &mut DriftState,
    ctx: &Context,
    target: &Target,
) {
    let Some(open) = drift.open.remove(target) else {
        return;
    };
    ctx.metrics.drifted.set(drift.open.len() as i64);
    ctx.metrics
        .drift_correction_seconds
        .observe(open.seen.elapsed().as_secs_f64());
    let event = next_phase(&open.event, DriftPhase::Corrected, DriftMode::Correct, None);
    report(drift, ctx, target, &event).await;
}

/// The correction failed: the drift stays, with the error.
pub(in crate::sync) async fn drift_failed(
    drift: &mut DriftState,
    ctx: &Context,
    target: &Target,
    error: &str,
) {
    let Some(open) = drift.open.get(target).cloned() else {
        return;
    };
    let event = next_phase(
        &open.event,
        DriftPhase::CorrectionFailed,
        DriftMode::Correct,
        Some(error.to_owned()),
    );
    report(drift, ctx, target, &event).await;
    drift.open.insert(
        target.clone(),
        OpenDrift {
            event,
            seen: open.seen,
        },
    );
}

/// The copy is equal again without our correction (someone put it back,
/// or the desired state moved to it): the drift ends, and a fight over
/// it with it.
pub(in crate::sync) async fn drift_resolved(
    drift: &mut DriftState,
    ctx: &Context,
    target: &Target,
) {
    let Some(open) = drift.open.remove(target) else {
        return;
    };
    drift.fights.forget(target);
    ctx.metrics.drifted.set(drift.open.len() as i64);
    let event = next_phase(&open.event, DriftPhase::Resolved, open.event.action, None);
    report(drift, ctx, target, &event).await;
}

/// Forgets drifts of copies nothing wants any more (collected or gone).
pub(in crate::sync) async fn drift_forget_except(
    drift: &mut DriftState,
    ctx: &Context,
    wanted: &(dyn Fn(&Target) -> bool + Sync),
) {
    drift.fights.retain(Instant::now(), wanted);
    let gone: Vec<Target> = drift.open.keys().filter(|t| !wanted(t)).cloned().collect();
    for t in gone {
        if let Some(open) = drift.open.remove(&t) {
            kv_delete(drift, ctx, &open.event).await;
        }
    }
    ctx.metrics.drifted.set(drift.open.len() as i64);
}

/// Whether to correct a drift of `target` by `live`'s newest foreign
/// field manager, or whether that manager is fighting the agent over it.
pub(in crate::sync) fn fight_verdict(
    drift: &mut DriftState,
    target: &Target,
    f: &Found<'_>,
) -> Verdict {
    let Some(by) = policy::changed_by(f.live) else {
        return Verdict::Correct;
    };
    let changes = policy::changes(f.baseline, f.live, f.with_status, f.exclude);
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for c in &changes {
        c.path.hash(&mut h);
        c.live.to_string().hash(&mut h);
    }
    let change = Change {
        manager: by.manager,
        values: h.finish(),
    };
    drift.fights.on_drift(target, &change, Instant::now())
}

/// A fight starts: what was held for the copy is announced first (the
/// drifts that led to it), then the open drift becomes a `Fight`, the
/// copy is left alone, and the rule reports it as an error.
pub(in crate::sync) async fn drift_fight(
    drift: &mut DriftState,
    ctx: &Context,
    target: &Target,
    verdict: Verdict,
    rv: Option<&str>,
) -> Outcome {
    let Verdict::Fight {
        manager,
        changes,
        resume_at,
    } = verdict
    else {
        return Outcome::InSync;
    };
    drift.fights.seen_at(target, rv);
    let held = drift.coalesce.take(target);
    flush_held(drift, ctx, target, held).await;
    if let Some(open) = drift.open.get(target).cloned() {
        let wait = resume_at.saturating_duration_since(Instant::now());
        let mut event = next_phase(&open.event, DriftPhase::Fight, DriftMode::Report, None);
        event.count = changes;
        event.resume_at = chrono::TimeDelta::from_std(wait)
            .ok()
            .map(|d| chrono::Utc::now() + d);
        tracing::warn!(copy = %target, %manager, changes, wait = ?wait, "drift fight: not correcting this copy for now");
        emit(drift, ctx, target, &event).await;
        drift.open.insert(
            target.clone(),
            OpenDrift {
                event,
                seen: open.seen,
            },
        );
    }
    // Someone else's writes hold it: a conflict, on the fight's backoff.
    Outcome::Failed(CopyError::new(
        FailureKind::Conflict,
        fight_message(drift, target),
    ))
}

/// A fought-over copy's error in its rule's status: stable while the
/// fight lasts (no times), so the status is not rewritten every pass.
pub(in crate::sync) fn fight_message(drift: &DriftState, target: &Target) -> String {
    let event = drift.open.get(target).map(|d| &d.event);
    let manager = event
        .and_then(|e| e.changed_by.as_ref())
        .map_or("another writer", |b| b.manager.as_str());
    format!(
        "{manager} changes this copy back after every correction ({}): correction stopped \
         (drift phase Fight); exclude the fields {manager} owns with drift.exclusions, or \
         run `fleetbus drift correct` once it has stopped",
        paths(event)
    )
}

/// Announces what coalescing held for copies whose window closed.
pub(in crate::sync) async fn drift_flush(drift: &mut DriftState, ctx: &Context) {
    for (target, events) in drift.coalesce.due(Instant::now()) {
        flush_held(drift, ctx, &target, events).await;
    }
}

/// Announces held events (each with its count), then records the copy's
/// drift state as it is now: the last held event may be older than it.
async fn flush_held(
    drift: &mut DriftState,
    ctx: &Context,
    target: &Target,
    events: Vec<DriftEvent>,
) {
    let Some(last) = events.last() else {
        return;
    };
    for e in &events {
        announce(ctx, e).await;
        k8s_event_of(ctx, target, e).await;
    }
    match drift.open.get(target).map(|d| d.event.clone()) {
        Some(open) => kv_put(drift, ctx, &open).await,
        None => kv_delete(drift, ctx, last).await,
    }
}

/// Announces `event` now or holds it for its copy's window (see
/// `coalesce`). False when an announcement was not acknowledged.
async fn report(
    drift: &mut DriftState,
    ctx: &Context,
    target: &Target,
    event: &DriftEvent,
) -> bool {
    match drift.coalesce.admit(target, event, Instant::now()) {
        Gate::Announce => emit(drift, ctx, target, event).await,
        Gate::Held => true,
    }
}

/// Publishes `event` on the drift stream, records the drift state (KV)
/// and the Kubernetes Event. A `Detected` that was not acknowledged is
/// not recorded (false): it is detected and announced again.
async fn emit(drift: &mut DriftState, ctx: &Context, target: &Target, event: &DriftEvent) -> bool {
    let acked = announce(ctx, event).await;
    if !acked && event.phase == DriftPhase::Detected {
        return false;
    }
    if event.phase.is_open() {
        kv_put(drift, ctx, event).await;
    } else {
        kv_delete(drift, ctx, event).await;
    }
    k8s_event_of(ctx, target, event).await;
    acked
}

/// The Kubernetes Event of a drift event (none for `Resolved`: nothing to
/// look at). The message names no count or time, so repeats aggregate.
async fn k8s_event_of(ctx: &Context, target: &Target, event: &DriftEvent) {
    let by = event.changed_by.as_ref().map(|b| b.manager.as_str());
    let (type_, reason, message) = match event.phase {
        DriftPhase::Detected => (
            EventType::Warning,
            "DriftDetected",
            match event.type_ {
                DriftType::Deleted => "the copy was deleted on this cluster".to_owned(),
                DriftType::Modified => format!(
                    "changed on this cluster{}: {}",
                    by.map(|m| format!(" by {m}")).unwrap_or_default(),
                    paths(Some(event))
                ),
            },
        ),
        DriftPhase::Corrected => (
            EventType::Normal,
            "DriftCorrected",
            "restored to the fleet's desired state".to_owned(),
        ),
        DriftPhase::CorrectionFailed => (
            EventType::Warning,
            "DriftCorrectionFailed",
            event.error.clone().unwrap_or_default(),
        ),
        DriftPhase::Fight => (EventType::Warning, "DriftFight", {
            let p = ctx.cfg.drift_fight;
            let manager = by.unwrap_or("another writer");
            format!(
                "{manager} keeps changing {} back after corrections ({} times within {} \
                 make a fight): not correcting this copy until {manager} has left it alone \
                 for {} or longer (or `fleetbus drift correct`); if {manager} owns these \
                 fields, add them to the rule's drift.exclusions",
                paths(Some(event)),
                p.threshold,
                humantime::format_duration(p.window),
                humantime::format_duration(p.backoff),
            )
        }),
        DriftPhase::Resolved => return,
    };
    let count = i32::try_from(event.count).unwrap_or(i32::MAX);
    k8s_event(ctx, target, event, type_, reason, &message, count).await;
}

fn next_phase(
    prev: &DriftEvent,
    phase: DriftPhase,
    action: DriftMode,
    error: Option<String>,
) -> DriftEvent {
    DriftEvent {
        id: drift_event_id(
            &prev.cluster,
            prev.object.uid.as_deref().unwrap_or_default(),
            prev.object.resource_version.as_deref().unwrap_or_default(),
            phase,
        ),
        phase,
        action,
        error,
        ..prev.clone()
    }
}

/// Publishes the event into `FLEETBUS_DRIFT` and waits for the ack (drift
/// is rare; the ack time is the detection latency). Returns whether acked.
async fn announce(ctx: &Context, event: &DriftEvent) -> bool {
    ctx.metrics
        .drifts
        .get_or_create(&vec![
            ("cluster".to_owned(), event.cluster.clone()),
            ("rule".to_owned(), event.rule.clone()),
            ("kind".to_owned(), event.object.kind.clone()),
            ("phase".to_owned(), event.phase.as_str().to_owned()),
        ])
        // A coalesced event counts every drift it stands for.
        .inc_by(u64::from(event.count.max(1)));
    let Some(bytes) = wire(ctx, event) else {
        return false;
    };
    let subject = event.subject_key().to_subject(ctx.layout.prefix());
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", event.id.as_str());
    let ack = match ctx
        .js
        .publish_with_headers(subject, headers, bytes.into())
        .await
    {
        Ok(ack) => ack,
        Err(e) => {
            tracing::warn!(error = %e, "could not publish a drift event");
            return false;
        }
    };
    match tokio::time::timeout(Duration::from_secs(5), ack).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "drift event not acknowledged");
            false
        }
        Err(_) => {
            tracing::warn!("drift event not acknowledged within 5s");
            false
        }
    }
}

/// `event` as published and recorded: cut to fit the server's
/// `max_payload` (from its INFO, so a server configured larger or
/// smaller is followed) less room for the signature and headers, and
/// signed in the secure mode. A drift is never lost to its size
/// (`DriftEvent::encode_within`); None only if it cannot be encoded.
fn wire(ctx: &Context, event: &DriftEvent) -> Option<Vec<u8>> {
    let max_payload = ctx.js.client().server_info().max_payload;
    let budget = max_payload.saturating_sub(WIRE_MARGIN);
    let Some(bytes) = event.encode_within(budget) else {
        tracing::warn!(
            max_payload,
            "a drift event does not fit the server's max_payload even without its changes"
        );
        return None;
    };
    if bytes.len() < event.encode().map_or(0, |b| b.len()) {
        ctx.metrics.drift_events_truncated.inc();
        tracing::info!(
            copy = %event.object.name,
            max_payload,
            "a drift event was cut to fit the bus: its large values are replaced by their size and hash"
        );
    }
    // Signed by this cluster in the secure mode: a `signature` member,
    // so the event stays readable JSON (PROTOCOL §6).
    Some(crate::trust::sign_or_keep(ctx.cfg.trust.as_deref(), bytes))
}

/// The drift KV bucket (looked up once, then kept in the drift state).
async fn drift_kv(drift: &mut DriftState, ctx: &Context) -> Option<kv::Store> {
    if drift.kv.is_none() {
        let bucket = ctx.layout.drift_bucket().bucket;
        match ctx.js.get_key_value(&bucket).await {
            Ok(store) => drift.kv = Some(store),
            Err(e) => tracing::warn!(%bucket, error = %e, "drift state bucket unavailable"),
        }
    }
    drift.kv.clone()
}

fn kv_key(event: &DriftEvent) -> String {
    event.subject_key().to_kv_key()
}

async fn kv_put(drift: &mut DriftState, ctx: &Context, event: &DriftEvent) {
    let key = kv_key(event);
    let Some(bytes) = wire(ctx, event) else {
        return;
    };
    if let Some(store) = drift_kv(drift, ctx).await {
        if let Err(e) = store.put(&key, bytes.into()).await {
            tracing::warn!(%key, error = %e, "could not record drift state");
        }
    }
}

async fn kv_delete(drift: &mut DriftState, ctx: &Context, event: &DriftEvent) {
    let key = kv_key(event);
    if let Some(store) = drift_kv(drift, ctx).await {
        if let Err(e) = store.delete(&key).await {
            tracing::warn!(%key, error = %e, "could not clear drift state");
        }
    }
}

async fn k8s_event(
    ctx: &Context,
    target: &Target,
    event: &DriftEvent,
    type_: EventType,
    reason: &str,
    message: &str,
    count: i32,
) {
    let object = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(target.api_version.clone()),
        kind: Some(target.kind.clone()),
        namespace: target.namespace.clone(),
        name: Some(target.name.clone()),
        uid: event.object.uid.clone(),
        ..Default::default()
    };
    ctx.recorder
        .publish_counted(&object, type_, reason, message, count)
        .await;
}

/// The copy as the API server has it now, `None` when absent. Read before
/// calling a difference drift: the watch cache may not have caught up with
/// the agent's own last write yet (a pass ran between the write and its
/// watch event), and that stale copy is no one's change. Drift is rare, so
/// the extra read costs little. `Err` when the server cannot say.
pub(in crate::sync) async fn fresh(
    api: &kube::Api<kube::api::DynamicObject>,
    name: &str,
) -> Result<Option<Value>, String> {
    match api.get_opt(&crate::kube::path::segment(name)).await {
        Ok(Some(o)) => serde_json::to_value(o).map(Some).map_err(|e| e.to_string()),
        Ok(None) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}
