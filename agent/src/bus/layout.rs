//! The bus layout (registry, drift and rule status buckets, streams), ensured at start-up and recreated if deleted under a running agent.
//!
//! Both steps are idempotent and compare what exists with the schemas
//! layout (`connect::ensure_bucket`, `streams::ensure_streams`), so every agent
//! of a fleet may run them at any moment, several at once.

use async_nats::jetstream::{self, kv};
use fleetbus_schemas::jetstream::Layout;

use crate::bus::connect::{self, NatsError};
use crate::bus::streams::{self, StreamError};

/// Failure to ensure the bus layout.
#[derive(Debug, thiserror::Error)]
pub enum LayoutError {
    /// The registry bucket could not be created or checked.
    #[error(transparent)]
    Bucket(#[from] NatsError),
    /// A stream could not be created or checked.
    #[error(transparent)]
    Streams(#[from] StreamError),
}

impl LayoutError {
    /// Whether trying again later can help.
    pub fn is_transient(&self) -> bool {
        match self {
            LayoutError::Bucket(e) => e.is_transient(),
            LayoutError::Streams(e) => e.is_transient(),
        }
    }
}

/// What [`ensure`] found.
pub struct Ensured {
    /// The registry bucket.
    pub kv: kv::Store,
    /// The beats bucket.
    pub beats: kv::Store,
    /// The registry bucket was missing and has been created.
    pub created_bucket: bool,
    /// The beats bucket was missing and has been created.
    pub created_beats_bucket: bool,
    /// The drift bucket was missing and has been created.
    pub created_drift_bucket: bool,
    /// The rule status bucket was missing and has been created.
    pub created_rule_status_bucket: bool,
    /// How many streams were missing and have been created.
    pub created_streams: usize,
    /// When the bucket's stream was created, as NATS reports it: tells one
    /// incarnation of the bucket from the next (another agent or an operator
    /// may have deleted and recreated it meanwhile).
    pub bucket_incarnation: String,
}

impl Ensured {
    /// Whether anything was missing.
    pub fn created_any(&self) -> bool {
        self.created_bucket
            || self.created_beats_bucket
            || self.created_drift_bucket
            || self.created_rule_status_bucket
            || self.created_streams > 0
    }
}

/// Creates what is missing of the registry bucket (first: its creation is
/// where a server without JetStream is told apart), the drift and rule status
/// buckets and the streams.
pub async fn ensure(js: &jetstream::Context, layout: &Layout) -> Result<Ensured, LayoutError> {
    let (kv, created_bucket) = connect::ensure_bucket(
        js,
        connect::registry_bucket_config(&layout.registry_bucket()),
    )
    .await?;
    // Beats: the same checks, plus per-message TTLs. Recreated like the rest;
    // a recreated one refills with the next beat of every agent.
    let (beats, created_beats_bucket) =
        connect::ensure_bucket(js, connect::registry_bucket_config(&layout.beats_bucket())).await?;
    // Same config shape and same checks as the registry bucket (history 1, no TTL).
    // The sync engine opens the drift bucket by name when it first reports.
    let (_drift_kv, created_drift_bucket) =
        connect::ensure_bucket(js, connect::registry_bucket_config(&layout.drift_bucket())).await?;
    // Likewise the rule status bucket (`sync/status_bus` opens it by name).
    let (_status_kv, created_rule_status_bucket) = connect::ensure_bucket(
        js,
        connect::registry_bucket_config(&layout.rule_status_bucket()),
    )
    .await?;
    let created_streams = streams::ensure_streams(js, layout).await?;
    // The handle holds the stream info read when it was opened or created.
    let bucket_incarnation = kv
        .status()
        .await
        .map(|s| format!("{:?}", s.info.created))
        .unwrap_or_default();
    Ok(Ensured {
        kv,
        beats,
        created_bucket,
        created_beats_bucket,
        created_drift_bucket,
        created_rule_status_bucket,
        created_streams,
        bucket_incarnation,
    })
}
