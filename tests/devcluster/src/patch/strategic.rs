//! Strategic merge patch (application/strategic-merge-patch+json).
//!
//! Follows apimachinery `strategicpatch.mergeMap` / `mergeSlice` with the
//! server-side options (`MergeParallelList`, `IgnoreUnmatchedNulls`):
//! maps merge recursively, `null` deletes a key, lists merge by the merge keys
//! of [`super::merge_keys`] or are replaced whole, and the directives `$patch`,
//! `$setElementOrder/<list>`, `$retainKeys` and `$deleteFromPrimitiveList/<list>`
//! are honoured. Other `$`-prefixed keys are ignored, as kube-apiserver does.

use super::merge_keys::{list_kind, ListKind};
use crate::resources::ResourceDef;
use serde_json::{Map, Value};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE: &str = "$deleteFromPrimitiveList/";

/// A strategic merge patch that cannot be applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StrategicError {
    /// The patch body is not a JSON object.
    #[error("strategic merge patch must be a JSON object")]
    NotAnObject,
    /// `$patch` has a value other than replace/delete (or merge in a list).
    #[error("unknown patch type: {directive} in map: {context}")]
    BadDirective {
        /// The offending value.
        directive: String,
        /// The map holding it.
        context: String,
    },
    /// A list element lacks the list's merge key.
    #[error("map: {element} does not contain declared merge key: {key}")]
    MissingMergeKey {
        /// The element.
        element: String,
        /// The merge key.
        key: String,
    },
    /// A directive's value has the wrong shape.
    #[error("invalid value for {directive}: {reason}")]
    BadDirectiveValue {
        /// Which directive.
        directive: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `$patch: delete` at the top level would delete the whole object.
    #[error("$patch: delete cannot be used on the whole object")]
    DeleteRoot,
}

/// Result of merging into a map: keep it, or delete it (`$patch: delete`).
enum Outcome {
    Keep,
    Delete,
}

struct Ctx<'a> {
    def: &'a ResourceDef,
    /// Field names from the object root to the current value (no indices).
    path: Vec<String>,
}

impl Ctx<'_> {
    fn list_kind(&self) -> ListKind {
        let p: Vec<&str> = self.path.iter().map(String::as_str).collect();
        list_kind(self.def, &p)
    }
}

/// Applies strategic merge `patch` to `live` for objects of `def`.
pub fn apply(def: &ResourceDef, live: &Value, patch: &Value) -> Result<Value, StrategicError> {
    let patch = patch.as_object().ok_or(StrategicError::NotAnObject)?;
    let mut result = live.as_object().cloned().unwrap_or_default();
    let mut ctx = Ctx {
        def,
        path: Vec::new(),
    };
    match merge_map(&mut ctx, &mut result, patch)? {
        Outcome::Keep => Ok(Value::Object(result)),
        Outcome::Delete => Err(StrategicError::DeleteRoot),
    }
}

fn merge_map(
    ctx: &mut Ctx<'_>,
    orig: &mut Map<String, Value>,
    patch: &Map<String, Value>,
) -> Result<Outcome, StrategicError> {
    if let Some(directive) = patch.get(PATCH) {
        match directive.as_str() {
            Some("replace") => {
                let mut replaced = Map::new();
                let rest: Map<String, Value> = patch
                    .iter()
                    .filter(|(k, _)| k.as_str() != PATCH)
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                merge_map(ctx, &mut replaced, &rest)?;
                *orig = replaced;
                return Ok(Outcome::Keep);
            }
            Some("delete") => return Ok(Outcome::Delete),
            _ => {
                return Err(StrategicError::BadDirective {
                    directive: directive.to_string(),
                    context: Value::Object(patch.clone()).to_string(),
                })
            }
        }
    }

    if let Some(retain) = patch.get(RETAIN_KEYS) {
        let keep: Vec<&str> = retain
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .ok_or_else(|| StrategicError::BadDirectiveValue {
                directive: RETAIN_KEYS.into(),
                reason: "must be a list of field names".into(),
            })?;
        orig.retain(|k, _| keep.contains(&k.as_str()));
    }

    // $deleteFromPrimitiveList/<list>: remove the given values from a primitive list.
    for (k, v) in patch {
        let Some(field) = k.strip_prefix(DELETE_FROM_PRIMITIVE) else {
            continue;
        };
        let remove = v
            .as_array()
            .ok_or_else(|| StrategicError::BadDirectiveValue {
                directive: k.clone(),
                reason: "must be a list".into(),
            })?;
        if let Some(Value::Array(list)) = orig.get_mut(field) {
            list.retain(|x| !remove.contains(x));
        }
    }

    for (k, pv) in patch {
        if k.starts_with('$') {
            continue;
        }
        let order = patch.get(&format!("{SET_ORDER}{k}"));
        if pv.is_null() {
            orig.remove(k);
            continue;
        }
        ctx.path.push(k.clone());
        let merged = merge_field(ctx, orig.remove(k), pv, order);
        ctx.path.pop();
        if let Some(v) = merged? {
            orig.insert(k.clone(), v);
        }
    }

    // $setElementOrder for lists the patch does not otherwise touch: reorder only.
    for (k, order) in patch {
        let Some(field) = k.strip_prefix(SET_ORDER) else {
            continue;
        };
        if patch.contains_key(field) {
            continue;
        }
        if let Some(Value::Array(list)) = orig.get_mut(field) {
            ctx.path.push(field.to_string());
            let kind = ctx.list_kind();
            ctx.path.pop();
            let server: Vec<Value> = list.clone();
            let items = std::mem::take(list);
            *list = order_by_set_element_order(items, &server, order, &kind)?;
        }
    }
    Ok(Outcome::Keep)
}

/// Merges one patch value into the (removed) original value of a field.
/// Returns None when the field is to be deleted.
fn merge_field(
    ctx: &mut Ctx<'_>,
    orig: Option<Value>,
    pv: &Value,
    order: Option<&Value>,
) -> Result<Option<Value>, StrategicError> {
    match (orig, pv) {
        (Some(Value::Object(mut o)), Value::Object(p)) => match merge_map(ctx, &mut o, p)? {
            Outcome::Keep => Ok(Some(Value::Object(o))),
            Outcome::Delete => Ok(None),
        },
        (Some(Value::Array(o)), Value::Array(p)) => {
            Ok(Some(Value::Array(merge_list(ctx, o, p, order)?)))
        }
        // Missing or of another type: the patch value wins, minus its directives and nulls.
        (_, Value::Object(p)) => {
            let mut fresh = Map::new();
            match merge_map(ctx, &mut fresh, p)? {
                Outcome::Keep => Ok(Some(Value::Object(fresh))),
                Outcome::Delete => Ok(None),
            }
        }
        (_, Value::Array(p)) => Ok(Some(Value::Array(merge_list(ctx, Vec::new(), p, order)?))),
        (_, other) => Ok(Some(other.clone())),
    }
}

/// Strips directives and nulls from a fresh value (merging it into nothing).
fn clean(ctx: &mut Ctx<'_>, v: &Value) -> Result<Option<Value>, StrategicError> {
    merge_field(ctx, None, v, None)
}

fn merge_list(
    ctx: &mut Ctx<'_>,
    orig: Vec<Value>,
    patch: &[Value],
    order: Option<&Value>,
) -> Result<Vec<Value>, StrategicError> {
    let kind = ctx.list_kind();
    let merged = match &kind {
        ListKind::Atomic => {
            let mut out = Vec::with_capacity(patch.len());
            for p in patch {
                match p {
                    Value::Object(_) => out.extend(clean(ctx, p)?),
                    other => out.push(other.clone()),
                }
            }
            return Ok(out);
        }
        ListKind::Set => merge_set(&orig, patch),
        ListKind::Map(keys) => {
            let Some(key) = keys.first() else {
                return Ok(patch.to_vec());
            };
            // A keyed list whose elements are not objects cannot merge by key.
            if patch.iter().chain(orig.iter()).any(|v| !v.is_object()) {
                return Ok(patch.to_vec());
            }
            merge_keyed(ctx, orig.clone(), patch, key)?
        }
    };
    match order {
        Some(order) => order_by_set_element_order(merged, &orig, order, &kind),
        None => {
            let patch_ids: Vec<Value> = patch
                .iter()
                .filter(|p| !is_directive_element(p))
                .filter_map(|p| element_id(p, &kind))
                .collect();
            Ok(order_elements(merged, &patch_ids, &orig, &kind))
        }
    }
}

fn is_directive_element(v: &Value) -> bool {
    v.get(PATCH).is_some()
}

/// Primitive lists merged as a set: union, keeping first occurrences.
/// A `{"$patch":"replace"}` element replaces the list with the other elements.
fn merge_set(orig: &[Value], patch: &[Value]) -> Vec<Value> {
    let replace = patch
        .iter()
        .any(|p| p.get(PATCH).and_then(Value::as_str) == Some("replace"));
    let plain = patch.iter().filter(|p| !is_directive_element(p)).cloned();
    let mut out: Vec<Value> = Vec::new();
    let source: Vec<Value> = if replace {
        plain.collect()
    } else {
        orig.iter().cloned().chain(plain).collect()
    };
    for v in source {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    out
}

fn merge_keyed(
    ctx: &mut Ctx<'_>,
    mut orig: Vec<Value>,
    patch: &[Value],
    key: &str,
) -> Result<Vec<Value>, StrategicError> {
    let missing_key = |p: &Value| StrategicError::MissingMergeKey {
        element: p.to_string(),
        key: key.to_string(),
    };
    let mut replace = false;
    let mut plain = Vec::new();
    for p in patch {
        match p.get(PATCH) {
            None => plain.push(p),
            Some(d) => match d.as_str() {
                Some("delete") => {
                    let id = p.get(key).ok_or_else(|| missing_key(p))?;
                    orig.retain(|o| o.get(key) != Some(id));
                }
                Some("replace") => replace = true,
                _ => {
                    return Err(StrategicError::BadDirective {
                        directive: d.to_string(),
                        context: p.to_string(),
                    })
                }
            },
        }
    }
    if replace {
        let mut out = Vec::new();
        for p in plain {
            out.extend(clean(ctx, p)?);
        }
        return Ok(out);
    }
    for p in plain {
        let id = p.get(key).ok_or_else(|| missing_key(p))?;
        let Value::Object(pm) = p else {
            continue;
        };
        match orig.iter().position(|o| o.get(key) == Some(id)) {
            Some(i) => {
                let mut target = match orig.get(i) {
                    Some(Value::Object(m)) => m.clone(),
                    _ => Map::new(),
                };
                match merge_map(ctx, &mut target, pm)? {
                    Outcome::Keep => orig[i] = Value::Object(target),
                    Outcome::Delete => {
                        orig.remove(i);
                    }
                }
            }
            None => orig.extend(clean(ctx, p)?),
        }
    }
    Ok(orig)
}

/// The identity of a list element: its merge-key value, or itself for sets.
fn element_id(v: &Value, kind: &ListKind) -> Option<Value> {
    match kind {
        ListKind::Map(keys) => keys.first().and_then(|k| v.get(k)).cloned(),
        _ => Some(v.clone()),
    }
}

fn index_of(ids: &[Value], v: &Value, kind: &ListKind) -> Option<usize> {
    let id = element_id(v, kind)?;
    ids.iter().position(|x| *x == id)
}

/// kube's `normalizeElementOrder`: elements named by `patch_ids` come in that
/// order, the others keep their server order, and the two runs are
/// interleaved by server position (patch elements new to the server first).
fn order_elements(
    merged: Vec<Value>,
    patch_ids: &[Value],
    server: &[Value],
    kind: &ListKind,
) -> Vec<Value> {
    let server_ids: Vec<Value> = server.iter().filter_map(|v| element_id(v, kind)).collect();
    let (mut in_patch, mut server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|v| index_of(patch_ids, v, kind).is_some());
    in_patch.sort_by_key(|v| index_of(patch_ids, v, kind));
    server_only.sort_by_key(|v| index_of(&server_ids, v, kind).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(in_patch.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = in_patch.into_iter().peekable();
    loop {
        match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => out.extend(left.next()),
            (None, Some(_)) => out.extend(right.next()),
            (Some(l), Some(r)) => {
                let li = index_of(&server_ids, l, kind);
                let ri = index_of(&server_ids, r, kind);
                match (li, ri) {
                    (Some(li), Some(ri)) if li < ri => out.extend(left.next()),
                    _ => out.extend(right.next()),
                }
            }
        }
    }
    out
}

fn order_by_set_element_order(
    merged: Vec<Value>,
    server: &[Value],
    order: &Value,
    kind: &ListKind,
) -> Result<Vec<Value>, StrategicError> {
    let entries = order
        .as_array()
        .ok_or_else(|| StrategicError::BadDirectiveValue {
            directive: SET_ORDER.into(),
            reason: "must be a list".into(),
        })?;
    let ids: Vec<Value> = entries
        .iter()
        .filter(|e| !is_directive_element(e))
        .filter_map(|e| element_id(e, kind))
        .collect();
    Ok(order_elements(merged, &ids, server, kind))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;
    use serde_json::json;

    fn def(kind: &str) -> ResourceDef {
        builtins().into_iter().find(|d| d.kind == kind).unwrap()
    }

    fn smp(kind: &str, live: Value, patch: Value) -> Value {
        apply(&def(kind), &live, &patch).unwrap()
    }

    #[test]
    fn kubectl_deployment_directive_patch() {
        // The live object kubectl saw before `apply` (reference §1.4).
        let live = json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web"},
            "spec":{"replicas":1,"template":{"spec":{"containers":[
                {"name":"app","image":"nginx:1",
                 "env":[{"name":"A","value":"1"},{"name":"B","value":"2"}],
                 "ports":[{"containerPort":80},{"containerPort":8080}]},
                {"name":"side","image":"busybox"}]}}}});
        let patch = json!({"spec":{"replicas":2,"template":{"spec":{"$setElementOrder/containers":[{"name":"app"}],
            "containers":[{"$setElementOrder/env":[{"name":"B"},{"name":"C"}],"$setElementOrder/ports":[{"containerPort":8080}],
            "env":[{"name":"C","value":"3"},{"$patch":"delete","name":"A"}],"image":"nginx:2","name":"app",
            "ports":[{"containerPort":8080},{"$patch":"delete","containerPort":80}]},{"$patch":"delete","name":"side"}]}}}});
        let out = smp("Deployment", live, patch);
        assert_eq!(
            out["spec"],
            json!({"replicas":2,"template":{"spec":{"containers":[
                {"name":"app","image":"nginx:2",
                 "env":[{"name":"B","value":"2"},{"name":"C","value":"3"}],
                 "ports":[{"containerPort":8080}]}]}}})
        );
    }

    #[test]
    fn null_deletes_and_maps_merge() {
        let out = smp(
            "ConfigMap",
            json!({"data":{"a":"1","b":"2"},"metadata":{"labels":{"x":"1"}}}),
            json!({"data":{"b":null,"c":"3"},"metadata":{"labels":{"tier":"web"}}}),
        );
        assert_eq!(
            out,
            json!({"data":{"a":"1","c":"3"},"metadata":{"labels":{"x":"1","tier":"web"}}})
        );
    }

    #[test]
    fn lists_without_keys_are_replaced() {
        let out = smp(
            "Deployment",
            json!({"spec":{"template":{"spec":{"containers":[{"name":"a","args":["x","y"]}],"tolerations":[{"key":"k"}]}}}}),
            json!({"spec":{"template":{"spec":{"containers":[{"name":"a","args":["z"]}],"tolerations":[{"key":"j"}]}}}}),
        );
        assert_eq!(
            out["spec"]["template"]["spec"],
            json!({"containers":[{"name":"a","args":["z"]}],"tolerations":[{"key":"j"}]})
        );
    }

    #[test]
    fn keyed_merge_keeps_server_items_and_prepends_new_ones() {
        // Without $setElementOrder, kube puts patch items not on the server first.
        let out = smp(
            "Pod",
            json!({"spec":{"containers":[{"name":"a","image":"1"},{"name":"b","image":"1"}]}}),
            json!({"spec":{"containers":[{"name":"c","image":"3"},{"name":"b","image":"2"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name":"c","image":"3"},{"name":"a","image":"1"},{"name":"b","image":"2"}])
        );
    }

    #[test]
    fn set_element_order_reorders() {
        let out = smp(
            "Pod",
            json!({"spec":{"containers":[{"name":"a"},{"name":"b"}]}}),
            json!({"spec":{"$setElementOrder/containers":[{"name":"b"},{"name":"a"},{"name":"c"}],
                "containers":[{"name":"c"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name":"b"},{"name":"a"},{"name":"c"}])
        );
        // Reorder only, without touching the list.
        let out = smp(
            "Pod",
            json!({"spec":{"containers":[{"name":"a"},{"name":"b"}]}}),
            json!({"spec":{"$setElementOrder/containers":[{"name":"b"},{"name":"a"}]}}),
        );
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name":"b"},{"name":"a"}])
        );
    }

    #[test]
    fn patch_replace_and_delete_directives() {
        let live = json!({"spec":{"containers":[{"name":"a","image":"1","env":[{"name":"X","value":"1"}]}],
            "nodeSelector":{"a":"1","b":"2"}}});
        // Map replace.
        let out = smp(
            "Pod",
            live.clone(),
            json!({"spec":{"nodeSelector":{"$patch":"replace","c":"3"}}}),
        );
        assert_eq!(out["spec"]["nodeSelector"], json!({"c":"3"}));
        // Map delete.
        let out = smp(
            "Pod",
            live.clone(),
            json!({"spec":{"nodeSelector":{"$patch":"delete"}}}),
        );
        assert!(out["spec"].get("nodeSelector").is_none());
        // List replace.
        let out = smp(
            "Pod",
            live.clone(),
            json!({"spec":{"containers":[{"name":"b","image":"2"},{"$patch":"replace"}]}}),
        );
        assert_eq!(out["spec"]["containers"], json!([{"name":"b","image":"2"}]));
        // Element delete.
        let out = smp(
            "Pod",
            live,
            json!({"spec":{"containers":[{"name":"a","env":[{"name":"X","$patch":"delete"}]}]}}),
        );
        assert_eq!(out["spec"]["containers"][0]["env"], json!([]));
    }

    #[test]
    fn retain_keys_and_primitive_sets() {
        let out = smp(
            "Pod",
            json!({"spec":{"volumes":[{"name":"v","emptyDir":{},"secret":{"secretName":"s"}}]}}),
            json!({"spec":{"volumes":[{"name":"v","$retainKeys":["name","configMap"],"configMap":{"name":"c"}}]}}),
        );
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name":"v","configMap":{"name":"c"}}])
        );

        let out = smp(
            "ConfigMap",
            json!({"metadata":{"finalizers":["a","b"]}}),
            json!({"metadata":{"finalizers":["c","a"],"$deleteFromPrimitiveList/finalizers":["b"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a"]));
        let out = smp(
            "ConfigMap",
            json!({"metadata":{"finalizers":["a","b"]}}),
            json!({"metadata":{"finalizers":["c"]}}),
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
    }

    #[test]
    fn new_values_lose_directives_and_nulls_and_unknown_directives_are_ignored() {
        let out = smp(
            "ConfigMap",
            json!({"metadata":{"name":"x"}}),
            json!({"data":{"a":"1","b":null},"$unknown":{"x":1}}),
        );
        assert_eq!(out, json!({"metadata":{"name":"x"},"data":{"a":"1"}}));
    }

    /// (kind, live, patch, expected) for the merge keys of reference §4.
    #[test]
    fn merge_key_table() {
        let cases = [
            // Service ports by port.
            (
                "Service",
                json!({"spec":{"ports":[{"port":80,"name":"http"},{"port":443,"name":"https"}]}}),
                json!({"spec":{"ports":[{"port":443,"targetPort":8443}]}}),
                json!({"spec":{"ports":[{"port":80,"name":"http"},{"port":443,"name":"https","targetPort":8443}]}}),
            ),
            // ownerReferences by uid.
            (
                "ReplicaSet",
                json!({"metadata":{"ownerReferences":[{"uid":"1","name":"a"}]}}),
                json!({"metadata":{"ownerReferences":[{"uid":"2","name":"b"}]}}),
                json!({"metadata":{"ownerReferences":[{"uid":"2","name":"b"},{"uid":"1","name":"a"}]}}),
            ),
            // conditions by type.
            (
                "Deployment",
                json!({"status":{"conditions":[{"type":"Available","status":"False"},{"type":"Progressing","status":"True"}]}}),
                json!({"status":{"conditions":[{"type":"Available","status":"True"}]}}),
                json!({"status":{"conditions":[{"type":"Available","status":"True"},{"type":"Progressing","status":"True"}]}}),
            ),
            // volumeMounts by mountPath inside initContainers of a StatefulSet template.
            (
                "StatefulSet",
                json!({"spec":{"template":{"spec":{"initContainers":[{"name":"i","volumeMounts":[{"mountPath":"/a","name":"x"}]}]}}}}),
                json!({"spec":{"template":{"spec":{"initContainers":[{"name":"i","volumeMounts":[{"mountPath":"/a","readOnly":true}]}]}}}}),
                json!({"spec":{"template":{"spec":{"initContainers":[{"name":"i","volumeMounts":[{"mountPath":"/a","name":"x","readOnly":true}]}]}}}}),
            ),
            // CronJob pod template: env by name.
            (
                "CronJob",
                json!({"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"name":"c","env":[{"name":"A","value":"1"}]}]}}}}}}),
                json!({"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"name":"c","env":[{"name":"A","value":"2"}]}]}}}}}}),
                json!({"spec":{"jobTemplate":{"spec":{"template":{"spec":{"containers":[{"name":"c","env":[{"name":"A","value":"2"}]}]}}}}}}),
            ),
            // imagePullSecrets and volumes by name in a DaemonSet.
            (
                "DaemonSet",
                json!({"spec":{"template":{"spec":{"imagePullSecrets":[{"name":"a"}],"volumes":[{"name":"v","emptyDir":{}}]}}}}),
                json!({"spec":{"template":{"spec":{"imagePullSecrets":[{"name":"b"}],"volumes":[{"name":"w","emptyDir":{}}]}}}}),
                json!({"spec":{"template":{"spec":{"imagePullSecrets":[{"name":"b"},{"name":"a"}],
                 "volumes":[{"name":"w","emptyDir":{}},{"name":"v","emptyDir":{}}]}}}}),
            ),
            // Job container ports by containerPort.
            (
                "Job",
                json!({"spec":{"template":{"spec":{"containers":[{"name":"c","ports":[{"containerPort":80,"name":"http"}]}]}}}}),
                json!({"spec":{"template":{"spec":{"containers":[{"name":"c","ports":[{"containerPort":80,"protocol":"TCP"}]}]}}}}),
                json!({"spec":{"template":{"spec":{"containers":[{"name":"c","ports":[{"containerPort":80,"name":"http","protocol":"TCP"}]}]}}}}),
            ),
            // Finalizers as a set with an explicit order.
            (
                "Namespace",
                json!({"metadata":{"finalizers":["a","b"]}}),
                json!({"metadata":{"$setElementOrder/finalizers":["b","a","c"],"finalizers":["c"]}}),
                json!({"metadata":{"finalizers":["b","a","c"]}}),
            ),
            // A map replaced by a scalar and a scalar by a map.
            (
                "ConfigMap",
                json!({"data":{"a":"1"},"binaryData":"x"}),
                json!({"data":"flat","binaryData":{"k":"dg==","z":null}}),
                json!({"data":"flat","binaryData":{"k":"dg=="}}),
            ),
            // Command/args are untagged: replaced whole; tolerations too.
            (
                "Pod",
                json!({"spec":{"containers":[{"name":"c","command":["a","b"]}],"tolerations":[{"key":"x"}]}}),
                json!({"spec":{"containers":[{"name":"c","command":["z"]}],"tolerations":[]}}),
                json!({"spec":{"containers":[{"name":"c","command":["z"]}],"tolerations":[]}}),
            ),
        ];
        for (kind, live, patch, expected) in cases {
            assert_eq!(smp(kind, live, patch.clone()), expected, "{kind}: {patch}");
        }
    }

    #[test]
    fn errors() {
        let d = def("Pod");
        let live = json!({"spec":{"containers":[{"name":"a"}]}});
        assert_eq!(
            apply(&d, &live, &json!([1])),
            Err(StrategicError::NotAnObject)
        );
        assert!(matches!(
            apply(&d, &live, &json!({"spec":{"$patch":"bogus"}})),
            Err(StrategicError::BadDirective { .. })
        ));
        assert!(matches!(
            apply(&d, &live, &json!({"spec":{"containers":[{"image":"x"}]}})),
            Err(StrategicError::MissingMergeKey { .. })
        ));
        assert_eq!(
            apply(&d, &live, &json!({"$patch":"delete"})),
            Err(StrategicError::DeleteRoot)
        );
    }
}
