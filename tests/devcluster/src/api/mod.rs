//! HTTP front: authentication and routing.

pub(crate) mod request;
mod resource;
mod route;
mod subresource;

pub(crate) use route::ResPath;

use crate::auth::{rbac::Attributes, request_attributes, Auth, UserInfo};
use crate::body::{error_response, json_response, json_with_type};
use crate::discovery;
use crate::status::ApiError;
use crate::store::Store;
use axum::body::Body;
use futures::FutureExt;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use request::Query;
use route::Route;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

/// Shared server state.
#[derive(Debug)]
pub struct AppState {
    /// Objects, registry, history.
    pub store: Store,
    /// Bearer tokens (--token, ServiceAccount JWTs) and --authorization.
    pub auth: Auth,
    /// Period of watch BOOKMARK events.
    pub bookmark_every: Duration,
    /// host:port clients use, for /api serverAddressByClientCIDRs.
    pub server_addr: String,
    /// `/debug/faults` and what it injects (only with `--debug-faults`).
    pub faults: Option<Arc<crate::faults::Faults>>,
}

fn text(code: StatusCode, body: &'static str) -> Response<Body> {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    resp
}

fn bearer(req: &Request<Body>) -> Option<&str> {
    req.headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
}

/// Authenticates and authorizes `req`; the user is left in its extensions
/// (SelfSubjectAccessReview answers for them).
fn admit(
    state: &AppState,
    route: &Route,
    query: &Query,
    req: &mut Request<Body>,
) -> Result<(), ApiError> {
    let now = chrono::Utc::now().timestamp();
    let user: UserInfo = state
        .store
        .read(|i| state.auth.authenticate(i, bearer(req), now))?;
    let rp = match route {
        Route::Resource(rp) => Some(rp),
        _ => None,
    };
    // kube-apiserver authorizes non-resource URLs by the decoded path too.
    let path = route::unescape(req.uri().path()).unwrap_or_default();
    let (verb, target) = request_attributes(req.method(), &path, rp, query.flag("watch"));
    let attrs = Attributes {
        user: &user,
        verb,
        target,
    };
    state.store.read(|i| state.auth.authorize(i, &attrs))?;
    req.extensions_mut().insert(user);
    Ok(())
}

/// Handles one request. Never panics outward: a panic in a handler becomes a 500.
pub async fn handle(state: Arc<AppState>, req: Request<Body>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let result = AssertUnwindSafe(dispatch(state, req)).catch_unwind().await;
    let resp = match result {
        Ok(r) => r,
        Err(_) => {
            tracing::error!(%method, %path, "handler panicked");
            error_response(&ApiError::internal("handler panicked"))
        }
    };
    let status = resp.status().as_u16();
    // Writes (and failures) at info so test logs show what changed; reads at debug.
    if method == Method::GET && status < 400 {
        tracing::debug!(%method, %path, status, "request");
    } else {
        tracing::info!(%method, %path, status, "request");
    }
    resp
}

async fn dispatch(state: Arc<AppState>, mut req: Request<Body>) -> Response<Body> {
    let route = route::parse(req.uri().path());
    let public = matches!(
        route,
        Route::Health
            | Route::Version
            | Route::Writes
            | Route::DebugStore
            | Route::DebugFaults
            | Route::BadRequest
    );
    let query = Query::parse(req.uri().query());
    if !public {
        if let Err(e) = admit(&state, &route, &query, &mut req) {
            return error_response(&e);
        }
        // After authentication, before the handler: where kube-apiserver's
        // API Priority and Fairness filter sits.
        if let Some(faults) = &state.faults {
            let client = crate::faults::client_of(req.headers());
            let d = faults.admit(&client, req.method().as_str(), req.uri().path());
            if !d.delay.is_zero() {
                tokio::time::sleep(d.delay).await;
            }
            if let Some(r) = d.refuse {
                return crate::faults::refusal(r);
            }
        }
    }
    let is_get = req.method() == Method::GET || req.method() == Method::HEAD;
    let defs = || state.store.read(|i| i.registry.all());
    match route {
        Route::Health => text(StatusCode::OK, "ok"),
        // What Go's HTTP server writes for a request URI it cannot parse.
        Route::BadRequest => text(StatusCode::BAD_REQUEST, "400 Bad Request"),
        Route::Writes if is_get => json_response(200, &state.store.writes()),
        Route::DebugStore if is_get => json_response(200, &state.store.debug_store()),
        Route::DebugFaults => match &state.faults {
            // Off: the path is as unknown as on kube-apiserver.
            None => error_response(&ApiError::path_not_found()),
            Some(faults) => {
                let method = req.method().clone();
                let (parts, body) = req.into_parts();
                faults.endpoint(&method, body, &parts.headers).await
            }
        },
        Route::Version if is_get => json_response(200, &discovery::version()),
        Route::OpenApiV2 if is_get => {
            let mut resp = Response::new(Body::from(crate::openapi::v2_protobuf()));
            resp.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static(
                    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                ),
            );
            resp
        }
        Route::OpenApiV3Root if is_get => json_response(200, &crate::openapi::v3_root(&defs())),
        Route::OpenApiV3Gv(g, v) if is_get => {
            match crate::openapi::v3_group_version(&defs(), &g, &v) {
                Some(doc) => json_response(200, &doc),
                None => error_response(&ApiError::path_not_found()),
            }
        }
        Route::CoreVersions if is_get => match request::wants_aggregated(req.headers()) {
            Some(v) => json_with_type(
                200,
                &discovery::aggregated(&defs(), true, v),
                &discovery::aggregated_content_type(v),
            ),
            None => json_response(200, &discovery::core_versions(&state.server_addr)),
        },
        Route::Groups if is_get => match request::wants_aggregated(req.headers()) {
            Some(v) => json_with_type(
                200,
                &discovery::aggregated(&defs(), false, v),
                &discovery::aggregated_content_type(v),
            ),
            None => json_response(200, &discovery::group_list(&defs())),
        },
        Route::Group(g) if is_get => match discovery::group(&defs(), &g) {
            Some(doc) => json_response(200, &doc),
            None => error_response(&ApiError::path_not_found()),
        },
        Route::ResourceList(g, v) if is_get => match discovery::resource_list(&defs(), &g, &v) {
            Some(doc) => json_response(200, &doc),
            None => error_response(&ApiError::path_not_found()),
        },
        Route::Resource(rp) => resource::handle(&state, rp, query, req).await,
        Route::NotFound => error_response(&ApiError::path_not_found()),
        _ => error_response(&ApiError::method_not_allowed(req.method().as_str())),
    }
}
