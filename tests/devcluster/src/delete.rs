//! DELETE: options, preconditions, protected namespaces; the removal and
//! what it sets off (finalizers, propagation) are `gc`'s.

use crate::deletion::{DeleteOutcome, Propagation};
use crate::gc;
use crate::meta::meta_str;
use crate::resources::ResourceDef;
use crate::status::ApiError;
use crate::store::{ObjKey, Tx};
use serde_json::{json, Value};

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
    Ok(gc::delete_object(tx, key, opts.propagation))
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
