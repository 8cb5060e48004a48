//! Whether a live copy is ready, from its own status (pure): the signals of
//! `kubectl rollout status` for Deployments, StatefulSets and DaemonSets, Job
//! completion, a `Ready` condition; an object without such signals is ready
//! when it exists.

use serde_json::Value;

fn int(obj: &Value, pointer: &str) -> Option<i64> {
    obj.pointer(pointer).and_then(Value::as_i64)
}

fn condition_is_true(obj: &Value, type_: &str) -> Option<bool> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))
        .map(|c| c.get("status").and_then(Value::as_str) == Some("True"))
}

/// The controller has seen the latest spec: `status.observedGeneration` is at
/// least `metadata.generation` (both absent counts as seen: nothing to wait for).
fn observed(obj: &Value) -> bool {
    match int(obj, "/metadata/generation") {
        Some(generation) => int(obj, "/status/observedGeneration").unwrap_or(0) >= generation,
        None => true,
    }
}

/// Whether `obj` (a whole live object) is ready.
pub fn is_ready(obj: &Value) -> bool {
    let group = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .map_or("", |(g, _)| g);
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
    let status = |p: &str| int(obj, &format!("/status/{p}")).unwrap_or(0);
    match (group, kind) {
        ("apps", "Deployment") => {
            // kubectl: every replica updated, no old ones left, all available.
            let want = int(obj, "/spec/replicas").unwrap_or(1);
            observed(obj)
                && status("updatedReplicas") >= want
                && status("replicas") <= status("updatedReplicas")
                && status("availableReplicas") >= status("updatedReplicas")
        }
        ("apps", "StatefulSet") => {
            let want = int(obj, "/spec/replicas").unwrap_or(1);
            observed(obj) && status("readyReplicas") >= want && status("updatedReplicas") >= want
        }
        ("apps", "DaemonSet") => {
            let want = status("desiredNumberScheduled");
            observed(obj)
                && status("updatedNumberScheduled") >= want
                && status("numberAvailable") >= want
        }
        ("batch", "Job") => condition_is_true(obj, "Complete").unwrap_or(false),
        _ => condition_is_true(obj, "Ready").unwrap_or(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(generation: i64, status: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"name": "d", "generation": generation},
               "spec": {"replicas": 3}, "status": status})
    }

    #[test]
    fn deployment_like_kubectl_rollout_status() {
        let done = json!({"observedGeneration": 2, "replicas": 3, "updatedReplicas": 3,
                          "availableReplicas": 3});
        assert!(is_ready(&deployment(2, done.clone())));
        assert!(
            !is_ready(&deployment(3, done.clone())),
            "new spec not observed"
        );
        let mut old_left = done.clone();
        old_left["replicas"] = json!(4);
        assert!(
            !is_ready(&deployment(2, old_left)),
            "an old replica remains"
        );
        let mut unavailable = done;
        unavailable["availableReplicas"] = json!(2);
        assert!(!is_ready(&deployment(2, unavailable)));
        assert!(!is_ready(&deployment(1, json!({}))), "no status yet");
    }

    #[test]
    fn statefulset_daemonset_job() {
        let sts = |ready: i64| {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"generation": 1},
                   "spec": {"replicas": 2},
                   "status": {"observedGeneration": 1, "readyReplicas": ready, "updatedReplicas": 2}})
        };
        assert!(is_ready(&sts(2)));
        assert!(!is_ready(&sts(1)));
        let ds = |available: i64| {
            json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"generation": 1},
                   "status": {"observedGeneration": 1, "desiredNumberScheduled": 3,
                              "updatedNumberScheduled": 3, "numberAvailable": available}})
        };
        assert!(is_ready(&ds(3)));
        assert!(!is_ready(&ds(2)));
        let job = |s: &str| {
            json!({"apiVersion": "batch/v1", "kind": "Job",
                   "status": {"conditions": [{"type": "Complete", "status": s}]}})
        };
        assert!(is_ready(&job("True")));
        assert!(!is_ready(&job("False")));
        assert!(!is_ready(
            &json!({"apiVersion": "batch/v1", "kind": "Job", "status": {}})
        ));
    }

    #[test]
    fn ready_condition_or_existence() {
        let with = |s: &str| {
            json!({"apiVersion": "example.com/v1", "kind": "Widget",
                   "status": {"conditions": [{"type": "Other", "status": "False"},
                                             {"type": "Ready", "status": s}]}})
        };
        assert!(is_ready(&with("True")));
        assert!(!is_ready(&with("False")));
        assert!(!is_ready(&with("Unknown")));
        assert!(is_ready(
            &json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {}})
        ));
    }
}
