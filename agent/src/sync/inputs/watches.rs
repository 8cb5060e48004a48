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

use fleetbus_schemas::envelope::{Envelope, Mismatch};
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::{ObjectKey, StatusKey};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, Scope};
use kube::runtime::watcher;
use kube::Api;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::follow::Follow;
use crate::context::Context;
use crate::health::WatchDown;
use crate::kube::fresh_watch::{lost_connection, restart_delay, LIST_STALL};
use crate::sync::model::meta::describe_gvk as describe;
use crate::sync::model::{Input, LocalEvent, PackedEnvelope, Seen};
pub use crate::sync::world::Unresolved;
use crate::trust;

/// Resolves a kind through API discovery: served, with its resource name and scope.
pub async fn resolve(
    client: &kube::Client,
    gvk: &GroupVersionKind,
) -> Result<(ApiResource, bool), Unresolved> {
    let not_served = || Unresolved {
        not_served: true,
        why: format!(
            "kind {} is not served by this cluster's API server",
            describe(gvk)
        ),
    };
    match kube::discovery::pinned_kind(client, gvk).await {
        Ok((ar, caps)) => Ok((ar, namespaced(&caps))),
        Err(kube::Error::Api(s)) if s.code == 404 => Err(not_served()),
        Err(kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(_))) => {
            Err(not_served())
        }
        Err(e) => Err(Unresolved {
            not_served: false,
            why: format!("cannot discover kind {}: {e}", describe(gvk)),
        }),
    }
}

fn namespaced(caps: &ApiCapabilities) -> bool {
    matches!(caps.scope, Scope::Namespaced)
}

/// How one run of a watch ended.
enum Ended {
    /// Cancelled, or the engine is gone.
    Stopped,
    /// Its connection failed (the error, reported).
    Connection(String),
}

/// A local watch's connection failures since it last listed.
#[derive(Default)]
struct Failures {
    /// In a row (0: none since the last list).
    count: u32,
    /// Held while down: `/readyz` says "local-watch" meanwhile.
    down: Option<WatchDown>,
}

/// Watches every object of one kind on the local API until `cancel`.
///
/// A watch whose connection fails (reset, closed, no answer) is not left to
/// kube-runtime's watcher, which would re-watch on the same client and its
/// pooled connections: it tells the engine (the kind's view may be stale
/// from now on: `Error`, which holds its copies), waits, and starts again
/// with a new client, so a new connection, and a new list (`Reset` …
/// `Listed` replaces the view). Other errors (410 Gone, a refusal) stay with
/// the watcher, which re-lists or backs off on its own.
#[tracing::instrument(name = "watch", skip_all, fields(kind = %describe(&gvk)))]
pub async fn local_watch(
    ctx: Arc<Context>,
    gvk: GroupVersionKind,
    ar: ApiResource,
    tx: mpsc::Sender<Input>,
    cancel: CancellationToken,
) {
    let mut client = ctx.client.clone();
    let mut failures = Failures::default();
    loop {
        let error = match watch_once(client, &ctx, &gvk, &ar, &tx, &cancel, &mut failures).await {
            Ended::Stopped => return,
            Ended::Connection(e) => e,
        };
        failures.count = failures.count.saturating_add(1);
        failures
            .down
            .get_or_insert_with(|| WatchDown::new(ctx.readiness.clone()));
        let wait = restart_delay(failures.count);
        tracing::warn!(%error, failures = failures.count, ?wait, "local watch lost its connection; starting it again on a new connection");
        let stale = format!("its connection failed ({error}); starting again");
        if tx
            .send(Input::Local(gvk.clone(), LocalEvent::Error(stale)))
            .await
            .is_err()
        {
            return;
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        client = match crate::kube::client::connect(&ctx.kube_config) {
            Ok(c) => c,
            // Cannot happen with a configuration that built a client once;
            // the shared client is the next best thing.
            Err(e) => {
                tracing::warn!(error = %crate::report(&e), "cannot build a new client; using the shared one");
                ctx.client.clone()
            }
        };
    }
}

/// One watcher on `client` until it is stopped or its connection fails.
async fn watch_once(
    client: kube::Client,
    ctx: &Context,
    gvk: &GroupVersionKind,
    ar: &ApiResource,
    tx: &mpsc::Sender<Input>,
    cancel: &CancellationToken,
    failures: &mut Failures,
) -> Ended {
    let api: Api<DynamicObject> = Api::all_with(client, ar);
    let stream =
        kube::runtime::WatchStreamExt::default_backoff(watcher(api, watcher::Config::default()));
    futures::pin_mut!(stream);
    // Listing (at the start, and when the watcher lists again): each item
    // must come within LIST_STALL.
    let mut listing = true;
    loop {
        let ev = tokio::select! {
            _ = cancel.cancelled() => return Ended::Stopped,
            ev = stream.next() => ev,
            _ = tokio::time::sleep(LIST_STALL), if listing => {
                return Ended::Connection(format!("no answer to the list within {LIST_STALL:?}"));
            }
        };
        let out = match ev {
            None => return Ended::Stopped,
            Some(Ok(watcher::Event::Init)) => {
                listing = true;
                LocalEvent::Reset
            }
            Some(Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o))) => {
                match serde_json::to_value(&o) {
                    Ok(v) => LocalEvent::Upsert(seen(ctx, v, gvk)),
                    Err(_) => continue,
                }
            }
            Some(Ok(watcher::Event::Delete(o))) => match serde_json::to_value(&o) {
                Ok(v) => LocalEvent::Remove(seen(ctx, v, gvk)),
                Err(_) => continue,
            },
            Some(Ok(watcher::Event::InitDone)) => {
                // Listed: the view is whole again.
                listing = false;
                *failures = Failures::default();
                LocalEvent::Listed
            }
            Some(Err(e)) if refused(&e) => LocalEvent::Error(e.to_string()),
            Some(Err(e)) if lost_connection(&e) => {
                return Ended::Connection(crate::report(&e));
            }
            Some(Err(e)) => {
                // An expired resourceVersion and the like: the watcher
                // retries (re-lists if needed) on its own; nothing to report
                // on rules (a resumed watch may send nothing to clear it).
                tracing::debug!(error = %e, "local watch interrupted; resuming");
                continue;
            }
        };
        if tx.send(Input::Local(gvk.clone(), out)).await.is_err() {
            return Ended::Stopped;
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
/// `v` as the engine is told of it: with its kind, and packed before it
/// is queued (a list fills the queue faster than passes drain it; see
/// `Seen`), its managedFields compacted first (fieldsV1 is a good part of
/// each object, and never read).
fn seen(ctx: &Context, v: Value, gvk: &GroupVersionKind) -> Seen {
    Seen::new(&ctx.cfg.cluster_name, with_gvk(v, gvk))
}

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
    let opener = Opener::of(&ctx);
    let f = Follow {
        stream: ctx.layout.objects_stream().name,
        filter: fleetbus_schemas::subject::ObjectFilter::any()
            .gvk(&gvk.group, &gvk.version, &gvk.kind)
            .to_subject(ctx.layout.prefix()),
        what: "objects",
        decode: {
            let ctx = ctx.clone();
            Box::new(move |prefix, subject, payload| {
                decode(&opener, Some(&ctx), prefix, subject, payload)
            })
        },
        key_of: |prefix, subject| ObjectKey::parse_subject(prefix, subject).ok(),
        // Packed before it is queued (see `Seen`).
        input: Box::new(move |ev| Input::Bus(gvk.clone(), ev.map(PackedEnvelope::new))),
    };
    super::follow::follow(ctx, f, tx, cancel).await;
}

/// Who opens sealed envelopes (PROTOCOL §4.8): this cluster, with its
/// sealing key if it has one.
pub(in crate::sync) struct Opener {
    /// This cluster's name.
    pub me: String,
    /// Its secret sealing key; None: nothing sealed is opened here.
    pub key: Option<fleetbus_schemas::seal::SealingSecretKey>,
}

impl Opener {
    /// This agent's cluster, with its sealing key if it has one.
    pub fn of(ctx: &Context) -> Opener {
        Opener {
            me: ctx.cfg.cluster_name.clone(),
            key: ctx.sealing.as_ref().map(|k| k.secret.clone()),
        }
    }
}

/// Decodes one message; the reason is the metric label when it is skipped.
/// A sealed envelope is opened here, after its signature is verified: the
/// engine only ever sees objects. `trust`: the agent's context in secure mode
/// (signatures checked, drops counted and raised); None in unit tests.
pub(in crate::sync) fn decode(
    opener: &Opener,
    trust: Option<&Context>,
    prefix: &fleetbus_schemas::subject::Prefix,
    subject: &str,
    payload: &[u8],
) -> Result<(ObjectKey, Envelope), &'static str> {
    let key = ObjectKey::parse_subject(prefix, subject).map_err(|_| "bad_subject")?;
    let mut env = Envelope::decode(payload).map_err(|e| match e {
        fleetbus_schemas::DecodeError::UnsupportedVersion { .. } => "unsupported_version",
        _ => "malformed",
    })?;
    // A message under <p>.obj.<X> is a claim by X: an envelope naming
    // another origin, an object at another key, or a contentHash that is not
    // its object's is not believed (PROTOCOL §4.7). The hash is recomputed
    // here, so whatever reads `content_hash` later (the origin comparing its
    // own subtree, a sink's memo) reads the hash of the content received.
    let secure = trust.filter(|ctx| ctx.cfg.trust.is_some());
    if let Err(m) = env.check(&key) {
        if let (Some(ctx), Mismatch::ContentHash) = (secure, &m) {
            ctx.reject(&key.origin, trust::reason::CONTENT_HASH, subject);
        }
        return Err(m.reason());
    }
    // Secure mode: signed by the certified key of the cluster the subject
    // names (PROTOCOL §4.9), over the form on the bus (sealed or not); the
    // hash checked above binds the object, or the ciphertext.
    if let Some(ctx) = secure {
        if let Err(reason) = ctx.signers.check_envelope(&key, &env, chrono::Utc::now()) {
            ctx.reject(&key.origin, reason, subject);
            return Err(reason);
        }
    }
    if env.is_sealed() {
        // Not sealed to us: nothing to apply, and what was applied before
        // stays (the engine sees it as unreadable, as a sink keeps its copy
        // on any message it cannot read).
        let secret = opener.key.as_ref().ok_or("not_a_recipient")?;
        env = env.open(&key, &opener.me, secret).map_err(|e| e.reason())?;
        // What was sealed is checked like any object: subject, metadata, hash.
        env.check(&key).map_err(|m| m.reason())?;
    }
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
        decode: {
            let ctx = ctx.clone();
            Box::new(move |prefix, subject, payload| {
                let (key, report) = decode_status(prefix, subject, payload)?;
                // Secure mode: signed by the cluster the subject names (the
                // sink that read the copy, PROTOCOL §6.1).
                if ctx.cfg.trust.is_some() {
                    let checked = ctx
                        .signers
                        .check_json(&key.cluster, payload, chrono::Utc::now());
                    if let Err(reason) = checked {
                        ctx.reject(&key.cluster, reason, subject);
                        return Err(reason);
                    }
                }
                Ok((key, report))
            })
        },
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

    /// A Secret of c1's sealed to c1 and c2, as it is on the wire.
    fn sealed_secret(
        c1: &fleetbus_schemas::seal::SealingSecretKey,
        c2: &fleetbus_schemas::seal::SealingSecretKey,
    ) -> (String, Vec<u8>, Value) {
        let obj = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"namespace": "apps", "name": "db", "uid": "u1", "resourceVersion": "7"},
            "data": {"password": "czNjcmV0"}});
        let env = Envelope::snapshot("c1", None, obj.clone(), chrono::Utc::now()).unwrap();
        let sealed = env
            .seal(
                &[("c1", &c1.public_key()), ("c2", &c2.public_key())],
                &mut rand::rng(),
            )
            .unwrap();
        let key = ObjectKey::from_object("c1", &obj).unwrap();
        (
            key.to_subject(&Prefix::default()),
            sealed.encode().unwrap(),
            obj,
        )
    }

    #[test]
    fn a_sealed_envelope_opens_for_its_recipients_and_is_not_a_recipients_elsewhere() {
        use fleetbus_schemas::seal::SealingSecretKey;
        let mut rng = rand::rng();
        let (k1, k2, k3) = (
            SealingSecretKey::generate(&mut rng),
            SealingSecretKey::generate(&mut rng),
            SealingSecretKey::generate(&mut rng),
        );
        let (subject, bytes, obj) = sealed_secret(&k1, &k2);
        let p = Prefix::default();
        let opener = |me: &str, key: Option<&SealingSecretKey>| Opener {
            me: me.into(),
            key: key.cloned(),
        };
        for (me, key) in [("c1", &k1), ("c2", &k2)] {
            let (_, env) = decode(&opener(me, Some(key)), None, &p, &subject, &bytes).unwrap();
            assert_eq!(env.object.as_ref(), Some(&obj), "{me}");
            assert_eq!(
                env.content_hash,
                fleetbus_schemas::envelope::content_hash(&obj)
            );
        }
        assert_eq!(
            decode(&opener("c3", Some(&k3)), None, &p, &subject, &bytes).unwrap_err(),
            "not_a_recipient"
        );
        // Without a key of its own (insecure mode): nothing is opened.
        assert_eq!(
            decode(&opener("c2", None), None, &p, &subject, &bytes).unwrap_err(),
            "not_a_recipient"
        );
        // c3 claiming c2's name, with its own key: does not open.
        assert_eq!(
            decode(&opener("c2", Some(&k3)), None, &p, &subject, &bytes).unwrap_err(),
            "seal_corrupt"
        );
        // The same bytes under another object's subject (a moved blob): the
        // envelope names its object in clear no more, so the subject check
        // passes and the sealing's binding refuses it.
        let other = subject.replace(".db", ".web");
        assert_eq!(
            decode(&opener("c2", Some(&k2)), None, &p, &other, &bytes).unwrap_err(),
            "seal_corrupt"
        );
    }

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
            health: None,
            source_hash: None,
            unfit: None,
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
