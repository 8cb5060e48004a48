//! Reported state: JSON messages on `<p>.status.<cluster>...` carrying a copy's status back to its origin.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::health::Health;
use crate::object_ref::ObjectRef;
use crate::subject::{split_api_version, StatusKey};
use crate::time::rfc3339_ms;

/// `schema` of a [`ReportedStatus`].
pub const REPORTED_STATUS_SCHEMA: &str = "fleetbus.io/status/v1";

/// The status of one copy on one sink cluster, published for rules with `statusReturn`
/// other than `None`. The subject names the *source* object as it is on the origin (so the
/// origin can subscribe by its own objects' identity) and the publishing sink cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportedStatus {
    /// Sink cluster that read the status (the publisher).
    pub cluster: String,
    /// ResourceSyncRule that manages the copy.
    pub rule: String,
    /// Cluster the copy comes from (the intended reader).
    pub origin: String,
    /// The source object on the origin (with its `uid`).
    pub source: ObjectRef,
    /// Name of the copy on the sink (differs from the source when mutations rename it).
    pub copy_name: String,
    /// Namespace of the copy, null if cluster-scoped.
    #[serde(default)]
    pub copy_namespace: Option<String>,
    /// `metadata.resourceVersion` of the copy the status was read from.
    pub copy_resource_version: String,
    /// When the status was read.
    #[serde(with = "rfc3339_ms")]
    pub observed_at: DateTime<Utc>,
    /// The copy's `.status`; null when the copy no longer exists.
    #[serde(default)]
    pub status: Value,
    /// Whether the copy is ready (rollout complete, Job complete, `Ready`
    /// condition true; an object without such signals is ready when it exists).
    /// Absent when the copy no longer exists, and in messages of older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// The copy's health (kstatus, or the rule's `spec.health`); `ready` is
    /// `health.status == Current`. Absent when the copy no longer exists, for
    /// Bundles (their manifests report `ready`), and in messages of older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<Health>,
    /// The content hash of the source version the copy was written from (its
    /// `fleetbus.io/source-hash`): which version of a rollout the health is
    /// about. Absent when the copy no longer exists, and in messages of older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_hash: Option<String>,
    /// Set when the sink cannot hold a copy of the source object for a rule
    /// with `spec.placement`, whether chosen or not (PROTOCOL §6.10,
    /// "Fitness"): why, for people (at most [`MAX_UNFIT_LEN`] bytes). Such a
    /// report has no copy behind it (`status` is null). The origin chooses
    /// another cluster for the unit. Absent in messages of older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unfit: Option<String>,
}

/// At most this many bytes of a report's `unfit` (longer ones are cut).
pub const MAX_UNFIT_LEN: usize = 256;

/// `why` cut to [`MAX_UNFIT_LEN`] bytes at a character boundary.
pub fn cut_unfit(why: &str) -> String {
    let mut end = why.len().min(MAX_UNFIT_LEN);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    why[..end].to_owned()
}

impl ReportedStatus {
    /// JSON with `"schema": "fleetbus.io/status/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(REPORTED_STATUS_SCHEMA, self)
    }

    /// Decodes a message; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(REPORTED_STATUS_SCHEMA, bytes)
    }

    /// The key naming this message's subject: publisher cluster + source identity.
    pub fn subject_key(&self) -> StatusKey {
        let (group, version) = split_api_version(&self.source.api_version);
        StatusKey {
            cluster: self.cluster.clone(),
            group: group.to_owned(),
            version: version.to_owned(),
            kind: self.source.kind.clone(),
            namespace: self.source.namespace.clone(),
            name: self.source.name.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::subject::Prefix;
    use crate::time::parse_rfc3339;
    use serde_json::json;

    fn example() -> ReportedStatus {
        ReportedStatus {
            cluster: "west".into(),
            rule: "web".into(),
            origin: "east".into(),
            source: ObjectRef {
                uid: Some("u-1".into()),
                ..ObjectRef::new("apps/v1", "Deployment", Some("team-a"), "web")
            },
            copy_name: "web".into(),
            copy_namespace: Some("team-a".into()),
            copy_resource_version: "77".into(),
            observed_at: parse_rfc3339("2026-11-22T04:40:00.000Z").unwrap(),
            status: json!({"readyReplicas": 3}),
            ready: Some(true),
            health: Some(Health::new(
                crate::health::HealthStatus::Current,
                "Deployment is available. Replicas: 3",
            )),
            source_hash: Some(
                "9f2c4e1d8b7a6f5e4d3c2b1a09f8e7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c".into(),
            ),
            unfit: None,
        }
    }

    #[test]
    fn round_trip_and_subject() {
        let e = example();
        let bytes = e.encode().unwrap();
        let text = String::from_utf8(bytes.clone()).unwrap();
        let doc = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/PROTOCOL.md"),
        )
        .unwrap();
        assert!(doc.contains(&text), "docs/PROTOCOL.md must show:\n{text}");
        assert_eq!(ReportedStatus::decode(&bytes).unwrap(), e);
        assert_eq!(
            e.subject_key().to_subject(&Prefix::default()),
            "fleetbus.status.west.apps.v1.Deployment.team-a.web"
        );
        let gone = ReportedStatus {
            status: Value::Null,
            ready: None,
            source_hash: None,
            ..example()
        };
        assert_eq!(
            ReportedStatus::decode(&gone.encode().unwrap()).unwrap(),
            gone
        );
        let unfit = ReportedStatus {
            unfit: Some("refused by SyncPolicy default".into()),
            ..gone.clone()
        };
        let text = String::from_utf8(unfit.encode().unwrap()).unwrap();
        assert!(text.contains(r#""unfit":"refused by SyncPolicy default""#));
        assert_eq!(ReportedStatus::decode(text.as_bytes()).unwrap(), unfit);
    }

    #[test]
    fn unfit_reasons_are_cut_at_a_character_boundary() {
        let long = "é".repeat(MAX_UNFIT_LEN);
        let cut = cut_unfit(&long);
        assert!(cut.len() <= MAX_UNFIT_LEN && cut.len() >= MAX_UNFIT_LEN - 1);
        assert!(cut.chars().all(|c| c == 'é'));
        assert_eq!(cut_unfit("short"), "short");
    }

    #[test]
    fn other_versions_rejected() {
        let bytes = String::from_utf8(example().encode().unwrap())
            .unwrap()
            .replace("status/v1", "status/v9");
        assert!(matches!(
            ReportedStatus::decode(bytes.as_bytes()),
            Err(DecodeError::UnsupportedVersion { .. })
        ));
    }
}
