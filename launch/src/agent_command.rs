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
