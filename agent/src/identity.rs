//! This cluster's identity: the UID of its kube-system namespace.

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;

/// Failure to read the cluster identity.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The kube-system namespace could not be read.
    #[error("failed to read the kube-system namespace")]
    Get(#[source] kube::Error),
    /// The kube-system namespace has no UID (never true of a real API server).
    #[error("the kube-system namespace has no uid")]
    NoUid,
}

impl IdentityError {
    /// Whether trying again later can help.
    pub fn is_transient(&self) -> bool {
        match self {
            IdentityError::Get(e) => crate::kube::client::is_transient(e),
            IdentityError::NoUid => false,
        }
    }
}

/// Reads the clusterID: the kube-system UID is stable for the life of a
/// cluster and unique across clusters, which is all an identity needs.
#[tracing::instrument(skip_all)]
pub async fn cluster_id(client: &kube::Client) -> Result<String, IdentityError> {
    let ns = Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await
        .map_err(IdentityError::Get)?;
    ns.metadata
        .uid
        .filter(|u| !u.is_empty())
        .ok_or(IdentityError::NoUid)
}
