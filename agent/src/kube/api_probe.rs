//! A cheap periodic `GET /readyz` of the local API server: the truth behind `/readyz` and the record's `api`.
//!
//! Watches alone cannot tell a quiet API server from a dead one (a paused
//! process accepts TCP connections and never answers), so the agent asks the
//! API server itself, with a short timeout. The loop that probes every
//! second and records the result is `registry::api_health`.

use std::time::Duration;

use fleetbus_schemas::registry::ApiHealth;

/// How long one probe may take before the API counts as unreachable. A
/// healthy kube-apiserver answers `/readyz` in milliseconds; 2 s tolerates a
/// loaded one without letting a hung one look healthy for long.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// One `GET /readyz` with `timeout`. `/readyz` is what kube-apiserver itself
/// answers only when it can serve (etcd reachable, informers synced), and
/// every client may read it (system:public-info-viewer).
pub async fn probe(client: &::kube::Client, timeout: Duration) -> ApiHealth {
    let request = match http::Request::get("/readyz").body(Vec::new()) {
        Ok(r) => r,
        Err(e) => return ApiHealth::unreachable(format!("cannot build the probe request: {e}")),
    };
    match tokio::time::timeout(timeout, client.request_text(request)).await {
        Ok(Ok(_)) => ApiHealth::reachable(),
        Ok(Err(e)) => ApiHealth::unreachable(format!("GET /readyz failed: {}", crate::report(&e))),
        Err(_) => ApiHealth::unreachable(format!(
            "GET /readyz did not answer within {}",
            humantime::format_duration(timeout)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;
    use axum::routing::get;

    /// A kube client for a local HTTP server whose `/readyz` is `handler`.
    async fn client_for(app: axum::Router) -> ::kube::Client {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        let url: http::Uri = format!("http://{addr}").parse().unwrap();
        ::kube::Client::try_from(::kube::Config::new(url)).unwrap()
    }

    #[tokio::test]
    async fn an_answering_api_server_is_reachable() {
        let c = client_for(axum::Router::new().route("/readyz", get(|| async { "ok" }))).await;
        assert_eq!(probe(&c, PROBE_TIMEOUT).await, ApiHealth::reachable());
    }

    #[tokio::test]
    async fn an_api_server_answering_500_is_unreachable() {
        let c = client_for(axum::Router::new().route(
            "/readyz",
            get(|| async { (StatusCode::INTERNAL_SERVER_ERROR, "etcd failed") }),
        ))
        .await;
        let h = probe(&c, PROBE_TIMEOUT).await;
        assert!(!h.reachable, "{h:?}");
    }

    #[tokio::test]
    async fn a_hung_api_server_is_unreachable_after_the_timeout() {
        let c = client_for(axum::Router::new().route(
            "/readyz",
            get(|| async { std::future::pending::<&'static str>().await }),
        ))
        .await;
        let started = tokio::time::Instant::now();
        let h = probe(&c, Duration::from_millis(300)).await;
        assert!(!h.reachable);
        assert!(h.message.contains("did not answer"), "{}", h.message);
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn a_dead_api_server_is_unreachable() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let url: http::Uri = format!("http://{addr}").parse().unwrap();
        let c = ::kube::Client::try_from(::kube::Config::new(url)).unwrap();
        assert!(!probe(&c, PROBE_TIMEOUT).await.reachable);
    }
}
