//! The committed CRD YAML under deploy/crds must equal what the Rust types generate,
//! and every generated schema must be structural (accepted by a real API server).
//!
//! Regenerate with: `FLEETBUS_BLESS=1 cargo test -p fleetbus-schemas --test crd_yaml`

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use std::path::PathBuf;

use fleetbus_schemas::all_crds;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use serde_json::Value;

/// Every place the generated CRDs are committed: `deploy/crds` and the helm
/// chart's `crds/` (helm installs them from there; a copy, because helm does not
/// package symlinks portably). Blessing writes both, so they cannot drift.
fn crd_dirs() -> [PathBuf; 2] {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    [
        root.join("deploy/crds"),
        root.join("deploy/helm/fleetbus-agent/crds"),
    ]
}

fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap())
}

fn render(crd: &CustomResourceDefinition) -> String {
    format!(
        "# Generated from fleetbus-schemas; do not edit.\n# Regenerate: FLEETBUS_BLESS=1 cargo test -p fleetbus-schemas --test crd_yaml\n{}",
        fleetbus_schemas::yaml::to_string(crd).unwrap()
    )
}

#[test]
fn crd_yaml_matches_committed_files() {
    let bless = std::env::var_os("FLEETBUS_BLESS").is_some();
    let mut stale = Vec::new();
    for dir in crd_dirs() {
        for crd in all_crds() {
            let path = dir.join(file_name(&crd));
            let want = render(&crd);
            if bless {
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(&path, &want).unwrap();
                continue;
            }
            let have = std::fs::read_to_string(&path).unwrap_or_default();
            if have != want {
                stale.push(path.display().to_string());
            }
        }
    }
    assert!(
        stale.is_empty(),
        "CRD YAML out of date: {stale:?}\nRegenerate with: FLEETBUS_BLESS=1 cargo test -p fleetbus-schemas --test crd_yaml"
    );
}

#[test]
fn crds_have_expected_names_scope_and_status() {
    let crds = all_crds();
    let names: Vec<_> = crds
        .iter()
        .map(|c| {
            (
                c.metadata.name.clone().unwrap(),
                c.spec.scope.clone(),
                c.spec.names.short_names.clone().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        names,
        vec![
            (
                "clusters.fleetbus.io".to_string(),
                "Cluster".to_string(),
                vec!["fbc".to_string()]
            ),
            (
                "clusterfeatures.fleetbus.io".into(),
                "Cluster".into(),
                vec!["cf".into()]
            ),
            (
                "resourcesyncrules.fleetbus.io".into(),
                "Cluster".into(),
                vec!["rsr".into()]
            ),
            ("bundles.fleetbus.io".into(), "Namespaced".into(), vec![]),
            (
                "reportedstates.fleetbus.io".into(),
                "Namespaced".into(),
                vec![]
            ),
            (
                "syncpolicies.fleetbus.io".into(),
                "Cluster".into(),
                vec!["sp".into()]
            ),
        ]
    );
    for crd in &crds {
        assert_eq!(crd.spec.group, "fleetbus.io");
        assert_eq!(crd.spec.versions.len(), 1);
        let v = &crd.spec.versions[0];
        assert_eq!(v.name, "v1alpha1");
        assert!(v.served && v.storage);
        assert!(
            v.subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{} lacks the status subresource",
            crd.spec.names.kind
        );
    }
    let cluster_columns: Vec<_> = crds[0].spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| (c.name.as_str(), c.priority.unwrap_or(0)))
        .collect();
    assert_eq!(
        cluster_columns,
        [
            ("Type", 0),
            ("State", 0),
            ("Synced", 0),
            ("Version", 0),
            ("Region", 0),
            ("Age", 0),
            ("ID", 1),
            ("Provider", 1),
            ("Distribution", 1),
            ("Heartbeat", 1),
            ("Agent", 1)
        ]
    );
}

#[test]
fn schemas_are_structural() {
    for crd in all_crds() {
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .and_then(|s| s.open_api_v3_schema.as_ref())
            .unwrap();
        let value = serde_json::to_value(schema).unwrap();
        let mut problems = Vec::new();
        check_structural(&value, &crd.spec.names.kind, false, &mut problems);
        assert!(problems.is_empty(), "non-structural schema: {problems:#?}");
    }
}

#[test]
fn conditions_are_list_maps_keyed_by_type() {
    for crd in all_crds()
        .iter()
        .filter(|c| c.spec.names.kind != "ReportedState")
    {
        let v = serde_json::to_value(crd).unwrap();
        let conditions = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
            ["status"]["properties"]["conditions"];
        assert_eq!(
            conditions["x-kubernetes-list-type"], "map",
            "{}",
            crd.spec.names.kind
        );
        assert_eq!(
            conditions["x-kubernetes-list-map-keys"],
            serde_json::json!(["type"])
        );
        assert!(conditions["items"]["required"]
            .as_array()
            .unwrap()
            .contains(&"type".into()));
    }
}

#[test]
fn rule_defaults_are_in_schema() {
    let crd = &all_crds()[2];
    let v = serde_json::to_value(crd).unwrap();
    let spec = &v["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let props = &spec["properties"];
    assert_eq!(props["orphanPolicy"]["default"], "Delete");
    assert_eq!(props["updatePolicy"]["default"], "Update");
    assert_eq!(props["statusReturn"]["default"], "None");
    assert_eq!(props["drift"]["properties"]["mode"]["default"], "Correct");
    assert_eq!(spec["required"], serde_json::json!(["groupVersionKind"]));
    assert!(props["groupVersionKind"]["description"]
        .as_str()
        .unwrap()
        .contains("kind"));
}

/// The structural-schema rules of apiextensions v1 that generated schemas can break
/// (k8s.io/apiextensions-apiserver/pkg/apiserver/schema/validation.go).
fn check_structural(node: &Value, path: &str, in_junctor: bool, problems: &mut Vec<String>) {
    let Some(obj) = node.as_object() else {
        problems.push(format!("{path}: schema is not an object"));
        return;
    };
    for forbidden in ["$ref", "$schema", "definitions", "$defs", "const"] {
        if obj.contains_key(forbidden) {
            problems.push(format!("{path}: has {forbidden}"));
        }
    }
    let preserve = obj.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(true));
    let int_or_string = obj.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if in_junctor {
        for key in [
            "type",
            "description",
            "default",
            "nullable",
            "additionalProperties",
        ] {
            if obj.contains_key(key) {
                problems.push(format!("{path}: {key} inside anyOf/oneOf/allOf/not"));
            }
        }
    } else if !obj.contains_key("type") && !preserve && !int_or_string {
        problems.push(format!("{path}: missing type"));
    }
    if obj.contains_key("properties") && obj.contains_key("additionalProperties") {
        problems.push(format!("{path}: both properties and additionalProperties"));
    }
    if obj.get("type") == Some(&Value::String("array".into())) && !obj.contains_key("items") {
        problems.push(format!("{path}: array without items"));
    }
    if let Some(props) = obj.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            check_structural(v, &format!("{path}.{k}"), in_junctor, problems);
        }
    }
    if let Some(items) = obj.get("items") {
        check_structural(items, &format!("{path}[]"), in_junctor, problems);
    }
    if let Some(ap) = obj.get("additionalProperties") {
        if ap.is_object() {
            check_structural(ap, &format!("{path}{{}}"), in_junctor, problems);
        }
    }
    for junctor in ["anyOf", "oneOf", "allOf"] {
        if let Some(branches) = obj.get(junctor).and_then(Value::as_array) {
            for (i, b) in branches.iter().enumerate() {
                check_structural(b, &format!("{path}.{junctor}[{i}]"), true, problems);
            }
        }
    }
    if let Some(not) = obj.get("not") {
        check_structural(not, &format!("{path}.not"), true, problems);
    }
}
