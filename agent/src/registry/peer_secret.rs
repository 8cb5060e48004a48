//! A peer's published kubeconfig, stored as a Secret its Cluster object points at; its writes fail on their own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fleetbus_schemas::crd::{AuthInfo, Cluster, NamespacedName};
use fleetbus_schemas::well_known;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;
use tokio::time::Instant;

use super::peer_failures::{Content, PeerFailures, Verdict};
use super::peers::{is_refusal, report_rejection, Outcome, Plan};
use super::record::KubeconfigRecord;
use super::{Registry, RegistryError};

/// Kubeconfig Secrets already written (name -> kubeconfig), to skip rewrites.
/// A std mutex: held for one lookup or insert, never across an await.
#[derive(Debug, Default)]
pub struct SecretCache(Mutex<HashMap<String, String>>);
/// Stores the peer's published kubeconfig as a Secret and returns where the
/// object should point, or `None` (keep `spec.authInfo` as it is) when there
/// is none, the name is in conflict, or the Secret cannot be written. A
/// Secret the API server refuses is that Secret's problem: reported once,
/// retried like a peer (key `<peer>/kubeconfig-secret` in `failures`), and
/// the Cluster object is written all the same.
pub(super) async fn kubeconfig_secret(
    reg: &Registry,
    secrets: &SecretCache,
    failures: &mut PeerFailures,
    clusters: &[Arc<Cluster>],
    p: &Plan,
    now: Instant,
    out: &mut Outcome,
) -> Option<AuthInfo> {
    let k = p.kubeconfig.as_ref()?;
    if !p.conflict_ids.is_empty() {
        return None;
    }
    let key = format!("{}/kubeconfig-secret", p.name);
    let content = Content::of(&p.record, Some(k));
    match failures.verdict(&key, &content, now) {
        Verdict::Try => {}
        Verdict::Rejected => return None,
        Verdict::Wait(at) => {
            out.wake(at);
            return None;
        }
    }
    let secret_name = format!("{}-kubeconfig", p.name);
    match ensure_secret(reg, secrets, &secret_name, k).await {
        Ok(()) => {
            failures.succeeded(&key);
            Some(AuthInfo {
                secret_ref: NamespacedName {
                    name: secret_name,
                    namespace: reg.ctx.cfg.namespace.clone(),
                },
            })
        }
        Err(e) if is_refusal(&e) => {
            if failures.rejected(&key, content, now) {
                report_rejection(reg, clusters, &p.name, &e).await;
            }
            None
        }
        Err(e) => {
            let at = failures.transient(&key, now);
            tracing::warn!(peer = %p.name, error = %crate::report(&e), retry_in = ?at.saturating_duration_since(now), "storing the peer's kubeconfig failed; retrying with backoff");
            out.wake(at);
            None
        }
    }
}

/// Stores a peer's published kubeconfig as a Secret the Cluster object points at.
async fn ensure_secret(
    reg: &Registry,
    cache: &SecretCache,
    name: &str,
    k: &KubeconfigRecord,
) -> Result<(), RegistryError> {
    {
        let cached = cache.0.lock().unwrap_or_else(|p| p.into_inner());
        if cached.get(name) == Some(&k.kubeconfig) {
            return Ok(());
        }
    }
    let api = Api::<Secret>::namespaced(reg.ctx.client.clone(), &reg.ctx.cfg.namespace);
    let err = |action, source| RegistryError::Kube {
        action,
        object: format!("{}/{name}", reg.ctx.cfg.namespace),
        source,
    };
    let data = ByteString(k.kubeconfig.clone().into_bytes());
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
        .insert(name.to_owned(), k.kubeconfig.clone());
    Ok(())
}
