//! From a source object to the desired copy: strip, mutate, stamp; and the Orphan edit.

use fleetbus_schemas::crd::{
    AddRemove, GroupVersionKind, Mutations, OrphanPolicy, OverrideType, ResourceSyncRuleSpec,
    SyncRule,
};
use fleetbus_schemas::k8s_names::{is_dns1123_label, is_dns1123_subdomain};
use fleetbus_schemas::pointer::{parse_field_pointer, PointerError};
use fleetbus_schemas::well_known::is_reserved_key;
use fleetbus_schemas::well_known::{
    ANNOTATION_BUNDLE, ANNOTATION_COPY_MARK, ANNOTATION_ORIGIN_CLUSTER, ANNOTATION_ORIGIN_UID,
    ANNOTATION_ORPHANED_FROM, ANNOTATION_ORPHAN_POLICY, ANNOTATION_RULE, ANNOTATION_SOURCE_HASH,
    LABEL_MANAGED, LABEL_MANAGED_VALUE,
};
use serde_json::{Map, Value};

use crate::mark::{CopyMark, Marked};
use crate::sync::rules::matching::array_index;
use crate::sync::rules::template::{self, TemplateContext, TemplateError};

/// Metadata the API server owns; a copy must not carry the source cluster's values.
pub const SERVER_OWNED_METADATA: [&str; 10] = [
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "ownerReferences",
    "finalizers",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];
/// kubectl's client-side apply record: it describes the source's history, not the copy's.
pub const ANNOTATION_LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";
/// The annotations fleetbus stamps on every copy ([`unmanage`] removes them, and
/// `fleetbus.io/bundle`, which only copies unwrapped from a Bundle carry).
pub const STAMP_ANNOTATIONS: [&str; 6] = [
    ANNOTATION_ORIGIN_CLUSTER,
    ANNOTATION_COPY_MARK,
    ANNOTATION_ORIGIN_UID,
    ANNOTATION_RULE,
    ANNOTATION_SOURCE_HASH,
    ANNOTATION_ORPHAN_POLICY,
];

/// Everything [`desired_copy`] needs for one source object.
#[derive(Debug, Clone, Copy)]
pub struct CopyInput<'a> {
    /// Name of the ResourceSyncRule (stamped as `fleetbus.io/rule`).
    pub rule_name: &'a str,
    /// The rule's spec (orphan policy).
    pub spec: &'a ResourceSyncRuleSpec,
    /// The rule entries matching the source, in order (from `matching_rules`).
    pub entries: &'a [&'a SyncRule],
    /// The object from the envelope.
    pub source: &'a Value,
    /// Origin cluster name.
    pub origin: &'a str,
    /// The envelope's uid (the source's `metadata.uid`).
    pub origin_uid: &'a str,
    /// The envelope's contentHash.
    pub content_hash: &'a str,
    /// What override templates can read.
    pub templates: &'a TemplateContext,
    /// This cluster's ownership mark (`model::mark`).
    pub marker: &'a CopyMark,
}

/// Why no desired copy could be built from a source object.
#[derive(Debug, thiserror::Error)]
pub enum MutateError {
    /// The source (or a mutation's result) is not a JSON object with an object `metadata`.
    #[error("object is not a JSON object with object metadata")]
    NotAnObject,
    /// An override path does not parse.
    #[error("invalid override path {path:?}")]
    InvalidPath {
        /// The path as written.
        path: String,
        /// Why it does not parse.
        #[source]
        source: PointerError,
    },
    /// An override path runs through a value that cannot hold it (a string, a missing
    /// array element, a non-index token on an array).
    #[error("cannot set {path:?}: {reason}")]
    PathNotSettable {
        /// The override path.
        path: String,
        /// What blocked it.
        reason: String,
    },
    /// An override's template failed.
    #[error("failed to render the override value for {path:?}")]
    Template {
        /// The override path.
        path: String,
        /// The template failure.
        #[source]
        source: TemplateError,
    },
    /// `metadata.labels` or `metadata.annotations` is not a map of strings.
    #[error("metadata.{field} is not a map of strings")]
    InvalidMap {
        /// `labels` or `annotations`.
        field: &'static str,
    },
    /// The copy has no non-empty string `metadata.name`.
    #[error("the copy has no metadata.name")]
    MissingName,
    /// The copy's `metadata.namespace` is present but not a string.
    #[error("the copy's metadata.namespace is not a string")]
    InvalidNamespace,
    /// The copy's `apiVersion`/`kind` are not a valid group/version and kind.
    #[error("the copy has an invalid apiVersion {api_version:?} or kind {kind:?}")]
    InvalidType {
        /// `apiVersion` as found.
        api_version: String,
        /// `kind` as found.
        kind: String,
    },
}

/// Whether any matching entry asks for `.status` to be copied.
pub fn syncs_status(entries: &[&SyncRule]) -> bool {
    entries
        .iter()
        .any(|e| e.mutations.as_ref().is_some_and(|m| m.sync_status))
}

/// Builds the object to write on this cluster: the source without server-owned fields
/// (and without `.status` unless synced), each entry's mutations in order, then the
/// fleetbus stamp. Fails when an override cannot be applied or the result is not a
/// writable object.
pub fn desired_copy(input: &CopyInput<'_>) -> Result<Value, MutateError> {
    let mut obj = input.source.clone();
    strip(&mut obj, syncs_status(input.entries))?;
    let reserved = Reserved::of(&obj);
    for m in input.entries.iter().filter_map(|e| e.mutations.as_ref()) {
        apply_mutations(&mut obj, m, input.templates)?;
    }
    // Validation refuses rules that write fleetbus.io/ keys; this makes sure of it.
    reserved.restore(&mut obj)?;
    stamp(&mut obj, input)?;
    check_writable(&obj)?;
    Ok(obj)
}

/// The source's `fleetbus.io/*` labels and annotations, put back after the mutations so
/// that no mutation can add, change or remove one (a forged `origin-cluster` would make
/// the copy look like someone else's, and its source's deletion would never reach it).
struct Reserved {
    labels: Vec<(String, Value)>,
    annotations: Vec<(String, Value)>,
}

impl Reserved {
    fn of(obj: &Value) -> Self {
        let take = |field: &str| -> Vec<(String, Value)> {
            obj.get("metadata")
                .and_then(|m| m.get(field))
                .and_then(Value::as_object)
                .into_iter()
                .flatten()
                .filter(|(k, _)| is_reserved_key(k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        };
        Reserved {
            labels: take("labels"),
            annotations: take("annotations"),
        }
    }

    fn restore(self, obj: &mut Value) -> Result<(), MutateError> {
        for (field, saved) in [("labels", self.labels), ("annotations", self.annotations)] {
            let map = string_map_mut(obj, field)?;
            map.retain(|k, _| !is_reserved_key(k));
            map.extend(saved);
        }
        Ok(())
    }
}

fn strip(obj: &mut Value, keep_status: bool) -> Result<(), MutateError> {
    let top = obj.as_object_mut().ok_or(MutateError::NotAnObject)?;
    if !keep_status {
        top.remove("status");
    }
    let meta = metadata(obj)?;
    for field in SERVER_OWNED_METADATA {
        meta.remove(field);
    }
    if let Some(Value::Object(a)) = meta.get_mut("annotations") {
        a.remove(ANNOTATION_LAST_APPLIED);
    }
    strip_allocations(obj);
    Ok(())
}

/// A Service's addresses and node ports are the source cluster's
/// allocations: the sink's API server allocates its own (copied, the copy
/// would take the source's address if it happened to be free there, and
/// be refused when it is held or outside that cluster's service range).
/// A headless Service keeps `clusterIP: None`, which is no allocation. A
/// rule may still set them with an override (mutations come after).
fn strip_allocations(obj: &mut Value) {
    if obj.get("apiVersion").and_then(Value::as_str) != Some("v1")
        || obj.get("kind").and_then(Value::as_str) != Some("Service")
    {
        return;
    }
    let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    if spec.get("clusterIP").and_then(Value::as_str) != Some("None") {
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    spec.remove("healthCheckNodePort");
    if let Some(Value::Array(ports)) = spec.get_mut("ports") {
        for p in ports.iter_mut().filter_map(Value::as_object_mut) {
            p.remove("nodePort");
        }
    }
}

fn metadata(obj: &mut Value) -> Result<&mut Map<String, Value>, MutateError> {
    obj.as_object_mut()
        .and_then(|o| o.get_mut("metadata"))
        .and_then(Value::as_object_mut)
        .ok_or(MutateError::NotAnObject)
}

/// `metadata.<field>` as a mutable map, created when absent.
fn string_map_mut<'a>(
    obj: &'a mut Value,
    field: &'static str,
) -> Result<&'a mut Map<String, Value>, MutateError> {
    let slot = metadata(obj)?
        .entry(field)
        .or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
        .ok_or(MutateError::InvalidMap { field })
}

fn add_remove(obj: &mut Value, field: &'static str, ar: &AddRemove) -> Result<(), MutateError> {
    let map = string_map_mut(obj, field)?;
    for (k, v) in &ar.add {
        map.insert(k.clone(), Value::String(v.clone()));
    }
    for k in &ar.remove {
        map.remove(k);
    }
    Ok(())
}

fn apply_mutations(
    obj: &mut Value,
    m: &Mutations,
    ctx: &TemplateContext,
) -> Result<(), MutateError> {
    if let Some(ar) = &m.labels {
        add_remove(obj, "labels", ar)?;
    }
    if let Some(ar) = &m.annotations {
        add_remove(obj, "annotations", ar)?;
    }
    for o in &m.overrides {
        let tokens = parse_field_pointer(&o.path).map_err(|source| MutateError::InvalidPath {
            path: o.path.clone(),
            source,
        })?;
        match o.type_ {
            OverrideType::Replace => {
                // Validation requires a value for replace; an absent one sets null.
                let value = match &o.value {
                    Some(src) => {
                        template::render(src, ctx).map_err(|source| MutateError::Template {
                            path: o.path.clone(),
                            source,
                        })?
                    }
                    None => Value::Null,
                };
                set_at(obj, &tokens, value).map_err(|reason| MutateError::PathNotSettable {
                    path: o.path.clone(),
                    reason,
                })?;
            }
            OverrideType::Remove => remove_at(obj, &tokens),
        }
    }
    if let Some(gvk) = &m.group_version_kind {
        set_gvk(obj, gvk)?;
    }
    Ok(())
}

fn set_gvk(obj: &mut Value, gvk: &GroupVersionKind) -> Result<(), MutateError> {
    let top = obj.as_object_mut().ok_or(MutateError::NotAnObject)?;
    let api_version = if gvk.group.is_empty() {
        gvk.version.clone()
    } else {
        format!("{}/{}", gvk.group, gvk.version)
    };
    top.insert("apiVersion".into(), Value::String(api_version));
    top.insert("kind".into(), Value::String(gvk.kind.clone()));
    Ok(())
}

/// Sets the value at `tokens`, creating missing objects on the way. In an array the
/// token must be an existing index, or `-` (or the length) to append at the end.
pub(in crate::sync) fn set_at(
    root: &mut Value,
    tokens: &[String],
    value: Value,
) -> Result<(), String> {
    let Some((last, parents)) = tokens.split_last() else {
        return Err("the whole object cannot be replaced".into());
    };
    let mut cur = root;
    for t in parents {
        if cur.is_null() {
            *cur = Value::Object(Map::new());
        }
        cur = match cur {
            Value::Object(m) => m
                .entry(t.clone())
                .or_insert_with(|| Value::Object(Map::new())),
            Value::Array(a) => {
                let len = a.len();
                array_index(t)
                    .and_then(|i| a.get_mut(i))
                    .ok_or_else(|| format!("no element {t:?} in an array of {len}"))?
            }
            other => return Err(format!("{t:?} is inside a {}", type_name(other))),
        };
    }
    if cur.is_null() {
        *cur = Value::Object(Map::new());
    }
    match cur {
        Value::Object(m) => {
            m.insert(last.clone(), value);
        }
        Value::Array(a) => match array_index(last) {
            Some(i) if i < a.len() => a[i] = value,
            Some(i) if i == a.len() => a.push(value),
            None if last == "-" => a.push(value),
            _ => return Err(format!("no element {last:?} in an array of {}", a.len())),
        },
        other => return Err(format!("{last:?} is inside a {}", type_name(other))),
    }
    Ok(())
}

/// Removes the value at `tokens`; a path that does not exist is a no-op.
fn remove_at(root: &mut Value, tokens: &[String]) {
    let Some((last, parents)) = tokens.split_last() else {
        return;
    };
    let mut cur = root;
    for t in parents {
        let next = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => array_index(t).and_then(|i| a.get_mut(i)),
            _ => None,
        };
        let Some(next) = next else { return };
        cur = next;
    }
    match cur {
        Value::Object(m) => {
            m.remove(last);
        }
        Value::Array(a) => {
            if let Some(i) = array_index(last).filter(|&i| i < a.len()) {
                a.remove(i);
            }
        }
        _ => {}
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn orphan_policy_name(p: OrphanPolicy) -> &'static str {
    match p {
        OrphanPolicy::Delete => "Delete",
        OrphanPolicy::Orphan => "Orphan",
    }
}

/// The fleetbus annotations and managed label. Runs after the mutations so a rule
/// cannot remove or forge them; afterwards both maps are non-empty, so no empty map
/// is ever left behind.
fn stamp(obj: &mut Value, input: &CopyInput<'_>) -> Result<(), MutateError> {
    let annotations = string_map_mut(obj, "annotations")?;
    // The first origin survives multi-hop copies.
    annotations
        .entry(ANNOTATION_ORIGIN_CLUSTER)
        .or_insert_with(|| Value::String(input.origin.to_owned()));
    for (k, v) in [
        (ANNOTATION_ORIGIN_UID, input.origin_uid),
        (ANNOTATION_RULE, input.rule_name),
        (ANNOTATION_SOURCE_HASH, input.content_hash),
        (
            ANNOTATION_ORPHAN_POLICY,
            orphan_policy_name(input.spec.orphan_policy),
        ),
    ] {
        annotations.insert(k.to_owned(), Value::String(v.to_owned()));
    }
    string_map_mut(obj, "labels")?.insert(
        LABEL_MANAGED.to_owned(),
        Value::String(LABEL_MANAGED_VALUE.to_owned()),
    );
    // Marked last, over the copy as it will be written (its kind, namespace
    // and name after mutations, its first origin): what the mark binds.
    if let Some(m) = crate::mark::Meta::of(obj) {
        let origin = m
            .annotations
            .and_then(|a| a.get(ANNOTATION_ORIGIN_CLUSTER))
            .and_then(Value::as_str)
            .unwrap_or(input.origin);
        let mark = input.marker.mark(&Marked {
            group: m.group,
            kind: m.kind,
            namespace: m.namespace,
            name: m.name,
            origin,
        });
        string_map_mut(obj, "annotations")?
            .insert(ANNOTATION_COPY_MARK.to_owned(), Value::String(mark));
    }
    Ok(())
}

/// A copy the API server could accept: a name, a string namespace if any, string
/// labels and annotations, and a well-formed apiVersion and kind.
fn check_writable(obj: &Value) -> Result<(), MutateError> {
    let meta = obj
        .get("metadata")
        .and_then(Value::as_object)
        .ok_or(MutateError::NotAnObject)?;
    match meta.get("name") {
        Some(Value::String(n)) if !n.is_empty() => {}
        _ => return Err(MutateError::MissingName),
    }
    if meta.get("namespace").is_some_and(|n| !n.is_string()) {
        return Err(MutateError::InvalidNamespace);
    }
    for field in ["labels", "annotations"] {
        let ok = meta.get(field).is_none_or(|m| {
            m.as_object()
                .is_some_and(|m| m.values().all(Value::is_string))
        });
        if !ok {
            return Err(MutateError::InvalidMap { field });
        }
    }
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let version_ok = match api_version.split_once('/') {
        Some((group, version)) => is_dns1123_subdomain(group) && is_dns1123_label(version),
        None => is_dns1123_label(api_version),
    };
    let kind_ok = kind.starts_with(|c: char| c.is_ascii_uppercase())
        && kind.chars().all(|c| c.is_ascii_alphanumeric());
    if !(version_ok && kind_ok) {
        return Err(MutateError::InvalidType {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        });
    }
    Ok(())
}

/// The Orphan policy's edit: the live copy without the fleetbus annotations and the
/// managed label, to be written back with a full replace (it keeps `resourceVersion`).
/// It says where it came from instead (`fleetbus.io/orphaned-from: <origin>`): a
/// cluster that is also a source of the rule would otherwise publish it back as its
/// own original (`withheld`), to fight the origin's copies elsewhere.
pub fn unmanage(live: &Value) -> Value {
    let mut obj = live.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        // Stored objects keep a summary of managedFields only (see
        // `meta::compact_managed_fields`); sent back, it would replace the
        // server's. Omitted, the server keeps its own.
        meta.remove("managedFields");
        if let Some(Value::Object(a)) = meta.get_mut("annotations") {
            if let Some(origin) = a.get(ANNOTATION_ORIGIN_CLUSTER).cloned() {
                a.insert(ANNOTATION_ORPHANED_FROM.to_owned(), origin);
            }
            for k in STAMP_ANNOTATIONS {
                a.remove(k);
            }
            a.remove(ANNOTATION_BUNDLE);
        }
        if let Some(Value::Object(l)) = meta.get_mut("labels") {
            l.remove(LABEL_MANAGED);
        }
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::model::Target;
    use fleetbus_schemas::crd::Override;
    use proptest::prelude::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    fn source() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "web",
                "namespace": "team-a",
                "uid": "u-1",
                "resourceVersion": "42",
                "generation": 3,
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "managedFields": [{"manager": "kubectl"}],
                "ownerReferences": [{"kind": "X", "name": "y", "uid": "z", "apiVersion": "v1"}],
                "finalizers": ["example.com/f"],
                "selfLink": "/apis/apps/v1/namespaces/team-a/deployments/web",
                "deletionTimestamp": "2026-01-02T00:00:00Z",
                "deletionGracePeriodSeconds": 30,
                "labels": {"app": "web", "tier": "fe"},
                "annotations": {
                    "kubectl.kubernetes.io/last-applied-configuration": "{}",
                    "example.com/keep": "yes"
                }
            },
            "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}},
            "status": {"readyReplicas": 3}
        })
    }

    fn cluster_ctx(object: &Value) -> TemplateContext {
        TemplateContext {
            object: object.clone(),
            cluster: json!({"name": "east", "labels": {"region": "us-east-1"}}),
            local_cluster: json!({"name": "west", "labels": {"region": "us-west-2"}}),
            values: json!({}),
            placement: Value::Null,
        }
    }

    fn entry(m: Mutations) -> SyncRule {
        SyncRule {
            match_: vec![],
            mutations: Some(m),
        }
    }

    fn replace(path: &str, value: &str) -> Override {
        Override::replace(path, value)
    }

    fn remove(path: &str) -> Override {
        Override::remove(path)
    }

    fn copy_with(
        src: &Value,
        spec: &ResourceSyncRuleSpec,
        entries: &[SyncRule],
    ) -> Result<Value, MutateError> {
        let refs: Vec<&SyncRule> = entries.iter().collect();
        let ctx = cluster_ctx(src);
        desired_copy(&CopyInput {
            rule_name: "web-rule",
            spec,
            entries: &refs,
            source: src,
            origin: "east",
            origin_uid: "u-1",
            content_hash: "sha256:abc",
            templates: &ctx,
            marker: &crate::mark::tests::marker(),
        })
    }

    fn copy(entries: &[SyncRule]) -> Result<Value, MutateError> {
        copy_with(&source(), &ResourceSyncRuleSpec::default(), entries)
    }

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_services_addresses_and_node_ports_are_left_to_the_sink_cluster() {
        let svc = |ip: &str| {
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "web", "namespace": "team-a", "uid": "u-1", "resourceVersion": "9"},
                "spec": {"type": "NodePort", "clusterIP": ip, "clusterIPs": [ip],
                         "healthCheckNodePort": 30001,
                         "ports": [{"name": "http", "port": 80, "nodePort": 30080}]}
            })
        };
        let c = copy_with(&svc("10.96.7.7"), &ResourceSyncRuleSpec::default(), &[]).unwrap();
        let spec = &c["spec"];
        assert!(
            spec.get("clusterIP").is_none() && spec.get("clusterIPs").is_none(),
            "{spec}"
        );
        assert!(spec.get("healthCheckNodePort").is_none());
        assert!(spec["ports"][0].get("nodePort").is_none());
        assert_eq!(spec["ports"][0]["port"], 80);
        // Headless stays headless.
        let c = copy_with(&svc("None"), &ResourceSyncRuleSpec::default(), &[]).unwrap();
        assert_eq!(c["spec"]["clusterIP"], "None");
    }

    #[test]
    fn strips_server_owned_fields_and_status_and_stamps() {
        let c = copy(&[]).unwrap();
        // The mark binds what the copy is, where, and from whom.
        let mark = crate::mark::tests::marker().mark(&Marked {
            group: "apps",
            kind: "Deployment",
            namespace: Some("team-a"),
            name: "web",
            origin: "east",
        });
        assert_eq!(
            c,
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {
                    "name": "web",
                    "namespace": "team-a",
                    "labels": {"app": "web", "tier": "fe", "fleetbus.io/managed": "true"},
                    "annotations": {
                        "example.com/keep": "yes",
                        "fleetbus.io/origin-cluster": "east",
                        "fleetbus.io/origin-uid": "u-1",
                        "fleetbus.io/rule": "web-rule",
                        "fleetbus.io/source-hash": "sha256:abc",
                        "fleetbus.io/orphan-policy": "Delete",
                        "fleetbus.io/copy-mark": mark
                    }
                },
                "spec": {"replicas": 3, "template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}
            })
        );
    }

    #[test]
    fn stamps_on_an_object_without_labels_or_annotations() {
        let src = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let spec = ResourceSyncRuleSpec {
            orphan_policy: OrphanPolicy::Orphan,
            ..Default::default()
        };
        let c = copy_with(&src, &spec, &[]).unwrap();
        assert_eq!(
            c["metadata"]["labels"],
            json!({"fleetbus.io/managed": "true"})
        );
        assert_eq!(
            c["metadata"]["annotations"]["fleetbus.io/orphan-policy"],
            "Orphan"
        );
        assert_eq!(Target::of(&c).unwrap().namespace, None);
    }

    #[test]
    fn status_is_kept_only_when_an_entry_syncs_it() {
        let with = entry(Mutations {
            sync_status: true,
            ..Default::default()
        });
        let without = entry(Mutations::default());
        assert!(copy(std::slice::from_ref(&without))
            .unwrap()
            .get("status")
            .is_none());
        assert!(syncs_status(&[&without, &with]));
        assert!(!syncs_status(&[&without]));
        assert_eq!(
            copy(&[without, with]).unwrap()["status"],
            json!({"readyReplicas": 3})
        );
    }

    #[test]
    fn origin_cluster_is_kept_when_present() {
        let mut src = source();
        src["metadata"]["annotations"]["fleetbus.io/origin-cluster"] = json!("first");
        src["metadata"]["annotations"]["fleetbus.io/rule"] = json!("old");
        let c = copy_with(&src, &ResourceSyncRuleSpec::default(), &[]).unwrap();
        assert_eq!(
            c["metadata"]["annotations"]["fleetbus.io/origin-cluster"],
            "first"
        );
        assert_eq!(c["metadata"]["annotations"]["fleetbus.io/rule"], "web-rule");
    }

    #[test]
    fn label_and_annotation_add_then_remove_in_entry_order() {
        let first = entry(Mutations {
            labels: Some(AddRemove {
                add: map(&[("copied", "yes"), ("tmp", "1")]),
                remove: vec!["tier".into(), "tmp".into()],
            }),
            annotations: Some(AddRemove {
                add: map(&[("example.com/new", "n")]),
                remove: vec!["example.com/keep".into()],
            }),
            ..Default::default()
        });
        let second = entry(Mutations {
            labels: Some(AddRemove {
                add: map(&[("tmp", "2")]),
                remove: vec!["copied".into()],
            }),
            ..Default::default()
        });
        let c = copy(&[first, second]).unwrap();
        assert_eq!(
            c["metadata"]["labels"],
            json!({"app": "web", "tmp": "2", "fleetbus.io/managed": "true"})
        );
        assert_eq!(c["metadata"]["annotations"]["example.com/new"], "n");
        assert!(c["metadata"]["annotations"]
            .get("example.com/keep")
            .is_none());
    }

    #[test]
    fn rules_cannot_remove_or_forge_the_stamp() {
        let c = copy(&[entry(Mutations {
            labels: Some(AddRemove {
                add: BTreeMap::new(),
                remove: vec![LABEL_MANAGED.into()],
            }),
            annotations: Some(AddRemove {
                add: map(&[(ANNOTATION_SOURCE_HASH, "forged")]),
                remove: vec![ANNOTATION_RULE.into()],
            }),
            ..Default::default()
        })])
        .unwrap();
        assert_eq!(c["metadata"]["labels"][LABEL_MANAGED], "true");
        assert_eq!(
            c["metadata"]["annotations"][ANNOTATION_SOURCE_HASH],
            "sha256:abc"
        );
        assert_eq!(c["metadata"]["annotations"][ANNOTATION_RULE], "web-rule");
    }

    #[test]
    fn no_override_can_forge_or_drop_a_fleetbus_key() {
        let mut src = source();
        src["metadata"]["annotations"]["fleetbus.io/update-policy"] = json!("create-only");
        let forged = "/metadata/annotations/fleetbus.io~1origin-cluster";
        for overrides in [
            vec![replace(forged, "zzz")],
            vec![replace(forged, "")],
            vec![replace(forged, "{{ .LocalCluster.name }}")],
            vec![replace(
                "/metadata/annotations",
                r#"{"fleetbus.io/origin-cluster": "west"}"#,
            )],
            vec![remove("/metadata/annotations")],
            vec![remove("/metadata/annotations/fleetbus.io~1update-policy")],
            vec![replace("/metadata/labels/x.fleetbus.io~1y", "v")],
            vec![remove("/metadata/labels")],
        ] {
            let c = copy_with(
                &src,
                &ResourceSyncRuleSpec::default(),
                &[entry(Mutations {
                    overrides: overrides.clone(),
                    ..Default::default()
                })],
            )
            .unwrap();
            let a = &c["metadata"]["annotations"];
            assert_eq!(a[ANNOTATION_ORIGIN_CLUSTER], "east", "{overrides:?}");
            assert_eq!(
                a["fleetbus.io/update-policy"], "create-only",
                "{overrides:?}"
            );
            assert_eq!(
                c["metadata"]["labels"][LABEL_MANAGED], "true",
                "{overrides:?}"
            );
            assert!(c["metadata"]["labels"].get("x.fleetbus.io/y").is_none());
        }
    }

    #[test]
    fn rename_and_move_with_templates() {
        let c = copy(&[entry(Mutations {
            overrides: vec![
                replace(
                    "/metadata/name",
                    "{{ .Object.metadata.name }}-{{ .Cluster.name }}",
                ),
                replace("/metadata/namespace", "{{ LocalCluster.labels.region }}"),
            ],
            ..Default::default()
        })])
        .unwrap();
        assert_eq!(
            Target::of(&c).unwrap(),
            Target::from(crate::sync::model::Place {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("us-west-2".into()),
                name: "web-east".into(),
            })
        );
    }

    #[test]
    fn replace_creates_missing_objects_and_sets_json() {
        let c = copy(&[entry(Mutations {
            overrides: vec![
                replace("/spec/replicas", "{{ .Object.spec.replicas * 2 }}"),
                replace("/spec/new/deep/field", r#"{"a": [1, 2]}"#),
                replace("/spec/template/spec/containers/0/image", "nginx:2"),
                replace("/spec/template/spec/containers/-", r#"{"name": "side"}"#),
                replace("/metadata/annotations/example.com~1x", "plain"),
            ],
            ..Default::default()
        })])
        .unwrap();
        assert_eq!(c["spec"]["replicas"], json!(6));
        assert_eq!(c["spec"]["new"]["deep"]["field"], json!({"a": [1, 2]}));
        assert_eq!(
            c["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c", "image": "nginx:2"}, {"name": "side"}])
        );
        assert_eq!(c["metadata"]["annotations"]["example.com/x"], "plain");
    }

    #[test]
    fn replace_through_a_scalar_or_past_an_array_fails() {
        for path in [
            "/spec/replicas/x",
            "/spec/template/spec/containers/5",
            "/spec/template/spec/containers/x/y",
        ] {
            let got = copy(&[entry(Mutations {
                overrides: vec![replace(path, "1")],
                ..Default::default()
            })]);
            assert!(
                matches!(got, Err(MutateError::PathNotSettable { .. })),
                "{path}: {got:?}"
            );
        }
        let got = copy(&[entry(Mutations {
            overrides: vec![replace("spec", "1")],
            ..Default::default()
        })]);
        assert!(matches!(got, Err(MutateError::InvalidPath { .. })));
    }

    #[test]
    fn template_errors_name_the_override() {
        let got = copy(&[entry(Mutations {
            overrides: vec![replace("/spec/x", "{{ .Object.spec.nope }}")],
            ..Default::default()
        })]);
        match got {
            Err(MutateError::Template { path, source }) => {
                assert_eq!(path, "/spec/x");
                assert!(matches!(source, TemplateError::Undefined(_)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn remove_override() {
        let c = copy(&[entry(Mutations {
            overrides: vec![
                remove("/spec/replicas"),
                remove("/spec/absent/deeper"),
                remove("/spec/template/spec/containers/0/image"),
                remove("/spec/template/spec/containers/9"),
            ],
            ..Default::default()
        })])
        .unwrap();
        assert!(c["spec"].get("replicas").is_none());
        assert_eq!(
            c["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c"}])
        );
        let got = copy(&[entry(Mutations {
            overrides: vec![remove("/metadata/name")],
            ..Default::default()
        })]);
        assert!(matches!(got, Err(MutateError::MissingName)));
    }

    #[test]
    fn overrides_apply_in_order_across_entries() {
        let c = copy(&[
            entry(Mutations {
                overrides: vec![replace("/spec/x", "1"), replace("/spec/x", "2")],
                ..Default::default()
            }),
            entry(Mutations {
                overrides: vec![replace("/spec/y", "{{ 3 }}"), remove("/spec/x")],
                ..Default::default()
            }),
        ])
        .unwrap();
        assert!(c["spec"].get("x").is_none());
        assert_eq!(c["spec"]["y"], json!(3));
    }

    #[test]
    fn gvk_rewrite() {
        let to = |group: &str, version: &str, kind: &str| {
            copy(&[entry(Mutations {
                group_version_kind: Some(GroupVersionKind {
                    group: group.into(),
                    version: version.into(),
                    kind: kind.into(),
                }),
                ..Default::default()
            })])
        };
        let c = to("example.com", "v1beta1", "WebApp").unwrap();
        assert_eq!(
            (c["apiVersion"].as_str(), c["kind"].as_str()),
            (Some("example.com/v1beta1"), Some("WebApp"))
        );
        let c = to("", "v1", "ConfigMap").unwrap();
        assert_eq!(c["apiVersion"], "v1");
        assert!(matches!(
            to("", "V1!", "ConfigMap"),
            Err(MutateError::InvalidType { .. })
        ));
        assert!(matches!(
            to("", "v1", "configmap"),
            Err(MutateError::InvalidType { .. })
        ));
    }

    #[test]
    fn results_that_cannot_be_written_are_errors() {
        let bad = |o: Override| {
            copy(&[entry(Mutations {
                overrides: vec![o],
                ..Default::default()
            })])
            .unwrap_err()
        };
        assert!(matches!(
            bad(replace("/metadata/name", "")),
            MutateError::MissingName
        ));
        assert!(matches!(
            bad(replace("/metadata/name", "7")),
            MutateError::MissingName
        ));
        assert!(matches!(
            bad(replace("/metadata/namespace", "[1]")),
            MutateError::InvalidNamespace
        ));
        assert!(matches!(
            bad(replace("/metadata/labels", "[]")),
            MutateError::InvalidMap { field: "labels" }
        ));
        assert!(matches!(
            bad(replace("/metadata/labels/x", "1")),
            MutateError::InvalidMap { field: "labels" }
        ));
        assert!(matches!(
            bad(remove("/kind")),
            MutateError::InvalidType { .. }
        ));
        assert!(matches!(bad(remove("/metadata")), MutateError::NotAnObject));
        let not_object = json!(["x"]);
        assert!(matches!(
            copy_with(&not_object, &ResourceSyncRuleSpec::default(), &[]),
            Err(MutateError::NotAnObject)
        ));
    }

    #[test]
    fn unmanage_removes_exactly_the_stamp() {
        let c = copy(&[]).unwrap();
        let mut live = c.clone();
        live["metadata"]["resourceVersion"] = json!("7");
        // A copy unwrapped from a Bundle loses the bundle mark too.
        live["metadata"]["annotations"][ANNOTATION_BUNDLE] = json!("apps/b");
        // The stored summary of managedFields is not sent back.
        live["metadata"]["managedFields"] = json!([{"manager": "fleetbus"}]);
        let u = unmanage(&live);
        assert!(u["metadata"].get("managedFields").is_none());
        assert_eq!(u["metadata"]["labels"], json!({"app": "web", "tier": "fe"}));
        let origin = &live["metadata"]["annotations"][ANNOTATION_ORIGIN_CLUSTER];
        assert!(origin.is_string());
        assert_eq!(
            u["metadata"]["annotations"],
            json!({"example.com/keep": "yes", ANNOTATION_ORPHANED_FROM: origin})
        );
        assert_eq!(u["metadata"]["resourceVersion"], "7");
        assert_eq!(u["spec"], live["spec"]);
        // Idempotent, and harmless on objects without metadata maps.
        assert_eq!(unmanage(&u), u);
        let bare = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}});
        assert_eq!(unmanage(&bare), bare);
    }

    #[test]
    fn target_needs_type_and_name() {
        assert_eq!(
            Target::of(&json!({"kind": "ConfigMap", "metadata": {"name": "x"}})),
            None
        );
        assert_eq!(
            Target::of(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}})),
            None
        );
        let t = Target::of(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": ""}})).unwrap();
        assert_eq!(t.namespace, None);
        assert_eq!(t.to_string(), "ConfigMap x");
    }

    proptest! {
        #[test]
        fn set_then_read_back(tokens in proptest::collection::vec("[a-z~/]{1,4}", 1..5), n in 0i64..1000) {
            let mut obj = json!({"metadata": {"name": "x"}});
            let path = fleetbus_schemas::pointer::to_pointer(&tokens);
            let parsed = parse_field_pointer(&path).unwrap();
            set_at(&mut obj, &parsed, json!(n)).unwrap();
            prop_assert_eq!(obj.pointer(&path), Some(&json!(n)));
            remove_at(&mut obj, &parsed);
            prop_assert_eq!(obj.pointer(&path), None);
        }

        #[test]
        fn copies_always_carry_the_stamp(
            labels in proptest::collection::btree_map("[a-z]{1,6}", "[a-z]{0,6}", 0..4),
            remove in proptest::collection::vec("[a-z]{1,6}", 0..3),
        ) {
            let c = copy(&[entry(Mutations {
                labels: Some(AddRemove { add: labels, remove }),
                ..Default::default()
            })]).unwrap();
            prop_assert_eq!(&c["metadata"]["labels"][LABEL_MANAGED], "true");
            for k in STAMP_ANNOTATIONS {
                prop_assert!(c["metadata"]["annotations"][k].is_string());
            }
            prop_assert!(c["metadata"].get("uid").is_none());
        }
    }
}
