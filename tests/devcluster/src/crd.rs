//! CustomResourceDefinitions: validation, served resources and the status the server sets.

use crate::resources::{ResourceDef, Subresources};
use crate::status::{ApiError, FieldCause};
use serde_json::{json, Value};

/// The servable view of one CRD.
#[derive(Debug, Clone, PartialEq)]
pub struct CrdEntry {
    /// One def per served version, in the CRD's order.
    pub defs: Vec<ResourceDef>,
    /// The version objects are stored in.
    pub storage_version: String,
    /// additionalPrinterColumns per version name.
    pub columns: Vec<(String, Vec<Value>)>,
}

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(*p)?;
    }
    cur.as_str()
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn invalid(name: &str, field: &str, msg: &str) -> ApiError {
    ApiError::invalid(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        name,
        vec![FieldCause {
            reason: "FieldValueRequired",
            field: field.into(),
            message: msg.into(),
        }],
    )
}

/// Structural-schema violations of every version's schema, as one 422. On
/// update (`old`), a CRD whose stored schemas already were not structural is
/// let through, as kube lets such legacy CRDs be edited.
pub fn check_structural(crd: &Value, old: Option<&Value>) -> Result<(), ApiError> {
    let causes_of = |c: &Value| -> Vec<FieldCause> {
        let versions = c
            .get("spec")
            .and_then(|sp| sp.get("versions"))
            .and_then(Value::as_array);
        versions
            .into_iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, v)| {
                let schema = v.get("schema")?.get("openAPIV3Schema")?;
                let path = format!("spec.versions[{i}].schema.openAPIV3Schema");
                Some(crate::validation::crd_structural::check(schema, &path))
            })
            .flatten()
            .collect()
    };
    if old.is_some_and(|o| !causes_of(o).is_empty()) {
        return Ok(());
    }
    let causes = causes_of(crd);
    if causes.is_empty() {
        return Ok(());
    }
    let name = s(crd, &["metadata", "name"]).unwrap_or("");
    Err(ApiError::invalid(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        name,
        causes,
    ))
}

/// Validates a CRD object and derives its served resources.
pub fn entry_from_crd(crd: &Value) -> Result<CrdEntry, ApiError> {
    let name = s(crd, &["metadata", "name"]).unwrap_or("");
    let group =
        s(crd, &["spec", "group"]).ok_or_else(|| invalid(name, "spec.group", "Required value"))?;
    let plural = s(crd, &["spec", "names", "plural"])
        .ok_or_else(|| invalid(name, "spec.names.plural", "Required value"))?;
    let kind = s(crd, &["spec", "names", "kind"])
        .ok_or_else(|| invalid(name, "spec.names.kind", "Required value"))?;
    if name != format!("{plural}.{group}") {
        return Err(ApiError::invalid(
            "apiextensions.k8s.io",
            "CustomResourceDefinition",
            name,
            vec![FieldCause {
                reason: "FieldValueInvalid",
                field: "metadata.name".into(),
                message: format!(
                    "Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
                ),
            }],
        ));
    }
    let singular = s(crd, &["spec", "names", "singular"])
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_ascii_lowercase());
    let list_kind = s(crd, &["spec", "names", "listKind"])
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    let namespaced = match s(crd, &["spec", "scope"]) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => {
            return Err(invalid(
                name,
                "spec.scope",
                "Unsupported value: must be Namespaced or Cluster",
            ))
        }
    };
    let names = crd.get("spec").and_then(|sp| sp.get("names"));
    let short_names = str_list(names.and_then(|n| n.get("shortNames")));
    let categories = str_list(names.and_then(|n| n.get("categories")));
    let versions = crd
        .get("spec")
        .and_then(|sp| sp.get("versions"))
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or_else(|| {
            invalid(
                name,
                "spec.versions",
                "Required value: must have at least one version",
            )
        })?;
    let storage: Vec<&Value> = versions
        .iter()
        .filter(|v| v.get("storage") == Some(&Value::Bool(true)))
        .collect();
    if storage.len() != 1 {
        return Err(invalid(
            name,
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version",
        ));
    }
    let storage_version = s(storage[0], &["name"]).unwrap_or("").to_string();
    let mut defs = Vec::new();
    let mut columns = Vec::new();
    for v in versions {
        let vname = s(v, &["name"])
            .ok_or_else(|| invalid(name, "spec.versions[].name", "Required value"))?;
        if v.get("served") != Some(&Value::Bool(true)) {
            continue;
        }
        let subs = v.get("subresources");
        defs.push(ResourceDef {
            group: group.to_string(),
            version: vname.to_string(),
            kind: kind.to_string(),
            list_kind: list_kind.clone(),
            plural: plural.to_string(),
            singular: singular.clone(),
            namespaced,
            short_names: short_names.clone(),
            categories: categories.clone(),
            subresources: Subresources {
                status: subs.and_then(|x| x.get("status")).is_some(),
                scale: subs.and_then(|x| x.get("scale")).is_some(),
                token: false,
            },
            schema: v
                .get("schema")
                .and_then(|x| x.get("openAPIV3Schema"))
                .cloned(),
            custom: true,
        });
        if let Some(cols) = v.get("additionalPrinterColumns").and_then(Value::as_array) {
            // kube-apiserver rejects a CRD whose column paths do not parse, rather
            // than serving a table with a silently empty column.
            for (i, col) in cols.iter().enumerate() {
                let path = s(col, &["jsonPath"]).unwrap_or("");
                if let Err(e) = crate::jsonpath::JsonPath::parse(path) {
                    return Err(invalid(
                        name,
                        &format!("spec.versions[{vname}].additionalPrinterColumns[{i}].jsonPath"),
                        &format!("Invalid value: \"{path}\": {e}"),
                    ));
                }
            }
            columns.push((vname.to_string(), cols.clone()));
        }
    }
    Ok(CrdEntry {
        defs,
        storage_version,
        columns,
    })
}

/// The status kube-apiserver's CRD controllers converge to: names accepted, established.
pub fn accepted_status(crd: &Value, entry: &CrdEntry, now: &str) -> Value {
    let names = crd
        .get("spec")
        .and_then(|sp| sp.get("names"))
        .cloned()
        .unwrap_or(json!({}));
    let mut accepted = names;
    if let (Some(o), Some(d)) = (accepted.as_object_mut(), entry.defs.first()) {
        o.insert("singular".into(), json!(d.singular));
        o.insert("listKind".into(), json!(d.list_kind));
    }
    let old_conditions = crd
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array);
    // Keep the original transition times so re-applying an unchanged CRD is a no-op.
    let time_of = |t: &str| {
        old_conditions
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
            })
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(now))
    };
    let mut stored = str_list(crd.get("status").and_then(|s| s.get("storedVersions")));
    if !stored.contains(&entry.storage_version) {
        stored.push(entry.storage_version.clone());
    }
    json!({
        "conditions": [
            {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts",
             "message": "no conflicts found", "lastTransitionTime": time_of("NamesAccepted")},
            {"type": "Established", "status": "True", "reason": "InitialNamesAccepted",
             "message": "the initial names have been accepted", "lastTransitionTime": time_of("Established")},
        ],
        "acceptedNames": accepted,
        "storedVersions": stored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.x.io"},
            "spec": {"group": "x.io", "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                "versions": [
                    {"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                     "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]},
                    {"name": "v2", "served": true, "storage": false},
                    {"name": "v0", "served": false, "storage": false}]}
        })
    }

    #[test]
    fn derives_served_versions() {
        let e = entry_from_crd(&crd()).unwrap();
        assert_eq!(e.defs.len(), 2);
        assert_eq!(e.storage_version, "v1");
        assert!(e.defs[0].subresources.status);
        assert!(!e.defs[1].subresources.status);
        assert_eq!(e.defs[0].list_kind, "WidgetList");
        assert_eq!(e.defs[0].singular, "widget");
        assert_eq!(e.columns.len(), 1);
        let st = accepted_status(&crd(), &e, "2026-01-01T00:00:00Z");
        assert_eq!(st["conditions"][1]["type"], "Established");
        assert_eq!(st["acceptedNames"]["kind"], "Widget");
    }

    #[test]
    fn rejects_printer_column_path_that_does_not_parse() {
        let mut c = crd();
        c["spec"]["versions"][0]["additionalPrinterColumns"][0]["jsonPath"] =
            json!(".status.conditions[?(@.type==");
        let e = entry_from_crd(&c).unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
    }

    #[test]
    fn rejects_bad_name() {
        let mut c = crd();
        c["metadata"]["name"] = json!("wrong");
        assert_eq!(entry_from_crd(&c).unwrap_err().code, 422);
    }
}
