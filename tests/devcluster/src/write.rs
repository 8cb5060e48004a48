//! Create, update and patch: the rules kube-apiserver applies to every write.

use crate::crd;
pub use crate::decode::FieldValidation;
use crate::decode::{check_fields, check_type, normalize};
use crate::deletion::Propagation;
use crate::gc;
use crate::limits;
use crate::managed_fields;
use crate::meta::{self, meta_mut, meta_str};
use crate::names;
use crate::patch::{self, PatchType};
use crate::resources::ResourceDef;
use crate::service;
use crate::status::{ApiError, FieldCause};
use crate::store::{ObjKey, Tx};
use crate::validation;
use crate::validation::crd_schema;
use serde_json::{json, Value};

/// Per-request write options.
#[derive(Debug, Clone)]
pub struct WriteCtx {
    /// managedFields manager name.
    pub manager: String,
    /// Whether the request named a fieldManager explicitly (required for apply).
    pub manager_explicit: bool,
    /// Unknown-field handling.
    pub validation: FieldValidation,
    /// `force` query parameter (only valid for apply).
    pub force: Option<bool>,
}

/// Result of a write.
#[derive(Debug, Clone)]
pub struct WriteOutcome {
    /// The object as stored (or unchanged on a no-op).
    pub obj: Value,
    /// True when the write created the object (201).
    pub created: bool,
    /// `Warning` header values.
    pub warnings: Vec<String>,
}

/// The namespace key of a namespaced object.
pub fn ns_key(ns: &str) -> ObjKey {
    ObjKey::new("", "namespaces", "", ns)
}

/// The key of `name` in `def` (namespace ignored for cluster-scoped resources).
pub fn key_for(def: &ResourceDef, ns: Option<&str>, name: &str) -> ObjKey {
    let ns = if def.namespaced { ns.unwrap_or("") } else { "" };
    ObjKey::new(&def.group, &def.plural, ns, name)
}

fn check_namespace_for_create(
    tx: &Tx<'_>,
    def: &ResourceDef,
    ns: &str,
    name: &str,
) -> Result<(), ApiError> {
    let Some(nsobj) = tx.get(&ns_key(ns)) else {
        return Err(ApiError::namespace_not_found(ns));
    };
    if meta::is_deleting(nsobj) {
        return Err(ApiError::forbidden(
            def,
            name,
            &format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            ),
        ));
    }
    Ok(())
}

fn validate_meta(def: &ResourceDef, obj: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    // Every write path (create, update, each patch type, apply, /status) passes
    // here with the object it is about to store (and, on updates, the stored one).
    limits::check_object(obj)?;
    let name = meta_str(obj, "name").unwrap_or("");
    let mut causes = Vec::new();
    if let Err(msg) = names::validate(names::rule_for(&def.group, &def.plural), name) {
        causes.push(FieldCause {
            reason: "FieldValueInvalid",
            field: "metadata.name".into(),
            message: format!("Invalid value: \"{name}\": {msg}"),
        });
    }
    causes.extend(validation::object::metadata_causes(obj));
    if let Some(old) = old {
        causes.extend(validation::object::update_causes(def, old, obj));
    }
    causes.extend(validation::object::data_causes(def, obj));
    if causes.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(&def.group, &def.kind, name, causes))
    }
}

/// Defaults kube's create strategies apply (status reset, namespace phase, ...).
fn on_create(def: &ResourceDef, obj: &mut Value, now: &str) -> Result<(), ApiError> {
    // Create strategies of resources with a status subresource drop client status
    // (nodes keep it: kubelets register with status).
    if def.subresources.status && !(def.group.is_empty() && def.plural == "nodes") {
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
    }
    let Some(o) = obj.as_object_mut() else {
        return Ok(());
    };
    if let Some(zero) = meta::zero_status(def) {
        o.entry("status").or_insert(zero);
    }
    match (def.group.as_str(), def.plural.as_str()) {
        ("", "namespaces") => {
            o.insert("spec".into(), json!({"finalizers": ["kubernetes"]}));
            o.insert("status".into(), json!({"phase": "Active"}));
        }
        ("", "secrets") => {
            o.entry("type").or_insert(json!("Opaque"));
        }
        ("", "pods") => {
            o.insert(
                "status".into(),
                json!({"phase": "Pending", "qosClass": "BestEffort"}),
            );
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            crd::check_structural(obj, None)?;
            let entry = crd::entry_from_crd(obj)?;
            let st = crd::accepted_status(obj, &entry, now);
            if let Some(o) = obj.as_object_mut() {
                o.insert("status".into(), st);
            }
        }
        _ => {}
    }
    Ok(())
}

/// POST: creates `body` in `def` (namespace from the URL).
pub fn create(
    tx: &mut Tx<'_>,
    def: &ResourceDef,
    ns: Option<&str>,
    mut body: Value,
    ctx: &WriteCtx,
) -> Result<WriteOutcome, ApiError> {
    check_type(def, &mut body)?;
    let warnings = check_fields(def, &mut body, ctx.validation)?;
    normalize(def, &mut body);
    let mut obj = prepare_create(tx, def, ns, body)?;
    let now = tx.now.clone();
    managed_fields::record_update(None, &mut obj, &ctx.manager, None, def, &now);
    let stored = commit_create(tx, def, ns, obj);
    Ok(WriteOutcome {
        obj: stored,
        created: true,
        warnings,
    })
}

/// Fills server-set metadata and validates a new object; does not store it.
fn prepare_create(
    tx: &Tx<'_>,
    def: &ResourceDef,
    ns: Option<&str>,
    mut obj: Value,
) -> Result<Value, ApiError> {
    let m = meta_mut(&mut obj);
    if def.namespaced {
        let url_ns = ns.unwrap_or("default");
        match m.get("namespace").and_then(Value::as_str) {
            Some(b) if !b.is_empty() && b != url_ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => {}
        }
        m.insert("namespace".into(), json!(url_ns));
    } else {
        m.remove("namespace");
    }
    let has_name = m
        .get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    if !has_name {
        let Some(prefix) = m
            .get("generateName")
            .and_then(Value::as_str)
            .map(str::to_string)
        else {
            return Err(ApiError::invalid(
                &def.group,
                &def.kind,
                "",
                vec![FieldCause {
                    reason: "FieldValueRequired",
                    field: "metadata.name".into(),
                    message: "Required value: name or generateName is required".into(),
                }],
            ));
        };
        let mut name = meta::generate_name(&prefix);
        for _ in 0..8 {
            if tx.get(&key_for(def, ns, &name)).is_none() {
                break;
            }
            name = meta::generate_name(&prefix);
        }
        m.insert("name".into(), json!(name));
    }
    for k in [
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
    ] {
        m.remove(k);
    }
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), json!(tx.now));
    if meta::tracks_generation(def) {
        m.insert("generation".into(), json!(1));
    } else {
        m.remove("generation");
    }
    validate_meta(def, &obj, None)?;
    let name = meta_str(&obj, "name").unwrap_or("").to_string();
    if def.namespaced {
        check_namespace_for_create(tx, def, ns.unwrap_or("default"), &name)?;
    }
    if is_service(def) {
        // kube allocates in `beginCreate`, before storage finds a name taken.
        service::on_create(tx, &mut obj)?;
    }
    if tx.get(&key_for(def, ns, &name)).is_some() {
        return Err(ApiError::already_exists(def, &name));
    }
    on_create(def, &mut obj, &tx.now)?;
    crd_schema::admit(def, &mut obj, None)?;
    Ok(obj)
}

fn commit_create(tx: &mut Tx<'_>, def: &ResourceDef, ns: Option<&str>, obj: Value) -> Value {
    let name = meta_str(&obj, "name").unwrap_or("").to_string();
    let stored = tx.put(&key_for(def, ns, &name), obj);
    if def.group.is_empty() && def.plural == "namespaces" {
        gc::seed_namespace(tx, &name);
    }
    stored
}

fn is_service(def: &ResourceDef) -> bool {
    def.group.is_empty() && def.plural == "services"
}

/// Carries server-owned fields from `old` into `new` and applies subresource rules
/// (and a Service's ClusterIP rules, which read the other Services in `tx`).
fn prepare_update(
    tx: &Tx<'_>,
    def: &ResourceDef,
    old: &Value,
    mut new: Value,
    sub: Option<&str>,
) -> Result<Value, ApiError> {
    if sub == Some("status") {
        // Status writes change only .status.
        let mut out = old.clone();
        if let Some(o) = out.as_object_mut() {
            match new.get("status") {
                Some(s) => o.insert("status".into(), s.clone()),
                None => o.remove("status"),
            };
        }
        return Ok(out);
    }
    if let Some(sub @ ("approval" | "ephemeralcontainers")) = sub {
        // kube's approval strategy keeps everything but status.conditions; the
        // ephemeralcontainers strategy everything but spec.ephemeralContainers.
        let (parent, field) = if sub == "approval" {
            ("status", "conditions")
        } else {
            ("spec", "ephemeralContainers")
        };
        let mut out = old.clone();
        let value = new.get(parent).and_then(|p| p.get(field)).cloned();
        if let Some(o) = out.as_object_mut() {
            let p = o.entry(parent).or_insert_with(|| json!({}));
            if let Some(p) = p.as_object_mut() {
                match value {
                    Some(v) => p.insert(field.into(), v),
                    None => p.remove(field),
                };
            }
        }
        return Ok(out);
    }
    let old_meta = old.get("metadata").cloned().unwrap_or(json!({}));
    let new_finalizers = meta::finalizers(&new);
    let m = meta_mut(&mut new);
    for k in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
        "namespace",
        "name",
        "managedFields",
    ] {
        match old_meta.get(k) {
            Some(v) => m.insert(k.into(), v.clone()),
            None => m.remove(k),
        };
    }
    m.remove("selfLink");
    if meta::is_deleting(old) {
        let old_f = meta::finalizers(old);
        if let Some(added) = new_finalizers.iter().find(|f| !old_f.contains(f)) {
            return Err(ApiError::invalid_field(
                def,
                meta_str(old, "name").unwrap_or(""),
                "metadata.finalizers",
                format!("Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{added}\"}}"),
            ));
        }
    }
    if def.subresources.status {
        if let Some(o) = new.as_object_mut() {
            match old.get("status") {
                Some(s) => o.insert("status".into(), s.clone()),
                None => o.remove("status"),
            };
        }
    }
    if def.group.is_empty() && def.plural == "namespaces" {
        // spec.finalizers is only changed through /finalize; phase is server-owned.
        if let Some(o) = new.as_object_mut() {
            if let Some(s) = old.get("spec") {
                o.insert("spec".into(), s.clone());
            }
        }
    }
    if is_service(def) {
        service::on_update(tx, old, &mut new)?;
    }
    if def.group == "apiextensions.k8s.io" && def.plural == "customresourcedefinitions" {
        crd::check_structural(&new, Some(old))?;
        let entry = crd::entry_from_crd(&new)?;
        let st = crd::accepted_status(&new, &entry, &meta::now_rfc3339());
        if let Some(o) = new.as_object_mut() {
            o.insert("status".into(), st);
        }
    }
    Ok(new)
}

/// Stores `new` over `old` unless nothing changed; handles generation and the
/// removal of the last finalizer.
fn finish_update(
    tx: &mut Tx<'_>,
    def: &ResourceDef,
    key: &ObjKey,
    old: &Value,
    mut new: Value,
) -> Value {
    if meta::is_noop(old, &new) {
        return old.clone();
    }
    if meta::generation_bumps(def, old, &new) {
        meta::bump_generation(&mut new);
    }
    if meta::is_deleting(&new) && meta::finalizers(&new).is_empty() {
        if key.is_namespace() {
            let stored = tx.put(key, new);
            gc::try_finalize_namespace(tx, &key.name);
            return stored;
        }
        // kube deletes instead of updating: a single DELETED event with this state.
        return gc::remove_as_with_cascade(tx, key, Some(new), Propagation::Background)
            .unwrap_or(json!({}));
    }
    tx.put(key, new)
}

/// Records the manager's update and stores `new` over `old` (used by /scale).
pub fn store_update(
    tx: &mut Tx<'_>,
    def: &ResourceDef,
    key: &ObjKey,
    old: &Value,
    mut new: Value,
    manager: &str,
    sub: Option<&str>,
) -> Value {
    let now = tx.now.clone();
    managed_fields::record_update(Some(old), &mut new, manager, sub, def, &now);
    finish_update(tx, def, key, old, new)
}

/// PUT (main resource or /status).
pub fn update(
    tx: &mut Tx<'_>,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    mut body: Value,
    sub: Option<&str>,
    ctx: &WriteCtx,
) -> Result<WriteOutcome, ApiError> {
    check_type(def, &mut body)?;
    // kube's update handler (`checkName`): the body must name the object, and
    // name it as the URL does; a missing name is a mismatch, not "keep the old".
    let body_name = meta_str(&body, "name").unwrap_or("");
    if body_name != name {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({name})"
        )));
    }
    if def.namespaced {
        match meta_str(&body, "namespace") {
            Some(b) if !b.is_empty() && Some(b) != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => {}
        }
    }
    let key = key_for(def, ns, name);
    let Some(old) = tx.get(&key).cloned() else {
        return Err(ApiError::not_found(def, name));
    };
    if let Some(rv) = meta_str(&body, "resourceVersion") {
        if !rv.is_empty() && Some(rv) != meta_str(&old, "resourceVersion") {
            return Err(ApiError::conflict(def, name));
        }
    }
    let warnings = check_fields(def, &mut body, ctx.validation)?;
    normalize(def, &mut body);
    let mut new = prepare_update(tx, def, &old, body, sub)?;
    validate_meta(def, &new, Some(&old))?;
    crd_schema::admit(def, &mut new, Some(&old))?;
    let now = tx.now.clone();
    managed_fields::record_update(Some(&old), &mut new, &ctx.manager, sub, def, &now);
    let obj = finish_update(tx, def, &key, &old, new);
    Ok(WriteOutcome {
        obj,
        created: false,
        warnings,
    })
}

/// Parses an apply body (YAML or JSON).
pub(crate) fn parse_apply_body(body: &[u8]) -> Result<Value, ApiError> {
    let too_deep =
        |e: limits::LimitError| ApiError::bad_request(format!("error decoding YAML: {e}"));
    // kubectl sends apply bodies as JSON; anything else is YAML.
    if body.trim_ascii_start().starts_with(b"{") {
        limits::scan_json(body, limits::MAX_DEPTH).map_err(too_deep)?;
        if let Ok(v) = serde_json::from_slice::<Value>(body) {
            return Ok(v);
        }
    }
    limits::scan_yaml(body, limits::MAX_DEPTH).map_err(too_deep)?;
    let v = crate::yaml::from_slice::<Value>(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    limits::check_value(&v).map_err(too_deep)?;
    Ok(v)
}

/// Parses a PATCH body of any type, so it can be done before the store is
/// locked (and off the async workers: a large YAML apply body takes seconds).
pub fn parse_patch_body(pt: PatchType, body: &[u8]) -> Result<Value, ApiError> {
    match pt {
        PatchType::Apply => parse_apply_body(body),
        _ => Ok(patch::parse_body(pt, body)?),
    }
}

/// PATCH from raw bytes (the server parses first, see [`patch_parsed`]).
#[cfg(test)]
#[allow(clippy::too_many_arguments)]
pub fn patch(
    tx: &mut Tx<'_>,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    pt: PatchType,
    body: &[u8],
    sub: Option<&str>,
    ctx: &WriteCtx,
) -> Result<WriteOutcome, ApiError> {
    let parsed = parse_patch_body(pt, body)?;
    patch_parsed(tx, def, ns, name, pt, parsed, sub, ctx)
}

/// PATCH (main resource or /status), all four patch types, with a body parsed
/// by [`parse_patch_body`].
#[allow(clippy::too_many_arguments)]
pub fn patch_parsed(
    tx: &mut Tx<'_>,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    pt: PatchType,
    body: Value,
    sub: Option<&str>,
    ctx: &WriteCtx,
) -> Result<WriteOutcome, ApiError> {
    let key = key_for(def, ns, name);
    if pt == PatchType::Apply {
        return apply(tx, def, ns, name, body, sub, ctx, &key);
    }
    if ctx.force.is_some() {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![FieldCause {
                reason: "FieldValueForbidden",
                field: "force".into(),
                message: "Forbidden: may not be specified for non-apply patch".into(),
            }],
        ));
    }
    let Some(old) = tx.get(&key).cloned() else {
        return Err(ApiError::not_found(def, name));
    };
    let patched = patch::apply_patch_value(pt, &old, &body, def)?;
    if !patched.is_object() {
        return Err(ApiError::bad_request("the patch did not produce an object"));
    }
    // A resourceVersion inside the patch is a precondition.
    // (Removing it makes the patch unconditional.)
    if let Some(rv) = meta_str(&patched, "resourceVersion").filter(|rv| !rv.is_empty()) {
        if Some(rv) != meta_str(&old, "resourceVersion") {
            return Err(ApiError::conflict(def, name));
        }
    }
    let mut patched = patched;
    check_type(def, &mut patched)?;
    if meta_str(&patched, "name") != Some(name) {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({}) does not match the name on the URL ({name})",
            meta_str(&patched, "name").unwrap_or("")
        )));
    }
    let warnings = check_fields(def, &mut patched, ctx.validation)?;
    normalize(def, &mut patched);
    let mut new = prepare_update(tx, def, &old, patched, sub)?;
    validate_meta(def, &new, Some(&old))?;
    crd_schema::admit(def, &mut new, Some(&old))?;
    let now = tx.now.clone();
    managed_fields::record_update(Some(&old), &mut new, &ctx.manager, sub, def, &now);
    let obj = finish_update(tx, def, &key, &old, new);
    Ok(WriteOutcome {
        obj,
        created: false,
        warnings,
    })
}

#[allow(clippy::too_many_arguments)]
fn apply(
    tx: &mut Tx<'_>,
    def: &ResourceDef,
    ns: Option<&str>,
    name: &str,
    mut applied: Value,
    sub: Option<&str>,
    ctx: &WriteCtx,
    key: &ObjKey,
) -> Result<WriteOutcome, ApiError> {
    if !ctx.manager_explicit {
        return Err(ApiError::invalid(
            "meta.k8s.io",
            "PatchOptions",
            "",
            vec![FieldCause {
                reason: "FieldValueRequired",
                field: "fieldManager".into(),
                message: "Required value: is required for apply patch".into(),
            }],
        ));
    }
    check_type(def, &mut applied)?;
    match meta_str(&applied, "name") {
        Some(n) if n != name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({n}) does not match the name on the URL ({name})"
            )))
        }
        _ => {}
    }
    if def.namespaced {
        match meta_str(&applied, "namespace") {
            Some(b) if !b.is_empty() && Some(b) != ns => {
                return Err(ApiError::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => {}
        }
    }
    meta_mut(&mut applied).insert("name".into(), json!(name));
    let warnings = check_fields(def, &mut applied, ctx.validation)?;
    let force = ctx.force.unwrap_or(false);
    let old = tx.get(key).cloned();
    match old {
        None => {
            if sub.is_some() {
                return Err(ApiError::not_found(def, name));
            }
            if def.namespaced {
                // Fill the namespace first so ownership records match the stored object.
                meta_mut(&mut applied).insert("namespace".into(), json!(ns.unwrap_or("default")));
            }
            let now = tx.now.clone();
            let mut owned =
                managed_fields::server_side_apply(None, &applied, &ctx.manager, force, def, &now)?;
            normalize(def, &mut owned);
            // Server-set metadata (uid, timestamps, defaults) is not owned by the applier.
            let obj = prepare_create(tx, def, ns, owned)?;
            let stored = commit_create(tx, def, ns, obj);
            Ok(WriteOutcome {
                obj: stored,
                created: true,
                warnings,
            })
        }
        Some(old) => {
            if let Some(rv) = meta_str(&applied, "resourceVersion") {
                if !rv.is_empty() && Some(rv) != meta_str(&old, "resourceVersion") {
                    return Err(ApiError::conflict(def, name));
                }
            }
            let mut merged = managed_fields::server_side_apply_to(
                Some(&old),
                &applied,
                &ctx.manager,
                force,
                def,
                &tx.now,
                sub,
            )?;
            normalize(def, &mut merged);
            let managed = merged
                .get("metadata")
                .and_then(|m| m.get("managedFields"))
                .cloned();
            let mut new = prepare_update(tx, def, &old, merged, sub)?;
            if let Some(mf) = managed {
                meta_mut(&mut new).insert("managedFields".into(), mf);
            }
            validate_meta(def, &new, Some(&old))?;
            crd_schema::admit(def, &mut new, Some(&old))?;
            let obj = finish_update(tx, def, key, &old, new);
            Ok(WriteOutcome {
                obj,
                created: false,
                warnings,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delete::{delete, DeleteOpts};
    use crate::resources::builtins;
    use crate::seed;
    use crate::store::{EventType, Store};

    fn ctx() -> WriteCtx {
        WriteCtx {
            manager: "test".into(),
            manager_explicit: true,
            validation: FieldValidation::Warn,
            force: None,
        }
    }

    fn def(plural: &str) -> ResourceDef {
        builtins().into_iter().find(|d| d.plural == plural).unwrap()
    }

    fn store() -> Store {
        let s = Store::open(None, 1000).unwrap();
        seed::seed(&s, "t", 0).unwrap();
        s
    }

    fn events_after(s: &Store, rv: u64) -> Vec<(EventType, String)> {
        let w = s.watch("", "configmaps", None, Some(rv)).unwrap();
        w.backlog
            .iter()
            .map(|e| (e.etype, e.key.name.clone()))
            .collect()
    }

    #[test]
    fn last_finalizer_removal_deletes_with_one_event() {
        let s = store();
        let cm = def("configmaps");
        let start = s.current_rv();
        let body = json!({"metadata": {"name": "f", "finalizers": ["x/y"]}});
        s.write(false, |tx| create(tx, &cm, Some("default"), body, &ctx()))
            .unwrap();
        let key = key_for(&cm, Some("default"), "f");
        let out = s
            .write(false, |tx| delete(tx, &cm, &key, &DeleteOpts::default()))
            .unwrap();
        assert!(matches!(out, crate::deletion::DeleteOutcome::Pending(_)));
        let removed = s
            .write(false, |tx| {
                patch(
                    tx,
                    &cm,
                    Some("default"),
                    "f",
                    PatchType::Merge,
                    br#"{"metadata":{"finalizers":null}}"#,
                    None,
                    &ctx(),
                )
            })
            .unwrap();
        assert!(removed.obj["metadata"]["deletionTimestamp"].is_string());
        assert_eq!(
            events_after(&s, start),
            vec![
                (EventType::Added, "f".to_string()),
                (EventType::Modified, "f".to_string()),
                (EventType::Deleted, "f".to_string()),
            ]
        );
        assert!(s.read(|i| !i.objects.contains_key(&key)));
    }

    #[test]
    fn noop_update_keeps_resource_version_and_emits_nothing() {
        let s = store();
        let cm = def("configmaps");
        let body = json!({"metadata": {"name": "a"}, "data": {"k": "v"}});
        let created = s
            .write(false, |tx| {
                create(tx, &cm, Some("default"), body.clone(), &ctx())
            })
            .unwrap();
        let rv = s.current_rv();
        let same = s
            .write(false, |tx| {
                update(tx, &cm, Some("default"), "a", body, None, &ctx())
            })
            .unwrap();
        assert_eq!(
            same.obj["metadata"]["resourceVersion"],
            created.obj["metadata"]["resourceVersion"]
        );
        assert_eq!(s.current_rv(), rv);
        assert!(events_after(&s, rv).is_empty());
    }

    #[test]
    fn status_is_ignored_on_main_writes_and_generation_follows_spec() {
        let s = store();
        let dep = def("deployments");
        let body =
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}, "status": {"replicas": 9}});
        let c = s
            .write(false, |tx| create(tx, &dep, Some("default"), body, &ctx()))
            .unwrap();
        // The client's status is dropped; Go writes the zero DeploymentStatus.
        assert_eq!(c.obj["status"], json!({}));
        assert_eq!(c.obj["metadata"]["generation"], 1);
        let upd =
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 2}, "status": {"replicas": 5}});
        let u = s
            .write(false, |tx| {
                update(tx, &dep, Some("default"), "d", upd, None, &ctx())
            })
            .unwrap();
        assert_eq!(u.obj["metadata"]["generation"], 2);
        assert_eq!(u.obj["status"], json!({}));
        let st =
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 7}, "status": {"replicas": 5}});
        let s2 = s
            .write(false, |tx| {
                update(tx, &dep, Some("default"), "d", st, Some("status"), &ctx())
            })
            .unwrap();
        assert_eq!(s2.obj["status"]["replicas"], 5);
        assert_eq!(s2.obj["spec"]["replicas"], 2);
        assert_eq!(s2.obj["metadata"]["generation"], 2);
    }

    #[test]
    fn namespace_rules() {
        let s = store();
        let cm = def("configmaps");
        let e = s
            .write(false, |tx| {
                create(
                    tx,
                    &cm,
                    Some("nope"),
                    json!({"metadata": {"name": "x"}}),
                    &ctx(),
                )
            })
            .unwrap_err();
        assert_eq!((e.code, e.reason), (404, "NotFound"));
        let e = s
            .write(false, |tx| {
                create(
                    tx,
                    &cm,
                    Some("default"),
                    json!({"metadata": {"name": "Bad"}}),
                    &ctx(),
                )
            })
            .unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        let gen = s
            .write(false, |tx| {
                create(
                    tx,
                    &cm,
                    Some("default"),
                    json!({"metadata": {"generateName": "x-"}}),
                    &ctx(),
                )
            })
            .unwrap();
        assert_eq!(gen.obj["metadata"]["name"].as_str().unwrap().len(), 7);
        assert!(
            gen.obj["metadata"].get("generation").is_none(),
            "configmaps have no generation"
        );
    }
}
