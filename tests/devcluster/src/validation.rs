//! `fieldValidation=Strict`: finds fields an object's schema does not declare.
//!
//! Built-in kinds are checked against the OpenAPI schemas generated from
//! k8s-openapi (see [`schemas`]); custom resources against their CRD's
//! openAPIV3Schema, honouring `x-kubernetes-preserve-unknown-fields`, with
//! `metadata` checked as ObjectMeta as kube-apiserver does.

pub mod crd_cel;
pub mod crd_schema;
pub mod crd_structural;
pub mod formats;
pub mod object;
pub mod schemas;

use crate::resources::ResourceDef;
use serde_json::Value;

/// Returns the paths of unknown fields in `obj`, formatted like kube's strict
/// decoding errors (`dota`, `spec.template.spec.containers[0].imagee`), in
/// document order. Empty when the kind has no known schema.
pub fn unknown_fields(def: &ResourceDef, obj: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if def.custom {
        let Some(schema) = &def.schema else {
            return out;
        };
        let Some(map) = obj.as_object() else {
            return out;
        };
        for (k, v) in map {
            match k.as_str() {
                "apiVersion" | "kind" => {}
                "metadata" => {
                    if let Some(meta) = schemas::definitions().get(schemas::OBJECT_META) {
                        walk(meta, v, k, &mut out, false);
                    }
                }
                _ => match property(schema, k) {
                    Some(s) => walk(s, v, k, &mut out, true),
                    None if allows_unknown(schema) => {}
                    None => out.push(k.clone()),
                },
            }
        }
        return out;
    }
    let Some(name) = schemas::builtin_definition(&def.group, &def.kind) else {
        return out;
    };
    if let Some(schema) = schemas::definitions().get(name) {
        walk(schema, obj, "", &mut out, false);
    }
    out
}

fn allows_unknown(schema: &Value) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
        || schema.get("additionalProperties") == Some(&Value::Bool(true))
}

/// The schema of property `k` (or of every property via `additionalProperties`).
fn property<'a>(schema: &'a Value, k: &str) -> Option<&'a Value> {
    let schema = schemas::resolve(schema);
    schema
        .get("properties")
        .and_then(|p| p.get(k))
        .or_else(|| schema.get("additionalProperties").filter(|a| a.is_object()))
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

/// `strict_objects`: an object schema with neither properties nor
/// additionalProperties accepts nothing (CRD structural schemas). Built-in
/// schemas use such empty schemas for free-form types (RawExtension), so
/// there it accepts anything.
fn walk(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>, strict_objects: bool) {
    let schema = schemas::resolve(schema);
    if allows_unknown(schema) {
        return;
    }
    match v {
        Value::Object(m)
            if schema.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) =>
        {
            // An embedded object keeps apiVersion and kind, and its metadata is
            // pruned as ObjectMeta, whatever its schema declares (kube's pruning).
            let mut rest = m.clone();
            for k in ["apiVersion", "kind", "metadata"] {
                rest.remove(k);
            }
            if let Some(meta) = m.get("metadata") {
                if let Some(om) = schemas::definitions().get(schemas::OBJECT_META) {
                    walk(om, meta, &join(path, "metadata"), out, false);
                }
            }
            let mut plain = schema.clone();
            if let Some(o) = plain.as_object_mut() {
                o.remove("x-kubernetes-embedded-resource");
            }
            walk(&plain, &Value::Object(rest), path, out, strict_objects);
        }
        Value::Object(m) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            if props.is_none() && additional.is_none() {
                let declared_object = schema.get("type").and_then(Value::as_str) == Some("object");
                if strict_objects && declared_object {
                    out.extend(m.keys().map(|k| join(path, k)));
                }
                return;
            }
            for (k, child) in m {
                match props.and_then(|p| p.get(k)).or(additional) {
                    Some(s) => walk(s, child, &join(path, k), out, strict_objects),
                    None => out.push(join(path, k)),
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(
                        item_schema,
                        item,
                        &format!("{path}[{i}]"),
                        out,
                        strict_objects,
                    );
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;
    use serde_json::json;

    fn def(kind: &str) -> ResourceDef {
        builtins().into_iter().find(|d| d.kind == kind).unwrap()
    }

    #[test]
    fn configmap_typo_is_reported() {
        let cm = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x","labels":{"a":"b"}},
            "data":{"k":"v"},"dota":{"k":"v"}});
        assert_eq!(unknown_fields(&def("ConfigMap"), &cm), ["dota"]);
    }

    #[test]
    fn deployment_container_typo_is_reported() {
        let d = json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"w"},
            "spec":{"replicas":1,"selector":{"matchLabels":{"app":"w"}},
              "template":{"metadata":{"labels":{"app":"w"}},
                "spec":{"containers":[{"name":"a","image":"nginx","ports":[{"containerPort":80}],
                    "env":[{"name":"A","valueFrom":{"fieldRef":{"fieldPath":"metadata.name"}}}],
                    "resources":{"limits":{"cpu":"1"}}},
                  {"name":"b","imagee":"x"}]}}}});
        assert_eq!(
            unknown_fields(&def("Deployment"), &d),
            ["spec.template.spec.containers[1].imagee"]
        );
    }

    #[test]
    fn valid_objects_report_nothing() {
        let objs = [
            (
                "Namespace",
                json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"n"},"spec":{"finalizers":["kubernetes"]},"status":{"phase":"Active"}}),
            ),
            (
                "Secret",
                json!({"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","managedFields":[{"manager":"m","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:data":{}}}]},"type":"Opaque","stringData":{"a":"b"},"data":{"c":"ZA=="}}),
            ),
            (
                "Service",
                json!({"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"ports":[{"port":80,"targetPort":"http"}],"selector":{"a":"b"}}}),
            ),
            (
                "CustomResourceDefinition",
                json!({"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition",
                "metadata":{"name":"widgets.example.com"},
                "spec":{"group":"example.com","names":{"kind":"Widget","plural":"widgets"},"scope":"Namespaced",
                  "versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object",
                    "properties":{"spec":{"type":"object","x-kubernetes-preserve-unknown-fields":true,
                      "properties":{"size":{"type":"integer"}}}}}}}]}}),
            ),
        ];
        for (kind, obj) in objs {
            assert_eq!(
                unknown_fields(&def(kind), &obj),
                Vec::<String>::new(),
                "{kind}"
            );
        }
    }

    /// A custom `example.com` Widget checked against `schema`.
    fn widget(schema: Value) -> ResourceDef {
        ResourceDef {
            custom: true,
            schema: Some(schema),
            group: "example.com".into(),
            kind: "Widget".into(),
            ..def("ConfigMap")
        }
    }

    #[test]
    fn custom_resources_use_their_schema() {
        let schema = json!({"type":"object","properties":{
            "spec":{"type":"object","properties":{"size":{"type":"integer"},
                "items":{"type":"array","items":{"type":"object","properties":{"id":{"type":"string"}}}},
                "free":{"type":"object","x-kubernetes-preserve-unknown-fields":true},
                "labels":{"type":"object","additionalProperties":{"type":"string"}}}},
            "status":{"type":"object"}}});
        let def = widget(schema);
        let ok = json!({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","labels":{"a":"b"}},
            "spec":{"size":1,"items":[{"id":"x"}],"free":{"any":{"thing":1}},"labels":{"x":"y"}}});
        assert_eq!(unknown_fields(&def, &ok), Vec::<String>::new());
        let bad = json!({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","lables":{}},
            "spec":{"sise":1,"items":[{"id":"x","extra":1}]},"status":{"x":1},"top":1});
        assert_eq!(
            unknown_fields(&def, &bad),
            [
                "metadata.lables",
                "spec.items[0].extra",
                "spec.sise",
                "status.x",
                "top"
            ]
        );
    }

    #[test]
    fn embedded_resources_keep_type_meta_and_prune_metadata_as_object_meta() {
        let schema = json!({"type":"object","properties":{"spec":{"type":"object","properties":{
            "template":{"type":"object","x-kubernetes-embedded-resource":true,
                "properties":{"spec":{"type":"object","properties":{"a":{"type":"string"}}}}}}}}});
        let def = widget(schema);
        let obj = json!({"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w"},
            "spec":{"template":{"apiVersion":"v1","kind":"Pod",
                "metadata":{"name":"p","labels":{"x":"y"},"bogus":1},
                "spec":{"a":"b","c":1},"extra":true}}});
        assert_eq!(
            unknown_fields(&def, &obj),
            [
                "spec.template.metadata.bogus",
                "spec.template.extra",
                "spec.template.spec.c"
            ]
        );
    }
}
