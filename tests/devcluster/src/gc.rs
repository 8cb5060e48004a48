//! Server-side cleanups: removing an object and what its removal sets off
//! (finalizers, propagation to dependents, owners waiting in foreground
//! deletion), namespace termination, CRD removal, and the objects every
//! namespace starts with.

use crate::deletion::{DeleteOutcome, Propagation};
use crate::meta::{self, meta_mut, meta_str};
use crate::store::{ObjKey, Tx};
use serde_json::{json, Value};

/// Deletes an existing object, honouring finalizers (used by DELETE and by cascades).
pub fn delete_object(tx: &mut Tx<'_>, key: &ObjKey, propagation: Propagation) -> DeleteOutcome {
    let Some(old) = tx.get(key).cloned() else {
        return DeleteOutcome::Deleted(json!({}));
    };
    let uid = meta_str(&old, "uid").unwrap_or("").to_string();
    let has_dependents = !uid.is_empty() && !dependents(tx, &uid).is_empty();
    match propagation {
        // kube adds the `orphan` finalizer and the garbage collector strips the
        // ownerReferences before removing it: dependents change before the owner goes.
        Propagation::Orphan if has_dependents => orphan_dependents(tx, &uid),
        // kube adds `foregroundDeletion` even without dependents and the collector
        // removes it at once; without dependents this deletes directly instead (the
        // same for a client, minus one MODIFIED event).
        Propagation::Foreground if has_dependents => {
            if meta::finalizers(&old).iter().any(|f| f == FOREGROUND) {
                return DeleteOutcome::Pending(old);
            }
            return DeleteOutcome::Pending(start_foreground(tx, key));
        }
        _ => {}
    }
    if !meta::finalizers(&old).is_empty() {
        if meta::is_deleting(&old) {
            return DeleteOutcome::Pending(old);
        }
        let mut new = old;
        let m = meta_mut(&mut new);
        m.insert("deletionTimestamp".into(), json!(tx.now));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
        if m.get("generation").and_then(Value::as_i64).unwrap_or(0) > 0 {
            meta::bump_generation(&mut new);
        }
        return DeleteOutcome::Pending(tx.put(key, new));
    }
    match remove_with_cascade(tx, key, propagation) {
        Some(last) => DeleteOutcome::Deleted(last),
        None => DeleteOutcome::Deleted(json!({})),
    }
}

/// Removes the object now and runs what follows a removal: dependents (by
/// ownerReference), owners waiting for it in foreground deletion, a CRD's objects,
/// and completing a terminating namespace.
pub fn remove_with_cascade(
    tx: &mut Tx<'_>,
    key: &ObjKey,
    propagation: Propagation,
) -> Option<Value> {
    remove_as_with_cascade(tx, key, None, propagation)
}

/// [`remove_with_cascade`] with an explicit last state for the DELETED event.
pub fn remove_as_with_cascade(
    tx: &mut Tx<'_>,
    key: &ObjKey,
    last: Option<Value>,
    propagation: Propagation,
) -> Option<Value> {
    if key.is_crd() {
        // kube's CRD finalizer deletes every custom resource before the CRD itself goes,
        // so a watcher of the resource sees each object's DELETED before its watch ends.
        if let Some(crd) = tx.get(key).cloned() {
            drop_crd_objects(tx, &crd);
        }
    }
    let last = tx.remove_as(key, last)?;
    if let Some(uid) = meta_str(&last, "uid") {
        collect_dependents(tx, uid, propagation);
    }
    release_owners(tx, &last);
    if !key.namespace.is_empty() {
        try_finalize_namespace(tx, &key.namespace);
    }
    Some(last)
}

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
        delete_object(tx, &k, Propagation::Background);
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

/// The finalizer that holds an owner until its blocking dependents are gone.
pub const FOREGROUND: &str = "foregroundDeletion";

/// Keys of the objects whose ownerReferences name `uid`.
pub fn dependents(tx: &Tx<'_>, uid: &str) -> Vec<ObjKey> {
    tx.inner
        .objects
        .iter()
        .filter(|(_, v)| owner_uids(v).iter().any(|u| u == uid))
        .map(|(k, _)| k.clone())
        .collect()
}

/// Handles dependents of a removed owner `uid`.
pub fn collect_dependents(tx: &mut Tx<'_>, uid: &str, propagation: Propagation) {
    for k in dependents(tx, uid) {
        let Some(obj) = tx.get(&k).cloned() else {
            continue;
        };
        if propagation == Propagation::Orphan {
            drop_owner_ref(tx, &k, obj, uid);
            continue;
        }
        // Like the garbage collector: a dependent goes once none of its owners exist.
        let others_alive = owner_uids(&obj)
            .iter()
            .filter(|u| u.as_str() != uid)
            .any(|u| find_by_uid(tx, u).is_some());
        if !others_alive {
            delete_object(tx, &k, Propagation::Background);
        }
    }
}

/// Strips the ownerReferences to `uid` from every dependent (Orphan propagation).
pub fn orphan_dependents(tx: &mut Tx<'_>, uid: &str) {
    collect_dependents(tx, uid, Propagation::Orphan);
}

/// Stores `obj` without its ownerReferences to `uid` (MODIFIED).
fn drop_owner_ref(tx: &mut Tx<'_>, key: &ObjKey, mut obj: Value, uid: &str) {
    let m = meta_mut(&mut obj);
    if let Some(Value::Array(refs)) = m.get_mut("ownerReferences") {
        refs.retain(|r| r.get("uid").and_then(Value::as_str) != Some(uid));
        if refs.is_empty() {
            m.remove("ownerReferences");
        }
    }
    tx.put(key, obj);
}

/// Foreground deletion, as kube-apiserver and the garbage collector do it in turn:
/// marks the owner (deletionTimestamp and the `foregroundDeletion` finalizer, one
/// MODIFIED event), deletes its dependents, and removes the owner once none of them
/// with `blockOwnerDeletion: true` is left (at once unless a dependent has
/// finalizers of its own; [`release_owners`] finishes it when that dependent goes).
/// Returns the marked owner, which is what the DELETE answers.
pub fn start_foreground(tx: &mut Tx<'_>, key: &ObjKey) -> Value {
    let Some(old) = tx.get(key).cloned() else {
        return json!({});
    };
    let first_mark = !meta::is_deleting(&old);
    let mut new = old;
    let m = meta_mut(&mut new);
    if first_mark {
        m.insert("deletionTimestamp".into(), json!(tx.now));
        m.insert("deletionGracePeriodSeconds".into(), json!(0));
    }
    let finalizers = m.entry("finalizers").or_insert_with(|| json!([]));
    if let Value::Array(list) = finalizers {
        list.push(json!(FOREGROUND));
    } else {
        *finalizers = json!([FOREGROUND]);
    }
    if first_mark && m.get("generation").and_then(Value::as_i64).unwrap_or(0) > 0 {
        meta::bump_generation(&mut new);
    }
    let marked = tx.put(key, new);
    let uid = meta_str(&marked, "uid").unwrap_or("").to_string();
    let mut deps = dependents(tx, &uid);
    // Blocking dependents last: removing the last of them releases the owner (see
    // `release_owners`), and every dependent should be handled before that.
    deps.sort_by_key(|k| tx.get(k).is_some_and(|v| blocks(v, &uid)));
    for k in deps {
        let Some(dep) = tx.get(&k).cloned() else {
            continue;
        };
        if has_solid_owner(tx, &dep, &uid) {
            // The collector only detaches a dependent that another live owner keeps.
            drop_owner_ref(tx, &k, dep, &uid);
        } else {
            // Recursive: a dependent with dependents of its own waits for them too.
            delete_object(tx, &k, Propagation::Foreground);
        }
    }
    try_finish_foreground(tx, key);
    marked
}

/// True if `obj` has an owner other than `uid` that exists and is not itself
/// waiting for its dependents (the collector's "solid" owners).
fn has_solid_owner(tx: &Tx<'_>, obj: &Value, uid: &str) -> bool {
    owner_uids(obj)
        .iter()
        .filter(|u| u.as_str() != uid)
        .filter_map(|u| find_by_uid(tx, u))
        .any(|k| tx.get(&k).is_some_and(|o| !waiting_for_dependents(o)))
}

fn waiting_for_dependents(obj: &Value) -> bool {
    meta::is_deleting(obj) && meta::finalizers(obj).iter().any(|f| f == FOREGROUND)
}

/// Removes the `foregroundDeletion` finalizer of the owner at `key` once no
/// dependent with `blockOwnerDeletion: true` exists; the owner then goes (one
/// DELETED event) unless other finalizers remain.
pub fn try_finish_foreground(tx: &mut Tx<'_>, key: &ObjKey) {
    let Some(owner) = tx.get(key).cloned() else {
        return;
    };
    if !waiting_for_dependents(&owner) {
        return;
    }
    let uid = meta_str(&owner, "uid").unwrap_or("");
    if tx.inner.objects.values().any(|v| blocks(v, uid)) {
        return;
    }
    let mut new = owner;
    let m = meta_mut(&mut new);
    if let Some(Value::Array(list)) = m.get_mut("finalizers") {
        list.retain(|f| f.as_str() != Some(FOREGROUND));
        if list.is_empty() {
            m.remove("finalizers");
        }
    }
    if meta::finalizers(&new).is_empty() {
        remove_as_with_cascade(tx, key, Some(new), Propagation::Background);
    } else {
        tx.put(key, new);
    }
}

/// After `removed` is gone: lets any owner waiting in foreground deletion finish.
pub fn release_owners(tx: &mut Tx<'_>, removed: &Value) {
    for uid in owner_uids(removed) {
        if let Some(k) = find_by_uid(tx, &uid) {
            try_finish_foreground(tx, &k);
        }
    }
}

/// True if `obj` has an ownerReference to `uid` with `blockOwnerDeletion: true`.
fn blocks(obj: &Value, uid: &str) -> bool {
    owner_refs(obj).iter().any(|r| {
        r.get("uid").and_then(Value::as_str) == Some(uid)
            && r.get("blockOwnerDeletion").and_then(Value::as_bool) == Some(true)
    })
}

fn find_by_uid(tx: &Tx<'_>, uid: &str) -> Option<ObjKey> {
    tx.inner
        .objects
        .iter()
        .find(|(_, v)| meta_str(v, "uid") == Some(uid))
        .map(|(k, _)| k.clone())
}

fn owner_refs(obj: &Value) -> &[Value] {
    obj.get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

fn owner_uids(obj: &Value) -> Vec<String> {
    owner_refs(obj)
        .iter()
        .filter_map(|r| r.get("uid").and_then(Value::as_str).map(str::to_string))
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delete::{delete, DeleteOpts};
    use crate::patch::PatchType;
    use crate::resources::{builtins, ResourceDef};
    use crate::store::{EventType, Store};
    use crate::write::{self, key_for, FieldValidation, WriteCtx};

    fn ctx() -> WriteCtx {
        WriteCtx {
            manager: "test".into(),
            manager_explicit: true,
            validation: FieldValidation::Warn,
            force: None,
        }
    }

    fn cm_def() -> ResourceDef {
        builtins()
            .into_iter()
            .find(|d| d.plural == "configmaps")
            .unwrap()
    }

    fn store() -> Store {
        let s = Store::open(None, 1000).unwrap();
        crate::seed::seed(&s, "t", 0).unwrap();
        s
    }

    /// Creates ConfigMap `name` owned by `owners` ((uid, blockOwnerDeletion)) with
    /// `finalizers`; returns its uid.
    fn create(s: &Store, name: &str, owners: &[(&str, bool)], finalizers: &[&str]) -> String {
        let refs: Vec<Value> = owners
            .iter()
            .map(|(uid, block)| {
                json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": uid, "blockOwnerDeletion": block})
            })
            .collect();
        let mut body = json!({"metadata": {"name": name}});
        if !refs.is_empty() {
            body["metadata"]["ownerReferences"] = json!(refs);
        }
        if !finalizers.is_empty() {
            body["metadata"]["finalizers"] = json!(finalizers);
        }
        let out = s
            .write(false, |tx| {
                write::create(tx, &cm_def(), Some("default"), body, &ctx())
            })
            .unwrap();
        out.obj["metadata"]["uid"].as_str().unwrap().to_string()
    }

    fn delete_with(s: &Store, name: &str, propagation: Propagation) -> DeleteOutcome {
        let opts = DeleteOpts {
            propagation,
            ..DeleteOpts::default()
        };
        let key = key_for(&cm_def(), Some("default"), name);
        s.write(false, |tx| delete(tx, &cm_def(), &key, &opts))
            .unwrap()
    }

    fn drop_finalizers(s: &Store, name: &str) {
        s.write(false, |tx| {
            write::patch(
                tx,
                &cm_def(),
                Some("default"),
                name,
                PatchType::Merge,
                br#"{"metadata":{"finalizers":null}}"#,
                None,
                &ctx(),
            )
        })
        .unwrap();
    }

    fn events_after(s: &Store, rv: u64) -> Vec<(EventType, String)> {
        let w = s.watch("", "configmaps", None, Some(rv)).unwrap();
        w.backlog
            .iter()
            .map(|e| (e.etype, e.key.name.clone()))
            .collect()
    }

    fn exists(s: &Store, name: &str) -> Option<Value> {
        let key = key_for(&cm_def(), Some("default"), name);
        s.read(|i| i.objects.get(&key).cloned())
    }

    #[test]
    fn foreground_marks_the_owner_then_deletes_dependents_first() {
        let s = store();
        let uid = create(&s, "owner", &[], &[]);
        create(&s, "blocking", &[(&uid, true)], &[]);
        create(&s, "plain", &[(&uid, false)], &[]);
        let start = s.current_rv();
        let DeleteOutcome::Pending(marked) = delete_with(&s, "owner", Propagation::Foreground)
        else {
            panic!("foreground answers with the marked owner");
        };
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(marked["metadata"]["finalizers"], json!([FOREGROUND]));
        let ev = |t, n: &str| (t, n.to_string());
        assert_eq!(
            events_after(&s, start),
            vec![
                ev(EventType::Modified, "owner"),
                ev(EventType::Deleted, "plain"),
                ev(EventType::Deleted, "blocking"),
                ev(EventType::Deleted, "owner"),
            ]
        );
        assert!(exists(&s, "owner").is_none());
    }

    #[test]
    fn foreground_waits_for_a_blocking_dependent_with_finalizers() {
        let s = store();
        let uid = create(&s, "owner", &[], &[]);
        create(&s, "blocking", &[(&uid, true)], &["x.io/hold"]);
        create(&s, "plain", &[(&uid, false)], &["x.io/hold"]);
        delete_with(&s, "owner", Propagation::Foreground);
        let owner = exists(&s, "owner").expect("held by the blocking dependent");
        assert_eq!(owner["metadata"]["finalizers"], json!([FOREGROUND]));
        assert!(exists(&s, "blocking").unwrap()["metadata"]["deletionTimestamp"].is_string());
        // A second foreground DELETE changes nothing.
        let rv = s.current_rv();
        delete_with(&s, "owner", Propagation::Foreground);
        assert_eq!(s.current_rv(), rv);
        // The non-blocking dependent does not hold the owner.
        drop_finalizers(&s, "plain");
        assert!(exists(&s, "owner").is_some());
        let start = s.current_rv();
        drop_finalizers(&s, "blocking");
        let names: Vec<_> = events_after(&s, start);
        assert_eq!(
            names,
            vec![
                (EventType::Deleted, "blocking".to_string()),
                (EventType::Deleted, "owner".to_string()),
            ]
        );
    }

    #[test]
    fn foreground_keeps_other_finalizers_and_detaches_dependents_with_live_owners() {
        let s = store();
        let uid = create(&s, "owner", &[], &["x.io/keep"]);
        let other = create(&s, "other", &[], &[]);
        create(&s, "shared", &[(&uid, true), (&other, false)], &[]);
        delete_with(&s, "owner", Propagation::Foreground);
        let owner = exists(&s, "owner").expect("its own finalizer remains");
        assert_eq!(owner["metadata"]["finalizers"], json!(["x.io/keep"]));
        let shared = exists(&s, "shared").expect("kept by its other owner");
        assert_eq!(
            shared["metadata"]["ownerReferences"][0]["uid"],
            json!(other)
        );
        assert_eq!(
            shared["metadata"]["ownerReferences"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn foreground_without_dependents_deletes_at_once_and_cycles_end() {
        let s = store();
        create(&s, "alone", &[], &[]);
        assert!(matches!(
            delete_with(&s, "alone", Propagation::Foreground),
            DeleteOutcome::Deleted(_)
        ));
        // a owns b, b owns a: both go.
        let a = create(&s, "a", &[], &[]);
        let b = create(&s, "b", &[(&a, true)], &[]);
        let key = key_for(&cm_def(), Some("default"), "a");
        s.write(false, |tx| {
            let mut obj = tx.get(&key).cloned().unwrap();
            obj["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": b}]);
            tx.put(&key, obj);
            Ok(())
        })
        .unwrap();
        delete_with(&s, "a", Propagation::Foreground);
        assert!(exists(&s, "a").is_none());
        assert!(exists(&s, "b").is_none());
    }

    #[test]
    fn orphan_detaches_dependents_before_the_owner_goes_even_with_finalizers() {
        let s = store();
        let uid = create(&s, "owner", &[], &["x.io/hold"]);
        create(&s, "dep", &[(&uid, true)], &[]);
        let start = s.current_rv();
        delete_with(&s, "owner", Propagation::Orphan);
        drop_finalizers(&s, "owner");
        assert_eq!(
            events_after(&s, start),
            vec![
                (EventType::Modified, "dep".to_string()),
                (EventType::Modified, "owner".to_string()),
                (EventType::Deleted, "owner".to_string()),
            ]
        );
        let dep = exists(&s, "dep").unwrap();
        assert!(dep["metadata"].get("ownerReferences").is_none());
    }
}
