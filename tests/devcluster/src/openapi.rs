//! OpenAPI v3 documents and a minimal protobuf OpenAPI v2 document.

use crate::resources::ResourceDef;
use serde_json::{json, Value};

/// /openapi/v3 root (stub).
pub fn v3_root(defs: &[ResourceDef]) -> Value {
    let _ = defs;
    json!({"paths": {}})
}

/// /openapi/v3/<gv> (stub).
pub fn v3_group_version(defs: &[ResourceDef], group: &str, version: &str) -> Option<Value> {
    let _ = (defs, group, version);
    None
}

/// /openapi/v2 protobuf (stub).
pub fn v2_protobuf() -> Vec<u8> {
    Vec::new()
}
