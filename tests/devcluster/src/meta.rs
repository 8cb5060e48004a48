//! Pure object-metadata rules: timestamps, generateName, generation and no-op detection.

use crate::resources::ResourceDef;
use rand::Rng;
use serde_json::{json, Map, Value};

/// Now as RFC 3339 with second precision and `Z`, like metav1.Time.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// kube's generateName alphabet (no vowels, no confusable digits).
const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// `prefix` + 5 random characters, like kube's SimpleNameGenerator.
pub fn generate_name(prefix: &str) -> String {
    let mut rng = rand::rng();
    let suffix: String = (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect();
    format!("{prefix}{suffix}")
}

/// `obj.metadata` as a map, created if missing (or if metadata is not an object).
pub fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = Value::Object(Map::new());
    }
    let Value::Object(root) = obj else {
        unreachable_map()
    };
    let m = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !m.is_object() {
        *m = Value::Object(Map::new());
    }
    match m {
        Value::Object(map) => map,
        _ => unreachable_map(),
    }
}

// Both call sites have just made the value an object; this is never reached.
#[allow(clippy::panic)]
fn unreachable_map() -> ! {
    unreachable!("value was just made an object")
}

/// `obj.metadata.<field>` as a string.
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str()
}

/// metadata.finalizers (empty if absent).
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// True if metadata.deletionTimestamp is set.
pub fn is_deleting(obj: &Value) -> bool {
    meta_str(obj, "deletionTimestamp").is_some()
}

/// The object with fields that change on every write (resourceVersion, generation,
/// managedFields times) removed, for no-op detection.
fn comparable(obj: &Value) -> Value {
    let mut c = obj.clone();
    let m = meta_mut(&mut c);
    m.remove("resourceVersion");
    m.remove("generation");
    if let Some(Value::Array(mf)) = m.get_mut("managedFields") {
        for e in mf.iter_mut() {
            if let Some(o) = e.as_object_mut() {
                o.remove("time");
            }
        }
    }
    if m.is_empty() {
        if let Some(o) = c.as_object_mut() {
            o.remove("metadata");
        }
    }
    c
}

/// True if writing `new` over `old` would change nothing a client can see
/// (besides resourceVersion and managedFields timestamps).
pub fn is_noop(old: &Value, new: &Value) -> bool {
    comparable(old) == comparable(new)
}

fn without(obj: &Value, keys: &[&str]) -> Value {
    let mut c = obj.clone();
    if let Some(o) = c.as_object_mut() {
        for k in keys {
            o.remove(*k);
        }
    }
    c
}

/// Whether kube-apiserver maintains metadata.generation for this resource (its
/// strategy sets it: workloads, policies, CRDs and custom resources; not ConfigMaps,
/// Secrets, Namespaces, Nodes, Services, Pods, ...).
pub fn tracks_generation(def: &ResourceDef) -> bool {
    def.custom
        || matches!(
            (def.group.as_str(), def.plural.as_str()),
            ("apps", _)
                | ("batch", _)
                | ("policy", "poddisruptionbudgets")
                | ("networking.k8s.io", _)
                | ("apiextensions.k8s.io", "customresourcedefinitions")
        )
}

/// Whether metadata.generation must be bumped for this change.
/// Built-ins: on spec changes. CRs with /status: on any change outside metadata and
/// status. CRs without /status: on any change outside metadata.
pub fn generation_bumps(def: &ResourceDef, old: &Value, new: &Value) -> bool {
    if !tracks_generation(def) {
        return false;
    }
    if def.custom {
        let ignored: &[&str] = if def.subresources.status {
            &["metadata", "status", "apiVersion", "kind"]
        } else {
            &["metadata", "apiVersion", "kind"]
        };
        without(old, ignored) != without(new, ignored)
    } else {
        old.get("spec") != new.get("spec")
    }
}

/// Sets metadata.generation to `old + 1` (or 1).
pub fn bump_generation(obj: &mut Value) {
    let m = meta_mut(obj);
    let g = m.get("generation").and_then(Value::as_i64).unwrap_or(0);
    m.insert("generation".into(), Value::from(g + 1));
}

/// The `status` Go writes for a never-reconciled object of a built-in kind:
/// a non-pointer struct is never omitted, and some of its counters lack
/// `omitempty` (a Service has `status: {loadBalancer: {}}`, a Deployment
/// `status: {}`, a ReplicaSet `status: {replicas: 0}`).
pub fn zero_status(def: &ResourceDef) -> Option<Value> {
    if def.custom {
        return None;
    }
    let zero = match (def.group.as_str(), def.plural.as_str()) {
        ("", "services") | ("networking.k8s.io", "ingresses") => json!({"loadBalancer": {}}),
        ("", "persistentvolumeclaims")
        | ("apps", "deployments")
        | ("batch", "jobs")
        | ("batch", "cronjobs") => json!({}),
        ("apps", "replicasets") => json!({"replicas": 0}),
        ("apps", "statefulsets") => json!({"replicas": 0, "availableReplicas": 0}),
        ("apps", "daemonsets") => json!({
            "currentNumberScheduled": 0,
            "numberMisscheduled": 0,
            "desiredNumberScheduled": 0,
            "numberReady": 0,
        }),
        ("policy", "poddisruptionbudgets") => json!({
            "disruptionsAllowed": 0,
            "currentHealthy": 0,
            "desiredHealthy": 0,
            "expectedPods": 0,
        }),
        _ => return None,
    };
    Some(zero)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::{builtins, Subresources};
    use serde_json::json;

    fn cr(status: bool) -> ResourceDef {
        ResourceDef {
            group: "x.io".into(),
            version: "v1".into(),
            kind: "W".into(),
            list_kind: "WList".into(),
            plural: "ws".into(),
            singular: "w".into(),
            namespaced: true,
            short_names: vec![],
            categories: vec![],
            subresources: Subresources {
                status,
                ..Default::default()
            },
            schema: None,
            custom: true,
        }
    }

    #[test]
    fn generation_rules() {
        let defs = builtins();
        let dep = defs.iter().find(|d| d.plural == "deployments").unwrap();
        let a = json!({"metadata": {"labels": {"a": "1"}}, "spec": {"replicas": 1}, "status": {}});
        let b = json!({"metadata": {"labels": {"a": "2"}}, "spec": {"replicas": 1}, "status": {"x": 1}});
        let c = json!({"metadata": {}, "spec": {"replicas": 2}});
        assert!(!generation_bumps(dep, &a, &b));
        assert!(generation_bumps(dep, &a, &c));
        let cm = defs.iter().find(|d| d.plural == "configmaps").unwrap();
        assert!(!tracks_generation(cm));
        assert!(!generation_bumps(
            cm,
            &json!({"spec": 1}),
            &json!({"spec": 2})
        ));
        // CR with /status: status changes do not bump; other top-level fields do.
        let d = json!({"metadata": {}, "spec": {"a": 1}, "status": {"s": 1}, "extra": 1});
        let e = json!({"metadata": {}, "spec": {"a": 1}, "status": {"s": 2}, "extra": 1});
        let f = json!({"metadata": {}, "spec": {"a": 1}, "status": {"s": 2}, "extra": 2});
        assert!(!generation_bumps(&cr(true), &d, &e));
        assert!(generation_bumps(&cr(true), &e, &f));
        // CR without /status: status changes bump.
        assert!(generation_bumps(&cr(false), &d, &e));
        assert!(!generation_bumps(
            &cr(false),
            &d,
            &json!({"metadata": {"labels": {"x": "y"}}, "spec": {"a": 1}, "status": {"s": 1}, "extra": 1})
        ));
    }

    #[test]
    fn noop_ignores_rv_and_times() {
        let a = json!({"metadata": {"name": "a", "resourceVersion": "1", "managedFields": [{"manager": "m", "time": "t1"}]}, "data": {"k": "v"}});
        let b = json!({"metadata": {"name": "a", "resourceVersion": "2", "managedFields": [{"manager": "m", "time": "t2"}]}, "data": {"k": "v"}});
        let c = json!({"metadata": {"name": "a", "resourceVersion": "1"}, "data": {"k": "w"}});
        assert!(is_noop(&a, &b));
        assert!(!is_noop(&a, &c));
    }

    #[test]
    fn generated_names() {
        let n = generate_name("web-");
        assert_eq!(n.len(), 9);
        assert!(n.starts_with("web-"));
        assert!(n[4..].bytes().all(|c| ALPHABET.contains(&c)));
    }

    #[test]
    fn times() {
        assert!(now_rfc3339().ends_with('Z'));
    }
}
