//! The objects the scenarios write: 1 KiB ConfigMaps marked with a version.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;
use std::collections::BTreeMap;

use crate::recorder::MARK;

/// The namespace every scenario writes its objects to.
pub const NS: &str = "bench";

/// A ConfigMap of about 1 KiB (as JSON) whose `data.v` is `mark`.
pub fn configmap(name: &str, mark: &str) -> ConfigMap {
    configmap_in(NS, name, mark)
}

/// [`configmap`] in namespace `ns`.
pub fn configmap_in(ns: &str, name: &str, mark: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            labels: Some(BTreeMap::from([("app".into(), "bench".into())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([
            (MARK.into(), mark.into()),
            ("pad".into(), "x".repeat(900)),
        ])),
        ..Default::default()
    }
}

/// Creates `name` with `mark` on `api`; returns when the API server acknowledged it.
pub async fn create(api: &Api<ConfigMap>, name: &str, mark: &str) -> anyhow::Result<()> {
    let ns = api.namespace().unwrap_or(NS);
    api.create(&PostParams::default(), &configmap_in(ns, name, mark))
        .await
        .map_err(|e| anyhow::anyhow!("create configmap {name}: {e}"))?;
    Ok(())
}

/// Sets `data.v` of `name` to `mark` with a merge patch (what `kubectl patch` sends).
pub async fn set_mark(api: &Api<ConfigMap>, name: &str, mark: &str) -> anyhow::Result<()> {
    let patch = serde_json::json!({"data": {MARK: mark}});
    api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|e| anyhow::anyhow!("patch configmap {name}: {e}"))?;
    Ok(())
}
