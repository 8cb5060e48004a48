//! Every request to the local API server but a watch is answered, whole,
//! within a deadline, or fails as a lost connection.
//!
//! kube's client sets no read timeout (a watch may be idle for minutes), so
//! a request sent on a connection that will never answer (an API server
//! stopped mid-request, a load balancer that dropped the flow without a
//! reset, a server stuck on one request) waits for ever, and so does
//! whatever awaits it: the sync engine awaits discovery, rule-status writes,
//! returned-state reads and collections, and one such request held a
//! cluster's whole sync after its API server came back. A real
//! kube-apiserver answers every request that is not long-running within
//! its `--request-timeout` (60 s by default, a 504 past it); the agent does
//! not wait longer than [`ANSWER_WITHIN`] for the answer and its body.
//!
//! Watches (`watch=true`) are long-running by design and pass untouched:
//! their liveness is the watcher's idle timeout and `fresh_watch`'s list
//! deadline. A request past its deadline fails below HTTP (a
//! `kube::Error::Service`), which callers already treat as a lost connection
//! and transient (`client::is_connection_error`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::BodyExt;
use kube::client::Body;
use tower::{BoxError, Layer, Service};

use super::throttle::Boxed;

/// How long a request that is not a watch may take, answer and body: as
/// long as the copy writer's (`throttle::ANSWER_WITHIN`), longer than an
/// admission webhook may take (30 s).
pub const ANSWER_WITHIN: Duration = super::throttle::ANSWER_WITHIN;

/// The error of a request past its deadline.
#[derive(Debug, thiserror::Error)]
#[error("no answer from the API server within {0:?}")]
pub struct NoAnswer(pub Duration);

/// Adds [`Deadline`] to a client's stack.
#[derive(Clone, Copy, Debug)]
pub struct DeadlineLayer(pub Duration);

impl<S> Layer<S> for DeadlineLayer {
    type Service = Deadline<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Deadline {
            inner,
            within: self.0,
        }
    }
}

/// See the module docs.
#[derive(Clone)]
pub struct Deadline<S> {
    inner: S,
    within: Duration,
}

impl<S, B> Service<Request<Body>> for Deadline<S>
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
        let watch = is_watch(req.uri());
        let fut = self.inner.call(req);
        let within = self.within;
        Box::pin(async move {
            if watch {
                let response = fut.await.map_err(Into::into)?;
                return Ok(response.map(|b| b.map_err(Into::into).boxed_unsync()));
            }
            // The body too: kube reads a non-watch body whole anyway, and a
            // server can hang after its headers as well as before.
            let whole = async {
                let response = fut.await.map_err(Into::into)?;
                let (parts, body) = response.into_parts();
                let bytes = body.collect().await.map_err(Into::into)?.to_bytes();
                let body = http_body_util::Full::new(bytes)
                    .map_err(|never| match never {})
                    .boxed_unsync();
                Ok::<_, BoxError>(Response::from_parts(parts, body))
            };
            match tokio::time::timeout(within, whole).await {
                Ok(r) => r,
                Err(_) => Err(Box::new(NoAnswer(within)) as BoxError),
            }
        })
    }
}

/// Whether the request is a watch (`watch=true` or `watch=1`, as the API
/// server reads the flag).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|q| {
        q.split('&')
            .any(|pair| matches!(pair, "watch=true" | "watch=1" | "watch=True" | "watch=TRUE"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn only_watches_are_long_running() {
        let watch = |s: &str| is_watch(&s.parse().unwrap());
        assert!(watch("/api/v1/configmaps?watch=true&resourceVersion=5"));
        assert!(watch("/api/v1/configmaps?resourceVersion=5&watch=1"));
        assert!(!watch("/api/v1/configmaps?limit=500"));
        assert!(!watch("/api/v1/configmaps?watch=false"));
        assert!(!watch("/api/v1/namespaces/watch=true/configmaps"));
    }

    /// A server that reads each request and answers: never (`None`), or
    /// with headers and then a body that never ends, or a watch's headers,
    /// one event after `later`, and then nothing.
    async fn server(answer: &'static str, later: Duration) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let _ = s.read(&mut buf).await;
                    if !answer.is_empty() {
                        let _ = s.write_all(answer.as_bytes()).await;
                    }
                    tokio::time::sleep(later).await;
                    let event = "{\"type\":\"ADDED\",\"object\":{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"late\",\"resourceVersion\":\"2\"}}}\n";
                    let _ = s
                        .write_all(format!("{:x}\r\n{event}\r\n", event.len()).as_bytes())
                        .await;
                    // Held open: the connection neither answers nor closes.
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                });
            }
        });
        addr
    }

    fn client(addr: std::net::SocketAddr, within: Duration) -> kube::Client {
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        kube::client::ClientBuilder::try_from(config)
            .unwrap()
            .with_layer(&DeadlineLayer(within))
            .build()
    }

    type Cm = k8s_openapi::api::core::v1::ConfigMap;

    #[tokio::test]
    async fn a_request_never_answered_fails_at_its_deadline_as_a_lost_connection() {
        let addr = server("", Duration::from_secs(3600)).await;
        let api: kube::Api<Cm> =
            kube::Api::namespaced(client(addr, Duration::from_millis(300)), "a");
        let started = std::time::Instant::now();
        let e = tokio::time::timeout(Duration::from_secs(10), api.get("c"))
            .await
            .expect("the request must end at its deadline")
            .unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(crate::kube::client::is_connection_error(&e), "{e:?}");
        assert!(e.to_string().contains("no answer"), "{e}");
    }

    #[tokio::test]
    async fn a_body_that_never_ends_fails_at_its_deadline() {
        let head =
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{";
        let addr = server(head, Duration::from_secs(3600)).await;
        let api: kube::Api<Cm> =
            kube::Api::namespaced(client(addr, Duration::from_millis(300)), "a");
        let e = tokio::time::timeout(Duration::from_secs(10), api.get("c"))
            .await
            .expect("the request must end at its deadline")
            .unwrap_err();
        assert!(crate::kube::client::is_connection_error(&e), "{e:?}");
    }

    #[tokio::test]
    async fn a_watch_may_stay_silent_past_the_deadline() {
        use futures::StreamExt;
        let head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n";
        let addr = server(head, Duration::from_millis(900)).await;
        let api: kube::Api<Cm> =
            kube::Api::namespaced(client(addr, Duration::from_millis(300)), "a");
        let stream = api
            .watch(&kube::api::WatchParams::default(), "0")
            .await
            .unwrap();
        futures::pin_mut!(stream);
        let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("the event comes at 900 ms");
        match first {
            Some(Ok(kube::api::WatchEvent::Added(cm))) => {
                assert_eq!(cm.metadata.name.as_deref(), Some("late"));
            }
            other => panic!("{other:?}"),
        }
    }
}
