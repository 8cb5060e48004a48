//! Building the Kubernetes client for the local cluster.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Failure to build a client for the local cluster.
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    /// The kubeconfig file given with --kubeconfig could not be read.
    #[error("failed to read kubeconfig {path}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig was read but does not describe a usable cluster.
    #[error("failed to load kubeconfig {path}")]
    Load {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither in-cluster configuration, $KUBECONFIG nor ~/.kube/config worked.
    #[error(
        "failed to infer a Kubernetes configuration (in-cluster, $KUBECONFIG, ~/.kube/config)"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be constructed (e.g. bad TLS material).
    #[error("failed to build the Kubernetes client")]
    Build(#[source] kube::Error),
}

impl KubeClientError {
    /// Never: configuration that does not load will not load on a retry.
    pub fn is_transient(&self) -> bool {
        false
    }
}

/// Loads the configuration (explicit file, else inferred) and builds a client.
/// The configuration is returned too: the published kubeconfig reuses its
/// server URL and CA.
pub async fn build(
    kubeconfig: Option<&Path>,
) -> Result<(kube::Client, kube::Config), KubeClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let shown = path.display().to_string();
            let kc = Kubeconfig::read_from(path).map_err(|source| KubeClientError::Read {
                path: shown.clone(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeClientError::Load {
                    path: shown,
                    source,
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(KubeClientError::Infer)?,
    };
    let client = kube::Client::try_from(config.clone()).map_err(KubeClientError::Build)?;
    Ok((client, config))
}

/// Whether an error from the Kubernetes API is worth retrying: connection
/// problems, conflicts, throttling and server-side 5xx.
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => matches!(s.code, 409 | 429 | 500..=599),
        kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::HttpError(_)
        | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}
