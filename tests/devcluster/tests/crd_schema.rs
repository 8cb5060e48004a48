//! Custom resources are defaulted and validated against their CRD's structural
//! schema on every write path (kube-rs 5.0 against a real devcluster process).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::raw;

use fleetbus_testsupport::{wait_for, DevCluster, DevClusterOpts};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Client, Error};
use serde_json::{json, Value};
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn gadget_crd(extra_default: Option<&str>) -> CustomResourceDefinition {
    let mut tier = json!({"type": "string", "enum": ["gold", "silver"]});
    if let Some(d) = extra_default {
        tier["default"] = json!(d);
    }
    serde_json::from_value(raw::gadget_crd(json!({
        "subresources": {"status": {}, "scale": {
            "specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "required": ["name"], "properties": {
                "name": {"type": "string", "minLength": 3},
                "replicas": {"type": "integer", "minimum": 0, "maximum": 5, "default": 1},
                "tier": tier,
                "port": {"x-kubernetes-int-or-string": true}
            }},
            "status": {"type": "object", "properties": {
                "phase": {"type": "string", "enum": ["Ready", "Pending"]}
            }}
        }}}
    })))
    .unwrap()
}

async fn setup(name: &str) -> (DevCluster, Client, Api<DynamicObject>) {
    let dc = DevCluster::start(DevClusterOpts::new(name)).expect("start devcluster");
    let client = dc.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &gadget_crd(None))
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Gadget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
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
    (dc, client, api)
}

fn gadget(name: &str, spec: Value) -> DynamicObject {
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Gadget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let mut g = DynamicObject::new(name, &ar);
    g.data = json!({ "spec": spec });
    g
}

fn invalid(e: Error) -> Box<kube::core::Status> {
    match e {
        Error::Api(s) => {
            assert_eq!(s.code, 422, "{s:?}");
            assert_eq!(s.reason, "Invalid", "{s:?}");
            s
        }
        other => panic!("expected 422 Invalid, got {other:?}"),
    }
}

#[tokio::test]
async fn invalid_custom_resources_are_rejected_with_kube_messages() {
    let (_dc, _client, api) = setup("crdschema").await;
    let pp = PostParams::default();

    let s = invalid(
        api.create(&pp, &gadget("g1", json!({"name": ""})))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        s.message,
        "Gadget.example.com \"g1\" is invalid: spec.name: Invalid value: \"\": spec.name in body should be at least 3 chars long"
    );

    // Every violation is one cause of a single Status.
    let s = invalid(
        api.create(
            &pp,
            &gadget("g2", json!({"replicas": 9, "tier": "bronze", "port": true})),
        )
        .await
        .unwrap_err(),
    );
    let causes: Vec<(String, String)> = s
        .details
        .unwrap()
        .causes
        .into_iter()
        .map(|c| (c.field, c.message))
        .collect();
    assert_eq!(
        causes,
        [
            ("spec.name", "Required value"),
            (
                "spec.port",
                "Invalid value: \"boolean\": spec.port in body must be of type integer,string: \"boolean\""
            ),
            (
                "spec.replicas",
                "Invalid value: 9: spec.replicas in body should be less than or equal to 5"
            ),
            (
                "spec.tier",
                "Unsupported value: \"bronze\": supported values: \"gold\", \"silver\""
            ),
        ]
        .map(|(f, m)| (f.to_string(), m.to_string()))
    );

    // A valid create is defaulted.
    let g = api
        .create(&pp, &gadget("good", json!({"name": "abc", "port": 80})))
        .await
        .unwrap();
    assert_eq!(g.data["spec"]["replicas"], 1, "default applied on create");

    // Every write path validates its result.
    let bad = json!({"spec": {"tier": "bronze"}});
    invalid(
        api.patch("good", &PatchParams::default(), &Patch::Merge(&bad))
            .await
            .unwrap_err(),
    );
    let mut replaced = api.get("good").await.unwrap();
    replaced.data["spec"]["replicas"] = json!(-1);
    invalid(api.replace("good", &pp, &replaced).await.unwrap_err());
    let applied = json!({"apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "good"}, "spec": {"name": "abc", "replicas": 6}});
    invalid(
        api.patch(
            "good",
            &PatchParams::apply("t").force(),
            &Patch::Apply(&applied),
        )
        .await
        .unwrap_err(),
    );
    let st = json!({"status": {"phase": "Broken"}});
    let s = invalid(
        api.patch_status("good", &PatchParams::default(), &Patch::Merge(&st))
            .await
            .unwrap_err(),
    );
    assert!(
        s.message.ends_with(
            "status.phase: Unsupported value: \"Broken\": supported values: \"Ready\", \"Pending\""
        ),
        "{}",
        s.message
    );
    let scale = json!({"spec": {"replicas": 9}});
    let s = invalid(
        api.patch_scale("good", &PatchParams::default(), &Patch::Merge(&scale))
            .await
            .unwrap_err(),
    );
    assert_eq!(
        s.message,
        "Gadget.example.com \"good\" is invalid: spec.replicas: Invalid value: 9: spec.replicas in body should be less than or equal to 5"
    );
    // Nothing was stored by the rejected writes.
    let now = api.get("good").await.unwrap();
    assert_eq!(
        now.data["spec"],
        json!({"name": "abc", "port": 80, "replicas": 1})
    );

    // Removing a defaulted field defaults it again (a null is dropped first).
    let unset = json!({"spec": {"replicas": null}});
    let g = api
        .patch("good", &PatchParams::default(), &Patch::Merge(&unset))
        .await
        .unwrap();
    assert_eq!(g.data["spec"]["replicas"], 1);
}

#[tokio::test]
async fn defaults_added_to_the_crd_later_apply_on_read() {
    let (_dc, client, api) = setup("crddefault").await;
    api.create(&PostParams::default(), &gadget("g", json!({"name": "abc"})))
        .await
        .unwrap();
    assert!(api.get("g").await.unwrap().data["spec"]
        .get("tier")
        .is_none());
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut crd = gadget_crd(Some("silver"));
    crd.metadata.resource_version = crds
        .get("gadgets.example.com")
        .await
        .unwrap()
        .metadata
        .resource_version;
    crds.replace("gadgets.example.com", &PostParams::default(), &crd)
        .await
        .unwrap();
    wait_for("stored gadget read with the new default", T, || {
        let api = api.clone();
        async move {
            let g = api.get("g").await.map_err(|e| e.to_string())?;
            if g.data["spec"]["tier"] == "silver" {
                Ok(())
            } else {
                Err(format!("spec is {}", g.data["spec"]))
            }
        }
    })
    .await;
    let listed = api.list(&Default::default()).await.unwrap();
    assert_eq!(listed.items[0].data["spec"]["tier"], "silver");
}

#[tokio::test]
async fn non_structural_crds_are_rejected() {
    let dc = DevCluster::start(DevClusterOpts::new("crdstruct")).expect("start devcluster");
    let client = dc.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client);
    let mut crd = gadget_crd(None);
    let schema = crd.spec.versions[0].schema.as_mut().unwrap();
    let root = schema.open_api_v3_schema.as_mut().unwrap();
    let spec = root.properties.as_mut().unwrap().get_mut("spec").unwrap();
    spec.type_ = None;
    let s = invalid(crds.create(&PostParams::default(), &crd).await.unwrap_err());
    assert_eq!(
        s.message,
        "CustomResourceDefinition.apiextensions.k8s.io \"gadgets.example.com\" is invalid: \
         spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: \
         must not be empty for specified object fields"
    );
    assert!(crds.get_opt("gadgets.example.com").await.unwrap().is_none());
}

/// A CRD whose rule loops three deep over lists its schema bounds (`maxItems`)
/// is admitted, and refused without the bounds; a failing rule says what its
/// `messageExpression` makes. Failed before: the bounded CRD was refused
/// (every list counted as 100 elements) and the message was the static one.
#[tokio::test]
async fn rules_are_estimated_with_schema_bounds_and_say_their_message_expression() {
    let dc = DevCluster::start(DevClusterOpts::new("cel-bounds")).expect("start devcluster");
    let client = dc.client().await.unwrap();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = |max_items: Option<u64>| {
        let list = |items: Value| {
            let mut l = json!({"type": "array", "items": items});
            if let Some(m) = max_items {
                l["maxItems"] = json!(m);
            }
            l
        };
        let pins = list(json!({"type": "integer"}));
        let parts = list(json!({"type": "object", "properties": {"pins": pins}}));
        let boards = list(json!({"type": "object", "properties": {"parts": parts}}));
        serde_json::from_value::<CustomResourceDefinition>(raw::gadget_crd(json!({
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object",
                    "x-kubernetes-validations": [{
                        "rule": "self.boards.all(b, b.parts.all(p, p.pins.all(n, n >= 0)))",
                        "message": "pins must not be negative",
                        "messageExpression": "'pins must not be negative, ' + string(size(self.boards)) + ' boards checked'",
                    }],
                    "properties": {"boards": boards}}}}}
        })))
        .unwrap()
    };
    let refused = crds
        .create(&PostParams::default(), &crd(None))
        .await
        .unwrap_err();
    let s = invalid(refused);
    assert!(s.message.contains("too costly"), "{}", s.message);

    crds.create(&PostParams::default(), &crd(Some(10)))
        .await
        .unwrap();
    let gvk = GroupVersionKind::gvk("example.com", "v1", "Gadget");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "gadgets");
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let bad = gadget(
        "g",
        json!({"boards": [{"parts": [{"pins": [1, -1]}]}, {"parts": []}]}),
    );
    let s = wait_for("gadgets served and validated", T, || {
        let api = api.clone();
        let bad = bad.clone();
        async move {
            match api.create(&PostParams::default(), &bad).await {
                Err(Error::Api(s)) if s.code == 422 => Ok(s),
                other => Err(format!("{other:?}")),
            }
        }
    })
    .await;
    assert_eq!(
        s.message,
        "Gadget.example.com \"g\" is invalid: spec: Invalid value: \"object\": \
         pins must not be negative, 2 boards checked"
    );
    let good = gadget("g", json!({"boards": [{"parts": [{"pins": [1, 2]}]}]}));
    api.create(&PostParams::default(), &good).await.unwrap();
}
