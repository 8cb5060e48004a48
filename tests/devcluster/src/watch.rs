//! Watch streams: newline-delimited JSON events, bookmarks, timeouts, 410 as an ERROR event.

use crate::resources::ResourceDef;
use crate::selectors::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{Event, EventType, Store, WatchStart};
use crate::table::{self, Column};
use axum::body::Body;
use bytes::Bytes;
use futures::SinkExt;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast::{self, error::RecvError};

/// Which objects a watch (or list) selects.
#[derive(Debug, Clone)]
pub struct Filter {
    /// Namespace from the URL (None = all).
    pub namespace: Option<String>,
    /// labelSelector.
    pub labels: LabelSelector,
    /// fieldSelector.
    pub fields: FieldSelector,
}

impl Filter {
    /// True if `obj` is selected.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj
            .get("metadata")
            .and_then(|m| m.get("labels"))
            .and_then(Value::as_object);
        self.labels.matches(labels) && self.fields.matches(obj)
    }
}

/// Watch options from the query string.
#[derive(Debug, Clone)]
pub struct WatchParams {
    /// None: start with synthetic ADDED events for current objects.
    pub from: Option<u64>,
    /// allowWatchBookmarks.
    pub bookmarks: bool,
    /// sendInitialEvents=true: end the initial events with an annotated bookmark.
    pub initial_events_end: bool,
    /// timeoutSeconds (or the server default).
    pub timeout: Duration,
    /// Period of BOOKMARK events.
    pub bookmark_every: Duration,
    /// `as=PartialObjectMetadata`: every event carries metadata only.
    pub metadata_only: bool,
    /// End the watch with a 410 after a while (`/debug/faults`).
    pub expire: Option<crate::faults::Expiry>,
}

/// Returns the object as served at `def`'s version (custom resources are stored in one
/// version and served in every served version by rewriting apiVersion).
pub fn present(def: &ResourceDef, mut obj: Value) -> Value {
    if def.custom {
        if let Some(o) = obj.as_object_mut() {
            o.insert("apiVersion".into(), json!(def.api_version()));
        }
        crate::validation::crd_schema::default_on_read(def, &mut obj);
    } else if let Some(zero) = crate::meta::zero_status(def) {
        // Objects stored before their zero status was recorded read as kube writes them.
        if let Some(o) = obj.as_object_mut() {
            o.entry("status").or_insert(zero);
        }
    }
    obj
}

struct Encoder {
    def: ResourceDef,
    table: Option<Vec<Column>>,
    headers_sent: bool,
    metadata_only: bool,
}

impl Encoder {
    fn event(&mut self, etype: &str, obj: Value) -> Bytes {
        let obj = present(&self.def, obj);
        if self.metadata_only {
            return line(etype, crate::partial::object(&obj));
        }
        let obj = match &self.table {
            Some(cols) => {
                let rv = obj
                    .get("metadata")
                    .and_then(|m| m.get("resourceVersion"))
                    .cloned()
                    .unwrap_or(json!(""));
                let t = table::render(
                    cols,
                    &[obj],
                    json!({"resourceVersion": rv}),
                    !self.headers_sent,
                );
                self.headers_sent = true;
                t
            }
            None => obj,
        };
        line(etype, obj)
    }

    fn bookmark(&self, rv: u64, initial_end: bool) -> Bytes {
        let mut meta = json!({"resourceVersion": rv.to_string()});
        if initial_end {
            meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let (kind, api_version) = if self.metadata_only {
            (
                "PartialObjectMetadata".to_string(),
                crate::partial::API_VERSION.to_string(),
            )
        } else {
            (self.def.kind.clone(), self.def.api_version())
        };
        line(
            "BOOKMARK",
            json!({"kind": kind, "apiVersion": api_version, "metadata": meta}),
        )
    }
}

fn line(etype: &str, obj: Value) -> Bytes {
    let mut v = crate::serialize::to_line(&json!({"type": etype, "object": obj}));
    v.push(b'\n');
    Bytes::from(v)
}

/// The single ERROR event sent instead of a stream when the requested RV is too old.
pub fn error_body(err: &ApiError) -> Body {
    Body::from(line("ERROR", err.to_status()))
}

/// What an event looks like through `filter`: selector transitions become ADDED/DELETED.
fn translate(ev: &Event, filter: &Filter) -> Option<(&'static str, Value)> {
    let now = filter.matches(&ev.object);
    match ev.etype {
        EventType::Added => now.then(|| ("ADDED", ev.object.clone())),
        EventType::Deleted => now.then(|| ("DELETED", ev.object.clone())),
        EventType::Modified => {
            let before = ev.prev.as_ref().is_some_and(|p| filter.matches(p));
            match (before, now) {
                (true, true) => Some(("MODIFIED", ev.object.clone())),
                (false, true) => Some(("ADDED", ev.object.clone())),
                (true, false) => Some(("DELETED", ev.object.clone())),
                (false, false) => None,
            }
        }
    }
}

/// Starts a watch and returns its streaming body.
pub fn start(
    store: &Store,
    def: ResourceDef,
    filter: Filter,
    params: WatchParams,
    table: Option<Vec<Column>>,
) -> Body {
    let ws = match store.watch(
        &def.group,
        &def.plural,
        filter.namespace.as_deref(),
        params.from,
    ) {
        Ok(ws) => ws,
        Err(e) => return error_body(&e),
    };
    let (tx, rx) = futures::channel::mpsc::channel::<Result<Bytes, Infallible>>(64);
    let feed = Feed {
        tx,
        // The CRD that serves this resource, if it is a custom one: its deletion ends
        // the watch, as kube's CRD handler tears down the resource's storage (and with
        // it every watch) once the objects are gone.
        crd_name: format!("{}.{}", def.plural, def.group),
        enc: Encoder {
            def,
            table,
            headers_sent: false,
            metadata_only: params.metadata_only,
        },
        filter,
    };
    // One task per watch; it ends on timeout, on store shutdown, or as soon as the
    // client goes away (the body, and so the receiver, is dropped).
    tokio::spawn(feed.run(ws, params));
    Body::from_stream(rx)
}

/// The client went away (the body, and so the receiver, was dropped), or the
/// watch ended: stop.
struct Stop;

/// One watch's stream: what it selects, how it encodes, where it writes.
struct Feed {
    tx: futures::channel::mpsc::Sender<Result<Bytes, Infallible>>,
    enc: Encoder,
    filter: Filter,
    crd_name: String,
}

impl Feed {
    async fn run(mut self, ws: WatchStart, params: WatchParams) {
        // `timeoutSeconds` is client input: a huge value must not overflow the
        // clock (it would panic this task and end the stream); it just never fires.
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(params.timeout)
            .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600));
        let last_rv = ws.rv.max(params.from.unwrap_or(0));
        let from = params.from.unwrap_or(ws.rv);
        let Ok(rx) = self.catch_up(ws, &params).await else {
            return;
        };
        let _ = self.follow(rx, &params, from, last_rv, now, deadline).await;
    }

    /// The initial ADDED events, the bookmark that ends them if asked, then
    /// the kept events after the requested resourceVersion; returns where the
    /// live events come from.
    async fn catch_up(
        &mut self,
        ws: WatchStart,
        params: &WatchParams,
    ) -> Result<broadcast::Receiver<Arc<Event>>, Stop> {
        for obj in ws.initial {
            if self.filter.matches(&obj) {
                let event = self.enc.event("ADDED", obj);
                self.send(event).await?;
            }
        }
        if params.initial_events_end && params.bookmarks {
            let bookmark = self.enc.bookmark(ws.rv, true);
            self.send(bookmark).await?;
        }
        for ev in &ws.backlog {
            self.forward(ev).await?;
        }
        Ok(ws.rx)
    }

    /// Live events, bookmarks, and the ends of a watch: its timeout, a 410
    /// from `/debug/faults` or from falling behind, the store closing.
    async fn follow(
        &mut self,
        mut rx: broadcast::Receiver<Arc<Event>>,
        params: &WatchParams,
        from: u64,
        mut last_rv: u64,
        started: tokio::time::Instant,
        deadline: tokio::time::Instant,
    ) -> Result<(), Stop> {
        let mut ticker = tokio::time::interval_at(
            tokio::time::Instant::now() + params.bookmark_every,
            params.bookmark_every,
        );
        // `/debug/faults` may end this watch: from its start under the plan
        // it started with, from the change under a later plan.
        let mut plan_changes = params.expire.as_ref().map(|e| e.faults.changes());
        let expire_at = |from: tokio::time::Instant| {
            params
                .expire
                .as_ref()
                .and_then(crate::faults::Expiry::lifetime)
                .and_then(|l| from.checked_add(l))
        };
        let mut expire = expire_at(started);
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => return Err(Stop),
                _ = tokio::time::sleep_until(expire.unwrap_or(deadline)), if expire.is_some() => {
                    if let Some(e) = &params.expire {
                        e.expired(last_rv);
                    }
                    let _ = self.send(line("ERROR", crate::faults::compacted_in_watch().to_status())).await;
                    return Err(Stop);
                }
                () = plan_changed(&mut plan_changes) => {
                    expire = expire_at(tokio::time::Instant::now());
                }
                _ = ticker.tick(), if params.bookmarks => {
                    let bookmark = self.enc.bookmark(last_rv, false);
                    self.send(bookmark).await?;
                }
                ev = rx.recv() => match ev {
                    Ok(ev) => {
                        if ev.rv <= from {
                            continue;
                        }
                        last_rv = last_rv.max(ev.rv);
                        self.forward(&ev).await?;
                    }
                    Err(RecvError::Lagged(_)) => {
                        let e = ApiError::expired(format!("too old resource version: {last_rv} ({last_rv})"));
                        let _ = self.send(line("ERROR", e.to_status())).await;
                        return Err(Stop);
                    }
                    Err(RecvError::Closed) => return Err(Stop),
                },
            }
        }
    }

    /// Sends `ev` as the watch sees it, if it concerns it; stops at the
    /// deletion of the CRD that serves the resource.
    async fn forward(&mut self, ev: &Event) -> Result<(), Stop> {
        if ev.etype == EventType::Deleted && ev.key.is_crd() && ev.key.name == self.crd_name {
            return Err(Stop);
        }
        let def = &self.enc.def;
        let relevant = ev.key.group == def.group
            && ev.key.plural == def.plural
            && self
                .filter
                .namespace
                .as_deref()
                .is_none_or(|ns| ev.key.namespace == ns);
        if relevant {
            if let Some((t, obj)) = translate(ev, &self.filter) {
                let event = self.enc.event(t, obj);
                self.send(event).await?;
            }
        }
        Ok(())
    }

    async fn send(&mut self, bytes: Bytes) -> Result<(), Stop> {
        self.tx.send(Ok(bytes)).await.map_err(|_| Stop)
    }
}

/// Resolves when the fault plan changes (never without `/debug/faults`).
async fn plan_changed(rx: &mut Option<tokio::sync::watch::Receiver<u64>>) {
    let changed = match rx {
        Some(rx) => rx.changed().await.is_ok(),
        None => false,
    };
    if !changed {
        // No fault layer, or its sender gone (never: the Expiry holds it).
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ObjKey;

    #[test]
    fn selector_transitions() {
        let f = Filter {
            namespace: None,
            labels: LabelSelector::parse("app=a").unwrap(),
            fields: FieldSelector::default(),
        };
        let a = json!({"metadata": {"labels": {"app": "a"}}});
        let b = json!({"metadata": {"labels": {"app": "b"}}});
        let ev = |etype, object: &Value, prev: Option<&Value>| Event {
            rv: 1,
            etype,
            key: ObjKey::new("", "configmaps", "d", "x"),
            object: object.clone(),
            prev: prev.cloned(),
        };
        assert_eq!(
            translate(&ev(EventType::Modified, &a, Some(&b)), &f).map(|x| x.0),
            Some("ADDED")
        );
        assert_eq!(
            translate(&ev(EventType::Modified, &b, Some(&a)), &f).map(|x| x.0),
            Some("DELETED")
        );
        assert_eq!(
            translate(&ev(EventType::Modified, &a, Some(&a)), &f).map(|x| x.0),
            Some("MODIFIED")
        );
        assert_eq!(translate(&ev(EventType::Added, &b, None), &f), None);
    }
}
