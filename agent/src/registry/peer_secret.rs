//! A peer's published kubeconfig, stored as a Secret its Cluster object points at (the write only; `peers` decides when).

use std::collections::HashMap;
use std::sync::Mutex;

use fleetbus_schemas::well_known;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;

use super::error::RegistryError;
use super::record::KubeconfigRecord;
use super::shared::Registry;

/// Kubeconfig Secrets already written (name -> kubeconfig), to skip rewrites.
/// A std mutex: held for one lookup or insert, never across an await.
#[derive(Debug, Default)]
pub struct SecretCache(Mutex<HashMap<String, String>>);

/// Stores a peer's published kubeconfig as a Secret the Cluster object points at.
pub(super) async fn ensure_secret(
    reg: &Registry,
    cache: &SecretCache,
    name: &str,
    k: &KubeconfigRecord,
) -> Result<(), RegistryError> {
    // Sealed to the peers in the secure mode (PROTOCOL §5.2): opened with
    // our key. One not sealed to us (we joined after it was sealed; the
    // peer seals again when it sees us) or that does not open is skipped
    // and counted; the Secret keeps what it held.
    let sealing = reg.ctx.sealing.as_ref().map(|s| &s.secret);
    let kubeconfig = match k.open(&reg.ctx.cfg.cluster_name, sealing) {
        Ok(text) => text,
        Err(e) => {
            reg.ctx.metrics.rejected(e.reason());
            tracing::warn!(
                peer = name,
                reason = e.reason(),
                "cannot open a peer's sealed kubeconfig"
            );
            return Ok(());
        }
    };
    {
        let cached = cache.0.lock().unwrap_or_else(|p| p.into_inner());
        if cached.get(name) == Some(&kubeconfig) {
            return Ok(());
        }
    }
    let api = Api::<Secret>::namespaced(reg.ctx.client.clone(), &reg.ctx.cfg.namespace);
    let err = |action, source| RegistryError::Kube {
        action,
        object: format!("{}/{name}", reg.ctx.cfg.namespace),
        source,
    };
    let data = ByteString(kubeconfig.clone().into_bytes());
    match api.get_opt(name).await.map_err(|e| err("get Secret", e))? {
        Some(s)
            if s.data
                .as_ref()
                .and_then(|d| d.get(well_known::SECRET_KEY_KUBECONFIG))
                == Some(&data) => {}
        Some(_) => {
            let patch = serde_json::json!({
                "data": { well_known::SECRET_KEY_KUBECONFIG: data },
            });
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| err("patch Secret", e))?;
            reg.ctx.metrics.kube_write("secret");
            tracing::info!(secret = name, "updated peer kubeconfig Secret");
        }
        None => {
            let secret = Secret {
                metadata: ObjectMeta {
                    name: Some(name.to_owned()),
                    namespace: Some(reg.ctx.cfg.namespace.clone()),
                    labels: Some(
                        [(
                            well_known::LABEL_MANAGED.to_owned(),
                            well_known::LABEL_MANAGED_VALUE.to_owned(),
                        )]
                        .into(),
                    ),
                    ..ObjectMeta::default()
                },
                type_: Some(well_known::SECRET_TYPE_CLUSTER_KUBECONFIG.to_owned()),
                data: Some([(well_known::SECRET_KEY_KUBECONFIG.to_owned(), data)].into()),
                ..Secret::default()
            };
            api.create(&PostParams::default(), &secret)
                .await
                .map_err(|e| err("create Secret", e))?;
            reg.ctx.metrics.kube_write("secret");
            tracing::info!(secret = name, "stored peer kubeconfig Secret");
        }
    }
    cache
        .0
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.to_owned(), kubeconfig);
    Ok(())
}
