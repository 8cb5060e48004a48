//! The structural-schema rules kube-apiserver enforces on apiextensions/v1
//! CRDs (the cheap, common ones): every specified node has a `type` unless it
//! is int-or-string or preserves unknown fields, the root is an object,
//! `properties` and `additionalProperties` exclude each other, no
//! `uniqueItems: true`, patterns compile, and CEL rules compile within
//! their cost bound.

use crate::status::FieldCause;
use serde_json::Value;

/// Violations in `schema`, whose field path is `path`
/// (`spec.versions[0].schema.openAPIV3Schema`).
pub fn check(schema: &Value, path: &str) -> Vec<FieldCause> {
    let mut out = Vec::new();
    if !has_type(schema) {
        out.push(required(path, "must not be empty at the root"));
    } else if schema.get("type").and_then(Value::as_str) != Some("object") {
        out.push(FieldCause {
            reason: "FieldValueInvalid",
            field: format!("{path}.type"),
            message: format!(
                "Invalid value: {}: must be object at the root",
                schema.get("type").map(Value::to_string).unwrap_or_default()
            ),
        });
    }
    walk(schema, path, "", &mut out);
    out
}

fn has_type(s: &Value) -> bool {
    s.get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| !t.is_empty())
}

fn exempt(s: &Value) -> bool {
    s.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true))
        || s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true))
}

fn required(path: &str, detail: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueRequired",
        field: format!("{path}.type"),
        message: format!("Required value: {detail}"),
    }
}

fn forbidden(field: String, detail: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueForbidden",
        field,
        message: format!("Forbidden: {detail}"),
    }
}

/// `path` is the schema's field path in the CRD, `obj` the object path the node
/// describes (for messages about its default).
fn walk(s: &Value, path: &str, obj: &str, out: &mut Vec<FieldCause>) {
    crate::validation::crd_cel::check_definition(s, path, out);
    if let Some(d) = s.get("default") {
        // kube refuses a CRD whose defaults would not validate (after pruning nulls
        // and defaulting inside the default itself).
        let mut d = d.clone();
        crate::validation::crd_schema::apply_defaults(s, &mut d);
        for c in crate::validation::crd_schema::validate_at(s, &d, obj) {
            out.push(FieldCause {
                reason: c.reason,
                field: format!("{path}.default"),
                message: c.message,
            });
        }
    }
    if s.get("uniqueItems") == Some(&Value::Bool(true)) {
        out.push(forbidden(
            format!("{path}.uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(p) = s.get("pattern").and_then(Value::as_str) {
        if let Err(e) = regex::Regex::new(p) {
            // The regex crate's error is a multi-line report; its last line names the problem.
            let e = e.to_string();
            let e = e.lines().last().unwrap_or_default();
            let e = e.strip_prefix("error: ").unwrap_or(e);
            out.push(FieldCause {
                reason: "FieldValueInvalid",
                field: format!("{path}.pattern"),
                message: format!(
                    "Invalid value: {}: must be a valid regular expression, but isn't: {e}",
                    serde_json::to_string(p).unwrap_or_default()
                ),
            });
        }
    }
    let props = s.get("properties").and_then(Value::as_object);
    let additional = s.get("additionalProperties").filter(|a| a.is_object());
    if props.is_some() && additional.is_some() {
        out.push(forbidden(
            format!("{path}.additionalProperties"),
            "additionalProperties and properties are mutual exclusive",
        ));
    }
    for (k, child) in props.into_iter().flatten() {
        let child_path = format!("{path}.properties[{k}]");
        if !has_type(child) && !exempt(child) {
            out.push(required(
                &child_path,
                "must not be empty for specified object fields",
            ));
        }
        let child_obj = if obj.is_empty() {
            k.clone()
        } else {
            format!("{obj}.{k}")
        };
        walk(child, &child_path, &child_obj, out);
    }
    if let Some(child) = additional {
        let child_path = format!("{path}.additionalProperties");
        if !has_type(child) && !exempt(child) {
            out.push(required(
                &child_path,
                "must not be empty for specified object fields",
            ));
        }
        walk(child, &child_path, &format!("{obj}[*]"), out);
    }
    if let Some(child) = s.get("items").filter(|i| i.is_object()) {
        let child_path = format!("{path}.items");
        if !has_type(child) && !exempt(child) {
            out.push(required(
                &child_path,
                "must not be empty for specified array items",
            ));
        }
        walk(child, &child_path, &format!("{obj}[*]"), out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(schema: Value) -> Vec<String> {
        check(&schema, "s")
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    #[test]
    fn structural_schemas_pass() {
        let ok = json!({"type":"object","properties":{"spec":{"type":"object","properties":{
            "a":{"type":"string","pattern":"^x$"},"p":{"x-kubernetes-int-or-string":true},
            "any":{"x-kubernetes-preserve-unknown-fields":true},
            "m":{"type":"object","additionalProperties":{"type":"string"}},
            "l":{"type":"array","items":{"type":"integer"}}}}}});
        assert_eq!(messages(ok), Vec::<String>::new());
    }

    #[test]
    fn defaults_must_validate() {
        let s = json!({"type":"object","properties":{"spec":{"type":"object","properties":{
            "size":{"type":"integer","default":"big"},
            "mode":{"type":"string","enum":["a"],"default":"a"}}}}});
        assert_eq!(
            messages(s),
            ["s.properties[spec].properties[size].default: Invalid value: \"string\": spec.size in body must be of type integer: \"string\""]
        );
    }

    #[test]
    fn non_structural_schemas_are_reported() {
        let bad = json!({"properties":{"spec":{"properties":{"a":{"type":"string","pattern":"("}},
            "additionalProperties":{"type":"string"}},
            "l":{"type":"array","uniqueItems":true,"items":{}}}});
        assert_eq!(
            messages(bad),
            [
                "s.type: Required value: must not be empty at the root",
                "s.properties[l].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
                "s.properties[l].items.type: Required value: must not be empty for specified array items",
                "s.properties[spec].type: Required value: must not be empty for specified object fields",
                "s.properties[spec].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive",
                "s.properties[spec].properties[a].pattern: Invalid value: \"(\": must be a valid regular expression, but isn't: unclosed group",
            ]
        );
    }
}
