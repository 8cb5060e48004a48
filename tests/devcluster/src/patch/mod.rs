//! PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

mod merge_keys;
mod strategic;

pub use merge_keys::{list_kind, ListKind};
pub use strategic::StrategicError;

use crate::resources::ResourceDef;
use crate::status::ApiError;
use serde_json::Value;

/// The four PATCH content types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchType {
    /// application/json-patch+json
    Json,
    /// application/merge-patch+json
    Merge,
    /// application/strategic-merge-patch+json
    Strategic,
    /// application/apply-patch+yaml (server-side apply)
    Apply,
}

impl PatchType {
    /// Maps a Content-Type header (parameters ignored) to a patch type.
    pub fn from_content_type(ct: &str) -> Option<PatchType> {
        let base = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match base.as_str() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => {
                Some(PatchType::Apply)
            }
            _ => None,
        }
    }
}

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The body is not valid JSON, or not a valid patch document.
    #[error("{0}")]
    BadRequest(String),
    /// A JSON patch operation failed against the object (a failed `test`,
    /// a missing path): kube-apiserver answers 422.
    #[error("{0}")]
    JsonPatchFailed(#[source] json_patch::PatchError),
    /// The strategic merge patch cannot be applied.
    #[error(transparent)]
    Strategic(#[from] strategic::StrategicError),
    /// Strategic merge patch on a custom resource (kube answers 415).
    #[error("the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml")]
    UnsupportedMediaType,
    /// Apply patches go through [`crate::managed_fields::server_side_apply`].
    #[error("apply patches are handled by server-side apply")]
    ApplyNotHandledHere,
    /// The patched document is not a JSON object.
    #[error("the patched object is not a JSON object")]
    NotAnObject,
}

impl PatchError {
    /// HTTP status code.
    pub fn code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_)
            | PatchError::Strategic(_)
            | PatchError::ApplyNotHandledHere
            | PatchError::NotAnObject => 400,
            PatchError::JsonPatchFailed(_) => 422,
            PatchError::UnsupportedMediaType => 415,
        }
    }

    /// metav1.Status reason.
    pub fn reason(&self) -> &'static str {
        match self.code() {
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            _ => "BadRequest",
        }
    }
}

impl From<PatchError> for ApiError {
    fn from(e: PatchError) -> Self {
        ApiError::other(e.code(), e.reason(), e.to_string())
    }
}

/// Applies a json/merge/strategic patch to `live` (the whole stored object)
/// and returns the new object. Apply patches are not handled here.
pub fn apply_patch(
    pt: PatchType,
    live: &Value,
    body: &[u8],
    def: &ResourceDef,
) -> Result<Value, PatchError> {
    apply_patch_value(pt, live, &parse_body(pt, body)?, def)
}

/// Parses a json/merge/strategic patch body (depth-bounded first), so it can be
/// done before the store is locked.
pub fn parse_body(pt: PatchType, body: &[u8]) -> Result<Value, PatchError> {
    match pt {
        PatchType::Json => {
            crate::limits::scan_json(body, crate::limits::MAX_DEPTH)
                .map_err(|e| PatchError::BadRequest(format!("invalid JSON patch: {e}")))?;
            serde_json::from_slice(body)
                .map_err(|e| PatchError::BadRequest(format!("invalid JSON patch: {e}")))
        }
        PatchType::Merge | PatchType::Strategic => parse_json(body),
        PatchType::Apply => Err(PatchError::ApplyNotHandledHere),
    }
}

/// [`apply_patch`] with a body already parsed by [`parse_body`].
pub fn apply_patch_value(
    pt: PatchType,
    live: &Value,
    patch: &Value,
    def: &ResourceDef,
) -> Result<Value, PatchError> {
    let out = match pt {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| PatchError::BadRequest(format!("invalid JSON patch: {e}")))?;
            let mut doc = live.clone();
            json_patch::patch(&mut doc, &ops).map_err(PatchError::JsonPatchFailed)?;
            doc
        }
        PatchType::Merge => {
            let mut doc = live.clone();
            json_patch::merge(&mut doc, patch);
            doc
        }
        PatchType::Strategic => {
            if def.custom {
                return Err(PatchError::UnsupportedMediaType);
            }
            strategic::apply(def, live, patch)?
        }
        PatchType::Apply => return Err(PatchError::ApplyNotHandledHere),
    };
    if !out.is_object() {
        return Err(PatchError::NotAnObject);
    }
    Ok(out)
}

fn parse_json(body: &[u8]) -> Result<Value, PatchError> {
    crate::limits::scan_json(body, crate::limits::MAX_DEPTH)
        .map_err(|e| PatchError::BadRequest(format!("error decoding patch: {e}")))?;
    serde_json::from_slice(body)
        .map_err(|e| PatchError::BadRequest(format!("error decoding patch: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;
    use serde_json::json;

    fn def(kind: &str) -> ResourceDef {
        builtins().into_iter().find(|d| d.kind == kind).unwrap()
    }

    fn custom() -> ResourceDef {
        ResourceDef {
            custom: true,
            group: "example.com".into(),
            kind: "Widget".into(),
            ..def("ConfigMap")
        }
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchType::from_content_type("application/merge-patch+json; charset=utf-8"),
            Some(PatchType::Merge)
        );
        assert_eq!(
            PatchType::from_content_type("application/json-patch+json"),
            Some(PatchType::Json)
        );
        assert_eq!(
            PatchType::from_content_type("application/strategic-merge-patch+json"),
            Some(PatchType::Strategic)
        );
        assert_eq!(
            PatchType::from_content_type("application/apply-patch+yaml"),
            Some(PatchType::Apply)
        );
        assert_eq!(PatchType::from_content_type("application/json"), None);
    }

    #[test]
    fn json_patch_and_merge_patch() {
        let live = json!({"data":{"a":"1"}});
        let out = apply_patch(
            PatchType::Json,
            &live,
            br#"[{"op":"add","path":"/data/b","value":"2"},{"op":"remove","path":"/data/a"}]"#,
            &def("ConfigMap"),
        )
        .unwrap();
        assert_eq!(out, json!({"data":{"b":"2"}}));
        let out = apply_patch(
            PatchType::Merge,
            &live,
            br#"{"data":{"a":null,"c":"3"}}"#,
            &custom(),
        )
        .unwrap();
        assert_eq!(out, json!({"data":{"c":"3"}}));
    }

    #[test]
    fn error_codes() {
        let live = json!({"data":{"a":"1"}});
        let cm = def("ConfigMap");
        let e = apply_patch(PatchType::Json, &live, b"{not json", &cm).unwrap_err();
        assert_eq!((e.code(), e.reason()), (400, "BadRequest"));
        let e = apply_patch(
            PatchType::Json,
            &live,
            br#"[{"op":"test","path":"/data/a","value":"2"}]"#,
            &cm,
        )
        .unwrap_err();
        assert_eq!((e.code(), e.reason()), (422, "Invalid"));
        let e = apply_patch(PatchType::Merge, &live, b"[1,", &cm).unwrap_err();
        assert_eq!(e.code(), 400);
        let e = apply_patch(PatchType::Strategic, &live, br#"{"data":{}}"#, &custom()).unwrap_err();
        assert_eq!((e.code(), e.reason()), (415, "UnsupportedMediaType"));
        assert!(e.to_string().contains("application/json-patch+json"));
        let e = apply_patch(PatchType::Strategic, &live, b"[]", &cm).unwrap_err();
        assert_eq!(e.code(), 400);
        let e = apply_patch(PatchType::Merge, &live, b"5", &cm).unwrap_err();
        assert_eq!(e.code(), 400);
    }
}
