//! Posting a notification to a webhook until it is taken, or given up (a dead letter).
//!
//! A 2xx is delivered. 429, 408 and 5xx, and a request that got no answer, are
//! retried: after the server's `Retry-After` when it sends one (capped), else
//! after a backoff doubling from [`RetryPolicy::first_backoff`]. Any other 4xx
//! is not retried: the same body would be refused again. After
//! [`RetryPolicy::max_attempts`] the message is a dead letter, counted in
//! `fleetbus_notify_dead_letters_total{target}`.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::message::Notification;
use super::targets::Target;

/// How long one request may take before it counts as unanswered.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest `Retry-After` obeyed: a server asking for an hour would stall
/// every message behind this one.
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// How hard to try.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts before a message is a dead letter.
    pub max_attempts: u32,
    /// The wait after the first failure; doubled after each one.
    pub first_backoff: Duration,
    /// The longest wait between attempts without `Retry-After`.
    pub max_backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 8,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
        }
    }
}

/// What one attempt got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 2xx.
    Taken,
    /// Worth another try, after the server's `Retry-After` if it gave one.
    Transient(Option<Duration>),
    /// Refused for good (a 4xx other than 408 and 429).
    Refused(u16),
}

/// What to do after an attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Delivered.
    Done,
    /// Try again after this long.
    Wait(Duration),
    /// Give up: a dead letter.
    GiveUp,
}

/// The step after `attempts` attempts, the last of which got `answer`.
pub fn next_step(policy: &RetryPolicy, attempts: u32, answer: Answer) -> Step {
    match answer {
        Answer::Taken => Step::Done,
        Answer::Refused(_) => Step::GiveUp,
        Answer::Transient(_) if attempts >= policy.max_attempts => Step::GiveUp,
        Answer::Transient(Some(after)) => Step::Wait(after.min(MAX_RETRY_AFTER)),
        Answer::Transient(None) => {
            let doublings = attempts.saturating_sub(1).min(16);
            Step::Wait(
                policy
                    .first_backoff
                    .saturating_mul(1 << doublings)
                    .min(policy.max_backoff),
            )
        }
    }
}

/// The answer a response's status and headers give.
pub fn classify(status: http::StatusCode, headers: &http::HeaderMap) -> Answer {
    if status.is_success() {
        return Answer::Taken;
    }
    let code = status.as_u16();
    if code == 429 || code == 408 || status.is_server_error() {
        let after = headers
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        return Answer::Transient(after);
    }
    Answer::Refused(code)
}

/// `Retry-After` as seconds or as an HTTP date (RFC 9110 §10.2.3).
fn parse_retry_after(v: &str) -> Option<Duration> {
    if let Ok(secs) = v.trim().parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v.trim()).ok()?;
    let wait = at.signed_duration_since(chrono::Utc::now());
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TargetLabel {
    target: String,
}

/// The bridge's counters, per target.
#[derive(Default)]
pub struct NotifyMetrics {
    sent: Family<TargetLabel, Counter>,
    retries: Family<TargetLabel, Counter>,
    dead_letters: Family<TargetLabel, Counter>,
    skipped: Family<ReasonLabel, Counter>,
}

/// Why a message was not sent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

impl NotifyMetrics {
    /// Registers the counters in `registry` (under its `fleetbus` prefix).
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        registry.register(
            "notify_sent",
            "Notifications a webhook took",
            self.sent.clone(),
        );
        registry.register(
            "notify_retries",
            "Attempts retried after a 429, a 5xx or no answer",
            self.retries.clone(),
        );
        registry.register(
            "notify_dead_letters",
            "Notifications given up after the last attempt or a refusal",
            self.dead_letters.clone(),
        );
        registry.register(
            "notify_skipped",
            "Messages not sent: undecodable, or (the fleet root known) not signed by their cluster",
            self.skipped.clone(),
        );
    }

    /// Counts a message not sent for `reason` (`undecodable`, `unverified`).
    pub fn skipped(&self, reason: &'static str) {
        self.skipped.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// Messages not sent for `reason` so far.
    pub fn skipped_count(&self, reason: &'static str) -> u64 {
        self.skipped.get_or_create(&ReasonLabel { reason }).get()
    }

    fn label(target: &Target) -> TargetLabel {
        TargetLabel {
            target: target.name.clone(),
        }
    }

    /// Dead letters of `target` so far.
    pub fn dead_letters(&self, target: &Target) -> u64 {
        self.dead_letters.get_or_create(&Self::label(target)).get()
    }

    /// Notifications `target` took so far.
    pub fn sent(&self, target: &Target) -> u64 {
        self.sent.get_or_create(&Self::label(target)).get()
    }
}

/// How a delivery ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivered {
    /// The webhook took it.
    Yes,
    /// Given up: counted as a dead letter.
    DeadLetter,
}

/// Posts notifications (one HTTP client for every target).
pub struct Delivery {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
    policy: RetryPolicy,
    metrics: Arc<NotifyMetrics>,
}

impl Delivery {
    /// A client trusting the system's CA certificates.
    pub fn new(policy: RetryPolicy, metrics: Arc<NotifyMetrics>) -> std::io::Result<Self> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_provider_and_native_roots(rustls::crypto::ring::default_provider())?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Self {
            client: Client::builder(TokioExecutor::new()).build(https),
            policy,
            metrics,
        })
    }

    /// One attempt: the answer, or `Transient(None)` if none came.
    async fn attempt(&self, target: &Target, body: &Bytes) -> Answer {
        let request = http::Request::post(target.url.uri().clone())
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Full::new(body.clone()));
        let Ok(request) = request else {
            return Answer::Refused(0);
        };
        match tokio::time::timeout(REQUEST_TIMEOUT, self.client.request(request)).await {
            Ok(Ok(response)) => classify(response.status(), response.headers()),
            // The error may name the URL (its host and path are the secret): only
            // the target is said.
            Ok(Err(_)) | Err(_) => Answer::Transient(None),
        }
    }

    /// Posts `n` to `target` in its format, retrying as the policy says.
    pub async fn deliver(&self, target: &Target, n: &Notification) -> Delivered {
        let line = target.template.as_ref().map(|t| t.fill(n));
        let body = Bytes::from(n.render(target.format, line).to_string());
        let label = NotifyMetrics::label(target);
        let mut attempts = 0;
        loop {
            attempts += 1;
            let answer = self.attempt(target, &body).await;
            match next_step(&self.policy, attempts, answer) {
                Step::Done => {
                    self.metrics.sent.get_or_create(&label).inc();
                    return Delivered::Yes;
                }
                Step::GiveUp => {
                    self.metrics.dead_letters.get_or_create(&label).inc();
                    tracing::warn!(target = %target.name, attempts, answer = ?answer, summary = %n.summary, "notification given up (dead letter)");
                    return Delivered::DeadLetter;
                }
                Step::Wait(wait) => {
                    self.metrics.retries.get_or_create(&label).inc();
                    tracing::debug!(target = %target.name, attempts, answer = ?answer, wait = ?wait, "notification not taken; retrying");
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_obey_retry_after_and_end() {
        let p = RetryPolicy {
            max_attempts: 4,
            first_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(3),
        };
        let t = Answer::Transient(None);
        assert_eq!(next_step(&p, 1, t), Step::Wait(Duration::from_secs(1)));
        assert_eq!(next_step(&p, 2, t), Step::Wait(Duration::from_secs(2)));
        assert_eq!(next_step(&p, 3, t), Step::Wait(Duration::from_secs(3)));
        assert_eq!(next_step(&p, 4, t), Step::GiveUp);
        let later = Answer::Transient(Some(Duration::from_secs(7)));
        assert_eq!(next_step(&p, 1, later), Step::Wait(Duration::from_secs(7)));
        let much_later = Answer::Transient(Some(Duration::from_secs(86_400)));
        assert_eq!(next_step(&p, 1, much_later), Step::Wait(MAX_RETRY_AFTER));
        assert_eq!(next_step(&p, 1, Answer::Refused(404)), Step::GiveUp);
        assert_eq!(next_step(&p, 1, Answer::Taken), Step::Done);
    }

    #[test]
    fn statuses_and_retry_after_are_read() {
        let mut h = http::HeaderMap::new();
        assert_eq!(classify(http::StatusCode::NO_CONTENT, &h), Answer::Taken);
        assert_eq!(
            classify(http::StatusCode::BAD_GATEWAY, &h),
            Answer::Transient(None)
        );
        assert_eq!(
            classify(http::StatusCode::NOT_FOUND, &h),
            Answer::Refused(404)
        );
        h.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("2"),
        );
        assert_eq!(
            classify(http::StatusCode::TOO_MANY_REQUESTS, &h),
            Answer::Transient(Some(Duration::from_secs(2)))
        );
        h.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(
            classify(http::StatusCode::SERVICE_UNAVAILABLE, &h),
            Answer::Transient(Some(Duration::ZERO))
        );
    }
}
