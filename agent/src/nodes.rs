//! The Node watch: the published metadata follows Nodes as they come, go or change.
//!
//! Nodes are watched, not polled, and each is reduced at once to what
//! [`detect`] reads: labels, providerID and the kubelet/kube-proxy versions.
//! The kubelet rewrites its Node's status every ~10 s (conditions, heartbeat
//! times, images); such an update leaves the reduced Node as it was and costs
//! one comparison. A real change is debounced briefly, then the metadata is
//! recomputed and, only when it differs, republished (which also refreshes
//! the Local Cluster object).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus, NodeSystemInfo};
use kube::api::ObjectMeta;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metadata::{detect, Detected};
use crate::registry::{Registry, RegistryError};

/// How long a change waits for companions (a new Node is usually written
/// several times in a row) before the metadata is recomputed.
const DEBOUNCE: Duration = Duration::from_millis(300);
/// How often /version is re-read when no Node changes (a control-plane
/// upgrade without any Node change is rare, so this can be slow).
const VERSION_REFRESH: Duration = Duration::from_secs(600);

/// The Nodes as far as metadata is concerned, by name.
#[derive(Debug, Default)]
pub struct NodeFacts {
    nodes: BTreeMap<String, Node>,
    /// Nodes listed since the watch (re)started; replaces `nodes` at InitDone.
    relist: Option<BTreeMap<String, Node>>,
    /// A first list is complete.
    listed: bool,
}

impl NodeFacts {
    /// Folds one watch event in; returns whether anything [`detect`] reads changed.
    pub fn apply(&mut self, event: watcher::Event<Node>) -> bool {
        match event {
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply(node) => {
                self.relist
                    .get_or_insert_with(BTreeMap::new)
                    .insert(node.name_any(), reduce(&node));
                false
            }
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                let changed = !self.listed || fresh != self.nodes;
                self.nodes = fresh;
                self.listed = true;
                changed
            }
            watcher::Event::Apply(node) => {
                let reduced = reduce(&node);
                self.nodes.insert(node.name_any(), reduced.clone()) != Some(reduced)
            }
            watcher::Event::Delete(node) => self.nodes.remove(&node.name_any()).is_some(),
        }
    }

    /// Whether a complete list has been seen (before that, facts are partial).
    pub fn listed(&self) -> bool {
        self.listed
    }

    /// The metadata these Nodes show.
    pub fn detect(&self) -> Detected {
        let nodes: Vec<Node> = self.nodes.values().cloned().collect();
        detect(&nodes)
    }
}

/// Only the parts of a Node that [`detect`] reads, so that updates of
/// anything else compare equal (and a large fleet's Nodes take little memory).
/// Of `status.allocatable` only cpu and memory are kept: the kubelet
/// rewrites it with every status update, unchanged, and extended resources
/// (hugepages, devices) are not scored.
fn reduce(node: &Node) -> Node {
    let status = node.status.as_ref();
    let info = status.and_then(|s| s.node_info.as_ref());
    let allocatable = status.and_then(|s| s.allocatable.as_ref()).map(|a| {
        a.iter()
            .filter(|(k, _)| k.as_str() == "cpu" || k.as_str() == "memory")
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    Node {
        metadata: ObjectMeta {
            name: node.metadata.name.clone(),
            labels: node.metadata.labels.clone(),
            ..ObjectMeta::default()
        },
        spec: Some(NodeSpec {
            provider_id: node.spec.as_ref().and_then(|s| s.provider_id.clone()),
            ..NodeSpec::default()
        }),
        status: Some(NodeStatus {
            node_info: info.map(|i| NodeSystemInfo {
                kubelet_version: i.kubelet_version.clone(),
                kube_proxy_version: i.kube_proxy_version.clone(),
                ..NodeSystemInfo::default()
            }),
            allocatable,
            ..NodeStatus::default()
        }),
    }
}

/// Watches Nodes until `cancel`, keeping the published metadata current.
/// Watch errors are retried with backoff; the last metadata stays published.
#[tracing::instrument(name = "nodes", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    // Started again on a new connection when its own fails (`fresh_watch`).
    let events = crate::kube::fresh_watch::watch(
        "nodes",
        &reg.ctx.kube_config,
        reg.ctx.client.clone(),
        Api::<Node>::all,
        watcher::Config::default(),
    );
    futures::pin_mut!(events);
    let mut facts = NodeFacts::default();
    let mut version = reg.local_info().metadata.kubernetes_version;
    let mut due: Option<Instant> = None;
    let mut version_tick =
        tokio::time::interval_at(Instant::now() + VERSION_REFRESH, VERSION_REFRESH);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            ev = events.next() => match ev {
                Some(Ok(ev)) => {
                    if facts.apply(ev) && facts.listed() && due.is_none() {
                        due = Some(Instant::now() + DEBOUNCE);
                    }
                }
                Some(Err(error)) => tracing::warn!(%error, "Node watch error"),
                None => return Ok(()),
            },
            _ = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                due = None;
                refresh(&reg, &facts, &mut version).await;
            }
            _ = version_tick.tick() => {
                if facts.listed() {
                    refresh(&reg, &facts, &mut version).await;
                }
            }
        }
    }
}

/// Re-reads /version, recomputes the metadata and publishes it if it changed.
async fn refresh(reg: &Registry, facts: &NodeFacts, version: &mut Option<String>) {
    match reg.ctx.client.apiserver_version().await {
        Ok(v) => *version = Some(v.git_version),
        // The last known version stays; the next change or tick reads again.
        Err(error) => tracing::warn!(
            error = %crate::report(&error),
            "failed to read the API server version"
        ),
    }
    let metadata = facts.detect().into_metadata(version.clone());
    let mut changed = false;
    reg.update_local_info(|i| {
        if i.metadata != metadata {
            tracing::info!(?metadata, "cluster metadata changed; republishing");
            i.metadata = metadata;
            changed = true;
        }
    });
    if changed {
        reg.ctx.metrics.metadata_changes.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeCondition;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node(name: &str, zone: &str, kubelet: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some([("topology.kubernetes.io/zone".to_owned(), zone.to_owned())].into()),
                resource_version: Some("1".into()),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(format!("kind://docker/c/{name}")),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                node_info: Some(NodeSystemInfo {
                    kubelet_version: kubelet.into(),
                    os_image: "Debian".into(),
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
        }
    }

    fn listed(nodes: &[Node]) -> NodeFacts {
        let mut f = NodeFacts::default();
        assert!(!f.apply(watcher::Event::Init));
        for n in nodes {
            assert!(!f.apply(watcher::Event::InitApply(n.clone())));
        }
        assert!(f.apply(watcher::Event::InitDone), "the first list counts");
        f
    }

    #[test]
    fn status_only_updates_change_nothing() {
        let mut f = listed(&[node("n1", "z1", "v1.33.1")]);
        let mut beat = node("n1", "z1", "v1.33.1");
        beat.metadata.resource_version = Some("2".into());
        beat.metadata.annotations = Some([("a".to_owned(), "b".to_owned())].into());
        let status = beat.status.as_mut().unwrap();
        status.conditions = Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..NodeCondition::default()
        }]);
        status.node_info.as_mut().unwrap().os_image = "Debian 13".into();
        assert!(!f.apply(watcher::Event::Apply(beat)));
    }

    #[test]
    fn allocatable_is_a_change_only_when_cpu_or_memory_changes() {
        let sized = |cpu: &str, pods: &str| {
            let mut n = node("n1", "z1", "v1.33.1");
            n.status.as_mut().unwrap().allocatable = Some(
                [("cpu", cpu), ("memory", "8Gi"), ("pods", pods)]
                    .into_iter()
                    .map(|(k, v)| (k.to_owned(), Quantity(v.to_owned())))
                    .collect(),
            );
            n
        };
        let mut f = listed(&[sized("4", "110")]);
        assert!(
            !f.apply(watcher::Event::Apply(sized("4", "110"))),
            "the kubelet's rewrite"
        );
        assert!(
            !f.apply(watcher::Event::Apply(sized("4", "250"))),
            "pods are not scored"
        );
        assert!(f.apply(watcher::Event::Apply(sized("3500m", "250"))));
        assert_eq!(f.detect().allocatable.unwrap().cpu_millis, 3500);
    }

    #[test]
    fn labels_versions_and_membership_are_changes() {
        let mut f = listed(&[node("n1", "z1", "v1.33.1")]);
        assert!(f.apply(watcher::Event::Apply(node("n1", "z2", "v1.33.1"))));
        assert_eq!(f.detect().zones, vec!["z2"]);
        assert!(f.apply(watcher::Event::Apply(node("n1", "z2", "v1.33.2"))));
        assert!(f.apply(watcher::Event::Apply(node("n2", "z3", "v1.33.2"))));
        assert_eq!(f.detect().zones, vec!["z2", "z3"]);
        assert!(f.apply(watcher::Event::Delete(node("n2", "z3", "v1.33.2"))));
        assert!(!f.apply(watcher::Event::Delete(node("n2", "z3", "v1.33.2"))));
        assert_eq!(f.detect().zones, vec!["z2"]);
    }

    #[test]
    fn relist_replaces_and_reports_only_differences() {
        let mut f = listed(&[node("n1", "z1", "v1"), node("n2", "z2", "v1")]);
        // A restarted watch listing the same Nodes: no change.
        f.apply(watcher::Event::Init);
        f.apply(watcher::Event::InitApply(node("n1", "z1", "v1")));
        f.apply(watcher::Event::InitApply(node("n2", "z2", "v1")));
        assert!(!f.apply(watcher::Event::InitDone));
        // One missing from the relist was deleted while we were away.
        f.apply(watcher::Event::Init);
        f.apply(watcher::Event::InitApply(node("n1", "z1", "v1")));
        assert_eq!(f.detect().zones, vec!["z1", "z2"], "old facts until done");
        assert!(f.apply(watcher::Event::InitDone));
        assert_eq!(f.detect().zones, vec!["z1"]);
    }
}
