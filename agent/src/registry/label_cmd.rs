//! `<p>.cmd.<self>.label`: relabelling this cluster from anywhere on the bus
//! (`fleetbus clusters label`). The Local Cluster object stays the one owner
//! of the cluster's labels: the request is applied to it (like `kubectl
//! label`), and the record follows from it as after a kubectl edit. Refused
//! requests (malformed, invalid labels, a changed value without `overwrite`,
//! a name claimed by two clusters, or over the verb's rate limit) change nothing, get a
//! reply with `error`, and are counted (`fleetbus_commands_rejected_total{verb="label"}`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleetbus_schemas::command::{LabelReply, LabelRequest};
use fleetbus_schemas::crd::Cluster;
use fleetbus_schemas::registry::validate_labels;
use fleetbus_schemas::subject::CommandKey;
use fleetbus_schemas::well_known::condition;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::error::RegistryError;
use super::shared::Registry;
use crate::bus::command::{serve, Common, Refused, Signed, Verb};

/// How many times a patch is tried in all: a patch that lost a race with
/// another writer (409 on the resourceVersion) is re-read and tried again.
const PATCH_ATTEMPTS: usize = 3;

/// How long one request may take, Kubernetes calls included: below the CLI's
/// default `--timeout` (10 s), so a slow API server gives the caller a refusal
/// saying so rather than "no reply".
const HANDLE_TIMEOUT: Duration = Duration::from_secs(8);

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
    /// Another cluster claims the same name: a request on `<p>.cmd.<name>.label`
    /// reaches both agents, so neither relabels until the names are unique.
    #[error("cluster name {0:?} is claimed by more than one cluster (NameConflict); rename one before relabelling")]
    NameConflict(String),
    /// Reading or patching the Local Cluster object failed.
    #[error("failed to {action} the Local Cluster object")]
    Kube {
        /// What was attempted.
        action: &'static str,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The Kubernetes API did not answer in time.
    #[error("the Kubernetes API did not answer within {}", humantime::format_duration(*.0))]
    TimedOut(Duration),
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
            LabelError::NameConflict(_) => "name_conflict",
            LabelError::Kube { .. } | LabelError::TimedOut(_) => "kube",
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

/// Answers label requests until `cancel`, through the agent's one request
/// server (`bus::command`: rate, the fleet root's signature, resubscribing).
#[tracing::instrument(name = "label_cmd", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    let ctx = &reg.ctx;
    let verb = Verb {
        name: "label",
        subject: CommandKey::label(&ctx.cfg.cluster_name).to_subject(ctx.layout.prefix()),
        signed: Signed::Required,
        rate: ctx.cfg.command_rate,
    };
    let common = Common {
        metrics: &ctx.metrics,
        trust: ctx.cfg.trust.as_deref(),
    };
    let cluster = ctx.cfg.cluster_name.clone();
    let refuse = |refused: Refused| {
        let (error, retry_after_ms) = match refused {
            Refused::Rate {
                why,
                retry_after_ms,
            } => (why, Some(retry_after_ms)),
            Refused::Unauthorized(why) => (why, None),
        };
        let reply = LabelReply {
            cluster: cluster.clone(),
            labels: None,
            error: Some(error),
            retry_after_ms,
        };
        reply.encode().map_err(|e| e.to_string())
    };
    let handle = |payload: bytes::Bytes| {
        let reg = reg.clone();
        async move {
            let reply = handle(&reg, &payload).await;
            reply.encode().map_err(|e| e.to_string())
        }
    };
    serve(&ctx.js.client(), common, &verb, handle, refuse, &cancel).await;
    Ok(())
}

/// Applies one request; the reply says what the labels are now, or why not
/// (with the labels read on the way, if any: a refusal costs no extra read).
async fn handle(reg: &Registry, payload: &[u8]) -> LabelReply {
    let cluster = reg.ctx.cfg.cluster_name.clone();
    let api = Api::<Cluster>::all(reg.ctx.client.clone());
    let mut seen = None;
    let result =
        match tokio::time::timeout(HANDLE_TIMEOUT, apply(reg, &api, payload, &mut seen)).await {
            Ok(result) => result,
            Err(_) => Err(LabelError::TimedOut(HANDLE_TIMEOUT)),
        };
    match result {
        Ok(labels) => {
            // The record follows from the object's watch event, as after a
            // kubectl edit. Setting the published labels here too would race
            // with a reconciler pass over a cache that has not seen the patch
            // yet, and publish old, new, old, new labels.
            tracing::info!(?labels, "relabelled on request");
            LabelReply {
                cluster,
                labels: Some(labels),
                error: None,
                retry_after_ms: None,
            }
        }
        Err(e) => {
            let error = crate::report(&e);
            tracing::warn!(%error, "label command refused");
            reg.ctx.metrics.command_rejected("label", e.reason());
            LabelReply {
                cluster,
                labels: seen,
                error: Some(error),
                retry_after_ms: None,
            }
        }
    }
}

/// Reads the request, patches the Local Cluster object, returns its labels.
/// `seen` keeps the labels last read, for the reply to a refusal.
async fn apply(
    reg: &Registry,
    api: &Api<Cluster>,
    payload: &[u8],
    seen: &mut Option<BTreeMap<String, String>>,
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
        *seen = Some(current.clone());
        if has_name_conflict(&ours) {
            return Err(LabelError::NameConflict(name.clone()));
        }
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
            Err(kube::Error::Api(s)) if s.code == 409 && attempt < PATCH_ATTEMPTS => continue,
            Err(source) => {
                return Err(LabelError::Kube {
                    action: "patch",
                    source,
                })
            }
        }
    }
}

/// Whether the Local Cluster object reports that another cluster claims its
/// name (the registry sets condition NameConflict=True then).
fn has_name_conflict(c: &Cluster) -> bool {
    c.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == condition::NAME_CONFLICT && c.status == "True")
    })
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
    fn a_changed_value_without_overwrite_names_the_label() {
        let cur = labels(&[("env", "dev")]);
        let err = relabel(&cur, &req(&[("env", "prod")], &[], false)).unwrap_err();
        assert_eq!(err.reason(), "exists");
        assert!(
            matches!(&err, LabelError::Exists { key, current } if key == "env" && current == "dev"),
            "{err:?}"
        );
        assert!(err.to_string().contains("overwrite"), "{err}");
    }

    #[test]
    fn more_labels_than_a_record_may_carry_are_refused() {
        let max = fleetbus_schemas::registry::MAX_LABELS;
        let cur: BTreeMap<String, String> =
            (0..max).map(|i| (format!("k{i}"), "v".into())).collect();
        // Adding one over the limit is refused; replacing one is not.
        let err = relabel(&cur, &req(&[("one-more", "v")], &[], false)).unwrap_err();
        assert_eq!(err.reason(), "invalid", "{err}");
        let next = relabel(&cur, &req(&[("one-more", "v")], &["k0"], false)).unwrap();
        assert_eq!(next.len(), max);
    }

    #[test]
    fn a_name_conflict_condition_blocks_relabelling() {
        let mut c = Cluster::new("west", Default::default());
        assert!(!has_name_conflict(&c));
        let cond = |status: &str| k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
            type_: condition::NAME_CONFLICT.to_owned(),
            status: status.to_owned(),
            reason: "DuplicateName".to_owned(),
            message: String::new(),
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Default::default(),
            ),
            observed_generation: None,
        };
        c.status = Some(Default::default());
        c.status.as_mut().unwrap().conditions = vec![cond("False")];
        assert!(!has_name_conflict(&c));
        c.status.as_mut().unwrap().conditions = vec![cond("True")];
        assert!(has_name_conflict(&c));
        assert_eq!(
            LabelError::NameConflict("west".into()).reason(),
            "name_conflict"
        );
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
