//! Progressive rollouts (PROTOCOL §6.9): the rollout record an origin keeps per
//! (rule, source object) on `<p>.rollout.<origin>.<rule>.<group>.<version>.<kind>.<ns>.<name>`,
//! and the operator's commands on `<p>.cmd.<origin>.rollout`.
//!
//! The origin alone decides: it writes the record, sinks read it. A sink runs
//! the version `admitted` lists it under, else `stable`; the envelopes of
//! versions other than the newest are kept in the version store
//! (`<p>.ver.<origin>.…`, see [`crate::subject::VersionKey`]).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::k8s_names::{is_dns1123_label, is_dns1123_subdomain};
use crate::object_ref::ObjectRef;
use crate::subject::{split_api_version, RolloutKey};
use crate::time::{rfc3339_ms, rfc3339_ms_map};

/// `schema` of a [`RolloutRecord`].
pub const ROLLOUT_RECORD_SCHEMA: &str = "fleetbus.io/rollout/v1";
/// `schema` of a [`RolloutRequest`].
pub const ROLLOUT_REQUEST_SCHEMA: &str = "fleetbus.io/rollout-request/v1";
/// `schema` of a [`RolloutReply`].
pub const ROLLOUT_REPLY_SCHEMA: &str = "fleetbus.io/rollout-reply/v1";

/// Most cluster names a record lists in all (`admitted`, `admittedAt`,
/// `failed`): a reader's cost per record is bounded by it.
pub const MAX_RECORD_NAMES: usize = 5_000;
/// Longest `reason`, `message` or failure message carried; longer ones are cut.
pub const MAX_RECORD_MESSAGE: usize = 1024;

/// Where one rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RolloutPhase {
    /// Admitting clusters to `target` step by step.
    Progressing,
    /// No admissions until an operator resumes (`pausedBy` says who paused).
    Paused,
    /// Every selected cluster runs `target`, which is now `stable`.
    Complete,
    /// An operator stopped this revision: no more admissions, clusters keep
    /// what they run; a new source version starts a new rollout.
    Aborted,
    /// An operator put every cluster back on `stable`; the source is ahead.
    RolledBack,
    /// The source was deleted: a final record naming no version.
    Gone,
}

impl RolloutPhase {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Progressing => "Progressing",
            Self::Paused => "Paused",
            Self::Complete => "Complete",
            Self::Aborted => "Aborted",
            Self::RolledBack => "RolledBack",
            Self::Gone => "Gone",
        }
    }
}

impl std::fmt::Display for RolloutPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who paused a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PausedBy {
    /// `fleetbus rules rollout pause`: only a resume lifts it.
    Operator,
    /// A failed copy under `onFailure: Pause`: a resume or a new source version lifts it.
    Failure,
}

/// The origin's decision for one (rule, source object): which version each
/// selected cluster runs. Sinks read only `stable`, `admitted` and `phase`;
/// the rest is for people and for the origin after a restart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutRecord {
    /// The origin cluster (the only writer of the subject).
    pub origin: String,
    /// The rule being rolled.
    pub rule: String,
    /// The source object on the origin (`uid` when known).
    pub source: ObjectRef,
    /// +1 for each new target.
    pub revision: u64,
    /// Content hash every selected cluster not listed in `admitted` runs;
    /// null for a new object (an unlisted cluster gets no copy yet).
    #[serde(default)]
    pub stable: Option<String>,
    /// The source's newest version (equal to `stable` once `Complete`); null
    /// when `Gone`.
    #[serde(default)]
    pub target: Option<String>,
    /// Where the rollout stands.
    pub phase: RolloutPhase,
    /// Clusters off `stable`, by the content hash they were admitted to.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub admitted: BTreeMap<String, BTreeSet<String>>,
    /// When each cluster of `admitted` was admitted (its progress deadline counts from here).
    #[serde(
        default,
        skip_serializing_if = "BTreeMap::is_empty",
        with = "rfc3339_ms_map"
    )]
    pub admitted_at: BTreeMap<String, DateTime<Utc>>,
    /// Clusters whose copy of `target` failed, and why.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failed: BTreeMap<String, String>,
    /// The group being rolled (0-based), for views.
    #[serde(default)]
    pub step: u32,
    /// Number of groups (the implicit last one included), for views.
    #[serde(default)]
    pub steps: u32,
    /// Who paused it, while `Paused`.
    #[serde(default)]
    pub paused_by: Option<PausedBy>,
    /// What it waits for or why it stopped, one word (`WaitingForReady`, `Failed`, ...).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub reason: String,
    /// The same for people; names clusters.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When the origin last changed the decision.
    #[serde(with = "rfc3339_ms")]
    pub updated_at: DateTime<Utc>,
}

/// A record that must not be acted on: skipped and counted by readers
/// (`fleetbus_sync_rejected_total{reason="rollout_malformed"}`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum InvalidRecord {
    /// A cluster name (origin, admitted, failed) that is no DNS-1123 label.
    #[error("invalid cluster name {0:?}")]
    ClusterName(String),
    /// The rule is no DNS-1123 subdomain.
    #[error("invalid rule name {0:?}")]
    RuleName(String),
    /// A content hash that is not 64 lowercase hex digits.
    #[error("invalid content hash {0:?}")]
    Hash(String),
    /// More cluster names than [`MAX_RECORD_NAMES`].
    #[error("{0} cluster names, at most {MAX_RECORD_NAMES}")]
    TooManyNames(usize),
    /// A cluster admitted to two versions at once.
    #[error("cluster {0:?} admitted twice")]
    AdmittedTwice(String),
    /// A message longer than [`MAX_RECORD_MESSAGE`].
    #[error("a message of {0} bytes, at most {MAX_RECORD_MESSAGE}")]
    MessageTooLong(usize),
    /// A phase and versions that cannot go together (`Gone` with a version, no
    /// target otherwise, `Complete` with admissions).
    #[error("phase {phase} with {what}")]
    Phase {
        /// The phase.
        phase: RolloutPhase,
        /// What contradicts it.
        what: &'static str,
    },
    /// The record is not about what its subject names (another origin, rule or object).
    #[error("the record is about {found}, its subject about {subject}")]
    Subject {
        /// What the subject names.
        subject: String,
        /// What the record names.
        found: String,
    },
}

impl RolloutRecord {
    /// JSON with `"schema": "fleetbus.io/rollout/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(ROLLOUT_RECORD_SCHEMA, self)
    }

    /// Decodes a record; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(ROLLOUT_RECORD_SCHEMA, bytes)
    }

    /// The key naming this record's subject.
    pub fn subject_key(&self) -> RolloutKey {
        let (group, version) = split_api_version(&self.source.api_version);
        RolloutKey {
            origin: self.origin.clone(),
            rule: self.rule.clone(),
            group: group.to_owned(),
            version: version.to_owned(),
            kind: self.source.kind.clone(),
            namespace: self.source.namespace.clone(),
            name: self.source.name.clone(),
        }
    }

    /// The version `cluster` runs by this record: the one `admitted` lists it
    /// under, else `stable` (None: no copy).
    pub fn version_of(&self, cluster: &str) -> Option<&str> {
        self.admitted
            .iter()
            .find(|(_, clusters)| clusters.contains(cluster))
            .map(|(hash, _)| hash.as_str())
            .or(self.stable.as_deref())
    }

    /// Checks what a reader relies on, against the subject the record came on:
    /// names, hashes, bounds, a phase its versions fit, and that the record is
    /// about what the subject names (a writer may publish only its own subtree,
    /// so this also refuses an origin speaking for another).
    pub fn validate(&self, subject: &RolloutKey) -> Result<(), InvalidRecord> {
        let mine = self.subject_key();
        if &mine != subject {
            return Err(InvalidRecord::Subject {
                subject: format!("{subject:?}"),
                found: format!("{mine:?}"),
            });
        }
        if !is_dns1123_label(&self.origin) {
            return Err(InvalidRecord::ClusterName(self.origin.clone()));
        }
        if !is_dns1123_subdomain(&self.rule) {
            return Err(InvalidRecord::RuleName(self.rule.clone()));
        }
        for h in self
            .stable
            .iter()
            .chain(&self.target)
            .chain(self.admitted.keys())
        {
            if !is_content_hash(h) {
                return Err(InvalidRecord::Hash(h.clone()));
            }
        }
        let names = self.admitted.values().map(BTreeSet::len).sum::<usize>()
            + self.admitted_at.len()
            + self.failed.len();
        if names > MAX_RECORD_NAMES {
            return Err(InvalidRecord::TooManyNames(names));
        }
        let mut seen = BTreeSet::new();
        for c in self.admitted.values().flatten() {
            if !seen.insert(c) {
                return Err(InvalidRecord::AdmittedTwice(c.clone()));
            }
        }
        for c in seen
            .into_iter()
            .chain(self.admitted_at.keys())
            .chain(self.failed.keys())
        {
            if !is_dns1123_label(c) {
                return Err(InvalidRecord::ClusterName(c.clone()));
            }
        }
        for m in [&self.reason, &self.message]
            .into_iter()
            .chain(self.failed.values())
        {
            if m.len() > MAX_RECORD_MESSAGE {
                return Err(InvalidRecord::MessageTooLong(m.len()));
            }
        }
        self.phase_fits()
    }

    fn phase_fits(&self) -> Result<(), InvalidRecord> {
        let bad = |what| {
            Err(InvalidRecord::Phase {
                phase: self.phase,
                what,
            })
        };
        match self.phase {
            RolloutPhase::Gone if self.target.is_some() || !self.admitted.is_empty() => {
                bad("a version")
            }
            RolloutPhase::Gone => Ok(()),
            _ if self.target.is_none() => bad("no target"),
            RolloutPhase::Complete if !self.admitted.is_empty() => bad("admitted clusters"),
            _ => Ok(()),
        }
    }
}

/// 64 lowercase hex digits: what [`crate::envelope::content_hash`] writes.
pub fn is_content_hash(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Cuts `s` to [`MAX_RECORD_MESSAGE`] bytes on a char boundary.
pub fn cut_message(mut s: String) -> String {
    if s.len() > MAX_RECORD_MESSAGE {
        let mut cut = MAX_RECORD_MESSAGE;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// What an operator asks of an origin's rollouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RolloutAction {
    /// Stop admitting clusters.
    Pause,
    /// Admit again; clears failures and gives admitted clusters a new deadline.
    Resume,
    /// Stop this revision for good; clusters keep what they run.
    Abort,
    /// Put every cluster back on `stable` (refused when there is none).
    Rollback,
}

/// `fleetbus rules rollout <action> RULE [--object Kind/ns/name]`, sent to
/// each origin of the rule on `<p>.cmd.<origin>.rollout`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutRequest {
    /// The rule.
    pub rule: String,
    /// What to do.
    pub action: RolloutAction,
    /// Only this source object; null: every rollout of the rule from this origin.
    #[serde(default)]
    pub object: Option<ObjectRef>,
}

impl RolloutRequest {
    /// JSON with `"schema": "fleetbus.io/rollout-request/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(ROLLOUT_REQUEST_SCHEMA, self)
    }

    /// Decodes a request; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(ROLLOUT_REQUEST_SCHEMA, bytes)
    }
}

/// The origin's answer, sent once every changed record is stored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RolloutReply {
    /// The cluster that answered.
    pub cluster: String,
    /// How many of its rollouts the request concerned (0: this origin has
    /// none of the rule, or not of the object asked).
    #[serde(default)]
    pub matched: u64,
    /// The source objects whose rollout changed.
    #[serde(default)]
    pub changed: Vec<ObjectRef>,
    /// Why the request was refused (unknown rule, nothing to roll back to, rate), else null.
    #[serde(default)]
    pub error: Option<String>,
    /// Refused for rate: milliseconds until the agent takes a request again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl RolloutReply {
    /// JSON with `"schema": "fleetbus.io/rollout-reply/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(ROLLOUT_REPLY_SCHEMA, self)
    }

    /// Decodes a reply; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(ROLLOUT_REPLY_SCHEMA, bytes)
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

#[cfg(test)]
mod tests;
