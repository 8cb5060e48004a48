//! Placement decisions (PROTOCOL §6.10): the record an origin keeps per
//! placement unit — a (rule, source object), or a placement group — on
//! `<p>.placement.<origin>.<unit>`, last value per subject. The origin alone
//! decides (it writes the record, signed in the secure mode); a sink copies
//! an object only where the record chooses it, keeps its copy untouched
//! while it is `draining` or `kept`, and deletes it only once a record it
//! read leaves it out.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::subject::{decode_token, encode_token, ObjectKey, Prefix, SubjectError, TokenError};
use crate::time::{rfc3339_ms, rfc3339_ms_opt};

/// `schema` of a [`PlacementRecord`].
pub const PLACEMENT_RECORD_SCHEMA: &str = "fleetbus.io/placement/v1";
/// Category token: `<p>.placement.<origin>.<unit>`.
pub const PLACEMENT: &str = "placement";
/// Most clusters a record names in all: a reader's cost is bounded by it.
pub const MAX_PLACEMENT_NAMES: usize = 5_000;
/// Longest reason carried.
pub const MAX_PLACEMENT_REASON: usize = 512;

/// What one decision is about.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PlacementUnit {
    /// One rule's copies of one source object.
    Object {
        /// The rule.
        rule: String,
        /// The source object (its origin is the key's).
        object: ObjectKey,
    },
    /// Every object of every rule of a placement group (co-location).
    Group(String),
}

impl PlacementUnit {
    /// The unit as one string: `o|<rule>|<group>|<version>|<kind>|<ns>|<name>`
    /// or `g|<group>` (`|` is in no Kubernetes name).
    pub fn encode(&self) -> String {
        match self {
            Self::Object { rule, object: o } => format!(
                "o|{rule}|{}|{}|{}|{}|{}",
                o.group,
                o.version,
                o.kind,
                o.namespace.as_deref().unwrap_or(""),
                o.name
            ),
            Self::Group(g) => format!("g|{g}"),
        }
    }

    /// Inverse of [`PlacementUnit::encode`], with the origin the subject names.
    pub fn decode(origin: &str, s: &str) -> Option<Self> {
        let parts: Vec<&str> = s.split('|').collect();
        match parts.as_slice() {
            ["g", g] if !g.is_empty() => Some(Self::Group((*g).to_owned())),
            ["o", rule, group, version, kind, ns, name]
                if !rule.is_empty()
                    && !version.is_empty()
                    && !kind.is_empty()
                    && !name.is_empty() =>
            {
                Some(Self::Object {
                    rule: (*rule).to_owned(),
                    object: ObjectKey {
                        origin: origin.to_owned(),
                        group: (*group).to_owned(),
                        version: (*version).to_owned(),
                        kind: (*kind).to_owned(),
                        namespace: (!ns.is_empty()).then(|| (*ns).to_owned()),
                        name: (*name).to_owned(),
                    },
                })
            }
            _ => None,
        }
    }

    /// A stable seed for tie-breaking hashes.
    pub fn seed(&self) -> String {
        self.encode()
    }
}

/// Identity of one decision.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PlacementKey {
    /// The origin (the only writer).
    pub origin: String,
    /// What it decides.
    pub unit: PlacementUnit,
}

impl PlacementKey {
    /// `<p>.placement.<origin>.<unit>` (each one escaped token).
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        format!(
            "{prefix}.{PLACEMENT}.{}.{}",
            encode_token(&self.origin),
            encode_token(&self.unit.encode())
        )
    }

    /// Inverse of [`PlacementKey::to_subject`].
    pub fn parse_subject(prefix: &Prefix, subject: &str) -> Result<Self, SubjectError> {
        let head = format!("{prefix}.{PLACEMENT}.");
        let rest = subject
            .strip_prefix(&head)
            .ok_or_else(|| SubjectError::WrongPrefix {
                subject: subject.to_owned(),
                expected: head.clone(),
            })?;
        let (o, u) = rest
            .split_once('.')
            .filter(|(_, u)| !u.contains('.'))
            .ok_or_else(|| SubjectError::TokenCount {
                subject: subject.to_owned(),
                expected: 2,
                found: rest.split('.').count(),
            })?;
        let tok =
            |field: &'static str| move |source: TokenError| SubjectError::Token { field, source };
        let origin = decode_token(o).map_err(tok("origin"))?;
        let unit = decode_token(u).map_err(tok("unit"))?;
        let unit = PlacementUnit::decode(&origin, &unit)
            .ok_or_else(|| SubjectError::Malformed(subject.to_owned()))?;
        Ok(Self { origin, unit })
    }
}

/// `<p>.placement.>`: every decision (the PLACEMENTS stream's subjects).
pub fn all_placements(prefix: &Prefix) -> String {
    format!("{prefix}.{PLACEMENT}.>")
}

/// A chosen cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Chosen {
    /// The cluster.
    pub cluster: String,
    /// Its score when chosen.
    pub score: f64,
    /// Its share of the replicas (`placement.replicas`), if divided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replicas: Option<i64>,
    /// Why (its score, its spread domain, a failover).
    pub reason: String,
}

/// A cluster no longer chosen that keeps its copy for now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Released {
    /// The cluster.
    pub cluster: String,
    /// Since when.
    #[serde(with = "rfc3339_ms")]
    pub since: DateTime<Utc>,
    /// Why it was released.
    pub reason: String,
}

/// A cluster the decision passed over, with why (for `rules describe`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Passed {
    /// The cluster.
    pub cluster: String,
    /// Why it was not chosen.
    pub reason: String,
}

/// A chosen cluster found failed, with since when (by the origin's clock).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failing {
    /// The cluster.
    pub cluster: String,
    /// Since when it is Disconnected, ApiUnreachable or tainted NoExecute.
    #[serde(with = "rfc3339_ms")]
    pub since: DateTime<Utc>,
    /// What.
    pub reason: String,
}

/// The value at `<p>.placement.<origin>.<unit>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRecord {
    /// The rule whose placement decided (for a group: its rule first by name).
    pub rule: String,
    /// Counts changes of `chosen`.
    pub revision: u64,
    /// Where copies live, by cluster name.
    pub chosen: Vec<Chosen>,
    /// No longer chosen, keeping their copies until the chosen ones are
    /// healthy (`purge: Graciously`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub draining: Vec<Released>,
    /// No longer chosen, keeping their copies for good (`purge: Never`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kept: Vec<Released>,
    /// Chosen clusters failing, not replaced yet (within `afterSeconds`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failing: Vec<Failing>,
    /// Clusters replaced by a failover, with their replacement (failback).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replaced: Vec<(String, String)>,
    /// Matched clusters not chosen, with why (at most 50 listed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub passed: Vec<Passed>,
    /// What the fleet could not satisfy (too few clusters, a spread no
    /// cluster allows): placed best-effort, said here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// When `chosen` last changed.
    #[serde(with = "rfc3339_ms")]
    pub decided_at: DateTime<Utc>,
    /// When a draining cluster was last released (one per step).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "rfc3339_ms_opt"
    )]
    pub last_release: Option<DateTime<Utc>>,
}

/// What a sink does by a record.
#[derive(Debug, Clone, PartialEq)]
pub enum Role {
    /// Hold a copy (with its replica share, if divided).
    Chosen(Option<i64>),
    /// Keep the copy as it is: neither update nor delete it.
    Keep(String),
    /// No copy here.
    Out,
}

/// Why a record is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// It names too many clusters.
    #[error("names {0} clusters, at most {MAX_PLACEMENT_NAMES}")]
    TooManyNames(usize),
    /// A cluster named twice, or a name that is no DNS label.
    #[error("cluster {0:?} is no DNS label or is named twice")]
    BadName(String),
}

impl PlacementRecord {
    /// JSON with `"schema": "fleetbus.io/placement/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(PLACEMENT_RECORD_SCHEMA, self)
    }

    /// Decodes and validates a record.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(PLACEMENT_RECORD_SCHEMA, bytes)
    }

    /// Every cluster named once at most among chosen, draining and kept,
    /// each a DNS label, and not too many.
    pub fn validate(&self) -> Result<(), RecordError> {
        let names: Vec<&str> = self
            .chosen
            .iter()
            .map(|c| c.cluster.as_str())
            .chain(self.draining.iter().map(|d| d.cluster.as_str()))
            .chain(self.kept.iter().map(|d| d.cluster.as_str()))
            .collect();
        let total = names.len() + self.passed.len() + self.failing.len() + self.replaced.len();
        if total > MAX_PLACEMENT_NAMES {
            return Err(RecordError::TooManyNames(total));
        }
        let mut seen = std::collections::BTreeSet::new();
        for n in names {
            if !crate::k8s_names::is_dns1123_label(n) || !seen.insert(n) {
                return Err(RecordError::BadName(n.to_owned()));
            }
        }
        Ok(())
    }

    /// What `cluster` does by this record.
    pub fn role(&self, cluster: &str) -> Role {
        if let Some(c) = self.chosen.iter().find(|c| c.cluster == cluster) {
            return Role::Chosen(c.replicas);
        }
        if let Some(d) = self.draining.iter().find(|d| d.cluster == cluster) {
            return Role::Keep(format!(
                "released by the placement ({}); kept until the chosen clusters' copies are healthy",
                d.reason
            ));
        }
        if let Some(d) = self.kept.iter().find(|d| d.cluster == cluster) {
            return Role::Keep(format!(
                "released by the placement ({}); kept for good (purge: Never)",
                d.reason
            ));
        }
        Role::Out
    }

    /// The chosen clusters' names.
    pub fn chosen_names(&self) -> impl Iterator<Item = &str> {
        self.chosen.iter().map(|c| c.cluster.as_str())
    }
}

/// Cuts `s` to [`MAX_PLACEMENT_REASON`] bytes at a char boundary.
pub fn cut_reason(mut s: String) -> String {
    if s.len() > MAX_PLACEMENT_REASON {
        let mut end = MAX_PLACEMENT_REASON;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn key(ns: Option<&str>) -> ObjectKey {
        ObjectKey {
            origin: "hub".into(),
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            namespace: ns.map(str::to_owned),
            name: "web.v2".into(),
        }
    }

    #[test]
    fn subjects_round_trip_and_garbage_is_refused() {
        let p = Prefix::default();
        for unit in [
            PlacementUnit::Object {
                rule: "web.rule".into(),
                object: key(Some("apps")),
            },
            PlacementUnit::Object {
                rule: "r".into(),
                object: key(None),
            },
            PlacementUnit::Group("frontend".into()),
        ] {
            let k = PlacementKey {
                origin: "hub".into(),
                unit,
            };
            let s = k.to_subject(&p);
            assert!(s.starts_with("fleetbus.placement.hub."), "{s}");
            assert_eq!(s.split('.').count(), 4, "{s}");
            assert_eq!(PlacementKey::parse_subject(&p, &s).unwrap(), k);
        }
        for bad in [
            "fleetbus.placement.hub",
            "fleetbus.placement.hub.a.b",
            "fleetbus.placement.hub.x",
            "fleetbus.rollout.hub.x",
            "fleetbus.placement.hub.=Z3w",
        ] {
            assert!(PlacementKey::parse_subject(&p, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_record_gives_each_cluster_its_role_and_refuses_names_twice() {
        let now = crate::time::truncate_to_ms(Utc::now());
        let rec = PlacementRecord {
            rule: "r".into(),
            revision: 1,
            chosen: vec![Chosen {
                cluster: "a".into(),
                score: 0.0,
                replicas: Some(3),
                reason: String::new(),
            }],
            draining: vec![Released {
                cluster: "b".into(),
                since: now,
                reason: "failed".into(),
            }],
            kept: Vec::new(),
            failing: Vec::new(),
            replaced: Vec::new(),
            passed: Vec::new(),
            degraded: None,
            decided_at: now,
            last_release: None,
        };
        assert_eq!(rec.role("a"), Role::Chosen(Some(3)));
        assert!(matches!(rec.role("b"), Role::Keep(_)));
        assert_eq!(rec.role("c"), Role::Out);
        rec.validate().unwrap();
        let bytes = rec.encode().unwrap();
        assert_eq!(PlacementRecord::decode(&bytes).unwrap(), rec);
        let mut twice = rec.clone();
        twice.draining[0].cluster = "a".into();
        assert_eq!(twice.validate(), Err(RecordError::BadName("a".into())));
    }
}
