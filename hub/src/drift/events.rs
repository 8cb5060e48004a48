//! Reading drift events from the `<P>_DRIFT` stream with an ordered consumer.

use async_nats::jetstream;
use async_nats::jetstream::consumer::pull::{Ordered, OrderedConfig};
use async_nats::jetstream::consumer::DeliverPolicy;
use chrono::{DateTime, Utc};
use fleetbus_schemas::drift::DriftEvent;
use fleetbus_schemas::jetstream::Layout;
use fleetbus_schemas::subject::{DriftKey, Prefix};
use futures::StreamExt;
use std::time::{Duration, Instant};

use crate::signers::{NotSigned, Signers};

use super::DriftError;

/// An ordered consumer on the drift stream and how many messages it had to deliver when
/// it was created (the history that existed then).
pub(crate) struct EventReader {
    stream: String,
    messages: Ordered,
    /// Messages stored for the filter when the consumer was created.
    pub(crate) initial_pending: u64,
    /// With the fleet root known: what each event is checked with.
    check: Option<Checker>,
}

/// The fleet's signers for a reader (`fleetbus drift history|watch`,
/// `status`, the dashboard's history and live events): an event its
/// cluster did not sign is left out, logged. Read again, at most every
/// [`REREAD`], when an event names a cluster they do not know (one that
/// joined after the reader opened).
struct Checker {
    js: jetstream::Context,
    prefix: Prefix,
    signers: Signers,
    read_at: Instant,
}

/// How often a reader's signers may be read again.
const REREAD: Duration = Duration::from_secs(5);

impl Checker {
    /// Whether `payload` (an event naming cluster `named`) on `subject` is
    /// signed by the cluster the subject names, and about that cluster (a
    /// member may not speak as another).
    async fn check(&mut self, subject: &str, payload: &[u8], named: &str) -> Result<(), String> {
        let cluster = DriftKey::parse_subject(&self.prefix, subject)
            .map_err(|e| e.to_string())?
            .cluster;
        if named != cluster {
            return Err(format!(
                "it names cluster {named:?}, its subject {cluster:?}"
            ));
        }
        match self.signers.check(&cluster, payload) {
            Err(NotSigned::UnknownCluster(_)) if self.read_at.elapsed() >= REREAD => {
                self.read_at = Instant::now();
                if let Ok(Some(signers)) = crate::fleet::signers(&self.js, &self.prefix).await {
                    self.signers = signers;
                }
                self.signers.check(&cluster, payload)
            }
            checked => checked,
        }
        .map_err(|why| why.to_string())
    }
}

/// One event read from the stream.
pub(crate) struct Read {
    /// The message's subject (`<p>.drift.<cluster>.…`).
    pub(crate) subject: String,
    /// The decoded event, `None` if the message does not decode, or (the
    /// fleet root known) its cluster did not sign it (skipped, logged).
    pub(crate) event: Option<DriftEvent>,
    /// When the server stored it.
    pub(crate) published: Option<DateTime<Utc>>,
    /// Messages still pending after this one.
    pub(crate) pending: u64,
}

impl EventReader {
    /// Opens an ordered consumer on `filter` (a drift subject or wildcard), from the first
    /// stored event (`all`) or from now on.
    pub(crate) async fn open(
        js: &jetstream::Context,
        prefix: &Prefix,
        filter: String,
        all: bool,
    ) -> Result<Self, DriftError> {
        let deliver_policy = if all {
            DeliverPolicy::All
        } else {
            DeliverPolicy::New
        };
        Self::open_with(js, prefix, filter, deliver_policy).await
    }

    /// An ordered consumer on `filter` (empty: every drift subject) delivering by `deliver_policy`.
    async fn open_with(
        js: &jetstream::Context,
        prefix: &Prefix,
        filter: String,
        deliver_policy: DeliverPolicy,
    ) -> Result<Self, DriftError> {
        let stream_name = Layout::new(prefix.clone(), 1).drift_stream().name;
        let err =
            |source: Box<dyn std::error::Error + Send + Sync>| crate::kv::ReadError::Unreadable {
                what: "stream",
                name: stream_name.clone(),
                source,
            };
        let stream = crate::kv::stream(js, prefix, &stream_name).await?;
        let consumer = stream
            .create_consumer(OrderedConfig {
                filter_subject: filter,
                deliver_policy,
                ..OrderedConfig::default()
            })
            .await
            .map_err(|e| err(Box::new(e)))?;
        let initial_pending = consumer.cached_info().num_pending;
        let messages = consumer.messages().await.map_err(|e| err(Box::new(e)))?;
        let check = crate::fleet::signers(js, prefix)
            .await?
            .map(|signers| Checker {
                js: js.clone(),
                prefix: prefix.clone(),
                signers,
                read_at: Instant::now(),
            });
        Ok(Self {
            stream: stream_name,
            messages,
            initial_pending,
            check,
        })
    }

    /// The next event; `None` if the consumer ended (the connection closed).
    pub(crate) async fn next(&mut self) -> Result<Option<Read>, DriftError> {
        let Some(msg) = self.messages.next().await else {
            return Ok(None);
        };
        let msg = msg.map_err(|e| crate::kv::ReadError::Unreadable {
            what: "stream",
            name: self.stream.clone(),
            source: Box::new(e),
        })?;
        let (published, pending) = match msg.info() {
            Ok(info) => (
                i64::try_from(info.published.unix_timestamp_nanos())
                    .ok()
                    .map(DateTime::from_timestamp_nanos),
                info.pending,
            ),
            Err(_) => (None, 0),
        };
        let mut event = match DriftEvent::decode(&msg.payload) {
            Ok(event) => Some(event),
            Err(error) => {
                tracing::warn!(subject = %msg.subject, error = %error, "skipping a drift message that does not decode");
                None
            }
        };
        if let (Some(e), Some(check)) = (&event, &mut self.check) {
            if let Err(why) = check.check(&msg.subject, &msg.payload, &e.cluster).await {
                tracing::warn!("drift event on {} left out: {why}", msg.subject);
                event = None;
            }
        }
        Ok(Some(Read {
            subject: msg.subject.to_string(),
            event,
            published,
            pending,
        }))
    }
}

/// The last `n` stored drift events, oldest first (undecodable ones skipped), with
/// when each was stored. Reads from `last sequence - n + 1`, never the whole history.
pub(crate) async fn last(
    js: &jetstream::Context,
    prefix: &Prefix,
    n: usize,
) -> Result<Vec<(DriftEvent, Option<DateTime<Utc>>)>, DriftError> {
    let stream_name = Layout::new(prefix.clone(), 1).drift_stream().name;
    let mut stream = crate::kv::stream(js, prefix, &stream_name).await?;
    let info = stream
        .info()
        .await
        .map_err(|e| crate::kv::ReadError::Unreadable {
            what: "stream",
            name: stream_name.clone(),
            source: Box::new(e),
        })?;
    let last_seq = info.state.last_sequence;
    if n == 0 || info.state.messages == 0 {
        return Ok(Vec::new());
    }
    let start = last_seq.saturating_sub(n as u64 - 1);
    let from = DeliverPolicy::ByStartSequence {
        start_sequence: start.max(1),
    };
    let mut reader = EventReader::open_with(js, prefix, String::new(), from).await?;
    let mut found = Vec::new();
    let mut left = reader.initial_pending;
    while left > 0 {
        let Some(read) = reader.next().await? else {
            break;
        };
        if let Some(event) = read.event {
            found.push((event, read.published));
        }
        left = read.pending;
        if found.len() >= n {
            break;
        }
    }
    Ok(found)
}
