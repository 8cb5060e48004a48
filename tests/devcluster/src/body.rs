//! HTTP bodies both ways: a request's, read within [`MAX_BODY`], and JSON or
//! metav1.Status responses. Shared by the API routes (`api`) and
//! `/debug/faults` (`faults`); imports neither.

use crate::status::ApiError;
use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Response, StatusCode};
use http_body_util::BodyExt;
use serde_json::Value;

/// Largest accepted request body, like kube-apiserver's 3 MiB.
pub const MAX_BODY: usize = 3 * 1024 * 1024;

/// How much of an oversized body is read and discarded before answering 413, so the
/// client finishes sending and sees the Status instead of a broken pipe.
const DRAIN_LIMIT: usize = 32 * 1024 * 1024;

/// Reads the body, refusing more than [`MAX_BODY`] bytes (checked while reading).
pub async fn read_body(mut body: axum::body::Body, headers: &HeaderMap) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|len| len > DRAIN_LIMIT) {
        return Err(ApiError::too_large(MAX_BODY));
    }
    let mut buf = bytes::BytesMut::new();
    let mut total = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("failed to read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        total = total.saturating_add(data.len());
        if total > DRAIN_LIMIT {
            break;
        }
        if total <= MAX_BODY {
            buf.extend_from_slice(&data);
        }
    }
    if total > MAX_BODY {
        return Err(ApiError::too_large(MAX_BODY));
    }
    Ok(buf.freeze())
}

/// A JSON response.
pub fn json_response(code: u16, body: &Value) -> Response<Body> {
    json_with_type(code, body, "application/json")
}

pub fn json_with_type(code: u16, body: &Value, content_type: &str) -> Response<Body> {
    let bytes = crate::serialize::to_body(body);
    let mut resp = Response::new(Body::from(bytes));
    *resp.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    if let Ok(v) = HeaderValue::from_str(content_type) {
        resp.headers_mut().insert(http::header::CONTENT_TYPE, v);
    }
    resp
}

/// A metav1.Status error response.
pub fn error_response(e: &ApiError) -> Response<Body> {
    json_response(e.code, &e.to_status())
}
