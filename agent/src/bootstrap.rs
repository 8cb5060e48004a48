//! Start-up preparation of the local cluster: the fleetbus CRDs and the agent namespace.

use std::time::Duration;

use fleetbus_schemas::crd::Cluster;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;

use crate::kube::FIELD_MANAGER;

/// Failure to prepare the local cluster.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A CRD could not be applied (the agent may lack RBAC for CRDs).
    #[error("failed to apply CRD {name}")]
    ApplyCrd {
        /// CRD name.
        name: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The CRDs did not become served in time.
    #[error("the fleetbus CRDs are not served (with --install-crds=false they must be installed beforehand)")]
    NotServed(#[source] kube::Error),
    /// A CRD could not be serialised (a bug).
    #[error("failed to serialise CRD {0}")]
    Serialise(String, #[source] serde_json::Error),
    /// The agent namespace could not be created.
    #[error("failed to create namespace {0}")]
    Namespace(String, #[source] kube::Error),
}

impl BootstrapError {
    /// Whether trying again later can help.
    pub fn is_transient(&self) -> bool {
        match self {
            BootstrapError::ApplyCrd { source, .. }
            | BootstrapError::NotServed(source)
            | BootstrapError::Namespace(_, source) => crate::kube::client::is_transient(source),
            BootstrapError::Serialise(..) => false,
        }
    }
}

/// Server-side applies every fleetbus CRD, so a bare cluster works.
#[tracing::instrument(skip_all)]
pub async fn install_crds(client: &kube::Client) -> Result<(), BootstrapError> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    for crd in fleetbus_schemas::all_crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let mut body =
            serde_json::to_value(&crd).map_err(|e| BootstrapError::Serialise(name.clone(), e))?;
        if let Some(map) = body.as_object_mut() {
            map.insert("apiVersion".into(), "apiextensions.k8s.io/v1".into());
            map.insert("kind".into(), "CustomResourceDefinition".into());
        }
        api.patch(&name, &pp, &Patch::Apply(&body))
            .await
            .map_err(|source| BootstrapError::ApplyCrd {
                name: name.clone(),
                source,
            })?;
        tracing::debug!(crd = %name, "applied");
    }
    Ok(())
}

/// Waits until Cluster objects can be listed: a fresh CRD takes a moment to be
/// served by a real API server.
pub async fn wait_served(client: &kube::Client, timeout: Duration) -> Result<(), BootstrapError> {
    let api = Api::<Cluster>::all(client.clone());
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match api.list(&ListParams::default().limit(1)).await {
            Ok(_) => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(BootstrapError::NotServed(e))
            }
            Err(e) => {
                tracing::debug!(error = %e, "Cluster CRD not served yet");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Creates the agent namespace if it is missing.
#[tracing::instrument(skip(client))]
pub async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), BootstrapError> {
    let api = Api::<Namespace>::all(client.clone());
    match api.get_opt(name).await {
        Ok(Some(_)) => return Ok(()),
        Ok(None) => {}
        Err(e) => return Err(BootstrapError::Namespace(name.to_owned(), e)),
    }
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    match api.create(&PostParams::default(), &ns).await {
        Ok(_) => {
            tracing::info!(namespace = name, "created namespace");
            Ok(())
        }
        // Another agent or a chart created it meanwhile.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(BootstrapError::Namespace(name.to_owned(), e)),
    }
}
