//! The bridge: the fleet's drift and conflict events, through a shared durable
//! consumer on each stream, to the targets.
//!
//! Delivery is at least once. A JetStream message is acknowledged only after the
//! notification it went out in was delivered or given up (a dead letter), so a
//! bridge that stops mid-storm gets the unacknowledged events again when it comes
//! back (after the consumer's ack wait): their summary may then be sent twice,
//! nothing is lost. Run one bridge per fleet: replicas share the consumer, so each
//! event goes to one of them, but each folds storms on its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::consumer::{pull, AckPolicy, DeliverPolicy};
use async_nats::jetstream::message::Message;
use async_nats::jetstream::AckKind;
use fleetbus_schemas::conflict::ConflictEvent;
use fleetbus_schemas::drift::DriftEvent;
use fleetbus_schemas::jetstream::Layout;
use fleetbus_schemas::subject::{all_conflicts, all_drift, Prefix};
use futures::StreamExt;
use tokio::time::Instant;

use super::{Coalescer, Delivery, Notification, NotifyError, Target};

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
}

/// The streams the bridge follows.
#[derive(Debug, Clone, Copy)]
enum Source {
    Drift,
    Conflict,
}

/// The durable consumer `config.consumer` on `source`'s stream (created if it is
/// not there), and its messages.
async fn open(
    js: &async_nats::jetstream::Context,
    config: &BridgeConfig,
    source: Source,
) -> Result<pull::Stream, NotifyError> {
    let layout = Layout::new(config.prefix.clone(), 1);
    let (stream_name, filter) = match source {
        Source::Drift => (layout.drift_stream().name, all_drift(&config.prefix)),
        Source::Conflict => (
            layout.conflicts_stream().name,
            all_conflicts(&config.prefix),
        ),
    };
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

/// Follows the drift and conflict streams until `shutdown` completes (`Ok`) or a
/// consumer fails.
pub async fn follow(
    js: &async_nats::jetstream::Context,
    config: &BridgeConfig,
    targets: &[Target],
    delivery: &Delivery,
    shutdown: impl Future<Output = ()>,
) -> Result<(), NotifyError> {
    let drift = open(js, config, Source::Drift).await?;
    let conflicts = open(js, config, Source::Conflict).await?;
    let mut messages = futures::stream::select(
        drift.map(|m| (Source::Drift, m)),
        conflicts.map(|m| (Source::Conflict, m)),
    );
    let mut storms: Coalescer<Message> = Coalescer::new(config.window);
    tokio::pin!(shutdown);
    loop {
        let due = storms.next_due();
        tokio::select! {
            () = &mut shutdown => return Ok(()),
            () = tokio::time::sleep_until(due.unwrap_or_else(Instant::now)), if due.is_some() => {
                for (n, folded) in storms.due(Instant::now()) {
                    send(targets, delivery, &n).await;
                    for m in folded {
                        ack(&m, AckKind::Ack).await;
                    }
                }
            }
            next = messages.next() => {
                let Some((source, next)) = next else {
                    return Err(NotifyError::Consumer {
                        stream: "drift and conflicts".to_owned(),
                        source: "the consumers' message streams ended".into(),
                    });
                };
                let m = match next {
                    Ok(m) => m,
                    Err(error) => {
                        // Missed heartbeats and the like: the library resumes the pull.
                        tracing::warn!(error = %error, source = ?source, "reading a consumer");
                        continue;
                    }
                };
                let decoded = match source {
                    Source::Drift => DriftEvent::decode(&m.payload).map(|e| Notification::from_drift(&e)),
                    Source::Conflict => ConflictEvent::decode(&m.payload).map(|e| Notification::from_conflict(&e)),
                };
                let n = match decoded {
                    Ok(n) => n,
                    Err(error) => {
                        tracing::warn!(subject = %m.subject, error = %error, "skipping a message that does not decode");
                        ack(&m, AckKind::Term).await;
                        continue;
                    }
                };
                if !targets.iter().any(|t| t.filter.matches(&n)) {
                    ack(&m, AckKind::Ack).await;
                    continue;
                }
                if let Some((n, m)) = storms.add(n, m, Instant::now()) {
                    send(targets, delivery, &n).await;
                    ack(&m, AckKind::Ack).await;
                }
            }
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
