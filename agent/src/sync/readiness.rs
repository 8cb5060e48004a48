//! Whether a live object is ready, the way `kubectl rollout status` and
//! `kubectl wait --for=condition=Ready` judge it, from the object alone.

use serde_json::Value;

/// Whether `obj` (a live object, with `.status`) is ready:
/// - Deployment, StatefulSet, DaemonSet: the controller saw the current
///   generation and every replica is updated and available (rollout done);
/// - Job: condition `Complete` is True;
/// - anything else with a `Ready` condition: it is True;
/// - anything else: it exists, so it is ready.
pub fn is_ready(obj: &Value) -> bool {
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let group = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .map_or("", |(g, _)| g);
    match (group, kind) {
        ("apps", "Deployment") => rolled_out(obj, "updatedReplicas", "availableReplicas", true),
        ("apps", "StatefulSet") => rolled_out(obj, "updatedReplicas", "readyReplicas", false),
        ("apps", "DaemonSet") => daemon_set_ready(obj),
        ("batch", "Job") => condition(obj, "Complete") == Some(true),
        _ => condition(obj, "Ready").unwrap_or(true),
    }
}

fn int(obj: &Value, pointer: &str) -> Option<i64> {
    obj.pointer(pointer).and_then(Value::as_i64)
}

/// The controller has seen the current spec (`observedGeneration`).
fn observed(obj: &Value) -> bool {
    let generation = int(obj, "/metadata/generation").unwrap_or(0);
    int(obj, "/status/observedGeneration").is_some_and(|o| o >= generation)
}

/// `kubectl rollout status` for Deployments and StatefulSets: every desired
/// replica updated and available (ready), and, for Deployments, no old
/// replica left.
fn rolled_out(obj: &Value, updated: &str, available: &str, no_old: bool) -> bool {
    if !observed(obj) {
        return false;
    }
    let want = int(obj, "/spec/replicas").unwrap_or(1);
    let status = |f: &str| int(obj, &format!("/status/{f}")).unwrap_or(0);
    let updated = status(updated);
    status(available) >= want && updated >= want && (!no_old || status("replicas") <= updated)
}

fn daemon_set_ready(obj: &Value) -> bool {
    if !observed(obj) {
        return false;
    }
    let status = |f: &str| int(obj, &format!("/status/{f}")).unwrap_or(0);
    let want = status("desiredNumberScheduled");
    status("updatedNumberScheduled") >= want && status("numberAvailable") >= want
}

/// The status of condition `type_`: Some(true) for "True", Some(false) for
/// anything else, None when there is no such condition.
fn condition(obj: &Value, type_: &str) -> Option<bool> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        .map(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "web", "generation": 2},
               "spec": {"replicas": 2}, "status": status})
    }

    #[test]
    fn a_deployment_is_ready_when_rolled_out() {
        let done = json!({"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "availableReplicas": 2});
        assert!(is_ready(&deployment(done.clone())));
        let mut stale = done.clone();
        stale["observedGeneration"] = json!(1);
        assert!(
            !is_ready(&deployment(stale)),
            "the new spec is not seen yet"
        );
        let mut old_left = done.clone();
        old_left["replicas"] = json!(3);
        assert!(!is_ready(&deployment(old_left)), "an old replica remains");
        let mut unavailable = done;
        unavailable["availableReplicas"] = json!(1);
        assert!(!is_ready(&deployment(unavailable)));
        assert!(!is_ready(&deployment(Value::Null)), "no status yet");
    }

    #[test]
    fn statefulsets_and_daemonsets() {
        let sts = |ready: i64| {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                   "metadata": {"generation": 1}, "spec": {"replicas": 3},
                   "status": {"observedGeneration": 1, "updatedReplicas": 3, "readyReplicas": ready}})
        };
        assert!(is_ready(&sts(3)));
        assert!(!is_ready(&sts(2)));
        let ds = |available: i64| {
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                   "metadata": {"generation": 1},
                   "status": {"observedGeneration": 1, "desiredNumberScheduled": 2,
                              "updatedNumberScheduled": 2, "numberAvailable": available}})
        };
        assert!(is_ready(&ds(2)));
        assert!(!is_ready(&ds(1)));
    }

    #[test]
    fn jobs_conditions_and_plain_objects() {
        let job = |t: &str, s: &str| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "status": {"conditions": [{"type": t, "status": s}]}})
        };
        assert!(is_ready(&job("Complete", "True")));
        assert!(!is_ready(&job("Failed", "True")));
        assert!(!is_ready(
            &json!({"apiVersion": "batch/v1", "kind": "Job", "status": {}})
        ));
        let cr = |s: &str| {
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "status": {"conditions": [{"type": "Ready", "status": s}]}})
        };
        assert!(is_ready(&cr("True")));
        assert!(!is_ready(&cr("False")));
        assert!(!is_ready(&cr("Unknown")));
        assert!(is_ready(
            &json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa"}})
        ));
    }
}
