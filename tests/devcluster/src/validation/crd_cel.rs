//! A CRD's CEL rules (`x-kubernetes-validations`) and list-map keys, as
//! kube-apiserver enforces them: `self` is the value the rule sits on,
//! `oldSelf` the stored one on updates; a rule naming `oldSelf` (a
//! transition rule) runs only when the stored object has a value there to
//! compare with; a failed rule says its `messageExpression`'s string, else
//! its `message`. Compiled and bounded by `bounded_cel`, the cost estimate and
//! budget the agent's own CEL uses (kube's are of the same kind: an
//! estimate refused when the CRD is written, a budget per evaluation), the
//! estimate knowing the `maxItems`, `maxProperties` and `maxLength` of the
//! schema under the rule, as kube's does.

use bounded_cel::Bounds;
use serde_json::{Map, Value};

use crate::status::FieldCause;

const RULES: &str = "x-kubernetes-validations";

/// How far below a rule's node its schema's bounds are read (a rule's
/// loops do not nest deeper).
const BOUNDS_DEPTH: usize = 8;

/// The longest message a `messageExpression` may give
/// (`celconfig.MaxEvaluatedMessageExpressionSizeBytes`).
const MAX_MESSAGE: usize = 5 * 1024;

/// One entry of `x-kubernetes-validations` (the fields this server honours;
/// `reason` falls back to Invalid).
struct Rule<'a> {
    rule: &'a str,
    message: Option<&'a str>,
    message_expression: Option<&'a str>,
    field_path: Option<&'a str>,
}

fn rules(schema: &Value) -> impl Iterator<Item = Rule<'_>> {
    schema
        .get(RULES)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| {
            Some(Rule {
                rule: r.get("rule")?.as_str()?,
                message: r.get("message").and_then(Value::as_str),
                message_expression: r.get("messageExpression").and_then(Value::as_str),
                field_path: r.get("fieldPath").and_then(Value::as_str),
            })
        })
}

/// What the schema `schema` bounds of the values it describes, for the
/// estimate of its rules: `maxItems`/`maxProperties`, `maxLength`, and the
/// same of its properties, items and additionalProperties (only those that
/// bound something, [`BOUNDS_DEPTH`] levels down).
pub fn bounds(schema: &Value) -> Bounds {
    bounds_at(schema, BOUNDS_DEPTH)
}

fn bounds_at(schema: &Value, depth: usize) -> Bounds {
    let num = |k: &str| schema.get(k).and_then(Value::as_u64);
    let mut b = Bounds {
        max_elements: num("maxItems").or(num("maxProperties")),
        max_length: num("maxLength"),
        ..Bounds::default()
    };
    if depth == 0 {
        return b;
    }
    let below = |s: &Value| Some(bounds_at(s, depth - 1)).filter(|b| *b != Bounds::default());
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        b.fields = props
            .iter()
            .filter_map(|(k, s)| Some((k.clone(), below(s)?)))
            .collect();
    }
    b.items = schema.get("items").and_then(below).map(Box::new);
    b.values = schema
        .get("additionalProperties")
        .filter(|a| a.is_object())
        .and_then(below)
        .map(Box::new);
    b
}

/// Compiles `source` as a rule (or message expression) on `bounds`.
fn compile(
    source: &str,
    bounds: &Bounds,
) -> Result<bounded_cel::Program, bounded_cel::CompileError> {
    bounded_cel::compile_bounded(source, &[("self", bounds), ("oldSelf", bounds)])
}

/// kube's `evalMessageExpression`: the trimmed string, or why it cannot be
/// the message (`Err(true)`: the budget is spent, stop validating;
/// `Err(false)`: fall back to the rule's message).
fn message_of(source: &str, bounds: &Bounds, vars: &[(&str, &Value)]) -> Result<String, bool> {
    let program = compile(source, bounds).map_err(|_| false)?;
    match program.eval_string(vars) {
        Ok(s) => {
            let s = s.trim();
            if s.is_empty() || s.len() > MAX_MESSAGE || s.contains(['\n', '\r']) {
                Err(false)
            } else {
                Ok(s.to_owned())
            }
        }
        Err(bounded_cel::EvalError::BudgetExceeded) => Err(true),
        Err(_) => Err(false),
    }
}

/// kube's `ruleErrorString`: the message, else the rule, trimmed.
fn said(rule: &Rule<'_>) -> String {
    rule.message
        .map(str::trim)
        .filter(|m| !m.is_empty())
        .unwrap_or(rule.rule.trim())
        .to_owned()
}

/// Evaluates the rules on the node `schema` over `v` (not null), with `old`
/// the stored value at the same place on updates. kube-apiserver 1.33 names
/// the schema's type as the bad value (`Invalid value: "object": …`).
pub fn check(
    schema: &Value,
    v: &Value,
    old: Option<&Value>,
    path: &str,
    out: &mut Vec<FieldCause>,
) {
    let ty = schema.get("type").and_then(Value::as_str).unwrap_or("");
    let invalid = |out: &mut Vec<FieldCause>, field: String, detail: String| {
        out.push(FieldCause {
            reason: "FieldValueInvalid",
            field,
            message: format!("Invalid value: \"{ty}\": {detail}"),
        });
    };
    let mut bounds_here = None;
    for rule in rules(schema) {
        let bounds = bounds_here.get_or_insert_with(|| bounds(schema));
        let program = match compile(rule.rule, bounds) {
            Ok(p) => p,
            Err(e) => {
                invalid(out, path.to_owned(), format!("rule compile error: {e}"));
                continue;
            }
        };
        let transition = program.mentions("oldSelf");
        let with_old;
        let vars: &[(&str, &Value)] = match (transition, old) {
            (true, None) => continue,
            (true, Some(old)) => {
                with_old = [("self", v), ("oldSelf", old)];
                &with_old
            }
            (false, _) => &[("self", v)],
        };
        match program.eval_bool(vars) {
            Ok(true) => {}
            Ok(false) => {
                let field = match rule.field_path {
                    Some(p) if !p.is_empty() => format!("{path}{p}"),
                    _ => path.to_owned(),
                };
                let expressed = rule
                    .message_expression
                    .filter(|m| !m.trim().is_empty())
                    .map(|m| message_of(m, bounds, vars));
                let detail = match expressed {
                    Some(Ok(m)) => m,
                    Some(Err(true)) => {
                        invalid(
                            out,
                            field,
                            "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run".to_owned(),
                        );
                        return;
                    }
                    // kube's `ruleMessageOrDefault`.
                    None | Some(Err(false)) => {
                        match rule.message.map(str::trim).filter(|m| !m.is_empty()) {
                            Some(m) => m.to_owned(),
                            None => format!("failed rule: {}", said(&rule)),
                        }
                    }
                };
                invalid(out, field, detail);
            }
            Err(bounded_cel::EvalError::BudgetExceeded) => {
                invalid(
                    out,
                    path.to_owned(),
                    "validation failed due to running out of cost budget, no further validation rules will be run".to_owned(),
                );
                return;
            }
            Err(bounded_cel::EvalError::Execution(e)) => {
                invalid(
                    out,
                    path.to_owned(),
                    format!("{e} evaluating rule: {}", said(&rule)),
                );
            }
            Err(
                e @ (bounded_cel::EvalError::NotBool { .. }
                | bounded_cel::EvalError::NotString { .. }),
            ) => {
                invalid(out, path.to_owned(), format!("rule compile error: {e}"));
            }
        }
    }
}

/// Why a CRD's rule cannot be admitted (when the CRD is written): its rule
/// or its `messageExpression` does not compile, or its estimated cost (with
/// the bounds its schema gives) is over the limit. `path` is the schema
/// node's field path in the CRD.
pub fn check_definition(schema: &Value, path: &str, out: &mut Vec<FieldCause>) {
    let Some(list) = schema.get(RULES).and_then(Value::as_array) else {
        return;
    };
    let bounds = bounds(schema);
    for (i, r) in list.iter().enumerate() {
        let field = format!("{path}.{RULES}[{i}].rule");
        let Some(source) = r.get("rule").and_then(Value::as_str) else {
            out.push(FieldCause {
                reason: "FieldValueRequired",
                field,
                message: "Required value".to_owned(),
            });
            continue;
        };
        definition_causes(source, "", &bounds, field, out);
        if let Some(expr) = r.get("messageExpression").and_then(Value::as_str) {
            let field = format!("{path}.{RULES}[{i}].messageExpression");
            if expr.trim().is_empty() {
                out.push(FieldCause {
                    reason: "FieldValueRequired",
                    field,
                    message: "Required value: messageExpression must be non-empty if specified"
                        .to_owned(),
                });
            } else {
                definition_causes(expr, "messageExpression ", &bounds, field, out);
            }
        }
    }
}

fn definition_causes(
    source: &str,
    what: &str,
    bounds: &Bounds,
    field: String,
    out: &mut Vec<FieldCause>,
) {
    match compile(source, bounds) {
        Ok(_) => {}
        Err(e @ bounded_cel::CompileError::TooCostly { .. }) => out.push(FieldCause {
            reason: "FieldValueForbidden",
            field,
            message: format!("Forbidden: {what}{e}"),
        }),
        Err(e) => out.push(FieldCause {
            reason: "FieldValueInvalid",
            field,
            message: format!(
                "Invalid value: {}: {what}compilation failed: {e}",
                serde_json::to_string(source).unwrap_or_default()
            ),
        }),
    }
}

/// Whether `schema` is an array of `x-kubernetes-list-type: map`, and its keys.
pub fn map_keys(schema: &Value) -> Option<Vec<&str>> {
    if schema.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("map") {
        return None;
    }
    Some(
        schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect(),
    )
}

/// The key values of one item of a map list.
fn key_of<'a>(item: &'a Value, keys: &[&str]) -> Vec<Option<&'a Value>> {
    keys.iter().map(|k| item.get(*k)).collect()
}

/// The stored item with the same keys as `item`: how kube correlates the
/// items of a map list between an update and the stored object.
pub fn correlate<'a>(item: &Value, old: Option<&'a Value>, keys: &[&str]) -> Option<&'a Value> {
    let want = key_of(item, keys);
    old?.as_array()?
        .iter()
        .find(|o| o.is_object() && key_of(o, keys) == want)
}

/// A map list's items: each an object, no two with the same keys. An item
/// missing a key is reported by the schema's `required` (or defaulted), so
/// it is not compared here. kube-apiserver's wording:
/// `Duplicate value: map[string]interface {}{"name":"a"}`.
pub fn check_map_list(items: &[Value], keys: &[&str], path: &str, out: &mut Vec<FieldCause>) {
    let mut seen: Vec<Vec<Option<&Value>>> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let at = format!("{path}[{i}]");
        let Some(m) = item.as_object() else {
            if !item.is_null() {
                out.push(FieldCause {
                    reason: "FieldValueInvalid",
                    field: at,
                    message: format!(
                        "Invalid value: {}: must be an object for an array of list-type map",
                        go_sharp(item)
                    ),
                });
            }
            continue;
        };
        let key = key_of(item, keys);
        if key.iter().any(Option::is_none) {
            continue;
        }
        if seen.contains(&key) {
            out.push(FieldCause {
                reason: "FieldValueDuplicate",
                field: at,
                message: format!("Duplicate value: {}", go_key_map(m, keys)),
            });
        } else {
            seen.push(key);
        }
    }
}

/// Go's `%#v` of the `map[string]interface{}` of an item's keys (fmt sorts
/// map keys).
fn go_key_map(m: &Map<String, Value>, keys: &[&str]) -> String {
    let mut keys: Vec<&str> = keys.to_vec();
    keys.sort_unstable();
    let fields: Vec<String> = keys
        .iter()
        .filter_map(|k| Some(format!("{:?}:{}", k, go_sharp(m.get(*k)?))))
        .collect();
    format!("map[string]interface {{}}{{{}}}", fields.join(", "))
}

/// Go's `%#v` of a JSON scalar held in an `interface{}`.
fn go_sharp(v: &Value) -> String {
    match v {
        Value::String(s) => serde_json::to_string(s).unwrap_or_default(),
        Value::Null => "interface {}(nil)".to_owned(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::crd_schema::validate;
    use serde_json::json;

    /// The published ClusterProfile CRD's schema: the upstream file, pinned
    /// unchanged beside the project (`../shared/reference/crds`).
    fn cluster_profile() -> Value {
        let dir = std::env::var("FLEETBUS_UPSTREAM_CRDS").unwrap_or_else(|_| {
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../../shared/reference/crds"
            )
            .to_owned()
        });
        let file = format!("{dir}/multicluster.x-k8s.io_clusterprofiles.yaml");
        let yaml = std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("the upstream ClusterProfile CRD at {file}: {e}"));
        let crd: Value = crate::yaml::from_slice(yaml.as_bytes()).unwrap();
        crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
    }

    fn profile(manager: &str) -> Value {
        json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ClusterProfile",
               "metadata": {"name": "a", "namespace": "fleetbus-system"},
               "spec": {"clusterManager": {"name": manager}, "displayName": "a"}})
    }

    fn messages(causes: &[FieldCause]) -> Vec<String> {
        causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn an_immutable_field_refuses_a_change_as_kube_says() {
        let schema = cluster_profile();
        assert!(validate(&schema, &profile("fleetbus"), None).is_empty());
        // A transition rule does not run on create.
        assert!(validate(&schema, &profile("other"), None).is_empty());
        let old = profile("fleetbus");
        let mut same = old.clone();
        same["spec"]["displayName"] = json!("renamed");
        assert!(validate(&schema, &same, Some(&old)).is_empty());
        assert_eq!(
            messages(&validate(&schema, &profile("other"), Some(&old))),
            ["spec.clusterManager: Invalid value: \"object\": ClusterManager is immutable"]
        );
        // A stored object without the field has nothing to compare with.
        let mut bare = old.clone();
        bare["spec"]
            .as_object_mut()
            .unwrap()
            .remove("clusterManager");
        assert!(validate(&schema, &profile("other"), Some(&bare)).is_empty());
    }

    #[test]
    fn rules_without_old_self_say_what_failed() {
        let schema = json!({"type": "object", "properties": {"spec": {
            "type": "object",
            "x-kubernetes-validations": [
                {"rule": "self.min <= self.max"},
                {"rule": "self.min >= 0", "message": "min must not be negative", "fieldPath": ".min"},
                {"rule": "self.missing == 1"},
            ],
            "properties": {"min": {"type": "integer"}, "max": {"type": "integer"}}}}});
        let obj = json!({"spec": {"min": -5, "max": -7}});
        assert_eq!(
            messages(&validate(&schema, &obj, None)),
            [
                "spec: Invalid value: \"object\": failed rule: self.min <= self.max",
                "spec.min: Invalid value: \"object\": min must not be negative",
                "spec: Invalid value: \"object\": No such key: missing evaluating rule: self.missing == 1",
            ]
        );
    }

    #[test]
    fn a_message_expression_says_the_message_and_falls_back_as_kube_does() {
        let rule = |expr: &str| {
            json!({"type": "object", "properties": {"spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.replicas <= self.max", "message": "too many replicas",
                     "messageExpression": expr, "fieldPath": ".replicas"},
                ],
                "properties": {"replicas": {"type": "integer"}, "max": {"type": "integer"},
                    "name": {"type": "string"}, "items": {"type": "array", "items": {"type": "integer"}}}}}})
        };
        let obj =
            json!({"spec": {"replicas": 7, "max": 3, "name": "web", "items": vec![1; 2_000]}});
        let said = |expr: &str| messages(&validate(&rule(expr), &obj, None));
        assert_eq!(
            said("'web ' + self.name + ' wants ' + string(self.replicas) + ', at most ' + string(self.max)"),
            ["spec.replicas: Invalid value: \"object\": web web wants 7, at most 3"]
        );
        // Trimmed.
        assert_eq!(
            said("'  spaced  '"),
            ["spec.replicas: Invalid value: \"object\": spaced"]
        );
        // An error, a non-string, an empty or multi-line string: the message.
        for fallback in ["self.missing", "self.replicas", "'   '", "'two\\nlines'"] {
            assert_eq!(
                said(fallback),
                ["spec.replicas: Invalid value: \"object\": too many replicas"],
                "{fallback}"
            );
        }
        // Without a message: kube's default.
        let mut bare = rule("self.missing");
        bare["properties"]["spec"]["x-kubernetes-validations"][0]
            .as_object_mut()
            .unwrap()
            .remove("message");
        assert_eq!(
            messages(&validate(&bare, &obj, None)),
            ["spec.replicas: Invalid value: \"object\": failed rule: self.replicas <= self.max"]
        );
        // Over its budget: said, and no further rule runs.
        assert_eq!(
            said("self.items.map(x, self.items.map(y, string(y))).size() > 0 ? 'x' : 'y'"),
            ["spec.replicas: Invalid value: \"object\": messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run"]
        );
        // A rule that holds says nothing, whatever its message expression.
        let fine = json!({"spec": {"replicas": 1, "max": 3, "name": "web", "items": []}});
        assert!(validate(&rule("self.missing"), &fine, None).is_empty());
    }

    #[test]
    fn a_message_expression_is_compiled_with_the_crd() {
        let mut out = Vec::new();
        let schema = json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "true", "messageExpression": "'a' +"},
            {"rule": "true", "messageExpression": "  "},
            {"rule": "true", "messageExpression": "'ok ' + string(self.a)"},
            {"rule": "true", "messageExpression": "self.a.all(x, self.b.all(y, self.c.all(z, x == y && y == z))) ? 'a' : 'b'"},
        ]});
        check_definition(&schema, "s", &mut out);
        let got: Vec<_> = out
            .iter()
            .map(|c| {
                (
                    c.field.as_str(),
                    c.reason,
                    c.message.split(':').next().unwrap_or(""),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                (
                    "s.x-kubernetes-validations[0].messageExpression",
                    "FieldValueInvalid",
                    "Invalid value"
                ),
                (
                    "s.x-kubernetes-validations[1].messageExpression",
                    "FieldValueRequired",
                    "Required value"
                ),
                (
                    "s.x-kubernetes-validations[3].messageExpression",
                    "FieldValueForbidden",
                    "Forbidden"
                ),
            ]
        );
        assert!(
            out[0]
                .message
                .contains("messageExpression compilation failed"),
            "{}",
            out[0].message
        );
    }

    /// Failed before: every list counted as 100 elements, so three nested loops
    /// were refused whatever the schema said, and a list of a million as cheap
    /// as one of ten.
    #[test]
    fn schema_bounds_feed_the_estimate() {
        let three = "self.a.all(x, x.b.all(y, y.c.all(z, z.size() > 0)))";
        let schema = |max: Option<u64>| {
            let list = |items: Value| {
                let mut l = json!({"type": "array", "items": items});
                if let Some(m) = max {
                    l["maxItems"] = json!(m);
                }
                l
            };
            let c = list(json!({"type": "string", "maxLength": 4}));
            let b = list(json!({"type": "object", "properties": {"c": c}}));
            let a = list(json!({"type": "object", "properties": {"b": b}}));
            json!({"type": "object", "properties": {"a": a, "s": {"type": "string", "maxLength": 20}},
                   "x-kubernetes-validations": [{"rule": three}]})
        };
        let refused = |schema: &Value| {
            let mut out = Vec::new();
            check_definition(schema, "s", &mut out);
            out.iter().map(|c| c.reason).collect::<Vec<_>>()
        };
        assert_eq!(refused(&schema(None)), ["FieldValueForbidden"]);
        assert!(refused(&schema(Some(20))).is_empty());
        assert_eq!(refused(&schema(Some(100_000))), ["FieldValueForbidden"]);
        // The bounds reach the evaluation's compile too: the rule runs.
        let obj = json!({"a": [{"b": [{"c": ["x", ""]}]}]});
        assert_eq!(
            messages(&validate(&schema(Some(20)), &obj, None)),
            [format!(": Invalid value: \"object\": failed rule: {three}")]
        );
        // `maxLength` bounds what `split` makes.
        let split = |max_len: u64| {
            json!({"type": "object", "properties": {"s": {"type": "string", "maxLength": max_len}},
                "x-kubernetes-validations": [{"rule":
                    "self.s.split(',').all(a, self.s.split(',').all(b, self.s.split(',').all(c, a == b || b == c)))"}]})
        };
        assert!(refused(&split(30)).is_empty());
        assert_eq!(refused(&split(1_000)), ["FieldValueForbidden"]);
        let b = bounds(&schema(Some(20)));
        assert_eq!(b.fields["a"].max_elements, Some(20));
        assert_eq!(b.fields["s"].max_length, Some(20));
        assert_eq!(
            b.fields["a"].items.as_ref().unwrap().fields["b"].max_elements,
            Some(20)
        );
    }

    #[test]
    fn a_costly_rule_is_refused_with_the_crd() {
        let mut out = Vec::new();
        let schema = json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "self.a.all(x, self.b.all(y, self.c.all(z, x == y && y == z)))"},
            {"rule": "self.a =="},
            {"rule": "self.a.all(x, x > 0)"},
        ]});
        check_definition(&schema, "spec.versions[0].schema.openAPIV3Schema", &mut out);
        let fields: Vec<_> = out.iter().map(|c| (c.field.as_str(), c.reason)).collect();
        assert_eq!(
            fields,
            [
                (
                    "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[0].rule",
                    "FieldValueForbidden"
                ),
                (
                    "spec.versions[0].schema.openAPIV3Schema.x-kubernetes-validations[1].rule",
                    "FieldValueInvalid"
                ),
            ]
        );
    }

    #[test]
    fn an_evaluation_over_its_budget_is_stopped() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.items.all(x, self.items.all(y, y == x))"}],
            "properties": {"items": {"type": "array", "items": {"type": "integer"}}}}}});
        let obj = json!({"spec": {"items": vec![1; 2_000]}});
        assert_eq!(
            messages(&validate(&schema, &obj, None)),
            ["spec: Invalid value: \"object\": validation failed due to running out of cost budget, no further validation rules will be run"]
        );
    }

    #[test]
    fn map_lists_refuse_duplicate_and_missing_keys() {
        let schema = cluster_profile();
        let mut obj = profile("fleetbus");
        let cond = |t: &str| json!({"type": t, "status": "True", "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"});
        obj["status"] = json!({
            "conditions": [cond("Joined"), cond("ControlPlaneHealthy"), cond("Joined")],
            "properties": [{"name": "a", "value": "1"}, {"value": "2"}, {"name": "a", "value": "3"}],
        });
        assert_eq!(
            messages(&validate(&schema, &obj, None)),
            [
                "status.conditions[2]: Duplicate value: map[string]interface {}{\"type\":\"Joined\"}",
                "status.properties[2]: Duplicate value: map[string]interface {}{\"name\":\"a\"}",
                "status.properties[1].name: Required value",
            ]
        );
    }

    #[test]
    fn map_list_items_are_compared_with_the_stored_item_of_the_same_keys() {
        let schema = json!({"type": "object", "properties": {"l": {"type": "array",
            "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
            "items": {"type": "object", "required": ["k"], "properties": {
                "k": {"type": "string"},
                "v": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}]}}}}}});
        let old = json!({"l": [{"k": "a", "v": "1"}, {"k": "b", "v": "2"}]});
        // Reordered: each item still meets its own stored self.
        let reordered =
            json!({"l": [{"k": "b", "v": "2"}, {"k": "a", "v": "1"}, {"k": "c", "v": "9"}]});
        assert!(validate(&schema, &reordered, Some(&old)).is_empty());
        let changed = json!({"l": [{"k": "b", "v": "3"}, {"k": "a", "v": "1"}]});
        assert_eq!(
            messages(&validate(&schema, &changed, Some(&old))),
            ["l[0].v: Invalid value: \"string\": immutable"]
        );
    }
}
