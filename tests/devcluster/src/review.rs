//! authorization.k8s.io/v1 SelfSubjectAccessReview and SelfSubjectRulesReview:
//! create-only, answered from the request and never stored, as kube-apiserver does.
//! Both are answered by the same authorizer as requests (`auth`).

use crate::auth::rbac::{Decision, RuleSet, Target};
use crate::decode::check_type;
use crate::resources::ResourceDef;
use crate::status::{ApiError, FieldCause};
use serde_json::{json, Map, Value};

/// `status.reason` of an access review allowed without RBAC.
pub const REASON: &str = "fleetbus-devcluster does not enforce authorization";

/// The caller's view of the authorizer.
pub struct Caller<'a> {
    /// The decision for (verb, target).
    pub decide: &'a dyn Fn(String, Target) -> Decision,
    /// The caller's rules in a namespace; None: everything.
    pub rules: &'a dyn Fn(&str) -> Option<RuleSet>,
}

/// The review with its `status` filled in (what POST answers with 201).
pub fn answer(def: &ResourceDef, mut obj: Value, caller: &Caller<'_>) -> Result<Value, ApiError> {
    check_type(def, &mut obj)?;
    let status = match def.kind.as_str() {
        "SelfSubjectAccessReview" => access_review_status(def, &obj, caller.decide)?,
        "SelfSubjectRulesReview" => rules_review_status(&obj, caller.rules)?,
        other => {
            return Err(ApiError::internal(format!(
                "no review handler for kind {other}"
            )))
        }
    };
    // Only the known fields are echoed (kube's decoder drops the rest).
    let mut out = Map::new();
    for k in ["apiVersion", "kind", "metadata", "spec"] {
        let v = obj.get(k).cloned().unwrap_or_else(|| json!({}));
        out.insert(k.into(), v);
    }
    out.insert("status".into(), status);
    Ok(Value::Object(out))
}

fn present<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    obj.get("spec")?.get(field).filter(|v| !v.is_null())
}

/// kube's ValidateSelfSubjectAccessReviewSpec: exactly one kind of attributes.
fn access_review_status(
    def: &ResourceDef,
    obj: &Value,
    decide: &dyn Fn(String, Target) -> Decision,
) -> Result<Value, ApiError> {
    let resource = present(obj, "resourceAttributes");
    let non_resource = present(obj, "nonResourceAttributes");
    let cause = match (resource, non_resource) {
        (Some(_), Some(n)) => Some(FieldCause {
            reason: "FieldValueInvalid",
            field: "spec.nonResourceAttributes".into(),
            message: format!(
                "Invalid value: {}: cannot be specified in combination with resourceAttributes",
                n
            ),
        }),
        (None, None) => Some(FieldCause {
            reason: "FieldValueInvalid",
            field: "spec.resourceAttributes".into(),
            message: "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified".into(),
        }),
        _ => None,
    };
    if let Some(c) = cause {
        return Err(ApiError::invalid(&def.group, &def.kind, "", vec![c]));
    }
    let field = |v: Option<&Value>, k: &str| {
        v.and_then(|v| v.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (verb, target) = match resource {
        Some(r) => (
            field(Some(r), "verb"),
            Target::Resource {
                group: field(Some(r), "group"),
                resource: field(Some(r), "resource"),
                subresource: field(Some(r), "subresource"),
                namespace: field(Some(r), "namespace"),
                name: field(Some(r), "name"),
            },
        ),
        None => (
            field(non_resource, "verb"),
            Target::NonResource {
                path: field(non_resource, "path"),
            },
        ),
    };
    Ok(match decide(verb, target) {
        Decision::Allow(reason) if reason.is_empty() => json!({"allowed": true, "reason": REASON}),
        Decision::Allow(reason) => json!({"allowed": true, "reason": reason}),
        Decision::Deny => json!({"allowed": false}),
    })
}

/// The caller's rules in the namespace (everything when nothing is
/// enforced); kube answers 400 without a namespace.
fn rules_review_status(
    obj: &Value,
    rules: &dyn Fn(&str) -> Option<RuleSet>,
) -> Result<Value, ApiError> {
    let ns = present(obj, "namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    if ns.is_empty() {
        return Err(ApiError::bad_request("no namespace on request"));
    }
    if let Some(set) = rules(ns) {
        return Ok(json!({
            "resourceRules": set.resource,
            "nonResourceRules": set.non_resource,
            "incomplete": false,
        }));
    }
    Ok(json!({
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        "incomplete": false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    fn allow_all(_: String, _: Target) -> Decision {
        Decision::Allow(String::new())
    }

    fn everything(_: &str) -> Option<RuleSet> {
        None
    }

    fn answer(def: &ResourceDef, obj: Value) -> Result<Value, ApiError> {
        super::answer(
            def,
            obj,
            &Caller {
                decide: &allow_all,
                rules: &everything,
            },
        )
    }

    fn def(kind: &str) -> ResourceDef {
        builtins().into_iter().find(|d| d.kind == kind).unwrap()
    }

    #[test]
    fn access_review_is_allowed_and_echoed() {
        let req = json!({"spec": {"resourceAttributes": {"verb": "create", "group": "apps", "resource": "deployments"}}, "extra": 1});
        let out = answer(&def("SelfSubjectAccessReview"), req).unwrap();
        assert_eq!(
            out,
            json!({
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "metadata": {},
                "spec": {"resourceAttributes": {"verb": "create", "group": "apps", "resource": "deployments"}},
                "status": {"allowed": true, "reason": REASON},
            })
        );
    }

    #[test]
    fn access_review_needs_exactly_one_kind_of_attributes() {
        let d = def("SelfSubjectAccessReview");
        let none = answer(&d, json!({"spec": {"resourceAttributes": null}})).unwrap_err();
        assert_eq!(none.code, 422);
        let both = json!({"spec": {"resourceAttributes": {}, "nonResourceAttributes": {"path": "/x", "verb": "get"}}});
        assert_eq!(answer(&d, both).unwrap_err().code, 422);
        let wrong_kind = json!({"kind": "SelfSubjectRulesReview", "spec": {}});
        assert_eq!(answer(&d, wrong_kind).unwrap_err().code, 400);
    }

    #[test]
    fn access_review_answers_from_the_authorizer() {
        let d = def("SelfSubjectAccessReview");
        let deny_secrets = |verb: String, t: Target| match t {
            Target::Resource { resource, .. } if resource == "secrets" && verb == "list" => {
                Decision::Deny
            }
            _ => Decision::Allow("RBAC: allowed by RoleBinding \"x/ns\"".into()),
        };
        let ask = |res: &str| json!({"spec": {"resourceAttributes": {"verb": "list", "resource": res, "namespace": "ns"}}});
        let caller = Caller {
            decide: &deny_secrets,
            rules: &everything,
        };
        let out = super::answer(&d, ask("secrets"), &caller).unwrap();
        assert_eq!(out["status"], json!({"allowed": false}));
        let out = super::answer(&d, ask("configmaps"), &caller).unwrap();
        assert_eq!(out["status"]["allowed"], json!(true));
        assert_eq!(
            out["status"]["reason"],
            json!("RBAC: allowed by RoleBinding \"x/ns\"")
        );
    }

    #[test]
    fn rules_review_allows_everything_in_a_namespace() {
        let d = def("SelfSubjectRulesReview");
        let out = answer(&d, json!({"spec": {"namespace": "default"}})).unwrap();
        assert_eq!(out["status"]["resourceRules"][0]["apiGroups"], json!(["*"]));
        assert_eq!(
            out["status"]["nonResourceRules"][0]["nonResourceURLs"],
            json!(["*"])
        );
        assert_eq!(out["status"]["incomplete"], json!(false));
        assert_eq!(answer(&d, json!({"spec": {}})).unwrap_err().code, 400);
    }
}
