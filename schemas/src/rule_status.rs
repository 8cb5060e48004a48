//! A rule's status on one cluster, as that cluster's agent reports it on the bus.
//!
//! Every agent already writes each ResourceSyncRule's `.status` into its own
//! API server; operators need it fleet-wide without a credential for every
//! cluster. So each agent also puts one [`RuleStatusRecord`] per rule into the
//! KV bucket `<prefix>-rulestatus` at `status.<cluster>.<clusterID>.<rule>`
//! (escaped tokens, written only by that cluster's agent, like the registry),
//! and deletes the key when the rule is gone. `fleetbus rules ls|describe`,
//! `fleetbus status` and the dashboard read the bucket; docs/PROTOCOL.md §5.3
//! specifies it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::k8s_names::{is_dns1123_label, is_dns1123_subdomain};
use crate::subject::{decode_token, encode_token, Prefix, TokenError};
use crate::time::rfc3339_ms_opt;

/// `schema` of a [`RuleStatusRecord`].
pub const RULE_STATUS_SCHEMA: &str = "fleetbus.io/rulestatus/v1";
/// Suffix of the bucket name: `<prefix>-rulestatus`.
pub const RULE_STATUS_BUCKET_SUFFIX: &str = "rulestatus";
/// Key filter matching every record.
pub const ALL_RULE_STATUS_KEYS: &str = "status.>";
/// At most this many problems are carried; `problemsTotal` counts them all.
pub const MAX_PROBLEMS: usize = 20;
/// Longest `message` (of the record or a problem), in bytes.
pub const MAX_MESSAGE_LEN: usize = 1024;

/// Name of the rule status bucket for a prefix (`fleetbus` -> `fleetbus-rulestatus`).
pub fn rule_status_bucket(prefix: &Prefix) -> String {
    prefix.bucket_name(RULE_STATUS_BUCKET_SUFFIX)
}

/// Key filter for every rule status one cluster reports (any cluster ID).
pub fn rule_status_keys_for_cluster(cluster: &str) -> String {
    format!("status.{}.*.>", encode_token(cluster))
}

/// `status.<cluster>.<clusterID>.<rule>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RuleStatusKey {
    /// Reporting cluster's name.
    pub cluster: String,
    /// Reporting cluster's ID (kube-system UID).
    pub cluster_id: String,
    /// The rule's name.
    pub rule: String,
}

/// A rule status key that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RuleStatusKeyError {
    /// Not `status.<cluster>.<clusterID>.<rule>`.
    #[error("rule status key {0:?} is not status.<cluster>.<clusterID>.<rule>")]
    Shape(String),
    /// A token does not decode.
    #[error("invalid token in rule status key")]
    Token(#[source] TokenError),
}

impl RuleStatusKey {
    /// The KV key, tokens escaped as in subjects.
    pub fn to_key(&self) -> String {
        format!(
            "status.{}.{}.{}",
            encode_token(&self.cluster),
            encode_token(&self.cluster_id),
            encode_token(&self.rule)
        )
    }

    /// Inverse of [`RuleStatusKey::to_key`].
    pub fn parse(key: &str) -> Result<Self, RuleStatusKeyError> {
        let shape = || RuleStatusKeyError::Shape(key.to_owned());
        let mut parts = key.split('.');
        let (Some("status"), Some(cluster), Some(id), Some(rule), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(shape());
        };
        let token = |t| decode_token(t).map_err(RuleStatusKeyError::Token);
        Ok(Self {
            cluster: token(cluster)?,
            cluster_id: token(id)?,
            rule: token(rule)?,
        })
    }
}

/// What a rule amounts to on one cluster, in the words every view uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RuleCellState {
    /// Every copy this cluster should hold is written and current (or, for a
    /// cluster that is only a source, everything it selects is published).
    Synced,
    /// Selected, but copies are still arriving (catch-up, a source not yet seen).
    Waiting,
    /// Some copies failed to be written; `problems` names them.
    Error,
    /// Some objects were not written because another owner holds the name.
    Conflict,
    /// This cluster is neither a source nor a sink of the rule. Not a failure.
    NotSelected,
    /// The rule does not validate (or compile) on this cluster; `message` says why.
    Invalid,
    /// The rule is suspended (`spec.suspend`): it writes and deletes nothing here.
    /// Chosen by an operator, so no failure.
    Suspended,
}

impl RuleCellState {
    /// The word, as every view prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            RuleCellState::Synced => "Synced",
            RuleCellState::Waiting => "Waiting",
            RuleCellState::Error => "Error",
            RuleCellState::Conflict => "Conflict",
            RuleCellState::NotSelected => "NotSelected",
            RuleCellState::Invalid => "Invalid",
            RuleCellState::Suspended => "Suspended",
        }
    }

    /// Whether an operator must act (`Waiting` passes by itself, `NotSelected` is no failure).
    pub fn needs_attention(self) -> bool {
        matches!(
            self,
            RuleCellState::Error | RuleCellState::Conflict | RuleCellState::Invalid
        )
    }
}

impl std::fmt::Display for RuleCellState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why an object of the rule is not as it should be on this cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ProblemKind {
    /// Writing the copy failed.
    Error,
    /// The name is held by a local object or another origin.
    Conflict,
    /// A copy kept instead of deleted (deleting it would delete what fleetbus does not own).
    Kept,
    /// A local object the rule selects that is never published.
    Skipped,
    /// This cluster's SyncPolicy refuses it: an object of this cluster not
    /// published for the rule, or a copy not written here.
    Refused,
}

/// One object with a problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleProblem {
    /// What kind of problem.
    pub kind: ProblemKind,
    /// The object concerned, as the agent names it in the rule's conditions:
    /// `Kind namespace/name` or `Kind name` (at most [`MAX_MESSAGE_LEN`] bytes).
    /// A name, not an `ObjectRef`: the agent's report knows the copies of
    /// unwrap rules and the Bundles it failed to read by this name only, and
    /// an `apiVersion` made up for them would be a lie.
    pub object: String,
    /// What happened, for people (at most [`MAX_MESSAGE_LEN`] bytes).
    pub message: String,
}

/// A rule's status on one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuleStatusRecord {
    /// The reporting cluster.
    pub cluster: String,
    /// The reporting cluster's ID.
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// The rule's name.
    pub rule: String,
    /// `metadata.generation` of the rule this status was computed for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The one word.
    pub state: RuleCellState,
    /// Machine-readable reason (the Ready condition's reason, e.g. `NotSelected`).
    #[serde(default)]
    pub reason: String,
    /// For people: why the rule is (not) selected here, what it waits for.
    #[serde(default)]
    pub message: String,
    /// This cluster is selected as a sink (receives copies).
    pub sink: bool,
    /// This cluster is selected as a source (publishes its objects).
    pub source: bool,
    /// Copies currently in sync here.
    #[serde(default)]
    pub objects_synced: u64,
    /// Objects not written because another owner holds the name.
    #[serde(default)]
    pub conflicts: u64,
    /// Objects that failed to sync.
    #[serde(default)]
    pub errors: u64,
    /// Local objects the rule selects that are never published.
    #[serde(default)]
    pub skipped: u64,
    /// Objects this cluster's SyncPolicy refuses for the rule (not
    /// published from here, or not written here).
    #[serde(default)]
    pub refused: u64,
    /// On an origin with `statusReturn`: copies of its objects reported ready / reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_copies: Option<u64>,
    /// See `readyCopies`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_copies: Option<u64>,
    /// On a sink of a placement rule: how many of the rule's placement
    /// decisions (units, of every origin) chose this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_here: Option<u64>,
    /// See `placedHere`: how many chose other clusters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placed_elsewhere: Option<u64>,
    /// Up to [`MAX_PROBLEMS`] objects with a problem, errors and conflicts first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<RuleProblem>,
    /// How many objects have a problem in all (may exceed `problems.len()`).
    #[serde(default)]
    pub problems_total: u64,
    /// Last time a copy was written by this rule here.
    #[serde(
        default,
        with = "rfc3339_ms_opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_sync_time: Option<DateTime<Utc>>,
    /// When the agent computed this record.
    #[serde(with = "crate::time::rfc3339_ms")]
    pub updated_at: DateTime<Utc>,
}

/// A record that decodes but must not be shown as it is.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InvalidRuleStatus {
    /// `cluster` is not a DNS-1123 label.
    #[error("cluster {0:?} is not a DNS-1123 label")]
    Cluster(String),
    /// `rule` is not a DNS-1123 subdomain.
    #[error("rule {0:?} is not a DNS-1123 subdomain")]
    Rule(String),
    /// `clusterID` is empty or longer than 256 bytes.
    #[error("clusterID is empty or longer than 256 bytes")]
    ClusterId,
    /// Too many problems, or a message too long.
    #[error("{0}")]
    TooLarge(&'static str),
    /// The record does not match the key it was read from.
    #[error("record names {record:?}, its key {key:?}")]
    KeyMismatch {
        /// What the record says.
        record: String,
        /// What the key says.
        key: String,
    },
}

impl RuleStatusRecord {
    /// JSON with `"schema": "fleetbus.io/rulestatus/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(RULE_STATUS_SCHEMA, self)
    }

    /// Decodes a record; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(RULE_STATUS_SCHEMA, bytes)
    }

    /// The record's key.
    pub fn key(&self) -> RuleStatusKey {
        RuleStatusKey {
            cluster: self.cluster.clone(),
            cluster_id: self.cluster_id.clone(),
            rule: self.rule.clone(),
        }
    }

    /// Checks names and bounds, and that the record is the one `key` should hold
    /// (a member may write only under its own name: a record claiming another
    /// cluster is not shown).
    pub fn validate(&self, key: &RuleStatusKey) -> Result<(), InvalidRuleStatus> {
        if !is_dns1123_label(&self.cluster) {
            return Err(InvalidRuleStatus::Cluster(self.cluster.clone()));
        }
        if !is_dns1123_subdomain(&self.rule) {
            return Err(InvalidRuleStatus::Rule(self.rule.clone()));
        }
        if self.cluster_id.is_empty() || self.cluster_id.len() > 256 {
            return Err(InvalidRuleStatus::ClusterId);
        }
        if self.problems.len() > MAX_PROBLEMS {
            return Err(InvalidRuleStatus::TooLarge("more than 20 problems"));
        }
        let long = |m: &str| m.len() > MAX_MESSAGE_LEN;
        if long(&self.message)
            || self
                .problems
                .iter()
                .any(|p| long(&p.message) || long(&p.object))
        {
            return Err(InvalidRuleStatus::TooLarge("a message longer than 1 KiB"));
        }
        let own = self.key();
        if &own != key {
            return Err(InvalidRuleStatus::KeyMismatch {
                record: own.to_key(),
                key: key.to_key(),
            });
        }
        Ok(())
    }
}

/// Cuts `message` to at most [`MAX_MESSAGE_LEN`] bytes on a char boundary.
pub fn cut_message(message: &str) -> String {
    if message.len() <= MAX_MESSAGE_LEN {
        return message.to_owned();
    }
    let mut end = MAX_MESSAGE_LEN - '…'.len_utf8();
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &message[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RuleStatusRecord {
        RuleStatusRecord {
            cluster: "east".into(),
            cluster_id: "6f1c".into(),
            rule: "cfg.shared".into(),
            observed_generation: Some(3),
            state: RuleCellState::Conflict,
            reason: "Conflict".into(),
            message: "1 object held by another owner".into(),
            sink: true,
            source: false,
            objects_synced: 4,
            conflicts: 1,
            errors: 0,
            skipped: 0,
            refused: 0,
            ready_copies: None,
            reported_copies: None,
            placed_here: None,
            placed_elsewhere: None,
            problems: vec![RuleProblem {
                kind: ProblemKind::Conflict,
                object: "ConfigMap shared/app".into(),
                message: "held by a local object".into(),
            }],
            problems_total: 1,
            last_sync_time: None,
            updated_at: "2026-11-27T01:00:00Z".parse().unwrap(),
        }
    }

    #[test]
    fn key_round_trips_with_dots_in_the_rule_name() {
        let k = record().key();
        let text = k.to_key();
        assert_eq!(text.split('.').count(), 4, "{text}");
        assert_eq!(RuleStatusKey::parse(&text).unwrap(), k);
        assert!(RuleStatusKey::parse("status.a.b").is_err());
        assert!(RuleStatusKey::parse("cluster.a.b.c").is_err());
    }

    #[test]
    fn record_round_trips_and_names_its_schema_first() {
        let r = record();
        let bytes = r.encode().unwrap();
        assert!(bytes.starts_with(br#"{"schema":"fleetbus.io/rulestatus/v1""#));
        assert_eq!(RuleStatusRecord::decode(&bytes).unwrap(), r);
    }

    #[test]
    fn a_record_under_another_clusters_key_is_invalid() {
        let r = record();
        assert_eq!(r.validate(&r.key()), Ok(()));
        let mut forged = r.key();
        forged.cluster = "west".into();
        assert!(matches!(
            r.validate(&forged),
            Err(InvalidRuleStatus::KeyMismatch { .. })
        ));
        let mut bad = r.clone();
        bad.cluster = "East".into();
        assert!(bad.validate(&bad.key()).is_err());
        let mut many = r.clone();
        many.problems = vec![r.problems[0].clone(); MAX_PROBLEMS + 1];
        assert!(many.validate(&many.key()).is_err());
    }

    #[test]
    fn long_messages_are_cut_on_a_char_boundary() {
        let m = "é".repeat(MAX_MESSAGE_LEN);
        let cut = cut_message(&m);
        assert!(cut.len() <= MAX_MESSAGE_LEN);
        assert!(cut.ends_with('…'));
        assert_eq!(cut_message("short"), "short");
    }
}
