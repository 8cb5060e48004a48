//! Failure of a registry task, and whether a retry can help.

use async_nats::jetstream::kv;

/// Failure of a registry task.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A call to the local Kubernetes API failed.
    #[error("failed to {action} {object}")]
    Kube {
        /// What was attempted (e.g. "patch status of").
        action: &'static str,
        /// Which object.
        object: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// Putting a record into the registry bucket failed.
    #[error("failed to put {key} into the registry bucket")]
    Put {
        /// The key.
        key: String,
        /// Cause.
        #[source]
        source: kv::PutError,
    },
    /// Putting our beat into the beats bucket failed.
    #[error("failed to put {key} into the beats bucket")]
    Beat {
        /// The key.
        key: String,
        /// Cause (a publish or its acknowledgement).
        #[source]
        source: async_nats::jetstream::context::PublishError,
    },
    /// The registry watch could not be started or broke.
    #[error("registry watch failed")]
    Watch(#[source] async_nats::Error),
    /// A record could not be encoded (a bug).
    #[error("failed to encode a record")]
    Encode(#[source] fleetbus_schemas::EncodeError),
    /// A patch could not be serialised (a bug).
    #[error("failed to serialise a patch")]
    Serialise(#[source] serde_json::Error),
}

impl RegistryError {
    /// Whether trying again later can help. Bus and API hiccups can; a record
    /// that cannot be serialised will not serialise next time either.
    pub fn is_transient(&self) -> bool {
        match self {
            RegistryError::Kube { source, .. } => crate::kube::client::is_transient(source),
            RegistryError::Put { .. } | RegistryError::Beat { .. } | RegistryError::Watch(_) => {
                true
            }
            RegistryError::Encode(_) | RegistryError::Serialise(_) => false,
        }
    }
}
