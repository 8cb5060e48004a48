//! Custom resources checked against their version's structural schema, as
//! apiextensions-apiserver does: nulls of non-nullable fields dropped, defaults
//! applied, then every value validation (kube-openapi's checks and wording).
//!
//! Unknown fields are pruned earlier (`decode::check_fields`); this module only
//! defaults and validates. Messages follow kube-openapi's `errors` package
//! (`spec.name in body should be at least 3 chars long`) wrapped in
//! apimachinery's `field.Error` bodies (`Invalid value: "": ...`), with the
//! same mapping apiextensions' `kubeOpenAPIResultToFieldErrors` makes.

use super::{crd_cel, formats};
use crate::resources::ResourceDef;
use crate::status::{ApiError, FieldCause};
use serde_json::{Map, Value};

const INT_OR_STRING: &str = "x-kubernetes-int-or-string";
const EMBEDDED: &str = "x-kubernetes-embedded-resource";

/// Drops nulls of non-nullable fields and fills in `default`s, top-down, as
/// apiextensions' structural defaulting does (a filled-in default is itself
/// defaulted further down). Used on every write and on every read of stored
/// custom resources.
pub fn apply_defaults(schema: &Value, v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(props) = schema.get("properties").and_then(Value::as_object) {
                for (k, ps) in props {
                    // kube prunes nulls of non-nullable fields before defaulting.
                    if m.get(k).is_some_and(Value::is_null) && !nullable(ps) {
                        m.remove(k);
                    }
                    if !m.contains_key(k) {
                        if let Some(d) = ps.get("default") {
                            m.insert(k.clone(), d.clone());
                        }
                    }
                }
                for (k, child) in m.iter_mut() {
                    if let Some(ps) = props.get(k) {
                        apply_defaults(ps, child);
                    }
                }
            } else if let Some(ap) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                m.retain(|_, c| !c.is_null() || nullable(ap));
                m.values_mut().for_each(|c| apply_defaults(ap, c));
            }
        }
        Value::Array(items) => {
            if let Some(is) = schema.get("items").filter(|i| i.is_object()) {
                for item in items.iter_mut() {
                    if item.is_null() && !nullable(is) {
                        if let Some(d) = is.get("default") {
                            *item = d.clone();
                        }
                    }
                    apply_defaults(is, item);
                }
            }
        }
        _ => {}
    }
}

fn nullable(schema: &Value) -> bool {
    schema.get("nullable") == Some(&Value::Bool(true))
}

/// Validates `v` against `schema`. With `old` (updates), subtrees equal to the
/// stored object's are not reported: kube's validation ratcheting (GA in 1.33)
/// lets an object keep values a later schema change made invalid.
pub fn validate(schema: &Value, v: &Value, old: Option<&Value>) -> Vec<FieldCause> {
    let mut out = Vec::new();
    walk(schema, v, old, "", &mut out);
    out
}

fn child_path(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

/// The name kube-openapi uses in messages: the path, or the root's empty name.
fn name(path: &str) -> &str {
    path
}

/// kube-openapi's name for a JSON value's type (the `"integer"` in `must be of
/// type string: "integer"`).
fn type_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn type_matches(ty: &str, v: &Value) -> bool {
    match ty {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        _ => true,
    }
}

/// Go's `%v`/`%q` rendering of the bad value in a `field.Error` body.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

/// Go's `strconv.Quote` for the printable strings messages carry.
fn go_quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("\"{s}\""))
}

fn invalid(out: &mut Vec<FieldCause>, path: &str, v: &Value, detail: String) {
    out.push(FieldCause {
        reason: "FieldValueInvalid",
        field: path.to_string(),
        message: format!("Invalid value: {}: {detail}", go_value(v)),
    });
}

fn type_invalid(out: &mut Vec<FieldCause>, path: &str, type_name: &str, actual: &str) {
    out.push(FieldCause {
        reason: "FieldValueTypeInvalid",
        field: path.to_string(),
        message: format!(
            "Invalid value: \"{actual}\": {} in body must be of type {type_name}: \"{actual}\"",
            name(path)
        ),
    });
}

fn required(out: &mut Vec<FieldCause>, path: &str, detail: &str) {
    out.push(FieldCause {
        reason: "FieldValueRequired",
        field: path.to_string(),
        message: if detail.is_empty() {
            "Required value".into()
        } else {
            format!("Required value: {detail}")
        },
    });
}

fn too_many(out: &mut Vec<FieldCause>, path: &str, actual: usize, max: u64) {
    out.push(FieldCause {
        reason: "FieldValueTooMany",
        field: path.to_string(),
        message: format!("Too many: {actual}: must have at most {max} items"),
    });
}

fn as_u64(schema: &Value, k: &str) -> Option<u64> {
    schema.get(k).and_then(Value::as_u64)
}

/// Go's `%v` of a float64 bound (`3`, `2.5`).
fn go_number(f: f64) -> String {
    if f.fract() == 0.0 && f.abs() < 1e21 {
        format!("{}", f as i64)
    } else {
        format!("{f}")
    }
}

fn walk(schema: &Value, v: &Value, old: Option<&Value>, path: &str, out: &mut Vec<FieldCause>) {
    if old == Some(v) {
        return;
    }
    let int_or_string = schema.get(INT_OR_STRING) == Some(&Value::Bool(true));
    if v.is_null() {
        if !nullable(schema) && (schema.get("type").is_some() || int_or_string) {
            let ty = if int_or_string {
                "integer,string"
            } else {
                schema.get("type").and_then(Value::as_str).unwrap_or("")
            };
            type_invalid(out, path, ty, "null");
        }
        return;
    }
    if int_or_string {
        if !(v.is_string() || v.is_i64() || v.is_u64()) {
            type_invalid(out, path, "integer,string", type_of(v));
            return;
        }
    } else if let Some(ty) = schema.get("type").and_then(Value::as_str) {
        if !type_matches(ty, v) {
            type_invalid(out, path, ty, type_of(v));
            return;
        }
    }
    check_enum(schema, v, path, out);
    crd_cel::check(schema, v, old, path, out);
    match v {
        Value::String(s) => check_string(schema, s, v, path, out),
        Value::Number(_) => check_number(schema, v, path, out),
        Value::Array(items) => check_array(schema, items, old, path, out),
        Value::Object(m) => check_object(schema, m, old, path, out),
        _ => {}
    }
    check_combinators(schema, v, path, out);
}

fn check_enum(schema: &Value, v: &Value, path: &str, out: &mut Vec<FieldCause>) {
    let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
        return;
    };
    if allowed.contains(v) {
        return;
    }
    let values: Vec<String> = allowed
        .iter()
        .map(|a| match a {
            Value::String(s) => go_quote(s),
            other => go_quote(&other.to_string()),
        })
        .collect();
    out.push(FieldCause {
        reason: "FieldValueNotSupported",
        field: path.to_string(),
        message: format!(
            "Unsupported value: {}: supported values: {}",
            go_value(v),
            values.join(", ")
        ),
    });
}

fn check_string(schema: &Value, s: &str, v: &Value, path: &str, out: &mut Vec<FieldCause>) {
    // go-openapi counts characters (runes), not bytes.
    let len = s.chars().count() as u64;
    if let Some(max) = as_u64(schema, "maxLength") {
        if len > max {
            let unit = if max == 1 { "byte" } else { "bytes" };
            out.push(FieldCause {
                reason: "FieldValueTooLong",
                field: path.to_string(),
                message: format!("Too long: may not be more than {max} {unit}"),
            });
        }
    }
    if let Some(min) = as_u64(schema, "minLength") {
        if len < min {
            let detail = format!("{} in body should be at least {min} chars long", name(path));
            invalid(out, path, v, detail);
        }
    }
    if let Some(p) = schema.get("pattern").and_then(Value::as_str) {
        // An unparsable pattern is refused when the CRD is written; skip it here.
        if let Ok(re) = regex::Regex::new(p) {
            if !re.is_match(s) {
                invalid(
                    out,
                    path,
                    v,
                    format!("{} in body should match '{p}'", name(path)),
                );
            }
        }
    }
    if let Some(f) = schema.get("format").and_then(Value::as_str) {
        if !formats::is_valid(f, s) {
            out.push(FieldCause {
                reason: "FieldValueTypeInvalid",
                field: path.to_string(),
                message: format!(
                    "Invalid value: {}: {} in body must be of type {f}: {}",
                    go_quote(s),
                    name(path),
                    go_quote(s)
                ),
            });
        }
    }
}

fn check_number(schema: &Value, v: &Value, path: &str, out: &mut Vec<FieldCause>) {
    let Some(x) = v.as_f64() else {
        return;
    };
    if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
        let exclusive = schema.get("exclusiveMaximum") == Some(&Value::Bool(true));
        if x > max || (exclusive && x == max) {
            let op = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            let detail = format!("{} in body should be {op} {}", name(path), go_number(max));
            invalid(out, path, v, detail);
        }
    }
    if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
        let exclusive = schema.get("exclusiveMinimum") == Some(&Value::Bool(true));
        if x < min || (exclusive && x == min) {
            let op = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            let detail = format!("{} in body should be {op} {}", name(path), go_number(min));
            invalid(out, path, v, detail);
        }
    }
    if let Some(m) = schema.get("multipleOf").and_then(Value::as_f64) {
        if m > 0.0 && (x / m).fract() != 0.0 {
            let detail = format!(
                "{} in body should be a multiple of {}",
                name(path),
                go_number(m)
            );
            invalid(out, path, v, detail);
        }
    }
}

fn check_array(
    schema: &Value,
    items: &[Value],
    old: Option<&Value>,
    path: &str,
    out: &mut Vec<FieldCause>,
) {
    let n = items.len();
    if let Some(max) = as_u64(schema, "maxItems") {
        if n as u64 > max {
            too_many(out, path, n, max);
        }
    }
    if let Some(min) = as_u64(schema, "minItems") {
        if (n as u64) < min {
            let detail = format!("{} in body should have at least {min} items", name(path));
            invalid(out, path, &Value::from(n), detail);
        }
    }
    let keys = crd_cel::map_keys(schema);
    if let Some(keys) = &keys {
        crd_cel::check_map_list(items, keys, path, out);
    }
    if schema.get("uniqueItems") == Some(&Value::Bool(true)) || is_set(schema) {
        if let Some(dup) = first_duplicate(items) {
            out.push(FieldCause {
                reason: "FieldValueDuplicate",
                field: format!("{path}[{dup}]"),
                message: format!("Duplicate value: {}", go_value(&items[dup])),
            });
        }
    }
    let Some(is) = schema.get("items").filter(|i| i.is_object()) else {
        return;
    };
    // Items of a map list are correlated with the stored object by their
    // keys, as kube does (ratcheting, `oldSelf`); other lists by index, close
    // to kube's ratcheting of atomic lists.
    let old_items = old.and_then(Value::as_array);
    for (i, item) in items.iter().enumerate() {
        let old_item = match &keys {
            Some(keys) => crd_cel::correlate(item, old, keys),
            None => old_items.and_then(|o| o.get(i)),
        };
        walk(is, item, old_item, &format!("{path}[{i}]"), out);
    }
}

fn is_set(schema: &Value) -> bool {
    schema.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("set")
}

fn first_duplicate(items: &[Value]) -> Option<usize> {
    (1..items.len()).find(|&i| items[..i].contains(&items[i]))
}

fn check_object(
    schema: &Value,
    m: &Map<String, Value>,
    old: Option<&Value>,
    path: &str,
    out: &mut Vec<FieldCause>,
) {
    let n = m.len() as u64;
    if let Some(max) = as_u64(schema, "maxProperties") {
        if n > max {
            out.push(FieldCause {
                reason: "FieldValueTooMany",
                field: path.to_string(),
                message: format!("Too many: {n}: must have at most {max} items"),
            });
        }
    }
    if let Some(min) = as_u64(schema, "minProperties") {
        if n < min {
            let detail = format!(
                "{} in body should have at least {min} properties",
                name(path)
            );
            invalid(out, path, &Value::from(n), detail);
        }
    }
    if let Some(req) = schema.get("required").and_then(Value::as_array) {
        for r in req.iter().filter_map(Value::as_str) {
            if !m.contains_key(r) {
                required(out, &child_path(path, r), "");
            }
        }
    }
    if schema.get(EMBEDDED) == Some(&Value::Bool(true)) {
        for k in ["apiVersion", "kind"] {
            if m.get(k).and_then(Value::as_str).is_none_or(str::is_empty) {
                required(out, &child_path(path, k), "must not be empty");
            }
        }
    }
    let props = schema.get("properties").and_then(Value::as_object);
    let additional = schema.get("additionalProperties").filter(|a| a.is_object());
    let old_map = old.and_then(Value::as_object);
    for (k, child) in m {
        let Some(cs) = props.and_then(|p| p.get(k)).or(additional) else {
            continue;
        };
        // The root's metadata is ObjectMeta, checked by the generic metadata rules.
        if path.is_empty() && k == "metadata" {
            continue;
        }
        let old_child = old_map.and_then(|o| o.get(k));
        walk(cs, child, old_child, &child_path(path, k), out);
    }
}

/// allOf/anyOf/oneOf/not: value validations only (structural schemas keep types
/// out of them), reported with go-openapi's wording.
fn check_combinators(schema: &Value, v: &Value, path: &str, out: &mut Vec<FieldCause>) {
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        for s in all {
            walk(s, v, None, path, out);
        }
    }
    let passes = |s: &Value| validate_at(s, v, path).is_empty();
    if let Some(any) = schema.get("anyOf").and_then(Value::as_array) {
        if !any.iter().any(passes) {
            let detail = format!(
                "{} in body must validate at least one schema (anyOf)",
                name(path)
            );
            invalid(out, path, &Value::from(""), detail);
            for s in any {
                out.extend(validate_at(s, v, path));
            }
        }
    }
    if let Some(one) = schema.get("oneOf").and_then(Value::as_array) {
        let ok = one.iter().filter(|s| passes(s)).count();
        if ok != 1 {
            let detail = format!(
                "{} in body must validate one and only one schema (oneOf)",
                name(path)
            );
            invalid(out, path, &Value::from(""), detail);
            if ok == 0 {
                for s in one {
                    out.extend(validate_at(s, v, path));
                }
            }
        }
    }
    if let Some(not) = schema.get("not") {
        if passes(not) {
            let detail = format!("{} in body must not validate the schema (not)", name(path));
            invalid(out, path, &Value::from(""), detail);
        }
    }
}

/// Validates `v` as the value at object path `path` (used for a CRD's defaults).
pub fn validate_at(schema: &Value, v: &Value, path: &str) -> Vec<FieldCause> {
    let mut out = Vec::new();
    walk(schema, v, None, path, &mut out);
    out
}

/// Defaults then validates a custom resource about to be stored; `old` is the
/// stored object on updates (ratcheting). All violations become one 422
/// Invalid Status, as kube reports them. Built-ins pass through untouched.
pub fn admit(def: &ResourceDef, obj: &mut Value, old: Option<&Value>) -> Result<(), ApiError> {
    let (true, Some(schema)) = (def.custom, def.schema.as_ref()) else {
        return Ok(());
    };
    apply_defaults(schema, obj);
    let causes = validate(schema, obj, old);
    if causes.is_empty() {
        return Ok(());
    }
    let name = obj
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    Err(ApiError::invalid(&def.group, &def.kind, name, causes))
}

/// A stored custom resource as read at `def`'s version: with that version's
/// defaults applied (kube defaults on read from etcd too, so a default added
/// to the CRD later shows up without a write).
pub fn default_on_read(def: &ResourceDef, obj: &mut Value) {
    if let (true, Some(schema)) = (def.custom, def.schema.as_ref()) {
        apply_defaults(schema, obj);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(schema: &Value, v: &Value) -> Vec<String> {
        validate(schema, v, None)
            .into_iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect()
    }

    fn schema() -> Value {
        json!({"type":"object","properties":{"spec":{"type":"object","required":["name"],"properties":{
            "name":{"type":"string","minLength":3,"maxLength":8,"pattern":"^[a-z]+$"},
            "mode":{"type":"string","enum":["a","b"]},
            "size":{"type":"integer","minimum":1,"maximum":10,"exclusiveMaximum":true},
            "ratio":{"type":"number","multipleOf":0.5},
            "tags":{"type":"array","maxItems":2,"minItems":1,"items":{"type":"string"}},
            "port":{"x-kubernetes-int-or-string":true},
            "labels":{"type":"object","maxProperties":1,"additionalProperties":{"type":"string"}},
            "when":{"type":"string","format":"date-time"},
            "opt":{"type":"string","nullable":true},
            "tmpl":{"type":"object","x-kubernetes-embedded-resource":true,"x-kubernetes-preserve-unknown-fields":true}
        }}}})
    }

    #[test]
    fn valid_object_passes() {
        let v = json!({"spec":{"name":"abcd","mode":"a","size":9,"ratio":1.5,"tags":["x"],"port":"http",
            "labels":{"a":"b"},"when":"2024-01-02T03:04:05Z","opt":null,
            "tmpl":{"apiVersion":"v1","kind":"Pod","metadata":{}}}});
        assert_eq!(messages(&schema(), &v), Vec::<String>::new());
    }

    #[test]
    fn every_violation_is_reported_in_kube_wording() {
        let v = json!({"spec":{"mode":"c","size":10,"ratio":0.3,"tags":["a","b","c"],"port":1.5,
            "labels":{"a":"b","c":"d"},"when":"yesterday","tmpl":{"kind":"Pod"}}});
        assert_eq!(
            messages(&schema(), &v),
            [
                "spec.name: Required value",
                "spec.labels: Too many: 2: must have at most 1 items",
                "spec.mode: Unsupported value: \"c\": supported values: \"a\", \"b\"",
                "spec.port: Invalid value: \"number\": spec.port in body must be of type integer,string: \"number\"",
                "spec.ratio: Invalid value: 0.3: spec.ratio in body should be a multiple of 0.5",
                "spec.size: Invalid value: 10: spec.size in body should be less than 10",
                "spec.tags: Too many: 3: must have at most 2 items",
                "spec.tmpl.apiVersion: Required value: must not be empty",
                "spec.when: Invalid value: \"yesterday\": spec.when in body must be of type date-time: \"yesterday\"",
            ]
        );
        let short = json!({"spec":{"name":"", "size":0, "tags":[]}});
        assert_eq!(
            messages(&schema(), &short),
            [
                "spec.name: Invalid value: \"\": spec.name in body should be at least 3 chars long",
                "spec.name: Invalid value: \"\": spec.name in body should match '^[a-z]+$'",
                "spec.size: Invalid value: 0: spec.size in body should be greater than or equal to 1",
                "spec.tags: Invalid value: 0: spec.tags in body should have at least 1 items",
            ]
        );
        let typed = json!({"spec":{"name":"abcdefghij","size":"3","tags":[1]}});
        assert_eq!(
            messages(&schema(), &typed),
            [
                "spec.name: Too long: may not be more than 8 bytes",
                "spec.size: Invalid value: \"string\": spec.size in body must be of type integer: \"string\"",
                "spec.tags[0]: Invalid value: \"integer\": spec.tags[0] in body must be of type string: \"integer\"",
            ]
        );
    }

    #[test]
    fn unchanged_invalid_values_ratchet_on_update() {
        let old = json!({"spec":{"name":"x"}});
        let new = json!({"spec":{"name":"x"},"other":1});
        assert!(validate(&schema(), &new, Some(&old)).is_empty());
        let changed = json!({"spec":{"name":"y"}});
        assert_eq!(validate(&schema(), &changed, Some(&old)).len(), 1);
    }

    #[test]
    fn defaults_fill_missing_and_null_fields_top_down() {
        let s = json!({"type":"object","properties":{"spec":{"type":"object","default":{},
            "properties":{"replicas":{"type":"integer","default":1},
              "mode":{"type":"string","default":"fast"},
              "keep":{"type":"string","nullable":true,"default":"x"},
              "ports":{"type":"array","items":{"type":"object","properties":{"proto":{"type":"string","default":"TCP"}}}}}}}});
        let mut v = json!({});
        apply_defaults(&s, &mut v);
        assert_eq!(v, json!({"spec":{"replicas":1,"mode":"fast","keep":"x"}}));
        let mut v = json!({"spec":{"replicas":null,"mode":"slow","keep":null,"ports":[{},{"proto":"UDP"}]}});
        apply_defaults(&s, &mut v);
        assert_eq!(
            v,
            json!({"spec":{"replicas":1,"mode":"slow","keep":null,"ports":[{"proto":"TCP"},{"proto":"UDP"}]}})
        );
    }
}
