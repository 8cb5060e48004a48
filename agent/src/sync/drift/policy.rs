//! Drift: a change made on this cluster to a copy whose desired state did not
//! change. Decided on the sink's one reconcile path (`sink::wave::decide`,
//! then `sink::serial` for `Why::Drift`):
//! the copy differs from its baseline while the desired copy is the one the
//! baseline was made from. This file holds the pure parts: which policy holds
//! for a copy, which paths are excluded, what changed and who changed it.

use fleetbus_schemas::crd::{DriftExclusion, DriftMode};
use fleetbus_schemas::drift::{ChangedBy, DriftChange};
use fleetbus_schemas::well_known;
use serde_json::Value;

use crate::kube::FIELD_MANAGER;
use crate::sync::model::meta::annotation;
use crate::sync::model::Target;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching;
use crate::sync::sink::compare;

/// What to do about drift on one copy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    /// Correct, Report or Ignore, after the paused annotations.
    pub mode: DriftMode,
    /// JSON Pointers (with `*` for any key or index) that may differ.
    pub exclude: Vec<String>,
}

impl Policy {
    /// Whether `live` equals `server` in what this policy compares (the
    /// exclusions left out; status only when it is synced).
    pub fn same(&self, server: &Value, live: &Value, with_status: bool) -> bool {
        comparable(server, with_status, &self.exclude)
            == comparable(live, with_status, &self.exclude)
    }

    /// The policy for the copy `live` at `target` under `rule`.
    pub fn of(rule: &CompiledRule, target: &Target, live: &Value) -> Policy {
        let note = |k: &str| annotation(live, k);
        let mut mode = rule.spec.drift.mode;
        let ignore = note(well_known::ANNOTATION_DRIFT_IGNORE).map(str::trim);
        if ignore == Some("*") {
            mode = DriftMode::Ignore;
        }
        if mode == DriftMode::Correct
            && (rule.correction_paused || note(well_known::ANNOTATION_CORRECTION_PAUSED).is_some())
        {
            mode = DriftMode::Report;
        }
        let mut exclude: Vec<String> = rule
            .spec
            .drift
            .exclusions
            .iter()
            .filter(|x| applies(x, target, live))
            .flat_map(|x| x.paths.iter().cloned())
            .collect();
        // The control annotations are an operator's instructions to the agent
        // about this copy, not drift: setting or removing them is never
        // reported, and a correction keeps them (writes keep excluded paths).
        exclude.extend(CONTROL_ANNOTATIONS.iter().map(|k| annotation_pointer(k)));
        if let Some(list) = ignore.filter(|l| *l != "*") {
            exclude.extend(
                list.split(',')
                    .map(str::trim)
                    .filter(|p| p.starts_with('/'))
                    .map(str::to_owned),
            );
        }
        Policy { mode, exclude }
    }
}

/// Annotations an operator puts on a copy to steer drift handling.
const CONTROL_ANNOTATIONS: [&str; 2] = [
    well_known::ANNOTATION_DRIFT_IGNORE,
    well_known::ANNOTATION_CORRECTION_PAUSED,
];

/// The JSON Pointer of annotation `key` (`/` escaped as `~1`).
fn annotation_pointer(key: &str) -> String {
    format!(
        "/metadata/annotations/{}",
        key.replace('~', "~0").replace('/', "~1")
    )
}

/// Whether an exclusion's `target` selects this copy (no target: every copy).
fn applies(x: &DriftExclusion, target: &Target, live: &Value) -> bool {
    let Some(t) = &x.target else { return true };
    t.kind.as_ref().is_none_or(|k| *k == target.kind)
        && t.namespace
            .as_ref()
            .is_none_or(|n| Some(n) == target.namespace.as_ref())
        && t.name.as_ref().is_none_or(|n| *n == target.name)
        && t.label_selector.as_ref().is_none_or(|sel| {
            matching::selector_matches(Some(sel), &matching::string_map(live, "labels"))
                .unwrap_or(false)
        })
}

/// Splits a JSON Pointer into unescaped tokens (`~1` → `/`, `~0` → `~`).
fn tokens(pointer: &str) -> Vec<String> {
    pointer
        .split('/')
        .skip(1)
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

/// Removes every value matched by `pattern` (`*` matches any key or index).
#[cfg(test)]
pub fn remove_path(v: &mut Value, pattern: &str) {
    compare::remove_matching(v, &tokens(pattern));
}

/// Copies the live values at the excluded paths into the body of a write, so
/// writing the desired state does not revert what may differ (e.g. replicas
/// an autoscaler owns). Wildcards are expanded against the live object.
pub fn keep_excluded(body: &mut Value, live: &Value, exclude: &[String]) {
    for pattern in exclude {
        for path in expand(live, &tokens(pattern)) {
            let pointer = to_pointer(&path);
            match live.pointer(&pointer) {
                Some(val) => set_at(body, &path, val.clone()),
                None => {
                    let mut p = path.clone();
                    if let Some(last) = p.pop() {
                        if let Some(parent) = body.pointer_mut(&to_pointer(&p)) {
                            if let Some(m) = parent.as_object_mut() {
                                m.remove(&last);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Every concrete path of `live` a wildcard pattern names.
fn expand(live: &Value, toks: &[String]) -> Vec<Vec<String>> {
    let Some((head, rest)) = toks.split_first() else {
        return vec![Vec::new()];
    };
    let children: Vec<(String, &Value)> = match (head.as_str(), live) {
        ("*", Value::Object(m)) => m.iter().map(|(k, v)| (k.clone(), v)).collect(),
        ("*", Value::Array(a)) => a
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v))
            .collect(),
        (_, Value::Object(m)) => m
            .get(head)
            .map(|v| vec![(head.clone(), v)])
            .unwrap_or_default(),
        (_, Value::Array(a)) => head
            .parse::<usize>()
            .ok()
            .and_then(|i| a.get(i))
            .map(|v| vec![(head.clone(), v)])
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    if rest.is_empty() && head != "*" && children.is_empty() {
        // Absent in live: the body must not have it either.
        return vec![vec![head.clone()]];
    }
    let mut out = Vec::new();
    for (k, child) in children {
        for mut tail in expand(child, rest) {
            tail.insert(0, k.clone());
            out.push(tail);
        }
    }
    out
}

fn to_pointer(path: &[String]) -> String {
    path.iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

fn set_at(v: &mut Value, path: &[String], val: Value) {
    let Some((last, parents)) = path.split_last() else {
        *v = val;
        return;
    };
    let mut cur = v;
    for t in parents {
        cur = match cur {
            Value::Object(m) => m
                .entry(t.clone())
                .or_insert_with(|| Value::Object(Default::default())),
            Value::Array(a) => match t.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                Some(c) => c,
                None => return,
            },
            _ => return,
        };
    }
    match cur {
        Value::Object(m) => {
            m.insert(last.clone(), val);
        }
        Value::Array(a) => {
            if let Some(slot) = last.parse::<usize>().ok().and_then(|i| a.get_mut(i)) {
                *slot = val;
            }
        }
        _ => {}
    }
}

/// The comparable form of a copy: `compare::normalize` minus excluded paths.
pub fn comparable(obj: &Value, keep_status: bool, exclude: &[String]) -> Value {
    let patterns: Vec<Vec<String>> = exclude.iter().map(|p| tokens(p)).collect();
    compare::normalize_excluding(obj, keep_status, &patterns)
}

/// What differs between the baseline and the live copy, as drift changes.
pub fn changes(
    baseline: &Value,
    live: &Value,
    keep_status: bool,
    exclude: &[String],
) -> Vec<DriftChange> {
    compare::diff(
        &comparable(baseline, keep_status, exclude),
        &comparable(live, keep_status, exclude),
    )
    .into_iter()
    .map(|c| DriftChange {
        path: c.path,
        desired: c.desired.unwrap_or(Value::Null),
        live: c.live.unwrap_or(Value::Null),
    })
    .collect()
}

/// Secret values never go into drift events (they are kept 7 days on the bus
/// and printed by every `nats sub`): a changed value under `/data` or
/// `/stringData` is replaced by a marker (no digest either: a short secret's
/// digest can be brute-forced). Absent stays `null`, so an added or removed
/// key still shows as such.
pub fn redact_secret_values(changes: &mut [DriftChange]) {
    for c in changes.iter_mut() {
        if c.path.starts_with("/data") || c.path.starts_with("/stringData") {
            c.desired = redact(&c.desired, "(redacted: desired value)");
            c.live = redact(&c.live, "(redacted: live value)");
        }
    }
}

/// What a rule with `seal: true` syncs is sealed on the bus (PROTOCOL §4.8),
/// so its drift events, which stay readable JSON, carry none of its values:
/// every value outside `/metadata` is replaced by the markers of
/// [`redact_secret_values`] (which field is sensitive in an arbitrary kind
/// is not known); the paths still say what changed.
pub fn redact_sealed_values(changes: &mut [DriftChange]) {
    for c in changes.iter_mut() {
        if !c.path.starts_with("/metadata/") {
            c.desired = redact(&c.desired, "(redacted: desired value)");
            c.live = redact(&c.live, "(redacted: live value)");
        }
    }
}

fn redact(v: &Value, marker: &str) -> Value {
    if v.is_null() {
        Value::Null
    } else {
        Value::String(marker.to_owned())
    }
}

/// Who changed the copy: the most recent `managedFields` entry of a manager
/// other than fleetbus (kubectl-edit, kubectl-patch, an HPA, a controller).
pub fn changed_by(live: &Value) -> Option<ChangedBy> {
    let entries = live.pointer("/metadata/managedFields")?.as_array()?;
    entries
        .iter()
        .filter(|e| e.get("manager").and_then(Value::as_str) != Some(FIELD_MANAGER))
        .filter_map(|e| {
            let manager = e.get("manager")?.as_str()?.to_owned();
            let operation = e
                .get("operation")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let time = e
                .get("time")
                .and_then(Value::as_str)
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.with_timezone(&chrono::Utc));
            Some(ChangedBy {
                manager,
                operation,
                time,
            })
        })
        .max_by_key(|c| c.time)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn wildcards_remove_every_match() {
        let mut v = json!({"spec": {"containers": [{"image": "a", "name": "x"}, {"image": "b", "name": "y"}]}});
        remove_path(&mut v, "/spec/containers/*/image");
        assert_eq!(
            v,
            json!({"spec": {"containers": [{"name": "x"}, {"name": "y"}]}})
        );
        let mut m = json!({"data": {"a": "1", "b": "2"}, "x": 1});
        remove_path(&mut m, "/data/*");
        assert_eq!(m, json!({"data": {}, "x": 1}));
        let mut esc = json!({"metadata": {"labels": {"a/b": "1", "c": "2"}}});
        remove_path(&mut esc, "/metadata/labels/a~1b");
        assert_eq!(esc, json!({"metadata": {"labels": {"c": "2"}}}));
    }

    #[test]
    fn excluded_values_are_kept_from_live_in_a_write() {
        let mut body = json!({"spec": {"replicas": 1, "template": {"x": 1}}});
        let live = json!({"spec": {"replicas": 5, "template": {"x": 2}}});
        keep_excluded(&mut body, &live, &["/spec/replicas".to_owned()]);
        assert_eq!(body, json!({"spec": {"replicas": 5, "template": {"x": 1}}}));
        // Absent in live: absent in the body too.
        let mut body = json!({"spec": {"replicas": 1}});
        keep_excluded(
            &mut body,
            &json!({"spec": {}}),
            &["/spec/replicas".to_owned()],
        );
        assert_eq!(body, json!({"spec": {}}));
    }

    #[test]
    fn changed_by_is_the_newest_foreign_manager() {
        let live = json!({"metadata": {"managedFields": [
            {"manager": "fleetbus-agent", "operation": "Update", "time": "2026-11-23T10:00:09Z"},
            {"manager": "kubectl-patch", "operation": "Update", "time": "2026-11-23T10:00:05Z"},
            {"manager": "kubectl-edit", "operation": "Update", "time": "2026-11-23T10:00:07Z"}]}});
        let by = changed_by(&live).unwrap();
        assert_eq!(by.manager, "kubectl-edit");
        assert_eq!(by.operation, "Update");
        assert!(changed_by(&json!({"metadata": {}})).is_none());
    }

    #[test]
    fn secret_values_are_redacted_but_distinguishable() {
        let mut ch = vec![
            DriftChange {
                path: "/data/password".into(),
                desired: json!("czNjcmV0"),
                live: json!("eA=="),
            },
            DriftChange {
                path: "/data/extra".into(),
                desired: Value::Null,
                live: json!("eQ=="),
            },
            DriftChange {
                path: "/metadata/labels/x".into(),
                desired: Value::Null,
                live: json!("y"),
            },
        ];
        redact_secret_values(&mut ch);
        let text = serde_json::to_string(&ch).unwrap();
        assert!(
            !text.contains("czNjcmV0") && !text.contains("eA==") && !text.contains("eQ=="),
            "{text}"
        );
        assert_ne!(
            ch[0].desired, ch[0].live,
            "different values stay distinguishable"
        );
        assert_eq!(ch[1].desired, Value::Null, "absence is not a secret");
        assert_eq!(ch[2].live, json!("y"), "labels are not secret");
    }

    #[test]
    fn values_of_a_sealed_rule_are_redacted_outside_metadata() {
        let mut ch = vec![
            DriftChange {
                path: "/data/token".into(),
                desired: json!("hunter2"),
                live: json!("x"),
            },
            DriftChange {
                path: "/spec/password".into(),
                desired: json!("pw"),
                live: Value::Null,
            },
            DriftChange {
                path: "/metadata/labels/x".into(),
                desired: Value::Null,
                live: json!("y"),
            },
        ];
        redact_sealed_values(&mut ch);
        let text = serde_json::to_string(&ch).unwrap();
        assert!(
            !text.contains("hunter2") && !text.contains("\"pw\""),
            "{text}"
        );
        assert_eq!(ch[1].live, Value::Null, "absence is not a secret");
        assert_eq!(ch[2].live, json!("y"), "metadata stays readable");
    }

    #[test]
    fn control_annotations_are_no_change() {
        // A copy always has annotations (its fleetbus.io marks).
        let base = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "annotations": {"fleetbus.io/rule": "r"}}, "data": {"a": "1"}});
        let mut live = base.clone();
        live["metadata"]["annotations"] = json!({
            "fleetbus.io/rule": "r",
            "fleetbus.io/correction-paused": "true",
            "fleetbus.io/drift-ignore": "/data/b",
        });
        let exclude: Vec<String> = CONTROL_ANNOTATIONS
            .iter()
            .map(|k| annotation_pointer(k))
            .collect();
        assert!(changes(&base, &live, false, &exclude).is_empty());
        // A correction keeps them.
        let mut body = base.clone();
        keep_excluded(&mut body, &live, &exclude);
        assert_eq!(
            body["metadata"]["annotations"],
            live["metadata"]["annotations"]
        );
    }

    #[test]
    fn an_excluded_edit_is_no_change() {
        let base = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {"a": "1", "b": "2"}});
        let mut live = base.clone();
        live["data"]["b"] = json!("3");
        assert!(changes(&base, &live, false, &["/data/b".to_owned()]).is_empty());
        let ch = changes(&base, &live, false, &[]);
        assert_eq!(ch.len(), 1);
        assert_eq!(ch[0].path, "/data/b");
        assert_eq!(ch[0].desired, json!("2"));
        assert_eq!(ch[0].live, json!("3"));
    }
}
