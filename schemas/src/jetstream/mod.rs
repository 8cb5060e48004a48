//! JetStream layout: streams, the registry bucket and consumer designs, as plain data.
//!
//! The agent converts these into async-nats configs; nothing here talks to a server.

mod server_version;

pub use server_version::{
    check_server_version, ServerVersion, ServerVersionError, MIN_NATS_SERVER_VERSION,
};

use std::time::Duration;

use crate::drift::drift_bucket;
use crate::registry::{beats_bucket, registry_bucket, BEAT_MARKER_TTL};
use crate::rule_status::rule_status_bucket;
use crate::subject::{
    all_conflicts, all_drift, all_objects, all_rollouts, all_status, all_versions, Prefix,
};

/// Replicas for a single NATS server (development, one-node sites).
pub const REPLICAS_SINGLE: usize = 1;
/// Replicas for a clustered NATS (3 or 5 servers).
pub const REPLICAS_CLUSTERED: usize = 3;
/// How long drift events are kept by default.
pub const DEFAULT_DRIFT_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);
/// Drift events kept per subject, that is per copy: the newest ones when a copy drifts more
/// often than that within the age limit (a storm is coalesced into a few events per window,
/// so only a copy drifting for days reaches this).
pub const DEFAULT_DRIFT_MAX_MSGS_PER_SUBJECT: i64 = 1_000;
/// Bytes the drift stream keeps at most (the oldest events go first): a bound on what a fleet
/// of storms can cost the NATS server's disk (a drift event is about 0.5-2 KiB).
pub const DEFAULT_DRIFT_MAX_BYTES: i64 = 256 * 1024 * 1024;
/// Window in which a repeated `Nats-Msg-Id` is dropped (the NATS default; larger windows
/// cost server memory, and the agent also compares content hashes itself).
pub const DEFAULT_DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// Stream name suffix of object snapshots (`FLEETBUS_OBJECTS`).
pub const OBJECTS_STREAM_SUFFIX: &str = "OBJECTS";
/// Stream name suffix of drift events (`FLEETBUS_DRIFT`).
pub const DRIFT_STREAM_SUFFIX: &str = "DRIFT";
/// Stream name suffix of reported state (`FLEETBUS_STATUS`).
pub const STATUS_STREAM_SUFFIX: &str = "STATUS";
/// Stream name suffix of conflict events (`FLEETBUS_CONFLICTS`).
pub const CONFLICTS_STREAM_SUFFIX: &str = "CONFLICTS";
/// Stream name suffix of rollout records (`FLEETBUS_ROLLOUTS`).
pub const ROLLOUTS_STREAM_SUFFIX: &str = "ROLLOUTS";
/// Stream name suffix of placement decisions (`FLEETBUS_PLACEMENTS`).
pub const PLACEMENTS_STREAM_SUFFIX: &str = "PLACEMENTS";
/// Name suffix of the services stream (multi-cluster Services' exports).
pub const SERVICES_STREAM_SUFFIX: &str = "SERVICES";
/// Stream name suffix of the version store (`FLEETBUS_VERSIONS`).
pub const VERSIONS_STREAM_SUFFIX: &str = "VERSIONS";
/// How long a stored version is kept: an origin re-puts the versions a rollout
/// still in progress names once they are older than half of this.
pub const DEFAULT_VERSIONS_MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);
/// Bytes the version store keeps at most (the oldest versions go first).
pub const DEFAULT_VERSIONS_MAX_BYTES: i64 = 1024 * 1024 * 1024;

/// Where a stream keeps its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Storage {
    /// On disk (survives server restarts).
    File,
    /// In memory.
    Memory,
}

/// What the server drops when a stream limit is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Discard {
    /// Drop the oldest messages.
    Old,
    /// Refuse new messages.
    New,
}

/// A stream to create (or check) at agent startup. `-1` means unlimited, as in NATS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    /// Stream name.
    pub name: String,
    /// Human-readable purpose.
    pub description: String,
    /// Subjects bound to the stream.
    pub subjects: Vec<String>,
    /// Messages kept per subject (`-1`: all within the other limits).
    pub max_msgs_per_subject: i64,
    /// Bytes kept in the whole stream (`-1`: no byte limit).
    pub max_bytes: i64,
    /// Maximum message age (`None`: forever).
    pub max_age: Option<Duration>,
    /// De-duplication window for `Nats-Msg-Id`.
    pub duplicate_window: Duration,
    /// Allow `Nats-Rollup` headers.
    pub allow_rollup: bool,
    /// Allow direct get (`$JS.API.DIRECT.GET`), used for last-value reads.
    pub allow_direct: bool,
    /// Refuse deleting single messages through the API.
    pub deny_delete: bool,
    /// Refuse purging through the API.
    pub deny_purge: bool,
    /// What to drop at the limits.
    pub discard: Discard,
    /// Number of replicas.
    pub replicas: usize,
    /// Storage backend.
    pub storage: Storage,
}

/// A KV bucket to create (or check) at agent startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvSpec {
    /// Bucket name (the stream is `KV_<bucket>`).
    pub bucket: String,
    /// Human-readable purpose.
    pub description: String,
    /// Values kept per key.
    pub history: i64,
    /// Key TTL (`None`: values never expire).
    pub max_age: Option<Duration>,
    /// Number of replicas.
    pub replicas: usize,
    /// Storage backend.
    pub storage: Storage,
    /// Per-message TTLs allowed, and how long the delete marker of an expired
    /// key is kept (`None`: no TTLs, no markers). Needs nats-server 2.11.
    pub limit_markers: Option<Duration>,
}

/// Which messages a new consumer starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeliverPolicy {
    /// Every stored message.
    All,
    /// The last stored message of each subject (a snapshot of current state).
    LastPerSubject,
    /// Only messages published after the consumer is created.
    New,
}

/// The catch-up consumer: ordered (ephemeral, no acks, recreated by the client on gaps),
/// starting from the last message per subject. The initial sync is done when the
/// consumer reports `num_pending == 0`; after that it delivers live updates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrderedConsumerSpec {
    /// Stream to consume from.
    pub stream: String,
    /// Subject filters (several need nats-server 2.10).
    pub filter_subjects: Vec<String>,
    /// Always [`DeliverPolicy::LastPerSubject`] for catch-up.
    pub deliver_policy: DeliverPolicy,
}

/// A durable pull consumer with explicit acks, for apply-with-retry: a message that failed
/// to apply is nak'ed with a delay and redelivered up to `max_deliver` times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableConsumerSpec {
    /// Stream to consume from.
    pub stream: String,
    /// Durable name.
    pub durable_name: String,
    /// Subject filters.
    pub filter_subjects: Vec<String>,
    /// Where the consumer starts when first created.
    pub deliver_policy: DeliverPolicy,
    /// Time to ack before redelivery.
    pub ack_wait: Duration,
    /// Deliveries before a message is given up (reported, not retried).
    pub max_deliver: i64,
    /// Redelivery delays (the last one repeats).
    pub backoff: Vec<Duration>,
    /// Unacked messages in flight.
    pub max_ack_pending: i64,
}

/// The JetStream layout for one prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    prefix: Prefix,
    replicas: usize,
    drift_max_age: Duration,
}

impl Layout {
    /// The layout for `prefix` with `replicas` replicas per stream.
    pub fn new(prefix: Prefix, replicas: usize) -> Self {
        Self {
            prefix,
            replicas: replicas.max(1),
            drift_max_age: DEFAULT_DRIFT_MAX_AGE,
        }
    }

    /// Overrides how long drift events are kept.
    pub fn with_drift_max_age(mut self, max_age: Duration) -> Self {
        self.drift_max_age = max_age;
        self
    }

    /// The subject prefix.
    pub fn prefix(&self) -> &Prefix {
        &self.prefix
    }

    fn base(&self, suffix: &str, description: &str, subject: String) -> StreamSpec {
        StreamSpec {
            name: self.prefix.stream_name(suffix),
            description: description.to_owned(),
            subjects: vec![subject],
            max_msgs_per_subject: 1,
            max_bytes: -1,
            max_age: None,
            duplicate_window: DEFAULT_DUPLICATE_WINDOW,
            allow_rollup: false,
            allow_direct: true,
            deny_delete: true,
            deny_purge: false,
            discard: Discard::Old,
            replicas: self.replicas,
            storage: Storage::File,
        }
    }

    /// OBJECTS: `<p>.obj.>`, the last envelope per object (snapshot or tombstone). Tombstones
    /// are kept so that a cluster that was away still learns about deletes.
    pub fn objects_stream(&self) -> StreamSpec {
        self.base(
            OBJECTS_STREAM_SUFFIX,
            "fleetbus object snapshots: last envelope per object",
            all_objects(&self.prefix),
        )
    }

    /// DRIFT: `<p>.drift.>`, every drift event for `drift_max_age` (default 7 days), at most
    /// [`DEFAULT_DRIFT_MAX_MSGS_PER_SUBJECT`] per copy and [`DEFAULT_DRIFT_MAX_BYTES`] in all:
    /// a copy that drifts without end must not fill the server.
    pub fn drift_stream(&self) -> StreamSpec {
        StreamSpec {
            max_msgs_per_subject: DEFAULT_DRIFT_MAX_MSGS_PER_SUBJECT,
            max_bytes: DEFAULT_DRIFT_MAX_BYTES,
            max_age: Some(self.drift_max_age),
            allow_direct: false,
            ..self.base(
                DRIFT_STREAM_SUFFIX,
                "fleetbus drift events",
                all_drift(&self.prefix),
            )
        }
    }

    /// STATUS: `<p>.status.>`, the last reported state per object and cluster.
    pub fn status_stream(&self) -> StreamSpec {
        self.base(
            STATUS_STREAM_SUFFIX,
            "fleetbus reported state: last status per object and cluster",
            all_status(&self.prefix),
        )
    }

    /// CONFLICTS: `<p>.conflict.>`, every conflict event, kept as long as drift events
    /// (both are history an operator reads after the fact, not state).
    pub fn conflicts_stream(&self) -> StreamSpec {
        StreamSpec {
            max_msgs_per_subject: -1,
            max_age: Some(self.drift_max_age),
            allow_direct: false,
            ..self.base(
                CONFLICTS_STREAM_SUFFIX,
                "fleetbus sync conflict events",
                all_conflicts(&self.prefix),
            )
        }
    }

    /// ROLLOUTS: `<p>.rollout.>`, the last rollout record per (origin, rule,
    /// source object): the origin's decisions, read back after its restart.
    pub fn rollouts_stream(&self) -> StreamSpec {
        self.base(
            ROLLOUTS_STREAM_SUFFIX,
            "fleetbus rollout records: last decision per rule and source object",
            all_rollouts(&self.prefix),
        )
    }

    /// PLACEMENTS: `<p>.placement.>`, the last placement decision per
    /// (origin, unit): the origin's decisions, read back after its restart.
    pub fn placements_stream(&self) -> StreamSpec {
        self.base(
            PLACEMENTS_STREAM_SUFFIX,
            "fleetbus placement decisions: last decision per rule and source object or group",
            crate::placement::all_placements(&self.prefix),
        )
    }

    /// SERVICES: `<p>.svc.>`, the last export record per (cluster, Service):
    /// what a cluster exports of its Services for multi-cluster Services
    /// (PROTOCOL §6.11). Withdrawn records are kept, as tombstones are.
    pub fn services_stream(&self) -> StreamSpec {
        self.base(
            SERVICES_STREAM_SUFFIX,
            "fleetbus multi-cluster services: last export record per cluster and Service",
            crate::multicluster::all_exports(&self.prefix),
        )
    }

    /// VERSIONS: `<p>.ver.>`, the envelopes of the versions rollout records
    /// name, by content hash, for [`DEFAULT_VERSIONS_MAX_AGE`] and at most
    /// [`DEFAULT_VERSIONS_MAX_BYTES`]: the objects stream keeps only the newest.
    pub fn versions_stream(&self) -> StreamSpec {
        StreamSpec {
            max_bytes: DEFAULT_VERSIONS_MAX_BYTES,
            max_age: Some(DEFAULT_VERSIONS_MAX_AGE),
            ..self.base(
                VERSIONS_STREAM_SUFFIX,
                "fleetbus version store: source envelopes rollouts name",
                all_versions(&self.prefix),
            )
        }
    }

    /// Every stream, in creation order. The agent creates any that is missing at start-up,
    /// so a stream added here reaches existing deployments on their next agent start.
    pub fn streams(&self) -> Vec<StreamSpec> {
        vec![
            self.objects_stream(),
            self.drift_stream(),
            self.status_stream(),
            self.conflicts_stream(),
            self.rollouts_stream(),
            self.versions_stream(),
            self.placements_stream(),
            self.services_stream(),
        ]
    }

    /// The registry bucket: history 1, no TTL (liveness comes from `heartbeatAt`, and a
    /// TTL would make a partitioned member's record vanish instead of going stale).
    pub fn registry_bucket(&self) -> KvSpec {
        KvSpec {
            bucket: registry_bucket(&self.prefix),
            description: "fleetbus cluster registry".to_owned(),
            history: 1,
            max_age: None,
            replicas: self.replicas,
            storage: Storage::File,
            limit_markers: None,
        }
    }

    /// The beats bucket (`registry::beat`): history 1, each beat put with its
    /// own TTL and a delete marker when it expires, so the server itself
    /// forgets a silent agent and tells every watcher at once. In memory: a
    /// beat is worthless a few intervals later, and at 1,000 clusters the
    /// fleet puts about a hundred a second, which need not touch a disk.
    pub fn beats_bucket(&self) -> KvSpec {
        KvSpec {
            bucket: beats_bucket(&self.prefix),
            description: "fleetbus liveness beats".to_owned(),
            history: 1,
            max_age: None,
            replicas: self.replicas,
            storage: Storage::Memory,
            limit_markers: Some(BEAT_MARKER_TTL),
        }
    }

    /// The drift state bucket: the last drift event of every object that is drifted now,
    /// deleted when the drift ends. History 1 and no TTL, like the registry: a drift lasts
    /// until the agent says it ended, however long that is.
    pub fn drift_bucket(&self) -> KvSpec {
        KvSpec {
            bucket: drift_bucket(&self.prefix),
            description: "fleetbus current drift per object".to_owned(),
            history: 1,
            max_age: None,
            replicas: self.replicas,
            storage: Storage::File,
            limit_markers: None,
        }
    }

    /// The rule status bucket: one record per rule per cluster, deleted with the rule.
    /// History 1 and no TTL, like the registry: a status holds until its agent writes the
    /// next one (a silent agent's records go stale with its heartbeat, not away).
    pub fn rule_status_bucket(&self) -> KvSpec {
        KvSpec {
            bucket: rule_status_bucket(&self.prefix),
            description: "fleetbus rule status per cluster".to_owned(),
            history: 1,
            max_age: None,
            replicas: self.replicas,
            storage: Storage::File,
            limit_markers: None,
        }
    }

    /// Catch-up consumer on OBJECTS for the given filters (e.g. one per rule).
    pub fn catch_up_consumer(&self, filter_subjects: Vec<String>) -> OrderedConsumerSpec {
        OrderedConsumerSpec {
            stream: self.prefix.stream_name(OBJECTS_STREAM_SUFFIX),
            filter_subjects,
            deliver_policy: DeliverPolicy::LastPerSubject,
        }
    }

    /// Durable apply consumer on OBJECTS; `durable_name` from [`durable_name`].
    pub fn apply_consumer(
        &self,
        durable_name: String,
        filter_subjects: Vec<String>,
    ) -> DurableConsumerSpec {
        DurableConsumerSpec {
            stream: self.prefix.stream_name(OBJECTS_STREAM_SUFFIX),
            durable_name,
            filter_subjects,
            deliver_policy: DeliverPolicy::LastPerSubject,
            ack_wait: Duration::from_secs(30),
            max_deliver: 10,
            backoff: [1, 5, 15, 60, 300]
                .into_iter()
                .map(Duration::from_secs)
                .collect(),
            max_ack_pending: 256,
        }
    }
}

impl Default for Layout {
    fn default() -> Self {
        Self::new(Prefix::default(), REPLICAS_SINGLE)
    }
}

/// A durable consumer name for (`purpose`, `cluster`): `<n>-<purpose token>-<cluster token>`,
/// where `n` is the purpose token's length so that distinct pairs give distinct names. Contains
/// only `[A-Za-z0-9_=-]`, valid for NATS consumer names.
pub fn durable_name(purpose: &str, cluster: &str) -> String {
    let purpose = crate::subject::encode_token(purpose);
    let cluster = crate::subject::encode_token(cluster);
    format!("{}-{purpose}-{cluster}", purpose.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_layout() {
        let l = Layout::default();
        let objects = l.objects_stream();
        assert_eq!(objects.name, "FLEETBUS_OBJECTS");
        assert_eq!(objects.subjects, vec!["fleetbus.obj.>"]);
        assert_eq!(objects.max_msgs_per_subject, 1);
        assert_eq!(objects.max_age, None);
        assert_eq!(objects.replicas, 1);
        let drift = l.drift_stream();
        assert_eq!(drift.name, "FLEETBUS_DRIFT");
        assert_eq!(drift.subjects, vec!["fleetbus.drift.>"]);
        assert_eq!(drift.max_msgs_per_subject, 1_000);
        assert_eq!(drift.max_bytes, 256 * 1024 * 1024);
        assert_eq!(drift.max_age, Some(Duration::from_secs(604_800)));
        assert_eq!(objects.max_bytes, -1);
        let status = l.status_stream();
        assert_eq!(status.name, "FLEETBUS_STATUS");
        assert_eq!(status.max_msgs_per_subject, 1);
        let conflicts = l.conflicts_stream();
        assert_eq!(conflicts.name, "FLEETBUS_CONFLICTS");
        assert_eq!(conflicts.subjects, vec!["fleetbus.conflict.>"]);
        assert_eq!(conflicts.max_msgs_per_subject, -1);
        assert_eq!(conflicts.max_age, Some(Duration::from_secs(604_800)));
        assert!(conflicts.deny_delete && !conflicts.allow_direct);
        let rollouts = l.rollouts_stream();
        assert_eq!(rollouts.name, "FLEETBUS_ROLLOUTS");
        assert_eq!(rollouts.subjects, vec!["fleetbus.rollout.>"]);
        assert_eq!((rollouts.max_msgs_per_subject, rollouts.max_age), (1, None));
        assert!(rollouts.deny_delete && rollouts.allow_direct);
        let versions = l.versions_stream();
        assert_eq!(versions.name, "FLEETBUS_VERSIONS");
        assert_eq!(versions.subjects, vec!["fleetbus.ver.>"]);
        assert_eq!(versions.max_msgs_per_subject, 1);
        assert_eq!(versions.max_age, Some(Duration::from_secs(30 * 86_400)));
        assert_eq!(versions.max_bytes, 1 << 30);
        assert!(versions.deny_delete && versions.allow_direct);
        assert_eq!(versions.discard, Discard::Old);
        let kv = l.registry_bucket();
        assert_eq!(kv.bucket, "fleetbus-registry");
        assert_eq!((kv.history, kv.max_age), (1, None));
        assert_eq!(kv.limit_markers, None);
        let beats = l.beats_bucket();
        assert_eq!(beats.bucket, "fleetbus-beats");
        assert_eq!((beats.history, beats.max_age), (1, None));
        assert_eq!(beats.limit_markers, Some(BEAT_MARKER_TTL));
        let drift_kv = l.drift_bucket();
        assert_eq!(drift_kv.bucket, "fleetbus-drift");
        assert_eq!((drift_kv.history, drift_kv.max_age), (1, None));
        assert_eq!(drift_kv.storage, Storage::File);
        let rs = l.rule_status_bucket();
        assert_eq!(rs.bucket, "fleetbus-rulestatus");
        assert_eq!(
            (rs.history, rs.max_age, rs.storage),
            (1, None, Storage::File)
        );
        let c = l.catch_up_consumer(vec!["fleetbus.obj.*.core.v1.ConfigMap.*.*".into()]);
        assert_eq!(c.stream, "FLEETBUS_OBJECTS");
        assert_eq!(c.deliver_policy, DeliverPolicy::LastPerSubject);
    }

    #[test]
    fn clustered_and_custom_prefix() {
        let l = Layout::new(Prefix::new("acme").unwrap(), REPLICAS_CLUSTERED)
            .with_drift_max_age(Duration::from_secs(3600));
        assert!(l.streams().iter().all(|s| s.replicas == 3));
        assert_eq!(l.registry_bucket().replicas, 3);
        assert_eq!(l.drift_bucket().replicas, 3);
        assert_eq!(l.rule_status_bucket().replicas, 3);
        assert_eq!(
            Layout::new(Prefix::new("acme.fleetbus").unwrap(), 1)
                .drift_bucket()
                .bucket,
            "acme_fleetbus-drift"
        );
        assert_eq!(l.drift_stream().max_age, Some(Duration::from_secs(3600)));
        assert_eq!(
            l.conflicts_stream().max_age,
            Some(Duration::from_secs(3600))
        );
        assert_eq!(l.streams()[0].name, "ACME_OBJECTS");
        assert_eq!(
            Layout::new(Prefix::default(), 0).objects_stream().replicas,
            1
        );
    }

    #[test]
    fn durable_names_are_injective_and_valid() {
        assert_eq!(durable_name("apply", "east"), "5-apply-east");
        assert_ne!(durable_name("a-b", "c"), durable_name("a", "b-c"));
        let n = durable_name("apply", "prod.eu-1");
        assert!(n
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'=')));
    }
}
