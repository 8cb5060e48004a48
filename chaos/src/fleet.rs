//! A fleet of real processes for one scenario: a nats-server with a file
//! store and, per cluster, a devcluster and its agent (`tests/support`'s
//! `Member`), the agent reaching NATS and its API server through a [`Proxy`]
//! each so that a scenario can cut, stall or slow either link.
//!
//! One ResourceSyncRule, created on the first cluster, copies the ConfigMaps
//! of [`NS`] from every cluster to every other; [`Fleet::rule_model`] is the
//! runner's model of it for the oracle.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetbus_testsupport::{
    cargo_bin, http_get, try_wait_for, Agent, AgentCommand, DevCluster, DevClusterOpts, Member,
    NatsServer,
};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::Api;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::oracle::{Oracle, RuleModel, Violation};
use crate::proxy::Proxy;
use crate::workload::{list_origin, list_sink, lock, watch_sink, Done, Shared, Writer};

/// The namespace the workload writes in and the rule matches.
pub const NS: &str = "load";
/// How long starting a process or creating the rule may take.
pub const SETUP: Duration = Duration::from_secs(60);
/// The devcluster's `/debug/writes` key of ConfigMaps.
const CONFIGMAPS: &str = "core/configmaps";

/// One cluster of the fleet and the two proxies in front of its agent.
pub struct Node {
    pub member: Member,
    /// Between the agent and NATS.
    pub nats: Proxy,
    /// Between the agent and its API server (the agent's kubeconfig points here).
    pub api: Proxy,
    /// The agent's command line as the fleet started it.
    pub cmd: AgentCommand,
    /// The agent binary it runs (the workspace's, or an earlier revision's).
    pub bin: PathBuf,
}

impl Node {
    pub fn name(&self) -> &str {
        &self.member.name
    }

    /// ConfigMap writes the devcluster served so far (`/debug/writes`).
    pub async fn configmap_writes(&self) -> anyhow::Result<u64> {
        let w = self.member.cluster.writes().await?;
        Ok(w.get(CONFIGMAPS).and_then(|v| v.as_u64()).unwrap_or(0))
    }

    /// A violation if the agent is no longer running (`while`: under what).
    pub fn agent_exited(&mut self, while_: &str) -> Option<String> {
        (!self.member.agent.is_running())
            .then(|| format!("{}: the agent exited {while_}", self.name()))
    }

    /// Stops the agent (SIGTERM) if it runs and starts it again with `extra`
    /// flags after the fleet's own (e.g. `--leave-on-shutdown`).
    pub fn respawn_with(&mut self, extra: &[&str]) -> anyhow::Result<()> {
        if self.member.agent.is_running() {
            self.member.agent.stop();
        }
        self.member.agent = Agent::prepare_bin(
            &self.bin,
            self.cmd.clone().extra(extra.iter().copied()).argv(),
        )?;
        self.member.agent.spawn()
    }

    /// Stops the agent (SIGTERM) if it runs and starts `bin` in its place
    /// with the same command line: an upgrade (or a downgrade). The log of
    /// the agent it replaced is returned (the new one writes its own).
    pub fn respawn_on(&mut self, bin: &Path) -> anyhow::Result<String> {
        let log = self.member.agent.log();
        self.bin = bin.to_path_buf();
        self.respawn_with(&[])?;
        Ok(log)
    }

    /// The state (`Ready`, `Disconnected`, `Left`, …) this cluster's agent
    /// shows for `peer` in its Cluster object, if it shows one.
    pub async fn peer_state(&self, peer: &str) -> anyhow::Result<Option<String>> {
        let ar = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("fleetbus.io", "v1alpha1", "Cluster"),
            "clusters",
        );
        let cluster = Api::<DynamicObject>::all_with(self.member.client.clone(), &ar)
            .get_opt(peer)
            .await?;
        Ok(cluster.and_then(|c| {
            c.data
                .pointer("/status/state")
                .and_then(|s| s.as_str())
                .map(str::to_owned)
        }))
    }

    /// Waits until this cluster's agent shows `peer` in state `want`.
    pub async fn wait_peer_state(&self, peer: &str, want: &str) -> anyhow::Result<()> {
        let what = format!("{} to show {peer} {want}", self.name());
        try_wait_for(&what, SETUP, || async {
            match self.peer_state(peer).await {
                Ok(Some(s)) if s == want => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
        .map_err(anyhow::Error::msg)
    }

    /// Writes of copies the agent made since it started: its
    /// `fleetbus_sync_writes_total` (creates, updates, recreates, deletes,
    /// orphans; not status writes), from its `/metrics`.
    pub fn agent_copy_writes(&self) -> anyhow::Result<u64> {
        self.agent_counter("fleetbus_sync_writes_total", Some(r#"op="status""#))
    }

    /// The agent's copy updates the API server found changed nothing (it
    /// kept the copy's resourceVersion): `fleetbus_sync_writes_total{op="unchanged"}`.
    pub fn agent_unchanged_writes(&self) -> anyhow::Result<u64> {
        self.agent_counter_where("fleetbus_sync_writes_total", |l| {
            l.contains(r#"op="unchanged""#)
        })
    }

    /// Envelopes the agent published since it started (snapshots and
    /// tombstones: `fleetbus_sync_published_total`).
    pub fn agent_published(&self) -> anyhow::Result<u64> {
        self.agent_counter("fleetbus_sync_published_total", None)
    }

    /// The sum of the agent's counter `name` over its series, but those
    /// whose labels contain `except`.
    fn agent_counter(&self, name: &str, except: Option<&str>) -> anyhow::Result<u64> {
        self.agent_counter_where(name, |l| except.is_none_or(|e| !l.contains(e)))
    }

    /// The sum of the agent's counter `name` over the series `keep` keeps.
    fn agent_counter_where(&self, name: &str, keep: impl Fn(&str) -> bool) -> anyhow::Result<u64> {
        let url = format!("http://{}/metrics", self.member.metrics_addr);
        let (code, body) = http_get(&url).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(code == 200, "{}: GET /metrics: {code}", self.name());
        let series = format!("{name}{{");
        Ok(body
            .lines()
            .filter(|l| l.starts_with(&series))
            .filter(|l| keep(l))
            .filter_map(|l| l.split_whitespace().last()?.parse::<f64>().ok())
            .sum::<f64>() as u64)
    }

    /// Waits until the agent's `/readyz` answers 200.
    pub async fn wait_ready(&self) -> anyhow::Result<()> {
        try_wait_for(&format!("{} /readyz", self.name()), SETUP, || async {
            match self.member.readyz() {
                Ok((200, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
        .map_err(|e| anyhow::anyhow!("{e}\n{}", log_tail(&self.member.agent.log())))
    }
}

/// The last lines of a log, for an error.
fn log_tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The running fleet, the oracle its watches and writers feed, and the
/// watches themselves.
pub struct Fleet {
    pub nats: NatsServer,
    pub nodes: Vec<Node>,
    pub oracle: Shared,
    watch_stop: CancellationToken,
    watches: Vec<JoinHandle<()>>,
}

/// Writers running on every origin until [`Load::stop`].
pub struct Load {
    stop: CancellationToken,
    writers: Vec<JoinHandle<Done>>,
}

impl Load {
    /// Stops the writers and waits for their last write to end (again: nothing).
    pub async fn stop(&mut self) -> Done {
        self.stop.cancel();
        let mut total = Done::default();
        for w in self.writers.drain(..) {
            // A writer that panicked left nothing the final list does not settle.
            if let Ok(d) = w.await {
                total.acknowledged += d.acknowledged;
                total.failed += d.failed;
            }
        }
        total
    }
}

/// How a scenario's convergence ended.
pub struct Converged {
    /// Time from the start of the wait until every sink held what the oracle
    /// expects (None: the deadline passed first).
    pub after: Option<Duration>,
    /// Every violation at the end (history ones included).
    pub violations: Vec<Violation>,
}

impl Fleet {
    /// Starts NATS and the clusters `names`, each agent through its proxies,
    /// creates the rule and starts a watch on every sink.
    pub async fn start(names: &[&str]) -> anyhow::Result<Fleet> {
        Fleet::start_on(names, &cargo_bin("fleetbus-agent")).await
    }

    /// [`Fleet::start`] with every agent running `bin`.
    pub async fn start_on(names: &[&str], bin: &Path) -> anyhow::Result<Fleet> {
        let nats = NatsServer::start()?;
        let mut nodes = Vec::new();
        for name in names {
            nodes.push(start_node(name, &nats, bin).await?);
        }
        for node in &nodes {
            node.wait_ready().await?;
        }
        create_rule(&nodes[0].member).await?;
        let oracle: Shared = Arc::new(Mutex::new(Oracle::default()));
        let watch_stop = CancellationToken::new();
        let mut watches = Vec::new();
        for node in &nodes {
            watches.push(
                watch_sink(
                    node.name().to_owned(),
                    node.member.client.clone(),
                    NS.to_owned(),
                    oracle.clone(),
                    watch_stop.clone(),
                )
                .await,
            );
        }
        Ok(Fleet {
            nats,
            nodes,
            oracle,
            watch_stop,
            watches,
        })
    }

    /// The last cluster: the one a scenario's faults strike.
    pub fn last(&self) -> anyhow::Result<&Node> {
        self.nodes.last().context("a fleet without clusters")
    }

    /// Every cluster copies to every other.
    pub fn rule_model(&self) -> RuleModel {
        let all: BTreeSet<String> = self.nodes.iter().map(|n| n.name().to_owned()).collect();
        RuleModel {
            namespaces: BTreeSet::from([NS.to_owned()]),
            sources: all.clone(),
            sinks: all,
        }
    }

    /// Starts `per_origin` writers on every cluster, each owning `objects`
    /// objects and pausing `pace` between steps; seeded from `seed`.
    pub fn start_load(&self, seed: u64, per_origin: usize, objects: usize, pace: Duration) -> Load {
        let all: Vec<&str> = self.nodes.iter().map(Node::name).collect();
        self.start_load_on(&all, seed, per_origin, objects, pace)
    }

    /// [`Fleet::start_load`] on the clusters named in `origins` only (each
    /// writer seeded as `start_load` would seed it).
    pub fn start_load_on(
        &self,
        origins: &[&str],
        seed: u64,
        per_origin: usize,
        objects: usize,
        pace: Duration,
    ) -> Load {
        self.start_writers(origins, seed, 0..per_origin, objects, pace)
    }

    /// [`Fleet::start_load_on`] with the writers numbered `writers` on each
    /// origin: a load started again after one was stopped writes objects of
    /// its own (a writer knows the versions of its own objects only).
    pub fn start_writers(
        &self,
        origins: &[&str],
        seed: u64,
        writers: std::ops::Range<usize>,
        objects: usize,
        pace: Duration,
    ) -> Load {
        let stop = CancellationToken::new();
        let mut handles = Vec::new();
        for (i, node) in self.nodes.iter().enumerate() {
            if !origins.contains(&node.name()) {
                continue;
            }
            for index in writers.clone() {
                let w = Writer {
                    origin: node.name().to_owned(),
                    client: node.member.client.clone(),
                    namespace: NS.to_owned(),
                    index,
                    objects,
                    pace,
                };
                // Each origin's writers draw from their own streams.
                let seed = seed.wrapping_add((i as u64).wrapping_mul(0x1000_0001));
                handles.push(tokio::spawn(w.run(seed, self.oracle.clone(), stop.clone())));
            }
        }
        Load {
            stop,
            writers: handles,
        }
    }

    /// ConfigMap writes all devclusters served so far.
    pub async fn configmap_writes(&self) -> anyhow::Result<u64> {
        let mut sum = 0;
        for n in &self.nodes {
            sum += n.configmap_writes().await?;
        }
        Ok(sum)
    }

    /// Settles the oracle from every origin's list, then polls every sink
    /// until it holds what the oracle expects or `deadline` passes.
    pub async fn converge(&self, deadline: Duration) -> anyhow::Result<Converged> {
        self.converge_to(&self.rule_model(), deadline).await
    }

    /// [`Fleet::converge`] to what `model` wants: only its sinks are polled
    /// (a cluster whose agent left or died is no sink any more).
    pub async fn converge_to(
        &self,
        model: &RuleModel,
        deadline: Duration,
    ) -> anyhow::Result<Converged> {
        for n in &self.nodes {
            let listed = list_origin(&n.member.client, n.name(), NS)
                .await
                .with_context(|| format!("list origin {}", n.name()))?;
            lock(&self.oracle).settle(n.name(), listed);
        }
        let start = Instant::now();
        let mut progress = start;
        loop {
            let mut held = Vec::new();
            for n in self.nodes.iter().filter(|n| model.sinks.contains(n.name())) {
                // A sink that does not answer yet is not converged.
                if let Ok(copies) = list_sink(n.name(), &n.member.client, NS).await {
                    held.extend(copies);
                }
            }
            let violations = lock(&self.oracle).check(model, &held);
            // What a sink did during the run (went back, deleted while
            // present) never heals: convergence is about what it holds.
            if !violations.iter().any(held_not_right) {
                return Ok(Converged {
                    after: Some(start.elapsed()),
                    violations,
                });
            }
            // A long wait says how far it got (a slow catch-up vs a stuck one).
            if progress.elapsed() >= Duration::from_secs(10) {
                progress = Instant::now();
                let left: Vec<_> = violations.iter().filter(|v| held_not_right(v)).collect();
                // One of them, so that a stuck sink can be told from a slow one.
                let e_g = left.first().map(ToString::to_string).unwrap_or_default();
                eprintln!(
                    "fleetbus-chaos: converging for {:.0} s: {} copies not right yet (e.g. {e_g})",
                    start.elapsed().as_secs_f64(),
                    left.len()
                );
            }
            if start.elapsed() > deadline {
                return Ok(Converged {
                    after: None,
                    violations,
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Copies every agent's log into `dir` (`<cluster>.log`), for a failed
    /// scenario: the processes' own directories go with the fleet.
    ///
    /// The last lines of each agent's and API server's log are printed to
    /// stderr as well: a failure in CI, whose temporary directory is gone
    /// by the time anyone reads its output, still says what each agent did
    /// last.
    pub fn keep_logs(&self, dir: &std::path::Path) -> std::io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for n in &self.nodes {
            let agent = n.member.agent.log();
            let api = n.member.cluster.log();
            eprint!(
                "{}",
                named_tail(&format!("{} agent", n.name()), &agent, TAIL_LINES)
            );
            eprint!(
                "{}",
                named_tail(&format!("{} API server", n.name()), &api, TAIL_LINES / 2)
            );
            std::fs::write(dir.join(format!("{}.log", n.name())), agent)?;
            std::fs::write(dir.join(format!("{}-api.log", n.name())), api)?;
        }
        Ok(())
    }

    /// Stops the watches (the processes stop when the fleet is dropped).
    pub async fn stop_watches(&mut self) {
        self.watch_stop.cancel();
        for w in self.watches.drain(..) {
            let _ = w.await;
        }
    }
}

/// How many of its last log lines a failed run prints per agent.
const TAIL_LINES: usize = 40;

/// The last `lines` lines of `log`, each prefixed with `who`.
fn named_tail(who: &str, log: &str, lines: usize) -> String {
    let all: Vec<&str> = log.lines().collect();
    let from = all.len().saturating_sub(lines);
    let mut out = format!(
        "--- {who}: last {} of {} log lines\n",
        all.len() - from,
        all.len()
    );
    for l in &all[from..] {
        out.push_str(&format!("[{who}] {l}\n"));
    }
    out
}

/// A violation of what a sink holds now (not of its history).
fn held_not_right(v: &Violation) -> bool {
    matches!(
        v,
        Violation::Missing { .. } | Violation::Stale { .. } | Violation::Extra { .. }
    )
}

/// Starts a devcluster named `name` with namespace [`NS`], and its agent
/// (`bin`) reaching `nats` and the devcluster through a proxy each.
async fn start_node(name: &str, nats: &NatsServer, bin: &Path) -> anyhow::Result<Node> {
    let nats_proxy = Proxy::start(SocketAddr::from(([127, 0, 0, 1], nats.port()))).await?;
    let cmd = AgentCommand::new(name).nats_url(format!("nats://{}", nats_proxy.addr()));
    // `/debug/faults` on: a scenario may put the API server under pressure.
    let mut opts = DevClusterOpts::new(name);
    opts.extra_args.push("--debug-faults".into());
    let mut member = Member::prepare(opts, cmd.clone()).await?;
    let api = Proxy::start(SocketAddr::from(([127, 0, 0, 1], member.cluster.port()))).await?;
    let kubeconfig = kubeconfig_via(&member.cluster, &api)?;
    let metrics: SocketAddr = member.metrics_addr.parse()?;
    let cmd = cmd.kubeconfig(kubeconfig).metrics_addr(metrics);
    member.agent = Agent::prepare_bin(bin, cmd.argv())?;
    member.create_namespace(NS).await?;
    member.agent.spawn()?;
    Ok(Node {
        member,
        nats: nats_proxy,
        api,
        cmd,
        bin: bin.to_path_buf(),
    })
}

/// A copy of the devcluster's kubeconfig whose server is the proxy (the
/// certificate names 127.0.0.1 either way).
fn kubeconfig_via(cluster: &DevCluster, proxy: &Proxy) -> anyhow::Result<PathBuf> {
    let original = std::fs::read_to_string(cluster.kubeconfig())
        .with_context(|| format!("read {}", cluster.kubeconfig().display()))?;
    let url = cluster.url();
    let scheme = url.split("://").next().unwrap_or("http");
    let via = original.replace(url, &format!("{scheme}://{}", proxy.addr()));
    anyhow::ensure!(via != original, "kubeconfig does not name {url}");
    let path = cluster.kubeconfig().with_file_name("kubeconfig-via-proxy");
    std::fs::write(&path, via)?;
    Ok(path)
}

/// The ResourceSyncRule for ConfigMaps in [`NS`], on `m` (the built-in rule
/// copies it to every cluster).
async fn create_rule(m: &Member) -> anyhow::Result<()> {
    create_rule_json(&m.client, rule_json("chaos")).await
}

/// The fleet's rule (ConfigMaps in [`NS`] from every cluster to every
/// other) named `name`: the one created, or a candidate like it.
pub(crate) fn rule_json(name: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "fleetbus.io/v1alpha1",
        "kind": "ResourceSyncRule",
        "metadata": {"name": name},
        "spec": {
            "groupVersionKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "rules": [{"match": [{"namespaces": [NS]}]}],
        },
    })
}

/// Creates the ResourceSyncRule `rule` through `client`. The CRD is
/// installed by the agent at start: retried until it is served.
pub(crate) async fn create_rule_json(
    client: &kube::Client,
    rule: serde_json::Value,
) -> anyhow::Result<()> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleetbus.io", "v1alpha1", "ResourceSyncRule"),
        "resourcesyncrules",
    );
    let rule: DynamicObject = serde_json::from_value(rule)?;
    try_wait_for("rule created", SETUP, || async {
        Api::<DynamicObject>::all_with(client.clone(), &ar)
            .create(&PostParams::default(), &rule)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await
    .map_err(anyhow::Error::msg)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oracle::Source;

    #[test]
    fn a_failed_run_prints_each_logs_last_lines_named() {
        let out = named_tail("c3 agent", "one\ntwo\nthree\n", 2);
        assert_eq!(
            out,
            "--- c3 agent: last 2 of 3 log lines\n[c3 agent] two\n[c3 agent] three\n"
        );
        assert_eq!(
            named_tail("c1 agent", "", 5),
            "--- c1 agent: last 0 of 0 log lines\n"
        );
    }

    #[test]
    fn convergence_waits_on_what_sinks_hold_not_on_their_history() {
        let source = Source {
            origin: "c1".into(),
            namespace: NS.into(),
            name: "c1-w0-0".into(),
        };
        let sink = "c2".to_owned();
        assert!(held_not_right(&Violation::Missing {
            sink: sink.clone(),
            source: source.clone()
        }));
        assert!(held_not_right(&Violation::Extra {
            sink: sink.clone(),
            source: source.clone()
        }));
        // Already happened: waiting longer cannot undo it, the row reports it.
        assert!(!held_not_right(&Violation::WentBack {
            sink: sink.clone(),
            source: source.clone(),
            from: 3,
            to: 2
        }));
        assert!(!held_not_right(&Violation::DeletedWhilePresent {
            sink,
            source
        }));
    }
}
