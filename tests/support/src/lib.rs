//! Test harness: real `nats-server`, `fleetbus-devcluster` and `fleetbus-agent`
//! processes on random ports, each killed (and reaped) on `Drop`, plus
//! [`wait_for`]/[`wait_for_blocking`] to wait for a condition with a deadline.
//!
//! Start with [`NatsServer::start`] and [`DevCluster::start`]; spawn the agent
//! under test with [`Agent::start`] and an [`AgentCommand`], or a devcluster
//! with its agent as a [`Member`]. Every process logs to a file in its own
//! temporary directory, so pipes never fill; tests print `log()` on failure.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod agent;
mod bins;
mod devcluster;
mod http;
mod member;
mod nats;
mod process;
mod topology;
mod wait;

pub use agent::Agent;
pub use bins::{cargo_bin, helm_bin, kubectl_bin, nats_server_bin, repo_root, upstream_crds};
pub use devcluster::{DevCluster, DevClusterOpts};
pub use fleetbus_launch::AgentCommand;
pub use http::{http_get, http_request, HttpResponse};
pub use member::Member;
pub use nats::NatsServer;
pub use process::{free_addr, free_port, free_socket_addr};
pub use topology::{
    add_source, deploy_conf, identity_destination, leaf_urls, leaf_urls_as, start_site,
    start_site_from, wait_stream, HubCluster, NatsNode,
};
pub use wait::{try_wait_for, wait_for, wait_for_blocking};
