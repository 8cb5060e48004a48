//! `fleetbus notify`: the fleet's drift and conflict events, rollouts paused or
//! failed, placements degraded or failed over, SyncPolicy refusals and clusters
//! turning Disconnected, ApiUnreachable or Left, sent to webhooks (Slack,
//! Teams, generic JSON).
//!
//! Where to start: [`targets`] reads the targets file (filters, format, the file
//! holding each webhook URL); [`message`] turns a drift event into a
//! [`Notification`] and renders it per format; [`dedupe`] folds a storm into the
//! first message and one summary with a count; [`deliver`] posts with retries
//! (backoff, `Retry-After`) and counts what it had to give up (dead letters);
//! [`transitions`] says which puts of a record are news (a rollout paused, a
//! placement degraded, a cluster Disconnected); `fleet` reads the registry for
//! health, labels and the keys signatures are checked with; [`bridge`] follows
//! the streams through a shared durable consumer on each; [`run`] is the command.

pub mod bridge;
pub mod dedupe;
pub mod deliver;
mod fleet;
pub mod message;
pub mod targets;
pub mod template;
pub mod transitions;

pub use dedupe::Coalescer;
pub use deliver::{Delivered, Delivery, NotifyMetrics, RetryPolicy};
pub use message::{Format, Notification, Severity};
pub use targets::{load_targets, Target, TargetError, WebhookUrl};

use std::sync::Arc;

use crate::cli::NotifyArgs;

/// `fleetbus notify`: loads the targets, serves metrics, follows the bus until
/// SIGINT or SIGTERM.
pub async fn run(args: NotifyArgs) -> Result<(), NotifyError> {
    let targets = load_targets(&args.targets)?;
    let metrics = Arc::new(NotifyMetrics::default());
    let mut registry = prometheus_client::registry::Registry::with_prefix("fleetbus");
    metrics.register(&mut registry);
    let policy = RetryPolicy {
        max_attempts: args.max_attempts,
        ..RetryPolicy::default()
    };
    let delivery = Delivery::new(policy, metrics.clone()).map_err(|source| NotifyError::Setup {
        what: "the HTTP client",
        source,
    })?;
    let listener = tokio::net::TcpListener::bind(args.metrics_listen)
        .await
        .map_err(|source| NotifyError::Setup {
            what: "the metrics listener",
            source,
        })?;
    // Its own inbox: what its NATS user may read (permissions::notify_permissions).
    let (_client, js) = crate::command::connect_with_inbox(
        &args.bus,
        Some(fleetbus_schemas::permissions::NOTIFY_INBOX_PREFIX),
    )
    .await?;
    let config = bridge::BridgeConfig {
        prefix: args.bus.subject_prefix.clone(),
        consumer: args.consumer.clone(),
        window: args.window.into(),
        ack_wait: args.ack_wait.into(),
        fleet_interval: args.fleet_interval.into(),
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let metrics_stop = stop.clone();
    let serve = bridge::serve_metrics(listener, Arc::new(registry), async move {
        metrics_stop.cancelled().await
    });
    let follow = bridge::follow(&js, &config, &targets, &delivery, &metrics, stopped());
    tracing::info!(targets = targets.len(), consumer = %config.consumer, "following drift and conflict events");
    // The bridge ends the run; the metrics server stops with it.
    let (result, served) = tokio::join!(
        async {
            let r = follow.await;
            stop.cancel();
            r
        },
        serve
    );
    if let Err(error) = served {
        tracing::warn!(error = %error, "the metrics server failed");
    }
    result
}

/// SIGINT or SIGTERM (what Kubernetes sends a pod it stops).
async fn stopped() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// `fleetbus notify` could not run.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// The targets file or a URL file is not usable.
    #[error(transparent)]
    Targets(#[from] TargetError),
    /// The bus could not be reached.
    #[error(transparent)]
    Connect(#[from] crate::command::CommandError),
    /// The drift stream or the durable consumer on it could not be used.
    #[error("cannot consume the stream {stream}")]
    Consumer {
        /// The drift stream.
        stream: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The HTTP client or the metrics listener could not be set up.
    #[error("cannot set up {what}")]
    Setup {
        /// What.
        what: &'static str,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl NotifyError {
    /// Whether running again can help: the bus or the consumer may come back; a bad
    /// targets file will not change by itself.
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Connect(_) | Self::Consumer { .. })
    }
}
