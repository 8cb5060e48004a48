//! `statusReturn: PerCluster` on the origin: one `ReportedState` per (source
//! object, sink cluster) holding what the sink reported, deleted when the
//! report goes (copy gone, cluster no member, source deleted).

use std::collections::BTreeMap;

use fleetbus_schemas::crd::reported_state_name;
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::well_known::{
    self, LABEL_MANAGED, LABEL_MANAGED_VALUE, LABEL_REPORTED_CLUSTER, LABEL_REPORTED_KIND,
};
use kube::api::{DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use serde_json::{json, Value};

use super::source::source_object;
use super::state::{resource_version, StatusBook, Written};
use crate::context::Context;
use crate::kube::FIELD_MANAGER;
use crate::sync::model::LocalKey;
use crate::sync::rules::compile::reported_state_gvk;
use crate::sync::world::World;

/// The ReportedState for one report about `source` (the live source object).
pub fn desired_state(r: &ReportedStatus, source: &Value, default_ns: &str) -> (LocalKey, Value) {
    let ns = r
        .source
        .namespace
        .clone()
        .unwrap_or_else(|| default_ns.to_owned());
    let name = reported_state_name(&r.source, &r.cluster);
    let mut labels = json!({
        LABEL_REPORTED_CLUSTER: r.cluster,
        LABEL_MANAGED: LABEL_MANAGED_VALUE,
    });
    if fleetbus_schemas::k8s_names::is_label_value(&r.source.kind) {
        labels[LABEL_REPORTED_KIND] = json!(r.source.kind);
    }
    let mut metadata = json!({"name": name, "namespace": ns, "labels": labels});
    let uid = source.pointer("/metadata/uid").and_then(Value::as_str);
    if let Some(uid) = uid {
        // Kubernetes' garbage collector removes it with its source.
        metadata["ownerReferences"] = json!([{
            "apiVersion": r.source.api_version, "kind": r.source.kind,
            "name": r.source.name, "uid": uid,
        }]);
    }
    let mut object_ref = r.source.clone();
    object_ref.uid = uid.map(str::to_owned);
    let observed_at = r
        .observed_at
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let obj = json!({
        "apiVersion": well_known::API_VERSION,
        "kind": "ReportedState",
        "metadata": metadata,
        "spec": {"objectRef": object_ref, "cluster": r.cluster, "rule": r.rule},
        "status": {
            "status": r.status,
            "ready": r.ready,
            "health": r.health,
            "observedAt": observed_at,
            "copyNamespace": r.copy_namespace,
            "copyName": r.copy_name,
        },
    });
    ((Some(ns), name), strip_nulls(obj))
}

/// Without null members (the API server drops them; comparing must too).
fn strip_nulls(mut v: Value) -> Value {
    if let Some(status) = v.get_mut("status").and_then(Value::as_object_mut) {
        status.retain(|_, v| !v.is_null());
    }
    v
}

/// What of a ReportedState the origin decides: labels, owners, spec, status.
fn decided(v: &Value) -> Value {
    json!({
        "labels": v.pointer("/metadata/labels"),
        "ownerReferences": v.pointer("/metadata/ownerReferences"),
        "spec": v.get("spec"),
        "status": v.get("status"),
    })
}

fn is_ours(v: &Value) -> bool {
    v.pointer("/metadata/labels")
        .and_then(|l| l.get(LABEL_REPORTED_CLUSTER))
        .is_some()
}

/// Makes the ReportedStates equal to `reports` (those of PerCluster rules).
pub(super) async fn per_cluster_pass(
    world: &World,
    book: &mut StatusBook,
    ctx: &Context,
    reports: &[ReportedStatus],
) {
    let gvk = reported_state_gvk();
    let Some(kind) = world.kinds.get(&gvk).filter(|k| k.listed) else {
        return;
    };
    let mut desired: BTreeMap<LocalKey, Value> = BTreeMap::new();
    for r in reports {
        if let Some(source) = source_object(world, r) {
            let (key, obj) = desired_state(r, &source, &ctx.cfg.namespace);
            desired.insert(key, obj);
        }
    }
    // Only what is still wanted needs remembering: the rest would leak.
    book.written.retain(|k, _| desired.contains_key(k));
    let stale: Vec<Value> = kind
        .objects
        .iter()
        .filter(|(k, v)| is_ours(v) && !desired.contains_key(*k) && !source_unread(world, v))
        .map(|(_, v)| v.clone())
        .collect();
    let mut writes: Vec<(LocalKey, Value, Option<Value>)> = Vec::new();
    for (key, want) in desired {
        let live = kind.objects.get(&key);
        if live.as_ref().is_some_and(|l| decided(l) == decided(&want)) {
            continue;
        }
        // Written already; its watch event has not come back yet.
        if book
            .written
            .get(&key)
            .is_some_and(|w| w.pending(&want, live.as_ref()))
        {
            continue;
        }
        writes.push((key, want, live));
    }
    let ar = kind.ar.clone();
    for obj in stale {
        let ns = obj.pointer("/metadata/namespace").and_then(Value::as_str);
        let api = crate::sync::sink::apply::api(&ctx.client, &ar, ns);
        if crate::sync::sink::apply::delete(ctx, &api, &obj)
            .await
            .is_ok()
        {
            if let Some(key) = crate::sync::model::meta::local_key(&obj) {
                book.written.remove(&key);
            }
        }
    }
    for (key, want, live) in writes {
        match write_state(ctx, &ar, &key, &want, live.as_ref()).await {
            Ok(()) => {
                let live_rv = resource_version(live.as_ref());
                book.written.insert(key, Written { want, live_rv });
            }
            Err(e) => {
                tracing::warn!(namespace = ?key.0, name = %key.1, error = %e, "could not write a ReportedState");
            }
        }
    }
}

/// Whether the source kind of a ReportedState is still being read (at
/// start, or a rule's kind just started): its source may exist, so the
/// state is not stale yet.
fn source_unread(world: &World, state: &Value) -> bool {
    let text = |p: &str| state.pointer(p).and_then(Value::as_str).unwrap_or_default();
    let (group, version) =
        fleetbus_schemas::subject::split_api_version(text("/spec/objectRef/apiVersion"));
    let gvk = GroupVersionKind::gvk(group, version, text("/spec/objectRef/kind"));
    world
        .rules
        .values()
        .any(|r| r.source == gvk && r.problem.is_none() && !world.rule_ready(r))
}

/// Creates or replaces one ReportedState, then its status.
async fn write_state(
    ctx: &Context,
    ar: &kube::api::ApiResource,
    key: &LocalKey,
    want: &Value,
    live: Option<&Value>,
) -> Result<(), kube::Error> {
    let api = crate::sync::sink::apply::api(&ctx.client, ar, key.0.as_deref());
    let params = PostParams {
        dry_run: false,
        field_manager: Some(FIELD_MANAGER.to_owned()),
    };
    let body = |v: &Value| -> Result<DynamicObject, kube::Error> {
        serde_json::from_value(v.clone()).map_err(kube::Error::SerdeError)
    };
    let name = crate::kube::path::segment(&key.1);
    let mut main = want.clone();
    let written = match live {
        None => api.create(&params, &body(&main)?).await?,
        Some(l)
            if decided(l)["labels"] == decided(want)["labels"]
                && decided(l)["ownerReferences"] == decided(want)["ownerReferences"]
                && l.get("spec") == want.get("spec") =>
        {
            body(l)?
        }
        Some(l) => {
            if let Some(rv) = l.pointer("/metadata/resourceVersion") {
                main["metadata"]["resourceVersion"] = rv.clone();
            }
            api.replace(&name, &params, &body(&main)?).await?
        }
    };
    ctx.metrics.sync_kube_write("reportedstate");
    let mut with_status = serde_json::to_value(&written).map_err(kube::Error::SerdeError)?;
    with_status["status"] = want.get("status").cloned().unwrap_or(Value::Null);
    // `written` may be the stored live object, whose managedFields are a
    // summary (see `meta::compact_managed_fields`): omitted, the server
    // keeps its own.
    if let Some(meta) = with_status
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
    api.replace_status(&name, &params, &body(&with_status)?)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::ObjectRef;

    fn report(ns: Option<&str>) -> ReportedStatus {
        ReportedStatus {
            cluster: "west".into(),
            rule: "r".into(),
            origin: "east".into(),
            source: ObjectRef::new("example.com/v1", "Widget", ns, "w"),
            copy_name: "w".into(),
            copy_namespace: ns.map(str::to_owned),
            copy_resource_version: "1".into(),
            observed_at: chrono::Utc::now(),
            status: json!({"phase": "Up"}),
            ready: Some(false),
            health: None,
            source_hash: None,
            unfit: None,
        }
    }

    #[test]
    fn one_state_per_object_and_cluster_owned_by_the_source() {
        let source = json!({"metadata": {"uid": "u-1"}});
        let ((ns, name), obj) = desired_state(&report(Some("a")), &source, "fleetbus-system");
        assert_eq!(ns.as_deref(), Some("a"));
        assert!(name.starts_with("widget.w.west."), "{name}");
        assert_eq!(obj["metadata"]["labels"][LABEL_REPORTED_CLUSTER], "west");
        assert_eq!(obj["metadata"]["labels"][LABEL_REPORTED_KIND], "Widget");
        assert_eq!(obj["metadata"]["ownerReferences"][0]["uid"], "u-1");
        assert_eq!(obj["spec"]["objectRef"]["uid"], "u-1");
        assert_eq!(obj["status"]["status"], json!({"phase": "Up"}));
        assert_eq!(obj["status"]["ready"], json!(false));
        // Cluster-scoped sources: the agent's namespace.
        let ((ns, _), obj) = desired_state(&report(None), &source, "fleetbus-system");
        assert_eq!(ns.as_deref(), Some("fleetbus-system"));
        assert!(
            obj["status"].get("copyNamespace").is_none(),
            "nulls dropped"
        );
    }

    #[test]
    fn a_write_is_pending_only_until_the_live_object_changes() {
        let live =
            |rv: &str| json!({"metadata": {"resourceVersion": rv}, "status": {"ready": false}});
        let want = json!({"status": {"ready": true}});
        let w = Written {
            want: want.clone(),
            live_rv: resource_version(Some(&live("5"))),
        };
        // The watch still shows the object as it was before the write.
        assert!(w.pending(&want, Some(&live("5"))));
        // A newer object (ours came back, or someone edited it) is compared, not trusted.
        assert!(!w.pending(&want, Some(&live("6"))));
        // Deleted by someone else: written again.
        assert!(!w.pending(&want, None));
        // Something else is wanted now.
        assert!(!w.pending(&json!({"status": {"ready": false}}), Some(&live("5"))));
    }
}
