//! Prometheus metrics of the agent, one registry with the `fleetbus_` prefix.

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// A histogram per rule (`rule` label), each made with the same buckets.
pub type PerRuleHistogram = Family<Vec<(String, String)>, Histogram, fn() -> Histogram>;

/// Buckets of `fleetbus_placement_pass_seconds`: fine around the 1 s goal
/// of a full pass over 1,000 objects × 1,000 clusters (BENCHMARKS.md).
const PLACEMENT_PASS_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.5, 5.0, 10.0,
];

/// A label set of one `(name, value)` pair, e.g. `reason="undecodable"`.
type Labels = Vec<(&'static str, &'static str)>;

/// All agent metrics. Cheap to share behind an `Arc`; every metric is atomic.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// Registry entries skipped, by reason (`fleetbus_registry_rejected_total`).
    pub registry_rejected: Family<Labels, Counter>,
    /// Other clusters currently claiming this cluster's name, plus pairs of
    /// peers claiming one name (`fleetbus_cluster_name_conflicts`).
    pub name_conflicts: Gauge,
    /// Heartbeats this agent published.
    pub heartbeats_published: Counter,
    /// Heartbeats received from peers.
    pub heartbeats_received: Counter,
    /// Peers by state (`fleetbus_peers{state}`).
    pub peers: Family<Labels, Gauge>,
    /// Writes to the Kubernetes API by kind of object (to see churn).
    pub kube_writes: Family<Labels, Counter>,
    /// Reader kubeconfigs minted.
    pub kubeconfig_mints: Counter,
    /// Times the detected cluster metadata changed (and was republished).
    pub metadata_changes: Counter,
    /// Times the bus layout was found deleted under the running agent and recreated.
    pub bus_layout_recreated: Counter,
    /// Writes for a peer that the local API server refused for good (4xx), by
    /// what was written (`fleetbus_peer_rejected_total{write}`).
    pub peer_rejected: Family<Labels, Counter>,
    /// Registry reconcile passes, by what woke the pass
    /// (`fleetbus_registry_passes_total{wake}`): at 1,000 peers a pass costs
    /// milliseconds, so their rate is the registry's idle cost.
    pub registry_passes: Family<Labels, Counter>,
    /// Peers whose object the local API server currently refuses.
    pub peers_failing: Gauge,
    /// 1 while a standard CRD the agent writes (ClusterProfile,
    /// ClusterProperty) is not served, by CRD (`fleetbus_standard_crd_missing`).
    pub standard_crd_missing: Family<Labels, Gauge>,
    /// ClusterProfiles in the agent's namespace another cluster manager owns
    /// (left alone).
    pub foreign_profiles: Gauge,
    /// Multi-cluster Services, by `event`: `published` records, imports
    /// `refused_policy` or `refused_forbidden`, records `replayed`, objects
    /// not imported over (`foreign`), writes that failed (`write_failed`).
    pub mcs_events: Family<Labels, Counter>,
    /// 1 while this agent's own record fails the validation every reader
    /// applies (peers then skip it), else 0.
    pub own_record_invalid: Gauge,
    pub registry_foreign_puts: Counter,
    /// Commands (`<p>.cmd.<self>.<verb>`) refused, by `verb` and `reason`.
    pub commands_rejected: Family<Labels, Counter>,
    /// Source objects whose `fleetbus.io/update-policy` annotation has a value
    /// fleetbus does not know (ignored), as of the last sync pass; each object
    /// counts once, however many rules select it.
    pub sync_unknown_update_policy: Gauge,
    /// Envelopes published by sync, by `type` (`snapshot`, `tombstone`).
    pub sync_published: Family<Labels, Counter>,
    /// Bus messages or objects sync skipped, by `reason` (`malformed`,
    /// `unsupported_version`, `subject_mismatch`, `too_large`, `publish_failed`).
    pub sync_rejected: Family<Labels, Counter>,
    /// Objects this cluster's SyncPolicy refused, by `direction` (`export`:
    /// not published for a rule; `import`: a copy not written): each (rule,
    /// object) counted when it becomes refused.
    pub policy_refused: Family<Labels, Counter>,
    /// 1 while this cluster's SyncPolicy `default` is invalid (the last
    /// valid one stays in force, or none: closed), else 0
    /// (`fleetbus_sync_policy_invalid`).
    pub sync_policy_invalid: Gauge,
    /// Messages that failed the fleet's trust checks (secure mode), by
    /// `reason` (`unsigned`, `bad_signature`, `unknown_signer`,
    /// `signer_mismatch`, `expired_certificate`, `replay`, `content_hash`).
    pub rejected_messages: Family<Labels, Counter>,
    /// Writes of copies, by `op` (`create`, `update`, `recreate`, `delete`, `orphan`, `status`).
    pub sync_writes: Family<Labels, Counter>,
    /// Failed operations on copies, by `op` (`write`: create or replace;
    /// `collect`: delete or orphan); each is retried after a backoff.
    pub sync_write_failures: Family<Labels, Counter>,
    /// Rule status records (`<prefix>-rulestatus`) not written to the bus, by
    /// `op` (`put`, `delete`); each is tried again.
    pub rule_status_publish_failures: Family<Labels, Counter>,
    /// Sync passes run (a failing copy is tried again far less often).
    pub sync_passes: Counter,
    /// Sink passes that planned every pair and decided every copy (see
    /// `sync::sink::plan`): rules, the fleet or a kind's state changed, a
    /// re-read of the bus or a re-list, or the periodic safety net.
    pub sync_full_plans: Counter,
    /// Placement decisions this origin put on the bus (PROTOCOL §6.10).
    pub placement_decisions: Counter,
    /// Placement decisions that replaced a failed cluster.
    pub placement_failovers: Counter,
    /// Seconds the origin's placement pass spent deciding (every unit
    /// gathered and `decide`d, the puts of changed records not included),
    /// observed for passes with at least one unit: a pass decides every
    /// unit of this origin, so its cost is units × matched clusters.
    pub placement_pass_seconds: Histogram,
    /// Units (rule × object, or groups) the last placement pass decided.
    pub placement_units: Gauge,
    /// Objects that name an origin cluster but are no copy this agent wrote
    /// (`sync::model::mark`), each time collection passed one by: never
    /// deleted nor overwritten.
    pub sync_look_alikes: Counter,
    /// 1 when this cluster's copy-mark key could not be read or stored and
    /// the agent marks copies with a key of this run only
    /// (`copy_mark::ephemeral`).
    pub copy_mark_ephemeral: Gauge,
    /// Drift events cut to fit the server's `max_payload` (large values
    /// replaced by their size and hash): announced all the same.
    pub drift_events_truncated: Counter,
    /// 1 when the last sync pass wrote nothing to the API server and left
    /// nothing queued or due (no input waiting, no coalesced rule status
    /// to write): what a test or an operator waits on before expecting
    /// quiet, instead of waiting for time.
    pub sync_settled: Gauge,
    /// Copies currently in sync, over every rule.
    pub sync_objects: Gauge,
    /// Objects currently in conflict, over every rule.
    pub sync_conflicts: Gauge,
    /// Objects currently failing to sync, over every rule.
    pub sync_errors: Gauge,
    /// This cluster's objects that rules select and that are never published
    /// (`fleetbus_sync_withheld`: tokens, objects fleetbus writes itself).
    pub sync_withheld: Gauge,
    /// Drifts by `cluster`, `rule`, `kind` and `phase` (`Fight` included): a
    /// coalesced drift event counts every occurrence it stands for, when it
    /// is published.
    pub drifts: Family<Vec<(String, String)>, Counter>,
    /// Seconds from the watch event of a drifted copy to its `Detected` event
    /// acknowledged by the bus.
    pub drift_detection_seconds: Histogram,
    /// Seconds from the watch event of a drifted copy to its correction written.
    pub drift_correction_seconds: Histogram,
    /// Per rule, seconds from the origin publishing a version of an object to
    /// its copy written here (`fleetbus_sync_lag_seconds{rule}`), observed once
    /// per new version written (a drift correction or a re-list rewrite of the
    /// same version is not a lag). The two times come from two clusters' clocks:
    /// skew between them adds to it.
    pub sync_lag_seconds: PerRuleHistogram,
    /// Copies currently drifted (reported, not corrected, or failing).
    pub drifted: Gauge,
    /// Per rule, copies in sync and objects in conflict or in error, as of the
    /// last status pass (`fleetbus_rule_objects{rule,state}`): what an alert
    /// on "a rule in error" and the dashboard's per-rule panels read.
    rule_objects: Family<Vec<(&'static str, String)>, Gauge>,
    /// The rules that have series in `rule_objects`, so a deleted rule's
    /// series are removed rather than left at their last value.
    rule_names: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// Sync's writes (`sync_writes` and `sync_kube_write`), summed: whether a
    /// sync pass wrote anything (`sync_settled`).
    writes_made: std::sync::atomic::AtomicU64,
    /// 1 while `/readyz` would answer 200, else 0; set at every scrape
    /// (`fleetbus_ready`), so an alert needs no probe of its own.
    pub ready: Gauge,
}

/// Every value of `fleetbus_peers{state}`: the Cluster states a peer can be in.
pub const PEER_STATES: [&str; 6] = [
    "Ready",
    "Disconnected",
    "Disabled",
    "Conflict",
    "Left",
    "ApiUnreachable",
];

/// One rule's counts for [`Metrics::set_rule_objects`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleObjects {
    pub rule: String,
    pub synced: i64,
    pub conflicts: i64,
    pub errors: i64,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("fleetbus");
        let registry_rejected = Family::<Labels, Counter>::default();
        registry.register(
            "registry_rejected",
            "Registry bucket entries skipped because they were invalid",
            registry_rejected.clone(),
        );
        let name_conflicts = Gauge::default();
        registry.register(
            "cluster_name_conflicts",
            "Cluster names claimed by more than one clusterID",
            name_conflicts.clone(),
        );
        let heartbeats_published = Counter::default();
        registry.register(
            "heartbeats_published",
            "Cluster records published by this agent",
            heartbeats_published.clone(),
        );
        let heartbeats_received = Counter::default();
        registry.register(
            "heartbeats_received",
            "Cluster records received from peers",
            heartbeats_received.clone(),
        );
        let peers = Family::<Labels, Gauge>::default();
        registry.register("peers", "Peer clusters by state", peers.clone());
        let kube_writes = Family::<Labels, Counter>::default();
        registry.register(
            "kube_writes",
            "Writes to the local Kubernetes API by object kind",
            kube_writes.clone(),
        );
        let kubeconfig_mints = Counter::default();
        registry.register(
            "kubeconfig_mints",
            "Reader kubeconfigs minted through the TokenRequest API",
            kubeconfig_mints.clone(),
        );
        let metadata_changes = Counter::default();
        registry.register(
            "metadata_changes",
            "Times the cluster metadata detected from Nodes changed and was republished",
            metadata_changes.clone(),
        );
        let bus_layout_recreated = Counter::default();
        registry.register(
            "bus_layout_recreated",
            "Times the registry bucket was found deleted under the running agent and the bus layout recreated",
            bus_layout_recreated.clone(),
        );
        let peer_rejected = Family::<Labels, Counter>::default();
        registry.register(
            "peer_rejected",
            "Writes for a peer the local API server refused for good (not retried until the peer's record changes)",
            peer_rejected.clone(),
        );
        let registry_passes = Family::<Labels, Counter>::default();
        registry.register(
            "registry_passes",
            "Registry reconcile passes, by what woke the pass",
            registry_passes.clone(),
        );
        let peers_failing = Gauge::default();
        registry.register(
            "peers_failing",
            "Peers whose Cluster object the local API server currently refuses",
            peers_failing.clone(),
        );
        let standard_crd_missing = Family::<Labels, Gauge>::default();
        registry.register(
            "standard_crd_missing",
            "1 while a SIG Multicluster CRD the agent writes is not installed (by crd)",
            standard_crd_missing.clone(),
        );
        let foreign_profiles = Gauge::default();
        registry.register(
            "foreign_profiles",
            "ClusterProfiles in the agent's namespace owned by another cluster manager (left alone)",
            foreign_profiles.clone(),
        );
        let mcs_events = Family::<Labels, Counter>::default();
        registry.register(
            "mcs_events",
            "Multi-cluster Services: records published, imports refused, replays, foreign objects, failed writes (by event)",
            mcs_events.clone(),
        );
        let registry_foreign_puts = Counter::default();
        registry.register(
            "registry_foreign_puts",
            "Refused records written under this cluster's own registry key (its own was put back)",
            registry_foreign_puts.clone(),
        );
        let own_record_invalid = Gauge::default();
        registry.register(
            "own_record_invalid",
            "1 while this cluster's own record fails the validation its peers apply (they skip it)",
            own_record_invalid.clone(),
        );
        let commands_rejected = Family::<Labels, Counter>::default();
        registry.register(
            "commands_rejected",
            "Commands to this agent refused (malformed, invalid), by verb and reason",
            commands_rejected.clone(),
        );
        let sync_unknown_update_policy = Gauge::default();
        registry.register(
            "sync_unknown_update_policy",
            "Source objects whose fleetbus.io/update-policy annotation has an unknown value (ignored)",
            sync_unknown_update_policy.clone(),
        );
        let sync_published = Family::<Labels, Counter>::default();
        registry.register(
            "sync_published",
            "Object envelopes published by this agent, by type",
            sync_published.clone(),
        );
        let sync_rejected = Family::<Labels, Counter>::default();
        registry.register(
            "sync_rejected",
            "Bus messages and objects sync skipped, by reason",
            sync_rejected.clone(),
        );
        let policy_refused = Family::<Labels, Counter>::default();
        registry.register(
            "policy_refused",
            "Objects this cluster's SyncPolicy refused for a rule, by direction",
            policy_refused.clone(),
        );
        let sync_policy_invalid = Gauge::default();
        registry.register(
            "sync_policy_invalid",
            "1 while this cluster's SyncPolicy default is invalid (the last valid one, or nothing, in force)",
            sync_policy_invalid.clone(),
        );
        let rejected_messages = Family::<Labels, Counter>::default();
        registry.register(
            "rejected_messages",
            "Messages dropped by the fleet's trust checks (signature, certificate, freshness), by reason",
            rejected_messages.clone(),
        );
        let sync_writes = Family::<Labels, Counter>::default();
        registry.register(
            "sync_writes",
            "Writes of copies to the local Kubernetes API, by operation",
            sync_writes.clone(),
        );
        let sync_write_failures = Family::<Labels, Counter>::default();
        registry.register(
            "sync_write_failures",
            "Failed operations on copies (retried after a per-copy backoff), by operation",
            sync_write_failures.clone(),
        );
        let rule_status_publish_failures = Family::<Labels, Counter>::default();
        registry.register(
            "rule_status_publish_failures",
            "Rule status records not written to the bus (tried again), by operation",
            rule_status_publish_failures.clone(),
        );
        let sync_passes = Counter::default();
        registry.register("sync_passes", "Sync passes run", sync_passes.clone());
        let sync_full_plans = Counter::default();
        registry.register(
            "sync_full_plans",
            "Sink passes that planned every copy (not only what changed)",
            sync_full_plans.clone(),
        );
        let placement_decisions = Counter::default();
        registry.register(
            "placement_decisions",
            "Placement decisions this origin put on the bus",
            placement_decisions.clone(),
        );
        let placement_failovers = Counter::default();
        registry.register(
            "placement_failovers",
            "Placement decisions that replaced a failed or tainted cluster",
            placement_failovers.clone(),
        );
        let placement_pass_seconds = Histogram::new(PLACEMENT_PASS_BUCKETS);
        registry.register(
            "placement_pass_seconds",
            "Seconds a placement pass spent deciding every unit of this origin (puts not included)",
            placement_pass_seconds.clone(),
        );
        let placement_units = Gauge::default();
        registry.register(
            "placement_units",
            "Units the last placement pass decided",
            placement_units.clone(),
        );
        let sync_look_alikes = Counter::default();
        registry.register(
            "sync_look_alikes",
            "Objects naming an origin cluster that are no copy of this agent's, passed by without deleting them",
            sync_look_alikes.clone(),
        );
        let copy_mark_ephemeral = Gauge::default();
        registry.register(
            "copy_mark_ephemeral",
            "1 when the copy-mark key could not be stored and copies are marked with a key of this run only",
            copy_mark_ephemeral.clone(),
        );
        let drift_events_truncated = Counter::default();
        registry.register(
            "drift_events_truncated",
            "Drift events cut to fit the server's max_payload (large values replaced by their size and hash)",
            drift_events_truncated.clone(),
        );
        let sync_settled = Gauge::default();
        registry.register(
            "sync_settled",
            "1 when the last sync pass wrote nothing and left nothing queued or due",
            sync_settled.clone(),
        );
        let sync_objects = Gauge::default();
        registry.register(
            "sync_objects",
            "Copies currently in sync",
            sync_objects.clone(),
        );
        let sync_conflicts = Gauge::default();
        registry.register(
            "sync_conflicts",
            "Objects currently in conflict",
            sync_conflicts.clone(),
        );
        let sync_errors = Gauge::default();
        registry.register(
            "sync_errors",
            "Objects currently failing to sync",
            sync_errors.clone(),
        );
        let sync_withheld = Gauge::default();
        registry.register(
            "sync_withheld",
            "Objects rules select that are never published (tokens, objects fleetbus writes)",
            sync_withheld.clone(),
        );
        let drifts = Family::<Vec<(String, String)>, Counter>::default();
        registry.register(
            "drifts",
            "Drifts by cluster, rule, kind and phase (coalesced events count each occurrence)",
            drifts.clone(),
        );
        let drift_detection_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "drift_detection_seconds",
            "Seconds from the watch event of a drifted copy to its Detected event acknowledged",
            drift_detection_seconds.clone(),
        );
        let drift_correction_seconds = Histogram::new(exponential_buckets(0.0005, 2.0, 16));
        registry.register(
            "drift_correction_seconds",
            "Seconds from the watch event of a drifted copy to its correction written",
            drift_correction_seconds.clone(),
        );
        let sync_lag_seconds: PerRuleHistogram =
            Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.001, 2.0, 16)));
        registry.register(
            "sync_lag_seconds",
            "Per rule: seconds from the origin publishing a version of an object to its copy written here (clocks of two clusters)",
            sync_lag_seconds.clone(),
        );
        let drifted = Gauge::default();
        registry.register("drifted", "Copies currently drifted", drifted.clone());
        let rule_objects = Family::default();
        registry.register(
            "rule_objects",
            "Per rule: copies in sync (state=synced), objects in conflict or failing (state=conflicts|errors)",
            rule_objects.clone(),
        );
        let ready = Gauge::default();
        registry.register(
            "ready",
            "1 while the agent is ready (/readyz answers 200), else 0",
            ready.clone(),
        );
        let m = Metrics {
            rule_objects,
            rule_names: std::sync::Mutex::default(),
            writes_made: std::sync::atomic::AtomicU64::new(0),
            ready,
            commands_rejected,
            sync_unknown_update_policy,
            drifts,
            drift_detection_seconds,
            drift_correction_seconds,
            sync_lag_seconds,
            drifted,
            sync_published,
            sync_rejected,
            policy_refused,
            sync_policy_invalid,
            rejected_messages,
            sync_writes,
            sync_write_failures,
            rule_status_publish_failures,
            sync_passes,
            sync_full_plans,
            placement_decisions,
            placement_failovers,
            placement_pass_seconds,
            placement_units,
            sync_look_alikes,
            drift_events_truncated,
            copy_mark_ephemeral,
            sync_settled,
            sync_objects,
            sync_conflicts,
            sync_errors,
            sync_withheld,
            own_record_invalid,
            registry_foreign_puts,
            bus_layout_recreated,
            peer_rejected,
            peers_failing,
            standard_crd_missing,
            foreign_profiles,
            mcs_events,
            registry,
            registry_rejected,
            name_conflicts,
            heartbeats_published,
            registry_passes,
            heartbeats_received,
            peers,
            kube_writes,
            kubeconfig_mints,
            metadata_changes,
        };
        m.zero_known_series();
        m
    }

    /// Creates at 0 the series whose label values are known in advance, so that
    /// they are scraped from the start: `increase()` over a counter that first
    /// appears at 1 misses that first increment, and a panel or alert over a
    /// state nobody is in yet would read "no data" instead of 0. Label values
    /// that come from data (rejection reasons, rules, kinds) appear when counted.
    fn zero_known_series(&self) {
        for state in PEER_STATES {
            self.peers.get_or_create(&vec![("state", state)]).set(0);
        }
        for op in [
            "create",
            "update",
            "unchanged",
            "recreate",
            "delete",
            "orphan",
            "status",
            "namespace",
        ] {
            self.sync_writes.get_or_create(&vec![("op", op)]).inc_by(0);
        }
        for op in ["write", "collect"] {
            self.sync_write_failures
                .get_or_create(&vec![("op", op)])
                .inc_by(0);
        }
        for kind in ["snapshot", "tombstone"] {
            self.sync_published
                .get_or_create(&vec![("type", kind)])
                .inc_by(0);
        }
    }

    /// Counts one rejected registry entry.
    pub fn rejected(&self, reason: &'static str) {
        self.registry_rejected
            .get_or_create(&vec![("reason", reason)])
            .inc();
    }

    /// Counts one refused command.
    pub fn command_rejected(&self, verb: &'static str, reason: &'static str) {
        self.commands_rejected
            .get_or_create(&vec![("verb", verb), ("reason", reason)])
            .inc();
    }

    /// Counts one message dropped by the trust checks.
    pub fn rejected_message(&self, reason: &'static str) {
        self.rejected_messages
            .get_or_create(&vec![("reason", reason)])
            .inc();
    }

    /// Counts one skipped message or object of sync.
    pub fn sync_rejected(&self, reason: &'static str) {
        self.sync_rejected
            .get_or_create(&vec![("reason", reason)])
            .inc();
    }

    /// Observes the lag of one new version of a copy written for `rule`.
    pub fn sync_lag(&self, rule: &str, lag: std::time::Duration) {
        self.sync_lag_seconds
            .get_or_create(&vec![("rule".to_owned(), rule.to_owned())])
            .observe(lag.as_secs_f64());
    }

    /// Counts one write of a copy.
    pub fn sync_write(&self, op: &'static str) {
        self.sync_writes.get_or_create(&vec![("op", op)]).inc();
        self.writes_made
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Counts one failed operation on a copy.
    pub fn sync_write_failed(&self, op: &'static str) {
        self.sync_write_failures
            .get_or_create(&vec![("op", op)])
            .inc();
    }

    /// Counts one rule status record not written to the bus.
    pub fn rule_status_publish_failure(&self, op: &'static str) {
        self.rule_status_publish_failures
            .get_or_create(&vec![("op", op)])
            .inc();
    }

    /// Counts one multi-cluster Services event (see `mcs_events`).
    pub fn mcs_event(&self, event: &'static str) {
        self.mcs_events.get_or_create(&vec![("event", event)]).inc();
    }

    /// Counts one write to the Kubernetes API by the registry or the
    /// inventory: not sync's, so not a reason for sync not to be settled
    /// (those tasks write while a sync pass runs, and a pass that saw such
    /// a write said "not settled" until something woke the engine again).
    pub fn kube_write(&self, kind: &'static str) {
        self.kube_writes.get_or_create(&vec![("kind", kind)]).inc();
    }

    /// Counts one write to the Kubernetes API by sync (rule and policy
    /// status, returned status, ReportedStates): counted in `kube_writes`
    /// and in what `sync_settled` compares.
    pub fn sync_kube_write(&self, kind: &'static str) {
        self.kube_write(kind);
        self.writes_made
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// How many writes [`Metrics::sync_kube_write`] and [`Metrics::sync_write`] counted so far.
    pub fn writes_made(&self) -> u64 {
        self.writes_made.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Replaces the per-rule series with `rules`: a rule no longer listed (deleted,
    /// or not a rule of this cluster any more) loses its series.
    pub fn set_rule_objects(&self, rules: &[RuleObjects]) {
        let mut names = self.rule_names.lock().unwrap_or_else(|e| e.into_inner());
        let now: std::collections::BTreeSet<String> =
            rules.iter().map(|r| r.rule.clone()).collect();
        for gone in names.difference(&now) {
            for state in ["synced", "conflicts", "errors"] {
                self.rule_objects
                    .remove(&vec![("rule", gone.clone()), ("state", state.to_owned())]);
            }
        }
        for r in rules {
            for (state, n) in [
                ("synced", r.synced),
                ("conflicts", r.conflicts),
                ("errors", r.errors),
            ] {
                self.rule_objects
                    .get_or_create(&vec![("rule", r.rule.clone()), ("state", state.to_owned())])
                    .set(n);
            }
        }
        *names = now;
    }

    /// Renders the OpenMetrics text exposition.
    pub fn render(&self) -> Result<String, std::fmt::Error> {
        let mut out = String::new();
        encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deleted_rule_loses_its_series() {
        let m = Metrics::new();
        let rule = |name: &str, errors| RuleObjects {
            rule: name.to_owned(),
            synced: 3,
            conflicts: 0,
            errors,
        };
        m.set_rule_objects(&[rule("a", 1), rule("b", 0)]);
        let text = m.render().unwrap();
        assert!(
            text.contains("fleetbus_rule_objects{rule=\"a\",state=\"errors\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("fleetbus_rule_objects{rule=\"b\",state=\"synced\"} 3"),
            "{text}"
        );
        m.set_rule_objects(&[rule("b", 2)]);
        let text = m.render().unwrap();
        assert!(!text.contains("rule=\"a\""), "{text}");
        assert!(
            text.contains("fleetbus_rule_objects{rule=\"b\",state=\"errors\"} 2"),
            "{text}"
        );
    }

    #[test]
    fn renders_prefixed_names() {
        let m = Metrics::new();
        m.rejected("undecodable");
        m.rejected("undecodable");
        m.name_conflicts.set(1);
        let text = m.render().unwrap();
        assert!(
            text.contains("fleetbus_registry_rejected_total{reason=\"undecodable\"} 2"),
            "{text}"
        );
        assert!(text.contains("fleetbus_cluster_name_conflicts 1"), "{text}");
    }
}
