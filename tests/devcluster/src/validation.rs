//! fieldValidation=Strict: unknown field detection.

use crate::resources::ResourceDef;
use serde_json::Value;

/// Returns unknown field paths for `obj` (stub).
pub fn unknown_fields(def: &ResourceDef, obj: &Value) -> Vec<String> {
    let _ = (def, obj);
    Vec::new()
}
