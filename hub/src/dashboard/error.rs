//! Why the dashboard did not start ([`DashboardError`]) and how an endpoint fails
//! ([`ApiError`]: a status and one JSON line, never a panic).

use std::net::SocketAddr;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::clusters::progress::chain;
use crate::clusters::ClustersError;
use crate::command::CommandError;
use crate::drift::DriftError;
use crate::kv::ReadError;

/// `fleetbus dashboard` could not start or stopped serving.
#[derive(Debug, thiserror::Error)]
pub enum DashboardError {
    /// A non-loopback address without a token would show the fleet to anyone.
    #[error(
        "refusing to serve on {0} without a token: anyone who reaches it could read the fleet; \
         set --token (or FLEETBUS_DASHBOARD_TOKEN), or listen on a loopback address \
         (--listen 127.0.0.1:8080)"
    )]
    TokenRequired(SocketAddr),
    /// The token cannot travel in a header or cookie as it is.
    #[error(
        "--token must be 1 to 512 visible ASCII characters without ';', ',', '\"' or '\\\\' \
         (it travels in a header and a cookie)"
    )]
    BadToken,
    /// Binding the address failed.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the OS said.
        #[source]
        source: std::io::Error,
    },
    /// Connecting to NATS failed.
    #[error(transparent)]
    Command(#[from] CommandError),
    /// Serving failed.
    #[error("the dashboard's server failed")]
    Serve(#[source] std::io::Error),
}

/// A failed request: an HTTP status and a message for people, sent as
/// `{"error": "..."}`.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub(crate) status: StatusCode,
    pub(crate) message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(serde_json::json!({ "error": self.message })),
        )
            .into_response()
    }
}

impl From<ReadError> for ApiError {
    fn from(e: ReadError) -> Self {
        Self::from(&e)
    }
}

/// The same answer from a failure kept for every request (a bucket's watch).
impl From<&ReadError> for ApiError {
    fn from(e: &ReadError) -> Self {
        let status = match e {
            // The fleet has not created it (yet): the bus is there, the data is not.
            ReadError::Missing { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ReadError::Unreadable { .. } => StatusCode::BAD_GATEWAY,
        };
        Self::new(status, chain(e))
    }
}

impl From<CommandError> for ApiError {
    fn from(e: CommandError) -> Self {
        let status = match e {
            CommandError::Timeout { .. } => StatusCode::GATEWAY_TIMEOUT,
            CommandError::NoResponder { .. } => StatusCode::NOT_FOUND,
            CommandError::Connect { .. } | CommandError::Request { .. } => StatusCode::BAD_GATEWAY,
            // The server was started with a creds or CA file it cannot read: its own fault.
            CommandError::Creds { .. }
            | CommandError::Ca { .. }
            | CommandError::RootKey { .. }
            | CommandError::RootPublic { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, chain(&e))
    }
}

impl From<DriftError> for ApiError {
    fn from(e: DriftError) -> Self {
        match e {
            DriftError::Command(e) => e.into(),
            DriftError::Read(e) => e.into(),
            DriftError::ObjectArg(_) => Self::bad_request(chain(&e)),
            DriftError::Refused { .. } => Self::new(StatusCode::UNPROCESSABLE_ENTITY, chain(&e)),
            DriftError::Encode(_) | DriftError::BadReply { .. } | DriftError::Output(_) => {
                Self::new(StatusCode::BAD_GATEWAY, chain(&e))
            }
        }
    }
}

impl From<ClustersError> for ApiError {
    fn from(e: ClustersError) -> Self {
        match e {
            ClustersError::Command(e) => e.into(),
            ClustersError::Registry(e) => e.into(),
            ClustersError::LabelArg(_) => Self::bad_request(chain(&e)),
            ClustersError::Refused { .. } => Self::new(StatusCode::UNPROCESSABLE_ENTITY, chain(&e)),
            _ => Self::new(StatusCode::BAD_GATEWAY, chain(&e)),
        }
    }
}
