//! Label and field selectors (the query-string syntax of kube-apiserver).

use serde_json::{Map, Value};

/// One label requirement.
#[derive(Debug, Clone, PartialEq)]
pub enum LabelReq {
    /// `k=v` / `k==v`.
    Eq(String, String),
    /// `k!=v` (also matches objects without `k`).
    NotEq(String, String),
    /// `k in (a,b)`.
    In(String, Vec<String>),
    /// `k notin (a,b)` (also matches objects without `k`).
    NotIn(String, Vec<String>),
    /// `k`.
    Exists(String),
    /// `!k`.
    NotExists(String),
    /// `k>n`.
    Gt(String, i64),
    /// `k<n`.
    Lt(String, i64),
}

/// A parsed label selector: all requirements must hold.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector(pub Vec<LabelReq>);

/// Why a selector could not be parsed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectorError {
    /// The label selector syntax is wrong.
    #[error("unable to parse requirement: {0}")]
    Label(String),
    /// The field selector names a field this resource does not support.
    #[error("field label not supported: {0}")]
    FieldNotSupported(String),
    /// The field selector syntax is wrong.
    #[error("invalid selector: '{0}'; can't understand '{0}'")]
    Field(String),
}

fn split_top_level(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut cur = String::new();
    for c in s.chars() {
        match c {
            '(' => {
                depth += 1;
                cur.push(c)
            }
            ')' => {
                depth -= 1;
                cur.push(c)
            }
            ',' if depth == 0 => out.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    out.push(cur);
    out.into_iter()
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.len() <= 317
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn parse_set(rest: &str, whole: &str) -> Result<Vec<String>, SelectorError> {
    let rest = rest.trim();
    let inner = rest
        .strip_prefix('(')
        .and_then(|r| r.strip_suffix(')'))
        .ok_or_else(|| SelectorError::Label(format!("{whole}: expected a parenthesised set")))?;
    Ok(inner
        .split(',')
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
        .collect())
}

impl LabelSelector {
    /// Parses `a=b,c in (d,e),!f`.
    pub fn parse(s: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in split_top_level(s) {
            let req = parse_req(&part)?;
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    /// True if `labels` (metadata.labels, possibly absent) satisfies every requirement.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|r| match r {
            LabelReq::Eq(k, v) => get(k) == Some(v.as_str()),
            LabelReq::NotEq(k, v) => get(k) != Some(v.as_str()),
            LabelReq::In(k, vs) => get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::NotIn(k, vs) => !get(k).is_some_and(|x| vs.iter().any(|v| v == x)),
            LabelReq::Exists(k) => get(k).is_some(),
            LabelReq::NotExists(k) => get(k).is_none(),
            LabelReq::Gt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x > *n),
            LabelReq::Lt(k, n) => get(k)
                .and_then(|x| x.parse::<i64>().ok())
                .is_some_and(|x| x < *n),
        })
    }
}

fn parse_req(part: &str) -> Result<LabelReq, SelectorError> {
    let err = || SelectorError::Label(part.to_string());
    if let Some(k) = part.strip_prefix('!') {
        let k = k.trim();
        return if valid_key(k) {
            Ok(LabelReq::NotExists(k.into()))
        } else {
            Err(err())
        };
    }
    // Set-based: "key in (..)" / "key notin (..)".
    let words: Vec<&str> = part.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let key = words[0];
        let rest = words[1].trim_start();
        if let Some(r) = rest.strip_prefix("notin") {
            if valid_key(key) {
                return Ok(LabelReq::NotIn(key.into(), parse_set(r, part)?));
            }
        } else if let Some(r) = rest.strip_prefix("in") {
            if valid_key(key) {
                return Ok(LabelReq::In(key.into(), parse_set(r, part)?));
            }
        }
    }
    for (op, ctor) in [("!=", 0u8), ("==", 1), ("=", 1), (">", 2), ("<", 3)] {
        if let Some((k, v)) = part.split_once(op) {
            let (k, v) = (k.trim(), v.trim());
            if !valid_key(k) {
                return Err(err());
            }
            return Ok(match ctor {
                0 => LabelReq::NotEq(k.into(), v.into()),
                1 => LabelReq::Eq(k.into(), v.into()),
                2 => LabelReq::Gt(k.into(), v.parse().map_err(|_| err())?),
                _ => LabelReq::Lt(k.into(), v.parse().map_err(|_| err())?),
            });
        }
    }
    if valid_key(part) {
        Ok(LabelReq::Exists(part.into()))
    } else {
        Err(err())
    }
}

/// One field requirement: `label=value` or `label!=value`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldReq {
    /// Dotted JSON path of the field the label selects, e.g. "metadata.name"
    /// (Jobs' `status.successful` selects `status.succeeded`).
    pub path: String,
    /// How kube formats the field when it is unset (see [`SelectableField`]).
    pub unset: &'static str,
    /// The compared value.
    pub value: String,
    /// `!=` instead of `=`.
    pub negated: bool,
}

/// A parsed field selector.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector(pub Vec<FieldReq>);

/// One selectable field of a resource, after kube's per-resource
/// `*ToSelectableFields` (`pkg/registry/*/strategy.go`). Those functions format Go
/// struct fields, so an unset field still has a value: `fmt.Sprint(false)` for a
/// bool, `strconv.Itoa(0)` for an int32, the defaulted value where kube's defaulting
/// always sets one (the devcluster does not default pod specs or Secret types).
struct SelectableField {
    /// The label clients use in `fieldSelector`.
    label: &'static str,
    /// Where the value lives in the JSON object.
    path: &'static str,
    /// The formatted value of an unset field.
    unset: &'static str,
}

const fn field(label: &'static str, path: &'static str, unset: &'static str) -> SelectableField {
    SelectableField { label, path, unset }
}

/// Strings are formatted as-is; unset ones are "".
const fn string(label: &'static str) -> SelectableField {
    field(label, label, "")
}

const POD_FIELDS: &[SelectableField] = &[
    string("spec.nodeName"),
    field("spec.restartPolicy", "spec.restartPolicy", "Always"),
    field(
        "spec.schedulerName",
        "spec.schedulerName",
        "default-scheduler",
    ),
    string("spec.serviceAccountName"),
    field("spec.hostNetwork", "spec.hostNetwork", "false"),
    string("status.phase"),
    string("status.podIP"),
    string("status.nominatedNodeName"),
];

const EVENT_FIELDS: &[SelectableField] = &[
    string("involvedObject.kind"),
    string("involvedObject.namespace"),
    string("involvedObject.name"),
    string("involvedObject.uid"),
    string("involvedObject.apiVersion"),
    string("involvedObject.resourceVersion"),
    string("involvedObject.fieldPath"),
    string("reason"),
    string("reportingComponent"),
    string("source"),
    string("type"),
    string("regarding.kind"),
    string("regarding.namespace"),
    string("regarding.name"),
    string("regarding.uid"),
];

/// Fields (besides metadata.name / metadata.namespace) kube-apiserver accepts per resource.
fn extra_fields(group: &str, plural: &str) -> &'static [SelectableField] {
    const SECRETS: &[SelectableField] = &[field("type", "type", "Opaque")];
    const NODES: &[SelectableField] = &[field("spec.unschedulable", "spec.unschedulable", "false")];
    const NAMESPACES: &[SelectableField] = &[string("status.phase")];
    const REPLICAS: &[SelectableField] = &[field("status.replicas", "status.replicas", "0")];
    const JOBS: &[SelectableField] = &[field("status.successful", "status.succeeded", "0")];
    const CSRS: &[SelectableField] = &[string("spec.signerName")];
    match (group, plural) {
        ("", "pods") => POD_FIELDS,
        ("", "events") | ("events.k8s.io", "events") => EVENT_FIELDS,
        ("", "secrets") => SECRETS,
        ("", "nodes") => NODES,
        ("", "namespaces") => NAMESPACES,
        ("", "replicationcontrollers") | ("apps", "replicasets") => REPLICAS,
        ("batch", "jobs") => JOBS,
        ("certificates.k8s.io", "certificatesigningrequests") => CSRS,
        _ => &[],
    }
}

impl FieldSelector {
    /// Parses `metadata.name=x,metadata.namespace!=y`, checking the fields are supported.
    pub fn parse(s: &str, group: &str, plural: &str) -> Result<Self, SelectorError> {
        let mut reqs = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (label, value, negated) = if let Some((k, v)) = part.split_once("!=") {
                (k, v, true)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, v, false)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, v, false)
            } else {
                return Err(SelectorError::Field(part.to_string()));
            };
            let label = label.trim();
            let (path, unset) = if label == "metadata.name" || label == "metadata.namespace" {
                (label, "")
            } else {
                let f = extra_fields(group, plural)
                    .iter()
                    .find(|f| f.label == label)
                    .ok_or_else(|| SelectorError::FieldNotSupported(label.to_string()))?;
                (f.path, f.unset)
            };
            reqs.push(FieldReq {
                path: path.to_string(),
                unset,
                value: value.trim().to_string(),
                negated,
            });
        }
        Ok(FieldSelector(reqs))
    }

    /// True if `obj` satisfies every requirement (an unset field compares as kube
    /// formats it: "", "false", "0", or its default).
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|r| {
            let mut cur = obj;
            for seg in r.path.split('.') {
                cur = cur.get(seg).unwrap_or(&Value::Null);
            }
            let actual = match cur {
                Value::String(s) if s.is_empty() => r.unset.to_string(),
                Value::String(s) => s.clone(),
                Value::Null => r.unset.to_string(),
                Value::Bool(b) => b.to_string(),
                Value::Number(n) => n.to_string(),
                // e.g. event `source` is an object; compare its component.
                Value::Object(m) => m
                    .get("component")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                Value::Array(_) => String::new(),
            };
            (actual == r.value) != r.negated
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn equality_and_sets() {
        let l = labels(json!({"app": "web", "tier": "fe"}));
        let m = |s: &str| LabelSelector::parse(s).unwrap().matches(Some(&l));
        assert!(m("app=web"));
        assert!(m("app==web,tier=fe"));
        assert!(!m("app!=web"));
        assert!(m("app in (web, db)"));
        assert!(!m("app notin (web,db)"));
        assert!(m("app in (web,db),tier"));
        assert!(m("!missing"));
        assert!(!m("!app"));
        assert!(m("missing notin (x)"));
        assert!(m("other!=x"));
        assert!(m(""));
        assert!(!LabelSelector::parse("app").unwrap().matches(None));
    }

    #[test]
    fn bad_label_selectors() {
        assert!(LabelSelector::parse("a in b").is_err());
        assert!(LabelSelector::parse("=x").is_err());
        assert!(LabelSelector::parse("a b c").is_err());
    }

    #[test]
    fn field_selectors() {
        let o = json!({"metadata": {"name": "a", "namespace": "ns"}});
        let f = FieldSelector::parse("metadata.name=a", "", "configmaps").unwrap();
        assert!(f.matches(&o));
        let f = FieldSelector::parse("metadata.namespace!=ns", "", "configmaps").unwrap();
        assert!(!f.matches(&o));
        assert_eq!(
            FieldSelector::parse("spec.foo=1", "", "configmaps"),
            Err(SelectorError::FieldNotSupported("spec.foo".into()))
        );
        assert!(FieldSelector::parse("involvedObject.name=x", "", "events").is_ok());
    }

    /// kube formats unset Go fields (`fmt.Sprint(false)`, `strconv.Itoa(0)`), so
    /// selecting the zero value matches objects without the field. Failed before:
    /// an unset field compared as "" and `spec.unschedulable==false` matched nothing.
    #[test]
    fn unset_fields_compare_as_kube_formats_them() {
        let m = |sel: &str, plural: &str, group: &str, o: &Value| {
            FieldSelector::parse(sel, group, plural).unwrap().matches(o)
        };
        let node = json!({"metadata": {"name": "n"}, "spec": {}});
        assert!(m("spec.unschedulable==false", "nodes", "", &node));
        assert!(!m("spec.unschedulable=true", "nodes", "", &node));
        let cordoned = json!({"metadata": {"name": "n"}, "spec": {"unschedulable": true}});
        assert!(m("spec.unschedulable=true", "nodes", "", &cordoned));
        assert!(m("spec.unschedulable!=false", "nodes", "", &cordoned));

        // Jobs: the label is status.successful, the field status.succeeded.
        let job = json!({"metadata": {"name": "j"}, "status": {}});
        assert!(m("status.successful=0", "jobs", "batch", &job));
        let done = json!({"metadata": {"name": "j"}, "status": {"succeeded": 1}});
        assert!(m("status.successful=1", "jobs", "batch", &done));
        assert!(!m("status.successful=0", "jobs", "batch", &done));

        let rs = json!({"metadata": {"name": "r"}});
        assert!(m("status.replicas=0", "replicasets", "apps", &rs));
        assert!(m("status.replicas=0", "replicationcontrollers", "", &rs));
        let pod = json!({"metadata": {"name": "p"}, "spec": {"containers": []}});
        assert!(m("spec.hostNetwork=false", "pods", "", &pod));
        assert!(m("spec.restartPolicy=Always", "pods", "", &pod));
        assert!(m("spec.nodeName=", "pods", "", &pod));
        assert!(m("type=Opaque", "secrets", "", &json!({"metadata": {}})));
    }
}
