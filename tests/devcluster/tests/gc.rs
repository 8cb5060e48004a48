//! Garbage collection end to end: Foreground and Orphan propagation through
//! kube-rs 5.0 and `kubectl delete --cascade=...` against a real
//! `fleetbus-devcluster` process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fleetbus_testsupport::{DevCluster, DevClusterOpts};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ListParams, PostParams, WatchEvent, WatchParams};
use kube::ResourceExt;
use serde_json::Value;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

/// The harness finds this crate's binary in the target dir (`cargo test`
/// builds it before integration tests run).
fn start(name: &str) -> DevCluster {
    DevCluster::start(DevClusterOpts::new(name)).expect("start devcluster")
}

fn named(name: &str) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    c
}

fn owned_by(name: &str, owner: &ConfigMap, block: bool) -> ConfigMap {
    let mut c = named(name);
    c.metadata.owner_references = Some(vec![OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.name_any(),
        uid: owner.uid().unwrap(),
        block_owner_deletion: Some(block),
        ..Default::default()
    }]);
    c
}

/// Creates `owner` with dependents `blocking` (blockOwnerDeletion) and `plain`.
async fn owner_with_two_dependents(api: &Api<ConfigMap>) -> ConfigMap {
    let pp = PostParams::default();
    let owner = api.create(&pp, &named("owner")).await.unwrap();
    api.create(&pp, &owned_by("blocking", &owner, true))
        .await
        .unwrap();
    api.create(&pp, &owned_by("plain", &owner, false))
        .await
        .unwrap();
    owner
}

#[tokio::test]
async fn foreground_deletes_dependents_before_the_owner() {
    let dc = start("gc-foreground");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    let owner = owner_with_two_dependents(&api).await;
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = api
        .watch(&WatchParams::default().timeout(20), &rv)
        .await
        .unwrap()
        .boxed();

    let answer = api
        .delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    // kube answers with the owner marked for deletion (the collector runs later);
    // here it may already be gone, but the answer is the marked object either way.
    let marked = answer.left().expect("foreground answers with the object");
    assert!(marked.metadata.deletion_timestamp.is_some());
    assert_eq!(
        marked.metadata.finalizers.as_deref(),
        Some(&["foregroundDeletion".to_string()][..])
    );
    assert_eq!(marked.uid(), owner.uid());

    let mut seen = Vec::new();
    let collect = async {
        while let Some(ev) = events.try_next().await.unwrap() {
            match ev {
                WatchEvent::Modified(c) => seen.push(format!("MODIFIED {}", c.name_any())),
                WatchEvent::Deleted(c) => {
                    seen.push(format!("DELETED {}", c.name_any()));
                    if c.name_any() == "owner" {
                        return;
                    }
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    };
    tokio::time::timeout(T, collect)
        .await
        .unwrap_or_else(|_| panic!("no DELETED for the owner; saw {seen:?}"));
    assert_eq!(seen.first().map(String::as_str), Some("MODIFIED owner"));
    let pos = |e: &str| seen.iter().position(|s| s == e).unwrap();
    assert!(pos("DELETED blocking") < pos("DELETED owner"), "{seen:?}");
    assert!(pos("DELETED plain") < pos("DELETED owner"), "{seen:?}");
    assert!(api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
}

#[tokio::test]
async fn orphan_keeps_dependents_without_the_owner_reference() {
    let dc = start("gc-orphan");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    owner_with_two_dependents(&api).await;
    api.delete("owner", &DeleteParams::orphan()).await.unwrap();
    assert!(api.get_opt("owner").await.unwrap().is_none());
    for name in ["blocking", "plain"] {
        let dep = api.get(name).await.unwrap();
        assert_eq!(dep.metadata.owner_references, None, "{name}");
    }
}

fn kubectl_ok(dc: &DevCluster, args: &[&str]) -> String {
    let out = dc.kubectl("1.33", args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        dc.log()
    );
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn kubectl_delete_cascade_foreground_and_orphan() {
    let dc = start("gc-kubectl");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    owner_with_two_dependents(&api).await;
    // kubectl runs as a child process; blocking this test's runtime meanwhile is harmless.
    let out = kubectl_ok(
        &dc,
        &["delete", "configmap", "owner", "--cascade=foreground"],
    );
    assert!(out.contains("configmap \"owner\" deleted"), "{out}");
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert!(left.is_empty(), "{left:?}");

    owner_with_two_dependents(&api).await;
    kubectl_ok(&dc, &["delete", "configmap", "owner", "--cascade=orphan"]);
    let list = kubectl_ok(&dc, &["get", "configmaps", "-o", "json"]);
    let list: Value = serde_json::from_str(&list).unwrap();
    let items = list["items"].as_array().unwrap();
    let names: Vec<&str> = items
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"blocking") && names.contains(&"plain"),
        "{names:?}"
    );
    assert!(!names.contains(&"owner"), "{names:?}");
    assert!(items
        .iter()
        .all(|i| i["metadata"].get("ownerReferences").is_none()));
}

#[tokio::test]
async fn foreground_owner_waits_for_a_blocking_dependent_with_a_finalizer() {
    let dc = start("gc-wait");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    let pp = PostParams::default();
    let owner = api.create(&pp, &named("owner")).await.unwrap();
    let mut held = owned_by("held", &owner, true);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&pp, &held).await.unwrap();
    api.delete("owner", &DeleteParams::foreground())
        .await
        .unwrap();
    let waiting = api.get("owner").await.unwrap();
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert_eq!(
        waiting.metadata.finalizers,
        Some(vec!["foregroundDeletion".to_string()])
    );
    assert!(api
        .get("held")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_some());
    // Releasing the dependent's finalizer lets both go.
    api.patch(
        "held",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(serde_json::json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("held").await.unwrap().is_none());
    assert!(api.get_opt("owner").await.unwrap().is_none());
}
