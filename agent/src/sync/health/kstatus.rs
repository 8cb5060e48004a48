//! kstatus, ported: the health of a live object from its own status, as
//! `sigs.k8s.io/cli-utils/pkg/kstatus/status` computes it (`Compute`), so a
//! copy is "Current" exactly when `kubectl`'s and Flux's tooling would say so.
//! Read against cli-utils 5895ad6 (docs/design/rollouts.md §2 has the table).
//!
//! One deviation, marked below: an object of a kind kstatus does not know,
//! with no `Ready` condition but an `Available` one, is judged by
//! `Available` (the issue asks for both; kstatus reads only `Ready`).

use chrono::{DateTime, Utc};
use fleetbus_schemas::health::{Health, HealthStatus};
use serde_json::Value;

use HealthStatus::{Current, Failed, InProgress, Terminating, Unknown};

/// A Pod Pending unschedulable for longer than this is Failed (kstatus's window).
const UNSCHEDULABLE_AFTER_SECS: i64 = 15;

/// The health of `obj`, a whole live object; `now` only for the Pod window.
pub fn compute(obj: &Value, now: DateTime<Utc>) -> Health {
    if let Some(h) = generic(obj) {
        return h;
    }
    let (group, kind) = group_kind(obj);
    let legacy = match (group, kind) {
        ("apps" | "extensions", "Deployment") => Some(deployment(obj)),
        ("apps", "StatefulSet") => Some(stateful_set(obj)),
        ("apps" | "extensions", "DaemonSet") => Some(daemon_set(obj)),
        ("apps" | "extensions", "ReplicaSet") => Some(replica_set(obj)),
        ("batch", "Job") => Some(job(obj)),
        ("", "PersistentVolumeClaim") => Some(pvc(obj)),
        ("", "Service") => Some(service(obj)),
        ("", "Pod") => Some(pod(obj, now)),
        ("apiextensions.k8s.io", "CustomResourceDefinition") => Some(crd(obj)),
        ("policy", "PodDisruptionBudget") | ("", "Secret" | "ConfigMap") | ("batch", "CronJob") => {
            Some(current("Resource is always ready"))
        }
        _ => None,
    };
    if let Some(h) = legacy {
        return h;
    }
    for type_ in ["Ready", "Available"] {
        // "Available" is our deviation (see the module docs).
        if let Some(c) = condition(obj, type_) {
            return if c.status == "True" {
                current(&format!("Resource is {}", type_.to_lowercase()))
            } else {
                Health::new(InProgress, c.reason_message())
            };
        }
    }
    current("Resource is current")
}

/// `checkGenericProperties`: deletion, an unobserved generation, and the
/// `Reconciling` / `Stalled` conditions, before any kind's own rules.
fn generic(obj: &Value) -> Option<Health> {
    if obj
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return Some(Health::new(Terminating, "Resource scheduled for deletion"));
    }
    if let (Some(generation), Some(observed)) = (
        int(obj, "/metadata/generation"),
        int(obj, "/status/observedGeneration"),
    ) {
        if generation != observed {
            return Some(Health::new(
                InProgress,
                format!(
                    "{} generation is {generation}, but latest observed generation is {observed}",
                    kind_of(obj)
                ),
            ));
        }
    }
    if let Some(c) = condition(obj, "Reconciling").filter(|c| c.status == "True") {
        return Some(Health::new(InProgress, c.reason_message()));
    }
    if let Some(c) = condition(obj, "Stalled").filter(|c| c.status == "True") {
        return Some(Health::new(Failed, c.reason_message()));
    }
    None
}

fn deployment(obj: &Value) -> Health {
    let mut progressing = obj.pointer("/spec/progressDeadlineSeconds").is_none();
    let mut available = false;
    for c in conditions(obj) {
        match (c.type_, c.status, c.reason) {
            ("Progressing", _, "ProgressDeadlineExceeded") => {
                return Health::new(Failed, "Progress deadline exceeded");
            }
            ("Progressing", "True", "NewReplicaSetAvailable") => progressing = true,
            ("Available", "True", _) => available = true,
            _ => {}
        }
    }
    let spec = int(obj, "/spec/replicas").unwrap_or(1);
    let [replicas, updated, ready, avail] = [
        "replicas",
        "updatedReplicas",
        "readyReplicas",
        "availableReplicas",
    ]
    .map(|f| status(obj, f));
    if spec > replicas {
        return in_progress(format!("Replicas: {replicas}/{spec}"));
    }
    if spec > updated {
        return in_progress(format!("Updated: {updated}/{spec}"));
    }
    if replicas > spec {
        return in_progress(format!("Pending termination: {}", replicas - spec));
    }
    if updated > avail {
        return in_progress(format!("Available: {avail}/{updated}"));
    }
    if spec > ready {
        return in_progress(format!("Ready: {ready}/{spec}"));
    }
    if !progressing {
        return in_progress("ReplicaSet not Available".into());
    }
    if !available {
        return in_progress("Deployment not Available".into());
    }
    current(&format!("Deployment is available. Replicas: {replicas}"))
}

fn stateful_set(obj: &Value) -> Health {
    if obj
        .pointer("/spec/updateStrategy/type")
        .and_then(Value::as_str)
        == Some("OnDelete")
    {
        return current("StatefulSet is using the OnDelete strategy");
    }
    let spec = int(obj, "/spec/replicas").unwrap_or(1);
    let [replicas, ready, current_, updated] = [
        "replicas",
        "readyReplicas",
        "currentReplicas",
        "updatedReplicas",
    ]
    .map(|f| status(obj, f));
    if spec > replicas {
        return in_progress(format!("Replicas: {replicas}/{spec}"));
    }
    if spec > ready {
        return in_progress(format!("Ready: {ready}/{spec}"));
    }
    if replicas > spec {
        return in_progress(format!("Pending termination: {}", replicas - spec));
    }
    if let Some(partition) = int(obj, "/spec/updateStrategy/rollingUpdate/partition") {
        if updated < spec - partition {
            return in_progress(format!("updated: {updated}/{}", spec - partition));
        }
        return current(&format!(
            "Partitioned roll out complete. updated: {updated}/{}",
            spec - partition
        ));
    }
    if spec > current_ {
        return in_progress(format!("current: {current_}/{spec}"));
    }
    let revision = |f: &str| {
        obj.pointer(&format!("/status/{f}"))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    if revision("currentRevision") != revision("updateRevision") {
        return in_progress(format!(
            "Waiting for updated revision {} to match current {}",
            revision("updateRevision"),
            revision("currentRevision")
        ));
    }
    current(&format!(
        "All replicas scheduled as expected. Replicas: {ready}"
    ))
}

fn daemon_set(obj: &Value) -> Health {
    if int(obj, "/metadata/generation").is_none() {
        return in_progress("Missing .metadata.generation field".into());
    }
    if int(obj, "/status/observedGeneration").is_none() {
        return in_progress("Missing .status.observedGeneration field".into());
    }
    let Some(desired) = int(obj, "/status/desiredNumberScheduled") else {
        return in_progress("Missing .status.desiredNumberScheduled".into());
    };
    for (field, what) in [
        ("currentNumberScheduled", "Current"),
        ("updatedNumberScheduled", "Updated"),
        ("numberAvailable", "Available"),
        ("numberReady", "Ready"),
    ] {
        let have = status(obj, field);
        if desired > have {
            return in_progress(format!("{what}: {have}/{desired}"));
        }
    }
    current(&format!(
        "All replicas scheduled as expected. Replicas: {desired}"
    ))
}

fn replica_set(obj: &Value) -> Health {
    if let Some(c) = condition(obj, "ReplicaFailure").filter(|c| c.status == "True") {
        return in_progress(format!("Replica Failure condition. {}", c.message));
    }
    let spec = int(obj, "/spec/replicas").unwrap_or(1);
    for (field, what) in [
        ("fullyLabeledReplicas", "Labelled"),
        ("availableReplicas", "Available"),
        ("readyReplicas", "Ready"),
    ] {
        let have = status(obj, field);
        if spec > have {
            return in_progress(format!("{what}: {have}/{spec}"));
        }
    }
    let replicas = status(obj, "replicas");
    if replicas > spec {
        return in_progress(format!("Pending termination: {}", replicas - spec));
    }
    current(&format!("ReplicaSet is available. Replicas: {replicas}"))
}

fn job(obj: &Value) -> Health {
    let suspend = obj.pointer("/spec/suspend").and_then(Value::as_bool) == Some(true);
    for c in conditions(obj) {
        match (c.type_, c.status) {
            ("Complete", "True") => return current("Job Completed"),
            ("Failed", "True") => return Health::new(Failed, format!("Job Failed. {}", c.message)),
            ("Suspended", "True") if suspend => return current("Job is suspended"),
            _ => {}
        }
    }
    if obj.pointer("/status/startTime").is_none() {
        return in_progress("Job not started".into());
    }
    current("Job in progress")
}

fn pvc(obj: &Value) -> Health {
    match obj.pointer("/status/phase").and_then(Value::as_str) {
        Some("Bound") => current("PVC is Bound"),
        _ => in_progress("PVC is not Bound".into()),
    }
}

fn service(obj: &Value) -> Health {
    let load_balancer = obj.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer");
    let ip = obj
        .pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("");
    if load_balancer && ip.is_empty() {
        return in_progress("ClusterIP not set".into());
    }
    current("Service is ready")
}

fn pod(obj: &Value, now: DateTime<Utc>) -> Health {
    match obj.pointer("/status/phase").and_then(Value::as_str) {
        Some("Succeeded" | "Failed") => current("Pod has completed"),
        Some("Running") => {
            if condition(obj, "Ready").is_some_and(|c| c.status == "True") {
                return current("Pod is Ready");
            }
            let crash_looping = obj
                .pointer("/status/containerStatuses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .any(|s| {
                    s.pointer("/state/waiting/reason").and_then(Value::as_str)
                        == Some("CrashLoopBackOff")
                });
            if crash_looping {
                return Health::new(Failed, "Containers are crash looping");
            }
            in_progress("Pod is running but is not Ready".into())
        }
        Some("Pending") => {
            let unschedulable = condition(obj, "PodScheduled")
                .is_some_and(|c| c.status == "False" && c.reason == "Unschedulable");
            let created = obj
                .pointer("/metadata/creationTimestamp")
                .and_then(Value::as_str)
                .and_then(|t| DateTime::parse_from_rfc3339(t).ok());
            let old = created.is_some_and(|t| {
                (now - t.with_timezone(&Utc)).num_seconds() > UNSCHEDULABLE_AFTER_SECS
            });
            if unschedulable && old {
                return Health::new(Failed, "Pod could not be scheduled");
            }
            in_progress("Pod is in the Pending phase".into())
        }
        None => in_progress("Pod phase not available".into()),
        Some(other) => Health::new(Unknown, format!("unknown pod phase {other:?}")),
    }
}

fn crd(obj: &Value) -> Health {
    if condition(obj, "NamesAccepted").is_some_and(|c| c.status == "False") {
        return Health::new(Failed, "CRD names have not been accepted");
    }
    match condition(obj, "Established") {
        Some(c) if c.status == "True" => current("CRD is established"),
        Some(c) if c.status == "False" && c.reason != "Installing" => {
            Health::new(Failed, c.reason_message())
        }
        _ => in_progress("Install in progress".into()),
    }
}

fn current(message: &str) -> Health {
    Health::new(Current, message)
}

fn in_progress(message: String) -> Health {
    Health::new(InProgress, message)
}

fn int(obj: &Value, pointer: &str) -> Option<i64> {
    // kstatus's GetIntField takes integers only: a JSON float falls back to the default.
    obj.pointer(pointer).and_then(Value::as_i64)
}

fn status(obj: &Value, field: &str) -> i64 {
    int(obj, &format!("/status/{field}")).unwrap_or(0)
}

fn kind_of(obj: &Value) -> &str {
    obj.get("kind")
        .and_then(Value::as_str)
        .unwrap_or("Resource")
}

fn group_kind(obj: &Value) -> (&str, &str) {
    let group = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .and_then(|v| v.split_once('/'))
        .map_or("", |(g, _)| g);
    (group, kind_of(obj))
}

/// One entry of `status.conditions`, its strings borrowed ("" when absent).
struct Condition<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

impl Condition<'_> {
    fn reason_message(&self) -> String {
        match (self.reason.is_empty(), self.message.is_empty()) {
            (false, false) => format!("{}: {}", self.reason, self.message),
            (false, true) => self.reason.to_owned(),
            (true, _) => format!("{} is {}. {}", self.type_, self.status, self.message)
                .trim_end()
                .to_owned(),
        }
    }
}

fn conditions(obj: &Value) -> impl Iterator<Item = Condition<'_>> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(move |c| Condition {
            type_: text(c, "type"),
            status: text(c, "status"),
            reason: text(c, "reason"),
            message: text(c, "message"),
        })
}

fn text<'a>(c: &'a Value, field: &str) -> &'a str {
    c.get(field).and_then(Value::as_str).unwrap_or("")
}

/// The first condition of `type_` (kstatus reads the first one).
fn condition<'a>(obj: &'a Value, type_: &str) -> Option<Condition<'a>> {
    conditions(obj).find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests;
