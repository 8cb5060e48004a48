//! The command line of `fleetbus-agent`, built from typed values.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// The flags one `fleetbus-agent` is started with. Unset flags are not written,
/// so the agent's default (or its `FLEETBUS_*` environment variable) applies.
///
/// `fleetbus mesh up`, the test harness and the bench all start agents through
/// this one type; a test parses [`AgentCommand::argv`] with the agent's own
/// clap definition, so the two cannot disagree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentCommand {
    cluster_name: String,
    nats_url: Option<String>,
    kubeconfig: Option<PathBuf>,
    namespace: Option<String>,
    metrics_addr: Option<SocketAddr>,
    heartbeat_interval: Option<Duration>,
    peer_timeout: Option<Duration>,
    replicas: Option<usize>,
    publish_kubeconfig: bool,
    nats_creds: Option<PathBuf>,
    nats_tls_ca: Option<PathBuf>,
    nats_tls_cert: Option<PathBuf>,
    nats_tls_key: Option<PathBuf>,
    allow_insecure: bool,
    fleet_root: Option<PathBuf>,
    cluster_key: Option<PathBuf>,
    cluster_cert: Option<PathBuf>,
    extra: Vec<OsString>,
}

impl AgentCommand {
    /// The agent of cluster `cluster_name` (`--cluster-name`), every other flag unset.
    pub fn new(cluster_name: impl Into<String>) -> AgentCommand {
        AgentCommand {
            cluster_name: cluster_name.into(),
            nats_url: None,
            kubeconfig: None,
            namespace: None,
            metrics_addr: None,
            heartbeat_interval: None,
            peer_timeout: None,
            replicas: None,
            publish_kubeconfig: false,
            nats_creds: None,
            nats_tls_ca: None,
            nats_tls_cert: None,
            nats_tls_key: None,
            allow_insecure: false,
            fleet_root: None,
            cluster_key: None,
            cluster_cert: None,
            extra: Vec::new(),
        }
    }

    /// `--nats-url`: NATS server URL(s), comma separated.
    pub fn nats_url(mut self, url: impl Into<String>) -> Self {
        self.nats_url = Some(url.into());
        self
    }

    /// `--kubeconfig`: the local cluster's kubeconfig file.
    pub fn kubeconfig(mut self, path: impl Into<PathBuf>) -> Self {
        self.kubeconfig = Some(path.into());
        self
    }

    /// `--namespace`: where the agent keeps its Secrets and ServiceAccount.
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// `--metrics-addr`: the address of /metrics, /healthz and /readyz.
    pub fn metrics_addr(mut self, addr: SocketAddr) -> Self {
        self.metrics_addr = Some(addr);
        self
    }

    /// `--heartbeat-interval`: how often the agent re-publishes its record.
    pub fn heartbeat_interval(mut self, every: Duration) -> Self {
        self.heartbeat_interval = Some(every);
        self
    }

    /// `--peer-timeout`: silence after which a peer is Disconnected.
    pub fn peer_timeout(mut self, after: Duration) -> Self {
        self.peer_timeout = Some(after);
        self
    }

    /// `--replicas`: replicas of every fleetbus stream and the registry bucket.
    pub fn replicas(mut self, n: usize) -> Self {
        self.replicas = Some(n);
        self
    }

    /// `--publish-kubeconfig`: mint and publish a read-only kubeconfig.
    pub fn publish_kubeconfig(mut self, on: bool) -> Self {
        self.publish_kubeconfig = on;
        self
    }

    /// `--nats-creds`: the `.creds` file (user JWT and nkey seed) the agent
    /// connects to NATS with, e.g. `<fleet>/clusters/<name>/nats.creds` of
    /// `fleetbus join`.
    pub fn nats_creds(mut self, path: impl Into<PathBuf>) -> Self {
        self.nats_creds = Some(path.into());
        self
    }

    /// `--nats-tls-ca`: the PEM CA(s) that sign the NATS server's certificate
    /// (TLS is then required).
    pub fn nats_tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.nats_tls_ca = Some(path.into());
        self
    }

    /// `--nats-tls-cert`: the PEM client certificate for mutual TLS (the agent
    /// wants [`AgentCommand::nats_tls_key`] with it).
    pub fn nats_tls_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.nats_tls_cert = Some(path.into());
        self
    }

    /// `--nats-tls-key`: the private key of [`AgentCommand::nats_tls_cert`].
    pub fn nats_tls_key(mut self, path: impl Into<PathBuf>) -> Self {
        self.nats_tls_key = Some(path.into());
        self
    }

    /// `--allow-insecure`: accept plain-text NATS to a non-loopback address.
    pub fn allow_insecure(mut self, on: bool) -> Self {
        self.allow_insecure = on;
        self
    }

    /// `--fleet-root`: the fleet root's public key (`root.pub` of `fleetbus
    /// fleet init`). With [`AgentCommand::cluster_key`] and
    /// [`AgentCommand::cluster_cert`], the secure mode; the agent refuses
    /// some of the three without the others.
    pub fn fleet_root(mut self, path: impl Into<PathBuf>) -> Self {
        self.fleet_root = Some(path.into());
        self
    }

    /// `--cluster-key`: the cluster's signing and sealing keys (`cluster.key`
    /// of `fleetbus join`).
    pub fn cluster_key(mut self, path: impl Into<PathBuf>) -> Self {
        self.cluster_key = Some(path.into());
        self
    }

    /// `--cluster-cert`: the cluster's certificate from the fleet root
    /// (`cluster.cert` of `fleetbus join`).
    pub fn cluster_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.cluster_cert = Some(path.into());
        self
    }

    /// Arguments written after the typed ones, as given: flags this type has
    /// no setter for, or values a test wants malformed on purpose.
    pub fn extra<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.extra.extend(args.into_iter().map(Into::into));
        self
    }

    /// The value of `--cluster-name`.
    pub fn cluster_name(&self) -> &str {
        &self.cluster_name
    }

    /// The arguments (without the program name), in a fixed order: the typed
    /// flags, then [`AgentCommand::extra`].
    pub fn argv(&self) -> Vec<OsString> {
        let mut out: Vec<OsString> =
            vec!["--cluster-name".into(), self.cluster_name.clone().into()];
        let mut flag = |name: &str, value: OsString| {
            out.push(name.into());
            out.push(value);
        };
        if let Some(url) = &self.nats_url {
            flag("--nats-url", url.into());
        }
        if let Some(path) = &self.kubeconfig {
            flag("--kubeconfig", path.into());
        }
        if let Some(ns) = &self.namespace {
            flag("--namespace", ns.into());
        }
        if let Some(addr) = self.metrics_addr {
            flag("--metrics-addr", addr.to_string().into());
        }
        if let Some(d) = self.heartbeat_interval {
            flag("--heartbeat-interval", duration(d).into());
        }
        if let Some(d) = self.peer_timeout {
            flag("--peer-timeout", duration(d).into());
        }
        if let Some(n) = self.replicas {
            flag("--replicas", n.to_string().into());
        }
        if self.publish_kubeconfig {
            out.push("--publish-kubeconfig".into());
        }
        // What the agent connects and signs with: NATS credentials and TLS,
        // then the secure mode's fleet root, keys and certificate.
        let files = [
            ("--nats-creds", &self.nats_creds),
            ("--nats-tls-ca", &self.nats_tls_ca),
            ("--nats-tls-cert", &self.nats_tls_cert),
            ("--nats-tls-key", &self.nats_tls_key),
            ("--fleet-root", &self.fleet_root),
            ("--cluster-key", &self.cluster_key),
            ("--cluster-cert", &self.cluster_cert),
        ];
        for (name, path) in files {
            if let Some(path) = path {
                out.extend([name.into(), path.into()]);
            }
        }
        if self.allow_insecure {
            out.push("--allow-insecure".into());
        }
        out.extend(self.extra.iter().cloned());
        out
    }
}

/// A duration as the agent's flags take it ("2s", "500ms", "1500us"): the
/// largest unit that loses nothing, so the agent reads back the same value.
fn duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else if d.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", d.as_millis())
    } else if d.subsec_nanos().is_multiple_of(1_000) {
        format!("{}us", d.as_micros())
    } else {
        format!("{}ns", d.as_nanos())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use fleetbus_agent::Args;

    fn parse(cmd: &AgentCommand) -> Args {
        let mut argv = vec![OsString::from("fleetbus-agent")];
        argv.extend(cmd.argv());
        Args::try_parse_from(argv).unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
    }

    /// Every typed flag set, parsed by the agent's clap definition, reads back
    /// as set. The destructuring has no `..`: a new field fails to compile here
    /// until it is checked.
    #[test]
    fn every_flag_round_trips_through_the_agents_parser() {
        let cmd = AgentCommand::new("eu-west-1")
            .nats_url("nats://127.0.0.1:4333,nats://127.0.0.1:4334")
            .kubeconfig("/tmp/some dir/kubeconfig")
            .namespace("fleet-ns")
            .metrics_addr("127.0.0.1:9555".parse().unwrap())
            .heartbeat_interval(Duration::from_millis(500))
            .peer_timeout(Duration::from_secs(2))
            .replicas(3)
            .publish_kubeconfig(true)
            .nats_creds("/fleet/clusters/eu-west-1/nats.creds")
            .nats_tls_ca("/fleet/ca.pem")
            .nats_tls_cert("/tls/client.pem")
            .nats_tls_key("/tls/client.key")
            .allow_insecure(true)
            .fleet_root("/fleet/root.pub")
            .cluster_key("/fleet/clusters/eu-west-1/cluster.key")
            .cluster_cert("/fleet/clusters/eu-west-1/cluster.cert")
            .extra(["--leave-on-shutdown"]);
        let args = parse(&cmd);
        let AgentCommand {
            cluster_name,
            nats_url,
            kubeconfig,
            namespace,
            metrics_addr,
            heartbeat_interval,
            peer_timeout,
            replicas,
            publish_kubeconfig,
            nats_creds,
            nats_tls_ca,
            nats_tls_cert,
            nats_tls_key,
            allow_insecure,
            fleet_root,
            cluster_key,
            cluster_cert,
            extra,
        } = cmd;
        assert_eq!(args.cluster_name, cluster_name);
        assert_eq!(Some(args.nats_url), nats_url);
        assert_eq!(args.kubeconfig, kubeconfig);
        assert_eq!(Some(args.namespace), namespace);
        assert_eq!(Some(args.metrics_addr), metrics_addr);
        assert_eq!(Some(args.heartbeat_interval), heartbeat_interval);
        assert_eq!(Some(args.peer_timeout), peer_timeout);
        assert_eq!(Some(args.replicas), replicas);
        assert_eq!(args.publish_kubeconfig, publish_kubeconfig);
        assert_eq!(args.nats_creds, nats_creds);
        assert_eq!(args.nats_tls_ca, nats_tls_ca);
        assert_eq!(args.nats_tls_cert, nats_tls_cert);
        assert_eq!(args.nats_tls_key, nats_tls_key);
        assert_eq!(args.allow_insecure, allow_insecure);
        assert_eq!(args.fleet_root, fleet_root);
        assert_eq!(args.cluster_key, cluster_key);
        assert_eq!(args.cluster_cert, cluster_cert);
        assert_eq!(extra, ["--leave-on-shutdown"]);
        assert!(args.leave_on_shutdown);
    }

    /// Unset flags are not written: the agent's defaults apply.
    #[test]
    fn unset_flags_leave_the_agents_defaults() {
        let cmd = AgentCommand::new("a1");
        assert_eq!(cmd.argv(), ["--cluster-name", "a1"]);
        let (built, default) = (
            parse(&cmd),
            Args::try_parse_from(["fleetbus-agent", "--cluster-name", "a1"]).unwrap(),
        );
        assert_eq!(format!("{built:?}"), format!("{default:?}"));
        assert!(!AgentCommand::new("a1")
            .publish_kubeconfig(false)
            .argv()
            .contains(&"--publish-kubeconfig".into()));
    }

    /// The secure mode's flags as `fleetbus mesh up` and the tests write them:
    /// each file where the agent reads it, nothing else changed, and a bool
    /// left off is not written.
    #[test]
    fn secure_flags_reach_the_agents_fields() {
        let cmd = AgentCommand::new("c1")
            .nats_url("tls://127.0.0.1:4222")
            .nats_creds("/m/c1/nats.creds")
            .nats_tls_ca("/m/ca.pem")
            .fleet_root("/m/root.pub")
            .cluster_key("/m/clusters/c1/cluster.key")
            .cluster_cert("/m/clusters/c1/cluster.cert")
            .allow_insecure(false);
        assert_eq!(
            cmd.argv(),
            [
                "--cluster-name",
                "c1",
                "--nats-url",
                "tls://127.0.0.1:4222",
                "--nats-creds",
                "/m/c1/nats.creds",
                "--nats-tls-ca",
                "/m/ca.pem",
                "--fleet-root",
                "/m/root.pub",
                "--cluster-key",
                "/m/clusters/c1/cluster.key",
                "--cluster-cert",
                "/m/clusters/c1/cluster.cert",
            ]
        );
        let args = parse(&cmd);
        let path = |p: &str| Some(PathBuf::from(p));
        assert_eq!(args.nats_creds, path("/m/c1/nats.creds"));
        assert_eq!(args.nats_tls_ca, path("/m/ca.pem"));
        assert_eq!((args.nats_tls_cert, args.nats_tls_key), (None, None));
        assert!(!args.allow_insecure);
        assert_eq!(args.fleet_root, path("/m/root.pub"));
        assert_eq!(args.cluster_key, path("/m/clusters/c1/cluster.key"));
        assert_eq!(args.cluster_cert, path("/m/clusters/c1/cluster.cert"));
    }

    #[test]
    fn durations_read_back_exactly() {
        for d in [
            Duration::from_secs(2),
            Duration::from_millis(500),
            Duration::from_millis(2500),
            Duration::from_micros(1500),
            Duration::from_nanos(1_000_000_007),
            Duration::from_secs(3600),
        ] {
            let args = parse(&AgentCommand::new("a").heartbeat_interval(d).peer_timeout(d));
            assert_eq!(
                (args.heartbeat_interval, args.peer_timeout),
                (d, d),
                "{}",
                duration(d)
            );
        }
        assert_eq!(duration(Duration::from_millis(500)), "500ms");
        assert_eq!(duration(Duration::from_secs(2)), "2s");
    }
}
