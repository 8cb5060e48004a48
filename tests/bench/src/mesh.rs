//! A local fleet of real processes: one nats-server, and per cluster a
//! devcluster and a `fleetbus-agent` (started with `fleetbus-testsupport`),
//! with a ResourceSyncRule for the ConfigMaps of [`NS`] created on the first.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fleetbus_testsupport::{free_addr, http_get, Agent, DevCluster, DevClusterOpts, NatsServer};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ObjectMeta, PostParams};
use kube::Api;

use crate::objects::{self, NS};
use crate::poll::poll;
use crate::recorder::Recorder;

/// How long starting a process, a rule copy or a warm-up object may take.
pub const SETUP: Duration = Duration::from_secs(60);
/// The rule every fleet syncs with.
pub const RULE: &str = "bench";
/// Devcluster log filter that logs every request (reads too) so they can be counted.
pub const LOG_REQUESTS: &str = "info,fleetbus_devcluster=debug";

/// One cluster: a devcluster, its agent (if started) and a client.
pub struct Node {
    pub name: String,
    pub cluster: DevCluster,
    pub agent: Option<Agent>,
    pub metrics_addr: String,
    pub client: kube::Client,
}

impl Node {
    /// Starts a devcluster named `name` and creates namespace [`NS`] in it.
    pub async fn cluster(name: &str, log_requests: bool) -> anyhow::Result<Node> {
        let mut opts = DevClusterOpts::new(name);
        if log_requests {
            opts.env.push(("RUST_LOG".into(), LOG_REQUESTS.into()));
        }
        let cluster = DevCluster::start(opts)?;
        let client = cluster.client().await?;
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(NS.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map_err(|e| anyhow::anyhow!("{name}: create namespace {NS}: {e}"))?;
        Ok(Node {
            name: name.into(),
            cluster,
            agent: None,
            metrics_addr: free_addr(),
            client,
        })
    }

    /// Starts this cluster's agent against `nats`; returns the instant it was spawned.
    pub fn start_agent(&mut self, nats: &NatsServer) -> anyhow::Result<Instant> {
        let args = [
            "--cluster-name".to_owned(),
            self.name.clone(),
            "--nats-url".into(),
            nats.url(),
            "--kubeconfig".into(),
            self.cluster.kubeconfig().display().to_string(),
            "--metrics-addr".into(),
            self.metrics_addr.clone(),
        ];
        let at = Instant::now();
        self.agent = Some(Agent::start(&args)?);
        Ok(at)
    }

    /// Waits until the agent's `/readyz` answers 200.
    pub async fn wait_ready(&self) -> anyhow::Result<Instant> {
        let url = format!("http://{}/readyz", self.metrics_addr);
        poll(&format!("{} /readyz", self.name), SETUP, || async {
            match http_get(&url) {
                Ok((200, _)) => Ok(Instant::now()),
                other => Err(format!("{other:?}")),
            }
        })
        .await
        .map_err(|e| self.with_log(e))
    }

    pub fn configmaps(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), NS)
    }

    pub fn agent_pid(&self) -> Option<u32> {
        self.agent.as_ref().and_then(Agent::pid)
    }

    /// A watch on this cluster's ConfigMaps in [`NS`].
    pub async fn recorder(&self) -> anyhow::Result<Recorder> {
        Recorder::start(self.client.clone(), NS, SETUP).await
    }

    /// Requests the devcluster logged so far (every request when started with
    /// `log_requests`, else only writes and failures).
    pub fn requests_logged(&self) -> usize {
        self.cluster
            .log()
            .lines()
            .filter(|l| l.contains(" request "))
            .count()
    }

    /// The logged requests by "METHOD path", object names starting with
    /// `prefix` replaced by `<name>` (to see which requests a change costs).
    pub fn requests_by_kind(&self, prefix: &str) -> BTreeMap<String, usize> {
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

    /// `e` with the tail of the agent's log, for a failed setup.
    pub fn with_log(&self, e: anyhow::Error) -> anyhow::Error {
        let log = self.agent.as_ref().map(Agent::log).unwrap_or_default();
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

/// A nats-server and `n` clusters `c1..cn` with agents; c1 holds the rule.
pub struct Fleet {
    pub nats: NatsServer,
    pub nodes: Vec<Node>,
}

impl Fleet {
    /// Starts the fleet, creates the rule on c1 and waits until a warm-up
    /// object created on c1 reached every other cluster.
    pub async fn start(n: usize, log_requests: bool) -> anyhow::Result<Fleet> {
        let nats = NatsServer::start()?;
        let mut nodes = Vec::new();
        for i in 1..=n {
            let mut node = Node::cluster(&format!("c{i}"), log_requests).await?;
            node.start_agent(&nats)?;
            nodes.push(node);
        }
        for node in &nodes {
            node.wait_ready().await?;
        }
        let fleet = Fleet { nats, nodes };
        fleet.create_rule().await?;
        fleet.warm_up("warm-up").await?;
        Ok(fleet)
    }

    pub fn origin(&self) -> &Node {
        &self.nodes[0]
    }

    pub fn sinks(&self) -> &[Node] {
        &self.nodes[1..]
    }

    /// The ResourceSyncRule for ConfigMaps in [`NS`], created on c1 (the
    /// built-in rule replicates it to every cluster).
    async fn create_rule(&self) -> anyhow::Result<()> {
        let ar = rule_resource();
        let rule: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "fleetbus.io/v1alpha1",
            "kind": "ResourceSyncRule",
            "metadata": {"name": RULE},
            "spec": {
                "groupVersionKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "rules": [{"match": [{"namespaces": [NS]}]}],
            },
        }))?;
        let origin = self.origin();
        // The CRD is installed by the agent at start; retry until it is served.
        poll("rule created on c1", SETUP, || async {
            Api::<DynamicObject>::all_with(origin.client.clone(), &ar)
                .create(&PostParams::default(), &rule)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        })
        .await?;
        Ok(())
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

pub fn rule_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleetbus.io", "v1alpha1", "ResourceSyncRule"),
        "resourcesyncrules",
    )
}
