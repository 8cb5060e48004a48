//! Command-line flags.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;

/// A Kubernetes-API-compatible server for local fleetbus meshes and tests.
#[derive(Debug, Clone, Parser)]
#[command(name = "fleetbus-devcluster", version)]
pub struct Cli {
    /// Cluster name: used for the kubeconfig cluster/context/user and node providerIDs.
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_NAME", default_value = "devcluster")]
    pub name: String,
    /// Address to listen on (port 0 picks a free port).
    #[arg(
        long,
        env = "FLEETBUS_DEVCLUSTER_LISTEN",
        default_value = "127.0.0.1:0"
    )]
    pub listen: SocketAddr,
    /// Directory for durable state; without it state is in memory only.
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// Where to write a kubeconfig for this cluster.
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_KUBECONFIG_OUT")]
    pub kubeconfig_out: Option<PathBuf>,
    /// Serve HTTPS with a generated CA (kept in --data-dir when given).
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_TLS")]
    pub tls: bool,
    /// A host name or IP address the serving certificate names besides
    /// localhost, 127.0.0.1 and ::1: how other hosts (containers) reach this
    /// server (repeat, or comma-separate).
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_TLS_SAN", value_delimiter = ',')]
    pub tls_san: Vec<String>,
    /// The server URL written into --kubeconfig-out (default: this server's
    /// own address, 127.0.0.1 when listening on all addresses), e.g.
    /// `https://devcluster-a:6443` where clients reach it by that name.
    #[arg(
        long,
        env = "FLEETBUS_DEVCLUSTER_KUBECONFIG_SERVER",
        value_name = "URL"
    )]
    pub kubeconfig_server: Option<String>,
    /// Require `Authorization: Bearer <token>` (minted ServiceAccount tokens also work).
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_TOKEN", conflicts_with = "token_file")]
    pub token: Option<String>,
    /// As --token, with the token kept in FILE: read from it, or a random one
    /// written there (mode 0600) when it does not exist yet.
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// How requests are authorized: always-allow, or rbac (ServiceAccount
    /// tokens are held to the stored Roles, ClusterRoles and bindings; the
    /// admin --token, or any caller without --token, is system:masters).
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_AUTHORIZATION", value_enum, default_value_t = crate::auth::Mode::AlwaysAllow)]
    pub authorization: crate::auth::Mode,
    /// Number of Node objects to seed (node-1..node-N).
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_NODES", default_value_t = 0)]
    pub nodes: u32,
    /// Number of watch events kept for resuming watches (older RVs get 410).
    #[arg(
        long,
        env = "FLEETBUS_DEVCLUSTER_WATCH_HISTORY",
        default_value_t = 10_000
    )]
    pub watch_history: usize,
    /// Seconds between watch BOOKMARK events.
    #[arg(
        long,
        env = "FLEETBUS_DEVCLUSTER_BOOKMARK_INTERVAL",
        default_value_t = 60
    )]
    pub bookmark_interval: u64,
    /// Serve `/debug/faults`, through which a test makes this server answer
    /// some requests 429 or 500, late, and end watches with 410 (off: the
    /// path is unknown, 404).
    #[arg(long, env = "FLEETBUS_DEVCLUSTER_DEBUG_FAULTS")]
    pub debug_faults: bool,
    /// The fault plan in force from the start (JSON, as `PUT /debug/faults`
    /// takes it; implies `--debug-faults`): a test that restarts the server
    /// needs its fault there before the first client reconnects.
    #[arg(long, value_name = "JSON")]
    pub debug_faults_plan: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Cli::command().debug_assert();
        let c = Cli::try_parse_from(["x", "--name", "c1", "--nodes", "3", "--tls"]).unwrap();
        assert_eq!(c.name, "c1");
        assert_eq!(c.nodes, 3);
        assert!(c.tls);
        let c = Cli::try_parse_from(["x", "--tls-san", "a,b", "--tls-san", "c"]).unwrap();
        assert_eq!(c.tls_san, ["a", "b", "c"]);
        assert!(!c.debug_faults, "faults are off unless asked for");
        assert!(
            Cli::try_parse_from(["x", "--debug-faults"])
                .unwrap()
                .debug_faults
        );
    }
}
