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

/// In the secure mode (a fleet root), a request that changes state must be
/// signed by the fleet root for `subject`, fresh, and not taken before
/// (`seen`, PROTOCOL §6.7); the error is the reply's text, and the refusal
/// is counted (`fleetbus_commands_rejected_total{verb, reason}` and
/// `fleetbus_rejected_messages_total{reason}`). The insecure mode takes any.
pub fn authorize(
    trust: Option<&crate::trust::Identity>,
    metrics: &crate::metrics::Metrics,
    verb: &'static str,
    subject: &str,
    payload: &[u8],
    seen: &mut super::replay::SeenRequests,
) -> Result<(), String> {
    let Some(id) = trust else {
        return Ok(());
    };
    let now = chrono::Utc::now();
    fleetbus_schemas::trust::verify_request(payload, subject, id.root(), now)
        .and_then(|request| seen.take(request, now))
        .map_err(|e| {
            let reason = e.reason();
            metrics.command_rejected(verb, reason);
            metrics.rejected_message(reason);
            tracing::warn!(verb, reason, error = %e, "refused a command request");
            format!(
                "refused: {e}; this cluster runs with a fleet root and takes {verb} commands \
                 only when signed by it (run the command with --dir naming the fleet directory \
                 that holds root.key)"
            )
        })
}

/// A reply as sent: signed by this cluster in the secure mode (PROTOCOL
/// §6.7). Unsigned when signing fails (never for our own encodings): the
/// operator then still gets an answer.
pub fn signed_reply(trust: Option<&crate::trust::Identity>, bytes: Vec<u8>) -> Vec<u8> {
    crate::trust::sign_or_keep(trust, bytes)
}
