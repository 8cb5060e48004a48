//! End-to-end tests for kube-apiserver behaviours that kube-rs's own cluster tests
//! (`tests/devcluster/kube-rs-suite`) rely on: dry-run resourceVersions, delete
//! response shapes, field selectors on unset fields, PartialObjectMetadata, and
//! the objects and resources kube-apiserver serves from the start.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::raw;

use fleetbus_testsupport::{wait_for, DevCluster, DevClusterOpts};
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{
    ComponentStatus, ConfigMap, Endpoints, Node, Pod, ReplicationController, Service,
    ServiceAccount,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1::APIService;
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::core::PartialObjectMeta;
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::json;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn start(name: &str) -> DevCluster {
    DevCluster::start(DevClusterOpts::new(name)).expect("start devcluster")
}

fn from_json<K: serde::de::DeserializeOwned>(v: serde_json::Value) -> K {
    serde_json::from_value(v).unwrap()
}

/// kube's DryRunnableStorage never asks etcd for a revision: a dry-run update or
/// patch returns the stored resourceVersion (so a client reusing it for the real
/// write gets no 409), and a dry-run create returns none. Failed before the fix: the
/// dry-run answers carried a fresh resourceVersion and the follow-up replace got 409.
#[tokio::test]
async fn dry_run_writes_keep_the_stored_resource_version() {
    let dc = start("dryrun-rv");
    let client = dc.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let cm: ConfigMap = from_json(json!({"metadata": {"name": "a"}, "data": {"k": "1"}}));

    let created_dry = cms.create(&dry, &cm).await.unwrap();
    assert_eq!(created_dry.metadata.resource_version, None);
    assert!(cms.get_opt("a").await.unwrap().is_none());

    let created = cms.create(&PostParams::default(), &cm).await.unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();

    let patched_dry = cms
        .patch(
            "a",
            &PatchParams::default().dry_run(),
            &Patch::Merge(json!({"data": {"k": "2"}})),
        )
        .await
        .unwrap();
    assert_eq!(patched_dry.data.unwrap()["k"], "2");
    assert_eq!(patched_dry.metadata.resource_version.as_deref(), Some(&*rv));

    let mut changed = created.clone();
    changed.data = Some([("k".to_string(), "3".to_string())].into());
    let replaced_dry = cms.replace("a", &dry, &changed).await.unwrap();
    assert_eq!(
        replaced_dry.metadata.resource_version.as_deref(),
        Some(&*rv)
    );

    // The real write with the dry run's answer goes through.
    let mut real = replaced_dry.clone();
    real.data = Some([("k".to_string(), "4".to_string())].into());
    let replaced = cms
        .replace("a", &PostParams::default(), &real)
        .await
        .unwrap();
    assert_eq!(replaced.data.unwrap()["k"], "4");
    assert_ne!(replaced.metadata.resource_version.as_deref(), Some(&*rv));
}

fn gadget_crd() -> CustomResourceDefinition {
    from_json(raw::gadget_crd(json!({
        "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}
    })))
}

/// kube's `ReturnDeletedObject`: pods, services and serviceaccounts answer a DELETE
/// with the deleted object; configmaps and custom resources with a Status. Failed
/// before the fix: pods and services returned a Status, custom resources the object.
#[tokio::test]
async fn delete_responses_follow_return_deleted_object() {
    let dc = start("delete-shape");
    let client = dc.client().await.unwrap();
    let dp = DeleteParams::default();

    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = from_json(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }));
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let deleted = pods.delete("p", &dp).await.unwrap();
    let p = deleted.left().expect("pod delete answers the Pod");
    assert_eq!(p.metadata.name.as_deref(), Some("p"));

    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc: Service = from_json(json!({
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80}]}
    }));
    svcs.create(&PostParams::default(), &svc).await.unwrap();
    assert!(svcs.delete("s", &dp).await.unwrap().is_left());

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap = from_json(json!({"metadata": {"name": "c"}}));
    cms.create(&PostParams::default(), &cm).await.unwrap();
    assert!(cms.delete("c", &dp).await.unwrap().is_right());

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &gadget_crd())
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Gadget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let gadgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let g = DynamicObject::new("g", &ar).data(json!({"spec": {"x": 1}}));
    wait_for("gadgets served", T, || {
        let gadgets = gadgets.clone();
        let g = g.clone();
        async move {
            gadgets
                .create(&PostParams::default(), &g)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    let deleted = gadgets.delete("g", &dp).await.unwrap();
    let status = deleted
        .right()
        .expect("custom resource delete answers a Status");
    assert_eq!(status.details.unwrap().name, "g");
}

/// kube formats unset Go fields in its selectable fields (`fmt.Sprint(false)`,
/// `strconv.Itoa(0)`): `spec.unschedulable==false` selects uncordoned Nodes, whose
/// stored spec has no `unschedulable`, and `status.successful=0` selects Jobs that
/// have no `status.succeeded` yet. Failed before the fix: both matched nothing.
#[tokio::test]
async fn field_selectors_match_unset_fields_as_kube_formats_them() {
    let mut opts = DevClusterOpts::new("fieldsel");
    opts.nodes = 2;
    let dc = DevCluster::start(opts).expect("start devcluster");
    let client = dc.client().await.unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let schedulable = ListParams::default().fields("spec.unschedulable==false");
    assert_eq!(nodes.list(&schedulable).await.unwrap().items.len(), 2);
    nodes.cordon("node-1").await.unwrap();
    let left: Vec<String> = nodes
        .list(&schedulable)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    assert_eq!(left, vec!["node-2".to_string()]);
    let cordoned = ListParams::default().fields("spec.unschedulable=true");
    assert_eq!(nodes.list(&cordoned).await.unwrap().items.len(), 1);

    let jobs: Api<Job> = Api::namespaced(client, "default");
    let job: Job = from_json(json!({
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox"}]}}}
    }));
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let not_done = ListParams::default().fields("status.successful=0");
    assert_eq!(jobs.list(&not_done).await.unwrap().items.len(), 1);
    let done = ListParams::default().fields("status.successful=1");
    assert!(jobs.list(&done).await.unwrap().items.is_empty());
}

/// `Accept: application/json;as=PartialObjectMetadata[List];g=meta.k8s.io;v=v1`
/// answers metadata only on get, list, watch and patch (kube-rs `get_metadata`,
/// `list_metadata`, `patch_metadata`, `metadata_watcher`). Failed before the fix:
/// the full ConfigMap came back (with `data`, kind ConfigMap).
#[tokio::test]
async fn partial_object_metadata_on_get_list_watch_and_patch() {
    let dc = start("partial-meta");
    let client = dc.client().await.unwrap();
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let cm: ConfigMap =
        from_json(json!({"metadata": {"name": "m", "labels": {"a": "b"}}, "data": {"k": "v"}}));
    cms.create(&PostParams::default(), &cm).await.unwrap();

    // Raw requests, to see the exact kinds and that no data leaks through.
    let raw = |path: &str, accept: &str| {
        http::Request::get(path)
            .header(http::header::ACCEPT, accept)
            .body(Vec::new())
            .unwrap()
    };
    const ONE: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";
    const LIST: &str = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1";
    let got: serde_json::Value = client
        .request(raw("/api/v1/namespaces/default/configmaps/m", ONE))
        .await
        .unwrap();
    assert_eq!(got["kind"], "PartialObjectMetadata");
    assert_eq!(got["apiVersion"], "meta.k8s.io/v1");
    assert_eq!(got["metadata"]["labels"]["a"], "b");
    assert!(got.get("data").is_none(), "{got}");
    let listed: serde_json::Value = client
        .request(raw("/api/v1/namespaces/default/configmaps", LIST))
        .await
        .unwrap();
    assert_eq!(listed["kind"], "PartialObjectMetadataList");
    assert!(
        listed["metadata"]["resourceVersion"].is_string(),
        "{listed}"
    );
    let m = listed["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["metadata"]["name"] == "m")
        .expect("m listed");
    assert_eq!(m["kind"], "PartialObjectMetadata");
    assert!(m.get("data").is_none());

    // kube-rs's typed metadata calls.
    let meta = cms.get_metadata("m").await.unwrap();
    assert_eq!(meta.metadata.name.as_deref(), Some("m"));
    let all = cms.list_metadata(&ListParams::default()).await.unwrap();
    assert!(all
        .items
        .iter()
        .any(|i| i.metadata.name.as_deref() == Some("m")));
    let patched = cms
        .patch_metadata(
            "m",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"c": "d"}}})),
        )
        .await
        .unwrap();
    assert_eq!(
        patched.types.as_ref().map(|t| t.kind.as_str()),
        Some("PartialObjectMetadata")
    );
    assert_eq!(patched.metadata.labels.unwrap()["c"], "d");

    // A raw watch: every event's object is PartialObjectMetadata.
    let mut events = cms
        .watch_metadata(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    let first = tokio::time::timeout(T, events.next())
        .await
        .expect("a watch event")
        .expect("stream open")
        .unwrap();
    match first {
        WatchEvent::Added(o) => {
            assert_eq!(
                o.types.map(|t| t.kind),
                Some("PartialObjectMetadata".into())
            );
        }
        other => panic!("expected ADDED, got {other:?}"),
    }

    // A metadata-only watcher (kube-rs 5's replacement for `metadata_watcher`) sees
    // the later change.
    let metas: Api<PartialObjectMeta<ConfigMap>> = Api::namespaced(client.clone(), "default");
    let mut w = watcher(metas, watcher::Config::default())
        .applied_objects()
        .boxed();
    cms.patch(
        "m",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"e": "f"}}})),
    )
    .await
    .unwrap();
    wait_for_label(&mut w, "e").await;
}

async fn wait_for_label<S>(w: &mut S, label: &str)
where
    S: futures::Stream<Item = Result<PartialObjectMeta<ConfigMap>, watcher::Error>> + Unpin,
{
    let deadline = tokio::time::Instant::now() + T;
    loop {
        let ev = tokio::time::timeout_at(deadline, w.next())
            .await
            .unwrap_or_else(|_| panic!("no metadata event with label {label}"))
            .expect("watcher open")
            .unwrap();
        assert_eq!(
            ev.types.as_ref().map(|t| t.kind.as_str()),
            Some("PartialObjectMetadata")
        );
        if ev.metadata.labels.unwrap_or_default().contains_key(label) {
            return;
        }
    }
}

/// What kube-apiserver has from the start and kube-rs's cluster tests read:
/// `default/kubernetes` (Service, Endpoints at this server, EndpointSlice), the
/// bootstrap ClusterRoles/bindings, APIServices, componentstatuses. Failed before
/// the fix: every one of these was 404.
#[tokio::test]
async fn bootstrap_objects_exist_from_the_start() {
    let dc = start("bootstrap");
    let client = dc.client().await.unwrap();
    let svc: Service = Api::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    let spec = svc.spec.unwrap();
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.1"));
    assert_eq!(spec.ports.unwrap()[0].port, 443);
    let ep: Endpoints = Api::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    let subset = &ep.subsets.unwrap()[0];
    assert_eq!(
        subset.ports.as_ref().unwrap()[0].port,
        i32::from(dc.port()),
        "the Endpoints point at this server"
    );
    let slice: EndpointSlice = Api::namespaced(client.clone(), "default")
        .get("kubernetes")
        .await
        .unwrap();
    assert_eq!(slice.ports.unwrap()[0].port, Some(i32::from(dc.port())));

    let roles: Api<ClusterRole> = Api::all(client.clone());
    let admin = roles.get("cluster-admin").await.unwrap();
    assert_eq!(admin.rules.unwrap()[0].verbs, vec!["*".to_string()]);
    for name in [
        "admin",
        "edit",
        "view",
        "system:discovery",
        "system:basic-user",
        "system:public-info-viewer",
    ] {
        roles
            .get(name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    let view = roles.get("view").await.unwrap();
    assert!(view.aggregation_rule.is_some());
    assert_eq!(
        view.metadata.labels.unwrap()["rbac.authorization.k8s.io/aggregate-to-edit"],
        "true"
    );
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    let b = bindings.get("cluster-admin").await.unwrap();
    assert_eq!(b.subjects.unwrap()[0].name, "system:masters");

    let apis: Api<APIService> = Api::all(client.clone());
    let apps = apis.get("v1.apps").await.unwrap();
    assert_eq!(
        apps.status.unwrap().conditions.unwrap()[0]
            .reason
            .as_deref(),
        Some("Local")
    );
    apis.get("v1.").await.unwrap();

    let cs: Api<ComponentStatus> = Api::all(client.clone());
    let all = cs.list(&ListParams::default()).await.unwrap();
    assert!(all
        .items
        .iter()
        .all(|c| c.conditions.as_ref().unwrap()[0].status == "True"));
    assert!(cs.delete("etcd-0", &DeleteParams::default()).await.is_err());
    let out = dc.kubectl("1.33", &["get", "componentstatuses"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("v1 ComponentStatus is deprecated in v1.19+"),
        "kubectl prints kube's deprecation warning: {stderr}"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("etcd-0"));

    // replicationcontrollers are served (kubectl and kube-rs tests list them).
    let rcs: Api<ReplicationController> = Api::namespaced(client, "default");
    let rc: ReplicationController = from_json(json!({
        "metadata": {"name": "rc"},
        "spec": {"replicas": 1, "selector": {"app": "x"},
            "template": {"metadata": {"labels": {"app": "x"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    }));
    rcs.create(&PostParams::default(), &rc).await.unwrap();
    assert_eq!(
        rcs.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
}

/// TokenReview answers from the token store: a minted ServiceAccount token is
/// authenticated as that ServiceAccount with the requested audiences; an unknown
/// token is not. Failed before the fix: tokenreviews was 404.
#[tokio::test]
async fn token_review_answers_from_the_token_store() {
    let dc = start("tokenreview");
    let client = dc.client().await.unwrap();
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    sas.create(
        &PostParams::default(),
        &from_json(json!({"metadata": {"name": "robot"}})),
    )
    .await
    .unwrap();
    let tr = sas
        .create_token_request(
            "robot",
            &PostParams::default(),
            &from_json(json!({"spec": {"audiences": ["api"]}})),
        )
        .await
        .unwrap();
    let token = tr.status.unwrap().token;
    let reviews: Api<TokenReview> = Api::all(client);
    let review = |token: String| {
        from_json::<TokenReview>(json!({"spec": {"token": token, "audiences": ["api"]}}))
    };
    let ok = reviews
        .create(&PostParams::default(), &review(token))
        .await
        .unwrap()
        .status
        .unwrap();
    assert_eq!(ok.authenticated, Some(true));
    assert_eq!(ok.audiences, Some(vec!["api".to_string()]));
    assert_eq!(
        ok.user.unwrap().username.as_deref(),
        Some("system:serviceaccount:default:robot")
    );
    let bad = reviews
        .create(&PostParams::default(), &review("nope".into()))
        .await
        .unwrap()
        .status
        .unwrap();
    assert_ne!(bad.authenticated, Some(true));
    assert!(bad.error.is_some());
    assert!(reviews.get("x").await.is_err(), "create-only");
}

/// `certificatesigningrequests/approval` changes only `status.conditions`;
/// `pods/ephemeralcontainers` only `spec.ephemeralContainers`. Failed before the
/// fix: both resources/subresources were 404.
#[tokio::test]
async fn csr_approval_and_ephemeral_containers_subresources() {
    let dc = start("csr");
    let client = dc.client().await.unwrap();
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr: CertificateSigningRequest = from_json(json!({
        "metadata": {"name": "fake"},
        "spec": {"request": "cmVx", "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"]}
    }));
    csrs.create(&PostParams::default(), &csr).await.unwrap();
    let approval = json!({"status": {
        "conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "ok"}],
        "certificate": "Y2VydA=="}, "spec": {"signerName": "changed"}});
    csrs.patch_approval("fake", &PatchParams::default(), &Patch::Merge(approval))
        .await
        .unwrap();
    let got = csrs.get_approval("fake").await.unwrap();
    let status = got.status.unwrap();
    assert_eq!(status.conditions.unwrap()[0].type_, "Approved");
    assert!(
        status.certificate.is_none(),
        "approval sets only conditions"
    );
    assert_eq!(got.spec.signer_name, "kubernetes.io/kube-apiserver-client");

    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod: Pod = from_json(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }));
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let patch = json!({"spec": {
        "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
        "containers": [{"name": "c", "image": "changed"}]}});
    pods.patch_ephemeral_containers("p", &PatchParams::default(), &Patch::Strategic(patch))
        .await
        .unwrap();
    let got = pods.get_ephemeral_containers("p").await.unwrap();
    let spec = got.spec.unwrap();
    assert_eq!(spec.ephemeral_containers.unwrap()[0].name, "debug");
    assert_eq!(spec.containers[0].image.as_deref(), Some("busybox"));
}
