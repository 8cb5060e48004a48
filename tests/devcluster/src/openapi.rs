//! OpenAPI documents: the `/openapi/v3` discovery root, one OpenAPI 3.0
//! document per group-version, and a minimal protobuf `/openapi/v2`.
//!
//! What clients read from them:
//! - kubectl ≥1.29 sends `fieldValidation=Strict` (and skips client-side
//!   validation) when the `patch` operation of a GVK carries
//!   `x-kubernetes-group-version-kind` and a `fieldValidation` parameter
//!   (cli-runtime `query_param_verifier_v3.go`).
//! - `kubectl explain` reads `components/schemas` entries tagged with the GVK.
//! - kubectl apply computes its strategic merge patch from these schemas only
//!   when the patch operation lists `application/strategic-merge-patch+json`.
//!   The generated schemas carry no `x-kubernetes-patch-merge-key`
//!   extensions, so that content type is deliberately left out: kubectl then
//!   falls back to its compiled-in types, which know the merge keys.

use crate::resources::ResourceDef;
use crate::validation::schemas::{self, REF_PREFIX};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// Version reported in document `info` (matches the server's reported minor).
const INFO_VERSION: &str = "v1.33.0";

/// `"api/v1"` or `"apis/apps/v1"`.
fn gv_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The `/openapi/v3` root: one entry per served group-version, each with a
/// content hash so kubectl's cache notices changes (e.g. a CRD added).
pub fn v3_root(defs: &[ResourceDef]) -> Value {
    let mut gvs: Vec<(&str, &str)> = defs
        .iter()
        .map(|d| (d.group.as_str(), d.version.as_str()))
        .collect();
    gvs.sort_unstable();
    gvs.dedup();
    let mut paths = Map::new();
    for (g, v) in gvs {
        let Some(doc) = cached_group_version(defs, g, v) else {
            continue;
        };
        let hash = &doc.hash;
        let key = gv_key(g, v);
        paths.insert(
            key.clone(),
            json!({ "serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}") }),
        );
    }
    json!({ "paths": paths })
}

fn query_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "query", "description": description,
           "schema": {"type": "string", "uniqueItems": true}})
}

fn path_param(name: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": format!("{name} of the resource"),
           "schema": {"type": "string", "uniqueItems": true}})
}

fn write_params() -> Vec<Value> {
    vec![
        query_param("dryRun", "When present, indicates that modifications should not be persisted."),
        query_param("fieldManager", "fieldManager is a name associated with the actor or entity that is making these changes."),
        query_param("fieldValidation", "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields: Ignore, Warn or Strict."),
    ]
}

struct OpSpec<'a> {
    def: &'a ResourceDef,
    gvk: Value,
    schema_ref: Value,
}

impl OpSpec<'_> {
    fn op(&self, action: &str, verb: &str, params: Vec<Value>, body: Option<Vec<&str>>) -> Value {
        let mut op = json!({
            "operationId": format!("{verb}{}", self.def.kind),
            "x-kubernetes-action": action,
            "x-kubernetes-group-version-kind": self.gvk,
            "parameters": params,
            "responses": {"200": {"description": "OK",
                "content": {"application/json": {"schema": self.schema_ref}}}},
        });
        if let (Some(types), Some(m)) = (body, op.as_object_mut()) {
            let content: Map<String, Value> = types
                .into_iter()
                .map(|t| (t.to_string(), json!({"schema": self.schema_ref})))
                .collect();
            m.insert(
                "requestBody".into(),
                json!({"required": true, "content": content}),
            );
        }
        op
    }
}

fn patch_content_types() -> Vec<&'static str> {
    vec![
        "application/json-patch+json",
        "application/merge-patch+json",
        "application/apply-patch+yaml",
    ]
}

fn add_paths(paths: &mut Map<String, Value>, def: &ResourceDef, schema_name: &str) {
    let base = format!("/{}", gv_key(&def.group, &def.version));
    let spec = OpSpec {
        def,
        gvk: json!({"group": def.group, "version": def.version, "kind": def.kind}),
        schema_ref: json!({ "$ref": format!("{REF_PREFIX}{schema_name}") }),
    };
    let scope = if def.namespaced {
        format!("{base}/namespaces/{{namespace}}/{}", def.plural)
    } else {
        format!("{base}/{}", def.plural)
    };
    let scope_params = |extra: Vec<Value>| -> Vec<Value> {
        let mut p = Vec::new();
        if def.namespaced {
            p.push(path_param("namespace"));
        }
        p.extend(extra);
        p
    };
    if def.create_only() {
        // Reviews are answered, never stored: kube documents only the POST.
        paths.insert(
            scope,
            json!({"post": spec.op("post", "create", write_params(), Some(vec!["application/json", "application/yaml"]))}),
        );
        return;
    }
    let mut with_force = write_params();
    with_force.push(query_param(
        "force",
        "Force is going to \"force\" Apply requests.",
    ));

    paths.insert(
        scope.clone(),
        json!({
            "get": spec.op("list", "list", scope_params(vec![]), None),
            "post": spec.op("post", "create", scope_params(write_params()), Some(vec!["application/json", "application/yaml"])),
            "delete": spec.op("deletecollection", "deleteCollection", scope_params(vec![]), None),
        }),
    );
    if def.namespaced {
        paths.insert(
            format!("{base}/{}", def.plural),
            json!({ "get": spec.op("list", "listAllNamespaces", vec![], None) }),
        );
    }
    let mut item = |suffix: &str, subresource: bool| {
        let named = |extra: Vec<Value>| {
            let mut p = scope_params(vec![path_param("name")]);
            p.extend(extra);
            p
        };
        let mut ops = Map::new();
        ops.insert("get".into(), spec.op("get", "read", named(vec![]), None));
        ops.insert(
            "put".into(),
            spec.op(
                "put",
                "replace",
                named(write_params()),
                Some(vec!["application/json", "application/yaml"]),
            ),
        );
        ops.insert(
            "patch".into(),
            spec.op(
                "patch",
                "patch",
                named(with_force.clone()),
                Some(patch_content_types()),
            ),
        );
        if !subresource {
            ops.insert(
                "delete".into(),
                spec.op("delete", "delete", named(write_params()), None),
            );
        }
        paths.insert(format!("{scope}/{{name}}{suffix}"), Value::Object(ops));
    };
    item("", false);
    if def.subresources.status {
        item("/status", true);
    }
}

/// Schema name kube uses for a CRD kind: reversed group, version, kind.
fn crd_schema_name(def: &ResourceDef) -> String {
    let group: Vec<&str> = def.group.split('.').rev().collect();
    format!("{}.{}.{}", group.join("."), def.version, def.kind)
}

fn gvk_ext(def: &ResourceDef) -> Value {
    json!([{"group": def.group, "version": def.version, "kind": def.kind}])
}

/// A built group-version document and its content hash.
struct GvDoc {
    doc: Value,
    hash: String,
}

/// Documents by the `Debug` rendering of the defs they were built from.
/// Building one clones and serialises hundreds of kilobytes of schemas, and
/// kubectl fetches the root (which needs every hash) on each invocation.
/// A std Mutex is fine: it is never held across an await.
static DOCS: LazyLock<Mutex<HashMap<String, Arc<GvDoc>>>> = LazyLock::new(Default::default);

/// Bound on [`DOCS`]; CRD churn in a long-lived server would otherwise grow it.
const MAX_CACHED_DOCS: usize = 256;

fn cached_group_version(defs: &[ResourceDef], group: &str, version: &str) -> Option<Arc<GvDoc>> {
    let served: Vec<&ResourceDef> = defs
        .iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if served.is_empty() {
        return None;
    }
    let key = format!("{served:?}");
    if let Some(hit) = DOCS.lock().ok().and_then(|m| m.get(&key).cloned()) {
        return Some(hit);
    }
    let doc = build_group_version(&served);
    let hash = hex::encode_upper(Sha256::digest(doc.to_string().as_bytes()));
    let built = Arc::new(GvDoc { doc, hash });
    if let Ok(mut m) = DOCS.lock() {
        if m.len() >= MAX_CACHED_DOCS {
            m.clear();
        }
        m.insert(key, built.clone());
    }
    Some(built)
}

/// The OpenAPI 3.0 document of one group-version, or None if nothing is served there.
pub fn v3_group_version(defs: &[ResourceDef], group: &str, version: &str) -> Option<Value> {
    cached_group_version(defs, group, version).map(|d| d.doc.clone())
}

fn build_group_version(served: &[&ResourceDef]) -> Value {
    let mut paths = Map::new();
    let mut components = Map::new();
    let mut roots: Vec<&str> = Vec::new();
    let mut kinds: Vec<(String, &ResourceDef)> = Vec::new();
    for def in served {
        let name = match (
            def.custom,
            schemas::builtin_definition(&def.group, &def.kind),
        ) {
            (false, Some(name)) => {
                roots.push(name);
                name.to_string()
            }
            (true, _) => {
                roots.push(schemas::OBJECT_META);
                let name = crd_schema_name(def);
                components.insert(name.clone(), crd_schema(def));
                name
            }
            (false, None) => {
                let name = crd_schema_name(def);
                components.insert(
                    name.clone(),
                    json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                );
                name
            }
        };
        add_paths(&mut paths, def, &name);
        kinds.push((name, *def));
    }
    for name in schemas::closure(&roots) {
        if let Some(s) = schemas::definitions().get(&name) {
            components.entry(name).or_insert_with(|| s.clone());
        }
    }
    for (name, def) in kinds {
        if let Some(Value::Object(s)) = components.get_mut(&name) {
            let ext = s
                .entry("x-kubernetes-group-version-kind")
                .or_insert_with(|| json!([]));
            if let Some(list) = ext.as_array_mut() {
                let gvk = gvk_ext(def);
                if let Some(one) = gvk.get(0) {
                    if !list.contains(one) {
                        list.push(one.clone());
                    }
                }
            }
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": INFO_VERSION},
        "paths": paths,
        "components": {"schemas": components},
    })
}

/// A CRD version's openAPIV3Schema with the standard object fields filled in.
fn crd_schema(def: &ResourceDef) -> Value {
    let mut s = def
        .schema
        .clone()
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    if let Some(m) = s.as_object_mut() {
        m.entry("type").or_insert_with(|| json!("object"));
        let props = m.entry("properties").or_insert_with(|| json!({}));
        if let Some(p) = props.as_object_mut() {
            p.insert("apiVersion".into(), json!({"type": "string"}));
            p.insert("kind".into(), json!({"type": "string"}));
            p.insert(
                "metadata".into(),
                json!({"allOf": [{"$ref": format!("{REF_PREFIX}{}", schemas::OBJECT_META)}]}),
            );
        }
    }
    s
}

/// A minimal gnostic `openapi_v2.Document` (`swagger: "2.0"` plus `info`),
/// hand-encoded protobuf: kubectl 1.27/1.28 `apply` needs `/openapi/v2` to
/// parse, and an empty document makes it fall back to its compiled-in types.
pub fn v2_protobuf() -> Vec<u8> {
    fn string_field(out: &mut Vec<u8>, field: u8, s: &str) {
        out.push(field << 3 | 2);
        push_len(out, s.len());
        out.extend_from_slice(s.as_bytes());
    }
    fn push_len(out: &mut Vec<u8>, mut n: usize) {
        // Varint.
        loop {
            let b = (n & 0x7f) as u8;
            n >>= 7;
            if n == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
    }
    let mut info = Vec::new();
    string_field(&mut info, 1, "Kubernetes");
    string_field(&mut info, 2, INFO_VERSION);
    let mut doc = Vec::new();
    string_field(&mut doc, 1, "2.0");
    doc.push(2 << 3 | 2);
    push_len(&mut doc, info.len());
    doc.extend(info);
    doc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    fn widget() -> ResourceDef {
        let cm = builtins()
            .into_iter()
            .find(|d| d.kind == "ConfigMap")
            .unwrap();
        ResourceDef {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            list_kind: "WidgetList".into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            custom: true,
            schema: Some(
                json!({"type":"object","properties":{"spec":{"type":"object",
                "properties":{"size":{"type":"integer"}}}}}),
            ),
            ..cm
        }
    }

    /// What cli-runtime's `supportsQueryParamV3` checks.
    fn supports_field_validation(doc: &Value, group: &str, version: &str, kind: &str) -> bool {
        let gvk = json!({"group": group, "version": version, "kind": kind});
        let patches: Vec<&Value> = doc["paths"]
            .as_object()
            .unwrap()
            .values()
            .filter_map(|p| p.get("patch"))
            .filter(|op| op["x-kubernetes-group-version-kind"] == gvk)
            .collect();
        !patches.is_empty()
            && patches.iter().all(|op| {
                op["parameters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|p| p["name"] == "fieldValidation")
            })
    }

    #[test]
    fn root_lists_every_group_version_with_a_hash_that_tracks_changes() {
        let defs = builtins();
        let root = v3_root(&defs);
        let paths = root["paths"].as_object().unwrap();
        assert!(paths.contains_key("api/v1"));
        assert!(paths.contains_key("apis/apps/v1"));
        let url = paths["api/v1"]["serverRelativeURL"].as_str().unwrap();
        assert!(url.starts_with("/openapi/v3/api/v1?hash="), "{url}");

        let mut with_crd = defs.clone();
        with_crd.push(widget());
        let root2 = v3_root(&with_crd);
        assert!(root2["paths"]["apis/example.com/v1"]["serverRelativeURL"].is_string());
        assert_eq!(root2["paths"]["api/v1"], root["paths"]["api/v1"]);
        let mut changed = with_crd.clone();
        if let Some(w) = changed.last_mut() {
            w.schema = Some(json!({"type":"object"}));
        }
        assert_ne!(
            v3_root(&changed)["paths"]["apis/example.com/v1"],
            root2["paths"]["apis/example.com/v1"]
        );
    }

    #[test]
    fn group_version_documents_advertise_field_validation_and_schemas() {
        let mut defs = builtins();
        defs.push(widget());
        let core = v3_group_version(&defs, "", "v1").unwrap();
        assert!(supports_field_validation(&core, "", "v1", "ConfigMap"));
        assert!(supports_field_validation(&core, "", "v1", "Namespace"));
        assert!(
            core["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"].is_object()
        );
        assert!(core["paths"]["/api/v1/namespaces/{name}"]["delete"].is_object());
        let cm = &core["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"];
        assert_eq!(
            cm["x-kubernetes-group-version-kind"],
            json!([{"group":"","version":"v1","kind":"ConfigMap"}])
        );
        assert!(cm["properties"]["data"].is_object());
        // Referenced definitions are included.
        assert!(core["components"]["schemas"][schemas::OBJECT_META].is_object());
        let apps = v3_group_version(&defs, "apps", "v1").unwrap();
        assert!(supports_field_validation(&apps, "apps", "v1", "Deployment"));
        assert!(apps["components"]["schemas"]["io.k8s.api.core.v1.PodSpec"].is_object());
        // No strategic content type: kubectl must compute patches from its own types.
        let patch =
            &apps["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}"]["patch"];
        assert!(patch["requestBody"]["content"]
            .get("application/strategic-merge-patch+json")
            .is_none());

        let ex = v3_group_version(&defs, "example.com", "v1").unwrap();
        assert!(supports_field_validation(
            &ex,
            "example.com",
            "v1",
            "Widget"
        ));
        let w = &ex["components"]["schemas"]["com.example.v1.Widget"];
        assert_eq!(
            w["properties"]["spec"]["properties"]["size"]["type"],
            "integer"
        );
        assert!(v3_group_version(&defs, "nope.io", "v1").is_none());
    }

    #[test]
    fn v2_protobuf_is_a_minimal_gnostic_document() {
        let b = v2_protobuf();
        assert_eq!(&b[..5], b"\x0a\x032.0");
        assert_eq!(b[5], 0x12);
        assert_eq!(b[6] as usize, b.len() - 7);
        assert_eq!(&b[7..9], b"\x0a\x0a");
        assert_eq!(&b[9..19], b"Kubernetes");
    }
}
