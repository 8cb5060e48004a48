//! Shared helpers of the end-to-end tests: a fleet member (devcluster + agent), waits on Cluster objects and metrics.
#![allow(
    dead_code,
    unused_imports,
    async_fn_in_trait,
    clippy::unwrap_used,
    clippy::expect_used
)]

use std::time::{Duration, Instant};

use fleetbus_schemas::crd::{Cluster, ClusterFeature, ClusterSpec, ClusterState, ClusterType};
use fleetbus_schemas::registry::{ClusterRecord, MemberState};
use fleetbus_testsupport::{
    cargo_bin, free_addr, http_get, kubectl_bin, wait_for, wait_for_blocking, Agent, AgentCommand,
    DevCluster, DevClusterOpts, NatsServer,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Secret};
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};

pub mod fleet;
pub mod rules;
pub mod sync;

pub const HEARTBEAT: Duration = Duration::from_millis(500);
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);
pub const CONVERGE: Duration = Duration::from_secs(30);
pub const NAMESPACE: &str = "fleetbus-system";
pub const BUCKET: &str = "fleetbus-registry";

pub use fleetbus_testsupport::Member;

/// What the end-to-end tests add to a [`Member`]: their fast timings, the
/// Cluster objects, Events and metrics, waits that panic with what was seen.
pub trait MemberExt {
    /// A devcluster `dc_name` with 2 Nodes and the agent `agent_name` on it,
    /// with [`HEARTBEAT`], [`PEER_TIMEOUT`] and `extra` flags.
    async fn start(nats: &NatsServer, dc_name: &str, agent_name: &str, extra: &[&str]) -> Member;
    /// [`MemberExt::start`] with the agent's command line built by the caller
    /// (its cluster name, the secure mode's files, other flags): the bus,
    /// [`HEARTBEAT`] and [`PEER_TIMEOUT`] are added.
    async fn start_cmd(nats: &NatsServer, dc_name: &str, cmd: AgentCommand) -> Member;
    /// [`MemberExt::start`] with a devcluster started with `opts`.
    async fn start_with(
        nats: &NatsServer,
        opts: DevClusterOpts,
        agent_name: &str,
        extra: &[&str],
    ) -> Member;
    fn clusters(&self) -> Api<Cluster>;
    async fn list(&self) -> Result<Vec<Cluster>, String>;
    /// The Events in this member's `default` namespace.
    async fn events(&self) -> Result<Vec<Event>, String>;
    fn metrics(&self) -> Result<String, String>;
    fn metric(&self, series: &str) -> Result<f64, String>;
    async fn wait_ready(&mut self);
    /// Waits until the Cluster object `name` exists in this member's cluster.
    async fn wait_cluster(&self, name: &str);
    /// Waits until the metric `series` reaches `min`.
    async fn wait_metric_at_least(&self, series: &str, min: f64);
    /// The names of the Cluster objects in this member's cluster.
    async fn cluster_names(&self) -> Vec<String>;
}

/// `cmd` on the bus of `nats` with the tests' fast timings, on a devcluster
/// started with `opts`.
async fn launch_timed(nats: &NatsServer, opts: DevClusterOpts, cmd: AgentCommand) -> Member {
    let cmd = cmd
        .nats_url(nats.url())
        .heartbeat_interval(HEARTBEAT)
        .peer_timeout(PEER_TIMEOUT);
    Member::launch(opts, cmd).await.expect("start member")
}

impl MemberExt for Member {
    async fn start(nats: &NatsServer, dc_name: &str, agent_name: &str, extra: &[&str]) -> Member {
        let cmd = AgentCommand::new(agent_name).extra(extra.iter().copied());
        Self::start_cmd(nats, dc_name, cmd).await
    }

    async fn start_cmd(nats: &NatsServer, dc_name: &str, cmd: AgentCommand) -> Member {
        let opts = DevClusterOpts {
            nodes: 2,
            ..DevClusterOpts::new(dc_name)
        };
        launch_timed(nats, opts, cmd).await
    }

    async fn start_with(
        nats: &NatsServer,
        opts: DevClusterOpts,
        agent_name: &str,
        extra: &[&str],
    ) -> Member {
        let cmd = AgentCommand::new(agent_name).extra(extra.iter().copied());
        launch_timed(nats, opts, cmd).await
    }

    fn clusters(&self) -> Api<Cluster> {
        Api::all(self.client.clone())
    }

    async fn list(&self) -> Result<Vec<Cluster>, String> {
        self.clusters()
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| format!("{}: list clusters: {e}", self.name))
    }

    async fn events(&self) -> Result<Vec<Event>, String> {
        Api::<Event>::namespaced(self.client.clone(), "default")
            .list(&ListParams::default())
            .await
            .map(|l| l.items)
            .map_err(|e| e.to_string())
    }

    fn metrics(&self) -> Result<String, String> {
        let (code, body) = http_get(&format!("http://{}/metrics", self.metrics_addr))?;
        if code != 200 {
            return Err(format!("/metrics returned {code}"));
        }
        Ok(body)
    }

    fn metric(&self, series: &str) -> Result<f64, String> {
        metric_value(&self.metrics()?, series).ok_or_else(|| format!("no series {series}"))
    }

    async fn wait_ready(&mut self) {
        wait_readyz(self, 200, CONVERGE).await;
    }

    async fn wait_cluster(&self, name: &str) {
        wait_for(
            &format!("{}: Cluster {name} materialised", self.name),
            CONVERGE,
            || async {
                self.clusters()
                    .get(name)
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            },
        )
        .await;
    }

    async fn wait_metric_at_least(&self, series: &str, min: f64) {
        wait_for(
            &format!("{}: {series} >= {min}", self.name),
            CONVERGE,
            || async {
                match self.metric(series) {
                    Ok(n) if n >= min => Ok(()),
                    other => Err(format!("{other:?}")),
                }
            },
        )
        .await;
    }

    async fn cluster_names(&self) -> Vec<String> {
        self.list()
            .await
            .unwrap()
            .iter()
            .map(|c| c.name_any())
            .collect()
    }
}

/// A protocol-valid record of `name`/`id` with `labels`, as a peer would put it.
pub fn peer_record(
    name: &str,
    id: &str,
    labels: std::collections::BTreeMap<String, String>,
) -> ClusterRecord {
    let now = chrono::Utc::now();
    ClusterRecord {
        fitness: false,
        unserved_kinds: Vec::new(),
        certificate: None,
        name: name.into(),
        cluster_id: id.into(),
        state: MemberState::Active,
        labels,
        kubernetes_api_endpoints: vec![],
        metadata: Default::default(),
        features: vec![],
        agent_version: "0.0.0".into(),
        protocol: fleetbus_schemas::registry::PROTOCOL_VERSION,
        started_at: now,
        heartbeat_at: now,
        heartbeat_interval_seconds: 1,
        seq: 1,
        members: vec![name.into()],
        members_digest: None,
        api: Default::default(),
        beats: false,
    }
}

/// Asserts that `m`'s agent logged `needle`.
pub fn assert_logged(m: &Member, needle: &str) {
    let log = m.agent.log();
    assert!(log.contains(needle), "{}: no {needle:?} in:\n{log}", m.name);
}

/// `m`'s `/readyz`: status code and body.
pub fn readyz(m: &Member) -> Result<(u16, String), String> {
    m.readyz()
}

/// Waits until `m`'s `/readyz` answers `code`; returns the body.
pub async fn wait_readyz(m: &Member, code: u16, timeout: Duration) -> String {
    wait_readyz_at(&m.name, &m.metrics_addr, code, timeout).await
}

/// Waits until `http://{addr}/readyz` answers `code`; returns the body.
pub async fn wait_readyz_at(what: &str, addr: &str, code: u16, timeout: Duration) -> String {
    wait_for(&format!("{what} /readyz {code}"), timeout, || async move {
        match http_get(&format!("http://{addr}/readyz")) {
            Ok((c, body)) if c == code => Ok(body),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

/// A converged agent did not have to retry anything: in particular it did
/// not create an object again because its watch cache lagged behind its own
/// create (an earlier bug that filled mesh logs with 409 AlreadyExists). In a
/// fresh fleet no create should even meet an existing object.
/// Installs upstream SIG Multicluster CRDs (`files` of
/// `fleetbus_testsupport::upstream_crds()`) on `m`, as published, with kubectl.
pub fn install_upstream_crds(m: &Member, files: &[&str]) {
    let dir = fleetbus_testsupport::upstream_crds();
    for file in files {
        let path = dir.join(file);
        let out = m
            .cluster
            .kubectl("1.33", &["create", "-f", path.to_str().unwrap()]);
        assert!(
            out.status.success(),
            "{}: {}",
            m.name,
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

pub fn assert_quiet_log(m: &Member) {
    let log = m.agent.log();
    for bad in ["already exists", "exists already", "reconcile failed"] {
        assert!(
            !log.contains(bad),
            "{}: agent log contains {bad:?}:\n{log}",
            m.name
        );
    }
}

pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.strip_prefix(' '))
        })
        .and_then(|v| v.trim().parse().ok())
}

pub fn state(c: &Cluster) -> Option<ClusterState> {
    c.status.as_ref().and_then(|s| s.state)
}

pub fn type_of(c: &Cluster) -> Option<ClusterType> {
    c.status.as_ref().and_then(|s| s.type_)
}

pub fn condition(c: &Cluster, type_: &str) -> Option<String> {
    c.status
        .as_ref()?
        .conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| x.status.clone())
}

pub fn summary(items: &[Cluster]) -> String {
    items
        .iter()
        .map(|c| {
            format!(
                "{}({:?},{:?},synced={:?})",
                c.name_any(),
                type_of(c),
                state(c),
                condition(c, "ClustersSynced")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every member has exactly one Cluster object per name in `names`: Local for
/// itself, Peer for the others, all Ready and ClustersSynced.
pub async fn wait_mesh(members: &[&Member], names: &[&str]) {
    for m in members {
        let what = format!("{} to see a synced mesh of {names:?}", m.name);
        wait_for(&what, CONVERGE, || async {
            let items = m.list().await?;
            let ok = items.len() == names.len()
                && names.iter().all(|n| {
                    items.iter().any(|c| {
                        let want = if *n == m.name {
                            ClusterType::Local
                        } else {
                            ClusterType::Peer
                        };
                        c.name_any() == *n
                            && type_of(c) == Some(want)
                            && state(c) == Some(ClusterState::Ready)
                            && condition(c, "ClustersSynced").as_deref() == Some("True")
                    })
                });
            if ok {
                Ok(())
            } else {
                Err(summary(&items))
            }
        })
        .await;
    }
}

pub async fn wait_peer_state(m: &Member, peer: &str, want: ClusterState, timeout: Duration) {
    wait_for(
        &format!("{} to show {peer} {want:?}", m.name),
        timeout,
        || async {
            let c = m.clusters().get(peer).await.map_err(|e| e.to_string())?;
            if state(&c) == Some(want) {
                Ok(())
            } else {
                Err(format!(
                    "{:?} {:?}",
                    state(&c),
                    c.status.as_ref().and_then(|s| s.message.clone())
                ))
            }
        },
    )
    .await;
}

pub async fn registry_kv(nats: &NatsServer) -> async_nats::jetstream::kv::Store {
    let client = async_nats::connect(nats.url()).await.expect("connect nats");
    async_nats::jetstream::new(client)
        .get_key_value(BUCKET)
        .await
        .expect("registry bucket exists")
}

/// The beats bucket, opened with a plain NATS client (as an intruder would).
pub async fn beats_kv(nats: &NatsServer) -> async_nats::jetstream::kv::Store {
    let client = async_nats::connect(nats.url()).await.expect("connect nats");
    async_nats::jetstream::new(client)
        .get_key_value("fleetbus-beats")
        .await
        .expect("beats bucket exists")
}

pub async fn registry_keys(kv: &async_nats::jetstream::kv::Store) -> Vec<String> {
    let mut keys: Vec<String> = pulled(kv, ">", true)
        .await
        .into_iter()
        .filter(|(_, op, _)| *op == async_nats::jetstream::kv::Operation::Put)
        .map(|(key, _, _)| key)
        .collect();
    keys.sort();
    keys
}

/// The last entry of every key of `kv` matching `filter`, read by a pull
/// consumer, as (key, operation, value). Not async-nats' `keys` or `watch`:
/// they make push consumers, which deliver nothing to a member of a fleet
/// whose streams have their own account (SECURITY.md).
pub async fn pulled(
    kv: &async_nats::jetstream::kv::Store,
    filter: &str,
    headers_only: bool,
) -> Vec<(String, async_nats::jetstream::kv::Operation, Vec<u8>)> {
    let mut changes = pull_watch(kv, filter, headers_only).await;
    let mut out = Vec::new();
    if changes.1 == 0 {
        return out;
    }
    while let Some((entry, pending)) = changes.0.next().await {
        out.push(entry);
        if pending == 0 {
            break;
        }
    }
    out
}

/// A pull watch of `kv`'s keys matching `filter`, from the last value of each:
/// (stream of ((key, operation, value), pending after it), pending at the start).
pub async fn pull_watch(
    kv: &async_nats::jetstream::kv::Store,
    filter: &str,
    headers_only: bool,
) -> (
    futures::stream::BoxStream<
        'static,
        ((String, async_nats::jetstream::kv::Operation, Vec<u8>), u64),
    >,
    u64,
) {
    use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
    use async_nats::jetstream::kv::Operation;
    let consumer = kv
        .stream
        .create_consumer(OrderedConfig {
            filter_subject: format!("{}{filter}", kv.prefix),
            deliver_policy: DeliverPolicy::LastPerSubject,
            headers_only,
            ..OrderedConfig::default()
        })
        .await
        .expect("a pull consumer of the bucket");
    let pending = consumer.cached_info().num_pending;
    let prefix = kv.prefix.clone();
    let messages = consumer.messages().await.expect("its messages");
    let entries = messages.map(move |m| {
        let m = m.expect("a message of the bucket");
        let left = m.info().expect("JetStream metadata").pending;
        let op = match m.headers.as_ref().and_then(|h| h.get("KV-Operation")) {
            Some(v) if v.as_str() == "DEL" => Operation::Delete,
            Some(v) if v.as_str() == "PURGE" => Operation::Purge,
            _ => Operation::Put,
        };
        let key = m
            .subject
            .strip_prefix(prefix.as_str())
            .unwrap_or_default()
            .to_owned();
        ((key, op, m.payload.to_vec()), left)
    });
    (entries.boxed(), pending)
}

/// The first key of `kv` starting with `prefix` (e.g. `cluster.c2.`); panics
/// when there is none.
pub async fn key_starting(kv: &async_nats::jetstream::kv::Store, prefix: &str) -> String {
    registry_keys(kv)
        .await
        .into_iter()
        .find(|k| k.starts_with(prefix))
        .unwrap_or_else(|| panic!("no key {prefix}* in the bucket"))
}

/// Runs `fleetbus <args>` against `nats` as an operator would; returns (exit
/// code, stdout, stderr).
#[allow(dead_code)] // not every test binary drives the CLI
pub async fn fleetbus_cli(nats: &NatsServer, args: &[&str]) -> (Option<i32>, String, String) {
    let out = tokio::process::Command::new(cargo_bin("fleetbus"))
        .args(args)
        .env("FLEETBUS_NATS_URL", nats.url())
        .env_remove("FLEETBUS_SUBJECT_PREFIX")
        .output()
        .await
        .expect("run fleetbus");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
