//! The client the sink writes copies with: a throttled write comes back at
//! once, with the server's `Retry-After`, instead of being retried inside the
//! client.
//!
//! kube's default client retries a 429 up to 15 times, sleeping the server's
//! `Retry-After` each time (up to 32 s from API Priority and Fairness). A copy
//! write retried in there holds its wave, and the wave holds the engine: one
//! throttled rule slowed every other rule's copies. This client returns the
//! 429, and the sink's per-copy backoff tries that copy again after
//! `Retry-After` while the other copies go on (`sync::model::backoff`).
//!
//! APF answers a 429 in plain text with a `Retry-After` header and no Status
//! body, so kube's error would carry no `retryAfterSeconds`:
//! [`RetryAfterLayer`] turns such a response into the Status kube-apiserver
//! sends for its other 429s (`details.retryAfterSeconds`), so the caller
//! reads it from the error. Nothing is retried inside this client: a 503, a
//! 504 or a 429 that says nothing of when goes to the copy's backoff too
//! (1 s, doubling). No buffer or retry layer sits in it either: the stack is
//! kube's own, with one response mapping added.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderValue, Request, Response, StatusCode};
use http_body_util::BodyExt;
use kube::client::{Body, ClientBuilder};
use tower::{BoxError, Layer, Service};

/// How long a copy write may wait for its answer: past it, the write fails
/// as transient and the copy backs off, instead of holding its wave (a
/// connection a cut left half-dead answers nothing, and kube's default
/// waits 295 s). Longer than an admission webhook may take (30 s).
pub const ANSWER_WITHIN: Duration = Duration::from_secs(35);

/// A client for `config` that writes copies (see the module docs).
pub fn copy_writer(config: &kube::Config) -> Result<kube::Client, kube::Error> {
    let mut config = config.clone();
    config.default_retry = false;
    config.read_timeout = Some(ANSWER_WITHIN);
    let builder = ClientBuilder::try_from(config)?;
    Ok(builder.with_layer(&RetryAfterLayer).build())
}

/// The `Retry-After` of a 429 response, whole seconds as kube-apiserver
/// sends it (an HTTP date is not taken: APF never sends one).
pub fn retry_after(headers: &http::HeaderMap) -> Option<u64> {
    headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Turns a 429 without a Status body into one that says `retryAfterSeconds`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RetryAfterLayer;

impl<S> Layer<S> for RetryAfterLayer {
    type Service = RetryAfterService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        RetryAfterService { inner }
    }
}

#[derive(Clone)]
pub struct RetryAfterService<S> {
    inner: S,
}

/// The body kube's client reads: any body of bytes, boxed.
pub(super) type Boxed = http_body_util::combinators::UnsyncBoxBody<Bytes, BoxError>;

impl<S, B> Service<Request<Body>> for RetryAfterService<S>
where
    S: Service<Request<Body>, Response = Response<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Boxed>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        let fut = self.inner.call(req);
        Box::pin(async move {
            let response = fut.await.map_err(Into::into)?;
            Ok(with_status_body(response))
        })
    }
}

/// `response` as the client reads it: a plain 429 with `Retry-After` gets
/// the Status body kube-apiserver sends for its own 429s; anything else is
/// passed on as it is.
fn with_status_body<B>(response: Response<B>) -> Response<Boxed>
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    let json = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/json"));
    let seconds = retry_after(response.headers());
    match seconds {
        Some(seconds) if response.status() == StatusCode::TOO_MANY_REQUESTS && !json => {
            let (mut parts, _) = response.into_parts();
            let status = serde_json::json!({
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": "the server has received too many requests and has asked us to try again later",
                "reason": "TooManyRequests",
                "details": {"retryAfterSeconds": seconds},
                "code": 429,
            });
            parts.headers.insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            parts.headers.remove(http::header::CONTENT_LENGTH);
            let body = http_body_util::Full::new(Bytes::from(status.to_string()))
                .map_err(|never| match never {})
                .boxed_unsync();
            Response::from_parts(parts, body)
        }
        _ => response.map(|b| b.map_err(Into::into).boxed_unsync()),
    }
}

/// The server's `retryAfterSeconds` in an API error, if it said one.
pub fn retry_after_of(e: &kube::Error) -> Option<Duration> {
    match e {
        kube::Error::Api(s) => s
            .details
            .as_ref()
            .map(|d| u64::from(d.retry_after_seconds))
            .filter(|s| *s > 0)
            .map(Duration::from_secs),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain_429(retry_after: Option<&str>) -> Response<http_body_util::Full<Bytes>> {
        let mut b = Response::builder()
            .status(429)
            .header("Content-Type", "text/plain; charset=utf-8");
        if let Some(r) = retry_after {
            b = b.header("Retry-After", r);
        }
        b.body(http_body_util::Full::new(Bytes::from_static(
            b"Too many requests, please try again later.\n",
        )))
        .unwrap()
    }

    async fn body_json(r: Response<Boxed>) -> serde_json::Value {
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn a_plain_429_with_retry_after_becomes_a_status_that_says_when() {
        let r = with_status_body(plain_429(Some("3")));
        assert_eq!(r.status(), 429);
        assert_eq!(r.headers()["content-type"], "application/json");
        let status = body_json(r).await;
        assert_eq!(status["details"]["retryAfterSeconds"], 3);
        assert_eq!(status["reason"], "TooManyRequests");
        // What kube makes of it: the error carries the wait.
        let s: kube::core::Status = serde_json::from_value(status).unwrap();
        let e = kube::Error::Api(Box::new(s));
        assert_eq!(retry_after_of(&e), Some(Duration::from_secs(3)));
    }

    #[tokio::test]
    async fn other_responses_pass_unchanged() {
        let r = with_status_body(plain_429(None));
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        assert!(bytes.starts_with(b"Too many requests"));
        let ok = Response::builder()
            .status(200)
            .body(http_body_util::Full::new(Bytes::from_static(b"{}")))
            .unwrap();
        let r = with_status_body(ok);
        assert_eq!(r.status(), 200);
        assert_eq!(
            &r.into_body().collect().await.unwrap().to_bytes()[..],
            b"{}"
        );
    }

    /// A throttled write through the copy writer comes back at once with
    /// the server's wait in the error, however long that wait: the write
    /// holds nothing (its wave, the engine) for it. Against a real HTTP
    /// server that answers as API Priority and Fairness does.
    #[tokio::test]
    async fn the_copy_writer_returns_a_throttled_write_at_once_with_when_to_try_again() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let hits = Arc::new(AtomicUsize::new(0));
        let seen = hits.clone();
        let app = axum::Router::new().fallback(move || {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [
                        ("Retry-After", "30"),
                        ("Content-Type", "text/plain; charset=utf-8"),
                    ],
                    "Too many requests, please try again later.\n",
                )
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let client = copy_writer(&config).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
            kube::Api::namespaced(client, "a");
        let started = std::time::Instant::now();
        let e = api
            .replace("c", &Default::default(), &Default::default())
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "returned at once, not after Retry-After: {:?}",
            started.elapsed()
        );
        assert_eq!(hits.load(Ordering::SeqCst), 1, "not retried in the client");
        assert_eq!(retry_after_of(&e), Some(Duration::from_secs(30)), "{e}");
    }
}
