//! Subscribing to a command subject (`<p>.cmd.<self>.<verb>`, PROTOCOL §6.3,
//! §6.4). Without the subscription the command finds no responder, so a
//! failed subscribe is retried with backoff, not given up on. Each request is
//! first admitted by its verb's rate limit ([`admit`]).

use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use tokio_util::sync::CancellationToken;

/// Subscribes to `subject`, retrying with backoff (200 ms up to 30 s) until it
/// works; `None` once `cancel` fires.
#[tracing::instrument(skip(client, cancel))]
pub async fn subscribe(
    client: &async_nats::Client,
    subject: &str,
    cancel: &CancellationToken,
) -> Option<async_nats::Subscriber> {
    let op = || async { client.subscribe(subject.to_owned()).await };
    let retried = op
        .retry(
            ExponentialBuilder::default()
                .with_min_delay(Duration::from_millis(200))
                .with_max_delay(Duration::from_secs(30))
                .without_max_times(),
        )
        .notify(|e: &async_nats::SubscribeError, delay| {
            tracing::warn!(error = %e, ?delay, "cannot subscribe to a command subject; retrying");
        });
    tokio::select! {
        _ = cancel.cancelled() => None,
        sub = retried => sub.ok(),
    }
}

/// Takes a token of `bucket` for one request now; a refusal is counted
/// (`fleetbus_commands_rejected_total{verb, reason="rate"}`) and returned for the reply.
/// Logged at debug only: a flood would otherwise flood the log too.
pub fn admit(
    bucket: &mut super::rate::TokenBucket,
    metrics: &crate::metrics::Metrics,
) -> Result<(), super::rate::RateRefused> {
    bucket.take(Instant::now()).inspect_err(|refused| {
        metrics.command_rejected(refused.verb, "rate");
        tracing::debug!(verb = refused.verb, retry_after = ?refused.retry_after, "request refused for rate");
    })
}
