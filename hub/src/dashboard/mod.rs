//! `fleetbus dashboard`: the live fleet dashboard, served by the `fleetbus` binary.
//!
//! Everything is read from the bus (the registry bucket, the rule status bucket, the
//! drift bucket and stream, request/reply to agents), never from a cluster's API
//! server: one NATS credential is all it needs. Three pages (one HTML, one CSS and one
//! vanilla JS file, embedded: nothing to build): the fleet (clusters as cards, live,
//! filtered by name, label and state, a windowed grid that stays fast at 1,000
//! clusters), rules (a rules × clusters grid; a cell opens its errors and conflicts)
//! and drift (a live feed, the copies drifted now, an object's history). A cluster's
//! card opens its details and its sync progress.
//!
//! # Access
//! Binds loopback by default. Any other address needs `--token`: requests then carry
//! `Authorization: Bearer TOKEN` or the cookie that opening `/?token=TOKEN` sets
//! (HttpOnly, SameSite=Strict). Without a token, only requests whose Host is a
//! loopback name are served (a page elsewhere cannot reach it by DNS rebinding).
//! Read-only unless `--allow-actions`.
//!
//! # JSON endpoints
//! Every error is a 4xx/5xx with `{"error": "..."}`. Unknown query parameters, bad
//! values and unknown paths are 400/404; a read endpoint asked with POST, or an action
//! with GET, is 405.
//!
//! | endpoint | returns |
//! |---|---|
//! | `GET /api/config` | `{allowActions, subjectPrefix, version}` |
//! | `GET /api/clusters[?state=Ready&label=k=v&name=sub]` | `{now, total, counts: {state: n}, clusters: [{name, clusterId, state, heartbeatAgeSeconds, agentVersion, kubernetesVersion, distribution, provider, region, labels, apiReachable, apiMessage, …}]}`; `counts` and `total` ignore the filters |
//! | `GET /api/rules[?rule=&cluster=]` | `{rules: [name], clusters: [name], cells: [RuleStatusRecord JSON], skipped, note?}`: a record that does not validate against its key is skipped and counted |
//! | `GET /api/drift[?cluster=&rule=]` | `{now, drifted: [drift event JSON]}` (the drift bucket) |
//! | `GET /api/drift/history?object=KIND/NS/NAME[&cluster=]` | `{events: [{event, published}]}`, oldest first |
//! | `GET /api/progress?cluster=C` | what `fleetbus clusters progress C -o json` prints for C |
//! | `GET /api/events[?cluster=]` | server-sent events: `ready` once subscribed, then `drift` (`{event, published}`) per new drift event; `failed` (`{error}`) ends it |
//! | `POST /api/actions/correct` | body `{cluster, rule?, kind?, namespace?, name?}`: the agent's correct reply (as `fleetbus drift correct`) |
//! | `POST /api/actions/label` | body `{cluster, labels: ["k=v", "k-"], overwrite?}`: `{cluster, labels}` (as `fleetbus clusters label`) |
//!
//! Actions without `--allow-actions` are 403.

mod actions;
mod api;
mod error;
mod guard;
mod rules;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use fleetbus_schemas::registry::ClusterRecord;
use fleetbus_schemas::subject::Prefix;

use crate::cli::DashboardArgs;

pub use error::DashboardError;

/// What every handler reads.
pub(crate) struct AppState {
    client: async_nats::Client,
    js: async_nats::jetstream::Context,
    prefix: Prefix,
    allow_actions: bool,
    token: Option<String>,
    /// The registry's records and when they were read: every page polls them, so
    /// one read a second serves every browser (at 1,000 clusters a read is 1,000
    /// gets).
    records: tokio::sync::Mutex<Option<(Instant, Registry)>>,
    /// What the records' signatures were found to be (see `fleet::Verdicts`).
    verdicts: tokio::sync::Mutex<crate::fleet::Verdicts>,
}

/// The registry's records and the beats present, read together.
#[derive(Clone)]
pub(crate) struct Registry {
    pub(crate) records: Vec<ClusterRecord>,
    /// Records left out: they do not verify against the fleet root.
    pub(crate) unverified: Vec<crate::fleet::Unverified>,
    pub(crate) beats: crate::fleet::Beats,
}

/// How long a read of the registry is reused.
const RECORDS_TTL: Duration = Duration::from_secs(1);

impl AppState {
    /// The registry's cluster records and beats, at most [`RECORDS_TTL`] old.
    async fn registry(&self) -> Result<Registry, crate::kv::ReadError> {
        let mut cached = self.records.lock().await;
        if let Some((at, registry)) = cached.as_ref() {
            if at.elapsed() < RECORDS_TTL {
                return Ok(registry.clone());
            }
        }
        let mut verdicts = self.verdicts.lock().await;
        let read = crate::fleet::read_records(&self.js, &self.prefix, Some(&mut verdicts)).await?;
        let registry = Registry {
            records: read.records,
            unverified: read.unverified,
            beats: crate::fleet::beating(&self.js, &self.prefix).await?,
        };
        *cached = Some((Instant::now(), registry.clone()));
        Ok(registry)
    }

    /// The registry's cluster records, at most [`RECORDS_TTL`] old.
    async fn cluster_records(&self) -> Result<Vec<ClusterRecord>, crate::kv::ReadError> {
        Ok(self.registry().await?.records)
    }
}

const INDEX: &str = include_str!("assets/index.html");
const CSS: &str = include_str!("assets/app.css");
const JS: &str = include_str!("assets/app.js");

/// Checks the listen policy, connects to NATS, serves until Ctrl-C.
pub async fn run(args: DashboardArgs) -> Result<ExitCode, DashboardError> {
    let token = guard::check_listen(args.listen, args.token.as_deref())?;
    let (client, js) = crate::command::connect(&args.bus).await?;
    let state = Arc::new(AppState {
        client,
        js,
        prefix: args.bus.subject_prefix.clone(),
        allow_actions: args.allow_actions,
        token,
        records: tokio::sync::Mutex::new(None),
        verdicts: tokio::sync::Mutex::default(),
    });
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .map_err(|source| DashboardError::Bind {
            addr: args.listen,
            source,
        })?;
    let addr = listener.local_addr().unwrap_or(args.listen);
    // The line scripts and tests wait for (with the port, when --listen asked for 0).
    println!(
        "fleetbus dashboard on http://{addr}/ ({}, {})",
        if state.token.is_some() {
            "token required"
        } else {
            "loopback only"
        },
        if state.allow_actions {
            "actions allowed"
        } else {
            "read-only"
        }
    );
    let app = router(state);
    // Ctrl-C ends the process at once: open event streams never end by themselves, so
    // a graceful shutdown would wait for the browsers to go away.
    tokio::select! {
        served = axum::serve(listener, app) => served.map_err(DashboardError::Serve)?,
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(ExitCode::SUCCESS)
}

fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/", get(|| asset(INDEX, "text/html; charset=utf-8")))
        .route("/app.css", get(|| asset(CSS, "text/css; charset=utf-8")))
        .route(
            "/app.js",
            get(|| asset(JS, "text/javascript; charset=utf-8")),
        )
        .route("/api/config", get(api::config))
        .route("/api/clusters", get(api::clusters))
        .route("/api/rules", get(api::rules))
        .route("/api/drift", get(api::drift))
        .route("/api/drift/history", get(api::history))
        .route("/api/progress", get(api::progress))
        .route("/api/events", get(api::events))
        .route("/api/actions/correct", post(actions::correct))
        .route("/api/actions/label", post(actions::label))
        .fallback(|uri: axum::http::Uri| async move {
            error::ApiError::new(
                StatusCode::NOT_FOUND,
                format!("no such page or endpoint: {}", uri.path()),
            )
        })
        .layer(axum::middleware::map_response(headers))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            guard::guard,
        ))
        .with_state(state)
}

async fn asset(body: &'static str, content_type: &'static str) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, content_type)], body)
}

/// Headers on every response: no caching of fleet data, no sniffing, no framing, and
/// a policy that runs only this server's own script.
async fn headers(mut res: axum::response::Response) -> axum::response::Response {
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    res
}
