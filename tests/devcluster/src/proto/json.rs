//! A small JSON object builder with Kubernetes' `omitempty` rules, plus the shared apimachinery types.
//!
//! Go's protobuf encoder writes every non-pointer field, even when empty, while its
//! JSON encoder drops empty `omitempty` fields. So each field is added with the rule
//! its Go declaration has: `str`/`int`/`flag` drop empty values (omitempty),
//! `ptr_*` keep any value that is present (pointer fields, where `0`/`false` is
//! meaningful), `req_*` keep present values (no omitempty), and `msg` keeps any
//! present message, even `{}` (Go's JSON encoder always writes struct fields).

use std::collections::BTreeMap;

use base64::Engine;
use k8s_pb::apimachinery::pkg::api::resource::Quantity;
use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value};

/// Builds one JSON object field by field.
#[derive(Default)]
pub(crate) struct Obj(Map<String, Value>);

impl Obj {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to an already converted value.
    pub(crate) fn value(mut self, key: &str, v: Value) -> Self {
        self.0.insert(key.to_owned(), v);
        self
    }

    fn put(self, key: &str, v: Value) -> Self {
        self.value(key, v)
    }

    /// An `omitempty` string: dropped when unset or empty.
    pub(crate) fn str(self, key: &str, v: &Option<String>) -> Self {
        match v {
            Some(s) if !s.is_empty() => self.put(key, Value::from(s.as_str())),
            _ => self,
        }
    }

    /// A string without `omitempty`, or a `*string`: kept whenever present.
    pub(crate) fn req_str(self, key: &str, v: &Option<String>) -> Self {
        match v {
            Some(s) => self.put(key, Value::from(s.as_str())),
            None => self,
        }
    }

    /// A `*string` (kept even when empty).
    pub(crate) fn ptr_str(self, key: &str, v: &Option<String>) -> Self {
        self.req_str(key, v)
    }

    /// An `omitempty` integer: dropped when unset or zero.
    pub(crate) fn int<T: Copy + Into<i64>>(self, key: &str, v: &Option<T>) -> Self {
        match v.map(Into::into) {
            Some(n) if n != 0 => self.put(key, Value::from(n)),
            _ => self,
        }
    }

    /// A `*int` or an integer without `omitempty`: kept whenever present.
    pub(crate) fn ptr_int<T: Copy + Into<i64>>(self, key: &str, v: &Option<T>) -> Self {
        match v.map(Into::into) {
            Some(n) => self.put(key, Value::from(n)),
            None => self,
        }
    }

    /// An `omitempty` bool: dropped when unset or false.
    pub(crate) fn flag(self, key: &str, v: &Option<bool>) -> Self {
        match v {
            Some(true) => self.put(key, Value::Bool(true)),
            _ => self,
        }
    }

    /// A `*bool`: kept whenever present, `false` included.
    pub(crate) fn ptr_bool(self, key: &str, v: &Option<bool>) -> Self {
        match v {
            Some(b) => self.put(key, Value::Bool(*b)),
            None => self,
        }
    }

    /// A string list, dropped when empty.
    pub(crate) fn strs(self, key: &str, v: &[String]) -> Self {
        if v.is_empty() {
            return self;
        }
        self.put(key, v.iter().map(|s| Value::from(s.as_str())).collect())
    }

    /// A string list without `omitempty`: `null` when empty, as Go marshals a nil slice.
    pub(crate) fn req_strs(self, key: &str, v: &[String]) -> Self {
        if v.is_empty() {
            return self.put(key, Value::Null);
        }
        self.strs(key, v)
    }

    /// An integer list, dropped when empty.
    pub(crate) fn ints<T: Copy + Into<i64>>(self, key: &str, v: &[T]) -> Self {
        if v.is_empty() {
            return self;
        }
        self.put(key, v.iter().map(|n| Value::from((*n).into())).collect())
    }

    /// An integer list without `omitempty`: `null` when empty.
    pub(crate) fn req_ints<T: Copy + Into<i64>>(self, key: &str, v: &[T]) -> Self {
        if v.is_empty() {
            return self.put(key, Value::Null);
        }
        self.ints(key, v)
    }

    /// A `map[string]string`, dropped when empty.
    pub(crate) fn map(self, key: &str, v: &BTreeMap<String, String>) -> Self {
        if v.is_empty() {
            return self;
        }
        let m = v
            .iter()
            .map(|(k, s)| (k.clone(), Value::from(s.as_str())))
            .collect();
        self.put(key, Value::Object(m))
    }

    /// A `map[string][]byte`: values as standard base64, like Go's JSON encoder.
    pub(crate) fn bytes_map(self, key: &str, v: &BTreeMap<String, Vec<u8>>) -> Self {
        if v.is_empty() {
            return self;
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let m = v
            .iter()
            .map(|(k, b)| (k.clone(), Value::from(b64.encode(b))))
            .collect();
        self.put(key, Value::Object(m))
    }

    /// A `ResourceList` (`map[ResourceName]Quantity`), dropped when empty.
    pub(crate) fn quantities(self, key: &str, v: &BTreeMap<String, Quantity>) -> Self {
        if v.is_empty() {
            return self;
        }
        let m = v.iter().map(|(k, q)| (k.clone(), quantity(q))).collect();
        self.put(key, Value::Object(m))
    }

    /// A nested message: kept whenever present, even when it converts to `{}`.
    pub(crate) fn msg<T>(self, key: &str, v: &Option<T>, f: fn(&T) -> Value) -> Self {
        match v {
            Some(m) => self.put(key, f(m)),
            None => self,
        }
    }

    /// A list of messages, dropped when empty.
    pub(crate) fn list<T>(self, key: &str, v: &[T], f: fn(&T) -> Value) -> Self {
        if v.is_empty() {
            return self;
        }
        self.put(key, v.iter().map(f).collect())
    }

    /// A list without `omitempty`: `null` when empty, as Go marshals a nil slice.
    pub(crate) fn req_list<T>(self, key: &str, v: &[T], f: fn(&T) -> Value) -> Self {
        if v.is_empty() {
            return self.put(key, Value::Null);
        }
        self.list(key, v, f)
    }

    /// An `IntOrString` (pointer or not: present means kept).
    pub(crate) fn int_or_str(self, key: &str, v: &Option<IntOrString>) -> Self {
        self.msg(key, v, int_or_string)
    }

    /// A `resource.Quantity` (pointer or not: present means kept).
    pub(crate) fn quantity(self, key: &str, v: &Option<Quantity>) -> Self {
        self.msg(key, v, quantity)
    }

    /// A `metav1.Time`: dropped when zero, like Go's JSON `null` for the zero time.
    pub(crate) fn time(self, key: &str, v: &Option<meta::Time>) -> Self {
        match v.as_ref().and_then(time) {
            Some(t) => self.put(key, t),
            None => self,
        }
    }

    /// Merges the fields of an embedded Go struct (`json:",inline"`).
    pub(crate) fn inline<T>(mut self, v: &Option<T>, f: fn(&T) -> Value) -> Self {
        if let Some(Value::Object(m)) = v.as_ref().map(f) {
            self.0.extend(m);
        }
        self
    }

    pub(crate) fn build(self) -> Value {
        Value::Object(self.0)
    }
}

/// `IntOrString`: `type` 0 is an int, 1 a string.
pub(crate) fn int_or_string(v: &IntOrString) -> Value {
    let is_string = match v.r#type {
        Some(t) => t == 1,
        // Go always writes `type`; without it trust whichever value is present.
        None => v.str_val.is_some() && v.int_val.is_none(),
    };
    if is_string {
        Value::from(v.str_val.clone().unwrap_or_default())
    } else {
        Value::from(v.int_val.unwrap_or_default())
    }
}

/// A `Quantity` is its canonical string.
pub(crate) fn quantity(q: &Quantity) -> Value {
    Value::from(q.string.clone().unwrap_or_default())
}

/// RFC 3339 with second precision and `Z`, as `metav1.Time` marshals; `None` for
/// the zero time and for timestamps chrono cannot represent.
pub(crate) fn time(t: &meta::Time) -> Option<Value> {
    let secs = t.seconds.unwrap_or_default();
    let nanos = t.nanos.unwrap_or_default();
    if secs == 0 && nanos == 0 {
        return None;
    }
    let nanos = u32::try_from(nanos).ok()?;
    let dt = chrono::DateTime::from_timestamp(secs, nanos)?;
    Some(Value::from(
        dt.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    ))
}

/// `ObjectMeta`, without `managedFields` and `selfLink` (the server owns them).
pub(crate) fn object_meta(m: &meta::ObjectMeta) -> Value {
    Obj::new()
        .str("name", &m.name)
        .str("generateName", &m.generate_name)
        .str("namespace", &m.namespace)
        .str("uid", &m.uid)
        .str("resourceVersion", &m.resource_version)
        .int("generation", &m.generation)
        .time("creationTimestamp", &m.creation_timestamp)
        .time("deletionTimestamp", &m.deletion_timestamp)
        .ptr_int(
            "deletionGracePeriodSeconds",
            &m.deletion_grace_period_seconds,
        )
        .map("labels", &m.labels)
        .map("annotations", &m.annotations)
        .list("ownerReferences", &m.owner_references, owner_reference)
        .strs("finalizers", &m.finalizers)
        .build()
}

fn owner_reference(r: &meta::OwnerReference) -> Value {
    Obj::new()
        .req_str("apiVersion", &r.api_version)
        .req_str("kind", &r.kind)
        .req_str("name", &r.name)
        .req_str("uid", &r.uid)
        .ptr_bool("controller", &r.controller)
        .ptr_bool("blockOwnerDeletion", &r.block_owner_deletion)
        .build()
}

/// `LabelSelector`.
pub(crate) fn label_selector(s: &meta::LabelSelector) -> Value {
    Obj::new()
        .map("matchLabels", &s.match_labels)
        .list("matchExpressions", &s.match_expressions, |r| {
            Obj::new()
                .req_str("key", &r.key)
                .req_str("operator", &r.operator)
                .strs("values", &r.values)
                .build()
        })
        .build()
}
