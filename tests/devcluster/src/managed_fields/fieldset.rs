//! Field sets: the leaf paths an object sets, their FieldsV1 encoding, and
//! navigation of objects by those paths.

use crate::patch::{list_kind, ListKind};
use crate::resources::ResourceDef;
use serde_json::{Map, Value};
use std::collections::BTreeSet;

/// One path element in FieldsV1 encoding: `f:name`, `k:{...}`, `v:json` or `.`.
pub(super) type Path = Vec<String>;
/// A set of owned leaf paths.
pub(super) type FieldSet = BTreeSet<Path>;

/// Metadata fields that managers own; the rest is server-managed identity.
const OWNED_METADATA: &[&str] = &["labels", "annotations", "finalizers", "ownerReferences"];

// ---------------------------------------------------------------- FieldsV1 codec

pub(super) fn decode(node: &Value, prefix: &mut Path, out: &mut FieldSet) {
    match node.as_object() {
        Some(m) if !m.is_empty() => {
            for (k, child) in m {
                prefix.push(k.clone());
                decode(child, prefix, out);
                prefix.pop();
            }
        }
        _ => {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
        }
    }
}

pub(super) fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for el in path {
            let next = node
                .entry(el.clone())
                .or_insert_with(|| Value::Object(Map::new()));
            if !next.is_object() {
                *next = Value::Object(Map::new());
            }
            match next.as_object_mut() {
                Some(m) => node = m,
                None => break,
            }
        }
    }
    Value::Object(root)
}

/// kube's fieldpath.Path string: `.spec.containers[name="app"].image`.
pub(super) fn display_path(path: &Path) -> String {
    let mut s = String::new();
    for el in path {
        if let Some(f) = el.strip_prefix("f:") {
            s.push('.');
            s.push_str(f);
        } else if let Some(k) = el.strip_prefix("k:") {
            let parts: Vec<String> = serde_json::from_str::<Map<String, Value>>(k)
                .map(|m| m.iter().map(|(k, v)| format!("{k}={v}")).collect())
                .unwrap_or_default();
            s.push_str(&format!("[{}]", parts.join(",")));
        } else if let Some(v) = el.strip_prefix("v:") {
            s.push_str(&format!("[={v}]"));
        }
    }
    s
}

// ---------------------------------------------------------------- field sets of objects

/// The leaf paths an object (or applied configuration) sets. `status` counts
/// only when `with_status`: for kinds with a /status subresource, writes to
/// the main resource cannot change status (the server resets it), so their
/// managers own none of it.
pub(super) fn field_set(def: &ResourceDef, obj: &Value, with_status: bool) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(root) = obj.as_object() else {
        return out;
    };
    let mut names = Vec::new();
    let mut prefix = Vec::new();
    for (k, v) in root {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "status" if !with_status => {}
            "metadata" => {
                let Some(meta) = v.as_object() else { continue };
                for (mk, mv) in meta {
                    if OWNED_METADATA.contains(&mk.as_str()) {
                        names.extend(["metadata".to_string(), mk.clone()]);
                        prefix.extend([format!("f:{k}"), format!("f:{mk}")]);
                        walk(def, &mut names, mv, &mut prefix, &mut out);
                        names.clear();
                        prefix.clear();
                    }
                }
            }
            _ => {
                names.push(k.clone());
                prefix.push(format!("f:{k}"));
                walk(def, &mut names, v, &mut prefix, &mut out);
                names.clear();
                prefix.clear();
            }
        }
    }
    out
}

/// The key identity (`k:` element) of a list element, if it has every key.
pub(super) fn element_key(el: &Value, keys: &[String]) -> Option<String> {
    let mut m = Map::new();
    for k in keys {
        m.insert(k.clone(), el.get(k)?.clone());
    }
    Some(format!("k:{}", Value::Object(m)))
}

pub(super) fn names_kind(def: &ResourceDef, names: &[String]) -> ListKind {
    let p: Vec<&str> = names.iter().map(String::as_str).collect();
    list_kind(def, &p)
}

pub(super) fn walk(
    def: &ResourceDef,
    names: &mut Vec<String>,
    v: &Value,
    prefix: &mut Path,
    out: &mut FieldSet,
) {
    match v {
        Value::Null => {}
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                names.push(k.clone());
                prefix.push(format!("f:{k}"));
                walk(def, names, child, prefix, out);
                prefix.pop();
                names.pop();
            }
        }
        Value::Array(items) => match names_kind(def, names) {
            ListKind::Map(keys) if items.iter().all(|i| element_key(i, &keys).is_some()) => {
                for item in items {
                    let Some(k) = element_key(item, &keys) else {
                        continue;
                    };
                    prefix.push(k);
                    prefix.push(".".into());
                    out.insert(prefix.clone());
                    prefix.pop();
                    if let Some(m) = item.as_object() {
                        for (f, child) in m {
                            names.push(f.clone());
                            prefix.push(format!("f:{f}"));
                            walk(def, names, child, prefix, out);
                            prefix.pop();
                            names.pop();
                        }
                    }
                    prefix.pop();
                }
            }
            ListKind::Set if items.iter().all(|i| !i.is_object() && !i.is_array()) => {
                for item in items {
                    prefix.push(format!("v:{item}"));
                    out.insert(prefix.clone());
                    prefix.pop();
                }
            }
            _ => {
                out.insert(prefix.clone());
            }
        },
        _ => {
            out.insert(prefix.clone());
        }
    }
}

// ---------------------------------------------------------------- path navigation

pub(super) fn matches_element(el: &Value, seg: &str) -> bool {
    if let Some(k) = seg.strip_prefix("k:") {
        match serde_json::from_str::<Map<String, Value>>(k) {
            Ok(keys) => keys.iter().all(|(k, v)| el.get(k) == Some(v)),
            Err(_) => false,
        }
    } else if let Some(v) = seg.strip_prefix("v:") {
        serde_json::from_str::<Value>(v).is_ok_and(|v| *el == v)
    } else {
        false
    }
}

pub(super) fn get_at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = v;
    for seg in path {
        cur = if let Some(f) = seg.strip_prefix("f:") {
            cur.get(f)?
        } else if seg == "." {
            cur
        } else {
            cur.as_array()?.iter().find(|el| matches_element(el, seg))?
        };
    }
    Some(cur)
}

pub(super) fn get_at_mut<'a>(v: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = v;
    for seg in path {
        cur = if let Some(f) = seg.strip_prefix("f:") {
            cur.get_mut(f)?
        } else if seg == "." {
            cur
        } else {
            cur.as_array_mut()?
                .iter_mut()
                .find(|el| matches_element(el, seg))?
        };
    }
    Some(cur)
}

/// Removes the value at `path` (a field, a list element, or `k:…/.` the element).
pub(super) fn remove_at(v: &mut Value, path: &[String]) {
    let path = match path.split_last() {
        Some((last, rest)) if last == "." => rest,
        _ => path,
    };
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let Some(parent) = get_at_mut(v, parent) else {
        return;
    };
    if let Some(f) = last.strip_prefix("f:") {
        if let Some(m) = parent.as_object_mut() {
            m.remove(f);
        }
    } else if let Some(a) = parent.as_array_mut() {
        a.retain(|el| !matches_element(el, last));
    }
}

/// The node a path designates for overlap tests (`k:…/.` designates the element).
pub(super) fn node_of(p: &Path) -> &[String] {
    match p.split_last() {
        Some((last, rest)) if last == "." => rest,
        _ => p,
    }
}

/// Whether owning `a` and `b` touches the same data: one is a prefix of the other.
pub(super) fn overlaps(a: &Path, b: &Path) -> bool {
    let (a, b) = (node_of(a), node_of(b));
    a.starts_with(b) || b.starts_with(a)
}
