//! Group commit: concurrent writes share one redb transaction and one fsync, as
//! etcd batches the writes of kube-apiserver.
//!
//! A write applies its changes to the in-memory state under the store lock and
//! appends its persistence ops, its watch events and what undoes it to the open
//! [`Batch`] (in resourceVersion order, as the lock serialises writes), releases the
//! lock and waits. The first waiter that finds no commit in progress becomes the
//! committer: it takes the whole open batch, commits it with the lock released (one
//! transaction, one fsync), then under the lock publishes the batch's events in
//! order, marks everything up to the batch's last resourceVersion settled and wakes
//! every waiter. Writes that arrived meanwhile form the next batch, committed by one
//! of them. A write's response is sent only once its batch is durable.
//!
//! A failed commit fails every write of its batch (500) and every write applied
//! since (those may build on the failed ones): all of them are reverted in memory,
//! newest first, and their events are never published. resourceVersions are not
//! reused: the counter keeps its value, leaving a gap.

use super::{Event, Inner, ObjKey};
use crate::persist::Op;
use serde_json::Value;
use std::sync::{Arc, OnceLock};

/// How a batch ended: `Err` carries the commit error, shared by all its writes.
pub(super) type Outcome = Arc<OnceLock<Result<(), String>>>;

/// What restores the in-memory state if a write's batch fails to commit.
#[derive(Debug)]
pub(super) enum Undo {
    /// The object at the key before the write (None: it did not exist).
    Object(ObjKey, Option<Value>),
    /// A token the write minted.
    Token(String),
}

/// Writes applied in memory and waiting for one commit.
#[derive(Debug, Default)]
pub(super) struct Batch {
    /// Persistence ops, in write order.
    pub ops: Vec<Op>,
    /// Watch events, in resourceVersion order.
    pub events: Vec<Event>,
    /// Undo records, in write order (applied in reverse).
    pub undo: Vec<Undo>,
    /// Set once the batch is durable or failed.
    pub outcome: Outcome,
}

impl Batch {
    /// Adds one write; returns what its writer waits on.
    pub fn join(&mut self, ops: Vec<Op>, events: Vec<Event>, undo: Vec<Undo>) -> Outcome {
        self.ops.extend(ops);
        self.events.extend(events);
        self.undo.extend(undo);
        self.outcome.clone()
    }

    /// True if the batch holds no change (it may still have waiters).
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty() && self.events.is_empty()
    }
}

/// Tells every writer of a batch how it ended.
pub(super) fn finish(outcome: &Outcome, result: Result<(), String>) {
    // Only the committer sets an outcome, once per batch.
    let _ = outcome.set(result);
}

/// The group-commit state, kept under the store lock.
#[derive(Debug, Default)]
pub(super) struct Group {
    /// Writes applied in memory that no committer has taken yet.
    pub open: Batch,
    /// True while a committer commits a batch (with the lock released).
    pub committing: bool,
    /// Every write with a resourceVersion up to this one is durable and its events
    /// are published, or it was reverted.
    pub settled: u64,
    /// Commits that failed so far.
    pub failures: u64,
}

impl Group {
    /// True if every change in memory is durable.
    pub fn is_idle(&self) -> bool {
        !self.committing && self.open.is_empty()
    }
}

/// Undoes `undo` (one or more writes, in write order) on `inner`, newest first.
pub(super) fn revert(inner: &mut Inner, undo: Vec<Undo>) {
    for u in undo.into_iter().rev() {
        match u {
            Undo::Object(key, prev) => {
                if key.is_crd() {
                    match &prev {
                        Some(p) => inner.registry.upsert_crd(p),
                        None => inner.registry.remove_crd(&key.name),
                    }
                }
                match prev {
                    Some(p) => inner.objects.insert(key, p),
                    None => inner.objects.remove(&key),
                };
            }
            Undo::Token(t) => {
                inner.tokens.remove(&t);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{ObjKey, Store};
    use crate::status::ApiError;
    use fleetbus_testsupport::wait_for_blocking;
    use serde_json::{json, Value};
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::sync::atomic::Ordering;
    use std::sync::{mpsc, Arc};
    use std::time::Duration;
    use tokio::sync::broadcast;

    const WAIT: Duration = Duration::from_secs(30);

    fn key(name: &str) -> ObjKey {
        ObjKey::new("", "configmaps", "default", name)
    }

    fn open(dir: &Path) -> Arc<Store> {
        Arc::new(Store::open(Some(dir), 100_000).unwrap())
    }

    /// Stores configmap `name` with `data`; returns its resourceVersion.
    fn put(s: &Store, name: &str, data: &str) -> Result<u64, ApiError> {
        s.write(false, |tx| {
            let o = tx.put(
                &key(name),
                json!({"metadata": {"name": name}, "data": {"v": data}}),
            );
            Ok(o["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap())
        })
    }

    /// Everything received so far: (rv, name).
    fn drain(rx: &mut broadcast::Receiver<Arc<super::Event>>) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        while let Ok(ev) = rx.try_recv() {
            out.push((ev.rv, ev.key.name.clone()));
        }
        out
    }

    fn objects(s: &Store) -> (BTreeMap<ObjKey, Value>, u64) {
        s.read(|i| (i.objects.clone(), i.rv))
    }

    /// Waits until the store has a commit in flight and `open` writes queued behind it.
    fn wait_queued(s: &Store, open: usize) {
        wait_for_blocking("writes queued behind a held commit", WAIT, || {
            let g = s.lock();
            let seen = (g.group.committing, g.group.open.events.len());
            if seen == (true, open) {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        });
    }

    #[test]
    fn concurrent_writers_share_commits_and_keep_order() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        let mut live = s.watch("", "configmaps", None, Some(0)).unwrap().rx;
        let (threads, per) = (16, 20);
        // Hold the first commit so that every thread's first write queues behind it.
        let gate = s.persist.as_ref().unwrap().hooks.gate.lock().unwrap();
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    (0..per)
                        .map(|i| {
                            // Every thread also rewrites one shared object.
                            let name = if i % 4 == 0 {
                                "shared".to_string()
                            } else {
                                format!("t{t}-{i}")
                            };
                            put(&s, &name, &format!("{t}-{i}")).unwrap()
                        })
                        .collect::<Vec<u64>>()
                })
            })
            .collect();
        wait_queued(&s, threads - 1);
        assert_eq!(
            drain(&mut live),
            vec![],
            "no event before its write is durable"
        );
        drop(gate);
        let per_thread: Vec<Vec<u64>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for rvs in &per_thread {
            assert!(rvs.windows(2).all(|w| w[0] < w[1]), "{rvs:?}");
        }
        let mut all: Vec<u64> = per_thread.concat();
        all.sort_unstable();
        all.dedup();
        assert_eq!(
            all.len(),
            threads * per,
            "every write has its own resourceVersion"
        );
        // The watcher saw every write once, in resourceVersion order.
        let seen: Vec<u64> = drain(&mut live).into_iter().map(|(rv, _)| rv).collect();
        assert_eq!(seen, all);
        let commits = s
            .persist
            .as_ref()
            .unwrap()
            .hooks
            .commits
            .load(Ordering::SeqCst);
        assert!(
            commits <= threads * per - (threads - 2),
            "{commits} commits for {} writes",
            threads * per
        );
        let in_memory = objects(&s);
        drop(live);
        drop(s);
        assert_eq!(objects(&open(dir.path())), in_memory);
    }

    #[test]
    fn a_watch_started_during_a_commit_neither_misses_nor_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        put(&s, "a", "1").unwrap();
        let gate = s.persist.as_ref().unwrap().hooks.gate.lock().unwrap();
        let (s1, s2) = (s.clone(), s.clone());
        let b = std::thread::spawn(move || put(&s1, "b", "1"));
        wait_queued(&s, 0);
        let c = std::thread::spawn(move || put(&s2, "c", "1"));
        wait_queued(&s, 1);
        // A watch resuming from rv 1 starts at once, after the settled rv.
        let resumed = s.watch("", "configmaps", None, Some(1)).unwrap();
        assert_eq!((resumed.rv, resumed.backlog.len()), (1, 0));
        let mut resumed = resumed.rx;
        // A watch from "now" snapshots b and c: it waits until they are durable.
        let (done_tx, done_rx) = mpsc::channel();
        let s3 = s.clone();
        let fresh = std::thread::spawn(move || {
            let ws = s3.watch("", "configmaps", None, None).unwrap();
            let _ = done_tx.send(());
            ws
        });
        assert!(
            done_rx.recv_timeout(Duration::from_millis(300)).is_err(),
            "the initial events must wait for the commit"
        );
        assert_eq!(drain(&mut resumed), vec![]);
        drop(gate);
        assert_eq!(
            (b.join().unwrap().unwrap(), c.join().unwrap().unwrap()),
            (2, 3)
        );
        let ws = fresh.join().unwrap();
        put(&s, "d", "1").unwrap();
        let mut initial: Vec<String> = ws
            .initial
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_string())
            .collect();
        initial.sort();
        assert_eq!(
            (initial, ws.rv),
            (vec!["a".into(), "b".into(), "c".into()], 3)
        );
        // The stream skips what the snapshot holds (as watch.rs does: rv <= ws.rv).
        let mut rx = ws.rx;
        let after: Vec<(u64, String)> = drain(&mut rx)
            .into_iter()
            .filter(|(rv, _)| *rv > ws.rv)
            .collect();
        assert_eq!(after, vec![(4, "d".to_string())]);
        assert_eq!(
            drain(&mut resumed),
            vec![(2, "b".into()), (3, "c".into()), (4, "d".into())]
        );
    }

    #[test]
    fn a_failed_commit_fails_its_batch_and_reverts_it() {
        let dir = tempfile::tempdir().unwrap();
        let s = open(dir.path());
        put(&s, "a", "1").unwrap();
        put(&s, "x", "1").unwrap();
        let before = objects(&s).0;
        let mut live = s.watch("", "configmaps", None, Some(2)).unwrap().rx;
        let hooks = &s.persist.as_ref().unwrap().hooks;
        let gate = hooks.gate.lock().unwrap();
        let s1 = s.clone();
        // In the failing batch: an update and a delete.
        let first = std::thread::spawn(move || {
            s1.write(false, |tx| {
                tx.put(
                    &key("a"),
                    json!({"metadata": {"name": "a"}, "data": {"v": "2"}}),
                );
                tx.remove(&key("x"));
                Ok(())
            })
        });
        wait_queued(&s, 0);
        // Applied while it commits, on top of it: a create and a token.
        let s2 = s.clone();
        let second = std::thread::spawn(move || {
            s2.write(false, |tx| {
                tx.put(&key("b"), json!({"metadata": {"name": "b"}}));
                tx.add_token("t");
                Ok(())
            })
        });
        wait_queued(&s, 1);
        hooks.fail.store(true, Ordering::SeqCst);
        drop(gate);
        let codes = (
            first.join().unwrap().err().map(|e| e.code),
            second.join().unwrap().err().map(|e| e.code),
        );
        assert_eq!(codes, (Some(500), Some(500)));
        assert_eq!(objects(&s).0, before);
        assert!(!s.read(|i| i.has_token("t")));
        assert_eq!(drain(&mut live), vec![], "no event of a failed write");
        // resourceVersions 3..=5 went to the failed writes and are not reused.
        hooks.fail.store(false, Ordering::SeqCst);
        assert_eq!(put(&s, "c", "1").unwrap(), 6);
        assert_eq!(drain(&mut live), vec![(6, "c".to_string())]);
        let in_memory = objects(&s);
        assert_eq!(
            s.read(|i| i.objects.get(&key("a")).map(|o| o["data"]["v"].clone())),
            Some(json!("1"))
        );
        drop(live);
        drop(s);
        assert_eq!(objects(&open(dir.path())), in_memory);
    }
}
