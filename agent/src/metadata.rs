//! Cluster metadata (provider, distribution, versions, locality) detected from Nodes.

use std::collections::BTreeSet;

use fleetbus_schemas::crd::{Allocatable, ClusterMetadata, Locality};
use k8s_openapi::api::core::v1::Node;
use kube::api::ListParams;
use kube::Api;
use kube_quantity::ParsedQuantity;

/// Failure to read what metadata is detected from.
#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    /// Listing Nodes failed.
    #[error("failed to list nodes")]
    Nodes(#[source] kube::Error),
    /// Reading the API server version failed.
    #[error("failed to read the API server version")]
    Version(#[source] kube::Error),
}

impl MetadataError {
    /// Whether trying again later can help.
    pub fn is_transient(&self) -> bool {
        match self {
            MetadataError::Nodes(e) | MetadataError::Version(e) => {
                crate::kube::client::is_transient(e)
            }
        }
    }
}

/// Reads Nodes and /version and detects this cluster's metadata.
pub async fn gather(client: &kube::Client) -> Result<ClusterMetadata, MetadataError> {
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(MetadataError::Nodes)?;
    let version = client
        .apiserver_version()
        .await
        .map_err(MetadataError::Version)?;
    Ok(detect(&nodes.items).into_metadata(Some(version.git_version)))
}

/// What the Nodes and the API server's /version tell about this cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Detected {
    /// amazon, google, azure, vsphere, kind, or empty when unknown.
    pub provider: String,
    /// EKS, GKE, AKS, KIND, K3S, RKE, OPENSHIFT, or empty when unknown.
    pub distribution: String,
    /// Distinct kubelet versions, sorted.
    pub kubelet_versions: Vec<String>,
    /// Distinct kube-proxy versions, sorted (often empty: the field is deprecated).
    pub kube_proxy_versions: Vec<String>,
    /// The region when the nodes agree on one, else the first of `regions`.
    pub region: String,
    /// Distinct regions, sorted.
    pub regions: Vec<String>,
    /// Distinct zones, sorted.
    pub zones: Vec<String>,
    /// Allocatable CPU and memory summed over the Nodes that report them.
    pub allocatable: Option<Allocatable>,
}

impl Detected {
    /// The record/status form; empty facts become absent fields.
    pub fn into_metadata(self, kubernetes_version: Option<String>) -> ClusterMetadata {
        let some = |s: String| (!s.is_empty()).then_some(s);
        let locality = (!self.regions.is_empty() || !self.zones.is_empty()).then(|| Locality {
            region: some(self.region),
            regions: self.regions,
            zones: self.zones,
        });
        ClusterMetadata {
            provider: some(self.provider),
            distribution: some(self.distribution),
            kubernetes_version: kubernetes_version.filter(|v| !v.is_empty()),
            kubelet_versions: self.kubelet_versions,
            kube_proxy_versions: self.kube_proxy_versions,
            locality,
            allocatable: self.allocatable,
        }
    }
}

const REGION_LABELS: [&str; 2] = [
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/region",
];
const ZONE_LABELS: [&str; 2] = [
    "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/zone",
];

/// The Nodes' `status.allocatable` cpu and memory, summed; `None` when no
/// Node reports either. A quantity that does not parse counts as nothing (a
/// kubelet writes canonical quantities; a hand-edited Node must not stop the
/// metadata), and sums saturate rather than wrap.
fn allocatable(nodes: &[Node]) -> Option<Allocatable> {
    let mut total = Allocatable::default();
    let mut seen = false;
    for alloc in nodes
        .iter()
        .filter_map(|n| n.status.as_ref()?.allocatable.as_ref())
    {
        let amount = |key: &str, scale: f64| -> Option<u64> {
            let q = ParsedQuantity::try_from(alloc.get(key)?).ok()?;
            let v = q.to_bytes_f64()? * scale;
            // `as` saturates for floats: a negative or NaN amount is 0.
            (v.is_finite()).then_some(v.round() as u64)
        };
        if let Some(cpu) = amount("cpu", 1000.0) {
            total.cpu_millis = total.cpu_millis.saturating_add(cpu);
            seen = true;
        }
        if let Some(mem) = amount("memory", 1.0) {
            total.memory_bytes = total.memory_bytes.saturating_add(mem);
            seen = true;
        }
    }
    seen.then_some(total)
}

/// Detects metadata from a list of Nodes. Pure, so it can be table-tested.
pub fn detect(nodes: &[Node]) -> Detected {
    let mut providers = Vec::new();
    let mut dists = BTreeSet::new();
    let mut kubelets = BTreeSet::new();
    let mut proxies = BTreeSet::new();
    let mut regions = BTreeSet::new();
    let mut zones = BTreeSet::new();
    for node in nodes {
        let labels = node.metadata.labels.clone().unwrap_or_default();
        let has_prefix = |p: &str| labels.keys().any(|k| k.starts_with(p));
        let provider_id = node
            .spec
            .as_ref()
            .and_then(|s| s.provider_id.as_deref())
            .unwrap_or("");
        let scheme = provider_id.split("://").next().unwrap_or("");
        let provider = match scheme {
            "aws" => "amazon",
            "gce" => "google",
            "azure" => "azure",
            "vsphere" => "vsphere",
            "kind" => "kind",
            _ => "",
        };
        if !provider.is_empty() {
            providers.push(provider);
        }
        // Most specific evidence first: a distribution runs on a provider.
        let dist = if has_prefix("node.openshift.io/") {
            "OPENSHIFT"
        } else if has_prefix("rke.cattle.io/") {
            "RKE"
        } else if scheme == "k3s"
            || has_prefix("k3s.io/")
            || labels
                .get("node.kubernetes.io/instance-type")
                .map(String::as_str)
                == Some("k3s")
        {
            "K3S"
        } else if has_prefix("eks.amazonaws.com/") {
            "EKS"
        } else if labels.contains_key("cloud.google.com/gke-nodepool") {
            "GKE"
        } else if has_prefix("kubernetes.azure.com/") {
            "AKS"
        } else if scheme == "kind" {
            "KIND"
        } else {
            ""
        };
        if !dist.is_empty() {
            dists.insert(dist);
        }
        if let Some(info) = node.status.as_ref().and_then(|s| s.node_info.as_ref()) {
            if !info.kubelet_version.is_empty() {
                kubelets.insert(info.kubelet_version.clone());
            }
            if !info.kube_proxy_version.is_empty() {
                proxies.insert(info.kube_proxy_version.clone());
            }
        }
        if let Some(r) = REGION_LABELS.iter().find_map(|l| labels.get(*l)) {
            regions.insert(r.clone());
        }
        if let Some(z) = ZONE_LABELS.iter().find_map(|l| labels.get(*l)) {
            zones.insert(z.clone());
        }
    }
    let regions: Vec<String> = regions.into_iter().collect();
    Detected {
        allocatable: allocatable(nodes),
        provider: most_common(&providers).to_owned(),
        // Several distributions in one cluster is odd; report the first by name
        // so the result is at least stable.
        distribution: dists.into_iter().next().unwrap_or("").to_owned(),
        kubelet_versions: kubelets.into_iter().collect(),
        kube_proxy_versions: proxies.into_iter().collect(),
        region: regions.first().cloned().unwrap_or_default(),
        regions,
        zones: zones.into_iter().collect(),
    }
}

fn most_common<'a>(items: &[&'a str]) -> &'a str {
    let mut best = ("", 0);
    for item in items {
        let n = items.iter().filter(|i| *i == item).count();
        if n > best.1 || (n == best.1 && *item < best.0) {
            best = (item, n);
        }
    }
    best.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, NodeSystemInfo};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use kube::api::ObjectMeta;

    fn node(provider_id: &str, labels: &[(&str, &str)], kubelet: &str, proxy: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                labels: Some(
                    labels
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                        .collect(),
                ),
                ..ObjectMeta::default()
            },
            spec: Some(NodeSpec {
                provider_id: (!provider_id.is_empty()).then(|| provider_id.to_owned()),
                ..NodeSpec::default()
            }),
            status: Some(NodeStatus {
                node_info: Some(NodeSystemInfo {
                    kubelet_version: kubelet.into(),
                    kube_proxy_version: proxy.into(),
                    ..NodeSystemInfo::default()
                }),
                ..NodeStatus::default()
            }),
        }
    }

    #[test]
    fn provider_and_distribution_table() {
        let cases: Vec<(&str, Vec<Node>, &str, &str)> = vec![
            ("empty", vec![], "", ""),
            (
                "eks",
                vec![node(
                    "aws:///eu-west-1a/i-0abc",
                    &[("eks.amazonaws.com/nodegroup", "ng")],
                    "v1.30.1-eks",
                    "",
                )],
                "amazon",
                "EKS",
            ),
            (
                "plain aws",
                vec![node("aws:///eu-west-1a/i-0abc", &[], "v1.30.1", "")],
                "amazon",
                "",
            ),
            (
                "gke",
                vec![node(
                    "gce://proj/europe-west1-b/gke-n",
                    &[("cloud.google.com/gke-nodepool", "default")],
                    "v1.31.0-gke.1",
                    "",
                )],
                "google",
                "GKE",
            ),
            (
                "aks",
                vec![node(
                    "azure:///subscriptions/x/vm",
                    &[("kubernetes.azure.com/cluster", "rg")],
                    "v1.29.4",
                    "",
                )],
                "azure",
                "AKS",
            ),
            (
                "kind",
                vec![node(
                    "kind://docker/c1/c1-control-plane",
                    &[],
                    "v1.33.0",
                    "",
                )],
                "kind",
                "KIND",
            ),
            (
                "k3s by provider id",
                vec![node("k3s://host1", &[], "v1.30.2+k3s1", "")],
                "",
                "K3S",
            ),
            (
                "k3s by instance type",
                vec![node(
                    "",
                    &[("node.kubernetes.io/instance-type", "k3s")],
                    "v1.30.2+k3s1",
                    "",
                )],
                "",
                "K3S",
            ),
            (
                "rke on vsphere",
                vec![node(
                    "vsphere://4200-abcd",
                    &[("rke.cattle.io/machine", "m1")],
                    "v1.28.9",
                    "",
                )],
                "vsphere",
                "RKE",
            ),
            (
                "openshift on aws",
                vec![node(
                    "aws:///us-east-1a/i-1",
                    &[("node.openshift.io/os_id", "rhcos")],
                    "v1.29.0",
                    "",
                )],
                "amazon",
                "OPENSHIFT",
            ),
            (
                "majority provider",
                vec![
                    node("kind://docker/a/b", &[], "v1", ""),
                    node("aws:///x/i-1", &[], "v1", ""),
                    node("aws:///x/i-2", &[], "v1", ""),
                ],
                "amazon",
                "KIND",
            ),
        ];
        for (name, nodes, provider, dist) in cases {
            let d = detect(&nodes);
            assert_eq!(d.provider, provider, "{name}");
            assert_eq!(d.distribution, dist, "{name}");
        }
    }

    #[test]
    fn versions_are_distinct_and_sorted() {
        let nodes = vec![
            node("kind://a", &[], "v1.33.1", "v1.33.1"),
            node("kind://b", &[], "v1.32.0", ""),
            node("kind://c", &[], "v1.33.1", "v1.32.0"),
        ];
        let d = detect(&nodes);
        assert_eq!(d.kubelet_versions, vec!["v1.32.0", "v1.33.1"]);
        assert_eq!(d.kube_proxy_versions, vec!["v1.32.0", "v1.33.1"]);
    }

    #[test]
    fn locality_from_topology_labels() {
        let nodes = vec![
            node(
                "",
                &[
                    ("topology.kubernetes.io/region", "eu-west-1"),
                    ("topology.kubernetes.io/zone", "eu-west-1b"),
                ],
                "v1",
                "",
            ),
            node(
                "",
                &[
                    ("topology.kubernetes.io/region", "eu-west-1"),
                    ("topology.kubernetes.io/zone", "eu-west-1a"),
                ],
                "v1",
                "",
            ),
            node(
                "",
                &[
                    ("failure-domain.beta.kubernetes.io/region", "eu-west-1"),
                    ("failure-domain.beta.kubernetes.io/zone", "eu-west-1c"),
                ],
                "v1",
                "",
            ),
        ];
        let d = detect(&nodes);
        assert_eq!(d.region, "eu-west-1");
        assert_eq!(d.regions, vec!["eu-west-1"]);
        assert_eq!(d.zones, vec!["eu-west-1a", "eu-west-1b", "eu-west-1c"]);
    }

    fn with_allocatable(mut n: Node, alloc: &[(&str, &str)]) -> Node {
        n.status.get_or_insert_with(NodeStatus::default).allocatable = Some(
            alloc
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                .collect(),
        );
        n
    }

    #[test]
    fn allocatable_sums_cpu_and_memory_over_the_nodes_in_their_units() {
        let plain = || node("", &[], "v1", "");
        let nodes = [
            with_allocatable(
                plain(),
                &[("cpu", "3800m"), ("memory", "16Gi"), ("pods", "110")],
            ),
            with_allocatable(plain(), &[("cpu", "4"), ("memory", "1500M")]),
            with_allocatable(plain(), &[("cpu", "0.5")]),
            // A Node whose kubelet has not reported yet counts for nothing.
            plain(),
        ];
        assert_eq!(
            detect(&nodes).allocatable,
            Some(Allocatable {
                cpu_millis: 3800 + 4000 + 500,
                memory_bytes: 16 * (1 << 30) + 1_500_000_000,
            })
        );
        assert_eq!(detect(&[plain()]).allocatable, None, "no Node reports it");
        assert_eq!(
            detect(&[with_allocatable(
                plain(),
                &[("cpu", "a lot"), ("memory", "-1Gi")]
            )])
            .allocatable,
            Some(Allocatable::default()),
            "garbage and negative quantities count as nothing, without failing the metadata"
        );
        let meta = detect(&nodes).into_metadata(None);
        let json = serde_json::to_value(&meta).unwrap();
        assert_eq!(json["allocatable"]["cpuMillis"], 8300, "{json}");
    }
}
