//! The NATS a bench fleet runs on: one nats-server (the default),
//! the 3-node JetStream hub of `deploy/nats/hub.conf` with agents
//! `--replicas 3`, or that hub plus a site leaf node (`leaf.conf`, domain
//! `site-a`) joined by stream sources as `deploy/nats/TOPOLOGY.md` says. The
//! servers come from `fleetbus-testsupport` (the deploy e2e test starts the
//! same topology) and are killed on drop.
//!
//! Where a cluster's agent connects, by the number in its name `c<i>`:
//! - cluster3: hub node `(i − 1) mod 3`, so c1 and c2 talk through a route;
//! - leaf: odd `i` at the site (through the leaf node, `--replicas 1`), even
//!   `i` on the hub (`--replicas 3`), so c1 → c2 crosses the leaf link and a
//!   fleet has clusters on both sides.

use std::fmt;

use anyhow::Context;
use async_nats::jetstream;
use fleetbus_testsupport::{add_source, start_site, wait_stream, HubCluster, NatsNode, NatsServer};

/// The JetStream domain of the bench's site leaf node.
pub const SITE_DOMAIN: &str = "site-a";
/// The hub's JetStream domain (`deploy/nats/hub.conf`).
pub const HUB_DOMAIN: &str = "hub";

/// Which NATS a fleet runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One nats-server, agents `--replicas 1`.
    Single,
    /// Three hub nodes (one JetStream domain), agents `--replicas 3`.
    Cluster3,
    /// The hub plus a leaf node for a site with its own domain.
    Leaf,
}

impl Topology {
    pub const ALL: [Topology; 3] = [Topology::Single, Topology::Cluster3, Topology::Leaf];

    pub fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Cluster3 => "cluster3",
            Topology::Leaf => "leaf",
        }
    }

    /// `single`, `cluster3`, `leaf`, a comma-separated list of them, or `all`;
    /// no duplicates, in the order given.
    pub fn parse_list(s: &str) -> Result<Vec<Topology>, String> {
        if s == "all" {
            return Ok(Self::ALL.to_vec());
        }
        let mut out = Vec::new();
        for word in s.split(',') {
            let t = Self::ALL
                .into_iter()
                .find(|t| t.name() == word.trim())
                .ok_or_else(|| {
                    format!("unknown NATS topology {word:?}: single, cluster3, leaf (comma-separated), or all")
                })?;
            if out.contains(&t) {
                return Err(format!("NATS topology {word:?} given twice"));
            }
            out.push(t);
        }
        Ok(out)
    }
}

impl fmt::Display for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The running servers of a [`Topology`].
pub enum Bus {
    Single(NatsServer),
    Cluster3(HubCluster),
    Leaf { hub: HubCluster, site: NatsNode },
}

impl Bus {
    /// Starts the servers of `t` and waits until they are healthy (and the
    /// leaf connected to the hub).
    pub async fn start(t: Topology) -> anyhow::Result<Bus> {
        Ok(match t {
            Topology::Single => Bus::Single(NatsServer::start()?),
            Topology::Cluster3 => Bus::Cluster3(HubCluster::start().await?),
            Topology::Leaf => {
                let hub = HubCluster::start().await?;
                let site = start_site(SITE_DOMAIN, &hub.leaf_urls()).await?;
                site.wait_leaf_connected().await?;
                Bus::Leaf { hub, site }
            }
        })
    }

    pub fn topology(&self) -> Topology {
        match self {
            Bus::Single(_) => Topology::Single,
            Bus::Cluster3(_) => Topology::Cluster3,
            Bus::Leaf { .. } => Topology::Leaf,
        }
    }

    /// The NATS URL and the `--replicas` of the agent of cluster `name`
    /// (see the module docs for the placement).
    pub fn placement(&self, name: &str) -> (String, usize) {
        let i = cluster_number(name);
        let hub_node = |hub: &HubCluster| hub.nodes[(i.saturating_sub(1)) % hub.nodes.len()].url();
        match self {
            Bus::Single(s) => (s.url(), 1),
            Bus::Cluster3(hub) => (hub_node(hub), 3),
            Bus::Leaf { site, .. } if at_site(name) => (site.url(), 1),
            Bus::Leaf { hub, .. } => (hub_node(hub), 3),
        }
    }

    /// The server cluster `name`'s agent talks to: where a plain subscriber
    /// sees that agent's publishes first.
    pub fn url_of(&self, name: &str) -> String {
        self.placement(name).0
    }

    /// The first server (the single one, hub-1, or the site's leaf node).
    pub fn url(&self) -> String {
        match self {
            Bus::Single(s) => s.url(),
            Bus::Cluster3(hub) => hub.nodes[0].url(),
            Bus::Leaf { site, .. } => site.url(),
        }
    }

    /// Every server's client port.
    pub fn ports(&self) -> Vec<u16> {
        match self {
            Bus::Single(s) => vec![s.port()],
            Bus::Cluster3(hub) => hub.nodes.iter().map(NatsNode::port).collect(),
            Bus::Leaf { hub, site } => hub.nodes.iter().chain([site]).map(NatsNode::port).collect(),
        }
    }

    /// Every server's process id (CPU and memory are summed over them).
    pub fn pids(&self) -> Vec<u32> {
        match self {
            Bus::Single(s) => s.pid().into_iter().collect(),
            Bus::Cluster3(hub) => hub.nodes.iter().filter_map(NatsNode::pid).collect(),
            Bus::Leaf { hub, site } => hub
                .nodes
                .iter()
                .chain([site])
                .filter_map(NatsNode::pid)
                .collect(),
        }
    }

    /// The operator's part of TOPOLOGY.md, once the agents created their
    /// streams on both sides: the hub sources the site's clusters' subtrees
    /// (registry keys, objects, status, drift, conflicts), the site sources
    /// the registry keys of the hub's clusters, each through the other
    /// domain's API. `names` are every cluster the fleet will hold (filters
    /// for clusters not yet started are harmless). Nothing to do on the other
    /// topologies.
    pub async fn join(&self, names: &[String]) -> anyhow::Result<()> {
        let Bus::Leaf { hub, site } = self else {
            return Ok(());
        };
        let (at_site, at_hub): (Vec<&String>, Vec<&String>) =
            names.iter().partition(|n| at_site(n));
        let hub_js = jetstream::new(async_nats::connect(hub.nodes[0].url()).await?);
        let site_js = jetstream::new(async_nats::connect(site.url()).await?);
        let registry = |clusters: &[&String]| -> Vec<String> {
            clusters
                .iter()
                .map(|c| format!("$KV.fleetbus-registry.*.{c}.*"))
                .collect()
        };
        let beats = |clusters: &[&String]| -> Vec<String> {
            clusters
                .iter()
                .map(|c| format!("$KV.fleetbus-beats.beat.{c}.*"))
                .collect()
        };
        let subtrees = |token: &str| -> Vec<String> {
            at_site
                .iter()
                .map(|c| format!("fleetbus.{token}.{c}.>"))
                .collect()
        };
        let joins: Vec<(&jetstream::Context, &str, &str, Vec<String>)> = vec![
            (
                &hub_js,
                "KV_fleetbus-registry",
                SITE_DOMAIN,
                registry(&at_site),
            ),
            (&hub_js, "KV_fleetbus-beats", SITE_DOMAIN, beats(&at_site)),
            (&hub_js, "FLEETBUS_OBJECTS", SITE_DOMAIN, subtrees("obj")),
            (&hub_js, "FLEETBUS_STATUS", SITE_DOMAIN, subtrees("status")),
            (&hub_js, "FLEETBUS_DRIFT", SITE_DOMAIN, subtrees("drift")),
            (
                &hub_js,
                "FLEETBUS_CONFLICTS",
                SITE_DOMAIN,
                subtrees("conflict"),
            ),
            (
                &hub_js,
                "FLEETBUS_ROLLOUTS",
                SITE_DOMAIN,
                subtrees("rollout"),
            ),
            (&hub_js, "FLEETBUS_VERSIONS", SITE_DOMAIN, subtrees("ver")),
            (
                &site_js,
                "KV_fleetbus-registry",
                HUB_DOMAIN,
                registry(&at_hub),
            ),
            (&site_js, "KV_fleetbus-beats", HUB_DOMAIN, beats(&at_hub)),
        ];
        for (js, stream, from, filters) in joins {
            if filters.is_empty() {
                continue;
            }
            wait_stream(js, stream).await?;
            let filters: Vec<&str> = filters.iter().map(String::as_str).collect();
            add_source(js, stream, from, &filters)
                .await
                .with_context(|| format!("{stream} sources {from}"))?;
        }
        Ok(())
    }
}

/// The `i` of `c<i>` (0 for any other name).
fn cluster_number(name: &str) -> usize {
    name.trim_start_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or(0)
}

/// In the leaf topology, the odd-numbered clusters sit at the site.
fn at_site(name: &str) -> bool {
    cluster_number(name) % 2 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topology_lists_parse_and_refuse_garbage() {
        assert_eq!(Topology::parse_list("single"), Ok(vec![Topology::Single]));
        assert_eq!(
            Topology::parse_list("leaf,single"),
            Ok(vec![Topology::Leaf, Topology::Single])
        );
        assert_eq!(Topology::parse_list("all"), Ok(Topology::ALL.to_vec()));
        for bad in [
            "",
            "cluster",
            "single,,leaf",
            "leaf,leaf",
            "SINGLE",
            "all,leaf",
        ] {
            assert!(Topology::parse_list(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn odd_clusters_sit_at_the_site() {
        assert!(at_site("c1") && at_site("c3") && at_site("c15"));
        assert!(!at_site("c2") && !at_site("c16"));
        // Any other name is a hub cluster, not a panic.
        assert!(!at_site("hub") && !at_site("c") && !at_site("c99999999999999999999999"));
        assert_eq!(cluster_number("c12"), 12);
    }
}
