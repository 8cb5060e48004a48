//! The HTTP server for `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Failure of the health server.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// The listen address could not be bound (in use, or not local).
    #[error("failed to bind the metrics server to {addr}")]
    Bind {
        /// `--metrics-addr`.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The server stopped with an IO error.
    #[error("metrics server failed")]
    Serve(#[source] std::io::Error),
}

impl HealthError {
    /// Never: an address in use or a broken listener is an operator matter.
    pub fn is_transient(&self) -> bool {
        false
    }
}

/// What readiness depends on; each part is flipped by the task that knows.
#[derive(Debug, Default)]
pub struct Readiness {
    /// The NATS connection is up.
    pub nats: AtomicBool,
    /// Counts NATS (re)connections: the bus consumers check on every one
    /// whether the server still has their consumer (a restarted server has
    /// lost it), instead of waiting for the client library to find out.
    pub nats_connections: tokio::sync::watch::Sender<u64>,
    /// The local API server answered the last probe (`registry::api_health`).
    pub kube: AtomicBool,
    /// The last put of our record into the registry bucket succeeded.
    pub publishing: AtomicBool,
    /// The registry watch has delivered every value present when it started.
    pub registry_synced: AtomicBool,
    /// A reconcile pass that started after `registry_synced` succeeded: the
    /// Cluster objects show every cluster the registry held at start.
    pub caught_up: AtomicBool,
    /// Local watches whose connection failed and that have not listed again
    /// since: what sync holds of their kind may be stale (see [`WatchDown`]).
    watches_down: AtomicUsize,
}

/// Held by a local watch while it is down (its connection failed, no list
/// since): `/readyz` says "local-watch" until every such guard is dropped.
/// A guard, not a flag, so a watch task that ends (cancelled, panicked) while
/// down cannot leave the agent unready for good.
#[derive(Debug)]
pub struct WatchDown(Arc<Readiness>);

impl WatchDown {
    /// Counts one more local watch down until the guard is dropped.
    pub fn new(readiness: Arc<Readiness>) -> Self {
        readiness.watches_down.fetch_add(1, Ordering::Relaxed);
        WatchDown(readiness)
    }
}

impl Drop for WatchDown {
    fn drop(&mut self) {
        self.0.watches_down.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Readiness {
    /// Names of the parts that are not ready yet; empty when ready.
    pub fn missing(&self) -> Vec<&'static str> {
        let mut out = Vec::new();
        if !self.nats.load(Ordering::Relaxed) {
            out.push("nats");
        }
        if !self.kube.load(Ordering::Relaxed) {
            out.push("kubernetes");
        }
        if !self.publishing.load(Ordering::Relaxed) {
            out.push("registry-publish");
        }
        if !self.registry_synced.load(Ordering::Relaxed) {
            out.push("registry-sync");
        }
        if !self.caught_up.load(Ordering::Relaxed) {
            out.push("initial-reconcile");
        }
        if self.watches_down.load(Ordering::Relaxed) > 0 {
            out.push("local-watch");
        }
        out
    }
}

#[derive(Clone)]
struct AppState {
    readiness: Arc<Readiness>,
    metrics: Arc<Metrics>,
}

/// Binds `addr` now (so a bad address fails start-up) and returns the bound
/// address and the serving future, which ends when `cancel` fires.
pub async fn bind(
    addr: SocketAddr,
    readiness: Arc<Readiness>,
    metrics: Arc<Metrics>,
    cancel: CancellationToken,
) -> Result<
    (
        SocketAddr,
        impl std::future::Future<Output = Result<(), HealthError>>,
    ),
    HealthError,
> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HealthError::Bind { addr, source })?;
    let local = listener
        .local_addr()
        .map_err(|source| HealthError::Bind { addr, source })?;
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_handler))
        .with_state(AppState { readiness, metrics });
    let fut = async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move { cancel.cancelled().await })
            .await
            .map_err(HealthError::Serve)
    };
    Ok((local, fut))
}

async fn readyz(State(s): State<AppState>) -> (StatusCode, String) {
    let missing = s.readiness.missing();
    if missing.is_empty() {
        (StatusCode::OK, "ok\n".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {}\n", missing.join(", ")),
        )
    }
}

async fn metrics_handler(
    State(s): State<AppState>,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let ct = [(
        "content-type",
        "application/openmetrics-text; version=1.0.0; charset=utf-8",
    )];
    // Readiness as a metric, read at the scrape, so `fleetbus_ready == 0` alerts
    // without a probe of its own and never shows a stale value.
    s.metrics
        .ready
        .set(i64::from(s.readiness.missing().is_empty()));
    match s.metrics.render() {
        Ok(body) => (StatusCode::OK, ct, body),
        Err(_) => (StatusCode::INTERNAL_SERVER_ERROR, ct, String::new()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_lists_missing_parts() {
        let r = Readiness::default();
        assert_eq!(
            r.missing(),
            vec![
                "nats",
                "kubernetes",
                "registry-publish",
                "registry-sync",
                "initial-reconcile"
            ]
        );
        r.nats.store(true, Ordering::Relaxed);
        r.kube.store(true, Ordering::Relaxed);
        r.publishing.store(true, Ordering::Relaxed);
        r.registry_synced.store(true, Ordering::Relaxed);
        assert_eq!(r.missing(), vec!["initial-reconcile"]);
        r.caught_up.store(true, Ordering::Relaxed);
        assert!(r.missing().is_empty());
    }

    #[test]
    fn a_local_watch_down_is_unready_until_its_guard_is_dropped() {
        let r = Arc::new(Readiness::default());
        for part in [
            &r.nats,
            &r.kube,
            &r.publishing,
            &r.registry_synced,
            &r.caught_up,
        ] {
            part.store(true, Ordering::Relaxed);
        }
        let first = WatchDown::new(r.clone());
        let second = WatchDown::new(r.clone());
        assert_eq!(r.missing(), vec!["local-watch"]);
        drop(first);
        assert_eq!(
            r.missing(),
            vec!["local-watch"],
            "another watch is still down"
        );
        drop(second);
        assert!(r.missing().is_empty());
    }
}
