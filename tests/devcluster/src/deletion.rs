//! What a deletion is asked (metav1.DeletionPropagation) and what it did:
//! the plain data the DELETE verb and the garbage collector share.

use crate::status::ApiError;
use serde_json::Value;

/// metav1.DeletionPropagation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Leave dependents, removing their ownerReference.
    Orphan,
    /// Delete the owner now and its dependents afterwards.
    Background,
    /// Mark the owner with the `foregroundDeletion` finalizer, delete its
    /// dependents, then the owner once no blocking dependent is left.
    Foreground,
}

impl Propagation {
    /// Parses the DeleteOptions value.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        match s {
            "Orphan" => Ok(Propagation::Orphan),
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            other => Err(ApiError::bad_request(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            ))),
        }
    }
}

/// What a DELETE did.
#[derive(Debug, Clone)]
pub enum DeleteOutcome {
    /// The object still exists, marked for deletion (finalizers pending).
    Pending(Value),
    /// The object is gone; this is its last state.
    Deleted(Value),
}
