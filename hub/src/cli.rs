//! Command-line interface of `fleetbus` (clap derive).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use fleetbus_schemas::k8s_names::is_dns1123_label;
use fleetbus_schemas::subject::Prefix;

use crate::names::MAX_CLUSTERS;

/// The fleetbus operator CLI.
#[derive(Debug, Parser)]
#[command(name = "fleetbus", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a local mesh: one nats-server, N devclusters and one agent per cluster.
    #[command(subcommand)]
    Mesh(MeshCommand),
    /// Drift across the fleet: current state, live events, history, correction on demand.
    #[command(subcommand)]
    Drift(DriftCommand),
    /// The fleet's clusters: list them, relabel one through its agent.
    ///
    /// A cluster's labels belong to its Local Cluster object on that cluster; rules
    /// select sources and sinks by them. `fleetbus clusters label C env=prod` asks C's
    /// agent over the bus (`<prefix>.cmd.C.label`) to change them, like
    /// `kubectl label clusters.fleetbus.io C env=prod` run on C itself; every agent
    /// re-evaluates placement within seconds.
    #[command(subcommand)]
    Clusters(ClustersCommand),
    /// Send the fleet's drift and conflict events to webhooks (Slack, Teams, generic JSON).
    ///
    /// One bridge for the fleet: it reads the drift and conflicts streams through the
    /// durable consumer --consumer (shared by every replica, so nothing is sent twice by two
    /// bridges and nothing is missed across a restart), folds storms into one
    /// message with a count, retries with backoff and Retry-After, and counts what
    /// it gives up in `fleetbus_notify_dead_letters_total` on --metrics-listen.
    /// Targets, their filters and the files holding their webhook URLs are read
    /// from --targets (see `fleetbus_hub::notify::targets`).
    Notify(NotifyArgs),
    /// Serve the live fleet dashboard (fleet, rules, drift) over HTTP, read from the bus.
    ///
    /// Binds 127.0.0.1:8080 by default; any other address needs --token. Read-only
    /// unless --allow-actions. The JSON endpoints behind the pages are described in
    /// the crate docs of `fleetbus_hub::dashboard`.
    Dashboard(DashboardArgs),
    /// One screen for the fleet: what needs attention, clusters by state, rules by
    /// sinks synced / waiting / in error / in conflict, copies drifted now, the last
    /// drift events.
    ///
    /// Reads the bus only (registry, rule status and drift buckets, drift stream).
    /// Exit 0 when all is well, 1 when something needs attention (a cluster
    /// Disconnected, ApiUnreachable or in Conflict; a rule in Error, Conflict or
    /// Invalid on some cluster; a drifted copy), 2 when the bus cannot be read.
    Status(StatusArgs),
    /// The fleet's ResourceSyncRules as each cluster's agent reports them.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// A fleet's root of trust: its NATS operator, accounts and root key.
    #[command(subcommand)]
    Fleet(FleetCommand),
    /// Mint one cluster's NATS credentials (a user of the fleet account that may
    /// publish only in the cluster's own subtree), as a creds file, helm values or
    /// the Secrets those values name.
    ///
    /// Kept under DIR/clusters/NAME/: joining again prints the same credentials;
    /// --rotate issues new ones. Exit 2 for an invalid name, 1 when DIR holds no
    /// fleet or the stored credentials do not verify.
    Join(JoinArgs),
    /// Revoke a cluster: every NATS user key NAME was ever issued goes on the fleet
    /// account's revocation list (the account JWT in DIR/nats-operator.conf,
    /// re-signed by the operator), and its stored credentials are removed.
    ///
    /// nats-server applies it on a config reload (`nats-server --signal reload`):
    /// it then refuses NAME's credentials and closes its connections. When DIR is
    /// a running secure `fleetbus mesh`, its nats-server is reloaded here. Then
    /// NAME's registry records are marked Left (with --nats-url, or on the mesh),
    /// so every peer shows it Left and its copies follow their rules'
    /// orphanPolicy. Leaving twice changes nothing (exit 0); exit 1 when NAME
    /// never joined, DIR holds no fleet or the bus cannot be written, 2 for an
    /// invalid name.
    Leave(LeaveArgs),
    /// Print a shell completion script: `source <(fleetbus completion bash)`, or save
    /// it where your shell loads completions (zsh: a file `_fleetbus` on `$fpath`;
    /// fish: `~/.config/fish/completions/fleetbus.fish`).
    Completion(CompletionArgs),
}

#[derive(Debug, Subcommand)]
pub enum FleetCommand {
    /// Create a fleet in DIR: NATS operator, system and fleet accounts (JetStream on,
    /// one signing key), the admin's credentials (DIR/admin.creds), a nats-server
    /// include for operator mode (DIR/nats-operator.conf) and the fleet root key
    /// (DIR/root.key, DIR/root.pub). Secrets are written 0600.
    ///
    /// On a DIR that already holds a fleet it changes nothing (exit 0); a non-empty
    /// DIR without a fleet needs --force, and existing keys are never overwritten.
    Init(FleetInitArgs),
}

/// The directory of a fleet's keys.
#[derive(Debug, Clone, Args)]
pub struct FleetDirArgs {
    /// The fleet directory (keep it offline: it holds the fleet's secret keys).
    #[arg(long, env = "FLEETBUS_FLEET_DIR", value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct FleetInitArgs {
    #[command(flatten)]
    pub dir: FleetDirArgs,
    /// The fleet's name (in the operator and account JWTs).
    #[arg(long, default_value = "fleetbus")]
    pub name: String,
    /// Subject prefix of the fleet: the permissions `join` mints are written for it.
    #[arg(long, env = "FLEETBUS_SUBJECT_PREFIX", default_value = "fleetbus", value_parser = parse_prefix)]
    pub subject_prefix: Prefix,
    /// Create the fleet in a non-empty directory (existing keys are still never overwritten).
    #[arg(long)]
    pub force: bool,
    /// The fleet account's JetStream file storage, bytes (suffixes K, M, G, T; -1:
    /// unlimited, the default: the server's own store bounds it). Like every limit
    /// below it bounds all members together; at most the servers' `max_file_store`,
    /// or the account gets no JetStream at all.
    #[arg(long, value_name = "BYTES", default_value = "-1", value_parser = parse_limit, allow_hyphen_values = true)]
    pub js_max_disk: i64,
    /// The fleet account's JetStream memory storage, bytes (suffixes K, M, G, T; -1:
    /// unlimited, the default); at most the servers' `max_memory_store`.
    #[arg(long, value_name = "BYTES", default_value = "-1", value_parser = parse_limit, allow_hyphen_values = true)]
    pub js_max_mem: i64,
    /// The fleet account's streams (KV buckets included; -1: unlimited).
    #[arg(long, value_name = "N", default_value = "64", value_parser = parse_limit, allow_hyphen_values = true)]
    pub js_max_streams: i64,
    /// The fleet account's consumers (-1: unlimited).
    #[arg(long, value_name = "N", default_value = "10000", value_parser = parse_limit, allow_hyphen_values = true)]
    pub js_max_consumers: i64,
}

/// A JetStream limit: `-1` (unlimited), or a positive count with an optional
/// binary suffix (`K`, `M`, `G`, `T`).
fn parse_limit(s: &str) -> Result<i64, String> {
    if s == "-1" {
        return Ok(-1);
    }
    let (digits, shift) = match s.char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 10),
        Some((i, 'M' | 'm')) => (&s[..i], 20),
        Some((i, 'G' | 'g')) => (&s[..i], 30),
        Some((i, 'T' | 't')) => (&s[..i], 40),
        _ => (s, 0),
    };
    let n: i64 = digits.parse().map_err(|_| {
        format!("{s:?} is not -1 or a positive number with an optional K, M, G or T")
    })?;
    if n <= 0 {
        return Err(format!("{s:?}: a limit is positive, or -1 for none"));
    }
    n.checked_mul(1 << shift)
        .ok_or_else(|| format!("{s:?} is too large"))
}

#[derive(Debug, Args)]
pub struct JoinArgs {
    /// The cluster's name (a DNS label).
    #[arg(value_parser = parse_cluster_name)]
    pub name: String,
    #[command(flatten)]
    pub dir: FleetDirArgs,
    /// What to print.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = crate::trust::JoinOutput::Creds)]
    pub output: crate::trust::JoinOutput,
    /// Issue new credentials and revoke the cluster's earlier ones (nats-server
    /// applies it on a config reload; a running secure mesh in DIR is reloaded).
    #[arg(long)]
    pub rotate: bool,
    /// With -o values: the NATS URL the cluster's agent connects to.
    #[arg(long, value_name = "URL")]
    pub nats_url: Option<String>,
    /// The PEM CA of the fleet's NATS (TLS on in values and manifest); default DIR/ca.pem if present.
    #[arg(long, value_name = "FILE")]
    pub ca: Option<PathBuf>,
    /// With -o manifest: the namespace of the Secrets (the helm release's).
    #[arg(long, default_value = "fleetbus-system")]
    pub namespace: String,
}

#[derive(Debug, Args)]
pub struct LeaveArgs {
    /// The cluster's name.
    #[arg(value_parser = parse_cluster_name)]
    pub name: String,
    #[command(flatten)]
    pub dir: FleetDirArgs,
    /// The fleet's NATS, where NAME's records are marked Left with DIR/admin.creds
    /// (and DIR/ca.pem when present). Default: the server of the mesh in DIR, if
    /// one runs; without either, only the revocation is done.
    #[arg(long, env = "FLEETBUS_NATS_URL", value_name = "URL")]
    pub nats_url: Option<String>,
}

#[derive(Debug, Args)]
pub struct DashboardArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// Address to serve on. A non-loopback address needs --token.
    #[arg(
        long,
        env = "FLEETBUS_DASHBOARD_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: std::net::SocketAddr,
    /// Require this bearer token (header `Authorization: Bearer T`, or a cookie set by
    /// opening `/?token=T` once). Prefer the environment variable: arguments are visible
    /// in `ps`.
    #[arg(long, env = "FLEETBUS_DASHBOARD_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Offer actions: "correct now" (as `fleetbus drift correct`) and relabelling (as
    /// `fleetbus clusters label`). Without it every action is refused (403).
    #[arg(long, env = "FLEETBUS_DASHBOARD_ALLOW_ACTIONS")]
    pub allow_actions: bool,
}

#[derive(Debug, Args)]
pub struct NotifyArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// The targets file (YAML): each target's name, format, URL file and filters.
    #[arg(long, env = "FLEETBUS_NOTIFY_TARGETS", value_name = "FILE")]
    pub targets: PathBuf,
    /// The durable consumer on each followed stream, shared by the bridge's
    /// replicas. The credentials `fleetbus fleet init` writes (notify.creds)
    /// allow `fleetbus-notify` only: another name needs credentials of its own.
    #[arg(
        long,
        env = "FLEETBUS_NOTIFY_CONSUMER",
        default_value = "fleetbus-notify"
    )]
    pub consumer: String,
    /// How long a storm (events of one kind, cluster, rule and phase) is folded
    /// into one summary after its first event is sent.
    #[arg(long, env = "FLEETBUS_NOTIFY_WINDOW", default_value = "30s")]
    pub window: humantime::Duration,
    /// How long the server waits for a delivered event's acknowledgement before it
    /// delivers it again (to this bridge or another replica): longer than --window
    /// plus every retry of a delivery.
    #[arg(long, env = "FLEETBUS_NOTIFY_ACK_WAIT", default_value = "10m")]
    pub ack_wait: humantime::Duration,
    /// How often the registry is read: clusters turning Disconnected,
    /// ApiUnreachable, Left or Ready again are sent from these reads, and with
    /// the fleet root (--dir holding root.pub) the keys events are checked with.
    #[arg(long, env = "FLEETBUS_NOTIFY_FLEET_INTERVAL", default_value = "10s")]
    pub fleet_interval: humantime::Duration,
    /// Attempts per message before it is a dead letter.
    #[arg(long, env = "FLEETBUS_NOTIFY_MAX_ATTEMPTS", default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: u32,
    /// Where to serve `/metrics`.
    #[arg(
        long,
        env = "FLEETBUS_NOTIFY_METRICS_LISTEN",
        default_value = "127.0.0.1:9466"
    )]
    pub metrics_listen: std::net::SocketAddr,
}

#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// How many of the last drift events to show.
    #[arg(long, env = "FLEETBUS_STATUS_EVENTS", default_value_t = 5)]
    pub events: usize,
}

#[derive(Debug, Subcommand)]
pub enum RulesCommand {
    /// Every rule: sources, sinks synced/selected, ready copies, errors, conflicts, state.
    Ls(RulesLsArgs),
    /// One rule on every cluster: selected or not and why, role, copies, ready n/m,
    /// errors and conflicts with the object each concerns. Exit 1 if no cluster reports it.
    Describe(RulesDescribeArgs),
    /// What a rule would create, update and delete on every cluster, asked of each agent,
    /// with a diff per object; writes nothing. Exit 0 no change, 1 changes, 2 an error
    /// (an invalid rule, a cluster that does not answer), like `kubectl diff`.
    Preview(RulesPreviewArgs),
    /// Pause, resume, abort or roll back a rule's progressive rollouts
    /// (`spec.rollout`), asked of every cluster that is a source of the rule.
    /// Exit 1 if an origin refuses or does not answer.
    Rollout(RulesRolloutArgs),
}

/// `fleetbus rules preview (-f rule.yaml | --rule NAME [-f source.yaml --origin CLUSTER])`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true).args(["file", "rule"])))]
pub struct RulesPreviewArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// The candidate ResourceSyncRule (YAML or JSON), as `kubectl apply -f` takes it; with
    /// --rule, a changed source object of that rule instead.
    #[arg(short = 'f', long = "filename")]
    pub file: Option<std::path::PathBuf>,
    /// Preview the rule NAME as it is (with -f: with a changed source object).
    #[arg(long)]
    pub rule: Option<String>,
    /// The cluster the changed source object (-f with --rule) lives on.
    #[arg(long, value_parser = parse_cluster_name, requires_all = ["rule", "file"])]
    pub origin: Option<String>,
    /// For a new rule: the cluster it will be created on (SyncPolicies may name a rule's
    /// author); default: each cluster previews it as its own.
    #[arg(long, value_parser = parse_cluster_name)]
    pub author: Option<String>,
    /// Ask only this cluster (repeatable); default: every cluster that has not left. For a
    /// new rule (-f) every such cluster is still asked for the objects it would publish.
    #[arg(long = "cluster", value_parser = parse_cluster_name)]
    pub clusters: Vec<String>,
    /// How long to wait for each cluster's answer (e.g. 10s, 1m).
    #[arg(long, env = "FLEETBUS_RULES_PREVIEW_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// What `fleetbus rules rollout` asks of a rule's origins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RolloutActionArg {
    /// Stop admitting clusters.
    Pause,
    /// Admit again (clears failures; admitted clusters get a new deadline).
    Resume,
    /// Stop this version for good; clusters keep what they run.
    Abort,
    /// Put every cluster back on the last version that completed.
    Rollback,
}

#[derive(Debug, Args)]
pub struct RulesRolloutArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// What to do.
    #[arg(value_enum)]
    pub action: RolloutActionArg,
    /// The ResourceSyncRule's name.
    pub rule: String,
    /// Only the rollout of this source object: Kind/namespace/name, or
    /// Kind/name for a cluster-scoped one (the kind is the rule's).
    #[arg(long)]
    pub object: Option<String>,
    /// How long to wait for each origin's reply (e.g. 5s, 1m).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct RulesLsArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct RulesDescribeArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// The ResourceSyncRule's name.
    pub rule: String,
}

#[derive(Debug, Subcommand)]
pub enum ClustersCommand {
    /// Change a cluster's labels (kubectl label syntax: KEY=VALUE sets, KEY- removes).
    ///
    /// Fails (exit 1, naming the cluster) when no agent answers for it within
    /// --timeout, or when the agent refuses: invalid key or value, or a changed value
    /// without --overwrite. Prints the cluster's labels after the change.
    Label(ClustersLabelArgs),
    /// Every cluster in the registry: name, state, heartbeat age, version,
    /// distribution, region, labels, features.
    Ls(ClustersLsArgs),
    /// One cluster: its record, state, every rule's state there, its drifted copies.
    /// Exit 1 if the registry has no such cluster.
    Describe(ClustersDescribeArgs),
    /// Sync progress of clusters (all active ones by default), asked of their agents.
    ///
    /// One line per cluster: `c3  catching up  7,412/10,000 copies (74%)  reading bus:
    /// done  errors 0`. Exit 0 when every selected cluster is in sync (its bus consumers
    /// caught up and every copy it should hold in sync), 1 otherwise. With --watch, asks
    /// again every second (redrawing on a terminal, a new line per cluster otherwise)
    /// until all are in sync; --timeout then ends it with exit 1 and what is missing.
    Progress(ClustersProgressArgs),
    /// Remove a cluster that will never come back: its registry records,
    /// kubeconfigs, beats, rule status and drift keys are purged and a
    /// `forgotten.NAME` key tells every agent to delete its Cluster object NAME.
    ///
    /// Refuses a cluster whose agent is alive (Ready, ApiUnreachable, Conflict)
    /// unless --force: revoke it first with `fleetbus leave`. Forgetting again is
    /// harmless; a name the registry never held: exit 1. Needs the admin's
    /// credentials.
    Forget(ClustersForgetArgs),
    /// Put a taint on a cluster (`key[=value]:NoSchedule|NoExecute`), or take it
    /// off with --remove. NoSchedule keeps new placements off the cluster;
    /// NoExecute moves existing ones after the rule's `failover.afterSeconds`,
    /// unless tolerated. A record on the bus, signed by the fleet root when
    /// --dir holds `root.key`: a dead cluster can be tainted. Needs the admin's
    /// credentials. Prints the cluster's taints after the change.
    Taint(ClustersTaintArgs),
    /// Taint a cluster `fleetbus.io/cordoned:NoSchedule`: no new placements.
    Cordon(ClustersCordonArgs),
    /// Remove the `fleetbus.io/cordoned:NoSchedule` taint.
    Uncordon(ClustersCordonArgs),
}

#[derive(Debug, Args)]
pub struct ClustersTaintArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// The cluster.
    #[arg(value_parser = parse_cluster_name)]
    pub cluster: String,
    /// `key[=value]:NoSchedule|NoExecute`.
    #[arg(value_parser = parse_taint)]
    pub taint: fleetbus_schemas::crd::ClusterTaint,
    /// Take the taint off (its key and effect) instead.
    #[arg(long)]
    pub remove: bool,
}

#[derive(Debug, Args)]
pub struct ClustersCordonArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// The cluster.
    #[arg(value_parser = parse_cluster_name)]
    pub cluster: String,
}

fn parse_taint(s: &str) -> Result<fleetbus_schemas::crd::ClusterTaint, String> {
    fleetbus_schemas::registry::parse_taint(s)
}

#[derive(Debug, Args)]
pub struct ClustersForgetArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    /// The cluster.
    #[arg(value_parser = parse_cluster_name)]
    pub cluster: String,
    /// Forget it even though its agent is alive (it will announce itself again
    /// unless its credentials are revoked).
    #[arg(long)]
    pub force: bool,
}

#[derive(Debug, Args)]
pub struct ClustersProgressArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Clusters to show (default: every Active cluster in the registry).
    #[arg(value_parser = parse_cluster_name)]
    pub clusters: Vec<String>,
    /// Ask again every second until every selected cluster is in sync.
    #[arg(long, env = "FLEETBUS_CLUSTERS_PROGRESS_WATCH")]
    pub watch: bool,
    /// With --watch: give up after this long (e.g. 60s, 5m); default: wait until Ctrl-C.
    #[arg(long, env = "FLEETBUS_CLUSTERS_PROGRESS_TIMEOUT", value_parser = humantime::parse_duration)]
    pub timeout: Option<Duration>,
}

#[derive(Debug, Args)]
pub struct ClustersLabelArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// The cluster to relabel.
    #[arg(value_parser = parse_cluster_name)]
    pub cluster: String,
    /// KEY=VALUE to set, KEY- to remove.
    #[arg(required = true)]
    pub labels: Vec<String>,
    /// Allow changing the value of an existing label.
    #[arg(long, env = "FLEETBUS_CLUSTERS_LABEL_OVERWRITE")]
    pub overwrite: bool,
    /// How long to wait for the agent's reply (e.g. 5s, 1m).
    #[arg(long, env = "FLEETBUS_CLUSTERS_LABEL_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Args)]
pub struct ClustersLsArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

#[derive(Debug, Args)]
pub struct ClustersDescribeArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// The cluster.
    #[arg(value_parser = parse_cluster_name)]
    pub cluster: String,
}

#[derive(Debug, Subcommand)]
pub enum DriftCommand {
    /// Current drift across the fleet (from the drift KV bucket).
    Ls(DriftLsArgs),
    /// Follow drift events as they happen (Ctrl-C stops).
    Watch(DriftWatchArgs),
    /// Every stored event of one object, oldest first.
    History(DriftHistoryArgs),
    /// Ask one cluster's agent to correct its drifted copies now.
    Correct(DriftCorrectArgs),
}

/// Where the bus is.
#[derive(Debug, Clone, Args)]
pub struct BusArgs {
    /// NATS server URL.
    #[arg(
        long,
        env = "FLEETBUS_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats_url: String,

    /// NATS credentials file (`.creds`: user JWT and NKey seed), as the agent's `--nats-creds`.
    #[arg(
        long,
        alias = "nats-creds",
        env = "FLEETBUS_NATS_CREDS",
        value_name = "FILE"
    )]
    pub creds: Option<PathBuf>,

    /// PEM CA to verify the NATS server with; TLS is then required (as the agent's
    /// `--nats-tls-ca`).
    #[arg(
        long,
        alias = "nats-tls-ca",
        env = "FLEETBUS_NATS_CA",
        value_name = "FILE"
    )]
    pub ca: Option<PathBuf>,

    /// Local mesh directory: without --creds and --ca, a secure mesh's admin creds
    /// and CA are taken from its mesh.json when --nats-url is that mesh's server.
    #[arg(
        long = "dir",
        env = "FLEETBUS_MESH_DIR",
        default_value = ".fleetbus-mesh",
        value_name = "DIR"
    )]
    pub mesh_dir: PathBuf,

    /// Subject prefix of the fleet (streams and buckets derive from it).
    #[arg(long, env = "FLEETBUS_SUBJECT_PREFIX", default_value = "fleetbus", value_parser = parse_prefix)]
    pub subject_prefix: Prefix,
}

fn parse_prefix(s: &str) -> Result<Prefix, String> {
    Prefix::new(s).map_err(|e| e.to_string())
}

/// A cluster name is a DNS-1123 label (agents refuse any other: it is an object name
/// and a subject token), so `*`, `''` or `b.>` can only be a mistake, never a cluster,
/// and would otherwise be a wildcard in a subject.
fn parse_cluster_name(s: &str) -> Result<String, String> {
    if is_dns1123_label(s) {
        Ok(s.to_owned())
    } else {
        Err(crate::names::NameError::Invalid(s.to_owned()).to_string())
    }
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum OutputFormat {
    /// Human-readable table or lines.
    #[default]
    Table,
    /// JSON (the protocol's messages), for scripts.
    Json,
    /// YAML: the same values as JSON.
    Yaml,
}

#[derive(Debug, Clone, Args)]
pub struct OutputArgs {
    /// Output format.
    #[arg(short = 'o', long = "output", env = "FLEETBUS_OUTPUT", value_enum, default_value_t = OutputFormat::Table)]
    pub output: OutputFormat,
}

#[derive(Debug, Args)]
pub struct DriftLsArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Only this cluster.
    #[arg(long, env = "FLEETBUS_CLUSTER", value_parser = parse_cluster_name)]
    pub cluster: Option<String>,
    /// Only copies managed by this ResourceSyncRule.
    #[arg(long, env = "FLEETBUS_RULE")]
    pub rule: Option<String>,
}

#[derive(Debug, Args)]
pub struct DriftWatchArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// Only this cluster.
    #[arg(long, env = "FLEETBUS_CLUSTER", value_parser = parse_cluster_name)]
    pub cluster: Option<String>,
    /// Replay every stored event first, then follow (default: new events only).
    #[arg(long, env = "FLEETBUS_DRIFT_WATCH_ALL")]
    pub all: bool,
}

#[derive(Debug, Args)]
pub struct DriftHistoryArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// The object: KIND/NAMESPACE/NAME, or KIND/NAME if cluster-scoped.
    pub object: String,
    /// Only this cluster.
    #[arg(long, env = "FLEETBUS_CLUSTER", value_parser = parse_cluster_name)]
    pub cluster: Option<String>,
}

#[derive(Debug, Args)]
pub struct DriftCorrectArgs {
    #[command(flatten)]
    pub bus: BusArgs,
    #[command(flatten)]
    pub out: OutputArgs,
    /// The cluster whose agent corrects its copies.
    #[arg(long, env = "FLEETBUS_CLUSTER", value_parser = parse_cluster_name)]
    pub cluster: String,
    /// Only copies managed by this ResourceSyncRule.
    #[arg(long)]
    pub rule: Option<String>,
    /// Only copies of this kind.
    #[arg(long)]
    pub kind: Option<String>,
    /// Only copies in this namespace.
    #[arg(long)]
    pub namespace: Option<String>,
    /// Only copies with this name.
    #[arg(long)]
    pub name: Option<String>,
    /// How long to wait for the agent's reply (e.g. 10s, 1m).
    #[arg(long, env = "FLEETBUS_DRIFT_CORRECT_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

#[derive(Debug, Subcommand)]
pub enum MeshCommand {
    /// Start a local mesh (in the foreground unless --detach; Ctrl-C stops it).
    Up(UpArgs),
    /// Stop a mesh started with --detach (or running in another terminal).
    Down(DirArgs),
    /// Show each component of the mesh: pid, alive, URL, agent readiness.
    Status(DirArgs),
    /// Kill one cluster's agent and API server (SIGKILL, as a machine dies):
    /// its peers see it Disconnected, placement fails its copies over.
    Stop(MeshClusterArgs),
    /// Run a stopped cluster's API server and agent again (same data and
    /// arguments) and wait until the agent is ready.
    Start(MeshClusterArgs),
    /// Write what a secure mesh runs with, without starting anything: for a mesh
    /// whose processes run elsewhere (the docker-compose mesh runs this in a
    /// container).
    ///
    /// The same files `mesh up` writes in DIR: the fleet (`fleet init`), the NATS
    /// CA (DIR/ca.pem), a server certificate for 127.0.0.1, localhost and every
    /// --nats-host, the nats-server configuration (DIR/nats.conf, paths absolute
    /// under DIR), the admin's DIR/admin.creds and each cluster's
    /// DIR/<cluster>/nats.creds, key and certificate (as `join`). Again on the same
    /// directory: nothing is minted anew, but a --nats-host the certificate lacks
    /// gets a new CA and server certificate.
    Init(InitArgs),
}

/// One cluster of a running mesh.
#[derive(Debug, Args)]
pub struct MeshClusterArgs {
    #[command(flatten)]
    pub dir: DirArgs,
    /// The cluster's name in the mesh.
    pub cluster: String,
}

/// Which clusters a mesh has.
#[derive(Debug, Args)]
pub struct MemberArgs {
    /// Number of clusters (default 3, or the number of --names; at most 26).
    #[arg(long, env = "FLEETBUS_MESH_CLUSTERS", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CLUSTERS)))]
    pub clusters: Option<u32>,

    /// Cluster names, comma-separated DNS-1123 labels (default a,b,c,...; at most 26).
    #[arg(long, env = "FLEETBUS_MESH_NAMES", value_delimiter = ',')]
    pub names: Option<Vec<String>>,
}

#[derive(Debug, Args)]
pub struct InitArgs {
    #[command(flatten)]
    pub dir: DirArgs,

    #[command(flatten)]
    pub members: MemberArgs,

    /// A host name (or IP address) clients reach nats-server by, named in its
    /// certificate besides 127.0.0.1 and localhost (repeat, or comma-separate).
    #[arg(long, env = "FLEETBUS_MESH_NATS_HOSTS", value_delimiter = ',')]
    pub nats_host: Vec<String>,
}

/// Where the mesh keeps its state, data and logs.
#[derive(Debug, Args)]
pub struct DirArgs {
    /// Mesh directory: mesh.json, nats store, per-cluster data, kubeconfigs and logs.
    #[arg(long, env = "FLEETBUS_MESH_DIR", default_value = ".fleetbus-mesh")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub dir: DirArgs,

    #[command(flatten)]
    pub members: MemberArgs,

    /// Start everything, print the tour and return, leaving the mesh running.
    #[arg(long, env = "FLEETBUS_MESH_DETACH")]
    pub detach: bool,

    /// NATS client port (0 picks a free one).
    #[arg(long, env = "FLEETBUS_MESH_NATS_PORT", default_value_t = 0)]
    pub nats_port: u16,

    /// Nodes each devcluster reports.
    #[arg(long, env = "FLEETBUS_MESH_NODES", default_value_t = 3)]
    pub nodes: u32,

    /// Seconds to wait for each component to become ready.
    #[arg(long, env = "FLEETBUS_MESH_READY_TIMEOUT", default_value_t = 90)]
    pub ready_timeout: u64,

    /// Run the open mesh of old: plain-text NATS, no credentials (anyone who can
    /// reach the port reads and writes everything). The default is secure: TLS,
    /// operator mode, one credential per cluster (SECURITY.md).
    #[arg(long, env = "FLEETBUS_MESH_INSECURE")]
    pub insecure: bool,

    /// Install every *.yaml in DIR (the SIG Multicluster CRDs: ClusterProfile,
    /// ClusterProperty, ServiceExport/ServiceImport, PlacementDecision) into each
    /// cluster before its agent starts. Default: `../shared/reference/crds` beside
    /// the checkout, when it exists; without it those standards stay inactive.
    #[arg(long, env = "FLEETBUS_UPSTREAM_CRDS", value_name = "DIR")]
    pub upstream_crds: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn fleet_init_limits_default_to_the_documented_ones_and_refuse_garbage() {
        let Command::Fleet(FleetCommand::Init(a)) =
            parse(&["fleet", "init", "--dir", "f"]).unwrap().command
        else {
            panic!("not fleet init");
        };
        let got = crate::trust::JsLimits {
            disk_storage: a.js_max_disk,
            mem_storage: a.js_max_mem,
            streams: a.js_max_streams,
            consumers: a.js_max_consumers,
        };
        assert_eq!(got, crate::trust::DEFAULT_JS_LIMITS);
        let Command::Fleet(FleetCommand::Init(a)) = parse(&[
            "fleet",
            "init",
            "--dir",
            "f",
            "--js-max-disk",
            "-1",
            "--js-max-mem",
            "512M",
            "--js-max-consumers",
            "40",
        ])
        .unwrap()
        .command
        else {
            panic!("not fleet init");
        };
        assert_eq!(
            (a.js_max_disk, a.js_max_mem, a.js_max_consumers),
            (-1, 512 << 20, 40)
        );
        for bad in ["0", "-2", "x", "1.5G", "G", "99999999999T", ""] {
            assert!(
                parse(&["fleet", "init", "--dir", "f", "--js-max-disk", bad]).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("fleetbus").chain(args.iter().copied()))
    }

    #[test]
    fn up_parses_names_and_flags() {
        let cli = parse(&[
            "mesh",
            "up",
            "--clusters",
            "3",
            "--names",
            "a,b,c",
            "--dir",
            "/tmp/m",
            "--detach",
        ])
        .unwrap();
        let Command::Mesh(MeshCommand::Up(up)) = cli.command else {
            panic!("not up")
        };
        assert_eq!(up.members.clusters, Some(3));
        assert_eq!(up.members.names.unwrap(), vec!["a", "b", "c"]);
        assert_eq!(up.dir.dir, PathBuf::from("/tmp/m"));
        assert!(up.detach);
        assert_eq!((up.nats_port, up.nodes), (0, 3));
        assert_eq!(up.upstream_crds, None);
        let cli = parse(&["mesh", "up", "--upstream-crds", "/x/crds"]).unwrap();
        let Command::Mesh(MeshCommand::Up(up)) = cli.command else {
            panic!("not up")
        };
        assert_eq!(up.upstream_crds, Some(PathBuf::from("/x/crds")));
    }

    #[test]
    fn dir_defaults_to_dot_fleetbus_mesh() {
        let cli = parse(&["mesh", "status"]).unwrap();
        let Command::Mesh(MeshCommand::Status(d)) = cli.command else {
            panic!("not status")
        };
        assert_eq!(d.dir, PathBuf::from(".fleetbus-mesh"));
    }

    #[test]
    fn drift_commands_parse_with_defaults() {
        let cli = parse(&["drift", "ls", "--cluster", "c2", "-o", "json"]).unwrap();
        let Command::Drift(DriftCommand::Ls(ls)) = cli.command else {
            panic!("not ls")
        };
        assert_eq!(ls.cluster.as_deref(), Some("c2"));
        assert_eq!(ls.out.output, OutputFormat::Json);
        assert_eq!(ls.bus.subject_prefix, Prefix::default());
        let cli = parse(&["drift", "correct", "--cluster", "c2", "--timeout", "250ms"]).unwrap();
        let Command::Drift(DriftCommand::Correct(c)) = cli.command else {
            panic!("not correct")
        };
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!(c.out.output, OutputFormat::Table);
        let cli = parse(&["drift", "history", "Deployment/team-a/web"]).unwrap();
        let Command::Drift(DriftCommand::History(h)) = cli.command else {
            panic!("not history")
        };
        assert_eq!(h.object, "Deployment/team-a/web");
    }

    #[test]
    fn clusters_label_parses_kubectl_syntax() {
        let cli = parse(&[
            "clusters",
            "label",
            "c2",
            "env=prod",
            "tier-",
            "--overwrite",
            "--timeout",
            "2s",
        ])
        .unwrap();
        let Command::Clusters(ClustersCommand::Label(l)) = cli.command else {
            panic!("not label")
        };
        assert_eq!(l.cluster, "c2");
        assert_eq!(l.labels, vec!["env=prod", "tier-"]);
        assert!(l.overwrite);
        assert_eq!(l.timeout, Duration::from_secs(2));
        assert!(parse(&["clusters", "label", "c2"]).is_err());
        assert!(parse(&["clusters", "ls", "-o", "json"]).is_ok());
    }

    #[test]
    fn dashboard_defaults_to_loopback_read_only() {
        let cli = parse(&["dashboard"]).unwrap();
        let Command::Dashboard(d) = cli.command else {
            panic!("not dashboard")
        };
        assert_eq!(d.listen, "127.0.0.1:8080".parse().unwrap());
        assert!(!d.allow_actions);
        assert_eq!(d.token, None);
    }

    #[test]
    fn views_parse_with_bus_flags_and_yaml() {
        let cli = parse(&["status", "--creds", "/x.creds", "-o", "yaml"]).unwrap();
        let Command::Status(s) = cli.command else {
            panic!("not status")
        };
        assert_eq!(s.bus.creds, Some(PathBuf::from("/x.creds")));
        assert_eq!((s.out.output, s.events), (OutputFormat::Yaml, 5));
        let cli = parse(&[
            "rules",
            "describe",
            "cfg.shared",
            "--subject-prefix",
            "acme",
        ])
        .unwrap();
        let Command::Rules(RulesCommand::Describe(d)) = cli.command else {
            panic!("not describe")
        };
        assert_eq!(d.rule, "cfg.shared");
        assert_eq!(d.bus.subject_prefix.to_string(), "acme");
        assert!(parse(&["clusters", "describe", "c2", "-o", "json"]).is_ok());
        assert!(parse(&["rules", "ls"]).is_ok());
    }

    #[test]
    fn bad_args_are_usage_errors() {
        for bad in [
            &["mesh", "up", "--clusters", "0"][..],
            &["mesh", "up", "--clusters", "many"],
            &["mesh", "up", "--bogus"],
            &["mesh", "sideways"],
            &["mesh"],
            &["drift", "correct"],
            &["drift", "correct", "--cluster", "c2", "--timeout", "soon"],
            &["drift", "ls", "-o", "xml"],
            &["drift", "ls", "--subject-prefix", "Bad.Prefix"],
            &["drift", "history"],
            // Cluster names that cannot exist (and would be subject wildcards).
            &["drift", "correct", "--cluster", "*"],
            &["drift", "correct", "--cluster", ""],
            &["drift", "correct", "--cluster", "b.>"],
            &["drift", "history", "Deployment/a/web", "--cluster", "*"],
            &["drift", "ls", "--cluster", "B"],
            &["drift", "watch", "--cluster", "b>"],
            &["clusters", "label", "*", "env=prod"],
            &["clusters", "progress", "a", "b.c"],
            &["mesh", "up", "--clusters", "27"],
            &["dashboard", "--listen", "localhost"],
            &["dashboard", "--listen", "8080"],
            &["dashboard", "--bogus"],
            &["rules", "describe"],
            &["rules", "ls", "-o", "xml"],
            &["clusters", "describe", "B"],
            &["clusters", "describe"],
            &["status", "--events", "many"],
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
        }
    }
}
