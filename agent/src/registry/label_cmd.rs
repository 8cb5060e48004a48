//! `<p>.cmd.<self>.label`: relabelling this cluster from anywhere on the bus
//! (`fleetbus clusters label`). The Local Cluster object stays the one owner
//! of the cluster's labels: the request is applied to it (like `kubectl
//! label`), and the record follows from it as after a kubectl edit. Refused
//! requests (malformed, invalid labels, a changed value without `overwrite`)
//! change nothing, get a reply with `error`, and are counted
//! (`fleetbus_commands_rejected_total{verb="label"}`).

use std::collections::BTreeMap;
use std::sync::Arc;

use fleetbus_schemas::command::{LabelReply, LabelRequest};
use fleetbus_schemas::crd::Cluster;
use fleetbus_schemas::registry::validate_labels;
use fleetbus_schemas::subject::CommandKey;
use futures::StreamExt;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::Registry;

/// How often a write that lost a race with another writer is tried again.
const CONFLICT_RETRIES: usize = 3;

/// Why a label request was refused; the message is the reply's `error`.
#[derive(Debug, thiserror::Error)]
pub enum LabelError {
    /// The request is not a label-request/v1 message.
    #[error("cannot read the request")]
    Malformed(#[source] fleetbus_schemas::DecodeError),
    /// A key is both set and removed.
    #[error("label {0:?} is both set and removed")]
    SetAndRemoved(String),
    /// A label (or the resulting set) fails Kubernetes' label validation.
    #[error("invalid labels")]
    Invalid(#[source] fleetbus_schemas::registry::InvalidRecord),
    /// A removed key is not a valid label key.
    #[error("label key {0:?} is not a valid Kubernetes label key")]
    InvalidKey(String),
    /// An existing label would change value without `overwrite`.
    #[error("label {key:?} already has value {current:?} (set overwrite to change it)")]
    Exists {
        /// The label.
        key: String,
        /// Its current value.
        current: String,
    },
    /// The Local Cluster object does not exist (yet) or is someone else's.
    #[error("the Local Cluster object {0} does not exist or belongs to another clusterID")]
    NoLocalObject(String),
    /// Reading or patching the Local Cluster object failed.
    #[error("failed to {action} the Local Cluster object")]
    Kube {
        /// What was attempted.
        action: &'static str,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

impl LabelError {
    /// The `reason` label of the rejection counter.
    fn reason(&self) -> &'static str {
        match self {
            LabelError::Malformed(_) => "malformed",
            LabelError::SetAndRemoved(_) | LabelError::Invalid(_) | LabelError::InvalidKey(_) => {
                "invalid"
            }
            LabelError::Exists { .. } => "exists",
            LabelError::NoLocalObject(_) => "no_local_object",
            LabelError::Kube { .. } => "kube",
        }
    }
}

/// The labels after `req`, or why it is refused (kubectl label semantics).
pub fn relabel(
    current: &BTreeMap<String, String>,
    req: &LabelRequest,
) -> Result<BTreeMap<String, String>, LabelError> {
    if let Some(k) = req.remove.iter().find(|k| req.set.contains_key(*k)) {
        return Err(LabelError::SetAndRemoved(k.clone()));
    }
    validate_labels("set", &req.set).map_err(LabelError::Invalid)?;
    if let Some(k) = req
        .remove
        .iter()
        .find(|k| !fleetbus_schemas::k8s_names::is_qualified_name(k))
    {
        return Err(LabelError::InvalidKey(k.clone()));
    }
    let mut next = current.clone();
    for (k, v) in &req.set {
        match current.get(k) {
            Some(old) if old != v && !req.overwrite => {
                return Err(LabelError::Exists {
                    key: k.clone(),
                    current: old.clone(),
                })
            }
            _ => {
                next.insert(k.clone(), v.clone());
            }
        }
    }
    for k in &req.remove {
        next.remove(k);
    }
    validate_labels("labels", &next).map_err(LabelError::Invalid)?;
    Ok(next)
}

/// Answers label requests until `cancel`. Without the subscription `fleetbus
/// clusters label` finds no responder; the agent goes on (the client
/// resubscribes by itself after reconnects), so a failed subscribe is logged,
/// not fatal: the task then idles until `cancel` (a task that returns stops
/// the agent).
#[tracing::instrument(name = "label_cmd", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(
    reg: Arc<Registry>,
    cancel: CancellationToken,
) -> Result<(), super::RegistryError> {
    let client = reg.ctx.js.client();
    let subject = CommandKey::label(&reg.ctx.cfg.cluster_name).to_subject(reg.ctx.layout.prefix());
    let mut sub = match client.subscribe(subject.clone()).await {
        Ok(sub) => sub,
        Err(e) => {
            tracing::warn!(%subject, error = %e, "cannot take label commands");
            cancel.cancelled().await;
            return Ok(());
        }
    };
    loop {
        let msg = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            msg = sub.next() => match msg {
                Some(msg) => msg,
                None => {
                    tracing::warn!(%subject, "label command subscription closed");
                    cancel.cancelled().await;
                    return Ok(());
                }
            },
        };
        let reply = handle(&reg, &msg.payload).await;
        let Some(to) = msg.reply else { continue };
        match reply.encode() {
            Ok(bytes) => {
                if let Err(e) = client.publish(to, bytes.into()).await {
                    tracing::warn!(error = %e, "could not reply to a label command");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not encode a label reply"),
        }
    }
}

/// Applies one request; the reply says what the labels are now, or why not.
async fn handle(reg: &Registry, payload: &[u8]) -> LabelReply {
    let cluster = reg.ctx.cfg.cluster_name.clone();
    let api = Api::<Cluster>::all(reg.ctx.client.clone());
    match apply(reg, &api, payload).await {
        Ok(labels) => {
            // The record follows from the object's watch event, as after a
            // kubectl edit. Setting the published labels here too would race
            // with a reconciler pass over a cache that has not seen the patch
            // yet, and publish old, new, old, new labels.
            tracing::info!(?labels, "relabelled on request");
            LabelReply {
                cluster,
                labels,
                error: None,
            }
        }
        Err(e) => {
            let error = crate::report(&e);
            tracing::warn!(%error, "label command refused");
            reg.ctx.metrics.command_rejected("label", e.reason());
            let labels = match api.get_opt(&cluster).await {
                Ok(Some(c)) if c.spec.cluster_id == reg.ctx.cluster_id => c.labels().clone(),
                _ => BTreeMap::new(),
            };
            LabelReply {
                cluster,
                labels,
                error: Some(error),
            }
        }
    }
}

/// Reads the request, patches the Local Cluster object, returns its labels.
async fn apply(
    reg: &Registry,
    api: &Api<Cluster>,
    payload: &[u8],
) -> Result<BTreeMap<String, String>, LabelError> {
    let req = LabelRequest::decode(payload).map_err(LabelError::Malformed)?;
    let name = &reg.ctx.cfg.cluster_name;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let ours = api
            .get_opt(name)
            .await
            .map_err(|source| LabelError::Kube {
                action: "read",
                source,
            })?
            .filter(|c| c.spec.cluster_id == reg.ctx.cluster_id)
            .ok_or_else(|| LabelError::NoLocalObject(name.clone()))?;
        let current = ours.labels().clone();
        let next = relabel(&current, &req)?;
        if next == current {
            return Ok(next);
        }
        let patch = merge_patch(&current, &next, ours.resource_version());
        match api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(written) => {
                reg.ctx.metrics.kube_write("cluster");
                return Ok(written.labels().clone());
            }
            // Someone else wrote the object since we read it (the
            // resourceVersion precondition): read it again and reapply.
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < CONFLICT_RETRIES => continue,
            Err(source) => {
                return Err(LabelError::Kube {
                    action: "patch",
                    source,
                })
            }
        }
    }
}

/// A JSON merge patch from `current` to `next` labels, guarded by the
/// resourceVersion read (a concurrent writer makes it fail with 409).
fn merge_patch(
    current: &BTreeMap<String, String>,
    next: &BTreeMap<String, String>,
    rv: Option<String>,
) -> Value {
    let mut labels = serde_json::Map::new();
    for k in current.keys().filter(|k| !next.contains_key(*k)) {
        labels.insert(k.clone(), Value::Null);
    }
    for (k, v) in next.iter().filter(|(k, v)| current.get(*k) != Some(*v)) {
        labels.insert(k.clone(), Value::String(v.clone()));
    }
    json!({"metadata": {"resourceVersion": rv, "labels": labels}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn req(set: &[(&str, &str)], remove: &[&str], overwrite: bool) -> LabelRequest {
        LabelRequest {
            set: labels(set),
            remove: remove.iter().map(|s| (*s).to_owned()).collect(),
            overwrite,
        }
    }

    #[test]
    fn relabel_follows_kubectl_label() {
        let cur = labels(&[("env", "dev"), ("tier", "edge")]);
        let next = relabel(&cur, &req(&[("zone", "a")], &["tier", "absent"], false)).unwrap();
        assert_eq!(next, labels(&[("env", "dev"), ("zone", "a")]));
        // Same value again: no overwrite needed.
        assert_eq!(
            relabel(&cur, &req(&[("env", "dev")], &[], false)).unwrap(),
            cur
        );
        assert!(matches!(
            relabel(&cur, &req(&[("env", "prod")], &[], false)),
            Err(LabelError::Exists { .. })
        ));
        assert_eq!(
            relabel(&cur, &req(&[("env", "prod")], &[], true)).unwrap()["env"],
            "prod"
        );
    }

    #[test]
    fn invalid_requests_are_refused() {
        let cur = labels(&[("env", "dev")]);
        for (bad, reason) in [
            (req(&[("bad key", "x")], &[], false), "invalid"),
            (req(&[("k", "not a value!")], &[], false), "invalid"),
            (req(&[], &["-bad"], false), "invalid"),
            (req(&[("env", "x")], &["env"], true), "invalid"),
        ] {
            let err = relabel(&cur, &bad).unwrap_err();
            assert_eq!(err.reason(), reason, "{bad:?}: {err}");
        }
    }

    #[test]
    fn merge_patch_sets_changes_and_nulls_removals() {
        let p = merge_patch(
            &labels(&[("a", "1"), ("b", "2")]),
            &labels(&[("b", "3"), ("c", "4")]),
            Some("7".into()),
        );
        assert_eq!(
            p,
            json!({"metadata": {"resourceVersion": "7", "labels": {"a": null, "b": "3", "c": "4"}}})
        );
    }
}
