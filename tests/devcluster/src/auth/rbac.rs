//! RBAC authorization from the Roles, ClusterRoles and bindings in the store,
//! evaluated per request like kube-apiserver's RBAC authorizer.

use super::UserInfo;
use crate::selectors::{LabelReq, LabelSelector};
use crate::store::{Inner, ObjKey};
use serde_json::Value;
use std::collections::BTreeSet;

const RBAC: &str = "rbac.authorization.k8s.io";

/// What a request does, as kube's RequestInfo sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A request on a resource (or subresource) of an API group.
    Resource {
        /// API group ("" for core).
        group: String,
        /// Resource plural.
        resource: String,
        /// Subresource ("" if none).
        subresource: String,
        /// Namespace ("" for cluster scope).
        namespace: String,
        /// Object name ("" for collections).
        name: String,
    },
    /// Any other URL path (discovery, /version, /openapi, ...).
    NonResource {
        /// The URL path.
        path: String,
    },
}

/// A request to authorize: who, which verb, on what.
#[derive(Debug, Clone)]
pub struct Attributes<'a> {
    /// The authenticated user.
    pub user: &'a UserInfo,
    /// get, list, watch, create, update, patch, delete, deletecollection (or an
    /// HTTP verb in lower case for non-resource paths).
    pub verb: String,
    /// What it is done on.
    pub target: Target,
}

/// The authorizer's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// A rule allows it; the string names the binding, as kube's reason does.
    Allow(String),
    /// No rule allows it.
    Deny,
}

/// Decides `attrs` from the RBAC objects in `inner`.
pub fn authorize(inner: &Inner, attrs: &Attributes<'_>) -> Decision {
    let (namespace, cluster_scoped_request) = match &attrs.target {
        Target::Resource { namespace, .. } => (namespace.as_str(), namespace.is_empty()),
        Target::NonResource { .. } => ("", true),
    };
    for (key, crb) in inner.scan(RBAC, "clusterrolebindings", None) {
        if binds(crb, attrs.user, "") {
            if let Some(rules) = role_rules(inner, crb, "") {
                if rules.iter().any(|r| rule_allows(r, attrs)) {
                    return Decision::Allow(format!(
                        "RBAC: allowed by ClusterRoleBinding \"{}\"",
                        key.name
                    ));
                }
            }
        }
    }
    // RoleBindings apply only to requests inside their namespace, and never to
    // non-resource URLs.
    if !cluster_scoped_request {
        for (key, rb) in inner.scan(RBAC, "rolebindings", Some(namespace)) {
            if binds(rb, attrs.user, namespace) {
                if let Some(rules) = role_rules(inner, rb, namespace) {
                    if rules.iter().any(|r| rule_allows(r, attrs)) {
                        return Decision::Allow(format!(
                            "RBAC: allowed by RoleBinding \"{}/{namespace}\"",
                            key.name
                        ));
                    }
                }
            }
        }
    }
    Decision::Deny
}

/// Rules as a SelfSubjectRulesReview reports them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RuleSet {
    /// `resourceRules`: verbs, apiGroups, resources, resourceNames.
    pub resource: Vec<Value>,
    /// `nonResourceRules`: verbs, nonResourceURLs.
    pub non_resource: Vec<Value>,
}

/// Every rule that applies to `user` in `namespace` (ClusterRoleBindings,
/// the namespace's RoleBindings; discovery and the self-subject reviews come
/// from the bootstrap roles and bindings, as in kube).
pub fn rules_for(inner: &Inner, user: &UserInfo, namespace: &str) -> RuleSet {
    let mut rules = Vec::new();
    for (_, crb) in inner.scan(RBAC, "clusterrolebindings", None) {
        if binds(crb, user, "") {
            rules.extend(role_rules(inner, crb, "").unwrap_or_default());
        }
    }
    if !namespace.is_empty() {
        for (_, rb) in inner.scan(RBAC, "rolebindings", Some(namespace)) {
            if binds(rb, user, namespace) {
                rules.extend(role_rules(inner, rb, namespace).unwrap_or_default());
            }
        }
    }
    let keep = |r: &Value, fields: &[&str]| {
        let mut out = serde_json::Map::new();
        for f in fields {
            if let Some(v) = r
                .get(*f)
                .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            {
                out.insert((*f).to_string(), v.clone());
            }
        }
        Value::Object(out)
    };
    let (non_resource, resource): (Vec<Value>, Vec<Value>) = rules.into_iter().partition(|r| {
        r.get("nonResourceURLs")
            .is_some_and(|u| u.as_array().is_some_and(|a| !a.is_empty()))
    });
    RuleSet {
        resource: resource
            .iter()
            .map(|r| keep(r, &["verbs", "apiGroups", "resources", "resourceNames"]))
            .collect(),
        non_resource: non_resource
            .iter()
            .map(|r| keep(r, &["verbs", "nonResourceURLs"]))
            .collect(),
    }
}

/// True if one of the binding's subjects is `user`. A ServiceAccount subject
/// without a namespace means the RoleBinding's own (`binding_ns`).
fn binds(binding: &Value, user: &UserInfo, binding_ns: &str) -> bool {
    let Some(subjects) = binding.get("subjects").and_then(Value::as_array) else {
        return false;
    };
    subjects.iter().any(|s| {
        let kind = s.get("kind").and_then(Value::as_str).unwrap_or("");
        let name = s.get("name").and_then(Value::as_str).unwrap_or("");
        match kind {
            "ServiceAccount" => {
                let ns = s
                    .get("namespace")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .unwrap_or(binding_ns);
                user.username == format!("system:serviceaccount:{ns}:{name}")
            }
            "User" => user.username == name,
            "Group" => user.groups.iter().any(|g| g == name),
            _ => false,
        }
    })
}

/// The rules of the role a binding refers to; None if it does not exist.
fn role_rules(inner: &Inner, binding: &Value, binding_ns: &str) -> Option<Vec<Value>> {
    let kind = binding.pointer("/roleRef/kind").and_then(Value::as_str)?;
    let name = binding.pointer("/roleRef/name").and_then(Value::as_str)?;
    match kind {
        "ClusterRole" => Some(cluster_role_rules(inner, name, &mut BTreeSet::new())),
        "Role" if !binding_ns.is_empty() => {
            let role = find(inner, "roles", binding_ns, name)?;
            Some(rules_of(role))
        }
        _ => None,
    }
}

fn find<'a>(inner: &'a Inner, plural: &str, ns: &str, name: &str) -> Option<&'a Value> {
    inner.objects.get(&ObjKey::new(RBAC, plural, ns, name))
}

fn rules_of(role: &Value) -> Vec<Value> {
    role.get("rules")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// A ClusterRole's rules plus, for an aggregated one, the rules of every
/// ClusterRole its selectors match. kube-controller-manager writes those into
/// `rules`; here they are computed at each request, so a new labelled role
/// takes effect at once (the controller needs a moment).
fn cluster_role_rules(inner: &Inner, name: &str, seen: &mut BTreeSet<String>) -> Vec<Value> {
    if !seen.insert(name.to_string()) {
        return Vec::new();
    }
    let Some(role) = find(inner, "clusterroles", "", name) else {
        return Vec::new();
    };
    let mut rules = rules_of(role);
    let selectors: Vec<LabelSelector> = role
        .pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(label_selector).collect())
        .unwrap_or_default();
    if selectors.is_empty() {
        return rules;
    }
    let matching: Vec<String> = inner
        .scan(RBAC, "clusterroles", None)
        .filter(|(k, _)| k.name != name)
        .filter(|(_, r)| {
            let labels = r.pointer("/metadata/labels").and_then(Value::as_object);
            selectors.iter().any(|s| s.matches(labels))
        })
        .map(|(k, _)| k.name.clone())
        .collect();
    for other in matching {
        rules.extend(cluster_role_rules(inner, &other, seen));
    }
    rules
}

/// A metav1.LabelSelector object as a selector; None if it has an unknown
/// operator (kube treats such a selector as matching nothing).
fn label_selector(sel: &Value) -> Option<LabelSelector> {
    let mut reqs = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            reqs.push(LabelReq::Eq(k.clone(), v.as_str()?.to_string()));
        }
    }
    for e in sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = e.get("key").and_then(Value::as_str)?.to_string();
        let values: Vec<String> = e
            .get("values")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        reqs.push(match e.get("operator").and_then(Value::as_str)? {
            "In" => LabelReq::In(key, values),
            "NotIn" => LabelReq::NotIn(key, values),
            "Exists" => LabelReq::Exists(key),
            "DoesNotExist" => LabelReq::NotExists(key),
            _ => return None,
        });
    }
    // An empty selector matches nothing in an aggregation rule.
    if reqs.is_empty() {
        return None;
    }
    Some(LabelSelector(reqs))
}

fn strings<'a>(rule: &'a Value, field: &str) -> Vec<&'a str> {
    rule.get(field)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// kube's RuleAllows: verbs, then apiGroups/resources/resourceNames, or nonResourceURLs.
fn rule_allows(rule: &Value, attrs: &Attributes<'_>) -> bool {
    let verbs = strings(rule, "verbs");
    if !verbs.iter().any(|v| *v == "*" || *v == attrs.verb) {
        return false;
    }
    match &attrs.target {
        Target::Resource {
            group,
            resource,
            subresource,
            name,
            ..
        } => {
            let groups = strings(rule, "apiGroups");
            if !groups.iter().any(|g| *g == "*" || g == group) {
                return false;
            }
            let combined = if subresource.is_empty() {
                resource.clone()
            } else {
                format!("{resource}/{subresource}")
            };
            let resources = strings(rule, "resources");
            let resource_ok = resources.iter().any(|r| {
                *r == "*"
                    || *r == combined
                    || (!subresource.is_empty() && *r == format!("*/{subresource}"))
            });
            if !resource_ok {
                return false;
            }
            let names = strings(rule, "resourceNames");
            names.is_empty() || names.iter().any(|n| n == name)
        }
        Target::NonResource { path } => strings(rule, "nonResourceURLs")
            .iter()
            .any(|u| path_matches(u, path)),
    }
}

/// `*` matches everything; a trailing `*` matches by prefix.
fn path_matches(pattern: &str, path: &str) -> bool {
    if pattern == "*" || pattern == path {
        return true;
    }
    pattern
        .strip_suffix('*')
        .is_some_and(|prefix| path.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sa() -> UserInfo {
        UserInfo::service_account("fb", "agent", "uid")
    }

    fn res(group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Target {
        Target::Resource {
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn allows(rule: Value, verb: &str, target: Target) -> bool {
        let user = sa();
        rule_allows(
            &rule,
            &Attributes {
                user: &user,
                verb: verb.into(),
                target,
            },
        )
    }

    #[test]
    fn rule_matching_follows_kube() {
        let r = json!({"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "create"]});
        assert!(allows(r.clone(), "get", res("", "secrets", "", "ns", "x")));
        assert!(!allows(r.clone(), "list", res("", "secrets", "", "ns", "")));
        assert!(!allows(
            r.clone(),
            "get",
            res("apps", "secrets", "", "ns", "x")
        ));
        // A subresource needs its own entry.
        assert!(!allows(r, "get", res("", "secrets", "status", "ns", "x")));
        let sub = json!({"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["*"]});
        assert!(allows(
            sub.clone(),
            "patch",
            res("fleetbus.io", "clusters", "status", "", "a")
        ));
        assert!(!allows(
            sub,
            "patch",
            res("fleetbus.io", "clusters", "", "", "a")
        ));
        let named = json!({"apiGroups": [""], "resources": ["serviceaccounts/token"], "resourceNames": ["reader"], "verbs": ["create"]});
        assert!(allows(
            named.clone(),
            "create",
            res("", "serviceaccounts", "token", "ns", "reader")
        ));
        assert!(!allows(
            named,
            "create",
            res("", "serviceaccounts", "token", "ns", "default")
        ));
        let urls = json!({"nonResourceURLs": ["/metrics", "/logs/*"], "verbs": ["get"]});
        assert!(allows(
            urls.clone(),
            "get",
            Target::NonResource {
                path: "/logs/a/b".into()
            }
        ));
        assert!(!allows(
            urls,
            "get",
            Target::NonResource {
                path: "/metricsx".into()
            }
        ));
    }

    fn store(objects: &[(&str, &str, &str, Value)]) -> crate::store::Store {
        let store = crate::store::Store::open(None, 100).unwrap();
        // What kube-apiserver creates itself (system:discovery & co.), as the
        // server does at start.
        crate::bootstrap::bootstrap(&store, "127.0.0.1:6443".parse().unwrap()).unwrap();
        store
            .write(false, |tx| {
                for (plural, ns, name, obj) in objects {
                    tx.put(&ObjKey::new(RBAC, plural, ns, name), obj.clone());
                }
                Ok(())
            })
            .unwrap();
        store
    }

    fn decide(
        store: &crate::store::Store,
        user: &UserInfo,
        verb: &str,
        target: Target,
    ) -> Decision {
        let attrs = Attributes {
            user,
            verb: verb.into(),
            target,
        };
        store.read(|i| authorize(i, &attrs))
    }

    fn binding(role_kind: &str, role: &str, subjects: Value) -> Value {
        json!({"roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": role}, "subjects": subjects})
    }

    #[test]
    fn bindings_apply_in_their_scope_to_their_subjects() {
        let cm =
            json!({"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]});
        let s = store(&[
            ("roles", "fb", "cm", cm.clone()),
            // No namespace on the subject: the RoleBinding's own.
            (
                "rolebindings",
                "fb",
                "cm",
                binding(
                    "Role",
                    "cm",
                    json!([{"kind": "ServiceAccount", "name": "agent"}]),
                ),
            ),
            (
                "clusterroles",
                "",
                "nodes",
                json!({"rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"]}]}),
            ),
            (
                "clusterrolebindings",
                "",
                "nodes",
                binding(
                    "ClusterRole",
                    "nodes",
                    json!([{"kind": "Group", "name": "system:serviceaccounts:fb"}]),
                ),
            ),
        ]);
        let me = sa();
        let other = UserInfo::service_account("other", "agent", "u2");
        let d = decide(&s, &me, "get", res("", "configmaps", "", "fb", "x"));
        assert!(
            matches!(&d, Decision::Allow(r) if r.contains("RoleBinding \"cm/fb\"")),
            "{d:?}"
        );
        assert_eq!(
            decide(&s, &me, "get", res("", "configmaps", "", "default", "x")),
            Decision::Deny
        );
        assert_eq!(
            decide(&s, &other, "get", res("", "configmaps", "", "fb", "x")),
            Decision::Deny
        );
        // Group subjects; a ClusterRoleBinding applies cluster-wide.
        assert!(matches!(
            decide(&s, &me, "list", res("", "nodes", "", "", "")),
            Decision::Allow(_)
        ));
        assert_eq!(
            decide(&s, &other, "list", res("", "nodes", "", "", "")),
            Decision::Deny
        );
        // Discovery is open to every authenticated user; other paths are not.
        assert!(matches!(
            decide(
                &s,
                &other,
                "get",
                Target::NonResource {
                    path: "/apis/apps/v1".into()
                }
            ),
            Decision::Allow(_)
        ));
        assert_eq!(
            decide(
                &s,
                &other,
                "get",
                Target::NonResource {
                    path: "/metrics".into()
                }
            ),
            Decision::Deny
        );
    }

    #[test]
    fn aggregation_follows_labels_and_survives_cycles() {
        let agg = |label: &str, own: &str| {
            json!({
                "metadata": {"labels": {own: "true"}},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
                "rules": []
            })
        };
        let s = store(&[
            // a aggregates b, b aggregates a: a cycle must not hang.
            ("clusterroles", "", "a", agg("to-a", "to-b")),
            ("clusterroles", "", "b", agg("to-b", "to-a")),
            (
                "clusterroles",
                "",
                "secrets",
                json!({"metadata": {"labels": {"to-b": "true"}}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]}),
            ),
            (
                "clusterrolebindings",
                "",
                "a",
                binding(
                    "ClusterRole",
                    "a",
                    json!([{"kind": "ServiceAccount", "name": "agent", "namespace": "fb"}]),
                ),
            ),
        ]);
        assert!(matches!(
            decide(&s, &sa(), "list", res("", "secrets", "", "x", "")),
            Decision::Allow(_)
        ));
        assert_eq!(
            decide(&s, &sa(), "get", res("", "secrets", "", "x", "s")),
            Decision::Deny
        );
        let rules = s.read(|i| rules_for(i, &sa(), "x"));
        let secrets = json!({"verbs": ["list"], "apiGroups": [""], "resources": ["secrets"]});
        assert!(rules.resource.contains(&secrets), "{rules:?}");
        assert_eq!(rules.non_resource[0]["verbs"], json!(["get"]));
    }

    #[test]
    fn selectors_from_label_selector_objects() {
        let s = label_selector(&json!({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]})).unwrap();
        let labels = json!({"a": "1", "b": "x"});
        assert!(s.matches(labels.as_object()));
        assert!(!s.matches(json!({"a": "1"}).as_object()));
        assert!(label_selector(&json!({})).is_none());
        assert!(
            label_selector(&json!({"matchExpressions": [{"key": "b", "operator": "Bogus"}]}))
                .is_none()
        );
    }
}
