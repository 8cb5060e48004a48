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
//! | `GET /api/drift[?cluster=&rule=]` | `{now, drifted: [drift event JSON], unverified: [{key, why}]}` (the drift bucket; with `--dir` holding the fleet root, entries their cluster did not sign are in `unverified` only) |
//! | `GET /api/drift/history?object=KIND/NS/NAME[&cluster=]` | `{events: [{event, published}]}`, oldest first |
//! | `GET /api/progress?cluster=C` | what `fleetbus clusters progress C -o json` prints for C |
//! | `GET /api/events[?cluster=]` | server-sent events: `ready` once subscribed, then `drift` (`{event, published}`) per new drift event; `failed` (`{error}`) ends it (a read failure, or a client more than 1,024 events behind) |
//! | `POST /api/actions/correct` | body `{cluster, rule?, kind?, namespace?, name?}`: the agent's correct reply (as `fleetbus drift correct`) |
//! | `POST /api/actions/label` | body `{cluster, labels: ["k=v", "k-"], overwrite?}`: `{cluster, labels}` (as `fleetbus clusters label`) |
//!
//! Actions without `--allow-actions` are 403.
//!
//! # One watch per process
//! `/api/rules`, `/api/drift` and `/api/events` cost the bus nothing per request: one
//! task watches the rule status bucket, one the drift bucket (`mirror`), one reads
//! the drift stream and fans it out to every event client (`feed`), so a dashboard
//! holds three consumers however many browsers poll it. A request waits up to 2 s for
//! a bucket's first watch to catch up, and reads the bucket once itself if it has not;
//! while a watch is failed (it is restarted with backoff), requests get the error a
//! read would. A lagging event client is told (`failed`) and dropped, not slowed for.

mod actions;
mod api;
mod error;
mod feed;
mod guard;
mod mirror;
mod rules;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use fleetbus_schemas::drift::DriftEvent;
use fleetbus_schemas::registry::ClusterRecord;
use fleetbus_schemas::rule_status::RuleStatusRecord;
use fleetbus_schemas::subject::{DriftKey, Prefix};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

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
    /// The drift bucket, decoded as `fleetbus drift ls` decodes it.
    drift: mirror::BucketMirror<Drifted>,
    /// The rule status bucket, each record checked as `fleetbus rules` checks it.
    rule_status: mirror::BucketMirror<RuleStatusEntry>,
    /// New drift events for `/api/events`.
    feed: feed::DriftFeed,
}

/// The registry's records and the beats present, read together.
#[derive(Clone)]
pub(crate) struct Registry {
    pub(crate) records: Vec<ClusterRecord>,
    /// Records left out: they do not verify against the fleet root.
    pub(crate) unverified: Vec<crate::fleet::Unverified>,
    /// The keys of the records that verified; None without the fleet root
    /// (what drift events are checked with, as `fleetbus drift ls` does).
    pub(crate) signers: Option<crate::signers::Signers>,
    pub(crate) beats: crate::fleet::Beats,
}

/// How long a read of the registry is reused.
const RECORDS_TTL: Duration = Duration::from_secs(1);
/// How long a request waits for a bucket's first watch to catch up before it reads the
/// bucket itself (a large bucket takes a while to replay; a page should not).
const CATCH_UP: Duration = Duration::from_secs(2);
/// How long an event client waits for the drift stream's reader to open (or fail):
/// longer than the bus's request timeout, so it is one or the other.
const FEED_WAIT: Duration = Duration::from_secs(10);

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
            signers: crate::command::fleet_root().map(|_| read.signers),
            beats: crate::fleet::beating(&self.js, &self.prefix).await?,
        };
        *cached = Some((Instant::now(), registry.clone()));
        Ok(registry)
    }

    /// Starts the watches every request reads (see "One watch per process"); they
    /// end when `shutdown` is cancelled.
    fn watch(self: &Arc<Self>, shutdown: &CancellationToken) -> JoinSet<()> {
        let mut tasks = JoinSet::new();
        let (s, stop) = (self.clone(), shutdown.clone());
        let bucket = fleetbus_schemas::drift::drift_bucket(&self.prefix);
        tasks.spawn(
            async move { s.drift.run(s.js.clone(), s.prefix.clone(), stop).await }
                .instrument(tracing::info_span!("watch", %bucket)),
        );
        let (s, stop) = (self.clone(), shutdown.clone());
        let bucket = fleetbus_schemas::rule_status::rule_status_bucket(&self.prefix);
        tasks.spawn(
            async move {
                s.rule_status
                    .run(s.js.clone(), s.prefix.clone(), stop)
                    .await
            }
            .instrument(tracing::info_span!("watch", %bucket)),
        );
        let (s, stop) = (self.clone(), shutdown.clone());
        tasks.spawn(
            async move { s.feed.run(s.js.clone(), s.prefix.clone(), stop).await }
                .instrument(tracing::info_span!("drift_feed")),
        );
        tasks
    }
}

/// A drift bucket entry as `fleetbus drift ls` reads it, with the bytes its
/// signature is checked on when it is shown.
pub(crate) struct Drifted {
    pub(crate) entry: (DriftKey, DriftEvent),
    pub(crate) raw: bytes::Bytes,
}

/// A drift bucket entry as `fleetbus drift ls` reads it (`None`: left out, logged).
fn drift_entry(key: &str, value: &[u8]) -> Option<Drifted> {
    let dk = crate::drift::ls::parse_key(key)?;
    let event = crate::drift::ls::decode_value(key, value)?;
    Some(Drifted {
        entry: (dk, event),
        raw: bytes::Bytes::copy_from_slice(value),
    })
}

/// A rule status entry as `fleetbus rules` reads it (a record, or why it is
/// skipped), with the bytes its signature is checked on when it is shown.
pub(crate) struct RuleStatusEntry {
    pub(crate) checked: Result<RuleStatusRecord, String>,
    pub(crate) raw: bytes::Bytes,
}

/// A rule status entry as `fleetbus rules` reads it: a record, or why it is skipped.
fn rule_status_entry(key: &str, value: &[u8]) -> Option<RuleStatusEntry> {
    Some(RuleStatusEntry {
        checked: crate::rules::read::check(key, value),
        raw: bytes::Bytes::copy_from_slice(value),
    })
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
        drift: mirror::BucketMirror::new(
            fleetbus_schemas::drift::drift_bucket(&args.bus.subject_prefix),
            drift_entry,
        ),
        rule_status: mirror::BucketMirror::new(
            fleetbus_schemas::rule_status::rule_status_bucket(&args.bus.subject_prefix),
            rule_status_entry,
        ),
        feed: feed::DriftFeed::new(),
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
    let shutdown = CancellationToken::new();
    let mut watches = state.watch(&shutdown);
    let app = router(state);
    // Ctrl-C ends the process at once: open event streams never end by themselves, so
    // a graceful shutdown would wait for the browsers to go away.
    let served = tokio::select! {
        served = axum::serve(listener, app) => served.map_err(DashboardError::Serve),
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    shutdown.cancel();
    while let Some(joined) = watches.join_next().await {
        if let Err(error) = joined {
            tracing::warn!(%error, "a dashboard watch panicked");
        }
    }
    served.map(|()| ExitCode::SUCCESS)
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
