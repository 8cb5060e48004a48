//! The workload: writers that create, update and delete ConfigMaps on the
//! origins while faults strike, and the sink watches that record what every
//! sink does. Both feed the [`Oracle`].
//!
//! Deterministic given a seed: each writer draws its steps from its own
//! generator seeded from (seed, writer index), and owns its object names, so
//! the acknowledgements of one object arrive in order. Wall-clock timing
//! (how many steps fit before the stop) is the only thing a seed does not fix.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio_util::sync::CancellationToken;

use crate::oracle::{Copy, Listed, Oracle, Seen, Source};

/// The data key carrying the sequence number of a version.
pub const SEQ: &str = "seq";
/// The copy's annotations the watches read (`fleetbus.io/…`, PROTOCOL §4.3).
pub const ORIGIN_CLUSTER: &str = "fleetbus.io/origin-cluster";
const ORIGIN_UID: &str = "fleetbus.io/origin-uid";

/// The shared oracle (writers and watches record into it).
pub type Shared = Arc<Mutex<Oracle>>;

/// The oracle, whoever panicked while holding it (nothing it holds can be
/// left half-changed by one insert).
pub fn lock(o: &Shared) -> MutexGuard<'_, Oracle> {
    o.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One writer: on `origin` (cluster name and client), in `namespace`, it
/// owns the objects `<origin>-w<index>-<k>` for `k` < `objects`.
pub struct Writer {
    pub origin: String,
    pub client: kube::Client,
    pub namespace: String,
    pub index: usize,
    pub objects: usize,
    /// Pause between steps (bounds the request rate of a writer).
    pub pace: Duration,
}

/// What one writer did.
#[derive(Debug, Default, Clone, Copy)]
pub struct Done {
    pub acknowledged: u64,
    /// Writes that failed or got no answer (the final list settles them).
    pub failed: u64,
}

/// The data of version `seq` of `name`.
fn data(name: &str, seq: u64) -> BTreeMap<String, String> {
    BTreeMap::from([
        (SEQ.to_owned(), seq.to_string()),
        ("payload".to_owned(), format!("{name} version {seq}")),
    ])
}

impl Writer {
    fn name(&self, k: usize) -> String {
        format!("{}-w{}-{k}", self.origin, self.index)
    }

    fn source(&self, name: &str) -> Source {
        Source {
            origin: self.origin.clone(),
            namespace: self.namespace.clone(),
            name: name.to_owned(),
        }
    }

    /// Writes until `stop`: each step picks one of its objects and creates
    /// it (absent), or updates it (3 in 4) or deletes it (1 in 4).
    pub async fn run(self, seed: u64, oracle: Shared, stop: CancellationToken) -> Done {
        let mut rng = StdRng::seed_from_u64(seed ^ (self.index as u64).wrapping_mul(0x9E37_79B9));
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.namespace);
        // Per object: the last sequence number used (never reset, so a
        // recreated object's versions keep growing) and whether it exists.
        let mut seq = vec![0u64; self.objects];
        let mut exists = vec![false; self.objects];
        let mut done = Done::default();
        while !stop.is_cancelled() {
            let k = rng.random_range(0..self.objects);
            let name = self.name(k);
            let delete = exists[k] && rng.random_ratio(1, 4);
            // Deletes only after a write: a fresh object is created first.
            let ok = if delete {
                self.delete(&api, &name, &oracle).await
            } else {
                seq[k] += 1;
                self.write(&api, &name, seq[k], exists[k], &oracle).await
            };
            match ok {
                Some(present) => {
                    done.acknowledged += 1;
                    exists[k] = present;
                }
                // Unknown outcome: ask the server next time (an update that
                // finds nothing creates, a create that finds it updates).
                None => done.failed += 1,
            }
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(self.pace) => {}
            }
        }
        done
    }

    /// Creates or replaces `name` at `seq`; Some(true) when acknowledged.
    async fn write(
        &self,
        api: &Api<ConfigMap>,
        name: &str,
        seq: u64,
        exists: bool,
        oracle: &Shared,
    ) -> Option<bool> {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.to_owned());
        cm.data = Some(data(name, seq));
        let pp = PostParams::default();
        let result = if exists {
            match api.get_opt(name).await {
                Ok(Some(live)) => {
                    cm.metadata.resource_version = live.metadata.resource_version;
                    api.replace(name, &pp, &cm).await
                }
                Ok(None) => api.create(&pp, &cm).await,
                Err(e) => Err(e),
            }
        } else {
            match api.create(&pp, &cm).await {
                // Created by a write whose answer was lost: replace it.
                Err(kube::Error::Api(e)) if e.code == 409 => match api.get(name).await {
                    Ok(live) => {
                        cm.metadata.resource_version = live.metadata.resource_version;
                        api.replace(name, &pp, &cm).await
                    }
                    Err(e) => Err(e),
                },
                other => other,
            }
        };
        let written = result.ok()?;
        let uid = written.metadata.uid.unwrap_or_default();
        lock(oracle).wrote(self.source(name), &uid, seq, data(name, seq));
        Some(true)
    }

    /// Deletes `name`; Some(false) when acknowledged (or already gone).
    async fn delete(&self, api: &Api<ConfigMap>, name: &str, oracle: &Shared) -> Option<bool> {
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(_) => return None,
        }
        lock(oracle).deleted(self.source(name));
        Some(false)
    }
}

/// The sequence number of a copy or source version (0 if it has none).
pub fn seq_of(cm: &ConfigMap) -> u64 {
    cm.data
        .as_ref()
        .and_then(|d| d.get(SEQ))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// An origin's objects in `namespace` now (for [`Oracle::settle`]): every
/// original (no origin-cluster annotation) the workload made.
pub async fn list_origin(
    client: &kube::Client,
    origin: &str,
    namespace: &str,
) -> kube::Result<Vec<Listed>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|cm| cm.annotations().get(ORIGIN_CLUSTER).is_none())
        .filter(|cm| cm.name_any().starts_with(&format!("{origin}-w")))
        .map(|cm| Listed {
            source: Source {
                origin: origin.to_owned(),
                namespace: namespace.to_owned(),
                name: cm.name_any(),
            },
            uid: cm.uid().unwrap_or_default(),
            seq: seq_of(&cm),
            data: cm.data.clone().unwrap_or_default(),
        })
        .collect())
}

/// The copy's source and origin uid, if it is a copy.
fn copy_of(cm: &ConfigMap, namespace: &str) -> Option<(Source, String)> {
    let a = cm.annotations();
    let origin = a.get(ORIGIN_CLUSTER)?.clone();
    let uid = a.get(ORIGIN_UID).cloned().unwrap_or_default();
    Some((
        Source {
            origin,
            namespace: namespace.to_owned(),
            name: cm.name_any(),
        },
        uid,
    ))
}

/// The copies `sink` holds in `namespace` now (for [`Oracle::check`]).
pub async fn list_sink(
    sink: &str,
    client: &kube::Client,
    namespace: &str,
) -> kube::Result<Vec<Copy>> {
    let listed = list_sink_versions(sink, client, namespace).await?;
    Ok(listed.into_iter().map(|(copy, _)| copy).collect())
}

/// [`list_sink`] with each copy's resourceVersion (which every write of it
/// changes).
pub async fn list_sink_versions(
    sink: &str,
    client: &kube::Client,
    namespace: &str,
) -> kube::Result<Vec<(Copy, String)>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|cm| {
            let (source, origin_uid) = copy_of(&cm, namespace)?;
            let version = cm.resource_version().unwrap_or_default();
            let copy = Copy {
                sink: sink.to_owned(),
                origin: source.origin,
                namespace: source.namespace,
                name: source.name,
                origin_uid,
                data: cm.data.unwrap_or_default(),
            };
            Some((copy, version))
        })
        .collect())
}

/// Watches the copies in `namespace` on `sink` and records every version and
/// delete into the oracle until `stop`. Returns once the initial list is in.
pub async fn watch_sink(
    sink: String,
    client: kube::Client,
    namespace: String,
    oracle: Shared,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let (listed_tx, listed_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(async move {
        let mut listed_tx = Some(listed_tx);
        // With backoff: without it a watch whose API server is gone (killed at
        // the fleet's end) retries in a loop that never yields, and the
        // runtime's shutdown waits for it for ever (a hung test, seen in
        // `api_outage` about one run in five).
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        loop {
            let ev = tokio::select! {
                () = stop.cancelled() => return,
                ev = stream.next() => match ev {
                    Some(ev) => ev,
                    None => return,
                },
            };
            match ev {
                Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                    if let Some((source, _)) = copy_of(&cm, &namespace) {
                        let seq = seq_of(&cm);
                        lock(&oracle).saw(&sink, source, Seen::Version { seq });
                    }
                }
                Ok(watcher::Event::Delete(cm)) => {
                    if let Some((source, origin_uid)) = copy_of(&cm, &namespace) {
                        lock(&oracle).saw(&sink, source, Seen::Deleted { origin_uid });
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    if let Some(tx) = listed_tx.take() {
                        let _ = tx.send(());
                    }
                }
                // The watcher retries by itself; a re-list replays every copy
                // as InitApply (versions equal to the last seen: no violation).
                Ok(watcher::Event::Init) | Err(_) => {}
            }
        }
    });
    let _ = listed_rx.await;
    task
}
