//! What kube's decoder does to a request object before any verb logic: type
//! checks against the URL, unknown-field handling (`fieldValidation`) and
//! conversions such as Secret `stringData` -> `data`.

use crate::resources::ResourceDef;
use crate::status::ApiError;
use crate::validation;
use base64::Engine;
use serde_json::{json, Value};

/// The `fieldValidation` query parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldValidation {
    /// Accept unknown fields silently.
    Ignore,
    /// Accept, with a `Warning` header per unknown field (the default).
    Warn,
    /// Reject unknown fields with 400.
    Strict,
}

/// Checks apiVersion/kind in the body against the URL (missing ones are filled in).
pub fn check_type(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
    let Some(o) = obj.as_object_mut() else {
        return Err(ApiError::bad_request(
            "the body of the request must be a JSON object",
        ));
    };
    // kube decodes TypeMeta with Go's encoding/json first: a non-string kind or
    // apiVersion fails there (400), before any comparison with the URL.
    for field in ["kind", "apiVersion"] {
        match o.get(field) {
            None | Some(Value::Null | Value::String(_)) => {}
            Some(other) => {
                return Err(ApiError::bad_request(format!(
                    "couldn't get version/kind; json parse error: json: cannot unmarshal {} into Go struct field .{field} of type string",
                    go_json_type(other)
                )))
            }
        }
    }
    // Custom resources are stored in one version but may be written through any served one.
    match o.get("apiVersion").and_then(Value::as_str) {
        Some(av) if av != def.api_version() => {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                def.api_version()
            )))
        }
        _ => {}
    }
    match o.get("kind").and_then(Value::as_str) {
        Some(k) if k != def.kind => {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                def.kind
            )))
        }
        _ => {}
    }
    o.insert("apiVersion".into(), json!(def.api_version()));
    o.insert("kind".into(), json!(def.kind));
    check_go_types(def, obj)
}

/// The JSON type name Go's `UnmarshalTypeError` uses.
pub(crate) fn go_json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Go's base64 for `[]byte` fields: standard alphabet, padded, line breaks
/// ignored, trailing bits not checked.
const GO_BASE64: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new().with_decode_allow_trailing_bits(true),
);

/// The byte offset Go would report for an invalid base64 string.
fn base64_error_offset(s: &str) -> Option<usize> {
    let cleaned: String = s.chars().filter(|c| *c != '\r' && *c != '\n').collect();
    match GO_BASE64.decode(cleaned.as_bytes()) {
        Ok(_) => None,
        Err(base64::DecodeError::InvalidByte(at, _))
        | Err(base64::DecodeError::InvalidLastSymbol(at, _)) => Some(at),
        Err(_) => Some(cleaned.len()),
    }
}

/// Fields whose Go type is `map[string]string`, `[]string` or `map[string][]byte`
/// on the kind: a value of another JSON type fails kube's decoder with 400 (a
/// null becomes "" there, and here).
fn check_go_types(def: &ResourceDef, obj: &mut Value) -> Result<(), ApiError> {
    let cannot = |detail: String| {
        ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: {detail}",
            def.kind, def.version, def.kind
        ))
    };
    let type_err = |v: &Value, field: &str| {
        cannot(format!(
            "json: cannot unmarshal {} into Go struct field {field} of type string",
            go_json_type(v)
        ))
    };
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["labels", "annotations"] {
            string_map(
                meta.get_mut(field),
                &format!("ObjectMeta.metadata.{field}"),
                &type_err,
            )?;
        }
        match meta.get("finalizers") {
            None | Some(Value::Null) => {}
            Some(Value::Array(a)) => {
                if let Some(bad) = a.iter().find(|v| !v.is_string()) {
                    return Err(type_err(bad, "ObjectMeta.metadata.finalizers"));
                }
            }
            Some(other) => {
                return Err(cannot(format!(
                    "json: cannot unmarshal {} into Go struct field ObjectMeta.metadata.finalizers of type []string",
                    go_json_type(other)
                )))
            }
        }
    }
    if !def.group.is_empty() {
        return Ok(());
    }
    let (strings, bytes): (&[&str], &[&str]) = match def.plural.as_str() {
        "configmaps" => (&["data"], &["binaryData"]),
        "secrets" => (&["stringData"], &["data"]),
        _ => return Ok(()),
    };
    let Some(o) = obj.as_object_mut() else {
        return Ok(());
    };
    for field in strings {
        string_map(
            o.get_mut(*field),
            &format!("{}.{field}", def.kind),
            &type_err,
        )?;
    }
    for field in bytes {
        string_map(
            o.get_mut(*field),
            &format!("{}.{field}", def.kind),
            &type_err,
        )?;
        if let Some(m) = o.get(*field).and_then(Value::as_object) {
            for v in m.values().filter_map(Value::as_str) {
                if let Some(at) = base64_error_offset(v) {
                    return Err(cannot(format!("illegal base64 data at input byte {at}")));
                }
            }
        }
    }
    Ok(())
}

/// Checks a `map[string]string` field: an object whose values are strings (nulls
/// become ""), or null.
fn string_map(
    v: Option<&mut Value>,
    go_field: &str,
    type_err: &dyn Fn(&Value, &str) -> ApiError,
) -> Result<(), ApiError> {
    match v {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(m)) => {
            for v in m.values_mut() {
                match v {
                    Value::String(_) => {}
                    Value::Null => *v = json!(""),
                    other => return Err(type_err(other, go_field)),
                }
            }
            Ok(())
        }
        Some(other) => Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go struct field {go_field} of type map[string]string",
            go_json_type(other)
        ))),
    }
}

/// Runs unknown-field validation per `fieldValidation`; returns warnings. Unknown
/// fields are never stored (kube drops them when decoding / pruning).
pub fn check_fields(
    def: &ResourceDef,
    obj: &mut Value,
    v: FieldValidation,
) -> Result<Vec<String>, ApiError> {
    let unknown = validation::unknown_fields(def, obj);
    if unknown.is_empty() {
        return Ok(Vec::new());
    }
    let msgs: Vec<String> = unknown
        .iter()
        .map(|f| format!("unknown field \"{f}\""))
        .collect();
    if v == FieldValidation::Strict {
        return Err(ApiError::bad_request(format!(
            "{} in version \"{}\" cannot be handled as a {}: strict decoding error: {}",
            def.kind,
            def.api_version(),
            def.kind,
            msgs.join(", ")
        )));
    }
    for path in &unknown {
        prune(obj, path);
    }
    Ok(if v == FieldValidation::Warn {
        msgs
    } else {
        Vec::new()
    })
}

/// Splits `spec.containers[0].foo` into ["spec", "containers", "[0]", "foo"].
fn path_segments(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in path.split('.') {
        let mut rest = part;
        while let Some(i) = rest.find('[') {
            if i > 0 {
                out.push(rest[..i].to_string());
            }
            match rest[i..].find(']') {
                Some(j) => {
                    out.push(rest[i..i + j + 1].to_string());
                    rest = &rest[i + j + 1..];
                }
                None => {
                    out.push(rest[i..].to_string());
                    rest = "";
                }
            }
        }
        if !rest.is_empty() {
            out.push(rest.to_string());
        }
    }
    out
}

/// Removes the field at `path` (as reported by `validation::unknown_fields`), if present.
fn prune(obj: &mut Value, path: &str) {
    let segs = path_segments(path);
    let Some((last, parents)) = segs.split_last() else {
        return;
    };
    let mut cur = obj;
    for s in parents {
        let next = match s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            Some(i) => i.parse::<usize>().ok().and_then(|i| cur.get_mut(i)),
            None => cur.get_mut(s.as_str()),
        };
        match next {
            Some(n) => cur = n,
            None => return,
        }
    }
    if let Some(o) = cur.as_object_mut() {
        o.remove(last.as_str());
    }
}

/// Server-side conversions kube applies on every write (Secret stringData -> data, and
/// the `type` default, which kube's decoder sets on updates too: a PUT without `type`
/// means `Opaque`, and is refused as a type change for a Secret of another type), and
/// the Service defaults (`service::set_defaults`).
pub fn normalize(def: &ResourceDef, obj: &mut Value) {
    if def.group.is_empty() && def.plural == "services" {
        crate::service::set_defaults(obj);
        return;
    }
    if !(def.group.is_empty() && def.plural == "secrets") {
        return;
    }
    let Some(o) = obj.as_object_mut() else { return };
    if o.get("type").is_none_or(|t| t.as_str() == Some("")) {
        o.insert("type".into(), Value::String("Opaque".into()));
    }
    let Some(Value::Object(string_data)) = o.remove("stringData") else {
        return;
    };
    let data = o.entry("data").or_insert_with(|| json!({}));
    if !data.is_object() {
        *data = json!({});
    }
    if let Some(d) = data.as_object_mut() {
        for (k, v) in string_data {
            if let Some(s) = v.as_str() {
                d.insert(
                    k,
                    json!(base64::engine::general_purpose::STANDARD.encode(s)),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prunes_reported_paths() {
        let mut v = json!({"a": 1, "spec": {"containers": [{"name": "x", "foo": 1}], "bar": 2}});
        prune(&mut v, "spec.containers[0].foo");
        prune(&mut v, "spec.bar");
        prune(&mut v, "a");
        prune(&mut v, "spec.missing[3].x");
        assert_eq!(v, json!({"spec": {"containers": [{"name": "x"}]}}));
        assert_eq!(
            path_segments("a.b[1][2].c"),
            vec!["a", "b", "[1]", "[2]", "c"]
        );
    }
}
