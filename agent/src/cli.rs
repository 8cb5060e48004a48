//! Command-line flags of `fleetbus-agent` (each flag also reads `FLEETBUS_*`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Parser};
use fleetbus_schemas::subject::Prefix;

use crate::bus::rate::RateLimit;

/// Flags of the agent. Parsed by clap; cross-field checks live in [`crate::Config`].
#[derive(Debug, Clone, Parser)]
#[command(
    name = "fleetbus-agent",
    version,
    about = "Keeps this Kubernetes cluster registered in a fleetbus fleet over NATS JetStream"
)]
pub struct Args {
    /// Name of this cluster in the fleet (a DNS-1123 label, e.g. "eu-west-1").
    #[arg(long, env = "FLEETBUS_CLUSTER_NAME", value_parser = parse_dns_label)]
    pub cluster_name: String,

    /// NATS server URL(s), comma separated.
    #[arg(
        long,
        env = "FLEETBUS_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats_url: String,

    /// NATS credentials file (`.creds`: user JWT and NKey seed), e.g. the
    /// chart's /etc/fleetbus/nats/creds/nats.creds.
    #[arg(long, env = "FLEETBUS_NATS_CREDS", value_name = "FILE")]
    pub nats_creds: Option<PathBuf>,

    /// PEM file of the CA(s) that sign the NATS server certificate; TLS is
    /// then required.
    #[arg(long, env = "FLEETBUS_NATS_TLS_CA", value_name = "FILE")]
    pub nats_tls_ca: Option<PathBuf>,

    /// Accept plain-text NATS (a `nats://` URL without --nats-tls-ca) to a
    /// non-loopback address. Without it the agent refuses to start: anyone on
    /// the path would read every object and credential the fleet carries.
    #[arg(long, env = "FLEETBUS_NATS_ALLOW_INSECURE")]
    pub allow_insecure: bool,

    /// PEM client certificate for mutual TLS (needs --nats-tls-key).
    #[arg(long, env = "FLEETBUS_NATS_TLS_CERT", value_name = "FILE")]
    pub nats_tls_cert: Option<PathBuf>,

    /// PEM private key of --nats-tls-cert.
    #[arg(long, env = "FLEETBUS_NATS_TLS_KEY", value_name = "FILE")]
    pub nats_tls_key: Option<PathBuf>,

    /// The fleet root's public key (`root.pub` of `fleetbus fleet init`, SPKI
    /// PEM). With --cluster-key and --cluster-cert: the secure mode, where
    /// this cluster's certificate must chain to it. Without all three the
    /// agent runs insecure: nothing signed, nothing verified.
    #[arg(long, env = "FLEETBUS_FLEET_ROOT", value_name = "FILE")]
    pub fleet_root: Option<PathBuf>,

    /// This cluster's signing and sealing keys (`cluster.key` of `fleetbus join`).
    #[arg(long, env = "FLEETBUS_CLUSTER_KEY", value_name = "FILE")]
    pub cluster_key: Option<PathBuf>,

    /// This cluster's certificate from the fleet root (`cluster.cert` of `fleetbus join`).
    #[arg(long, env = "FLEETBUS_CLUSTER_CERT", value_name = "FILE")]
    pub cluster_cert: Option<PathBuf>,

    /// Kubeconfig file of the local cluster. When absent: in-cluster config,
    /// then $KUBECONFIG, then ~/.kube/config.
    #[arg(long, env = "FLEETBUS_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace where the agent keeps its Secrets and ServiceAccount (created
    /// if missing). Events about Cluster objects go to "default": the API server
    /// requires that for cluster-scoped objects.
    #[arg(long, env = "FLEETBUS_NAMESPACE", default_value = "fleetbus-system", value_parser = parse_dns_label)]
    pub namespace: String,

    /// The fleet's name for SIG Multicluster tools: the ClusterSet in this
    /// cluster's `clusterset.k8s.io` ClusterProperty, its ClusterProfiles'
    /// properties and the namespace's `multicluster.x-k8s.io/clusterset`
    /// label. The subject prefix when absent.
    #[arg(long, env = "FLEETBUS_FLEET_NAME", value_parser = parse_dns_label)]
    pub fleet_name: Option<String>,

    /// Prefix of every NATS subject, stream and bucket this fleet uses.
    #[arg(long, env = "FLEETBUS_SUBJECT_PREFIX", default_value = "fleetbus", value_parser = parse_prefix)]
    pub subject_prefix: Prefix,

    /// Replicas of every fleetbus stream and of the registry bucket: 1 for a
    /// single nats-server, 3 (or 5) for a clustered NATS. All agents of a fleet
    /// must agree: an existing stream with another replica count stops start-up.
    #[arg(long, env = "FLEETBUS_REPLICAS", default_value_t = 1, value_parser = parse_replicas)]
    pub replicas: usize,

    /// Address of the HTTP server for /metrics, /healthz and /readyz.
    /// Loopback by default so a workstation run exposes nothing; in a Pod set 0.0.0.0:9090.
    #[arg(long, env = "FLEETBUS_METRICS_ADDR", default_value = "127.0.0.1:9090")]
    pub metrics_addr: SocketAddr,

    /// How often this agent re-publishes its cluster record (e.g. "2s", "500ms").
    #[arg(long, env = "FLEETBUS_HEARTBEAT_INTERVAL", default_value = "2s", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,

    /// A peer whose last heartbeat was received longer ago than this is Disconnected.
    #[arg(long, env = "FLEETBUS_PEER_TIMEOUT", default_value = "6s", value_parser = parse_duration)]
    pub peer_timeout: Duration,

    /// Mint a read-only kubeconfig for this cluster (no access to Secrets) and
    /// publish it to the fleet.
    /// NOTE: until end-to-end encryption lands, it travels in clear on the bus.
    #[arg(long, env = "FLEETBUS_PUBLISH_KUBECONFIG")]
    pub publish_kubeconfig: bool,

    /// On SIGTERM/SIGINT, leave the fleet for good: publish a `Left` record,
    /// after which peers collect the copies they made of this cluster's
    /// objects (per orphanPolicy). Off by default: a stop (a rolling update,
    /// a node drain) is a pause, and copies must not churn.
    #[arg(long, env = "FLEETBUS_LEAVE_ON_SHUTDOWN")]
    pub leave_on_shutdown: bool,

    /// API server URL written into the published kubeconfig, instead of the
    /// agent's own (which is often unreachable from other clusters, e.g. in-cluster).
    #[arg(long, env = "FLEETBUS_ADVERTISE_SERVER")]
    pub advertise_server: Option<String>,

    /// Lifetime of the published reader token; it is rotated at 80% of it.
    #[arg(long, env = "FLEETBUS_KUBECONFIG_LIFETIME", default_value = "1h", value_parser = parse_duration)]
    pub kubeconfig_lifetime: Duration,

    /// Drift fights: after this many drifts of one copy by the same field
    /// manager setting the same values within --drift-fight-window (each
    /// after a correction), stop correcting that copy and report a `Fight`;
    /// 0 turns detection off.
    #[arg(long, env = "FLEETBUS_DRIFT_FIGHT_THRESHOLD", default_value_t = 5)]
    pub drift_fight_threshold: u32,

    /// The window of --drift-fight-threshold.
    #[arg(long, env = "FLEETBUS_DRIFT_FIGHT_WINDOW", default_value = "2m", value_parser = parse_duration)]
    pub drift_fight_window: Duration,

    /// How long a fought-over copy must be left alone before the agent
    /// corrects it again; doubled each time the fight goes on (at most 16x).
    #[arg(long, env = "FLEETBUS_DRIFT_FIGHT_BACKOFF", default_value = "1m", value_parser = parse_duration)]
    pub drift_fight_backoff: Duration,

    /// Drift of one copy within this window after it was announced is
    /// coalesced: one event per phase with a `count` when the window closes.
    #[arg(long, env = "FLEETBUS_DRIFT_COALESCE_WINDOW", default_value = "5s", value_parser = parse_duration)]
    pub drift_coalesce_window: Duration,

    /// Server-side apply the fleetbus CRDs at start (`--install-crds=false` when a
    /// chart installs them).
    #[arg(long, env = "FLEETBUS_INSTALL_CRDS", default_value_t = true, action = ArgAction::Set)]
    pub install_crds: bool,

    /// Requests per second the agent takes of each verb on `<prefix>.cmd.<cluster>.>`
    /// (correct, label, progress: one token bucket each), sustained; more are answered
    /// with a refusal saying when to retry.
    #[arg(long, env = "FLEETBUS_COMMAND_RATE", default_value_t = RateLimit::DEFAULT.per_second, value_parser = parse_rate)]
    pub command_rate: f64,

    /// Requests of each verb the agent takes at once after a quiet spell (the bucket size).
    #[arg(long, env = "FLEETBUS_COMMAND_BURST", default_value_t = RateLimit::DEFAULT.burst, value_parser = clap::value_parser!(u32).range(1..))]
    pub command_burst: u32,
}

/// A clap usage error as one line, without the `error:` prefix: clap spreads
/// it over several lines with usage and tips, and the agent's contract is one
/// clear line on stderr followed by exit code 2.
pub fn usage_error(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let parts: Vec<&str> = rendered
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty()
                && !l.starts_with("Usage:")
                && !l.starts_with("tip:")
                && !l.starts_with("For more information")
        })
        .collect();
    let line = parts.join(" ");
    line.strip_prefix("error:")
        .map(str::trim_start)
        .unwrap_or(&line)
        .to_owned()
}

/// Parses "2s", "500ms", "1m30s".
fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (use e.g. \"2s\" or \"500ms\")"))?;
    if d.is_zero() {
        return Err("must be greater than zero".to_owned());
    }
    Ok(d)
}

fn parse_dns_label(s: &str) -> Result<String, String> {
    validate_dns_label(s).map(|()| s.to_owned())
}

/// DNS-1123 label: what Kubernetes requires of namespace names, and what keeps a
/// cluster name usable as a NATS key token and an object name.
pub fn validate_dns_label(s: &str) -> Result<(), String> {
    let ok_chars = s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    let ok_ends = s.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && s.bytes().last().is_some_and(|b| b.is_ascii_alphanumeric());
    if s.is_empty() || s.len() > 63 || !ok_chars || !ok_ends {
        return Err(format!(
            "{s:?} is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending alphanumeric, at most 63 characters)"
        ));
    }
    Ok(())
}

/// A positive, finite number of requests per second (fractions allowed: 0.5 is one
/// every two seconds).
fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err(format!(
            "{s:?} is not a positive number of requests per second"
        )),
    }
}

/// NATS accepts 1 to 5 replicas per stream.
fn parse_replicas(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=5).contains(&n) => Ok(n),
        _ => Err(format!("{s:?} is not a replica count between 1 and 5")),
    }
}

/// The prefix names subjects, streams and buckets; the schemas crate says what is valid.
fn parse_prefix(s: &str) -> Result<Prefix, String> {
    Prefix::new(s).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn command_is_well_formed() {
        Args::command().debug_assert();
    }

    #[test]
    fn defaults() {
        let a = Args::try_parse_from(["fleetbus-agent", "--cluster-name", "a1"]).unwrap();
        assert_eq!(a.nats_url, "nats://127.0.0.1:4222");
        assert_eq!(a.namespace, "fleetbus-system");
        assert_eq!(a.subject_prefix.as_str(), "fleetbus");
        assert_eq!(a.heartbeat_interval, Duration::from_secs(2));
        assert_eq!(a.peer_timeout, Duration::from_secs(6));
        assert!(!a.publish_kubeconfig);
        assert!(!a.leave_on_shutdown);
        assert!(a.install_crds);
        assert!(a.kubeconfig.is_none());
        assert_eq!(a.replicas, 1);
        assert_eq!((a.command_rate, a.command_burst), (5.0, 20));
    }

    #[test]
    fn replicas() {
        let a =
            Args::try_parse_from(["fleetbus-agent", "--cluster-name=a1", "--replicas=3"]).unwrap();
        assert_eq!(a.replicas, 3);
        for bad in ["0", "6", "three"] {
            let err =
                Args::try_parse_from(["fleetbus-agent", "--cluster-name=a1", "--replicas", bad])
                    .unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad}");
        }
    }

    #[test]
    fn parses_durations_and_bools() {
        let a = Args::try_parse_from([
            "fleetbus-agent",
            "--cluster-name=a1",
            "--heartbeat-interval=500ms",
            "--peer-timeout",
            "2s",
            "--publish-kubeconfig",
            "--install-crds=false",
        ])
        .unwrap();
        assert_eq!(a.heartbeat_interval, Duration::from_millis(500));
        assert_eq!(a.peer_timeout, Duration::from_secs(2));
        assert!(a.publish_kubeconfig);
        assert!(!a.install_crds);
    }

    #[test]
    fn rejects_bad_values_with_usage_exit_code() {
        for args in [
            vec!["fleetbus-agent"],
            vec!["fleetbus-agent", "--cluster-name", "Bad_Name"],
            vec![
                "fleetbus-agent",
                "--cluster-name",
                "a",
                "--heartbeat-interval",
                "soon",
            ],
            vec![
                "fleetbus-agent",
                "--cluster-name",
                "a",
                "--peer-timeout",
                "0s",
            ],
            vec![
                "fleetbus-agent",
                "--cluster-name",
                "a",
                "--subject-prefix",
                "Fleet_Bus",
            ],
            vec![
                "fleetbus-agent",
                "--cluster-name",
                "a",
                "--metrics-addr",
                "nowhere",
            ],
        ] {
            let err = Args::try_parse_from(&args).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{args:?}");
        }
    }

    #[test]
    fn usage_errors_fit_on_one_line() {
        for (args, needle) in [
            (vec!["fleetbus-agent"], "--cluster-name"),
            (
                vec![
                    "fleetbus-agent",
                    "--cluster-name",
                    "a",
                    "--peer-timeout",
                    "soon",
                ],
                "--peer-timeout",
            ),
            (
                vec!["fleetbus-agent", "--cluster-name", "a", "--bogus"],
                "--bogus",
            ),
        ] {
            let err = Args::try_parse_from(&args).unwrap_err();
            let line = usage_error(&err);
            assert!(!line.contains('\n'), "{line}");
            assert!(!line.starts_with("error"), "{line}");
            assert!(line.contains(needle), "{args:?}: {line}");
        }
    }

    #[test]
    fn dns_labels() {
        for ok in ["a", "a-1", "0abc", &"x".repeat(63)] {
            assert!(validate_dns_label(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "A", "a.b", "a_b", &"x".repeat(64)] {
            assert!(validate_dns_label(bad).is_err(), "{bad}");
        }
    }
}
