//! PATCH bodies: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch.

use crate::resources::ResourceDef;
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
        let base = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        match base.as_str() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            "application/apply-patch+yaml" | "application/apply-patch+json" => Some(PatchType::Apply),
            _ => None,
        }
    }
}

/// Why a patch could not be applied.
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The body is not valid for the patch type.
    #[error("{0}")]
    BadRequest(String),
}

impl PatchError {
    /// HTTP status code.
    pub fn code(&self) -> u16 {
        400
    }
    /// metav1.Status reason.
    pub fn reason(&self) -> &'static str {
        "BadRequest"
    }
}

/// Applies a json/merge/strategic patch to `live` and returns the new object.
pub fn apply_patch(
    pt: PatchType,
    live: &Value,
    body: &[u8],
    def: &ResourceDef,
) -> Result<Value, PatchError> {
    let _ = (pt, live, body, def);
    Err(PatchError::BadRequest("not implemented yet".into()))
}
