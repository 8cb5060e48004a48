//! The bridge: the fleet's drift and conflict events, rollout and placement
//! records and rule status, through a shared durable consumer on each stream,
//! and the clusters' health, read from the registry, to the targets.
//!
//! Delivery is at least once. A JetStream message is acknowledged only after the
//! notification it went out in was delivered or given up (a dead letter), so a
//! bridge that stops mid-storm gets the unacknowledged events again when it comes
//! back (after the consumer's ack wait): their summary may then be sent twice,
//! nothing is lost. Run one bridge per fleet: replicas share the consumer, so each
//! event goes to one of them, but each folds storms on its own. Records put again
//! and again (rollouts, placements, rule status, health) are sent when they turn
//! (`transitions`); health changes come from reads, not from a stream, and a
//! change that happens while the bridge is down is not sent.
//!
//! With the fleet root known (`--dir` holding `root.pub`), a message its
//! cluster did not sign is not sent: it is terminated, logged and counted
//! (`fleetbus_notify_skipped_total{reason="unverified"}`).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::message::Message;
use async_nats::jetstream::AckKind;
use fleetbus_schemas::conflict::ConflictEvent;
use fleetbus_schemas::drift::DriftEvent;
use fleetbus_schemas::jetstream::Layout;
use fleetbus_schemas::placement::{all_placements, PlacementKey, PlacementRecord};
use fleetbus_schemas::rollout::RolloutRecord;
use fleetbus_schemas::rule_status::{RuleStatusKey, RuleStatusRecord};
use fleetbus_schemas::subject::{
    all_conflicts, all_drift, all_rollouts, ConflictKey, DriftKey, Prefix, RolloutKey,
};
use futures::stream::SelectAll;
use futures::StreamExt;
use tokio::time::Instant;

use super::fleet::FleetWatch;
use super::transitions::Transitions;
use super::{Coalescer, Delivery, Notification, NotifyError, NotifyMetrics, Target};

/// How the bridge reads the bus.
#[derive(Debug, Clone)]
pub struct BridgeConfig {
    /// The fleet's subject prefix.
    pub prefix: Prefix,
    /// The durable consumer's name, shared by every replica of the bridge.
    pub consumer: String,
    /// How long a storm is folded after its first event.
    pub window: Duration,
    /// How long the server waits for an acknowledgement before redelivering: longer
    /// than a window plus every retry of a delivery.
    pub ack_wait: Duration,
    /// How often the registry is read for the clusters' health.
    pub fleet_interval: Duration,
}

/// The streams the bridge follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Drift,
    Conflict,
    Rollout,
    Placement,
    RuleStatus,
}

const SOURCES: [Source; 5] = [
    Source::Drift,
    Source::Conflict,
    Source::Rollout,
    Source::Placement,
    Source::RuleStatus,
];

impl Source {
    /// The stream and the filter of the consumer on it.
    fn stream(self, prefix: &Prefix) -> (String, String) {
        let layout = Layout::new(prefix.clone(), 1);
        match self {
            Source::Drift => (layout.drift_stream().name, all_drift(prefix)),
            Source::Conflict => (layout.conflicts_stream().name, all_conflicts(prefix)),
            Source::Rollout => (layout.rollouts_stream().name, all_rollouts(prefix)),
            Source::Placement => (layout.placements_stream().name, all_placements(prefix)),
            Source::RuleStatus => {
                let bucket = layout.rule_status_bucket().bucket;
                (format!("KV_{bucket}"), format!("$KV.{bucket}.>"))
            }
        }
    }
}

/// The durable consumer `config.consumer` on `source`'s stream (created if it is
/// not there), and its messages.
async fn open(
    js: &async_nats::jetstream::Context,
    config: &BridgeConfig,
    source: Source,
) -> Result<pull::Stream, NotifyError> {
    let (stream_name, filter) = source.stream(&config.prefix);
    let consumer_err = |source: Box<dyn std::error::Error + Send + Sync>| NotifyError::Consumer {
        stream: stream_name.clone(),
        source,
    };
    let stream = crate::kv::stream(js, &config.prefix, &stream_name)
        .await
        .map_err(|e| consumer_err(Box::new(e)))?;
    let consumer: async_nats::jetstream::consumer::Consumer<pull::Config> = stream
        .get_or_create_consumer(
            &config.consumer,
            pull::Config {
                durable_name: Some(config.consumer.clone()),
                description: Some("fleetbus notify: events to webhooks".to_owned()),
                filter_subject: filter,
                // A new bridge starts with what happens from now on, not the history.
                deliver_policy: DeliverPolicy::New,
                ack_policy: AckPolicy::Explicit,
                ack_wait: config.ack_wait,
                ..pull::Config::default()
            },
        )
        .await
        .map_err(|e| consumer_err(Box::new(e)))?;
    consumer
        .messages()
        .await
        .map_err(|e| consumer_err(Box::new(e)))
}

/// A source's messages, then `None` once its consumer's stream ends (the
/// consumer or its stream deleted): the source is opened again.
type Tagged =
    futures::stream::BoxStream<'static, (Source, Option<Result<Message, pull::MessagesError>>)>;

/// Opens the consumer of each source in `wanted`; those whose stream is not
/// there yet (a fleet whose agents never created it) stay in `wanted`, to be
/// tried again at the next read of the fleet (said at the `first` try only).
async fn open_missing(
    js: &async_nats::jetstream::Context,
    config: &BridgeConfig,
    wanted: &mut Vec<Source>,
    messages: &mut SelectAll<Tagged>,
    first: bool,
) -> Result<(), NotifyError> {
    let mut still = Vec::new();
    for source in wanted.drain(..) {
        match open(js, config, source).await {
            Ok(stream) => {
                let ended = futures::stream::once(async move { (source, None) });
                messages.push(stream.map(move |m| (source, Some(m))).chain(ended).boxed());
            }
            Err(NotifyError::Consumer { stream, source: e })
                if e.downcast_ref::<crate::kv::ReadError>()
                    .is_some_and(|r| matches!(r, crate::kv::ReadError::Missing { .. })) =>
            {
                if first {
                    tracing::warn!(%stream, "no such stream yet: following the others, trying again at each read of the fleet");
                }
                still.push(source);
            }
            Err(e) => return Err(e),
        }
    }
    *wanted = still;
    Ok(())
}

/// What the bridge reads with: the fleet, the transitions seen, the counters.
struct Reader<'a> {
    prefix: &'a Prefix,
    fleet: FleetWatch,
    transitions: Transitions,
    metrics: &'a NotifyMetrics,
    hush: Hush,
}

/// Warnings about messages not sent a minute, at most: a member publishing
/// garbage in bulk costs a counter (`fleetbus_notify_skipped_total`), not
/// the log.
const LOUD: u32 = 20;

/// Counts the warnings of the current minute.
struct Hush {
    since: Instant,
    said: u32,
}

impl Hush {
    /// Whether one more warning may be logged now.
    fn allow(&mut self) -> bool {
        self.allow_at(Instant::now())
    }

    fn allow_at(&mut self, now: Instant) -> bool {
        if now.duration_since(self.since) >= Duration::from_secs(60) {
            self.since = now;
            self.said = 0;
        }
        self.said = self.said.saturating_add(1);
        if self.said == LOUD + 1 {
            tracing::warn!(
                "more messages not sent this minute are only counted (fleetbus_notify_skipped_total)"
            );
        }
        self.said <= LOUD
    }
}

/// Why a message is not sent now.
#[derive(Debug, PartialEq)]
enum Skip {
    /// Never: terminated and counted under the reason.
    Drop(&'static str),
    /// Not yet: its signature could not be judged on a fresh read of the
    /// registry (a cluster that joined since). Delivered again after
    /// [`LATER`], at most [`TRIES`] times in all.
    Later,
}

/// How long a message whose signature could not be judged yet waits.
const LATER: Duration = Duration::from_secs(2);

/// Deliveries of such a message before it is dropped as unverified.
const TRIES: i64 = 5;

/// What becomes of a message that is not sent now, delivered `delivered` times.
fn disposition(skip: &Skip, delivered: i64) -> (AckKind, Option<&'static str>) {
    match skip {
        Skip::Drop(reason) => (AckKind::Term, Some(reason)),
        Skip::Later if delivered >= TRIES => (AckKind::Term, Some("unverified")),
        Skip::Later => (AckKind::Nak(Some(LATER)), None),
    }
}

impl Reader<'_> {
    /// The notification `m` of `source` makes, None for one that says
    /// nothing new; Err for one that is not sent now.
    async fn examine(&mut self, source: Source, m: &Message) -> Result<Option<Notification>, Skip> {
        let subject = m.subject.as_str();
        let claimed = match source {
            Source::Drift => DriftKey::parse_subject(self.prefix, subject).map(|k| k.cluster),
            Source::Conflict => ConflictKey::parse_subject(self.prefix, subject).map(|k| k.cluster),
            Source::Rollout => RolloutKey::parse_subject(self.prefix, subject).map(|k| k.origin),
            Source::Placement => {
                PlacementKey::parse_subject(self.prefix, subject).map(|k| k.origin)
            }
            Source::RuleStatus => {
                let key = subject.splitn(3, '.').nth(2).unwrap_or_default();
                if is_kv_removal(m) {
                    self.transitions.rule_status_gone(key);
                    return Ok(None);
                }
                return match RuleStatusKey::parse(key) {
                    Ok(k) => {
                        self.verify(&k.cluster, m).await?;
                        let r = RuleStatusRecord::decode(&m.payload)
                            .map_err(|e| self.undecodable(m, &e))?;
                        r.validate(&k)
                            .map_err(|e| self.misattributed(m, &e.to_string()))?;
                        Ok(self.transitions.rule_status(key, &r))
                    }
                    Err(e) => Err(self.undecodable(m, &e)),
                };
            }
        }
        .map_err(|e| self.undecodable(m, &e))?;
        self.verify(&claimed, m).await?;
        let p = &m.payload;
        // What a message says must be about the cluster its subject names
        // (the one that signed it): a member may not speak as another.
        let about = |said: &str| -> Result<(), String> {
            if said == claimed {
                Ok(())
            } else {
                Err(format!(
                    "it names cluster {said:?}, its subject {claimed:?}"
                ))
            }
        };
        Ok(match source {
            Source::Drift => {
                let e = DriftEvent::decode(p).map_err(|e| self.undecodable(m, &e))?;
                about(&e.cluster).map_err(|why| self.misattributed(m, &why))?;
                Some(Notification::from_drift(&e))
            }
            Source::Conflict => {
                let e = ConflictEvent::decode(p).map_err(|e| self.undecodable(m, &e))?;
                about(&e.cluster).map_err(|why| self.misattributed(m, &why))?;
                Some(Notification::from_conflict(&e))
            }
            Source::Rollout => {
                let r = RolloutRecord::decode(p).map_err(|e| self.undecodable(m, &e))?;
                about(&r.origin).map_err(|why| self.misattributed(m, &why))?;
                self.transitions.rollout(subject, &r)
            }
            Source::Placement => {
                let r = PlacementRecord::decode(p).map_err(|e| self.undecodable(m, &e))?;
                self.transitions.placement(subject, &claimed, &r)
            }
            Source::RuleStatus => None,
        })
    }

    /// Err when the fleet root is known and `cluster` did not sign `m`
    /// (final, or to be judged again later).
    async fn verify(&mut self, cluster: &str, m: &Message) -> Result<(), Skip> {
        match self.fleet.check(cluster, &m.payload).await {
            Ok(()) => Ok(()),
            Err(refusal) if !refusal.last => Err(Skip::Later),
            Err(refusal) => {
                if self.hush.allow() {
                    tracing::warn!(subject = %m.subject, "not sent: {}", refusal.why);
                }
                Err(Skip::Drop("unverified"))
            }
        }
    }

    /// Logs a message about another cluster than its subject's (a member
    /// speaking as another, unless hushed); counted as unverified.
    fn misattributed(&mut self, m: &Message, why: &str) -> Skip {
        if self.hush.allow() {
            tracing::warn!(subject = %m.subject, "not sent: {why}");
        }
        Skip::Drop("unverified")
    }

    /// Logs a message that does not decode (unless hushed).
    fn undecodable(&mut self, m: &Message, error: &dyn std::fmt::Display) -> Skip {
        if self.hush.allow() {
            tracing::warn!(subject = %m.subject, error = %error, "not sent: it does not decode");
        }
        Skip::Drop("undecodable")
    }

    /// Counts a message not sent.
    fn skipped(&self, reason: &'static str) {
        self.metrics.skipped(reason);
    }
}

/// A KV delete or purge marker (the rule went).
fn is_kv_removal(m: &Message) -> bool {
    m.headers
        .as_ref()
        .and_then(|h| h.get("KV-Operation"))
        .is_some_and(|op| matches!(op.as_str(), "DEL" | "PURGE"))
}

/// Follows the streams and the registry until `shutdown` completes (`Ok`) or a
/// consumer fails.
pub async fn follow(
    js: &async_nats::jetstream::Context,
    config: &BridgeConfig,
    targets: &[Target],
    delivery: &Delivery,
    metrics: &NotifyMetrics,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NotifyError> {
    let mut messages: SelectAll<Tagged> = SelectAll::new();
    let mut wanted = SOURCES.to_vec();
    open_missing(js, config, &mut wanted, &mut messages, true).await?;
    // The last failure to read the registry, said once until it changes.
    let mut registry_error = String::new();
    let mut reader = Reader {
        prefix: &config.prefix,
        fleet: FleetWatch::new(js, &config.prefix),
        transitions: Transitions::default(),
        metrics,
        hush: Hush {
            since: Instant::now(),
            said: 0,
        },
    };
    let mut storms: Coalescer<Option<Message>> = Coalescer::new(config.window);
    let mut tick = tokio::time::interval(config.fleet_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        let due = storms.next_due();
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                for (n, folded) in storms.due(Instant::now()) {
                    send(targets, delivery, &n).await;
                    for m in folded.iter().flatten() {
                        ack(m, AckKind::Ack).await;
                    }
                }
            }
            _ = tick.tick() => {
                if !wanted.is_empty() {
                    open_missing(js, config, &mut wanted, &mut messages, false).await?;
                }
                match reader.fleet.refresh().await {
                    Ok(changes) => {
                        registry_error.clear();
                        for n in changes {
                            offer(targets, delivery, &mut storms, n, None).await;
                        }
                    }
                    Err(error) => {
                        let error = error.to_string();
                        if error != registry_error {
                            tracing::warn!(%error, "reading the fleet's registry (said again when it changes)");
                            registry_error = error;
                        }
                    }
                }
            }
            next = messages.next(), if !messages.is_empty() => {
                let Some((source, next)) = next else { continue };
                let m = match next {
                    None => {
                        tracing::warn!(?source, "the consumer's messages ended: opening it again at the next read of the fleet");
                        wanted.push(source);
                        continue;
                    }
                    Some(Ok(m)) => m,
                    Some(Err(error)) => {
                        // Missed heartbeats and the like: the library resumes the pull.
                        tracing::warn!(error = %error, source = ?source, "reading a consumer");
                        continue;
                    }
                };
                match reader.examine(source, &m).await {
                    Ok(Some(mut n)) => {
                        if n.labels.is_empty() {
                            n.labels = reader.fleet.labels(&n.cluster);
                        }
                        offer(targets, delivery, &mut storms, n, Some(m)).await;
                    }
                    Ok(None) => ack(&m, AckKind::Ack).await,
                    Err(skip) => {
                        let delivered = m.info().map_or(1, |i| i.delivered);
                        let (kind, counted) = disposition(&skip, delivered);
                        if let Some(reason) = counted {
                            if skip == Skip::Later {
                                tracing::warn!(subject = %m.subject, "not sent: its cluster's key was not found in {TRIES} reads of the registry");
                            }
                            reader.skipped(reason);
                        }
                        ack(&m, kind).await;
                    }
                }
            }
        }
    }
}

/// `n` to the targets that take it, now or folded into a storm's summary;
/// `m`, the message it came in, acknowledged once it went out.
async fn offer(
    targets: &[Target],
    delivery: &Delivery,
    storms: &mut Coalescer<Option<Message>>,
    n: Notification,
    m: Option<Message>,
) {
    if !targets.iter().any(|t| t.filter.matches(&n)) {
        if let Some(m) = &m {
            ack(m, AckKind::Ack).await;
        }
        return;
    }
    if let Some((n, m)) = storms.add(n, m, Instant::now()) {
        send(targets, delivery, &n).await;
        if let Some(m) = &m {
            ack(m, AckKind::Ack).await;
        }
    }
}

/// Delivers `n` to every target that takes it.
async fn send(targets: &[Target], delivery: &Delivery, n: &Notification) {
    for t in targets.iter().filter(|t| t.filter.matches(n)) {
        delivery.deliver(t, n).await;
    }
}

/// Acknowledges `m`; a lost ack means a redelivery, which at-least-once allows.
async fn ack(m: &Message, kind: AckKind) {
    if let Err(error) = m.ack_with(kind).await {
        tracing::warn!(subject = %m.subject, error = %error, "acknowledging a message");
    }
}

/// Serves the metrics registry as Prometheus text on `GET /metrics`.
pub async fn serve_metrics(
    listener: tokio::net::TcpListener,
    registry: Arc<prometheus_client::registry::Registry>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let registry = registry.clone();
            async move {
                let mut text = String::new();
                match prometheus_client::encoding::text::encode(&mut text, &registry) {
                    Ok(()) => (axum::http::StatusCode::OK, text),
                    Err(_) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, String::new()),
                }
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_not_judged_yet_comes_back_a_few_times_then_is_dropped() {
        assert!(matches!(
            disposition(&Skip::Drop("undecodable"), 1),
            (AckKind::Term, Some("undecodable"))
        ));
        for delivered in [1, TRIES - 1] {
            assert!(matches!(
                disposition(&Skip::Later, delivered),
                (AckKind::Nak(Some(after)), None) if after == LATER
            ));
        }
        assert!(matches!(
            disposition(&Skip::Later, TRIES),
            (AckKind::Term, Some("unverified"))
        ));
    }

    #[test]
    fn warnings_about_messages_not_sent_are_hushed_after_loud_a_minute() {
        let start = Instant::now();
        let mut hush = Hush {
            since: start,
            said: 0,
        };
        let allowed = (0..1_000).filter(|_| hush.allow_at(start)).count();
        assert_eq!(allowed, LOUD as usize);
        assert!(!hush.allow_at(start + Duration::from_secs(59)));
        assert!(
            hush.allow_at(start + Duration::from_secs(61)),
            "a new minute"
        );
    }
}
