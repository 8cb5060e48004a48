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

use super::drift;
use super::engine::{Engine, Target};
use super::sink::Candidate;
use crate::kube::events::EventType;

/// A drift that has been detected and not ended yet.
#[derive(Debug, Clone)]
pub struct OpenDrift {
    /// The last event sent for it (Detected or CorrectionFailed).
    pub event: DriftEvent,
    /// When its watch event arrived (for the latency histograms).
    pub seen: Instant,
}

/// What was found, for [`Engine::drift_detected`].
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

impl Engine {
    /// Reports a drift (once per drifted version of the copy).
    pub(super) async fn drift_detected(&mut self, target: &Target, c: &Candidate, f: Found<'_>) {
        let object = object_ref(target, f.live);
        if let Some(open) = self.drifts.get(target) {
            if open.event.object.resource_version == object.resource_version
                && open.event.type_ == f.type_
            {
                return;
            }
        }
        let mut changes: Vec<DriftChange> = match f.type_ {
            DriftType::Modified => drift::changes(f.baseline, f.live, f.with_status, f.exclude),
            DriftType::Deleted => Vec::new(),
        };
        if target.api_version == "v1" && target.kind == "Secret" {
            drift::redact_secret_values(&mut changes);
        }
        let event = DriftEvent {
            id: drift_event_id(
                &self.fleet.local.name,
                object.uid.as_deref().unwrap_or_default(),
                object.resource_version.as_deref().unwrap_or_default(),
                DriftPhase::Detected,
            ),
            cluster: self.fleet.local.name.clone(),
            rule: c.rule.clone(),
            origin: c.key.origin.clone(),
            object,
            phase: DriftPhase::Detected,
            type_: f.type_,
            detected_at: chrono::Utc::now(),
            changes,
            changed_by: match f.type_ {
                DriftType::Modified => drift::changed_by(f.live),
                DriftType::Deleted => None,
            },
            action: f.action,
            error: None,
        };
        let seen = self.seen.get(target).copied().unwrap_or_else(Instant::now);
        tracing::warn!(copy = %target, rule = %c.rule, action = ?f.action, by = ?event.changed_by.as_ref().map(|b| &b.manager), "drift detected");
        if !self.announce(&event).await {
            // Not on the bus: not recorded either, so the next pass (soon)
            // detects and announces it again.
            self.publish_retry_at = Some(Instant::now() + Duration::from_secs(2));
            return;
        }
        self.ctx
            .metrics
            .drift_detection_seconds
            .observe(seen.elapsed().as_secs_f64());
        self.kv_put(&event).await;
        let message = match f.type_ {
            DriftType::Deleted => "the copy was deleted on this cluster".to_owned(),
            DriftType::Modified => format!(
                "changed on this cluster{}: {}",
                event
                    .changed_by
                    .as_ref()
                    .map(|b| format!(" by {}", b.manager))
                    .unwrap_or_default(),
                event
                    .changes
                    .iter()
                    .map(|c| c.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        self.k8s_event(
            target,
            &event,
            EventType::Warning,
            "DriftDetected",
            &message,
        )
        .await;
        self.drifts
            .insert(target.clone(), OpenDrift { event, seen });
        self.ctx.metrics.drifted.set(self.drifts.len() as i64);
    }

    /// The correction was written: the drift ends.
    pub(super) async fn drift_corrected(&mut self, target: &Target) {
        let Some(open) = self.drifts.remove(target) else {
            return;
        };
        self.ctx.metrics.drifted.set(self.drifts.len() as i64);
        self.ctx
            .metrics
            .drift_correction_seconds
            .observe(open.seen.elapsed().as_secs_f64());
        let event = self.next_phase(&open.event, DriftPhase::Corrected, DriftMode::Correct, None);
        self.announce(&event).await;
        self.kv_delete(&event).await;
        self.k8s_event(
            target,
            &event,
            EventType::Normal,
            "DriftCorrected",
            "restored to the fleet's desired state",
        )
        .await;
    }

    /// The correction failed: the drift stays, with the error.
    pub(super) async fn drift_failed(&mut self, target: &Target, error: &str) {
        let Some(open) = self.drifts.get(target).cloned() else {
            return;
        };
        let event = self.next_phase(
            &open.event,
            DriftPhase::CorrectionFailed,
            DriftMode::Correct,
            Some(error.to_owned()),
        );
        self.announce(&event).await;
        self.kv_put(&event).await;
        self.k8s_event(
            target,
            &event,
            EventType::Warning,
            "DriftCorrectionFailed",
            error,
        )
        .await;
        self.drifts.insert(
            target.clone(),
            OpenDrift {
                event,
                seen: open.seen,
            },
        );
    }

    /// The copy is equal again without our correction (someone put it back,
    /// or the desired state moved to it): the drift ends.
    pub(super) async fn drift_resolved(&mut self, target: &Target) {
        let Some(open) = self.drifts.remove(target) else {
            return;
        };
        self.ctx.metrics.drifted.set(self.drifts.len() as i64);
        let event = self.next_phase(&open.event, DriftPhase::Resolved, open.event.action, None);
        self.announce(&event).await;
        self.kv_delete(&event).await;
    }

    /// Forgets drifts of copies nothing wants any more (collected or gone).
    pub(super) async fn drift_forget_except(
        &mut self,
        wanted: &std::collections::BTreeSet<Target>,
    ) {
        let gone: Vec<Target> = self
            .drifts
            .keys()
            .filter(|t| !wanted.contains(*t))
            .cloned()
            .collect();
        for t in gone {
            if let Some(open) = self.drifts.remove(&t) {
                self.kv_delete(&open.event).await;
            }
        }
        self.ctx.metrics.drifted.set(self.drifts.len() as i64);
    }

    fn next_phase(
        &self,
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
    async fn announce(&self, event: &DriftEvent) -> bool {
        self.ctx
            .metrics
            .drifts
            .get_or_create(&vec![
                ("cluster".to_owned(), event.cluster.clone()),
                ("rule".to_owned(), event.rule.clone()),
                ("kind".to_owned(), event.object.kind.clone()),
                ("phase".to_owned(), format!("{:?}", event.phase)),
            ])
            .inc();
        let bytes = match event.encode() {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "could not encode a drift event");
                return false;
            }
        };
        let subject = event.subject_key().to_subject(self.ctx.layout.prefix());
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", event.id.as_str());
        let ack = match self
            .ctx
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

    /// The drift KV bucket (looked up once).
    async fn drift_kv(&mut self) -> Option<kv::Store> {
        if self.drift_kv.is_none() {
            let bucket = self.ctx.layout.drift_bucket().bucket;
            match self.ctx.js.get_key_value(&bucket).await {
                Ok(store) => self.drift_kv = Some(store),
                Err(e) => tracing::warn!(%bucket, error = %e, "drift state bucket unavailable"),
            }
        }
        self.drift_kv.clone()
    }

    fn kv_key(&self, event: &DriftEvent) -> String {
        event.subject_key().to_kv_key()
    }

    async fn kv_put(&mut self, event: &DriftEvent) {
        let key = self.kv_key(event);
        let Ok(bytes) = event.encode() else { return };
        if let Some(store) = self.drift_kv().await {
            if let Err(e) = store.put(&key, bytes.into()).await {
                tracing::warn!(%key, error = %e, "could not record drift state");
            }
        }
    }

    async fn kv_delete(&mut self, event: &DriftEvent) {
        let key = self.kv_key(event);
        if let Some(store) = self.drift_kv().await {
            if let Err(e) = store.delete(&key).await {
                tracing::warn!(%key, error = %e, "could not clear drift state");
            }
        }
    }

    async fn k8s_event(
        &self,
        target: &Target,
        event: &DriftEvent,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let object = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(target.api_version.clone()),
            kind: Some(target.kind.clone()),
            namespace: target.namespace.clone(),
            name: Some(target.name.clone()),
            uid: event.object.uid.clone(),
            ..Default::default()
        };
        self.ctx
            .recorder
            .publish(&object, type_, reason, message)
            .await;
    }
}

/// The copy as the API server has it now, `None` when absent. Read before
/// calling a difference drift: the watch cache may not have caught up with
/// the agent's own last write yet (a pass ran between the write and its
/// watch event), and that stale copy is no one's change. Drift is rare, so
/// the extra read costs little. `Err` when the server cannot say.
pub(super) async fn fresh(
    api: &kube::Api<kube::api::DynamicObject>,
    name: &str,
) -> Result<Option<Value>, String> {
    match api.get_opt(&crate::kube::path::segment(name)).await {
        Ok(Some(o)) => serde_json::to_value(o).map(Some).map_err(|e| e.to_string()),
        Ok(None) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}
