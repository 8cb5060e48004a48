//! Validated agent settings, built from [`crate::Args`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use fleetbus_schemas::subject::Prefix;

use crate::cli::Args;

/// A flag combination that clap alone cannot reject.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The peer timeout would mark healthy peers Disconnected between two heartbeats.
    #[error(
        "--peer-timeout ({timeout:?}) must be longer than --heartbeat-interval ({interval:?})"
    )]
    TimeoutNotAboveInterval {
        /// `--peer-timeout`.
        timeout: Duration,
        /// `--heartbeat-interval`.
        interval: Duration,
    },
    /// A token lifetime the API server would refuse (it requires at least 10 minutes).
    #[error("--kubeconfig-lifetime ({0:?}) must be at least 10m")]
    LifetimeTooShort(Duration),
    /// The advertised server is not an http(s) URL.
    #[error("--advertise-server {0:?} must start with https:// or http://")]
    BadAdvertiseServer(String),
}

/// Everything the agent needs to know from its flags, checked.
#[derive(Debug, Clone)]
pub struct Config {
    /// This cluster's name in the fleet.
    pub cluster_name: String,
    /// NATS URL(s).
    pub nats_url: String,
    /// Explicit kubeconfig, else inferred.
    pub kubeconfig: Option<PathBuf>,
    /// Namespace for Secrets, the reader ServiceAccount and Events.
    pub namespace: String,
    /// Subject/bucket prefix.
    pub subject_prefix: Prefix,
    /// Replicas of the streams and the registry bucket.
    pub replicas: usize,
    /// Where /metrics, /healthz and /readyz are served.
    pub metrics_addr: SocketAddr,
    /// Period of record re-publication.
    pub heartbeat_interval: Duration,
    /// Silence after which a peer is Disconnected.
    pub peer_timeout: Duration,
    /// Whether to mint and publish a reader kubeconfig.
    pub publish_kubeconfig: bool,
    /// Server URL override for the published kubeconfig.
    pub advertise_server: Option<String>,
    /// Lifetime of the reader token.
    pub kubeconfig_lifetime: Duration,
    /// Whether to server-side apply the CRDs at start.
    pub install_crds: bool,
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(a: Args) -> Result<Self, Self::Error> {
        if a.peer_timeout <= a.heartbeat_interval {
            return Err(ConfigError::TimeoutNotAboveInterval {
                timeout: a.peer_timeout,
                interval: a.heartbeat_interval,
            });
        }
        if a.kubeconfig_lifetime < Duration::from_secs(600) {
            return Err(ConfigError::LifetimeTooShort(a.kubeconfig_lifetime));
        }
        if let Some(s) = &a.advertise_server {
            if !(s.starts_with("https://") || s.starts_with("http://")) {
                return Err(ConfigError::BadAdvertiseServer(s.clone()));
            }
        }
        Ok(Config {
            cluster_name: a.cluster_name,
            nats_url: a.nats_url,
            kubeconfig: a.kubeconfig,
            namespace: a.namespace,
            subject_prefix: a.subject_prefix,
            replicas: a.replicas,
            metrics_addr: a.metrics_addr,
            heartbeat_interval: a.heartbeat_interval,
            peer_timeout: a.peer_timeout,
            publish_kubeconfig: a.publish_kubeconfig,
            advertise_server: a.advertise_server,
            kubeconfig_lifetime: a.kubeconfig_lifetime,
            install_crds: a.install_crds,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn cfg(extra: &[&str]) -> Result<Config, ConfigError> {
        let mut argv = vec!["fleetbus-agent", "--cluster-name", "a"];
        argv.extend_from_slice(extra);
        Config::try_from(Args::try_parse_from(argv).unwrap())
    }

    #[test]
    fn defaults_are_valid() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.cluster_name, "a");
    }

    #[test]
    fn timeout_must_exceed_interval() {
        let err = cfg(&["--heartbeat-interval", "2s", "--peer-timeout", "2s"]).unwrap_err();
        assert!(matches!(err, ConfigError::TimeoutNotAboveInterval { .. }));
    }

    #[test]
    fn short_lifetime_rejected() {
        let err = cfg(&["--kubeconfig-lifetime", "5m"]).unwrap_err();
        assert!(matches!(err, ConfigError::LifetimeTooShort(_)));
    }

    #[test]
    fn advertise_server_must_be_url() {
        let err = cfg(&["--advertise-server", "example.com:6443"]).unwrap_err();
        assert!(matches!(err, ConfigError::BadAdvertiseServer(_)));
        assert!(cfg(&["--advertise-server", "https://example.com:6443"]).is_ok());
    }
}
