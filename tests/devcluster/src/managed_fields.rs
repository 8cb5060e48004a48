//! Server-side apply approximation and managedFields bookkeeping.

use crate::resources::ResourceDef;
use serde_json::Value;

/// One metav1.StatusCause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// e.g. "FieldManagerConflict".
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// e.g. ".data.a".
    pub field: String,
}

/// Why a server-side apply failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Another manager owns a field with a different value (409).
    #[error("{message}")]
    Conflict {
        /// One cause per conflicting field.
        causes: Vec<Cause>,
        /// Full message.
        message: String,
    },
    /// The request is invalid (422).
    #[error("{0}")]
    Invalid(String),
}

impl ApplyError {
    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApplyError::Conflict { .. } => 409,
            ApplyError::Invalid(_) => 422,
        }
    }
    /// metav1.Status reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::Conflict { .. } => "Conflict",
            ApplyError::Invalid(_) => "Invalid",
        }
    }
}

/// Server-side apply (stub).
pub fn server_side_apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    def: &ResourceDef,
    now: &str,
) -> Result<Value, ApplyError> {
    let _ = (live, applied, manager, force, def, now);
    Err(ApplyError::Invalid("not implemented yet".into()))
}

/// Records an Update managedFields entry (stub).
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    def: &ResourceDef,
    now: &str,
) {
    let _ = (old, new, manager, subresource, def, now);
}
