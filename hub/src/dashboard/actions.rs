//! The two actions, refused unless the server runs with `--allow-actions`. Each sends
//! exactly what its CLI command sends, through the command's own code path
//! ([`crate::drift::correct::send`], [`crate::clusters::label::send`]).
//!
//! Bodies are JSON (`Content-Type: application/json`, else 415): a form on another site
//! cannot send that without a CORS preflight, which this server never answers, and the
//! login cookie is `SameSite=Strict`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::rejection::JsonRejection;
use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use fleetbus_schemas::command::CorrectRequest;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::AppState;

/// How long an action waits for the agent, as the CLI commands' default `--timeout`.
const TIMEOUT: Duration = Duration::from_secs(10);

fn allowed(s: &AppState) -> Result<(), ApiError> {
    if s.allow_actions {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "this dashboard is read-only: start it with --allow-actions to correct drift or \
             relabel clusters from it",
        ))
    }
}

fn body<T>(b: Result<Json<T>, JsonRejection>) -> Result<T, ApiError> {
    b.map(|Json(t)| t)
        .map_err(|e| ApiError::new(e.status(), format!("bad request body: {}", e.body_text())))
}

fn cluster(c: &str) -> Result<String, ApiError> {
    super::api::cluster_param(Some(c.to_owned()))?
        .ok_or_else(|| ApiError::bad_request("cluster is required"))
}

/// What "correct now" sends: the filters of `fleetbus drift correct`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CorrectBody {
    cluster: String,
    rule: Option<String>,
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
}

/// `POST /api/actions/correct`.
pub(crate) async fn correct(
    State(s): State<Arc<AppState>>,
    b: Result<Json<CorrectBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    allowed(&s)?;
    let b = body(b)?;
    let cluster = cluster(&b.cluster)?;
    let request = CorrectRequest {
        rule: b.rule,
        kind: b.kind,
        namespace: b.namespace,
        name: b.name,
    };
    let reply =
        crate::drift::correct::send(&s.client, &s.prefix, &cluster, &request, TIMEOUT).await?;
    let value = reply
        .encode()
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or_default();
    Ok(Json(value))
}

/// What relabelling sends: `fleetbus clusters label` arguments.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct LabelBody {
    cluster: String,
    /// `KEY=VALUE` sets, `KEY-` removes (kubectl syntax).
    labels: Vec<String>,
    #[serde(default)]
    overwrite: bool,
}

/// `POST /api/actions/label`.
pub(crate) async fn label(
    State(s): State<Arc<AppState>>,
    b: Result<Json<LabelBody>, JsonRejection>,
) -> Result<Json<Value>, ApiError> {
    allowed(&s)?;
    let b = body(b)?;
    let cluster = cluster(&b.cluster)?;
    if b.labels.is_empty() {
        return Err(ApiError::bad_request(
            "labels: give at least one KEY=VALUE or KEY-",
        ));
    }
    let mut request = crate::clusters::parse_label_args(&b.labels)?;
    request.overwrite = b.overwrite;
    let reply =
        crate::clusters::label::send(&s.client, &s.prefix, &cluster, &request, TIMEOUT).await?;
    Ok(Json(json!({
        "cluster": reply.cluster, "labels": reply.labels.unwrap_or_default(),
    })))
}
