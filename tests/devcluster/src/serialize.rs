//! Response bodies written the way kube-apiserver's JSON encoder writes them.
//!
//! Built-in kinds are Go structs, so their fields come out in struct order
//! (`kind`, `apiVersion`, `metadata`, `spec`, `status`; ObjectMeta and Status
//! in theirs); custom resources are unstructured maps, which Go writes with
//! sorted keys, as `serde_json::Value` does. Every body ends with the newline
//! Go's `json.Encoder` appends (clients comparing error bodies byte for byte
//! see it). Only the levels clients look at are reordered; nested fields of
//! built-in specs keep sorted order (an approximation, see the README).

use serde::ser::{SerializeMap, SerializeSeq, Serializer};
use serde::Serialize;
use serde_json::{Map, Value};

/// metav1.ObjectMeta, then metav1.ListMeta's own fields, in struct order.
const META_ORDER: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "continue",
    "remainingItemCount",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// metav1.Status.
const STATUS_ORDER: &[&str] = &[
    "kind",
    "apiVersion",
    "metadata",
    "status",
    "message",
    "reason",
    "details",
    "code",
];

/// metav1.StatusDetails.
const DETAILS_ORDER: &[&str] = &[
    "name",
    "group",
    "kind",
    "uid",
    "causes",
    "retryAfterSeconds",
];

/// metav1.StatusCause.
const CAUSE_ORDER: &[&str] = &["reason", "message", "field"];

/// Any built-in object or list: TypeMeta, ObjectMeta/ListMeta, then the body.
const OBJECT_ORDER: &[&str] = &["kind", "apiVersion", "metadata", "spec", "status", "items"];

/// metav1.WatchEvent.
const EVENT_ORDER: &[&str] = &["type", "object"];

/// The body of a response: `v` in kube's field order plus a trailing newline.
pub fn to_body(v: &Value) -> Vec<u8> {
    let mut out = to_line(v);
    out.push(b'\n');
    out
}

/// `v` in kube's field order, without the newline (watch frames add their own).
pub fn to_line(v: &Value) -> Vec<u8> {
    let level = match v.as_object() {
        Some(m) if m.contains_key("object") && m.contains_key("type") => Level::Event,
        _ => Level::Object,
    };
    serde_json::to_vec(&Ordered { v, level }).unwrap_or_default()
}

#[derive(Clone, Copy)]
enum Level {
    Event,
    Object,
    /// An item of a built-in typed list: kube-apiserver writes it without
    /// `kind`/`apiVersion` (kubernetes/kubernetes#3030; clients fill them in).
    ListItem,
    Meta,
    Details,
    Cause,
    /// Below the reordered levels: sorted, as stored.
    Sorted,
}

struct Ordered<'a> {
    v: &'a Value,
    level: Level,
}

/// Custom resources (group with a dot that is not a built-in `*.k8s.io`
/// group) are unstructured in kube and come out sorted.
fn is_custom(m: &Map<String, Value>) -> bool {
    let Some(av) = m.get("apiVersion").and_then(Value::as_str) else {
        return false;
    };
    match av.split_once('/') {
        Some((group, _)) => {
            let builtin = group.ends_with(".k8s.io") && !group.ends_with(".x-k8s.io");
            group.contains('.') && !builtin
        }
        None => false,
    }
}

/// A `FooList` of a built-in kind (not the generic `v1.List`, whose items
/// keep their types, nor a list of custom resources, which is unstructured,
/// nor the metadata-only list, whose items are left as its handler built them).
fn is_typed_list(m: &Map<String, Value>) -> bool {
    let kind = m.get("kind").and_then(Value::as_str).unwrap_or("");
    kind.len() > 4 && kind.ends_with("List") && kind != "PartialObjectMetadataList" && !is_custom(m)
}

impl Ordered<'_> {
    fn order(&self, m: &Map<String, Value>) -> Option<&'static [&'static str]> {
        match self.level {
            Level::Event => Some(EVENT_ORDER),
            Level::Object if m.get("kind").and_then(Value::as_str) == Some("Status") => {
                Some(STATUS_ORDER)
            }
            Level::Object if is_custom(m) => None,
            Level::Object | Level::ListItem => Some(OBJECT_ORDER),
            Level::Meta => Some(META_ORDER),
            Level::Details => Some(DETAILS_ORDER),
            Level::Cause => Some(CAUSE_ORDER),
            Level::Sorted => None,
        }
    }

    fn child_level(&self, key: &str, m: &Map<String, Value>) -> Level {
        let is_status = m.get("kind").and_then(Value::as_str) == Some("Status");
        match (self.level, key) {
            (Level::Event, "object") => Level::Object,
            (Level::Object | Level::ListItem, "metadata") => Level::Meta,
            (Level::Object, "items") if is_typed_list(m) => Level::ListItem,
            (Level::Object, "items") => Level::Object,
            (Level::Object, "details") if is_status => Level::Details,
            (Level::Details, "causes") => Level::Cause,
            _ => Level::Sorted,
        }
    }
}

impl Serialize for Ordered<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.v {
            Value::Object(m) => {
                let Some(order) = self.order(m) else {
                    return self.v.serialize(s);
                };
                let mut map = s.serialize_map(None)?;
                let first = order.iter().filter_map(|k| m.get_key_value(*k));
                let rest = m.iter().filter(|(k, _)| !order.contains(&k.as_str()));
                let list_item = matches!(self.level, Level::ListItem);
                for (k, v) in first.chain(rest) {
                    if list_item && (k == "kind" || k == "apiVersion") {
                        continue;
                    }
                    let level = self.child_level(k, m);
                    map.serialize_entry(k, &Ordered { v, level })?;
                }
                map.end()
            }
            // Lists keep their element level (items of a list, causes of a Status).
            Value::Array(a) if !matches!(self.level, Level::Sorted) => {
                let mut seq = s.serialize_seq(Some(a.len()))?;
                for v in a {
                    seq.serialize_element(&Ordered {
                        v,
                        level: self.level,
                    })?;
                }
                seq.end()
            }
            other => other.serialize(s),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(v: &Value) -> String {
        String::from_utf8(to_body(v)).unwrap()
    }

    #[test]
    fn builtin_objects_in_struct_order() {
        let svc = json!({"status":{"loadBalancer":{}},"spec":{"type":"ClusterIP"},
            "metadata":{"uid":"u","resourceVersion":"5","name":"s","namespace":"default","creationTimestamp":"t","labels":{"b":"1","a":"2"}},
            "kind":"Service","apiVersion":"v1"});
        assert_eq!(
            text(&svc),
            "{\"kind\":\"Service\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"s\",\"namespace\":\"default\",\"uid\":\"u\",\"resourceVersion\":\"5\",\"creationTimestamp\":\"t\",\"labels\":{\"a\":\"2\",\"b\":\"1\"}},\"spec\":{\"type\":\"ClusterIP\"},\"status\":{\"loadBalancer\":{}}}\n"
        );
    }

    #[test]
    fn lists_order_their_items_and_events_their_object() {
        let list = json!({"items":[{"data":{"k":"v"},"metadata":{"namespace":"n","name":"a"},"kind":"ConfigMap","apiVersion":"v1"}],
            "metadata":{"resourceVersion":"9"},"kind":"ConfigMapList","apiVersion":"v1"});
        assert_eq!(
            text(&list),
            "{\"kind\":\"ConfigMapList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"9\"},\"items\":[{\"metadata\":{\"name\":\"a\",\"namespace\":\"n\"},\"data\":{\"k\":\"v\"}}]}\n"
        );
        let crs = json!({"kind":"WidgetList","apiVersion":"example.com/v1","metadata":{},
            "items":[{"kind":"Widget","apiVersion":"example.com/v1","metadata":{"name":"w"}}]});
        assert_eq!(
            text(&crs),
            "{\"apiVersion\":\"example.com/v1\",\"items\":[{\"apiVersion\":\"example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"name\":\"w\"}}],\"kind\":\"WidgetList\",\"metadata\":{}}\n"
        );
        let ev = json!({"type":"ADDED","object":{"metadata":{"name":"a"},"kind":"ConfigMap","apiVersion":"v1"}});
        assert_eq!(
            String::from_utf8(to_line(&ev)).unwrap(),
            "{\"type\":\"ADDED\",\"object\":{\"kind\":\"ConfigMap\",\"apiVersion\":\"v1\",\"metadata\":{\"name\":\"a\"}}}"
        );
    }

    #[test]
    fn status_bodies_in_metav1_order() {
        let st = json!({"code":422,"details":{"causes":[{"field":"f","message":"m","reason":"r"}],"kind":"Widget","name":"w","group":"example.com"},
            "reason":"Invalid","message":"bad","status":"Failure","metadata":{},"apiVersion":"v1","kind":"Status"});
        assert_eq!(
            text(&st),
            "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\",\"message\":\"bad\",\"reason\":\"Invalid\",\"details\":{\"name\":\"w\",\"group\":\"example.com\",\"kind\":\"Widget\",\"causes\":[{\"reason\":\"r\",\"message\":\"m\",\"field\":\"f\"}]},\"code\":422}\n"
        );
    }

    #[test]
    fn custom_resources_stay_sorted_like_unstructured() {
        let cr = json!({"spec":{"b":1,"a":2},"metadata":{"uid":"u","name":"w"},"kind":"Widget","apiVersion":"example.com/v1"});
        assert_eq!(
            text(&cr),
            "{\"apiVersion\":\"example.com/v1\",\"kind\":\"Widget\",\"metadata\":{\"name\":\"w\",\"uid\":\"u\"},\"spec\":{\"a\":2,\"b\":1}}\n"
        );
        let crd = json!({"metadata":{"name":"w"},"kind":"CustomResourceDefinition","apiVersion":"apiextensions.k8s.io/v1"});
        assert!(text(&crd).starts_with("{\"kind\":\"CustomResourceDefinition\""));
    }
}
