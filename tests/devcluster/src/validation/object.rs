//! kube-apiserver's object validation that answers 422: ObjectMeta (label and
//! annotation keys, label values, the total annotation size, finalizer names;
//! apimachinery `validation.ValidateObjectMeta`) and the data of ConfigMaps and
//! Secrets (`pkg/apis/core/validation`). Type errors a Go decoder would refuse
//! (400) are in [`crate::decode`].

use crate::names;
use crate::resources::ResourceDef;
use crate::status::FieldCause;
use serde_json::{Map, Value};

/// apimachinery `TotalAnnotationSizeLimitB`: keys plus values, in bytes.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// core `MaxSecretSize`: the total of a ConfigMap's or Secret's data, in bytes.
pub const MAX_DATA_SIZE: usize = 1024 * 1024;

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_MSG: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const CONFIG_MAP_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')";

fn qualified_name_regex_error() -> String {
    format!("{QUALIFIED_NAME_MSG} (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '{QUALIFIED_NAME_FMT}')")
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

/// apimachinery `IsQualifiedName`: `[prefix/]name`, prefix a DNS-1123 subdomain,
/// name at most 63 characters. Every problem found, in kube's order.
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else if let Err(msg) = names::validate(names::NameRule::Subdomain, prefix) {
                errs.push(format!("prefix part {msg}"));
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                qualified_name_regex_error()
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push("name part must be no more than 63 characters".to_string());
    }
    if !is_qualified_name_part(name) {
        errs.push(format!("name part {}", qualified_name_regex_error()));
    }
    errs
}

/// core `IsConfigMapKey` (also used for Secret keys).
pub fn config_map_key_errors(key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if key.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    let charset_ok = !key.is_empty()
        && key
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_'));
    if !charset_ok {
        errs.push(CONFIG_MAP_KEY_MSG.to_string());
    }
    if key == "." {
        errs.push("must not be '.'".to_string());
    } else if key == ".." {
        errs.push("must not be '..'".to_string());
    } else if key.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

fn invalid(field: impl Into<String>, value: &str, msg: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueInvalid",
        field: field.into(),
        message: format!("Invalid value: {}: {msg}", Value::String(value.to_string())),
    }
}

fn too_long(field: impl Into<String>, max: usize) -> FieldCause {
    FieldCause {
        reason: "FieldValueTooLong",
        field: field.into(),
        message: format!("Too long: may not be more than {max} bytes"),
    }
}

fn string_map<'a>(obj: &'a Value, path: &[&str]) -> Option<&'a Map<String, Value>> {
    let mut cur = obj;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_object()
}

/// Labels, annotations and finalizers (ObjectMeta), as `ValidateObjectMeta`.
pub fn metadata_causes(obj: &Value) -> Vec<FieldCause> {
    let mut out = Vec::new();
    if let Some(labels) = string_map(obj, &["metadata", "labels"]) {
        for (k, v) in labels {
            for msg in qualified_name_errors(k) {
                out.push(invalid("metadata.labels", k, &msg));
            }
            if let Some(v) = v.as_str() {
                if let Err(msg) = names::validate_label_value(v) {
                    out.push(invalid("metadata.labels", v, &msg));
                }
            }
        }
    }
    if let Some(annotations) = string_map(obj, &["metadata", "annotations"]) {
        let mut total = 0usize;
        for (k, v) in annotations {
            // kube: "QualifiedName except that case doesn't matter".
            for msg in qualified_name_errors(&k.to_ascii_lowercase()) {
                out.push(invalid("metadata.annotations", k, &msg));
            }
            total += k.len() + v.as_str().map_or(0, str::len);
        }
        if total > TOTAL_ANNOTATION_SIZE_LIMIT {
            out.push(too_long(
                "metadata.annotations",
                TOTAL_ANNOTATION_SIZE_LIMIT,
            ));
        }
    }
    out.extend(owner_reference_causes(obj));
    if let Some(finalizers) = obj
        .get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
    {
        for f in finalizers.iter().filter_map(Value::as_str) {
            for msg in qualified_name_errors(f) {
                out.push(invalid("metadata.finalizers", f, &msg));
            }
        }
    }
    out
}

/// apimachinery `ValidateOwnerReferences`: apiVersion (with a version), kind,
/// name and uid are required, and at most one reference is the controller.
/// kube reports these on `metadata.ownerReferences.<field>`, without an index.
fn owner_reference_causes(obj: &Value) -> Vec<FieldCause> {
    let mut out = Vec::new();
    let Some(refs) = obj
        .get("metadata")
        .and_then(|m| m.get("ownerReferences"))
        .and_then(Value::as_array)
    else {
        return out;
    };
    let s = |r: &Value, k: &str| r.get(k).and_then(Value::as_str).unwrap_or("").to_string();
    let mut controllers = Vec::new();
    for r in refs {
        let api_version = s(r, "apiVersion");
        let version = api_version.rsplit('/').next().unwrap_or("");
        if version.is_empty() {
            out.push(invalid(
                "metadata.ownerReferences.apiVersion",
                &api_version,
                "version must not be empty",
            ));
        }
        for field in ["kind", "name", "uid"] {
            let v = s(r, field);
            if v.is_empty() {
                out.push(invalid(
                    format!("metadata.ownerReferences.{field}"),
                    &v,
                    "must not be empty",
                ));
            }
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            controllers.push(format!("{}/{}", s(r, "kind"), s(r, "name")));
        }
    }
    if controllers.len() > 1 {
        out.push(FieldCause {
            reason: "FieldValueInvalid",
            field: "metadata.ownerReferences".into(),
            message: format!(
                "Invalid value: []v1.OwnerReference{{...}}: Only one reference can have Controller set to true. Found \"true\" in references for {}",
                controllers.join(" and ")
            ),
        });
    }
    out
}

fn forbidden(field: &str, msg: &str) -> FieldCause {
    FieldCause {
        reason: "FieldValueForbidden",
        field: field.into(),
        message: format!("Forbidden: {msg}"),
    }
}

/// What core `ValidateConfigMapUpdate` / `ValidateSecretUpdate` add on updates (every
/// write path that replaces a stored object: PUT, each patch type, apply): a Secret's
/// `type` never changes (`ValidateImmutableField`), and once the stored object has
/// `immutable: true`, neither `immutable` nor the data bags (ConfigMap `data` and
/// `binaryData`, Secret `data`, into which `stringData` was already merged) may change.
/// An absent bag and an empty one compare equal (kube compares Go maps, where the stored
/// side reads back empty bags as nil).
pub fn update_causes(def: &ResourceDef, old: &Value, new: &Value) -> Vec<FieldCause> {
    const IMMUTABLE: &str = "field is immutable when `immutable` is set";
    let mut out = Vec::new();
    if !def.group.is_empty() {
        return out;
    }
    let bags: &[&str] = match def.plural.as_str() {
        "configmaps" => &["data", "binaryData"],
        "secrets" => &["data"],
        _ => return out,
    };
    if def.plural == "secrets" && old.get("type") != new.get("type") {
        let new_type = new.get("type").and_then(Value::as_str).unwrap_or("");
        out.push(invalid("type", new_type, "field is immutable"));
    }
    if old.get("immutable") == Some(&Value::Bool(true)) {
        if new.get("immutable") != Some(&Value::Bool(true)) {
            out.push(forbidden("immutable", IMMUTABLE));
        }
        let empty = Map::new();
        for bag in bags {
            let bag_of = |o: &'_ Value| -> Map<String, Value> {
                string_map(o, &[bag]).unwrap_or(&empty).clone()
            };
            if bag_of(old) != bag_of(new) {
                out.push(forbidden(bag, IMMUTABLE));
            }
        }
    }
    out
}

/// ConfigMap `data`/`binaryData` and Secret `data` keys and total size.
pub fn data_causes(def: &ResourceDef, obj: &Value) -> Vec<FieldCause> {
    let mut out = Vec::new();
    if !def.group.is_empty() {
        return out;
    }
    let bags: &[&str] = match def.plural.as_str() {
        "configmaps" => &["data", "binaryData"],
        "secrets" => &["data"],
        _ => return out,
    };
    let mut total = 0usize;
    for bag in bags {
        let Some(map) = string_map(obj, &[bag]) else {
            continue;
        };
        for (k, v) in map {
            for msg in config_map_key_errors(k) {
                out.push(invalid(format!("{bag}[{k}]"), k, &msg));
            }
            if *bag == "data"
                && def.plural == "configmaps"
                && string_map(obj, &["binaryData"]).is_some_and(|b| b.contains_key(k))
            {
                out.push(invalid(
                    format!("data[{k}]"),
                    k,
                    "duplicate of key present in binaryData",
                ));
            }
            // Base64 in JSON; the size kube counts is the decoded one for binary
            // data, an upper bound is fine for a limit this coarse.
            total += match (*bag, v.as_str()) {
                ("data", Some(s)) if def.plural == "configmaps" => s.len(),
                (_, Some(s)) => s.len() / 4 * 3,
                _ => 0,
            };
        }
    }
    if total > MAX_DATA_SIZE {
        let field = if def.plural == "secrets" { "data" } else { "" };
        out.push(too_long(field, MAX_DATA_SIZE));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;
    use serde_json::json;

    fn def(plural: &str) -> ResourceDef {
        builtins().into_iter().find(|d| d.plural == plural).unwrap()
    }

    #[test]
    fn qualified_names() {
        for ok in [
            "a",
            "app.kubernetes.io/name",
            "A_b.c-1",
            "example.com/MyName",
        ] {
            assert!(qualified_name_errors(ok).is_empty(), "{ok}");
        }
        assert_eq!(qualified_name_errors("").len(), 2);
        assert_eq!(
            qualified_name_errors("/a"),
            ["prefix part must be non-empty"]
        );
        assert!(qualified_name_errors("a b")[0].starts_with("name part must consist"));
        assert!(qualified_name_errors("-a")[0].starts_with("name part must consist"));
        assert!(qualified_name_errors("a!")[0].starts_with("name part must consist"));
        assert_eq!(
            qualified_name_errors(&"a".repeat(64)),
            ["name part must be no more than 63 characters"]
        );
        assert!(qualified_name_errors("a/b/c")[0].starts_with("a qualified name must consist"));
        assert!(
            qualified_name_errors("Upper.com/a")[0].starts_with("prefix part a lowercase RFC 1123")
        );
    }

    #[test]
    fn owner_references() {
        let ok = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u", "controller": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "v"}]}});
        assert!(metadata_causes(&ok).is_empty());
        let bad = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/", "kind": "", "name": "d", "uid": "", "controller": true},
            {"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "v", "controller": true}]}});
        let fields: Vec<String> = metadata_causes(&bad).into_iter().map(|c| c.field).collect();
        assert_eq!(
            fields,
            [
                "metadata.ownerReferences.apiVersion",
                "metadata.ownerReferences.kind",
                "metadata.ownerReferences.uid",
                "metadata.ownerReferences"
            ]
        );
    }

    #[test]
    fn config_map_keys() {
        for ok in ["a", "key.name", "KEY_NAME", "key-name", ".hidden"] {
            assert!(config_map_key_errors(ok).is_empty(), "{ok}");
        }
        for bad in ["", "a b", "a/b", ".", "..", "..a"] {
            assert!(!config_map_key_errors(bad).is_empty(), "{bad:?}");
        }
    }

    #[test]
    fn immutable_config_maps_and_secrets() {
        let cm = def("configmaps");
        let old = json!({"immutable": true, "data": {"a": "1"}});
        assert!(update_causes(&cm, &old, &old).is_empty());
        // Labels may change; an absent bag equals an empty one.
        let empty = json!({"immutable": true, "binaryData": {}, "data": {"a": "1"}});
        assert!(update_causes(&cm, &old, &empty).is_empty());
        let changed = json!({"immutable": false, "data": {"a": "2"}, "binaryData": {"b": "eA=="}});
        let causes = update_causes(&cm, &old, &changed);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["immutable", "data", "binaryData"]);
        assert!(causes.iter().all(|c| c.reason == "FieldValueForbidden"
            && c.message == "Forbidden: field is immutable when `immutable` is set"));
        // Dropping the flag is the same as setting it false.
        let dropped = json!({"data": {"a": "1"}});
        assert_eq!(update_causes(&cm, &old, &dropped)[0].field, "immutable");
        // A mutable object may become immutable, with new data in the same write.
        let mutable = json!({"data": {"a": "1"}});
        assert!(update_causes(&cm, &mutable, &changed).is_empty());
        assert!(update_causes(&cm, &mutable, &json!({"immutable": true, "data": {}})).is_empty());

        let secret = def("secrets");
        let old = json!({"type": "Opaque", "immutable": true, "data": {"a": "eA=="}});
        let causes = update_causes(
            &secret,
            &old,
            &json!({"type": "kubernetes.io/tls", "immutable": true, "data": {"a": "eQ=="}}),
        );
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(fields, ["type", "data"]);
        assert_eq!(
            causes[0].message,
            "Invalid value: \"kubernetes.io/tls\": field is immutable"
        );
        // Other kinds are not concerned, whatever their fields.
        assert!(update_causes(&def("serviceaccounts"), &old, &json!({})).is_empty());
    }

    #[test]
    fn metadata_and_data() {
        let cm = json!({"metadata": {"name": "x", "labels": {"a b": "ok", "k": "-bad"},
            "annotations": {"Fine/Upper": "", "": "v"}, "finalizers": ["ok.io/f", "bad f"]},
            "data": {"k": "v", "a/b": "v", "dup": "x"}, "binaryData": {"dup": "eA=="}});
        let fields: Vec<String> = metadata_causes(&cm).into_iter().map(|c| c.field).collect();
        assert_eq!(
            fields,
            [
                "metadata.labels",
                "metadata.labels",
                "metadata.annotations",
                "metadata.annotations",
                "metadata.finalizers"
            ]
        );
        let data: Vec<String> = data_causes(&def("configmaps"), &cm)
            .into_iter()
            .map(|c| c.field)
            .collect();
        assert_eq!(data, ["data[a/b]", "data[dup]"]);
        let big =
            json!({"metadata": {"annotations": {"a": "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT)}}});
        let causes = metadata_causes(&big);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].reason, "FieldValueTooLong");
    }
}
