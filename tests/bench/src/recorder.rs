//! A watch on one cluster's ConfigMaps that timestamps what it sees: the end
//! point of every latency ("copy visible through a watch on the sink").

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};
use tokio::sync::Notify;

/// The data key whose value marks a version ("v": a sequence or a tag).
pub const MARK: &str = "v";

/// One observed (object, version).
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub name: String,
    pub mark: String,
}

#[derive(Debug, Default)]
struct State {
    first: HashMap<(String, String), Instant>,
    names: HashSet<String>,
    /// When each new object was first seen, in order: `[n-1]` is when `n` were.
    new_name_at: Vec<Instant>,
    log: Vec<Seen>,
    /// Whether the initial list finished (objects seen after it are live events).
    ready: bool,
}

/// Watches ConfigMaps of one namespace; the watch task stops on drop.
pub struct Recorder {
    state: Arc<Mutex<State>>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

/// What was seen of `name` at or after `since`, in order.
fn seen_since<'a>(s: &'a State, name: &'a str, since: Instant) -> impl Iterator<Item = &'a Seen> {
    s.log
        .iter()
        .filter(move |e| e.at >= since && e.name == name)
}

fn lock(s: &Mutex<State>) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Recorder {
    /// Starts watching `ns` on `client` and waits until the initial list is done.
    pub async fn start(client: kube::Client, ns: &str, timeout: Duration) -> anyhow::Result<Self> {
        let api: Api<ConfigMap> = Api::namespaced(client, ns);
        let state = Arc::new(Mutex::new(State::default()));
        let changed = Arc::new(Notify::new());
        let (st, ch) = (state.clone(), changed.clone());
        let task = tokio::spawn(async move {
            // With backoff: a watch of a killed API server must not spin
            // without yielding (it would hang the runtime's shutdown).
            let mut stream = watcher(api, watcher::Config::default())
                .default_backoff()
                .boxed();
            while let Some(ev) = stream.next().await {
                let now = Instant::now();
                let obj = match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                    Ok(watcher::Event::InitDone) => {
                        lock(&st).ready = true;
                        ch.notify_waiters();
                        continue;
                    }
                    // Errors are retried by the watcher itself (with backoff below).
                    Err(e) => {
                        eprintln!("bench recorder: watch error: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    Ok(_) => continue,
                };
                let name = obj.name_any();
                let mark = obj
                    .data
                    .as_ref()
                    .and_then(|d| d.get(MARK))
                    .cloned()
                    .unwrap_or_default();
                let mut s = lock(&st);
                s.first.entry((name.clone(), mark.clone())).or_insert(now);
                if s.names.insert(name.clone()) {
                    s.new_name_at.push(now);
                }
                s.log.push(Seen {
                    at: now,
                    name,
                    mark,
                });
                drop(s);
                ch.notify_waiters();
            }
        });
        let r = Recorder {
            state,
            changed,
            task,
        };
        r.wait("initial list", timeout, |s| s.ready.then_some(()))
            .await?;
        Ok(r)
    }

    /// When (`name`, `mark`) was first seen.
    pub fn first_seen(&self, name: &str, mark: &str) -> Option<Instant> {
        lock(&self.state)
            .first
            .get(&(name.to_owned(), mark.to_owned()))
            .copied()
    }

    /// Waits until (`name`, `mark`) has been seen; returns when it first was.
    pub async fn wait_seen(
        &self,
        name: &str,
        mark: &str,
        timeout: Duration,
    ) -> anyhow::Result<Instant> {
        let key = (name.to_owned(), mark.to_owned());
        self.wait(&format!("{name}={mark}"), timeout, |s| {
            s.first.get(&key).copied()
        })
        .await
    }

    /// Waits until `name` was seen at `away` and then back at `back`, both at or
    /// after `since` (taken before the write that set `away`); returns when
    /// `back` was seen. `since` precedes the write, not its acknowledgement: a
    /// correction can be watched before the writer's task sees the write's
    /// answer (a loaded machine), and a wait from that answer on would never
    /// end. The error lists what was seen of `name` since then.
    pub async fn wait_back(
        &self,
        name: &str,
        away: &str,
        back: &str,
        since: Instant,
        timeout: Duration,
    ) -> anyhow::Result<Instant> {
        let found = self
            .wait(&format!("{name}={away} then {back}"), timeout, |s| {
                let mut seen = seen_since(s, name, since);
                seen.find(|e| e.mark == away)?;
                seen.find(|e| e.mark == back).map(|e| e.at)
            })
            .await;
        found.map_err(|e| {
            let seen: Vec<String> = seen_since(&lock(&self.state), name, since)
                .map(|e| format!("{}@+{}ms", e.mark, e.at.duration_since(since).as_millis()))
                .collect();
            anyhow::anyhow!("{e}; {name} seen since the write: [{}]", seen.join(", "))
        })
    }

    /// Waits until at least `n` distinct objects have been seen; returns when.
    pub async fn wait_count(&self, n: usize, timeout: Duration) -> anyhow::Result<Instant> {
        self.wait(&format!("{n} objects"), timeout, |s| {
            n.checked_sub(1).and_then(|i| s.new_name_at.get(i).copied())
        })
        .await
    }

    /// How many distinct objects were seen.
    pub fn count(&self) -> usize {
        lock(&self.state).names.len()
    }

    /// Every event so far.
    pub fn log(&self) -> Vec<Seen> {
        lock(&self.state).log.clone()
    }

    async fn wait<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&State) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(v) = check(&lock(&self.state)) {
                return Ok(v);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let n = self.count();
                anyhow::bail!("timed out after {timeout:?} waiting for {what} (objects seen: {n})");
            }
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}
