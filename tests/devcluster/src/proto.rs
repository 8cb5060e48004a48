//! Decoding `application/vnd.kubernetes.protobuf` request bodies into the JSON the API serves.
//!
//! kubectl >= 1.32 and client-go >= 0.32 typed clients send writes of built-in
//! kinds as protobuf, with no JSON fallback. A body is the magic `k8s\0`, then a
//! `runtime.Unknown` envelope: the TypeMeta plus the object's own protobuf bytes.
//! [`decode`] unwraps the envelope, decodes the object with the `k8s-pb` prost
//! types, and converts it to the object's Kubernetes JSON form (per-kind
//! conversions in `kinds`, the pod template in `pod`, shared types in `json`).

mod json;
mod kinds;
mod pod;
#[cfg(test)]
mod tests;

use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message;
use serde_json::Value;

/// The prefix of every Kubernetes protobuf body.
pub const MAGIC: &[u8; 4] = b"k8s\0";

/// The media type of Kubernetes protobuf bodies.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Why a protobuf body could not be turned into JSON.
#[derive(Debug, thiserror::Error)]
pub enum ProtoError {
    /// The body does not start with `k8s\0`.
    #[error("the body does not start with the Kubernetes protobuf magic \"k8s\\0\"")]
    MissingMagic,
    /// The `runtime.Unknown` envelope after the magic is not valid protobuf.
    #[error("failed to decode the runtime.Unknown envelope")]
    Envelope(#[source] prost::DecodeError),
    /// The envelope has no `apiVersion` or no `kind`.
    #[error("the protobuf envelope does not name an apiVersion and a kind")]
    MissingTypeMeta,
    /// The envelope's `contentEncoding` is set (Kubernetes never sets it).
    #[error("the protobuf envelope has unsupported contentEncoding {0:?}")]
    UnsupportedEncoding(String),
    /// This server has no protobuf conversion for the kind.
    #[error("protobuf request bodies of kind {kind} ({api_version}) are not supported")]
    UnsupportedKind {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
    },
    /// The object bytes are not a valid protobuf message of the named kind.
    #[error("failed to decode the protobuf body as {kind} ({api_version})")]
    Object {
        /// The envelope's apiVersion.
        api_version: String,
        /// The envelope's kind.
        kind: String,
        /// What prost found wrong.
        #[source]
        source: prost::DecodeError,
    },
}

impl ProtoError {
    /// True when the body is well-formed but names a kind this server cannot
    /// decode: the API answers 415 Unsupported Media Type, not 400.
    pub fn is_unsupported(&self) -> bool {
        matches!(
            self,
            ProtoError::UnsupportedKind { .. } | ProtoError::UnsupportedEncoding(_)
        )
    }
}

/// True when `body` starts with the Kubernetes protobuf magic.
pub fn is_protobuf(body: &[u8]) -> bool {
    body.starts_with(MAGIC)
}

/// Decodes a Kubernetes protobuf body into the object's JSON form, with
/// `apiVersion` and `kind` set.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body.strip_prefix(MAGIC).ok_or(ProtoError::MissingMagic)?;
    let envelope = Unknown::decode(rest).map_err(ProtoError::Envelope)?;
    if let Some(enc) = envelope.content_encoding.filter(|e| !e.is_empty()) {
        return Err(ProtoError::UnsupportedEncoding(enc));
    }
    let type_meta = envelope.type_meta.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    if api_version.is_empty() || kind.is_empty() {
        return Err(ProtoError::MissingTypeMeta);
    }
    let raw = envelope.raw.unwrap_or_default();
    let object = convert(&api_version, &kind, &raw)?;
    Ok(with_type_meta(object, api_version, kind))
}

/// Decodes `raw` as the prost message `M` and converts it with `f`.
fn typed<M: Message + Default>(
    raw: &[u8],
    f: fn(&M) -> Value,
) -> Result<Value, prost::DecodeError> {
    M::decode(raw).map(|m| f(&m))
}

/// The (apiVersion, kind) -> conversion table.
fn convert(api_version: &str, kind: &str, raw: &[u8]) -> Result<Value, ProtoError> {
    use k8s_pb::api::authorization::v1 as authz;
    use k8s_pb::api::rbac::v1 as rbac;
    use k8s_pb::api::{apps::v1 as apps, authentication::v1 as authn, batch::v1 as batch};
    use k8s_pb::api::{core::v1 as core, networking::v1 as net, policy::v1 as policy};
    let decoded = match (api_version, kind) {
        ("v1", "Namespace") => typed::<core::Namespace>(raw, kinds::namespace),
        ("v1", "ConfigMap") => typed::<core::ConfigMap>(raw, kinds::config_map),
        ("v1", "Secret") => typed::<core::Secret>(raw, kinds::secret),
        ("v1", "ServiceAccount") => typed::<core::ServiceAccount>(raw, kinds::service_account),
        ("v1", "Service") => typed::<core::Service>(raw, kinds::service),
        ("v1", "Pod") => typed::<core::Pod>(raw, kinds::pod),
        ("authentication.k8s.io/v1", "TokenRequest") => {
            typed::<authn::TokenRequest>(raw, kinds::token_request)
        }
        ("authorization.k8s.io/v1", "SelfSubjectAccessReview") => {
            typed::<authz::SelfSubjectAccessReview>(raw, kinds::self_subject_access_review)
        }
        ("authorization.k8s.io/v1", "SelfSubjectRulesReview") => {
            typed::<authz::SelfSubjectRulesReview>(raw, kinds::self_subject_rules_review)
        }
        ("apps/v1", "Deployment") => typed::<apps::Deployment>(raw, kinds::deployment),
        ("batch/v1", "Job") => typed::<batch::Job>(raw, kinds::job),
        ("batch/v1", "CronJob") => typed::<batch::CronJob>(raw, kinds::cron_job),
        ("rbac.authorization.k8s.io/v1", "Role") => typed::<rbac::Role>(raw, kinds::role),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => {
            typed::<rbac::ClusterRole>(raw, kinds::cluster_role)
        }
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => {
            typed::<rbac::RoleBinding>(raw, kinds::role_binding)
        }
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            typed::<rbac::ClusterRoleBinding>(raw, kinds::cluster_role_binding)
        }
        ("policy/v1", "PodDisruptionBudget") => {
            typed::<policy::PodDisruptionBudget>(raw, kinds::pod_disruption_budget)
        }
        ("networking.k8s.io/v1", "Ingress") => typed::<net::Ingress>(raw, kinds::ingress),
        _ => {
            return Err(ProtoError::UnsupportedKind {
                api_version: api_version.to_owned(),
                kind: kind.to_owned(),
            })
        }
    };
    decoded.map_err(|source| ProtoError::Object {
        api_version: api_version.to_owned(),
        kind: kind.to_owned(),
        source,
    })
}

/// Puts `apiVersion` and `kind` first, as the API serves them.
fn with_type_meta(object: Value, api_version: String, kind: String) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    if let Value::Object(fields) = object {
        out.extend(fields);
    }
    Value::Object(out)
}
