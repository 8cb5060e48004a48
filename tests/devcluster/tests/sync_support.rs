//! What fleetbus's sync engine (a kube-rs client writing copies with POST/PUT, dry runs
//! and label-selector watches) relies on from kube-apiserver, checked against a real
//! devcluster process: immutable ConfigMaps and Secrets, `dryRun=All` on every write
//! verb, label-selector watches across selector transitions, CRDs created and deleted
//! while clients run, the status subresource, and unconditional PUTs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::raw;

use fleetbus_testsupport::{wait_for, DevCluster, DevClusterOpts};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::core::{ApiResource, GroupVersionKind, Status};
use kube::discovery::Discovery;
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;
use serde_json::{json, Value};
use std::time::Duration;
use tokio::sync::mpsc;

const T: Duration = Duration::from_secs(20);
const IMMUTABLE: &str = "Forbidden: field is immutable when `immutable` is set";

fn start(name: &str) -> DevCluster {
    DevCluster::start(DevClusterOpts::new(name)).expect("start devcluster")
}

fn from_json<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

fn pp() -> PostParams {
    PostParams::default()
}

fn dry() -> PostParams {
    PostParams {
        dry_run: true,
        ..Default::default()
    }
}

fn status_of<T: std::fmt::Debug>(r: Result<T, kube::Error>) -> Box<Status> {
    match r {
        Err(kube::Error::Api(s)) => s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// `(reason, field, message)` of each cause of a 422.
fn causes(s: &Status) -> Vec<(String, String, String)> {
    s.details
        .as_ref()
        .map(|d| {
            d.causes
                .iter()
                .map(|c| (c.reason.clone(), c.field.clone(), c.message.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn forbidden(field: &str) -> (String, String, String) {
    ("FieldValueForbidden".into(), field.into(), IMMUTABLE.into())
}

fn gadgets_ar() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("example.com", "v1", "Gadget"),
        "gadgets",
    )
}

/// Creates the `gadgets.example.com` CRD (any content, `/status` subresource) and waits
/// until it is served.
async fn gadgets(client: &Client) -> Api<DynamicObject> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = from_json(raw::gadget_crd(json!({
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
        "subresources": {"status": {}}
    })));
    crds.create(&pp(), &crd).await.unwrap();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &gadgets_ar());
    wait_for("gadgets served", T, || {
        let api = api.clone();
        async move {
            api.list(&Default::default())
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    api
}

fn gadget(name: &str, body: Value) -> DynamicObject {
    DynamicObject::new(name, &gadgets_ar()).data(body)
}

fn rv_of(o: &DynamicObject) -> String {
    o.metadata.resource_version.clone().unwrap_or_default()
}

/// kube's `ValidateConfigMapUpdate`: once `immutable: true` is stored, `data`,
/// `binaryData` and the flag itself cannot change, through PUT, every patch type,
/// server-side apply, or a dry run of them; metadata still can, and a delete still
/// works (the sync engine's "422 on an immutable field → delete and recreate").
/// Failed before the fix: every one of these writes was accepted.
#[tokio::test]
async fn immutable_config_maps_refuse_data_changes_on_every_write_path() {
    let dc = start("immutable-cm");
    let client = dc.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let frozen: ConfigMap = from_json(json!({
        "metadata": {"name": "frozen"}, "immutable": true, "data": {"k": "1"}
    }));
    let created = cms.create(&pp(), &frozen).await.unwrap();
    let path = format!("{}/frozen", raw::CMS);
    let before = raw::snapshot(&dc, &path);

    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "2".to_string())].into());
    let s = status_of(cms.replace("frozen", &pp(), &changed).await);
    assert_eq!((s.code, s.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        s.message,
        "ConfigMap \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    assert_eq!(causes(&s), [forbidden("data")]);
    // A dry run is validated the same way.
    assert_eq!(
        causes(&status_of(cms.replace("frozen", &dry(), &changed).await)),
        [forbidden("data")]
    );

    let mut thawed = created.clone();
    thawed.immutable = Some(false);
    assert_eq!(
        causes(&status_of(cms.replace("frozen", &pp(), &thawed).await)),
        [forbidden("immutable")]
    );
    let mut everything = changed.clone();
    everything.immutable = None;
    everything.binary_data =
        Some([("b".to_string(), k8s_openapi::ByteString(b"x".to_vec()))].into());
    let s = status_of(cms.replace("frozen", &pp(), &everything).await);
    assert_eq!(
        causes(&s),
        [
            forbidden("immutable"),
            forbidden("data"),
            forbidden("binaryData")
        ]
    );
    assert!(
        s.message
            .starts_with("ConfigMap \"frozen\" is invalid: [immutable: Forbidden"),
        "{}",
        s.message
    );

    let patch = PatchParams::default();
    for p in [
        Patch::Merge(json!({"data": {"k": "3"}})),
        Patch::Strategic(json!({"data": {"new": "x"}})),
    ] {
        assert_eq!(
            causes(&status_of(cms.patch("frozen", &patch, &p).await)),
            [forbidden("data")]
        );
    }
    let r = raw::send(
        &dc,
        "PATCH",
        &path,
        "application/json-patch+json",
        &json!([{"op": "remove", "path": "/immutable"}]),
    );
    assert_eq!(r.code, 422, "{}", r.text());
    assert_eq!(r.json()["details"]["causes"][0]["field"], "immutable");
    let apply = PatchParams::apply("fleetbus-sync").force();
    assert_eq!(
        causes(&status_of(
            cms.patch(
                "frozen",
                &apply,
                &Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "frozen"}, "immutable": true, "data": {"k": "4"}})),
            )
            .await
        )),
        [forbidden("data")]
    );
    assert_eq!(
        raw::snapshot(&dc, &path),
        before,
        "refused writes change nothing"
    );

    // Metadata may change; the data stays.
    let labelled = cms
        .patch(
            "frozen",
            &patch,
            &Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}})),
        )
        .await
        .unwrap();
    assert_eq!(labelled.data.unwrap()["k"], "1");
    // Delete and recreate is the way to change it.
    cms.delete("frozen", &DeleteParams::default())
        .await
        .unwrap();
    let mut again = frozen.clone();
    again.data = Some([("k".to_string(), "2".to_string())].into());
    assert_eq!(
        cms.create(&pp(), &again).await.unwrap().data.unwrap()["k"],
        "2"
    );
    // A mutable ConfigMap may become immutable, with new data in the same write.
    let plain: ConfigMap = from_json(json!({"metadata": {"name": "plain"}, "data": {"k": "1"}}));
    let plain = cms.create(&pp(), &plain).await.unwrap();
    let mut freeze = plain.clone();
    freeze.immutable = Some(true);
    freeze.data = Some([("k".to_string(), "9".to_string())].into());
    assert_eq!(
        cms.replace("plain", &pp(), &freeze)
            .await
            .unwrap()
            .immutable,
        Some(true)
    );
}

/// kube's `ValidateSecretUpdate`: `data` (with `stringData` merged into it) and the
/// flag are frozen once immutable, and `type` never changes; a PUT without `type` means
/// `Opaque` (kube's defaulting), which is a change for a Secret of another type.
/// Failed before the fix: all accepted, and a PUT without `type` dropped it.
#[tokio::test]
async fn immutable_secrets_and_secret_types() {
    let dc = start("immutable-secret");
    let client = dc.client().await.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client, "default");
    let frozen: Secret = from_json(json!({
        "metadata": {"name": "frozen"}, "immutable": true, "stringData": {"k": "1"}
    }));
    let created = secrets.create(&pp(), &frozen).await.unwrap();
    let mut changed = created.clone();
    changed.data = None;
    changed.string_data = Some([("k".to_string(), "2".to_string())].into());
    let s = status_of(secrets.replace("frozen", &pp(), &changed).await);
    assert_eq!(
        s.message,
        "Secret \"frozen\" is invalid: data: Forbidden: field is immutable when `immutable` is set"
    );
    assert_eq!(
        causes(&status_of(
            secrets
                .patch(
                    "frozen",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"immutable": false}))
                )
                .await
        )),
        [forbidden("immutable")]
    );
    // The same data again (as stringData) is no change.
    let mut same = created.clone();
    same.data = None;
    same.string_data = Some([("k".to_string(), "1".to_string())].into());
    secrets.replace("frozen", &pp(), &same).await.unwrap();
    secrets
        .delete("frozen", &DeleteParams::default())
        .await
        .unwrap();

    let typed: Secret = from_json(json!({
        "metadata": {"name": "typed"}, "type": "example.com/token", "data": {"k": "eA=="}
    }));
    let typed = secrets.create(&pp(), &typed).await.unwrap();
    let mut other = typed.clone();
    other.type_ = Some("example.com/other".into());
    let s = status_of(secrets.replace("typed", &pp(), &other).await);
    assert_eq!(
        causes(&s),
        [(
            "FieldValueInvalid".to_string(),
            "type".to_string(),
            "Invalid value: \"example.com/other\": field is immutable".to_string()
        )]
    );
    let mut untyped = typed.clone();
    untyped.type_ = None;
    let s = status_of(secrets.replace("typed", &pp(), &untyped).await);
    assert_eq!(
        s.message,
        "Secret \"typed\" is invalid: type: Invalid value: \"Opaque\": field is immutable"
    );
    // An Opaque Secret written without `type` stays Opaque.
    let opaque: Secret = from_json(json!({"metadata": {"name": "opaque"}, "data": {"k": "eA=="}}));
    let opaque = secrets.create(&pp(), &opaque).await.unwrap();
    let mut no_type = opaque.clone();
    no_type.type_ = None;
    no_type.data = Some([("k".to_string(), k8s_openapi::ByteString(b"y".to_vec()))].into());
    let replaced = secrets.replace("opaque", &pp(), &no_type).await.unwrap();
    assert_eq!(replaced.type_.as_deref(), Some("Opaque"));
}

/// `dryRun=All` on POST, PUT and PATCH of ConfigMaps, Secrets and custom resources:
/// the would-be object comes back, nothing is stored, no watch event is sent, nothing is
/// counted in `/debug/writes`, and the stored resourceVersion is kept.
#[tokio::test]
async fn dry_runs_store_nothing_and_send_no_events() {
    let dc = start("dry-run-all");
    let client = dc.client().await.unwrap();
    let cm_ar = ApiResource::erase::<ConfigMap>(&());
    let secret_ar = ApiResource::erase::<Secret>(&());
    let cases: Vec<(Api<DynamicObject>, ApiResource, Value, Value)> = vec![
        (
            Api::namespaced_with(client.clone(), "default", &cm_ar),
            cm_ar.clone(),
            json!({"data": {"k": "1"}}),
            json!({"data": {"k": "2"}}),
        ),
        (
            Api::namespaced_with(client.clone(), "default", &secret_ar),
            secret_ar.clone(),
            json!({"type": "Opaque", "data": {"k": "eA=="}}),
            json!({"type": "Opaque", "data": {"k": "eQ=="}}),
        ),
        (
            gadgets(&client).await,
            gadgets_ar(),
            json!({"spec": {"size": 1}}),
            json!({"spec": {"size": 2}}),
        ),
    ];
    for (api, ar, body, changed_body) in cases {
        let kind = ar.kind.clone();
        let real = api
            .create(&pp(), &DynamicObject::new("real", &ar).data(body.clone()))
            .await
            .unwrap();
        let rv = rv_of(&real);
        let writes = dc.writes().await.unwrap();
        let mut events = api
            .watch(&WatchParams::default().timeout(30), &rv)
            .await
            .unwrap()
            .boxed();

        let ghost = api
            .create(&dry(), &DynamicObject::new("ghost", &ar).data(body.clone()))
            .await
            .unwrap();
        assert_eq!(ghost.metadata.name.as_deref(), Some("ghost"), "{kind}");
        assert!(api.get_opt("ghost").await.unwrap().is_none(), "{kind}");

        let mut changed = real.clone();
        changed.data = changed_body.clone();
        let replaced = api.replace("real", &dry(), &changed).await.unwrap();
        // The same without a resourceVersion (how a sink computes a baseline): also the
        // stored resourceVersion.
        let mut blind = changed.clone();
        blind.metadata.resource_version = None;
        let blind = api.replace("real", &dry(), &blind).await.unwrap();
        assert_eq!(rv_of(&blind), rv, "{kind}: unconditional dry run");
        // The part that changes: `spec` of a Gadget, `data` of a ConfigMap or Secret.
        let field = if changed_body.get("spec").is_some() {
            "spec"
        } else {
            "data"
        };
        assert_eq!(replaced.data[field], changed_body[field], "{kind}");
        assert_eq!(rv_of(&replaced), rv, "{kind}: the stored resourceVersion");
        let patched = api
            .patch(
                "real",
                &PatchParams::default().dry_run(),
                &Patch::Merge(changed_body.clone()),
            )
            .await
            .unwrap();
        assert_eq!(patched.data[field], changed_body[field], "{kind}");
        assert_eq!(rv_of(&patched), rv, "{kind}");

        let stored = api.get("real").await.unwrap();
        assert_eq!(stored.data[field], body[field], "{kind}: nothing stored");
        assert_eq!(rv_of(&stored), rv, "{kind}");
        assert_eq!(
            dc.writes().await.unwrap(),
            writes,
            "{kind}: nothing counted"
        );
        // The first event after the dry runs is the next real write.
        api.create(&pp(), &DynamicObject::new("sentinel", &ar).data(body))
            .await
            .unwrap();
        match tokio::time::timeout(T, events.try_next())
            .await
            .unwrap()
            .unwrap()
        {
            Some(WatchEvent::Added(o)) => {
                assert_eq!(o.metadata.name.as_deref(), Some("sentinel"), "{kind}")
            }
            other => panic!("{kind}: expected ADDED sentinel, got {other:?}"),
        }
    }
}

/// One step a label-selector watch reports: (type, name).
type Seen = (&'static str, String);

async fn next_seen(rx: &mut mpsc::UnboundedReceiver<Seen>) -> Option<Seen> {
    tokio::time::timeout(T, rx.recv()).await.ok().flatten()
}

type Events = futures::stream::BoxStream<'static, kube::Result<WatchEvent<DynamicObject>>>;

async fn next_event(s: &mut Events) -> Option<WatchEvent<DynamicObject>> {
    tokio::time::timeout(T, s.try_next())
        .await
        .expect("watch stalled")
        .unwrap()
}

/// Drives an object through a selector's transitions and returns what a raw watch
/// and a kube-rs `watcher` (both with `labelSelector=sync=yes`) report.
async fn selector_transitions(
    api: Api<DynamicObject>,
    ar: &ApiResource,
    body: Value,
    change: Value,
) {
    let kind = ar.kind.clone();
    let wp = WatchParams::default().labels("sync=yes").timeout(60);
    let mut raw_watch = api.watch(&wp, "0").await.unwrap().boxed();
    let (tx, mut rx) = mpsc::unbounded_channel();
    let w_api = api.clone();
    // Ends when the test drops `rx` (the next send fails) or the stream ends.
    let task = tokio::spawn(async move {
        let mut s = watcher(w_api, watcher::Config::default().labels("sync=yes"))
            .default_backoff()
            .boxed();
        while let Some(ev) = s.next().await {
            let seen = match ev {
                Ok(watcher::Event::Apply(o)) => ("apply", o.metadata.name.unwrap_or_default()),
                Ok(watcher::Event::Delete(o)) => ("delete", o.metadata.name.unwrap_or_default()),
                Ok(watcher::Event::InitDone) => ("init-done", String::new()),
                Ok(_) => continue,
                Err(e) => ("error", e.to_string()),
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });
    assert_eq!(
        next_seen(&mut rx).await,
        Some(("init-done", String::new())),
        "{kind}"
    );

    let labelled = |value: &str| json!({"metadata": {"labels": {"sync": value}}});
    let mut obj = DynamicObject::new("a", ar).data(body.clone());
    obj.metadata.labels = Some([("sync".to_string(), "yes".to_string())].into());
    api.create(&pp(), &obj).await.unwrap();
    let merge = |v: Value| Patch::Merge(v);
    let pp_ = PatchParams::default();
    api.patch("a", &pp_, &merge(change.clone())).await.unwrap(); // MODIFIED
    api.patch("a", &pp_, &merge(labelled("no"))).await.unwrap(); // stops matching: DELETED
    api.patch("a", &pp_, &merge(body.clone())).await.unwrap(); // not matching: nothing
    api.patch("a", &pp_, &merge(labelled("yes"))).await.unwrap(); // starts matching: ADDED
    api.delete("a", &DeleteParams::default()).await.unwrap(); // DELETED
    let mut sentinel = DynamicObject::new("sentinel", ar).data(body);
    sentinel.metadata.labels = Some([("sync".to_string(), "yes".to_string())].into());
    api.create(&pp(), &sentinel).await.unwrap();

    let mut raw_seen: Vec<Seen> = Vec::new();
    while raw_seen.len() < 6 {
        let ev = tokio::time::timeout(T, raw_watch.try_next())
            .await
            .unwrap_or_else(|_| panic!("{kind}: raw watch stalled after {raw_seen:?}"))
            .unwrap();
        raw_seen.push(match ev {
            Some(WatchEvent::Added(o)) => ("ADDED", o.metadata.name.unwrap_or_default()),
            Some(WatchEvent::Modified(o)) => ("MODIFIED", o.metadata.name.unwrap_or_default()),
            Some(WatchEvent::Deleted(o)) => ("DELETED", o.metadata.name.unwrap_or_default()),
            other => panic!("{kind}: unexpected {other:?}"),
        });
    }
    let s = |t: &'static str, n: &str| (t, n.to_string());
    assert_eq!(
        raw_seen,
        [
            s("ADDED", "a"),
            s("MODIFIED", "a"),
            s("DELETED", "a"),
            s("ADDED", "a"),
            s("DELETED", "a"),
            s("ADDED", "sentinel")
        ],
        "{kind}"
    );
    let mut seen: Vec<Seen> = Vec::new();
    while seen.len() < 6 {
        match next_seen(&mut rx).await {
            Some(ev) => seen.push(ev),
            None => panic!("{kind}: watcher stalled after {seen:?}"),
        }
    }
    assert_eq!(
        seen,
        [
            s("apply", "a"),
            s("apply", "a"),
            s("delete", "a"),
            s("apply", "a"),
            s("delete", "a"),
            s("apply", "sentinel")
        ],
        "{kind}"
    );
    drop(rx);
    task.abort();
}

/// A label-selector watch reports ADDED when an object starts matching and DELETED when
/// it stops, for built-in and custom resources, raw and through kube-rs's `watcher`.
#[tokio::test]
async fn label_selector_watches_follow_selector_transitions() {
    let dc = start("selector-watch");
    let client = dc.client().await.unwrap();
    let cm_ar = ApiResource::erase::<ConfigMap>(&());
    selector_transitions(
        Api::namespaced_with(client.clone(), "default", &cm_ar),
        &cm_ar,
        json!({"data": {"k": "1"}}),
        json!({"data": {"k": "2"}}),
    )
    .await;
    selector_transitions(
        gadgets(&client).await,
        &gadgets_ar(),
        json!({"spec": {"size": 1}}),
        json!({"spec": {"size": 2}}),
    )
    .await;
}

/// A CRD created while a client runs is in discovery at once (`/apis`,
/// `/apis/<group>/<version>`, aggregated discovery, kube-rs `Discovery`), and a watch
/// on it works; deleting it removes it from discovery, sends DELETED for each object and
/// then ends the watch, as kube's CRD handler does. Failed before the fix: the watch
/// stayed open (and the DELETED events came after the CRD's own).
#[tokio::test]
async fn crds_come_and_go_while_clients_run() {
    let dc = start("crd-lifecycle");
    let client = dc.client().await.unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Gadget");
    let before = Discovery::new(client.clone()).run().await.unwrap();
    assert!(before.resolve_gvk(&gvk).is_none());
    // A kube-rs watcher started before the CRD exists: it gets 404s and retries with
    // backoff until the resource is served.
    let early: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &gadgets_ar());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        let mut s = watcher(early, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(ev) = s.next().await {
            let seen = match ev {
                Ok(watcher::Event::Apply(o)) => ("apply", o.metadata.name.unwrap_or_default()),
                Ok(watcher::Event::Delete(o)) => ("delete", o.metadata.name.unwrap_or_default()),
                // A relist that finds it (the object was created between two retries).
                Ok(watcher::Event::InitApply(o)) => ("apply", o.metadata.name.unwrap_or_default()),
                // Init events and the 404s before the CRD exists (and after it is gone).
                _ => continue,
            };
            if tx.send(seen).is_err() {
                return;
            }
        }
    });

    let api = gadgets(&client).await;
    let groups = raw::get_json(&dc, "/apis");
    assert!(
        groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com"),
        "{groups}"
    );
    let resources = raw::get_json(&dc, "/apis/example.com/v1");
    let names: Vec<&str> = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["gadgets", "gadgets/status"]);
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    assert_eq!(discovery.resolve_gvk(&gvk).unwrap().0.plural, "gadgets");
    let aggregated = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .unwrap();
    assert!(aggregated.resolve_gvk(&gvk).is_some());

    let mut events = api
        .watch(&WatchParams::default().timeout(60), "0")
        .await
        .unwrap()
        .boxed();
    api.create(&pp(), &gadget("g1", json!({"spec": {"size": 1}})))
        .await
        .unwrap();
    assert!(
        matches!(next_event(&mut events).await, Some(WatchEvent::Added(o)) if o.metadata.name.as_deref() == Some("g1"))
    );

    // The early watcher found the resource once it was served.
    assert_eq!(next_seen(&mut rx).await, Some(("apply", "g1".to_string())));
    // It may have found g1 by a relist and not be watching yet; one more
    // change seen makes it (almost surely) watching, so that it is there to
    // see the DELETED below rather than a 404 relist of a resource that is
    // gone, which a kube-rs watcher turns into no event at all (as against
    // kube-apiserver: a race of the test, not of the server).
    api.patch(
        "g1",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"size": 2}})),
    )
    .await
    .unwrap();
    assert!(matches!(
        next_event(&mut events).await,
        Some(WatchEvent::Modified(_))
    ));
    assert_eq!(next_seen(&mut rx).await, Some(("apply", "g1".to_string())));

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete("gadgets.example.com", &DeleteParams::default())
        .await
        .unwrap();
    assert!(
        matches!(next_event(&mut events).await, Some(WatchEvent::Deleted(o)) if o.metadata.name.as_deref() == Some("g1"))
    );
    assert!(
        next_event(&mut events).await.is_none(),
        "the watch ends with its CRD"
    );
    // ... and sees the object go with it.
    assert_eq!(next_seen(&mut rx).await, Some(("delete", "g1".to_string())));
    drop(rx);
    task.abort();

    let gone = raw::request(&dc, "GET", "/apis/example.com/v1", None, b"");
    assert_eq!(gone.code, 404, "{}", gone.text());
    let groups = raw::get_json(&dc, "/apis");
    assert!(
        !groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "example.com"),
        "{groups}"
    );
    let after = Discovery::new(client.clone()).run().await.unwrap();
    assert!(after.resolve_gvk(&gvk).is_none());
    assert_eq!(status_of(api.list(&Default::default()).await).code, 404);
}

/// With a `/status` subresource, the main endpoint ignores `.status` and `/status`
/// changes only `.status` (kube's status strategies), for custom resources and
/// Deployments alike.
#[tokio::test]
async fn status_subresource_splits_spec_and_status_writes() {
    let dc = start("status-split");
    let client = dc.client().await.unwrap();
    let api = gadgets(&client).await;
    let created = api
        .create(&pp(), &gadget("g", json!({"spec": {"size": 1}})))
        .await
        .unwrap();
    let mut both = created.clone();
    both.data = json!({"spec": {"size": 2}, "status": {"phase": "Main"}});
    let main = api.replace("g", &pp(), &both).await.unwrap();
    assert_eq!(main.data["spec"]["size"], 2);
    assert!(main.data.get("status").is_none(), "{:?}", main.data);
    let mut status_write = main.clone();
    status_write.data = json!({"spec": {"size": 3}, "status": {"phase": "Ready"}});
    let st = api.replace_status("g", &pp(), &status_write).await.unwrap();
    assert_eq!(st.data["spec"]["size"], 2);
    assert_eq!(st.data["status"]["phase"], "Ready");
    let merged = api
        .patch(
            "g",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Nope"}})),
        )
        .await
        .unwrap();
    assert_eq!(merged.data["status"]["phase"], "Ready");

    let deployments: Api<Deployment> = Api::namespaced(client, "default");
    let d: Deployment = from_json(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    }));
    let d = deployments.create(&pp(), &d).await.unwrap();
    let mut with_status = d.clone();
    with_status.spec.as_mut().unwrap().replicas = Some(2);
    with_status.status = Some(from_json(json!({"replicas": 7})));
    let main = deployments
        .replace("web", &pp(), &with_status)
        .await
        .unwrap();
    assert_eq!(main.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(main.status.as_ref().and_then(|s| s.replicas), None);
    let mut status_only = main.clone();
    status_only.spec.as_mut().unwrap().replicas = Some(5);
    status_only.status = Some(from_json(json!({"replicas": 7})));
    let st = deployments
        .replace_status("web", &pp(), &status_only)
        .await
        .unwrap();
    assert_eq!(st.spec.as_ref().unwrap().replicas, Some(2));
    assert_eq!(st.status.as_ref().and_then(|s| s.replicas), Some(7));
}

/// A PUT without `metadata.resourceVersion` is an unconditional update for ConfigMaps,
/// Secrets and custom resources (kube allows it for every kind whose strategy has
/// `AllowUnconditionalUpdate`), while a stale one still conflicts.
#[tokio::test]
async fn puts_without_a_resource_version_are_unconditional() {
    let dc = start("unconditional");
    let client = dc.client().await.unwrap();
    let cm_ar = ApiResource::erase::<ConfigMap>(&());
    let secret_ar = ApiResource::erase::<Secret>(&());
    let cases: Vec<(Api<DynamicObject>, ApiResource, Value, Value)> = vec![
        (
            Api::namespaced_with(client.clone(), "default", &cm_ar),
            cm_ar.clone(),
            json!({"data": {"k": "1"}}),
            json!({"data": {"k": "2"}}),
        ),
        (
            Api::namespaced_with(client.clone(), "default", &secret_ar),
            secret_ar.clone(),
            json!({"type": "Opaque", "data": {"k": "eA=="}}),
            json!({"type": "Opaque", "data": {"k": "eQ=="}}),
        ),
        (
            gadgets(&client).await,
            gadgets_ar(),
            json!({"spec": {"size": 1}}),
            json!({"spec": {"size": 2}}),
        ),
    ];
    for (api, ar, body, changed) in cases {
        let kind = ar.kind.clone();
        let first = api
            .create(&pp(), &DynamicObject::new("x", &ar).data(body))
            .await
            .unwrap();
        // Someone else writes in between.
        api.patch(
            "x",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"other": "writer"}}})),
        )
        .await
        .unwrap();
        let mut stale = first.clone();
        stale.data = changed.clone();
        assert_eq!(
            status_of(api.replace("x", &pp(), &stale).await).code,
            409,
            "{kind}"
        );
        let mut blind = DynamicObject::new("x", &ar).data(changed.clone());
        blind.metadata.namespace = Some("default".into());
        let replaced = api.replace("x", &pp(), &blind).await.unwrap();
        let field = if changed.get("spec").is_some() {
            "spec"
        } else {
            "data"
        };
        assert_eq!(replaced.data[field], changed[field], "{kind}");
        assert!(replaced.metadata.labels.is_none(), "{kind}: a full replace");
    }
}
