//! End-to-end tests: kube-rs 5.0 against a real `fleetbus-devcluster` process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fleetbus_testsupport::{wait_for, DevCluster, DevClusterOpts};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Discovery;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, Error};
use serde_json::json;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(20);

/// The harness finds this crate's binary in the target dir (`cargo test`
/// builds it before integration tests run).
fn start(name: &str) -> DevCluster {
    DevCluster::start(DevClusterOpts::new(name)).expect("start devcluster")
}

fn start_with(opts: DevClusterOpts) -> DevCluster {
    DevCluster::start(opts).expect("start devcluster")
}

fn cm(name: &str, labels: &[(&str, &str)], data: &[(&str, &str)]) -> ConfigMap {
    let mut c = ConfigMap::default();
    c.metadata.name = Some(name.into());
    if !labels.is_empty() {
        c.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
    }
    c.data = Some(
        data.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect::<BTreeMap<_, _>>(),
    );
    c
}

fn api_status(e: Error) -> Box<kube::core::Status> {
    match e {
        Error::Api(s) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// Forwards a kube-runtime watcher stream into a channel (the task ends with the test).
fn spawn_watcher(
    api: Api<ConfigMap>,
    cfg: watcher::Config,
) -> mpsc::UnboundedReceiver<Result<watcher::Event<ConfigMap>, String>> {
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut s = watcher(api, cfg).default_backoff().boxed();
        while let Some(ev) = s.next().await {
            if tx.send(ev.map_err(|e| e.to_string())).is_err() {
                return;
            }
        }
    });
    rx
}

async fn next_event<T>(rx: &mut mpsc::UnboundedReceiver<T>, what: &str) -> T {
    tokio::time::timeout(T, rx.recv())
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
        .expect("watcher ended")
}

fn name_of(c: &ConfigMap) -> String {
    c.metadata.name.clone().unwrap_or_default()
}

#[tokio::test]
async fn watcher_sees_added_modified_deleted_in_order() {
    let dc = start("watch-order");
    let client = dc.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut rx = spawn_watcher(api.clone(), watcher::Config::default().labels("t=order"));
    // Initial list: empty, then InitDone.
    loop {
        match next_event(&mut rx, "InitDone").await.unwrap() {
            watcher::Event::InitDone => break,
            watcher::Event::Init => {}
            other => panic!("unexpected initial event {other:?}"),
        }
    }
    api.create(
        &PostParams::default(),
        &cm("w1", &[("t", "order")], &[("a", "1")]),
    )
    .await
    .unwrap();
    api.patch(
        "w1",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "2"}})),
    )
    .await
    .unwrap();
    api.delete("w1", &DeleteParams::default()).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 3 {
        match next_event(&mut rx, "events").await.unwrap() {
            watcher::Event::Apply(c) => seen.push((
                "apply",
                name_of(&c),
                c.data.unwrap_or_default().get("a").cloned(),
            )),
            watcher::Event::Delete(c) => seen.push(("delete", name_of(&c), None)),
            other => panic!("unexpected event {other:?}"),
        }
    }
    assert_eq!(
        seen,
        vec![
            ("apply", "w1".to_string(), Some("1".to_string())),
            ("apply", "w1".to_string(), Some("2".to_string())),
            ("delete", "w1".to_string(), None),
        ]
    );
}

#[tokio::test]
async fn watch_resumes_from_a_resource_version() {
    let dc = start("watch-resume");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    let a = api
        .create(&PostParams::default(), &cm("a", &[], &[]))
        .await
        .unwrap();
    api.create(&PostParams::default(), &cm("b", &[], &[]))
        .await
        .unwrap();
    let rv = a.metadata.resource_version.unwrap();
    let mut s = api
        .watch(&WatchParams::default().timeout(10), &rv)
        .await
        .unwrap()
        .boxed();
    match tokio::time::timeout(T, s.try_next())
        .await
        .unwrap()
        .unwrap()
    {
        Some(WatchEvent::Added(c)) => {
            assert_eq!(name_of(&c), "b", "only changes after {rv} are replayed")
        }
        other => panic!("expected ADDED b, got {other:?}"),
    }
    // From "0": synthetic ADDED for the current objects.
    let mut s = api
        .watch(&WatchParams::default().timeout(10), "0")
        .await
        .unwrap()
        .boxed();
    let mut names = Vec::new();
    while names.len() < 2 {
        match tokio::time::timeout(T, s.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(WatchEvent::Added(c)) => names.push(name_of(&c)),
            other => panic!("expected ADDED, got {other:?}"),
        }
    }
    names.sort();
    assert_eq!(names, vec!["a", "b"]);
}

#[tokio::test]
async fn expired_resource_version_gives_410_and_watcher_recovers() {
    let mut dc = start("watch-410");
    let client = dc.client().await.unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let old = api
        .create(&PostParams::default(), &cm("old", &[], &[]))
        .await
        .unwrap();
    let old_rv = old.metadata.resource_version.unwrap();
    let mut rx = spawn_watcher(api.clone(), watcher::Config::default().labels("t=410"));
    loop {
        if let watcher::Event::InitDone = next_event(&mut rx, "InitDone").await.unwrap() {
            break;
        }
    }
    // Changes the watcher does not select move the store past its resourceVersion...
    for i in 0..3 {
        api.create(&PostParams::default(), &cm(&format!("noise-{i}"), &[], &[]))
            .await
            .unwrap();
    }
    // ...and a restart drops the event history, so its resume point is now too old.
    dc.restart().unwrap();
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    let err = api
        .watch(&WatchParams::default().timeout(5), &old_rv)
        .await
        .unwrap()
        .boxed()
        .try_next()
        .await;
    match err {
        Ok(Some(WatchEvent::Error(s))) => {
            assert_eq!(s.code, 410);
            assert_eq!(s.reason, "Expired");
        }
        other => panic!("expected an ERROR 410 event, got {other:?}"),
    }
    api.create(&PostParams::default(), &cm("after", &[("t", "410")], &[]))
        .await
        .unwrap();
    let mut saw_error = false;
    loop {
        match next_event(&mut rx, "the watcher to relist and see `after`").await {
            Err(_) => saw_error = true,
            Ok(watcher::Event::Apply(c) | watcher::Event::InitApply(c))
                if name_of(&c) == "after" =>
            {
                break
            }
            Ok(_) => {}
        }
    }
    assert!(
        saw_error,
        "the watcher should have reported the expired watch (or the restart)"
    );
}

#[tokio::test]
async fn stale_update_conflicts_and_errors_have_reasons() {
    let dc = start("errors");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    assert!(
        api.get_opt("missing").await.unwrap().is_none(),
        "404 must carry reason NotFound"
    );
    let created = api
        .create(&PostParams::default(), &cm("c", &[], &[("a", "1")]))
        .await
        .unwrap();
    let dup = api_status(
        api.create(&PostParams::default(), &cm("c", &[], &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((dup.code, dup.reason.as_str()), (409, "AlreadyExists"));
    let mut stale = created.clone();
    api.patch(
        "c",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "2"}})),
    )
    .await
    .unwrap();
    stale.data = Some(BTreeMap::from([("a".to_string(), "3".to_string())]));
    let conflict = api_status(
        api.replace("c", &PostParams::default(), &stale)
            .await
            .unwrap_err(),
    );
    assert_eq!((conflict.code, conflict.reason.as_str()), (409, "Conflict"));
    assert!(
        conflict.message.contains("the object has been modified"),
        "{}",
        conflict.message
    );
    // Without a resourceVersion the update is unconditional.
    stale.metadata.resource_version = None;
    let replaced = api
        .replace("c", &PostParams::default(), &stale)
        .await
        .unwrap();
    assert_eq!(replaced.data.unwrap()["a"], "3");
    let bad_name = api_status(
        api.create(&PostParams::default(), &cm("Bad_Name", &[], &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((bad_name.code, bad_name.reason.as_str()), (422, "Invalid"));
    let missing_ns: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "nope");
    let e = api_status(
        missing_ns
            .create(&PostParams::default(), &cm("x", &[], &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    assert_eq!(e.message, "namespaces \"nope\" not found");
}

#[tokio::test]
async fn finalizer_blocks_deletion_until_removed() {
    let dc = start("finalizers");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    let mut c = cm("f", &[("t", "fin")], &[]);
    c.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &c).await.unwrap();
    let mut rx = spawn_watcher(api.clone(), watcher::Config::default().labels("t=fin"));
    let out = api.delete("f", &DeleteParams::default()).await.unwrap();
    let pending = out
        .left()
        .expect("a delete blocked by finalizers returns the object");
    assert!(pending.metadata.deletion_timestamp.is_some());
    let still = api.get("f").await.unwrap();
    assert!(still.metadata.deletion_timestamp.is_some());
    api.patch(
        "f",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    assert!(api.get_opt("f").await.unwrap().is_none());
    loop {
        if let watcher::Event::Delete(c) = next_event(&mut rx, "DELETED f").await.unwrap() {
            assert_eq!(name_of(&c), "f");
            break;
        }
    }
}

fn widget_crd() -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "shortNames": ["wd"]},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
            }]
        }
    }))
    .unwrap()
}

#[tokio::test]
async fn crd_created_at_runtime_is_served() {
    let dc = start("crd");
    let client = dc.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    wait_for("CRD Established", T, || {
        let crds = crds.clone();
        async move {
            let c = crds
                .get("widgets.example.com")
                .await
                .map_err(|e| e.to_string())?;
            let established = c
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True");
            if established {
                Ok(())
            } else {
                Err("not established".into())
            }
        }
    })
    .await;
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let (ar, caps) = discovery.resolve_gvk(&gvk).expect("widgets in discovery");
    assert_eq!(ar.plural, "widgets");
    assert!(
        caps.subresources
            .iter()
            .any(|(s, _)| s.plural == "widgets/status" || s.plural == "status"),
        "{:?}",
        caps.subresources
    );
    let agg = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    assert!(
        agg.resolve_gvk(&gvk).is_some(),
        "aggregated discovery lists the CRD"
    );
    let (pinned, _) = kube::discovery::pinned_kind(&client, &gvk).await.unwrap();
    assert_eq!(pinned.plural, "widgets");

    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let mut w = DynamicObject::new("w1", &ar);
    w.data = json!({"spec": {"size": 3}, "status": {"ignored": true}});
    let created = api.create(&PostParams::default(), &w).await.unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    assert!(
        created.data.get("status").is_none(),
        "status is dropped on create when /status exists"
    );
    let st = api
        .patch_status(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Ready"}, "spec": {"size": 9}})),
        )
        .await
        .unwrap();
    assert_eq!(st.data["status"]["phase"], "Ready");
    assert_eq!(
        st.data["spec"]["size"], 3,
        "a /status write changes only status"
    );
    assert_eq!(
        st.metadata.generation,
        Some(1),
        "status writes do not bump generation"
    );
    let sp = api
        .patch(
            "w1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"size": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(sp.metadata.generation, Some(2));
    assert_eq!(
        api.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );

    crds.delete("widgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("widgets to disappear", T, || {
        let api = api.clone();
        async move {
            match api.list(&ListParams::default()).await {
                Err(Error::Api(s)) if s.code == 404 => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
}

#[tokio::test]
async fn state_survives_kill9_and_kube_system_uid_is_stable() {
    let mut dc = start("persist");
    let client = dc.client().await.unwrap();
    let ns: Api<Namespace> = Api::all(client.clone());
    let uid = ns.get("kube-system").await.unwrap().metadata.uid.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &widget_crd())
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    widgets
        .create(&PostParams::default(), &DynamicObject::new("w", &ar))
        .await
        .unwrap();
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let created = api
        .create(&PostParams::default(), &cm("keep", &[], &[("k", "v")]))
        .await
        .unwrap();
    dc.kill9();
    dc.restart().unwrap();
    let client = dc.client().await.unwrap();
    // The CRD registry is rebuilt from the stored CRDs.
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    assert_eq!(
        widgets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        1
    );
    let ns: Api<Namespace> = Api::all(client.clone());
    assert_eq!(
        ns.get("kube-system").await.unwrap().metadata.uid.unwrap(),
        uid
    );
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    let got = api.get("keep").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    assert_eq!(got.data.unwrap()["k"], "v");
    // resourceVersions keep increasing across restarts.
    let next = api
        .create(&PostParams::default(), &cm("next", &[], &[]))
        .await
        .unwrap();
    let rv = |c: &ConfigMap| {
        c.metadata
            .resource_version
            .clone()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&next) > rv(&created));
    // Another cluster gets a different kube-system UID.
    let other = start("persist-other");
    let other_ns: Api<Namespace> = Api::all(other.client().await.unwrap());
    assert_ne!(
        other_ns
            .get("kube-system")
            .await
            .unwrap()
            .metadata
            .uid
            .unwrap(),
        uid
    );
}

#[tokio::test]
async fn set_based_label_selectors_and_paging() {
    let dc = start("select");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    for (n, env) in [
        ("p1", "a"),
        ("p2", "b"),
        ("p3", "c"),
        ("p4", "a"),
        ("p5", "b"),
    ] {
        api.create(
            &PostParams::default(),
            &cm(n, &[("env", env), ("group", "sel")], &[]),
        )
        .await
        .unwrap();
    }
    let mut skip = cm(
        "p6",
        &[("env", "a"), ("group", "sel"), ("skip", "yes")],
        &[],
    );
    skip.metadata.name = Some("p6".into());
    api.create(&PostParams::default(), &skip).await.unwrap();
    let names = |l: Vec<ConfigMap>| l.iter().map(name_of).collect::<Vec<_>>();
    let l = api
        .list(&ListParams::default().labels("env in (a,b),!skip"))
        .await
        .unwrap();
    assert_eq!(names(l.items), vec!["p1", "p2", "p4", "p5"]);
    let l = api
        .list(&ListParams::default().labels("env notin (a),group=sel"))
        .await
        .unwrap();
    assert_eq!(names(l.items), vec!["p2", "p3", "p5"]);
    let l = api
        .list(&ListParams::default().fields("metadata.name=p3"))
        .await
        .unwrap();
    assert_eq!(names(l.items), vec!["p3"]);
    let e = api_status(
        api.list(&ListParams::default().fields("spec.nope=1"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));

    let mut all = Vec::new();
    let mut lp = ListParams::default().labels("group=sel").limit(2);
    let mut pages = 0;
    loop {
        let page = api.list(&lp).await.unwrap();
        pages += 1;
        assert!(page.metadata.resource_version.is_some());
        all.extend(names(page.items));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(all, vec!["p1", "p2", "p3", "p4", "p5", "p6"]);
    // deletecollection honours the selector.
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels("env=a"),
    )
    .await
    .unwrap();
    let left = api
        .list(&ListParams::default().labels("group=sel"))
        .await
        .unwrap();
    assert_eq!(names(left.items), vec!["p2", "p3", "p5"]);
}

#[tokio::test]
async fn deleting_a_namespace_removes_its_contents() {
    let dc = start("nsdel");
    let client = dc.client().await.unwrap();
    let nss: Api<Namespace> = Api::all(client.clone());
    let mut ns = Namespace::default();
    ns.metadata.name = Some("doomed".into());
    let created = nss.create(&PostParams::default(), &ns).await.unwrap();
    assert_eq!(
        created.status.and_then(|s| s.phase).as_deref(),
        Some("Active")
    );
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    api.create(&PostParams::default(), &cm("plain", &[], &[]))
        .await
        .unwrap();
    let mut held = cm("held", &[], &[]);
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    let out = nss
        .delete("doomed", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = out.left().expect("namespace delete returns the namespace");
    assert_eq!(
        terminating.status.and_then(|s| s.phase).as_deref(),
        Some("Terminating")
    );
    // The finalizer keeps the namespace Terminating; creating content is forbidden.
    assert!(api.get_opt("plain").await.unwrap().is_none());
    assert!(api
        .get("held")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_some());
    let e = api_status(
        api.create(&PostParams::default(), &cm("new", &[], &[]))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (403, "Forbidden"));
    assert!(nss.get_opt("doomed").await.unwrap().is_some());
    api.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await
    .unwrap();
    wait_for("namespace removal", T, || {
        let nss = nss.clone();
        async move {
            match nss.get_opt("doomed").await {
                Ok(None) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    let e = api_status(
        nss.delete("kube-system", &DeleteParams::default())
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 403);
}

#[tokio::test]
async fn bad_bodies_are_rejected_and_the_server_keeps_serving() {
    let dc = start("badinput");
    let client = dc.client().await.unwrap();
    let post = |body: Vec<u8>| {
        http::Request::post("/api/v1/namespaces/default/configmaps")
            .header("content-type", "application/json")
            .body(body)
            .unwrap()
    };
    let e = api_status(
        client
            .request_text(post(b"{not json".to_vec()))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    let big = format!("{{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{{\"name\":\"big\"}},\"data\":{{\"x\":\"{}\"}}}}", "a".repeat(3 * 1024 * 1024 + 10));
    let e = api_status(
        client
            .request_text(post(big.into_bytes()))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (413, "RequestEntityTooLarge"));
    let wrong_kind =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"}}).to_string();
    let e = api_status(
        client
            .request_text(post(wrong_kind.into_bytes()))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    // fieldValidation=Strict rejects unknown fields; the default (Warn) drops them.
    let typo = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "typo"}, "dota": {"a": "b"}}).to_string();
    let strict =
        http::Request::post("/api/v1/namespaces/default/configmaps?fieldValidation=Strict")
            .header("content-type", "application/json")
            .body(typo.clone().into_bytes())
            .unwrap();
    let e = api_status(client.request_text(strict).await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert!(
        e.message
            .contains(r#"strict decoding error: unknown field "dota""#),
        "{}",
        e.message
    );
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    assert!(api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .is_empty());
    let warned: serde_json::Value = client.request(post(typo.into_bytes())).await.unwrap();
    assert!(
        warned.get("dota").is_none(),
        "unknown fields are not stored: {warned}"
    );
    api.delete("typo", &DeleteParams::default()).await.unwrap();
    api.create(&PostParams::default(), &cm("ok", &[], &[]))
        .await
        .unwrap();
}

#[tokio::test]
async fn token_auth_and_minted_tokens() {
    let dc = start_with(DevClusterOpts {
        token: Some("s3cret".into()),
        ..DevClusterOpts::new("auth")
    });
    let client = dc.client().await.unwrap();
    let ns: Api<Namespace> = Api::all(client.clone());
    ns.get("default").await.unwrap();
    let with_token = |token: &str| {
        let yaml = format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: '{}'}}}}]\nusers: [{{name: u, user: {{token: '{token}'}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n",
            dc.url()
        );
        async move {
            let kc = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
            let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .unwrap();
            Client::try_from(cfg).unwrap()
        }
    };
    let bad: Api<Namespace> = Api::all(with_token("wrong").await);
    let e = api_status(bad.get("default").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (401, "Unauthorized"));
    let req = http::Request::post("/api/v1/namespaces/default/serviceaccounts/default/token")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})).unwrap())
        .unwrap();
    let tr: serde_json::Value = client.request(req).await.unwrap();
    assert_eq!(tr["kind"], "TokenRequest");
    assert!(tr["status"]["expirationTimestamp"].is_string());
    let minted = tr["status"]["token"].as_str().unwrap().to_string();
    let sa_client: Api<Namespace> = Api::all(with_token(&minted).await);
    sa_client.get("default").await.unwrap();
}

#[tokio::test]
async fn tls_kubeconfig_works_with_kube_client() {
    let dc = start_with(DevClusterOpts {
        tls: true,
        nodes: 3,
        ..DevClusterOpts::new("tls")
    });
    assert!(dc.url().starts_with("https://"));
    let client = dc.client().await.unwrap();
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 3);
    let n = &list.items[0];
    assert_eq!(
        n.spec.as_ref().unwrap().provider_id.as_deref(),
        Some("kind://docker/tls/node-1")
    );
    assert_eq!(
        n.status
            .as_ref()
            .unwrap()
            .node_info
            .as_ref()
            .unwrap()
            .kubelet_version,
        "v1.33.1"
    );
    // Watches stream over TLS too.
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    let mut rx = spawn_watcher(api.clone(), watcher::Config::default().labels("t=tls"));
    api.create(
        &PostParams::default(),
        &cm("over-tls", &[("t", "tls")], &[]),
    )
    .await
    .unwrap();
    // The create may land before or after the watcher's initial list, so the
    // object arrives either as part of the initial list or as a live ADDED.
    loop {
        match next_event(&mut rx, "ADDED over TLS").await.unwrap() {
            watcher::Event::Apply(c) | watcher::Event::InitApply(c) => {
                assert_eq!(name_of(&c), "over-tls");
                break;
            }
            _ => {}
        }
    }
}

#[tokio::test]
async fn debug_writes_counts_writes_but_not_noops() {
    let dc = start("writes");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    let before = dc.writes().await.unwrap()["core/configmaps"]
        .as_u64()
        .unwrap_or(0);
    let c = api
        .create(&PostParams::default(), &cm("w", &[], &[("a", "1")]))
        .await
        .unwrap();
    assert_eq!(
        dc.writes().await.unwrap()["core/configmaps"].as_u64(),
        Some(before + 1)
    );
    let same = api
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "1"}})),
        )
        .await
        .unwrap();
    assert_eq!(
        same.metadata.resource_version, c.metadata.resource_version,
        "a no-op keeps the resourceVersion"
    );
    assert_eq!(
        dc.writes().await.unwrap()["core/configmaps"].as_u64(),
        Some(before + 1)
    );
    api.patch(
        "w",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"a": "2"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        dc.writes().await.unwrap()["core/configmaps"].as_u64(),
        Some(before + 2)
    );
}

#[tokio::test]
async fn streaming_list_ends_initial_events_with_a_bookmark() {
    let dc = start("streaming");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    api.create(&PostParams::default(), &cm("s1", &[("t", "stream")], &[]))
        .await
        .unwrap();
    let mut rx = spawn_watcher(
        api.clone(),
        watcher::Config::default()
            .labels("t=stream")
            .streaming_lists(),
    );
    let mut initial = Vec::new();
    loop {
        match next_event(&mut rx, "InitDone (initial-events-end bookmark)")
            .await
            .unwrap()
        {
            watcher::Event::Init => {}
            watcher::Event::InitApply(c) => initial.push(name_of(&c)),
            watcher::Event::InitDone => break,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(initial, vec!["s1"]);
    api.create(&PostParams::default(), &cm("s2", &[("t", "stream")], &[]))
        .await
        .unwrap();
    match next_event(&mut rx, "s2").await.unwrap() {
        watcher::Event::Apply(c) => assert_eq!(name_of(&c), "s2"),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn background_deletion_removes_owned_objects() {
    let dc = start("gc");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    let owner = api
        .create(&PostParams::default(), &cm("owner", &[], &[]))
        .await
        .unwrap();
    let owner_ref = k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.metadata.uid.clone().unwrap(),
        ..Default::default()
    };
    for n in ["dep", "orphan-owner"] {
        let mut d = cm(n, &[], &[]);
        if n == "dep" {
            d.metadata.owner_references = Some(vec![owner_ref.clone()]);
        }
        api.create(&PostParams::default(), &d).await.unwrap();
    }
    let mut kept = cm("kept", &[], &[]);
    let other = api.get("orphan-owner").await.unwrap();
    let mut other_ref = owner_ref.clone();
    other_ref.name = "orphan-owner".into();
    other_ref.uid = other.metadata.uid.unwrap();
    kept.metadata.owner_references = Some(vec![owner_ref.clone(), other_ref]);
    api.create(&PostParams::default(), &kept).await.unwrap();
    api.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    assert!(
        api.get_opt("dep").await.unwrap().is_none(),
        "a dependent whose only owner is gone is deleted"
    );
    assert!(
        api.get_opt("kept").await.unwrap().is_some(),
        "a dependent with a live owner stays"
    );
    // Orphan propagation strips the ownerReference instead.
    api.delete("orphan-owner", &DeleteParams::orphan())
        .await
        .unwrap();
    let kept = api.get("kept").await.unwrap();
    let refs = kept.metadata.owner_references.unwrap_or_default();
    assert!(refs.iter().all(|r| r.name != "orphan-owner"), "{refs:?}");
}

#[tokio::test]
async fn scale_subresource_and_table_output() {
    let dc = start("scale");
    let client = dc.client().await.unwrap();
    let deps: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "default");
    let d: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "a", "image": "x"}]}}}
    }))
    .unwrap();
    deps.create(&PostParams::default(), &d).await.unwrap();
    let s = deps
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    assert_eq!(s.spec.unwrap().replicas, Some(4));
    assert_eq!(s.status.unwrap().selector.as_deref(), Some("app=web"));
    let got = deps.get("web").await.unwrap();
    assert_eq!(got.spec.unwrap().replicas, Some(4));
    assert_eq!(got.metadata.generation, Some(2));
    let req = http::Request::get("/api/v1/namespaces")
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())
        .unwrap();
    let table: serde_json::Value = client.request(req).await.unwrap();
    assert_eq!(table["kind"], "Table");
    let cols: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(cols, vec!["Name", "Status", "Age"]);
    assert!(table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["cells"][0] == "kube-system" && r["cells"][1] == "Active"));
    // A watch with the Table Accept header streams one-row Tables, headers only first.
    let req =
        http::Request::get("/api/v1/namespaces?watch=true&resourceVersion=0&timeoutSeconds=5")
            .header(
                "accept",
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            )
            .body(Vec::new())
            .unwrap();
    let events: Vec<_> = client
        .request_events::<serde_json::Value>(req)
        .await
        .unwrap()
        .take(2)
        .try_collect()
        .await
        .unwrap();
    let tables: Vec<&serde_json::Value> = events
        .iter()
        .map(|e| match e {
            WatchEvent::Added(t) => t,
            other => panic!("expected ADDED, got {other:?}"),
        })
        .collect();
    assert_eq!(tables[0]["kind"], "Table");
    assert_eq!(tables[0]["rows"].as_array().unwrap().len(), 1);
    assert_eq!(tables[0]["columnDefinitions"].as_array().unwrap().len(), 3);
    assert!(tables[1]["columnDefinitions"]
        .as_array()
        .is_none_or(|c| c.is_empty()));
}

#[tokio::test]
async fn concurrent_writes_reach_a_watcher_once_each_in_rv_order() {
    let dc = start("concurrent");
    let api: Api<ConfigMap> = Api::namespaced(dc.client().await.unwrap(), "default");
    let start_rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut stream = api
        .watch(
            &WatchParams::default().labels("t=burst").timeout(30),
            &start_rv,
        )
        .await
        .unwrap()
        .boxed();
    let writers = (0..8).map(|w| {
        let api = api.clone();
        tokio::spawn(async move {
            for i in 0..25 {
                api.create(
                    &PostParams::default(),
                    &cm(&format!("c-{w}-{i}"), &[("t", "burst")], &[]),
                )
                .await
                .unwrap();
            }
        })
    });
    futures::future::join_all(writers)
        .await
        .into_iter()
        .for_each(|r| r.unwrap());
    let mut seen = std::collections::BTreeSet::new();
    let mut last = 0u64;
    while seen.len() < 200 {
        match tokio::time::timeout(T, stream.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(WatchEvent::Added(c)) => {
                let rv: u64 = c
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(
                    rv > last,
                    "resourceVersions must increase: {rv} after {last}"
                );
                last = rv;
                assert!(
                    seen.insert(name_of(&c)),
                    "duplicate event for {}",
                    name_of(&c)
                );
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
