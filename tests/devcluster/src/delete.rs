//! DELETE: preconditions, finalizers, propagation.

use crate::gc;
use crate::meta::{self, meta_mut, meta_str};
use crate::resources::ResourceDef;
use crate::status::ApiError;
use crate::store::{ObjKey, Tx};
use serde_json::{json, Value};

/// metav1.DeletionPropagation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Propagation {
    /// Leave dependents, removing their ownerReference.
    Orphan,
    /// Delete the owner now and its dependents afterwards.
    Background,
    /// Mark the owner with the `foregroundDeletion` finalizer, delete its
    /// dependents, then the owner once no blocking dependent is left.
    Foreground,
}

impl Propagation {
    /// Parses the DeleteOptions value.
    pub fn parse(s: &str) -> Result<Self, ApiError> {
        match s {
            "Orphan" => Ok(Propagation::Orphan),
            "Background" => Ok(Propagation::Background),
            "Foreground" => Ok(Propagation::Foreground),
            other => Err(ApiError::bad_request(format!(
                "DeleteOptions.meta.k8s.io \"\" is invalid: propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            ))),
        }
    }
}

/// Parsed DeleteOptions (body and query).
#[derive(Debug, Clone)]
pub struct DeleteOpts {
    /// How dependents are handled.
    pub propagation: Propagation,
    /// preconditions.uid.
    pub uid: Option<String>,
    /// preconditions.resourceVersion.
    pub resource_version: Option<String>,
}

impl Default for DeleteOpts {
    fn default() -> Self {
        DeleteOpts {
            propagation: Propagation::Background,
            uid: None,
            resource_version: None,
        }
    }
}

/// What a DELETE did.
#[derive(Debug, Clone)]
pub enum DeleteOutcome {
    /// The object still exists, marked for deletion (finalizers pending).
    Pending(Value),
    /// The object is gone; this is its last state.
    Deleted(Value),
}

const PROTECTED_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public"];

/// Deletes one object.
pub fn delete(
    tx: &mut Tx<'_>,
    def: &ResourceDef,
    key: &ObjKey,
    opts: &DeleteOpts,
) -> Result<DeleteOutcome, ApiError> {
    let Some(old) = tx.get(key).cloned() else {
        return Err(ApiError::not_found(def, &key.name));
    };
    if let Some(uid) = &opts.uid {
        let actual = meta_str(&old, "uid").unwrap_or("");
        if uid != actual {
            return Err(ApiError::conflict_msg(
                def,
                &key.name,
                &format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"
                ),
            ));
        }
    }
    if let Some(rv) = &opts.resource_version {
        let actual = meta_str(&old, "resourceVersion").unwrap_or("");
        if rv != actual {
            return Err(ApiError::conflict_msg(
                def,
                &key.name,
                &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"),
            ));
        }
    }
    if key.is_namespace() {
        if PROTECTED_NAMESPACES.contains(&key.name.as_str()) {
            return Err(ApiError::forbidden(
                def,
                &key.name,
                "this namespace may not be deleted",
            ));
        }
        let obj = gc::terminate_namespace(tx, &key.name);
        return Ok(match tx.get(key) {
            Some(_) => DeleteOutcome::Pending(obj),
            None => DeleteOutcome::Deleted(obj),
        });
    }
    Ok(delete_object(tx, key, opts.propagation))
}

/// Deletes an existing object, honouring finalizers (used by DELETE and by cascades).
pub fn delete_object(tx: &mut Tx<'_>, key: &ObjKey, propagation: Propagation) -> DeleteOutcome {
    let Some(old) = tx.get(key).cloned() else {
        return DeleteOutcome::Deleted(json!({}));
    };
    let uid = meta_str(&old, "uid").unwrap_or("").to_string();
    let has_dependents = !uid.is_empty() && !gc::dependents(tx, &uid).is_empty();
    match propagation {
        // kube adds the `orphan` finalizer and the garbage collector strips the
        // ownerReferences before removing it: dependents change before the owner goes.
        Propagation::Orphan if has_dependents => gc::orphan_dependents(tx, &uid),
        // kube adds `foregroundDeletion` even without dependents and the collector
        // removes it at once; without dependents this deletes directly instead (the
        // same for a client, minus one MODIFIED event).
        Propagation::Foreground if has_dependents => {
            if meta::finalizers(&old).iter().any(|f| f == gc::FOREGROUND) {
                return DeleteOutcome::Pending(old);
            }
            return DeleteOutcome::Pending(gc::start_foreground(tx, key));
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
            gc::drop_crd_objects(tx, &crd);
        }
    }
    let last = tx.remove_as(key, last)?;
    if let Some(uid) = meta_str(&last, "uid") {
        gc::collect_dependents(tx, uid, propagation);
    }
    gc::release_owners(tx, &last);
    if !key.namespace.is_empty() {
        gc::try_finalize_namespace(tx, &key.namespace);
    }
    Some(last)
}

/// The success Status kube returns for most built-in deletes.
pub fn success_status(def: &ResourceDef, obj: &Value) -> Value {
    json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": meta_str(obj, "name").unwrap_or(""),
            "group": def.group,
            "kind": def.plural,
            "uid": meta_str(obj, "uid").unwrap_or(""),
        }
    })
}
