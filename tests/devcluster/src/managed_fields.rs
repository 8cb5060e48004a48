//! Server-side apply (an honest approximation) and `metadata.managedFields` bookkeeping.
//!
//! Each managedFields entry holds the set of leaf paths its (manager,
//! operation, subresource) owns, encoded as FieldsV1 (`f:<field>`,
//! `k:<key json>` for list elements identified by merge keys, `v:<json>` for
//! set members, `.` for the element itself). Lists without merge keys are
//! atomic: the list is one leaf. Compared with kube-apiserver's
//! structured-merge-diff this skips type-aware defaulting, atomic maps and
//! structs, and multi-key list identities for built-ins (the first merge key
//! alone identifies an element).

mod fieldset;

use crate::patch::ListKind;
use crate::resources::ResourceDef;
use crate::status::ApiError;
use fieldset::{
    decode, display_path, element_key, encode, field_set, get_at, names_kind, node_of, overlaps,
    remove_at, FieldSet, Path,
};
use serde_json::{json, Map, Value};

const APPLY: &str = "Apply";
const UPDATE: &str = "Update";

/// One metav1.StatusCause.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Cause {
    /// e.g. "FieldManagerConflict".
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// e.g. ".data.a".
    pub field: String,
}

/// Why a server-side apply failed.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// Another manager owns a field with a different value (409).
    #[error("{message}")]
    Conflict {
        /// One cause per conflicting field.
        causes: Vec<Cause>,
        /// Full message, as kube-apiserver words it.
        message: String,
    },
    /// The fieldManager query parameter is missing (422 on PatchOptions).
    #[error("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch")]
    MissingFieldManager,
    /// The applied configuration is unusable (422).
    #[error("{0}")]
    Invalid(String),
}

impl ApplyError {
    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            ApplyError::Conflict { .. } => 409,
            ApplyError::MissingFieldManager | ApplyError::Invalid(_) => 422,
        }
    }

    /// metav1.Status reason.
    pub fn reason(&self) -> &'static str {
        match self {
            ApplyError::Conflict { .. } => "Conflict",
            ApplyError::MissingFieldManager | ApplyError::Invalid(_) => "Invalid",
        }
    }

    /// The status causes (also inside [`ApplyError::status_details`]).
    pub fn causes(&self) -> Vec<Cause> {
        match self {
            ApplyError::Conflict { causes, .. } => causes.clone(),
            ApplyError::MissingFieldManager => vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value: is required for apply patch".into(),
                field: "fieldManager".into(),
            }],
            ApplyError::Invalid(_) => Vec::new(),
        }
    }

    /// `details` of the metav1.Status body kube-apiserver sends.
    pub fn status_details(&self) -> Value {
        let causes = serde_json::to_value(self.causes()).unwrap_or(Value::Null);
        match self {
            ApplyError::MissingFieldManager => {
                json!({"group": "meta.k8s.io", "kind": "PatchOptions", "causes": causes})
            }
            _ => json!({ "causes": causes }),
        }
    }
}

impl From<ApplyError> for ApiError {
    fn from(e: ApplyError) -> Self {
        let mut err = ApiError::other(e.code(), e.reason(), e.to_string());
        if let ApplyError::Conflict { causes, .. } = &e {
            let causes: Vec<Value> = causes
                .iter()
                .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
                .collect();
            err.details = Some(json!({"causes": causes}));
        }
        err
    }
}

/// One managedFields entry, decoded.
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: Option<String>,
    subresource: Option<String>,
    fields: FieldSet,
}

impl Entry {
    fn from_json(v: &Value) -> Option<Entry> {
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let mut fields = FieldSet::new();
        if let Some(f) = v.get("fieldsV1") {
            decode(f, &mut Vec::new(), &mut fields);
        }
        Some(Entry {
            manager: s("manager")?,
            operation: s("operation")?,
            api_version: s("apiVersion").unwrap_or_default(),
            time: s("time"),
            subresource: s("subresource").filter(|x| !x.is_empty()),
            fields,
        })
    }

    fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), json!(self.manager));
        m.insert("operation".into(), json!(self.operation));
        m.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            m.insert("time".into(), json!(t));
        }
        m.insert("fieldsType".into(), json!("FieldsV1"));
        m.insert("fieldsV1".into(), encode(&self.fields));
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), json!(s));
        }
        Value::Object(m)
    }

    fn is(&self, manager: &str, operation: &str, subresource: Option<&str>) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource.as_deref() == subresource
    }

    /// How kube-apiserver names this manager in conflict messages.
    fn display(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == UPDATE {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

fn entries_of(obj: &Value) -> Vec<Entry> {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Entry::from_json).collect())
        .unwrap_or_default()
}

fn set_entries(obj: &mut Value, entries: &[Entry]) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        let list = entries.iter().map(Entry::to_json).collect();
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

fn strip_managed_fields(obj: &mut Value) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("managedFields");
    }
}

/// The object without server-managed bookkeeping, for no-op detection.
fn comparable(obj: &Value) -> Value {
    let mut o = obj.clone();
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["managedFields", "resourceVersion", "generation"] {
            meta.remove(k);
        }
    }
    o
}

// ---------------------------------------------------------------- merging applied configs

fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

/// Merges an applied configuration into the live object: maps recursively,
/// keyed lists by key, sets as unions, everything else replaced.
fn merge_applied(def: &ResourceDef, names: &mut Vec<String>, live: &mut Value, applied: &Value) {
    match (&mut *live, applied) {
        (Value::Object(l), Value::Object(a)) => {
            for (k, av) in a {
                if av.is_null() {
                    continue;
                }
                names.push(k.clone());
                match l.get_mut(k) {
                    Some(lv) => merge_applied(def, names, lv, av),
                    None => {
                        l.insert(k.clone(), strip_nulls(av));
                    }
                }
                names.pop();
            }
        }
        (Value::Array(l), Value::Array(a)) => match names_kind(def, names) {
            ListKind::Map(keys)
                if a.iter()
                    .chain(l.iter())
                    .all(|i| element_key(i, &keys).is_some()) =>
            {
                for item in a {
                    let key = element_key(item, &keys);
                    match l.iter_mut().find(|x| element_key(x, &keys) == key) {
                        Some(existing) => merge_applied(def, names, existing, item),
                        None => l.push(strip_nulls(item)),
                    }
                }
            }
            ListKind::Set => {
                for item in a {
                    if !l.contains(item) {
                        l.push(item.clone());
                    }
                }
            }
            _ => *live = strip_nulls(applied),
        },
        _ => *live = strip_nulls(applied),
    }
}

// ---------------------------------------------------------------- public entry points

/// Server-side apply: merges `applied` into `live` (None = create) per the SSA
/// rules (ownership per manager, conflicts unless `force`, removal of fields
/// this manager stopped applying) and returns the new object with
/// `metadata.managedFields` updated. Returns `live` unchanged for a no-op.
pub fn server_side_apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    def: &ResourceDef,
    now: &str,
) -> Result<Value, ApplyError> {
    server_side_apply_to(live, applied, manager, force, def, now, None)
}

/// [`server_side_apply`] through a subresource. An apply to `/status` (of a
/// kind that has the subresource) is recorded as kube-apiserver does: its own
/// managedFields entry (`subresource: status`) owning only `.status` fields,
/// since the status strategy resets everything else the configuration holds.
pub fn server_side_apply_to(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    def: &ResourceDef,
    now: &str,
    subresource: Option<&str>,
) -> Result<Value, ApplyError> {
    let to_status = subresource == Some("status") && def.subresources.status;
    let subresource = subresource.filter(|_| to_status);
    check_applied(applied, manager, def)?;
    let applied = applied_config(applied, to_status);
    let applied_set = field_set(def, &applied, !def.subresources.status || to_status);
    let api_version = applied
        .get("apiVersion")
        .and_then(Value::as_str)
        .map_or_else(|| def.api_version(), str::to_string);
    let mine = |fields: FieldSet| Entry {
        manager: manager.to_string(),
        operation: APPLY.to_string(),
        api_version: api_version.clone(),
        time: Some(now.to_string()),
        subresource: subresource.map(str::to_string),
        fields,
    };

    let Some(live) = live else {
        let mut obj = applied;
        if !obj.get("metadata").is_some_and(Value::is_object) {
            if let Some(m) = obj.as_object_mut() {
                m.insert("metadata".into(), json!({}));
            }
        }
        set_entries(&mut obj, &[mine(applied_set)]);
        return Ok(obj);
    };

    let old_entries = entries_of(live);
    let mut entries = old_entries.clone();
    let me = entries
        .iter()
        .position(|e| e.is(manager, APPLY, subresource));
    let previous = me.map(|i| entries[i].fields.clone()).unwrap_or_default();

    let conflicts = find_conflicts(&entries, me, &applied_set, live, &applied);
    if !conflicts.is_empty() {
        if !force {
            return Err(conflict_error(&entries, &conflicts));
        }
        // Forced: ownership of the conflicting fields moves to this manager.
        for (i, p) in &conflicts {
            if let Some(e) = entries.get_mut(*i) {
                e.fields.retain(|q| !overlaps(p, q));
            }
        }
    }

    let mut obj = live.clone();
    strip_managed_fields(&mut obj);
    remove_dropped(&mut obj, &previous, &applied_set, &entries, me);
    merge_applied(def, &mut Vec::new(), &mut obj, &applied);

    match me {
        Some(i) => {
            let changed = comparable(&obj) != comparable(live) || entries[i].fields != applied_set;
            entries[i].fields = applied_set;
            entries[i].api_version = api_version.clone();
            if changed {
                entries[i].time = Some(now.to_string());
            }
        }
        None => entries.push(mine(applied_set)),
    }
    entries.retain(|e| !e.fields.is_empty());
    if comparable(&obj) == comparable(live) && entries == old_entries {
        return Ok(live.clone());
    }
    set_entries(&mut obj, &entries);
    Ok(obj)
}

/// Refuses an apply without a field manager, of something that is not an
/// object, or of another kind than the resource's.
fn check_applied(applied: &Value, manager: &str, def: &ResourceDef) -> Result<(), ApplyError> {
    if manager.is_empty() {
        return Err(ApplyError::MissingFieldManager);
    }
    if !applied.is_object() {
        return Err(ApplyError::Invalid(
            "the applied configuration must be an object".into(),
        ));
    }
    if let Some(kind) = applied.get("kind").and_then(Value::as_str) {
        if kind != def.kind {
            return Err(ApplyError::Invalid(format!(
                "applied kind {kind:?} does not match the resource kind {:?}",
                def.kind
            )));
        }
    }
    Ok(())
}

/// The applied configuration as it is merged: without nulls and client-sent
/// managedFields (ignored, as with any write), and through `/status` only
/// what the status strategy keeps.
fn applied_config(applied: &Value, to_status: bool) -> Value {
    let mut applied = strip_nulls(applied);
    strip_managed_fields(&mut applied);
    if to_status {
        // Only `.status` survives the status strategy; name and namespace
        // stay to identify the object (they are not owned fields).
        if let Some(o) = applied.as_object_mut() {
            let meta = o.get("metadata").and_then(Value::as_object).map(|m| {
                m.iter()
                    .filter(|(k, _)| *k == "name" || *k == "namespace")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect::<Map<String, Value>>()
            });
            o.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "status"));
            if let Some(meta) = meta {
                o.insert("metadata".into(), Value::Object(meta));
            }
        }
    }
    applied
}

/// Conflicts: (entry, path) where another manager than `me` owns a path
/// overlapping one the apply sets, and the apply changes its value.
fn find_conflicts(
    entries: &[Entry],
    me: Option<usize>,
    applied_set: &FieldSet,
    live: &Value,
    applied: &Value,
) -> Vec<(usize, Path)> {
    let mut conflicts: Vec<(usize, Path)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == me {
            continue;
        }
        for p in applied_set
            .iter()
            .filter(|p| p.last().is_some_and(|l| l != "."))
        {
            if e.fields.iter().any(|q| overlaps(p, q)) && get_at(live, p) != get_at(applied, p) {
                conflicts.push((i, p.clone()));
            }
        }
    }
    conflicts
}

/// Removes from `obj` the fields this manager applied before (`previous`)
/// and omits now, unless it still applies something below them or another
/// manager owns them.
fn remove_dropped(
    obj: &mut Value,
    previous: &FieldSet,
    applied_set: &FieldSet,
    entries: &[Entry],
    me: Option<usize>,
) {
    let others: Vec<&Path> = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != me)
        .flat_map(|(_, e)| e.fields.iter())
        .collect();
    for p in previous.difference(applied_set) {
        let still_applied = applied_set
            .iter()
            .any(|q| overlaps(p, q) && node_of(q).starts_with(node_of(p)));
        if still_applied || others.iter().any(|q| overlaps(p, q)) {
            continue;
        }
        remove_at(obj, p);
    }
}

fn conflict_error(entries: &[Entry], conflicts: &[(usize, Path)]) -> ApplyError {
    let named: Vec<(String, String)> = conflicts
        .iter()
        .filter_map(|(i, p)| entries.get(*i).map(|e| (e.display(), display_path(p))))
        .collect();
    let causes = named
        .iter()
        .map(|(m, p)| Cause {
            reason: "FieldManagerConflict".into(),
            message: format!("conflict with {m}"),
            field: p.clone(),
        })
        .collect();
    let message = match named.as_slice() {
        [(m, p)] => format!("Apply failed with 1 conflict: conflict with {m}: {p}"),
        _ => {
            let mut managers: Vec<&String> = named.iter().map(|(m, _)| m).collect();
            managers.sort();
            managers.dedup();
            let mut lines = Vec::new();
            for m in managers {
                lines.push(format!("conflicts with {m}:"));
                lines.extend(
                    named
                        .iter()
                        .filter(|(n, _)| n == m)
                        .map(|(_, p)| format!("- {p}")),
                );
            }
            format!(
                "Apply failed with {} conflicts: {}",
                named.len(),
                lines.join("\n")
            )
        }
    };
    ApplyError::Conflict { causes, message }
}

/// After any non-apply write: record or refresh an `operation: Update` entry
/// for `manager` owning the fields that changed from `old` to `new` (`old`
/// None = create), take those fields away from other managers, and replace
/// client-sent managedFields with the stored ones. `subresource` is
/// `Some("status")` for /status writes. A no-op write leaves `new` with the
/// stored managedFields untouched (times included).
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    def: &ResourceDef,
    now: &str,
) {
    strip_managed_fields(new);
    let old_entries = old.map(entries_of).unwrap_or_default();
    if let Some(old) = old {
        if comparable(old) == comparable(new) {
            set_entries(new, &old_entries);
            return;
        }
    }
    let with_status = subresource == Some("status") || !def.subresources.status;
    let new_set = field_set(def, new, with_status);
    let changed: FieldSet = match old {
        None => new_set,
        Some(old) => new_set
            .into_iter()
            .filter(|p| match p.split_last() {
                Some((last, parent)) if last == "." => get_at(old, parent).is_none(),
                _ => get_at(old, p) != get_at(new, p),
            })
            .collect(),
    };
    let removed: FieldSet = old
        .map(|o| {
            field_set(def, o, with_status)
                .into_iter()
                .filter(|p| get_at(new, p).is_none())
                .collect()
        })
        .unwrap_or_default();

    let mut entries = old_entries;
    let me = entries
        .iter()
        .position(|e| e.is(manager, UPDATE, subresource));
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) != me {
            e.fields.retain(|q| !changed.iter().any(|p| overlaps(p, q)));
        }
        e.fields.retain(|q| !removed.contains(q));
    }
    match me {
        Some(i) => {
            let e = &mut entries[i];
            e.fields.extend(changed);
            e.time = Some(now.to_string());
            e.api_version = def.api_version();
        }
        None if !changed.is_empty() => entries.push(Entry {
            manager: manager.to_string(),
            operation: UPDATE.to_string(),
            api_version: def.api_version(),
            time: Some(now.to_string()),
            subresource: subresource.map(str::to_string),
            fields: changed,
        }),
        None => {}
    }
    entries.retain(|e| !e.fields.is_empty());
    set_entries(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    const T1: &str = "2026-11-22T04:00:00Z";
    const T2: &str = "2026-11-22T05:00:00Z";

    fn def(kind: &str) -> ResourceDef {
        builtins().into_iter().find(|d| d.kind == kind).unwrap()
    }

    fn cm(data: Value) -> Value {
        json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"d"},"data":data})
    }

    fn entry<'a>(obj: &'a Value, manager: &str, op: &str) -> &'a Value {
        obj["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["manager"] == manager && e["operation"] == op)
            .unwrap_or_else(|| panic!("no {manager}/{op} entry in {obj}"))
    }

    #[test]
    fn apply_to_status_owns_only_status_and_removes_what_it_stops_applying() {
        let d = def("Deployment");
        let dep = |status: Value| {
            json!({"apiVersion":"apps/v1","kind":"Deployment",
                   "metadata":{"name":"w","namespace":"d","labels":{"x":"y"}},
                   "spec":{"replicas":9},"status":status})
        };
        let mut live = json!({"apiVersion":"apps/v1","kind":"Deployment",
            "metadata":{"name":"w","namespace":"d"},"spec":{"replicas":1},"status":{}});
        // Someone else's status field (an update through /status).
        let mut other = live.clone();
        other["status"] = json!({"collisionCount": 7});
        record_update(
            Some(&live),
            &mut other,
            "kubectl-patch",
            Some("status"),
            &d,
            T1,
        );
        live = other;
        let sub = Some("status");
        let applied = dep(json!({"replicas": 1, "availableReplicas": 1}));
        let out = server_side_apply_to(Some(&live), &applied, "st", true, &d, T1, sub).unwrap();
        let e = entry(&out, "st", "Apply");
        assert_eq!(e["subresource"], "status");
        assert_eq!(
            e["fieldsV1"],
            json!({"f:status":{"f:availableReplicas":{},"f:replicas":{}}}),
            "spec and metadata of the configuration are not owned"
        );
        assert_eq!(out["status"]["availableReplicas"], 1);
        let applied = dep(json!({"replicas": 1}));
        let out = server_side_apply_to(Some(&out), &applied, "st", true, &d, T2, sub).unwrap();
        assert_eq!(out["status"], json!({"collisionCount": 7, "replicas": 1}));
    }

    #[test]
    fn create_records_apply_entry_in_fields_v1() {
        let d = def("ConfigMap");
        let obj = server_side_apply(None, &cm(json!({"a":"1"})), "mgr", false, &d, T1).unwrap();
        assert_eq!(obj["data"], json!({"a":"1"}));
        let e = entry(&obj, "mgr", "Apply");
        assert_eq!(e["fieldsV1"], json!({"f:data":{"f:a":{}}}));
        assert_eq!(e["time"], T1);
        assert_eq!(e["fieldsType"], "FieldsV1");
        assert_eq!(e["apiVersion"], "v1");
    }

    #[test]
    fn missing_field_manager_is_invalid() {
        let err =
            server_side_apply(None, &cm(json!({})), "", false, &def("ConfigMap"), T1).unwrap_err();
        assert_eq!((err.code(), err.reason()), (422, "Invalid"));
        assert_eq!(
            err.to_string(),
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch"
        );
        assert_eq!(err.causes()[0].reason, "FieldValueRequired");
        assert_eq!(err.status_details()["kind"], "PatchOptions");
    }

    #[test]
    fn conflicts_with_an_updater_and_force_moves_ownership() {
        let d = def("ConfigMap");
        let mut live = cm(json!({"a":"1"}));
        record_update(None, &mut live, "kubectl-client-side-apply", None, &d, T1);
        assert_eq!(
            entry(&live, "kubectl-client-side-apply", "Update")["fieldsV1"],
            json!({"f:data":{"f:a":{}}})
        );
        // Same value: no conflict, shared ownership.
        let same =
            server_side_apply(Some(&live), &cm(json!({"a":"1"})), "mgr", false, &d, T2).unwrap();
        assert_eq!(
            entry(&same, "mgr", "Apply")["fieldsV1"],
            json!({"f:data":{"f:a":{}}})
        );
        // Different value: 409 with kube's wording.
        let err = server_side_apply(Some(&live), &cm(json!({"a":"2"})), "mgr", false, &d, T2)
            .unwrap_err();
        assert_eq!((err.code(), err.reason()), (409, "Conflict"));
        assert_eq!(
            err.to_string(),
            "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .data.a"
        );
        assert_eq!(
            err.causes(),
            vec![Cause {
                reason: "FieldManagerConflict".into(),
                message: "conflict with \"kubectl-client-side-apply\" using v1".into(),
                field: ".data.a".into()
            }]
        );
        // Forced: the value changes and the updater loses the field.
        let forced = server_side_apply(
            Some(&live),
            &cm(json!({"a":"2","b":"x"})),
            "mgr",
            true,
            &d,
            T2,
        )
        .unwrap();
        assert_eq!(forced["data"], json!({"a":"2","b":"x"}));
        let mf = forced["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 1, "{mf:?}");
        assert_eq!(mf[0]["manager"], "mgr");
    }

    #[test]
    fn conflicts_between_two_appliers_are_listed_per_field() {
        let d = def("ConfigMap");
        let live =
            server_side_apply(None, &cm(json!({"a":"1","b":"1"})), "one", false, &d, T1).unwrap();
        let err = server_side_apply(
            Some(&live),
            &cm(json!({"a":"2","b":"2"})),
            "two",
            false,
            &d,
            T2,
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "Apply failed with 2 conflicts: conflicts with \"one\":\n- .data.a\n- .data.b"
        );
        assert_eq!(err.causes().len(), 2);
        assert_eq!(err.causes()[0].message, "conflict with \"one\"");
    }

    #[test]
    fn omitted_fields_are_removed_unless_owned_by_others() {
        let d = def("ConfigMap");
        let live = server_side_apply(
            None,
            &cm(json!({"a":"1","b":"1","c":"1"})),
            "one",
            false,
            &d,
            T1,
        )
        .unwrap();
        // Another manager also applies b.
        let live =
            server_side_apply(Some(&live), &cm(json!({"b":"1"})), "two", false, &d, T1).unwrap();
        let out =
            server_side_apply(Some(&live), &cm(json!({"a":"1"})), "one", false, &d, T2).unwrap();
        assert_eq!(out["data"], json!({"a":"1","b":"1"}));
        assert_eq!(
            entry(&out, "one", "Apply")["fieldsV1"],
            json!({"f:data":{"f:a":{}}})
        );
        assert_eq!(entry(&out, "one", "Apply")["time"], T2);
        assert_eq!(entry(&out, "two", "Apply")["time"], T1);
    }

    #[test]
    fn reapplying_the_same_config_is_a_no_op() {
        let d = def("ConfigMap");
        let live = server_side_apply(None, &cm(json!({"a":"1"})), "one", false, &d, T1).unwrap();
        let again =
            server_side_apply(Some(&live), &cm(json!({"a":"1"})), "one", false, &d, T2).unwrap();
        assert_eq!(again, live);
    }

    #[test]
    fn keyed_lists_are_owned_per_element() {
        let d = def("Deployment");
        let dep = |containers: Value| {
            json!({"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"w"},
                "spec":{"template":{"spec":{"containers":containers}}}})
        };
        let live = server_side_apply(
            None,
            &dep(json!([{"name":"app","image":"a:1"}])),
            "one",
            false,
            &d,
            T1,
        )
        .unwrap();
        assert_eq!(
            entry(&live, "one", "Apply")["fieldsV1"],
            json!({"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{}}}}}}})
        );
        // A second manager adds its own sidecar without conflict; the first keeps its container.
        let live = server_side_apply(
            Some(&live),
            &dep(json!([{"name":"side","image":"s:1"}])),
            "two",
            false,
            &d,
            T1,
        )
        .unwrap();
        let names: Vec<&str> = live["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["app", "side"]);
        // Changing the first manager's image from the second is a conflict on that element.
        let err = server_side_apply(
            Some(&live),
            &dep(json!([{"name":"app","image":"a:2"}])),
            "two",
            false,
            &d,
            T2,
        )
        .unwrap_err();
        assert_eq!(
            err.causes()[0].field,
            ".spec.template.spec.containers[name=\"app\"].image"
        );
        // The second manager dropping its sidecar removes it.
        let out = server_side_apply(Some(&live), &dep(json!([])), "two", false, &d, T2).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn updates_take_ownership_and_no_ops_change_nothing() {
        let d = def("ConfigMap");
        let live =
            server_side_apply(None, &cm(json!({"a":"1"})), "applier", false, &d, T1).unwrap();
        // An update changing a: ownership moves to the updater.
        let mut new = cm(json!({"a":"2"}));
        new["metadata"]["managedFields"] = json!([{"manager":"forged","operation":"Apply"}]);
        record_update(Some(&live), &mut new, "kubectl-edit", None, &d, T2);
        let mf = new["metadata"]["managedFields"].as_array().unwrap();
        assert_eq!(mf.len(), 1, "{mf:?}");
        assert_eq!(mf[0]["manager"], "kubectl-edit");
        assert_eq!(mf[0]["operation"], "Update");
        assert_eq!(mf[0]["time"], T2);
        // A later apply of a=1 now conflicts with the updater.
        let err = server_side_apply(Some(&new), &cm(json!({"a":"1"})), "applier", false, &d, T2)
            .unwrap_err();
        assert_eq!(err.code(), 409);
        // A no-op update keeps managedFields (and times) untouched.
        let mut same = new.clone();
        same["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        record_update(
            Some(&new),
            &mut same,
            "other",
            None,
            &d,
            "2030-01-01T00:00:00Z",
        );
        assert_eq!(same, new);
    }

    #[test]
    fn main_resource_writes_own_no_status_of_kinds_with_a_status_subresource() {
        let d = def("Namespace");
        let ns = json!({"apiVersion":"v1","kind":"Namespace","metadata":{"name":"n","labels":{"a":"b"}},
            "status":{"phase":"Active"}});
        let obj = server_side_apply(None, &ns, "mgr", false, &d, T1).unwrap();
        assert_eq!(
            entry(&obj, "mgr", "Apply")["fieldsV1"],
            json!({"f:metadata":{"f:labels":{"f:a":{}}}})
        );
        let mut created = ns.clone();
        record_update(None, &mut created, "creator", None, &d, T1);
        assert!(entry(&created, "creator", "Update")["fieldsV1"]
            .get("f:status")
            .is_none());
        // ConfigMaps have no status subresource: everything counts.
        let cm = json!({"metadata":{"name":"c"},"status":{"x":"y"}});
        let obj = server_side_apply(None, &cm, "mgr", false, &def("ConfigMap"), T1).unwrap();
        assert!(entry(&obj, "mgr", "Apply")["fieldsV1"]
            .get("f:status")
            .is_some());
    }

    #[test]
    fn status_updates_are_recorded_with_subresource() {
        let d = def("Deployment");
        let old = json!({"metadata":{"name":"w"},"spec":{"replicas":1}});
        let mut new = json!({"metadata":{"name":"w"},"spec":{"replicas":1},
            "status":{"conditions":[{"type":"Available","status":"True"}]}});
        record_update(Some(&old), &mut new, "controller", Some("status"), &d, T1);
        let e = &new["metadata"]["managedFields"][0];
        assert_eq!(e["subresource"], "status");
        assert_eq!(e["apiVersion"], "apps/v1");
        assert_eq!(
            e["fieldsV1"],
            json!({"f:status":{"f:conditions":{"k:{\"type\":\"Available\"}":{".":{},"f:status":{},"f:type":{}}}}})
        );
    }

    #[test]
    fn fieldsv1_round_trip_and_path_display() {
        let set: FieldSet = [
            vec!["f:metadata".to_string(), "f:labels".into(), "f:app".into()],
            vec![
                "f:metadata".to_string(),
                "f:finalizers".into(),
                "v:\"x\"".into(),
            ],
        ]
        .into_iter()
        .collect();
        let enc = encode(&set);
        let mut back = FieldSet::new();
        decode(&enc, &mut Vec::new(), &mut back);
        assert_eq!(back, set);
        assert_eq!(
            display_path(&vec![
                "f:metadata".into(),
                "f:finalizers".into(),
                "v:\"x\"".into()
            ]),
            ".metadata.finalizers[=\"x\"]"
        );
    }
}
