//! The two event sources of sync, one task each per kind: the local API watch
//! (every object of the kind, originals and copies alike: one watch serves
//! publishing, copies and rules) and the bus consumer (the last envelope of
//! every object of the kind from every origin, then live updates: one ordered
//! consumer per kind, not one per peer or rule).
//!
//! Both tasks turn their stream into [`Input`]s for the engine and present a
//! re-list the same way: `Reset`, the full state, then `Listed`/`CaughtUp`, so
//! the engine replaces what it had instead of keeping stale entries.

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, Scope};
use kube::runtime::watcher;
use kube::Api;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::follow::{Feed, Follow};
use crate::context::Context;

/// An event for the engine.
#[derive(Debug)]
pub enum Input {
    /// From the local watch of a kind.
    Local(GroupVersionKind, LocalEvent),
    /// From the bus consumer of a kind.
    Bus(GroupVersionKind, BusEvent),
    /// An acknowledged publish failed: the object must be published again.
    /// The envelope the bus held before (what to believe again), if any.
    PublishFailed(GroupVersionKind, ObjectKey, Option<Box<Envelope>>),
    /// The server dropped a publish as a duplicate of an earlier message id:
    /// the subject still holds what it held (someone else's message, if it
    /// differed from ours). The envelope the bus held before, if any.
    PublishDuplicate(GroupVersionKind, ObjectKey, Option<Box<Envelope>>),
    /// From the status consumer (`<p>.status.>`).
    Status(super::returned::StatusEvent),
}

/// What the local watch saw.
#[derive(Debug)]
pub enum LocalEvent {
    /// A (re-)list starts: forget what the watch said before once `Listed` comes.
    Reset,
    /// An object exists in this version.
    Upsert(Value),
    /// An object is gone.
    Remove(Value),
    /// The (re-)list is complete.
    Listed,
    /// The API server refuses the watch (403, 401, 404); it retries on its
    /// own with backoff, and the kind's rules report the refusal meanwhile.
    Error(String),
}

/// What the bus consumer of a kind saw.
pub type BusEvent = Feed<ObjectKey, Envelope>;

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

/// `group/version Kind` for messages (`v1 Secret` for the core group).
pub fn describe(gvk: &GroupVersionKind) -> String {
    if gvk.group.is_empty() {
        format!("{} {}", gvk.version, gvk.kind)
    } else {
        format!("{}/{} {}", gvk.group, gvk.version, gvk.kind)
    }
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
