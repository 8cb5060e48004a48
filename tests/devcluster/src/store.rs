//! The object store: every object, the resource registry, the watch history and the
//! broadcast channel feeding watchers, persisted through `persist` when configured.
//!
//! With `--data-dir`, writes are group-committed (see `store/group_commit.rs`): a write's
//! response and its watch events wait until it is durable, but reads (get, list, a
//! write's precondition checks) see the in-memory state, which may include writes
//! still being committed. If the process dies before such a commit, those writes are
//! lost although a reader may have seen them (never their writer: its request had no
//! response yet). A client still holding a resourceVersion of a lost write does not
//! skip events: the restarted server hands out resourceVersions above any of the
//! previous run ([`Store::start_epoch`]), so a watch from it gets 410 and relists.

use crate::meta;
use crate::persist::{Op, Persist, PersistError};
use crate::registry::Registry;
use crate::status::ApiError;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use tokio::sync::broadcast;

mod group_commit;
use group_commit::{Group, Outcome, Undo};

/// Where an object lives: (group, plural, namespace or "", name).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjKey {
    /// API group ("" for core).
    pub group: String,
    /// Resource plural.
    pub plural: String,
    /// Namespace, "" for cluster-scoped objects.
    pub namespace: String,
    /// Object name.
    pub name: String,
}

impl ObjKey {
    /// Builds a key.
    pub fn new(group: &str, plural: &str, namespace: &str, name: &str) -> Self {
        ObjKey {
            group: group.into(),
            plural: plural.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The persisted form: a JSON array, unambiguous whatever the names contain.
    pub fn encode(&self) -> String {
        json!([self.group, self.plural, self.namespace, self.name]).to_string()
    }

    fn decode(s: &str) -> Option<Self> {
        let v: Vec<String> = serde_json::from_str(s).ok()?;
        match v.as_slice() {
            [g, p, ns, n] => Some(ObjKey::new(g, p, ns, n)),
            _ => None,
        }
    }

    /// "core/configmaps" for /debug/writes.
    pub fn writes_key(&self) -> String {
        let g = if self.group.is_empty() {
            "core"
        } else {
            &self.group
        };
        format!("{g}/{}", self.plural)
    }

    /// True for the key of a CustomResourceDefinition object.
    pub fn is_crd(&self) -> bool {
        self.group == "apiextensions.k8s.io" && self.plural == "customresourcedefinitions"
    }

    /// True for the key of a Namespace object.
    pub fn is_namespace(&self) -> bool {
        self.group.is_empty() && self.plural == "namespaces"
    }
}

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed (object is its last state with a new resourceVersion).
    Deleted,
}

/// One change, as kept in the history and sent to watchers.
#[derive(Debug, Clone)]
pub struct Event {
    /// The resourceVersion of this change.
    pub rv: u64,
    /// What happened.
    pub etype: EventType,
    /// Which object.
    pub key: ObjKey,
    /// The object after the change (last state for DELETED).
    pub object: Value,
    /// The object before the change (for selector transitions).
    pub prev: Option<Value>,
}

/// The mutable state.
#[derive(Debug, Clone)]
pub struct Inner {
    /// Last resourceVersion handed out.
    pub rv: u64,
    /// Every object, ordered for prefix scans.
    pub objects: BTreeMap<ObjKey, Value>,
    /// Servable resources.
    pub registry: Registry,
    history: VecDeque<Arc<Event>>,
    /// Events with rv <= floor may be missing from the history.
    history_floor: u64,
    writes: BTreeMap<String, u64>,
    tokens: BTreeSet<String>,
    /// Stored records skipped at startup because they could not be read.
    skipped: Vec<String>,
}

impl Inner {
    /// Objects of (group, plural), optionally one namespace, ordered by (namespace, name).
    pub fn scan<'a>(
        &'a self,
        group: &'a str,
        plural: &'a str,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Value)> + 'a {
        let start = ObjKey::new(group, plural, namespace.unwrap_or(""), "");
        self.objects.range(start..).take_while(move |(k, _)| {
            k.group == group && k.plural == plural && namespace.is_none_or(|ns| k.namespace == ns)
        })
    }

    /// True if a bearer token was minted by this cluster.
    pub fn has_token(&self, t: &str) -> bool {
        self.tokens.contains(t)
    }
}

/// A write in progress: mutations apply to `inner` at once; persistence and events
/// are flushed by [`Store::write`] when the closure returns.
pub struct Tx<'a> {
    /// The state being changed.
    pub inner: &'a mut Inner,
    ops: Vec<Op>,
    events: Vec<Event>,
    /// What reverts the write if its commit fails (only kept with persistence).
    undo: Option<Vec<Undo>>,
    /// The write's timestamp (RFC 3339, seconds).
    pub now: String,
    /// `dryRun=All`: the write runs on a scratch copy that is dropped afterwards.
    dry_run: bool,
}

impl Tx<'_> {
    /// The stored object at `key`.
    pub fn get(&self, key: &ObjKey) -> Option<&Value> {
        self.inner.objects.get(key)
    }

    /// True for a `dryRun=All` write (its changes are dropped afterwards).
    pub fn is_dry_run(&self) -> bool {
        self.dry_run
    }

    fn next_rv(&mut self) -> u64 {
        self.inner.rv += 1;
        self.inner.rv
    }

    fn count(&mut self, key: &ObjKey) {
        *self.inner.writes.entry(key.writes_key()).or_insert(0) += 1;
    }

    /// Stores `obj` with a fresh resourceVersion; emits ADDED or MODIFIED.
    ///
    /// Under dry run the object keeps the stored resourceVersion (none for a new
    /// object), as kube's `DryRunnableStorage` never asks etcd for a new revision: a
    /// client that reuses the returned resourceVersion for its next real write must
    /// not get a 409.
    pub fn put(&mut self, key: &ObjKey, mut obj: Value) -> Value {
        let rv = self.next_rv();
        let shown = if self.dry_run {
            self.inner
                .objects
                .get(key)
                .and_then(|o| meta::meta_str(o, "resourceVersion"))
                .map(str::to_string)
        } else {
            Some(rv.to_string())
        };
        let m = meta::meta_mut(&mut obj);
        match shown {
            Some(v) => m.insert("resourceVersion".into(), json!(v)),
            None => m.remove("resourceVersion"),
        };
        let prev = self.inner.objects.insert(key.clone(), obj.clone());
        if let Some(undo) = &mut self.undo {
            undo.push(Undo::Object(key.clone(), prev.clone()));
        }
        if key.is_crd() {
            self.inner.registry.upsert_crd(&obj);
        }
        self.count(key);
        self.ops.push(Op::Put(key.encode(), obj.clone()));
        let etype = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.events.push(Event {
            rv,
            etype,
            key: key.clone(),
            object: obj.clone(),
            prev,
        });
        obj
    }

    /// Removes the object at `key` (no cascades); emits DELETED with a new resourceVersion.
    pub fn remove(&mut self, key: &ObjKey) -> Option<Value> {
        self.remove_as(key, None)
    }

    /// Like [`Tx::remove`], but the DELETED event carries `last` (the state an update
    /// produced just before the removal, e.g. with its last finalizer gone).
    pub fn remove_as(&mut self, key: &ObjKey, last: Option<Value>) -> Option<Value> {
        let stored = self.inner.objects.remove(key)?;
        if let Some(undo) = &mut self.undo {
            undo.push(Undo::Object(key.clone(), Some(stored.clone())));
        }
        let stored_rv = meta::meta_str(&stored, "resourceVersion").map(str::to_string);
        let mut last = last.unwrap_or(stored);
        let rv = self.next_rv();
        // Dry run: the last state keeps the stored resourceVersion (see `put`).
        let shown = match (self.dry_run, stored_rv) {
            (true, Some(v)) => v,
            _ => rv.to_string(),
        };
        meta::meta_mut(&mut last).insert("resourceVersion".into(), json!(shown));
        if key.is_crd() {
            self.inner.registry.remove_crd(&key.name);
        }
        self.count(key);
        self.ops.push(Op::Delete(key.encode()));
        self.events.push(Event {
            rv,
            etype: EventType::Deleted,
            key: key.clone(),
            object: last.clone(),
            prev: None,
        });
        Some(last)
    }

    /// Remembers a minted bearer token.
    pub fn add_token(&mut self, token: &str) {
        if self.inner.tokens.insert(token.to_string()) {
            if let Some(undo) = &mut self.undo {
                undo.push(Undo::Token(token.to_string()));
            }
        }
        self.ops.push(Op::Token(token.to_string()));
    }
}

/// What a new watch starts from.
pub struct WatchStart {
    /// Current objects (synthetic ADDED), when the watch starts from ""/"0".
    pub initial: Vec<Value>,
    /// Kept events after the requested resourceVersion.
    pub backlog: Vec<Arc<Event>>,
    /// Live events from now on.
    pub rx: broadcast::Receiver<Arc<Event>>,
    /// The resourceVersion the stream starts after: the snapshot's for `initial`,
    /// else the last settled one.
    pub rv: u64,
}

/// What the store lock guards: the state and the group-commit bookkeeping.
#[derive(Debug)]
struct Locked {
    inner: Inner,
    group: Group,
}

/// The shared store.
///
/// State sits behind a `std::sync::Mutex`: every critical section is short and
/// synchronous (map updates, publishing events), and the lock is never held across an
/// `.await` nor a redb commit, so an async mutex would only add overhead. Writers
/// waiting for their batch to be durable sleep on `settled` (see `store/group_commit.rs`).
pub struct Store {
    inner: Mutex<Locked>,
    /// Signalled whenever a batch settles (durable or failed).
    settled: Condvar,
    events_tx: broadcast::Sender<Arc<Event>>,
    persist: Option<Persist>,
    history_cap: usize,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("history_cap", &self.history_cap)
            .finish()
    }
}

impl Store {
    /// Opens the store; with `data_dir`, loads and persists state there.
    pub fn open(data_dir: Option<&Path>, history_cap: usize) -> Result<Self, PersistError> {
        let mut inner = Inner {
            rv: 0,
            objects: BTreeMap::new(),
            registry: Registry::default(),
            history: VecDeque::new(),
            history_floor: 0,
            writes: BTreeMap::new(),
            tokens: BTreeSet::new(),
            skipped: Vec::new(),
        };
        let persist = match data_dir {
            Some(dir) => {
                let p = Persist::open(dir)?;
                let loaded = p.load()?;
                inner.rv = loaded.rv;
                for (k, v) in loaded.objects {
                    match ObjKey::decode(&k) {
                        Some(key) => {
                            inner.objects.insert(key, v);
                        }
                        None => tracing::warn!(key = %k, "skipping stored object with a bad key"),
                    }
                }
                inner.tokens.extend(loaded.tokens);
                inner.skipped = loaded.skipped;
                let crds: Vec<Value> = inner
                    .scan("apiextensions.k8s.io", "customresourcedefinitions", None)
                    .map(|(_, v)| v.clone())
                    .collect();
                for c in &crds {
                    inner.registry.upsert_crd(c);
                }
                tracing::info!(
                    objects = inner.objects.len(),
                    skipped = inner.skipped.len(),
                    rv = inner.rv,
                    "loaded state"
                );
                Some(p)
            }
            None => None,
        };
        // The history starts empty: a watch from before this point gets 410.
        inner.history_floor = inner.rv;
        let (events_tx, _) = broadcast::channel(history_cap.clamp(1024, 65536));
        let group = Group {
            settled: inner.rv,
            ..Group::default()
        };
        Ok(Store {
            inner: Mutex::new(Locked { inner, group }),
            settled: Condvar::new(),
            events_tx,
            persist,
            history_cap: history_cap.max(1),
        })
    }

    /// Starts resourceVersions at `base` (if higher than now). For in-memory stores: a
    /// client still holding a resourceVersion from a previous process then gets 410
    /// and relists, instead of silently skipping every event up to that number.
    pub fn start_epoch(&self, base: u64) {
        let mut g = self.lock();
        if g.inner.rv < base {
            g.inner.rv = base;
            g.inner.history_floor = base;
            g.group.settled = base;
        }
    }

    fn lock(&self) -> MutexGuard<'_, Locked> {
        // A panic elsewhere never leaves the maps half-updated in a way later readers
        // cannot handle, so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on a read-only view.
    pub fn read<R>(&self, f: impl FnOnce(&Inner) -> R) -> R {
        f(&self.lock().inner)
    }

    /// Runs a write. With `dry_run`, `f` runs on a scratch copy that is then dropped.
    pub fn write<R>(
        &self,
        dry_run: bool,
        f: impl FnOnce(&mut Tx<'_>) -> Result<R, ApiError>,
    ) -> Result<R, ApiError> {
        blocking(|| self.write_locked(dry_run, f))
    }

    fn write_locked<R>(
        &self,
        dry_run: bool,
        f: impl FnOnce(&mut Tx<'_>) -> Result<R, ApiError>,
    ) -> Result<R, ApiError> {
        let mut g = self.lock();
        let now = meta::now_rfc3339();
        if dry_run {
            // In place, then undone: a copy of the whole store per dry run
            // made each one cost the store's size, under the lock (a restarted
            // agent dry-runs every copy it holds; kube-apiserver's dry run
            // touches only the object).
            let (rv, writes) = (g.inner.rv, g.inner.writes.clone());
            let mut tx = Tx {
                inner: &mut g.inner,
                ops: Vec::new(),
                events: Vec::new(),
                undo: Some(Vec::new()),
                now,
                dry_run: true,
            };
            let result = f(&mut tx);
            let undo = tx.undo.take().unwrap_or_default();
            group_commit::revert(&mut g.inner, undo);
            g.inner.rv = rv;
            g.inner.writes = writes;
            return result;
        }
        let mut tx = Tx {
            inner: &mut g.inner,
            ops: Vec::new(),
            events: Vec::new(),
            undo: self.persist.is_some().then(Vec::new),
            now,
            dry_run: false,
        };
        let result = f(&mut tx);
        let Tx {
            ops, events, undo, ..
        } = tx;
        // Mutations already applied in memory are persisted even when `f` failed late.
        let Some(persist) = &self.persist else {
            let rv = g.inner.rv;
            self.publish(&mut g, events, rv);
            return result;
        };
        if ops.is_empty() && g.group.is_idle() {
            // Nothing to persist, and what `f` saw is durable already.
            return result;
        }
        // Even a write that changed nothing waits: its answer may rest on writes
        // that are still being committed.
        let outcome = g.group.open.join(ops, events, undo.unwrap_or_default());
        match self.await_commit(g, &outcome, persist) {
            Ok(()) => result,
            Err(e) => Err(ApiError::internal(format!("failed to persist: {e}"))),
        }
    }

    /// Waits until the batch of `outcome` is durable or failed, committing the open
    /// batch itself whenever no other writer is committing.
    fn await_commit<'a>(
        &'a self,
        mut g: MutexGuard<'a, Locked>,
        outcome: &Outcome,
        persist: &Persist,
    ) -> Result<(), String> {
        loop {
            if let Some(r) = outcome.get() {
                return r.clone();
            }
            if g.group.committing {
                g = self.settled.wait(g).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // This write is in the open batch (the committing one would have an
            // outcome by now): commit everything pending, this write included.
            g.group.committing = true;
            let batch = std::mem::take(&mut g.group.open);
            let rv = g.inner.rv;
            drop(g);
            let span = tracing::debug_span!("group_commit", ops = batch.ops.len(), rv);
            let res = span.in_scope(|| {
                if batch.ops.is_empty() {
                    Ok(())
                } else {
                    persist.commit(&batch.ops, rv)
                }
            });
            g = self.lock();
            match res {
                Ok(()) => {
                    self.publish(&mut g, batch.events, rv);
                    group_commit::finish(&batch.outcome, Ok(()));
                }
                Err(e) => {
                    tracing::error!(error = %e, ops = batch.ops.len(), rv, "failed to persist a batch of writes");
                    // Writes applied since may build on the failed ones: they fail
                    // too. Newest first, so every undo meets the state it left.
                    let later = std::mem::take(&mut g.group.open);
                    group_commit::revert(&mut g.inner, later.undo);
                    group_commit::revert(&mut g.inner, batch.undo);
                    g.group.failures += 1;
                    g.group.settled = g.inner.rv;
                    let msg = e.to_string();
                    group_commit::finish(&later.outcome, Err(msg.clone()));
                    group_commit::finish(&batch.outcome, Err(msg));
                }
            }
            g.group.committing = false;
            self.settled.notify_all();
        }
    }

    /// Appends durable `events` to the history, sends them to watchers (in order) and
    /// marks everything up to `rv` settled.
    fn publish(&self, g: &mut Locked, events: Vec<Event>, rv: u64) {
        for ev in events {
            let ev = Arc::new(ev);
            g.inner.history.push_back(ev.clone());
            while g.inner.history.len() > self.history_cap {
                if let Some(old) = g.inner.history.pop_front() {
                    g.inner.history_floor = old.rv;
                }
            }
            // No receivers is fine: nobody is watching.
            let _ = self.events_tx.send(ev);
        }
        g.group.settled = rv;
    }

    /// Registers a watcher. `from` None means "current state first" (synthetic ADDED);
    /// Some(n) replays kept events after n, or fails with 410 if they were dropped.
    pub fn watch(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        blocking(|| self.watch_blocking(group, plural, namespace, from))
    }

    fn watch_blocking(
        &self,
        group: &str,
        plural: &str,
        namespace: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, ApiError> {
        // A commit failing while the initial snapshot waits makes it stale: take
        // another, a few times.
        for _ in 0..3 {
            let g = self.lock();
            // Subscribing under the lock means no event falls between snapshot and
            // stream: events are published under the lock too.
            let rx = self.events_tx.subscribe();
            let Some(n) = from else {
                let initial = g
                    .inner
                    .scan(group, plural, namespace)
                    .map(|(_, v)| v.clone())
                    .collect();
                let rv = g.inner.rv;
                let failures = g.group.failures;
                // The snapshot may show writes still being committed; their
                // synthetic ADDED must not reach the client before they are durable
                // (their own events, at or below `rv`, are skipped by the stream).
                let mut g = g;
                while g.group.settled < rv {
                    g = self.settled.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                if g.group.failures == failures {
                    return Ok(WatchStart {
                        initial,
                        backlog: Vec::new(),
                        rx,
                        rv,
                    });
                }
                continue;
            };
            if n < g.inner.history_floor {
                return Err(ApiError::expired(format!(
                    "too old resource version: {n} ({})",
                    g.inner.history_floor + 1
                )));
            }
            // The history holds published (durable) events only; later ones arrive
            // on `rx` once their batch is durable.
            let backlog = g
                .inner
                .history
                .iter()
                .filter(|e| e.rv > n)
                .cloned()
                .collect();
            return Ok(WatchStart {
                initial: Vec::new(),
                backlog,
                rx,
                rv: g.group.settled,
            });
        }
        Err(ApiError::internal(
            "failed to persist writes; cannot start the watch",
        ))
    }

    /// Current resourceVersion.
    #[cfg(test)]
    pub fn current_rv(&self) -> u64 {
        self.lock().inner.rv
    }

    /// `GET /debug/store`: stored records skipped at startup (unreadable).
    pub fn debug_store(&self) -> Value {
        let g = self.lock();
        json!({"skippedRecords": g.inner.skipped.len(), "skippedKeys": g.inner.skipped})
    }

    /// Counts of state-changing writes per "<group>/<plural>".
    pub fn writes(&self) -> Value {
        json!(self.lock().inner.writes)
    }
}

/// Runs `f`, which may block (the store lock, a commit, waiting for one): on the
/// multi-threaded runtime, tells tokio this worker blocks, so `/healthz`, reads and
/// watches keep being served by the others.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()) {
        Ok(tokio::runtime::RuntimeFlavor::MultiThread) => tokio::task::block_in_place(f),
        _ => f(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_round_trip() {
        let k = ObjKey::new("apps", "deployments", "ns", "a|b\"c");
        assert_eq!(ObjKey::decode(&k.encode()), Some(k.clone()));
        assert_eq!(k.writes_key(), "apps/deployments");
    }

    #[test]
    fn put_remove_and_history() {
        let s = Store::open(None, 2).unwrap();
        let k = ObjKey::new("", "configmaps", "default", "a");
        s.write(false, |tx| {
            tx.put(&k, json!({"metadata": {"name": "a"}}));
            tx.put(&k, json!({"metadata": {"name": "a"}, "data": {}}));
            tx.remove(&k);
            Ok(())
        })
        .unwrap();
        assert_eq!(s.current_rv(), 3);
        assert_eq!(s.writes()["core/configmaps"], 3);
        // History keeps the last two events: watching from 0 is too old, from 1 works.
        assert_eq!(
            s.watch("", "configmaps", None, Some(0))
                .err()
                .map(|e| e.code),
            Some(410)
        );
        let w = s.watch("", "configmaps", None, Some(1)).unwrap();
        assert_eq!(w.backlog.len(), 2);
        assert_eq!(w.backlog[1].etype, EventType::Deleted);
        assert_eq!(w.backlog[1].object["metadata"]["resourceVersion"], "3");
    }

    #[test]
    fn dry_run_changes_nothing() {
        let s = Store::open(None, 10).unwrap();
        let k = ObjKey::new("", "configmaps", "default", "a");
        s.write(true, |tx| {
            tx.put(&k, json!({}));
            Ok(())
        })
        .unwrap();
        assert_eq!(s.current_rv(), 0);
        assert!(s.read(|i| i.objects.is_empty()));
        // Nor does one that fails after writing, or one over stored state.
        s.write(false, |tx| {
            tx.put(&k, json!({"data": {"v": "1"}}));
            Ok(())
        })
        .unwrap();
        let before = s.read(|i| (i.objects.clone(), i.writes.clone(), i.tokens.clone()));
        let failed: Result<(), ApiError> = s.write(true, |tx| {
            tx.put(&k, json!({"data": {"v": "2"}}));
            tx.put(&ObjKey::new("", "configmaps", "default", "b"), json!({}));
            tx.remove(&k);
            tx.add_token("t");
            Err(ApiError::bad_request("refused late"))
        });
        assert!(failed.is_err());
        assert_eq!(s.current_rv(), 1);
        assert_eq!(
            s.read(|i| (i.objects.clone(), i.writes.clone(), i.tokens.clone())),
            before
        );
    }

    #[test]
    fn dry_run_keeps_the_stored_resource_version() {
        let s = Store::open(None, 10).unwrap();
        let k = ObjKey::new("", "configmaps", "default", "a");
        s.write(false, |tx| {
            tx.put(&k, json!({"metadata": {"name": "a"}}));
            Ok(())
        })
        .unwrap();
        let updated = s
            .write(true, |tx| {
                Ok(tx.put(&k, json!({"metadata": {"name": "a"}, "data": {}})))
            })
            .unwrap();
        assert_eq!(updated["metadata"]["resourceVersion"], "1");
        let removed = s.write(true, |tx| Ok(tx.remove(&k))).unwrap().unwrap();
        assert_eq!(removed["metadata"]["resourceVersion"], "1");
        let k2 = ObjKey::new("", "configmaps", "default", "b");
        let created = s
            .write(true, |tx| {
                Ok(tx.put(
                    &k2,
                    json!({"metadata": {"name": "b", "resourceVersion": "7"}}),
                ))
            })
            .unwrap();
        assert_eq!(created["metadata"].get("resourceVersion"), None);
        assert_eq!(s.current_rv(), 1);
    }
}
