//! Server-side cleanups: namespace termination, ownerReference garbage collection,
//! CRD removal, and the objects every namespace starts with.

use crate::delete::{self, Propagation};
use crate::meta::{self, meta_mut, meta_str};
use crate::store::{ObjKey, Tx};
use serde_json::{json, Value};

/// Marks a namespace Terminating, deletes its contents and removes it once empty.
/// Returns the namespace as it was after being marked.
pub fn terminate_namespace(tx: &mut Tx<'_>, ns: &str) -> Value {
    let key = ObjKey::new("", "namespaces", "", ns);
    let Some(old) = tx.get(&key).cloned() else {
        return json!({});
    };
    let marked = if meta::is_deleting(&old) {
        old
    } else {
        let mut new = old;
        let m = meta_mut(&mut new);
        m.insert("deletionTimestamp".into(), json!(tx.now));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        if let Some(o) = new.as_object_mut() {
            o.insert("spec".into(), json!({"finalizers": ["kubernetes"]}));
            let status = o.entry("status").or_insert(json!({}));
            if let Some(s) = status.as_object_mut() {
                s.insert("phase".into(), json!("Terminating"));
            }
        }
        tx.put(&key, new)
    };
    let contents: Vec<ObjKey> = tx
        .inner
        .objects
        .keys()
        .filter(|k| k.namespace == ns)
        .cloned()
        .collect();
    for k in contents {
        delete::delete_object(tx, &k, Propagation::Background);
    }
    try_finalize_namespace(tx, ns);
    marked
}

/// Removes a terminating namespace if it is empty and has no metadata.finalizers left.
pub fn try_finalize_namespace(tx: &mut Tx<'_>, ns: &str) {
    let key = ObjKey::new("", "namespaces", "", ns);
    let Some(obj) = tx.get(&key) else { return };
    if !meta::is_deleting(obj) || !meta::finalizers(obj).is_empty() {
        return;
    }
    if tx.inner.objects.keys().any(|k| k.namespace == ns) {
        return;
    }
    tx.remove(&key);
}

/// Handles dependents of a removed owner `uid`.
pub fn collect_dependents(tx: &mut Tx<'_>, uid: &str, propagation: Propagation) {
    let dependents: Vec<ObjKey> = tx
        .inner
        .objects
        .iter()
        .filter(|(_, v)| owner_uids(v).iter().any(|u| u == uid))
        .map(|(k, _)| k.clone())
        .collect();
    for k in dependents {
        let Some(obj) = tx.get(&k).cloned() else {
            continue;
        };
        if propagation == Propagation::Orphan {
            let mut new = obj;
            let m = meta_mut(&mut new);
            if let Some(Value::Array(refs)) = m.get_mut("ownerReferences") {
                refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
                if refs.is_empty() {
                    m.remove("ownerReferences");
                }
            }
            tx.put(&k, new);
            continue;
        }
        // Like the garbage collector: a dependent goes once none of its owners exist.
        let others_alive = owner_uids(&obj)
            .iter()
            .filter(|u| u.as_str() != uid)
            .any(|u| {
                tx.inner
                    .objects
                    .values()
                    .any(|o| meta_str(o, "uid") == Some(u.as_str()))
            });
        if !others_alive {
            delete::delete_object(tx, &k, Propagation::Background);
        }
    }
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map(|refs| {
            refs.iter()
                .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Removes every object of a deleted CRD.
pub fn drop_crd_objects(tx: &mut Tx<'_>, crd: &Value) {
    let spec = crd.get("spec");
    let group = spec
        .and_then(|s| s.get("group"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let plural = spec
        .and_then(|s| s.get("names"))
        .and_then(|n| n.get("plural"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if plural.is_empty() {
        return;
    }
    let keys: Vec<ObjKey> = tx
        .inner
        .scan(group, plural, None)
        .map(|(k, _)| k.clone())
        .collect();
    for k in keys {
        tx.remove(&k);
    }
}

/// What the service-account controller creates in every new namespace.
pub fn seed_namespace(tx: &mut Tx<'_>, ns: &str) {
    let key = ObjKey::new("", "serviceaccounts", ns, "default");
    if tx.get(&key).is_some() {
        return;
    }
    let sa = json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "default",
            "namespace": ns,
            "uid": uuid::Uuid::new_v4().to_string(),
            "creationTimestamp": tx.now,
        }
    });
    tx.put(&key, sa);
}
