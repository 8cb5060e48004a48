//! The `ReportedState` resource (sketch): the status of a copy, reported back to its origin.

use std::borrow::Cow;

use kube_derive::CustomResource;
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::{Deserialize, Serialize};

use super::schema::free_form_object;
use crate::object_ref::ObjectRef;

/// The status of one synced object on one sink cluster, written on the origin cluster
/// when the rule's `statusReturn` asks for it.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleetbus.io",
    version = "v1alpha1",
    kind = "ReportedState",
    plural = "reportedstates",
    namespaced,
    status = "ReportedStateStatus",
    derive = "PartialEq",
    derive = "Default",
    crates(kube_core = "::kube_core"),
    doc = "Status of a synced object on a sink cluster, reported to its origin (sketch).",
    printcolumn(name = "Cluster", type_ = "string", json_path = ".spec.cluster"),
    printcolumn(name = "Kind", type_ = "string", json_path = ".spec.objectRef.kind"),
    printcolumn(name = "Object", type_ = "string", json_path = ".spec.objectRef.name"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ReportedStateSpec {
    /// The object on the origin cluster whose copy this status belongs to.
    pub object_ref: ObjectRef,
    /// Name of the sink cluster the status was read on (empty for `Singleton`).
    #[serde(default)]
    pub cluster: String,
}

/// The copied object's `.status`, verbatim.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(transparent)]
pub struct ReportedStateStatus(pub serde_json::Map<String, serde_json::Value>);

impl JsonSchema for ReportedStateStatus {
    fn schema_name() -> Cow<'static, str> {
        "ReportedStateStatus".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        free_form_object(generator)
    }
}
