//! A local fleet of real processes: a NATS ([`Bus`]: one nats-server, or a
//! topology of `deploy/nats/`), and per cluster a devcluster and a
//! `fleetbus-agent` (started with `fleetbus-testsupport`), with a
//! ResourceSyncRule for the ConfigMaps of [`NS`] created on the first.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub use fleetbus_testsupport::Member;
use fleetbus_testsupport::{AgentCommand, DevClusterOpts};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::Api;

use crate::bus::{Bus, Topology};
use crate::objects::{self, NS};
use crate::poll::poll;
use crate::recorder::Recorder;

/// How long starting a process, a rule copy or a warm-up object may take.
pub const SETUP: Duration = Duration::from_secs(60);
/// The rule every fleet syncs with.
pub const RULE: &str = "bench";
/// Devcluster log filter that logs every request (reads too) so they can be counted.
pub const LOG_REQUESTS: &str = "info,fleetbus_devcluster=debug";

/// What the bench adds to a [`Member`]: its namespace, request counts, and
/// errors that carry the agent's log instead of panicking.
// Implemented for `Member` only, whose futures the compiler sees through:
// no caller needs a `Send` bound spelled out.
#[allow(async_fn_in_trait)]
pub trait BenchMember: Sized {
    /// Starts a devcluster named `name` and creates namespace [`NS`] in it;
    /// its agent (against `nats`, if given, where [`Bus::placement`] puts it)
    /// is prepared but not running:
    /// [`BenchMember::start_agent`] starts it.
    async fn bench_cluster(
        name: &str,
        log_requests: bool,
        nats: Option<&Bus>,
    ) -> anyhow::Result<Self> {
        Self::bench_cluster_with(name, log_requests, nats, &[]).await
    }
    /// [`BenchMember::bench_cluster`] with more devcluster flags (e.g.
    /// `--debug-faults`).
    async fn bench_cluster_with(
        name: &str,
        log_requests: bool,
        nats: Option<&Bus>,
        devcluster_args: &[&str],
    ) -> anyhow::Result<Self>;
    /// Starts this cluster's agent; returns the instant it was spawned.
    fn start_agent(&mut self) -> anyhow::Result<Instant>;
    /// Waits until the agent's `/readyz` answers 200.
    async fn wait_ready(&self) -> anyhow::Result<Instant>;
    fn configmaps(&self) -> Api<ConfigMap>;
    fn agent_pid(&self) -> Option<u32>;
    /// A watch on this cluster's ConfigMaps in [`NS`].
    async fn recorder(&self) -> anyhow::Result<Recorder>;
    /// Requests the devcluster logged so far (every request when started with
    /// `log_requests`, else only writes and failures).
    fn requests_logged(&self) -> usize;
    /// The logged requests by "METHOD path", object names starting with
    /// `prefix` replaced by `<name>` (to see which requests a change costs).
    fn requests_by_kind(&self, prefix: &str) -> BTreeMap<String, usize>;
    /// `e` with the tail of the agent's log, for a failed setup.
    fn with_log(&self, e: anyhow::Error) -> anyhow::Error;
    /// The sum of every series of the agent's metric `name` (all labels),
    /// read from its `/metrics`; None if it cannot be read.
    fn agent_metric(&self, name: &str) -> Option<f64>;
}

impl BenchMember for Member {
    async fn bench_cluster_with(
        name: &str,
        log_requests: bool,
        nats: Option<&Bus>,
        devcluster_args: &[&str],
    ) -> anyhow::Result<Member> {
        let mut opts = DevClusterOpts::new(name);
        opts.extra_args
            .extend(devcluster_args.iter().map(|a| (*a).to_owned()));
        if log_requests {
            opts.env.push(("RUST_LOG".into(), LOG_REQUESTS.into()));
        }
        let mut cmd = AgentCommand::new(name);
        if let Some(nats) = nats {
            let (url, replicas) = nats.placement(name);
            cmd = cmd.nats_url(url).replicas(replicas);
        }
        let member = Member::prepare(opts, cmd).await?;
        member.create_namespace(NS).await?;
        Ok(member)
    }

    fn start_agent(&mut self) -> anyhow::Result<Instant> {
        let at = Instant::now();
        self.agent.spawn()?;
        Ok(at)
    }

    async fn wait_ready(&self) -> anyhow::Result<Instant> {
        poll(&format!("{} /readyz", self.name), SETUP, || async {
            match self.readyz() {
                Ok((200, _)) => Ok(Instant::now()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
        .map_err(|e| self.with_log(e))
    }

    fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), NS)
    }

    fn agent_pid(&self) -> Option<u32> {
        self.agent.pid()
    }

    fn agent_metric(&self, name: &str) -> Option<f64> {
        let (status, body) =
            fleetbus_testsupport::http_get(&format!("http://{}/metrics", self.metrics_addr))
                .ok()?;
        (status == 200).then(|| metric_sum(&body, name))
    }

    async fn recorder(&self) -> anyhow::Result<Recorder> {
        Recorder::start(self.client.clone(), NS, SETUP).await
    }

    fn requests_logged(&self) -> usize {
        self.cluster
            .log()
            .lines()
            .filter(|l| l.contains(" request "))
            .count()
    }

    fn requests_by_kind(&self, prefix: &str) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for line in self
            .cluster
            .log()
            .lines()
            .filter(|l| l.contains(" request "))
        {
            let field = |key: &str| {
                line.split_whitespace()
                    .find_map(|w| w.strip_prefix(key))
                    .unwrap_or("?")
                    .to_owned()
            };
            let path: Vec<String> = field("path=")
                .split('/')
                .map(|seg| {
                    if seg.starts_with(prefix) {
                        "<name>".to_owned()
                    } else {
                        seg.to_owned()
                    }
                })
                .collect();
            *out.entry(format!("{} {}", field("method="), path.join("/")))
                .or_insert(0) += 1;
        }
        out
    }

    fn with_log(&self, e: anyhow::Error) -> anyhow::Error {
        let log = self.agent.log();
        let tail: String = log
            .lines()
            .rev()
            .take(20)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect::<Vec<_>>()
            .join("\n");
        e.context(format!("{}: agent log tail:\n{tail}", self.name))
    }
}

/// A NATS and `n` clusters `c1..cn` with agents; c1 holds the rule.
pub struct Fleet {
    pub bus: Bus,
    pub nodes: Vec<Member>,
}

impl Fleet {
    /// Starts the fleet, creates the rule on c1 and waits until a warm-up
    /// object created on c1 reached every other cluster.
    pub async fn start(n: usize, log_requests: bool) -> anyhow::Result<Fleet> {
        Self::start_on(Topology::Single, n, log_requests).await
    }

    /// [`Fleet::start`] on `topology`. A leaf topology is joined (its stream
    /// sources added) once every agent is ready, for `c1..cn` and for a `c3`
    /// that a scenario may add later.
    pub async fn start_on(
        topology: Topology,
        n: usize,
        log_requests: bool,
    ) -> anyhow::Result<Fleet> {
        Self::start_with(topology, n, log_requests, &[]).await
    }

    /// [`Fleet::start_on`] with more flags for every devcluster.
    pub async fn start_with(
        topology: Topology,
        n: usize,
        log_requests: bool,
        devcluster_args: &[&str],
    ) -> anyhow::Result<Fleet> {
        let bus = Bus::start(topology).await?;
        let mut nodes = Vec::new();
        for i in 1..=n {
            let name = format!("c{i}");
            let mut node =
                Member::bench_cluster_with(&name, log_requests, Some(&bus), devcluster_args)
                    .await?;
            node.start_agent()?;
            nodes.push(node);
        }
        for node in &nodes {
            node.wait_ready().await?;
        }
        let names: Vec<String> = (1..=n.max(3)).map(|i| format!("c{i}")).collect();
        bus.join(&names).await?;
        let fleet = Fleet { bus, nodes };
        fleet.create_rule().await?;
        fleet.warm_up("warm-up").await?;
        Ok(fleet)
    }

    pub fn origin(&self) -> &Member {
        &self.nodes[0]
    }

    pub fn sinks(&self) -> &[Member] {
        &self.nodes[1..]
    }

    /// The ResourceSyncRule for ConfigMaps in [`NS`], created on c1 (the
    /// built-in rule replicates it to every cluster).
    async fn create_rule(&self) -> anyhow::Result<()> {
        create_rule(self.origin()).await
    }

    /// Creates `name` on c1 and waits until every other cluster has its copy.
    pub async fn warm_up(&self, name: &str) -> anyhow::Result<()> {
        let mut recorders = Vec::new();
        for s in self.sinks() {
            recorders.push(s.recorder().await?);
        }
        objects::create(&self.origin().configmaps(), name, "0").await?;
        for (s, r) in self.sinks().iter().zip(&recorders) {
            r.wait_seen(name, "0", SETUP)
                .await
                .map_err(|e| s.with_log(e))?;
        }
        Ok(())
    }
}

/// Creates [`RULE`] (the ConfigMaps of [`NS`], every cluster a source and a
/// sink) on `on`, once its agent has installed the CRD.
pub async fn create_rule(on: &Member) -> anyhow::Result<()> {
    create_rule_for(on, RULE, NS).await
}

/// Creates rule `name` for the ConfigMaps of namespace `ns` on `on`.
pub async fn create_rule_for(on: &Member, name: &str, ns: &str) -> anyhow::Result<()> {
    let ar = rule_resource();
    let rule: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "fleetbus.io/v1alpha1",
        "kind": "ResourceSyncRule",
        "metadata": {"name": name},
        "spec": {
            "groupVersionKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "rules": [{"match": [{"namespaces": [ns]}]}],
        },
    }))?;
    // The CRD is installed by the agent at start; retry until it is served.
    poll(&format!("rule created on {}", on.name), SETUP, || async {
        Api::<DynamicObject>::all_with(on.client.clone(), &ar)
            .create(&PostParams::default(), &rule)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await?;
    Ok(())
}

pub fn rule_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleetbus.io", "v1alpha1", "ResourceSyncRule"),
        "resourcesyncrules",
    )
}

/// The sum of the samples of metric `name` in a Prometheus text exposition
/// (`name 3` and `name{label="x"} 4` alike; comments and other metrics,
/// `name_bucket` included, are left out).
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let value = match rest.strip_prefix('{') {
                Some(labelled) => labelled.split_once('}')?.1,
                None => rest,
            };
            // A longer name sharing the prefix has no space or brace here.
            value.starts_with(' ').then_some(())?;
            value.split_whitespace().next()?.parse::<f64>().ok()
        })
        .sum()
}

#[cfg(test)]
mod metric_tests {
    use super::metric_sum;

    #[test]
    fn sums_every_series_of_one_metric_only() {
        let text = "# HELP x_total x\n# TYPE x_total counter\nx_total 2\nx_total{rule=\"a b\"} 3.5\nx_total_bucket{le=\"1\"} 9\nx_totals 100\ny_total 7\n";
        assert_eq!(metric_sum(text, "x_total"), 5.5);
        assert_eq!(metric_sum(text, "y_total"), 7.0);
        assert_eq!(metric_sum(text, "z_total"), 0.0);
    }
}
