//! One cluster of a test fleet: a devcluster, a client of it, and its agent.

use fleetbus_launch::AgentCommand;

use crate::agent::Agent;
use crate::devcluster::{DevCluster, DevClusterOpts};
use crate::http::http_get;
use crate::process::free_socket_addr;

/// A devcluster and the agent that runs on it. The end-to-end tests and the
/// bench each add their own helpers (an extension trait on their side).
pub struct Member {
    /// The agent's `--cluster-name` (may differ from the devcluster's name).
    pub name: String,
    pub cluster: DevCluster,
    pub agent: Agent,
    /// `127.0.0.1:<port>` of the agent's /metrics, /healthz and /readyz.
    pub metrics_addr: String,
    pub client: kube::Client,
}

impl Member {
    /// Starts a devcluster with `opts`, then the agent `cmd` on it with the
    /// devcluster's kubeconfig and a free metrics address.
    pub async fn launch(opts: DevClusterOpts, cmd: AgentCommand) -> anyhow::Result<Member> {
        let mut member = Member::prepare(opts, cmd).await?;
        member.agent.spawn()?;
        Ok(member)
    }

    /// [`Member::launch`] with the agent prepared but not running:
    /// `agent.spawn()` starts it (or nothing does, for a cluster used alone).
    pub async fn prepare(opts: DevClusterOpts, cmd: AgentCommand) -> anyhow::Result<Member> {
        let cluster = DevCluster::start(opts)?;
        let metrics = free_socket_addr();
        let cmd = cmd.kubeconfig(cluster.kubeconfig()).metrics_addr(metrics);
        let agent = Agent::prepare(cmd.argv())?;
        let client = cluster.client().await?;
        Ok(Member {
            name: cmd.cluster_name().to_owned(),
            cluster,
            agent,
            metrics_addr: metrics.to_string(),
            client,
        })
    }

    /// Creates namespace `ns` on the member's devcluster (what a workload
    /// needs before its first object), naming the cluster on failure.
    pub async fn create_namespace(&self, ns: &str) -> anyhow::Result<()> {
        use k8s_openapi::api::core::v1::Namespace;
        let mut namespace = Namespace::default();
        namespace.metadata.name = Some(ns.to_owned());
        kube::Api::<Namespace>::all(self.client.clone())
            .create(&kube::api::PostParams::default(), &namespace)
            .await
            .map_err(|e| anyhow::anyhow!("{}: create namespace {ns}: {e}", self.name))?;
        Ok(())
    }

    /// The agent's `/readyz`: status code and body.
    pub fn readyz(&self) -> Result<(u16, String), String> {
        http_get(&format!("http://{}/readyz", self.metrics_addr))
    }
}
