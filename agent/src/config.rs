//! Validated agent settings, built from [`crate::Args`].

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fleetbus_schemas::subject::Prefix;

pub use crate::bus::connect::NatsAuth;
use crate::bus::rate::RateLimit;
use crate::cli::Args;
use crate::trust::{Identity, TrustLoadError};

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
    /// Only one half of the client certificate pair was given.
    #[error("{given} needs {missing} (a client certificate and its key go together)")]
    HalfClientCert {
        /// The flag that was given.
        given: &'static str,
        /// The flag that is missing.
        missing: &'static str,
    },
    /// Plain-text NATS to a non-loopback address without `--allow-insecure`.
    #[error(
        "--nats-url {0} is plain-text NATS to a non-loopback address: anyone on the path \
         reads and forges the fleet's traffic. Use a tls:// URL or --nats-tls-ca, or pass \
         --allow-insecure (FLEETBUS_NATS_ALLOW_INSECURE=true) to accept that"
    )]
    PlainTextRemote(String),
    /// The fleet root, cluster key and certificate are incomplete or do not verify.
    #[error(transparent)]
    Trust(#[from] TrustLoadError),
    /// A file named by a flag cannot be read.
    #[error("{flag} {}: cannot read the file", path.display())]
    Unreadable {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

impl NatsAuth {
    fn from_args(a: &Args) -> Result<NatsAuth, ConfigError> {
        let client_cert = match (&a.nats_tls_cert, &a.nats_tls_key) {
            (Some(c), Some(k)) => Some((c.clone(), k.clone())),
            (None, None) => None,
            (Some(_), None) => {
                return Err(ConfigError::HalfClientCert {
                    given: "--nats-tls-cert",
                    missing: "--nats-tls-key",
                })
            }
            (None, Some(_)) => {
                return Err(ConfigError::HalfClientCert {
                    given: "--nats-tls-key",
                    missing: "--nats-tls-cert",
                })
            }
        };
        // Read once here so that a wrong path or a missing Secret key stops
        // start-up with exit 2, instead of surfacing as a connect error that
        // the NATS retry loop would repeat forever.
        let files = [
            ("--nats-creds", a.nats_creds.as_ref()),
            ("--nats-tls-ca", a.nats_tls_ca.as_ref()),
            ("--nats-tls-cert", a.nats_tls_cert.as_ref()),
            ("--nats-tls-key", a.nats_tls_key.as_ref()),
        ];
        for (flag, path) in files {
            if let Some(path) = path {
                check_readable(flag, path)?;
            }
        }
        Ok(NatsAuth {
            creds: a.nats_creds.clone(),
            tls_ca: a.nats_tls_ca.clone(),
            client_cert,
        })
    }
}

/// The first of the comma-separated `urls` that would carry plain text to a
/// host other than this one, without its userinfo (it may hold a password).
/// TLS is certain only with a `tls://` URL (or a CA, checked by the caller):
/// a `nats://` client upgrades only if the server asks. Loopback is exempt:
/// the traffic never leaves the host (the local mesh, a sidecar).
fn plain_text_remote(urls: &str) -> Option<String> {
    urls.split(',').map(str::trim).find_map(|u| {
        let (scheme, rest) = u.split_once("://").unwrap_or(("nats", u));
        if scheme.eq_ignore_ascii_case("tls") {
            return None;
        }
        let hostport = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        let hostport = hostport.split('/').next().unwrap_or_default();
        let host = match hostport.strip_prefix('[') {
            Some(v6) => v6.split(']').next().unwrap_or_default(),
            None => hostport.split(':').next().unwrap_or_default(),
        };
        let loopback = host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        (!loopback).then(|| format!("{scheme}://{hostport}"))
    })
}

/// A regular file that can be opened and read.
fn check_readable(flag: &'static str, path: &std::path::Path) -> Result<(), ConfigError> {
    std::fs::read(path)
        .map(|_| ())
        .map_err(|source| ConfigError::Unreadable {
            flag,
            path: path.to_owned(),
            source,
        })
}

/// Everything the agent needs to know from its flags, checked.
/// When a drift is a fight, and how long the agent then backs off (see
/// `sync::drift::fight`, which applies it; here so that configuration depends on no
/// later layer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FightPolicy {
    /// Drifts by one manager with the same values (each after a correction)
    /// that make a fight; 0 turns detection off.
    pub threshold: u32,
    /// Within this long.
    pub window: Duration,
    /// The first backoff: the copy must be left alone this long before the
    /// agent corrects it again.
    pub backoff: Duration,
}

#[derive(Debug, Clone)]
pub struct Config {
    /// This cluster's name in the fleet.
    pub cluster_name: String,
    /// NATS URL(s).
    pub nats_url: String,
    /// NATS credentials file and TLS files.
    pub nats_auth: NatsAuth,
    /// Explicit kubeconfig, else inferred.
    pub kubeconfig: Option<PathBuf>,
    /// Namespace for Secrets, the reader ServiceAccount and Events.
    pub namespace: String,
    /// The fleet's name as SIG Multicluster tools see it (the ClusterSet).
    pub fleet_name: String,
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
    /// Publish a `Left` record at shutdown (leave the fleet for good).
    pub leave_on_shutdown: bool,
    /// Server URL override for the published kubeconfig.
    pub advertise_server: Option<String>,
    /// Lifetime of the reader token.
    pub kubeconfig_lifetime: Duration,
    /// Whether to server-side apply the CRDs at start.
    pub install_crds: bool,
    /// When a drift is a fight, and the backoff then.
    pub drift_fight: FightPolicy,
    /// The drift coalescing window.
    pub drift_coalesce_window: Duration,
    /// The rate limit of each verb of requests to this agent.
    pub command_rate: RateLimit,
    /// This cluster's keys and certificate: `None` in the insecure mode
    /// (no `--fleet-root`), where nothing is signed or verified.
    pub trust: Option<Arc<Identity>>,
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
        let nats_auth = NatsAuth::from_args(&a)?;
        if !a.allow_insecure && nats_auth.tls_ca.is_none() {
            if let Some(url) = plain_text_remote(&a.nats_url) {
                return Err(ConfigError::PlainTextRemote(url));
            }
        }
        let trust = Identity::from_flags(
            &a.cluster_name,
            a.fleet_root.as_deref(),
            a.cluster_key.as_deref(),
            a.cluster_cert.as_deref(),
            chrono::Utc::now(),
        )?
        .map(Arc::new);
        Ok(Config {
            trust,
            cluster_name: a.cluster_name,
            nats_url: a.nats_url,
            nats_auth,
            kubeconfig: a.kubeconfig,
            namespace: a.namespace,
            // A prefix with dots is no DNS label: its dots become dashes.
            fleet_name: a
                .fleet_name
                .unwrap_or_else(|| a.subject_prefix.to_string().replace('.', "-")),
            subject_prefix: a.subject_prefix,
            replicas: a.replicas,
            metrics_addr: a.metrics_addr,
            heartbeat_interval: a.heartbeat_interval,
            peer_timeout: a.peer_timeout,
            publish_kubeconfig: a.publish_kubeconfig,
            leave_on_shutdown: a.leave_on_shutdown,
            advertise_server: a.advertise_server,
            kubeconfig_lifetime: a.kubeconfig_lifetime,
            install_crds: a.install_crds,
            drift_fight: FightPolicy {
                threshold: a.drift_fight_threshold,
                window: a.drift_fight_window,
                backoff: a.drift_fight_backoff,
            },
            drift_coalesce_window: a.drift_coalesce_window,
            command_rate: RateLimit {
                per_second: a.command_rate,
                burst: a.command_burst,
            },
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
    fn plain_text_to_another_host_needs_allow_insecure() {
        for url in [
            "nats://nats.fleetbus-system.svc:4222",
            "nats://c1:secret@10.0.0.7:4222",
            "10.0.0.7:4222",
            "nats://127.0.0.1:4222,nats://nats-2:4222",
            "nats://[2001:db8::1]:4222",
        ] {
            let err = cfg(&["--nats-url", url]).unwrap_err();
            assert!(
                matches!(err, ConfigError::PlainTextRemote(_)),
                "{url}: {err}"
            );
            let msg = err.to_string();
            assert!(
                msg.contains("--allow-insecure") && !msg.contains("secret"),
                "{msg}"
            );
            assert!(
                cfg(&["--nats-url", url, "--allow-insecure"]).is_ok(),
                "{url}"
            );
        }
        for url in [
            "nats://127.0.0.1:4222",
            "nats://localhost:4222",
            "nats://[::1]:4222",
            "127.0.0.2:4222",
            "tls://nats.example:4222",
            "TLS://nats.example:4222,tls://nats-2:4222",
        ] {
            assert!(cfg(&["--nats-url", url]).is_ok(), "{url}");
        }
        // A CA means TLS is required whatever the scheme.
        let ca = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let ca = ca.to_str().unwrap();
        assert!(cfg(&["--nats-url", "nats://nats:4222", "--nats-tls-ca", ca]).is_ok());
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

    #[test]
    fn client_cert_needs_key_and_key_needs_cert() {
        let err = cfg(&["--nats-tls-cert", "/x/tls.crt"]).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::HalfClientCert {
                missing: "--nats-tls-key",
                ..
            }
        ));
        let err = cfg(&["--nats-tls-key", "/x/tls.key"]).unwrap_err();
        assert!(matches!(
            err,
            ConfigError::HalfClientCert {
                missing: "--nats-tls-cert",
                ..
            }
        ));
    }

    #[test]
    fn unreadable_files_name_the_flag() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let present = dir.join("Cargo.toml");
        let absent = dir.join("no-such-file.pem");
        let present_s = present.to_str().unwrap();
        let absent_s = absent.to_str().unwrap();
        for (flag, extra) in [
            ("--nats-creds", vec!["--nats-creds", absent_s]),
            ("--nats-tls-ca", vec!["--nats-tls-ca", absent_s]),
            (
                "--nats-tls-key",
                vec!["--nats-tls-cert", present_s, "--nats-tls-key", absent_s],
            ),
        ] {
            match cfg(&extra).unwrap_err() {
                ConfigError::Unreadable { flag: f, path, .. } => {
                    assert_eq!(f, flag);
                    assert_eq!(path, absent);
                }
                other => panic!("{flag}: {other:?}"),
            }
        }
    }

    #[test]
    fn readable_files_are_kept() {
        let f = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        let p = f.to_str().unwrap();
        let c = cfg(&[
            "--nats-creds",
            p,
            "--nats-tls-ca",
            p,
            "--nats-tls-cert",
            p,
            "--nats-tls-key",
            p,
        ])
        .unwrap();
        assert_eq!(c.nats_auth.creds.as_deref(), Some(f.as_path()));
        assert_eq!(c.nats_auth.tls_ca.as_deref(), Some(f.as_path()));
        assert_eq!(c.nats_auth.client_cert, Some((f.clone(), f.clone())));
        assert_eq!(cfg(&[]).unwrap().nats_auth, NatsAuth::default());
    }
}
