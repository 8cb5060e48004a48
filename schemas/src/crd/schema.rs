//! Hand-written schema fragments for fields schemars cannot describe structurally.

use schemars::{json_schema, Schema, SchemaGenerator};

/// Any JSON value (scalar, list or object), kept verbatim by the API server.
pub(crate) fn any_json_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// A JSON object with arbitrary content, kept verbatim by the API server.
#[allow(dead_code)] // for Bundle manifests; ReportedState's status no longer uses it
pub(crate) fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// A list of JSON objects with arbitrary content.
pub(crate) fn free_form_object_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true }
    })
}

/// Standard `conditions` lists: a list-map keyed by `type`, so server-side apply merges
/// conditions by type (as for built-in kinds).
pub(crate) fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let mut schema =
        generator.subschema_for::<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}
