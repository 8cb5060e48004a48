//! API errors rendered as metav1.Status bodies, as kube-apiserver does.

use crate::resources::ResourceDef;
use serde_json::{json, Value};

/// An API error: becomes a `Status` body with `code` and `reason`.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{reason} ({code}): {message}")]
pub struct ApiError {
    /// HTTP status code.
    pub code: u16,
    /// metav1.StatusReason ("NotFound", "Conflict", ...).
    pub reason: &'static str,
    /// Human-readable message, same text as kube-apiserver where known.
    pub message: String,
    /// metav1.StatusDetails, if any.
    pub details: Option<Value>,
}

/// One metav1.StatusCause for 422 Invalid.
#[derive(Debug, Clone)]
pub struct FieldCause {
    /// e.g. "FieldValueInvalid".
    pub reason: &'static str,
    /// e.g. "metadata.name".
    pub field: String,
    /// e.g. "Invalid value: \"X\": ...".
    pub message: String,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    /// 404 `configmaps "x" not found`.
    pub fn not_found(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", def.qualified_plural()),
        )
        .with_details(json!({"name": name, "group": def.group, "kind": def.plural}))
    }

    /// 404 for a namespace that does not exist (creating content in it).
    pub fn namespace_not_found(ns: &str) -> Self {
        Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    /// 404 for an unknown path.
    pub fn path_not_found() -> Self {
        Self::new(
            404,
            "NotFound",
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 AlreadyExists.
    pub fn already_exists(def: &ResourceDef, name: &str) -> Self {
        Self::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", def.qualified_plural()),
        )
        .with_details(json!({"name": name, "group": def.group, "kind": def.plural}))
    }

    /// 409 Conflict on a stale resourceVersion.
    pub fn conflict(def: &ResourceDef, name: &str) -> Self {
        Self::conflict_msg(
            def,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 409 Conflict with a custom explanation (preconditions).
    pub fn conflict_msg(def: &ResourceDef, name: &str, why: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                def.qualified_plural()
            ),
        )
        .with_details(json!({"name": name, "group": def.group, "kind": def.plural}))
    }

    /// 422 Invalid: `ConfigMap "x" is invalid: metadata.name: Invalid value: ...`.
    pub fn invalid(group: &str, kind: &str, name: &str, causes: Vec<FieldCause>) -> Self {
        let summary: Vec<String> = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect();
        let summary = if summary.len() == 1 {
            summary.concat()
        } else {
            format!("[{}]", summary.join(", "))
        };
        let causes_json: Vec<Value> = causes
            .iter()
            .map(|c| json!({"reason": c.reason, "message": c.message, "field": c.field}))
            .collect();
        // kube names the GroupKind: `Deployment.apps "x"`, `ConfigMap "x"`.
        let qualified = if group.is_empty() {
            kind.to_string()
        } else {
            format!("{kind}.{group}")
        };
        Self::new(
            422,
            "Invalid",
            format!("{qualified} \"{name}\" is invalid: {summary}"),
        )
        .with_details(json!({"name": name, "group": group, "kind": kind, "causes": causes_json}))
    }

    /// 422 Invalid for a single field.
    pub fn invalid_field(
        def: &ResourceDef,
        name: &str,
        field: &str,
        message: impl Into<String>,
    ) -> Self {
        Self::invalid(
            &def.group,
            &def.kind,
            name,
            vec![FieldCause {
                reason: "FieldValueInvalid",
                field: field.into(),
                message: message.into(),
            }],
        )
    }

    /// 400 BadRequest.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 401 Unauthorized.
    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// 403 Forbidden.
    pub fn forbidden(def: &ResourceDef, name: &str, why: &str) -> Self {
        Self::new(
            403,
            "Forbidden",
            format!("{} \"{name}\" is forbidden: {why}", def.qualified_plural()),
        )
        .with_details(json!({"name": name, "group": def.group, "kind": def.plural}))
    }

    /// 405 MethodNotAllowed.
    pub fn method_not_allowed(method: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({method})"),
        )
        .with_details(json!({}))
    }

    /// 406 NotAcceptable.
    pub fn not_acceptable(message: impl Into<String>) -> Self {
        Self::new(406, "NotAcceptable", message)
    }

    /// 410 Expired: a watch or continue token older than the kept history.
    pub fn expired(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    /// 413 RequestEntityTooLarge.
    pub fn too_large(limit: usize) -> Self {
        Self::new(
            413,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {limit}"),
        )
    }

    /// 415 UnsupportedMediaType.
    pub fn unsupported_media_type(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    /// 500 InternalError.
    pub fn internal(message: impl Into<String>) -> Self {
        let message = message.into();
        Self::new(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
        .with_details(json!({"causes": [{"message": message}]}))
    }

    /// Any code/reason pair (errors from the patch and apply modules).
    pub fn other(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Self::new(code, reason, message)
    }

    /// The metav1.Status body.
    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let (Some(d), Some(obj)) = (&self.details, s.as_object_mut()) {
            let mut d = d.clone();
            // StatusDetails' strings are `omitempty`: core resources have no group.
            if let Some(m) = d.as_object_mut() {
                m.retain(|k, v| {
                    !(matches!(k.as_str(), "name" | "group" | "kind" | "uid") && v == "")
                });
            }
            obj.insert("details".into(), d);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::builtins;

    #[test]
    fn not_found_shape() {
        let defs = builtins();
        let dep = defs.iter().find(|d| d.plural == "deployments").unwrap();
        let s = ApiError::not_found(dep, "x").to_status();
        assert_eq!(s["message"], "deployments.apps \"x\" not found");
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["code"], 404);
        assert_eq!(s["details"]["kind"], "deployments");
        assert_eq!(s["details"]["group"], "apps");
    }
}
