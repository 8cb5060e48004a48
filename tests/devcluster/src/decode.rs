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
    Ok(())
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

/// Server-side conversions kube applies on every write (Secret stringData -> data).
pub fn normalize(def: &ResourceDef, obj: &mut Value) {
    if !(def.group.is_empty() && def.plural == "secrets") {
        return;
    }
    let Some(o) = obj.as_object_mut() else { return };
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
