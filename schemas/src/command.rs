//! Commands to one agent over core NATS request/reply (`<p>.cmd.<cluster>.<verb>`): drift
//! correction and relabelling.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::object_ref::ObjectRef;

/// `schema` of a [`CorrectRequest`].
pub const CORRECT_REQUEST_SCHEMA: &str = "fleetbus.io/correct-request/v1";
/// `schema` of a [`CorrectReply`].
pub const CORRECT_REPLY_SCHEMA: &str = "fleetbus.io/correct-reply/v1";

/// Asks one agent to correct its drifted copies now, whatever the rule's drift mode or a
/// paused annotation says. Every field is a filter; the set ones are AND'd, and none set
/// means every drifted copy on that cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CorrectRequest {
    /// Only copies managed by this ResourceSyncRule.
    #[serde(default)]
    pub rule: Option<String>,
    /// Only copies of this kind.
    #[serde(default)]
    pub kind: Option<String>,
    /// Only copies in this namespace.
    #[serde(default)]
    pub namespace: Option<String>,
    /// Only copies with this name.
    #[serde(default)]
    pub name: Option<String>,
}

impl CorrectRequest {
    /// JSON with `"schema": "fleetbus.io/correct-request/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(CORRECT_REQUEST_SCHEMA, self)
    }

    /// Decodes a request; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(CORRECT_REQUEST_SCHEMA, bytes)
    }

    /// Whether a drifted copy managed by `rule` matches every set filter.
    pub fn matches(&self, rule: &str, object: &ObjectRef) -> bool {
        fn ok(filter: Option<&str>, value: Option<&str>) -> bool {
            filter.is_none_or(|f| value == Some(f))
        }
        ok(self.rule.as_deref(), Some(rule))
            && ok(self.kind.as_deref(), Some(&object.kind))
            && ok(self.namespace.as_deref(), object.namespace.as_deref())
            && ok(self.name.as_deref(), Some(&object.name))
    }
}

/// What the agent did with a [`CorrectRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CorrectReply {
    /// The cluster that answered.
    pub cluster: String,
    /// Copies restored to what the rule wants.
    #[serde(default)]
    pub corrected: Vec<ObjectRef>,
    /// Copies the agent tried to restore and could not.
    #[serde(default)]
    pub failed: Vec<CorrectFailure>,
    /// Why the request was refused as a whole (e.g. malformed, or for rate), else null.
    #[serde(default)]
    pub error: Option<String>,
    /// Refused for rate: milliseconds until the agent takes a request again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// One copy that could not be corrected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CorrectFailure {
    /// The copy.
    pub object: ObjectRef,
    /// Why the correction failed.
    pub error: String,
}

impl CorrectReply {
    /// JSON with `"schema": "fleetbus.io/correct-reply/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(CORRECT_REPLY_SCHEMA, self)
    }

    /// Decodes a reply; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(CORRECT_REPLY_SCHEMA, bytes)
    }

    /// A reply refusing the whole request.
    pub fn refused(cluster: &str, error: impl Into<String>) -> Self {
        Self {
            cluster: cluster.to_owned(),
            error: Some(error.into()),
            ..Self::default()
        }
    }
}

/// `schema` of a [`LabelRequest`].
pub const LABEL_REQUEST_SCHEMA: &str = "fleetbus.io/label-request/v1";
/// `schema` of a [`LabelReply`].
pub const LABEL_REPLY_SCHEMA: &str = "fleetbus.io/label-reply/v1";

/// Asks one agent to change the labels of its Local Cluster object (the one owner of the
/// cluster's labels), like `kubectl label`: `set` adds or changes labels, `remove` drops
/// them (absent keys are no error). Changing the value of an existing label needs
/// `overwrite`. A key both set and removed is refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelRequest {
    /// Labels to add or change.
    #[serde(default)]
    pub set: BTreeMap<String, String>,
    /// Keys of labels to remove.
    #[serde(default)]
    pub remove: Vec<String>,
    /// Allow changing the value of an existing label.
    #[serde(default)]
    pub overwrite: bool,
}

impl LabelRequest {
    /// JSON with `"schema": "fleetbus.io/label-request/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(LABEL_REQUEST_SCHEMA, self)
    }

    /// Decodes a request; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(LABEL_REQUEST_SCHEMA, bytes)
    }
}

/// What the agent did with a [`LabelRequest`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LabelReply {
    /// The cluster that answered.
    pub cluster: String,
    /// The labels of its Local Cluster object after the request (unchanged when refused).
    /// Absent when the agent did not read them: a malformed request, or the Local Cluster
    /// object could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Why the request was refused (malformed, invalid label, existing value without
    /// overwrite, rate), else null. Nothing was changed then.
    #[serde(default)]
    pub error: Option<String>,
    /// Refused for rate: milliseconds until the agent takes a request again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl LabelReply {
    /// JSON with `"schema": "fleetbus.io/label-reply/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(LABEL_REPLY_SCHEMA, self)
    }

    /// Decodes a reply; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(LABEL_REPLY_SCHEMA, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_anded_and_absent_matches_all() {
        let obj = ObjectRef::new("apps/v1", "Deployment", Some("team-a"), "web");
        assert!(CorrectRequest::default().matches("r", &obj));
        let want = CorrectRequest {
            rule: Some("r".into()),
            kind: Some("Deployment".into()),
            namespace: Some("team-a".into()),
            name: Some("web".into()),
        };
        assert!(want.matches("r", &obj));
        assert!(!want.matches("other", &obj));
        let ns = CorrectRequest {
            namespace: Some("team-a".into()),
            ..CorrectRequest::default()
        };
        let cluster_scoped = ObjectRef::new("v1", "Namespace", None, "team-a");
        assert!(!ns.matches("r", &cluster_scoped));
    }

    #[test]
    fn label_messages_round_trip_with_schema_first() {
        let req = LabelRequest {
            set: BTreeMap::from([("env".into(), "prod".into())]),
            remove: vec!["tier".into()],
            overwrite: true,
        };
        let bytes = req.encode().unwrap();
        assert!(String::from_utf8_lossy(&bytes)
            .starts_with(r#"{"schema":"fleetbus.io/label-request/v1""#));
        assert_eq!(LabelRequest::decode(&bytes).unwrap(), req);
        let minimal =
            LabelRequest::decode(br#"{"schema":"fleetbus.io/label-request/v1"}"#).unwrap();
        assert_eq!(minimal, LabelRequest::default());
        assert!(LabelRequest::decode(br#"{"schema":"fleetbus.io/label-reply/v1"}"#).is_err());
        let reply = LabelReply {
            cluster: "c1".into(),
            labels: Some(req.set.clone()),
            error: None,
            retry_after_ms: None,
        };
        assert_eq!(LabelReply::decode(&reply.encode().unwrap()).unwrap(), reply);
    }
}
