//! Rule-driven sync (placeholder while the engine lands).

/// Failure of the sync task.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A call to the local Kubernetes API failed.
    #[error("failed to {action}")]
    Kube {
        /// What was attempted.
        action: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

impl SyncError {
    /// Whether trying again later can help.
    pub fn is_transient(&self) -> bool {
        match self {
            SyncError::Kube { source, .. } => crate::kube::client::is_transient(source),
        }
    }
}
