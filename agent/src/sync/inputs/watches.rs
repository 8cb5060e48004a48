//! The event sources of sync: one task each per kind for the local API watch
//! (every object of the kind, originals and copies alike: one watch serves
//! publishing, copies and rules) and the bus consumer (the last envelope of
//! every object of the kind from every origin, then live updates: one ordered
//! consumer per kind, not one per peer or rule), and one status consumer
//! (`<p>.status.>`, the reports `returns::returned` reads).
//!
//! The tasks turn their stream into [`Input`]s for the engine and present a
//! re-list the same way: `Reset`, the full state, then `Listed`/`CaughtUp`, so
//! the engine replaces what it had instead of keeping stale entries.

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::{ObjectKey, StatusKey};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, Scope};
use kube::runtime::watcher;
use kube::Api;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::follow::Follow;
use crate::context::Context;
use crate::sync::model::meta::describe_gvk as describe;
use crate::sync::model::{Input, LocalEvent};

/// Resolves a kind through API discovery: served, with its resource name and scope.
pub async fn resolve(
    client: &kube::Client,
    gvk: &GroupVersionKind,
) -> Result<(ApiResource, bool), String> {
    match kube::discovery::pinned_kind(client, gvk).await {
        Ok((ar, caps)) => Ok((ar, namespaced(&caps))),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(format!(
            "kind {} is not served by this cluster's API server",
            describe(gvk)
        )),
        Err(e) => Err(format!("cannot discover kind {}: {e}", describe(gvk))),
    }
}

fn namespaced(caps: &ApiCapabilities) -> bool {
    matches!(caps.scope, Scope::Namespaced)
}

/// Watches every object of one kind on the local API until `cancel`.
#[tracing::instrument(name = "watch", skip_all, fields(kind = %describe(&gvk)))]
pub async fn local_watch(
    client: kube::Client,
    gvk: GroupVersionKind,
    ar: ApiResource,
    tx: mpsc::Sender<Input>,
    cancel: CancellationToken,
) {
    let api: Api<DynamicObject> = Api::all_with(client, &ar);
    let stream =
        kube::runtime::WatchStreamExt::default_backoff(watcher(api, watcher::Config::default()));
    futures::pin_mut!(stream);
    let send = |ev: LocalEvent| {
        let tx = tx.clone();
        let gvk = gvk.clone();
        async move { tx.send(Input::Local(gvk, ev)).await.is_ok() }
    };
    loop {
        let ev = tokio::select! {
            _ = cancel.cancelled() => return,
            ev = stream.next() => ev,
        };
        let out = match ev {
            None => return,
            Some(Ok(watcher::Event::Init)) => LocalEvent::Reset,
            Some(Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o))) => {
                match serde_json::to_value(&o) {
                    Ok(v) => LocalEvent::Upsert(with_gvk(v, &gvk)),
                    Err(_) => continue,
                }
            }
            Some(Ok(watcher::Event::Delete(o))) => match serde_json::to_value(&o) {
                Ok(v) => LocalEvent::Remove(with_gvk(v, &gvk)),
                Err(_) => continue,
            },
            Some(Ok(watcher::Event::InitDone)) => LocalEvent::Listed,
            Some(Err(e)) if refused(&e) => LocalEvent::Error(e.to_string()),
            Some(Err(e)) => {
                // Connection trouble, an expired resourceVersion: the watcher
                // retries (re-lists if needed) on its own; nothing to report
                // on rules (a resumed watch may send nothing to clear it).
                tracing::debug!(error = %e, "local watch interrupted; resuming");
                continue;
            }
        };
        if !send(out).await {
            return;
        }
    }
}

/// Whether the API server refuses this watch for good (403 Forbidden, 401,
/// 404: rights missing or revoked, kind gone): what a rule must report.
fn refused(e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => return false,
    };
    matches!(code, 401 | 403 | 404)
}

/// List items may lack `apiVersion`/`kind` (kube omits them inside lists);
/// the engine works on complete objects.
fn with_gvk(mut v: Value, gvk: &GroupVersionKind) -> Value {
    if let Some(map) = v.as_object_mut() {
        map.entry("apiVersion")
            .or_insert_with(|| Value::String(gvk.api_version()));
        map.entry("kind")
            .or_insert_with(|| Value::String(gvk.kind.clone()));
    }
    v
}

/// Consumes the last envelope of every object of one kind, then live updates,
/// until `cancel` (see `follow`: restarts, recreated streams).
#[tracing::instrument(name = "consume", skip_all, fields(kind = %describe(&gvk)))]
pub async fn bus_consumer(
    ctx: std::sync::Arc<Context>,
    gvk: GroupVersionKind,
    tx: mpsc::Sender<Input>,
    cancel: CancellationToken,
) {
    let f = Follow {
        stream: ctx.layout.objects_stream().name,
        filter: fleetbus_schemas::subject::ObjectFilter::any()
            .gvk(&gvk.group, &gvk.version, &gvk.kind)
            .to_subject(ctx.layout.prefix()),
        what: "objects",
        decode,
        key_of: |prefix, subject| ObjectKey::parse_subject(prefix, subject).ok(),
        input: Box::new(move |ev| Input::Bus(gvk.clone(), ev)),
    };
    super::follow::follow(ctx, f, tx, cancel).await;
}

/// Decodes one message; the reason is the metric label when it is skipped.
fn decode(
    prefix: &fleetbus_schemas::subject::Prefix,
    subject: &str,
    payload: &[u8],
) -> Result<(ObjectKey, Envelope), &'static str> {
    let key = ObjectKey::parse_subject(prefix, subject).map_err(|_| "bad_subject")?;
    let env = Envelope::decode(payload).map_err(|e| match e {
        fleetbus_schemas::DecodeError::UnsupportedVersion { .. } => "unsupported_version",
        _ => "malformed",
    })?;
    // A message under <p>.obj.<X> is a claim by X: an envelope naming
    // another origin, an object at another key, or a contentHash that is not
    // its object's is not believed (PROTOCOL §4.7). The hash is recomputed
    // here, so whatever reads `content_hash` later (the origin comparing its
    // own subtree, a sink's memo) reads the hash of the content received.
    env.check(&key).map_err(|m| m.reason())?;
    Ok((key, env))
}

/// Reads `<p>.status.>` (last report per subject, then live ones) into the
/// engine until `cancel` (see `follow`: restarts, recreated streams).
pub async fn status_consumer(
    ctx: std::sync::Arc<Context>,
    tx: mpsc::Sender<Input>,
    cancel: CancellationToken,
) {
    let f = Follow {
        stream: ctx.layout.status_stream().name,
        filter: fleetbus_schemas::subject::all_status(ctx.layout.prefix()),
        what: "status",
        decode: decode_status,
        key_of: |prefix, subject| StatusKey::parse_subject(prefix, subject).ok(),
        input: Box::new(Input::Status),
    };
    super::follow::follow(ctx, f, tx, cancel).await;
}

/// Decodes one status message; the reason is the metric label when skipped.
/// A report is a claim by the cluster its subject names, about the object
/// its subject names: a body that says otherwise is not trusted.
fn decode_status(
    prefix: &fleetbus_schemas::subject::Prefix,
    subject: &str,
    payload: &[u8],
) -> Result<(StatusKey, ReportedStatus), &'static str> {
    let key = StatusKey::parse_subject(prefix, subject).map_err(|_| "status_bad_subject")?;
    let report = ReportedStatus::decode(payload).map_err(|e| match e {
        fleetbus_schemas::DecodeError::UnsupportedVersion { .. } => "status_unsupported_version",
        _ => "status_malformed",
    })?;
    if report.subject_key() != key {
        return Err("status_subject_mismatch");
    }
    Ok((key, report))
}

#[cfg(test)]
pub(in crate::sync) mod tests {
    use super::*;
    use fleetbus_schemas::subject::Prefix;
    use fleetbus_schemas::ObjectRef;
    use serde_json::json;

    /// A report by `cluster` about east's Widget `a/w` (also `returned`'s tests).
    pub(in crate::sync) fn report(cluster: &str) -> ReportedStatus {
        ReportedStatus {
            cluster: cluster.into(),
            rule: "r".into(),
            origin: "east".into(),
            source: ObjectRef::new("example.com/v1", "Widget", Some("a"), "w"),
            copy_name: "w".into(),
            copy_namespace: Some("a".into()),
            copy_resource_version: "1".into(),
            observed_at: chrono::Utc::now(),
            status: json!({"phase": "Up"}),
            ready: Some(true),
        }
    }

    #[test]
    fn decode_checks_the_subject() {
        let p = Prefix::default();
        let r = report("west");
        let subject = r.subject_key().to_subject(&p);
        let bytes = r.encode().unwrap();
        let (key, back) = decode_status(&p, &subject, &bytes).unwrap();
        assert_eq!((key, back.status), (r.subject_key(), r.status.clone()));
        // Another cluster's claim under west's subject.
        let other = report("north").encode().unwrap();
        assert_eq!(
            decode_status(&p, &subject, &other).unwrap_err(),
            "status_subject_mismatch"
        );
        assert_eq!(
            decode_status(&p, &subject, b"garbage").unwrap_err(),
            "status_malformed"
        );
        assert_eq!(
            decode_status(&p, "fleetbus.status.x", &bytes).unwrap_err(),
            "status_bad_subject"
        );
    }
}
