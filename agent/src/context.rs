//! The agent-wide context: what every long-lived task shares.
//!
//! One `Context` per agent, behind an `Arc`. It holds handles (clients,
//! metrics, readiness flags) and immutable facts (configuration, identity),
//! never the state of one task: the registry keeps membership in
//! [`crate::registry::Registry`], sync keeps its rules and copies in
//! [`crate::sync`].

use std::sync::Arc;

use fleetbus_schemas::jetstream::Layout;

use crate::config::Config;
use crate::health::Readiness;
use crate::kube::events::Recorder;
use crate::metrics::Metrics;
use crate::trust::{Rejections, Signers};

/// Shared by every task of one agent.
pub struct Context {
    /// Validated flags (`cfg.trust`: this cluster's keys, secure mode).
    pub cfg: Config,
    /// This cluster's kube-system UID.
    pub cluster_id: String,
    /// Local Kubernetes client.
    pub client: kube::Client,
    /// The client the sink writes copies with: a throttled write comes back
    /// at once with the server's `Retry-After` (`kube::throttle`).
    pub copy_writer: kube::Client,
    /// What `client` was built from: a task whose connection failed builds a
    /// client of its own from it (`kube::client::connect`).
    pub kube_config: kube::Config,
    /// JetStream, kept after start-up: sync publishes and consumes on it, and
    /// the layout is recreated through it when an operator deletes a stream.
    pub js: async_nats::jetstream::Context,
    /// The bus layout (stream and bucket names and limits) this agent ensures.
    pub layout: Layout,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Readiness flags behind `/readyz`.
    pub readiness: Arc<Readiness>,
    /// Kubernetes Event recorder.
    pub recorder: Recorder,
    /// When this agent run started (published; a restart is a new run).
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// Wakes the registry publisher to check and repair the bus layout now
    /// (sync saw a stream fail): one place repairs it, whoever notices.
    pub check_layout: tokio::sync::Notify,
    /// The certified signing keys of the fleet's clusters (secure mode:
    /// learnt from their registry records).
    pub signers: Signers,
    /// Messages dropped by the trust checks: counted and raised as Events.
    pub rejections: Rejections,
    /// This cluster's sealing keys (PROTOCOL §4.8): with them it seals Secrets
    /// to their receivers and opens what is sealed to it; without, it
    /// publishes in clear and opens nothing (insecure mode).
    pub sealing: Option<SealingKeys>,
    /// This cluster's ownership-mark key: which objects are copies this
    /// agent wrote (`sync::model::mark`).
    pub mark: crate::mark::CopyMark,
}

/// A cluster's sealing key pair.
#[derive(Debug, Clone)]
pub struct SealingKeys {
    /// The secret key: opens what is sealed to this cluster.
    pub secret: fleetbus_schemas::seal::SealingSecretKey,
    /// Its public key, which its certificate carries.
    pub public: fleetbus_schemas::seal::SealingPublicKey,
}

impl SealingKeys {
    /// The pair of `secret`.
    pub fn new(secret: fleetbus_schemas::seal::SealingSecretKey) -> Self {
        let public = secret.public_key();
        Self { secret, public }
    }
}

impl Context {
    /// The context of one agent run.
    pub fn new(
        cfg: Config,
        cluster_id: String,
        kube: (kube::Client, kube::Config),
        bus: (async_nats::jetstream::Context, Layout),
        metrics: Arc<Metrics>,
        readiness: Arc<Readiness>,
        mark: crate::mark::CopyMark,
    ) -> Self {
        let (js, layout) = bus;
        let (client, kube_config) = kube;
        let recorder = Recorder::new(client.clone(), &cfg.cluster_name);
        // Built from the config `client` was built from, which worked: a
        // failure here is not expected; the shared client does then.
        let copy_writer = crate::kube::throttle::copy_writer(&kube_config).unwrap_or_else(|e| {
            tracing::warn!(error = %e, "cannot build the copy writer's client; copies are written with the shared one");
            client.clone()
        });
        // The sealing key comes with the identity (`--cluster-key`): the
        // secure mode seals, the insecure mode does not.
        let sealing = cfg
            .trust
            .as_ref()
            .and_then(|t| {
                fleetbus_schemas::seal::SealingSecretKey::from_bytes(t.sealing_secret()).ok()
            })
            .map(SealingKeys::new);
        Context {
            signers: Signers::new(cfg.trust.as_deref()),
            cfg,
            cluster_id,
            client,
            copy_writer,
            kube_config,
            js,
            layout,
            metrics,
            readiness,
            recorder,
            started_at: chrono::Utc::now(),
            check_layout: tokio::sync::Notify::new(),
            sealing,
            rejections: Rejections::default(),
            mark,
        }
    }
}

impl Context {
    /// The bus server's `max_payload` (1 MiB by default).
    pub fn max_payload(&self) -> usize {
        self.js.client().server_info().max_payload
    }

    /// Drops one message that failed the trust checks: counted in
    /// `fleetbus_rejected_messages_total{reason}` and raised as an Event on
    /// the Cluster object of `cluster` (rate-limited).
    pub fn reject(&self, cluster: &str, reason: &'static str, what: &str) {
        self.rejections
            .reject(&self.metrics, &self.recorder, cluster, reason, what);
    }
}
