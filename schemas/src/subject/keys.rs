//! Typed subjects: object snapshots, drift events, reported state, conflict events and commands.

use thiserror::Error;

use super::prefix::Prefix;
use super::token::{
    decode_group, decode_namespace, decode_token, encode_group, encode_namespace, encode_token,
    TokenError,
};

/// Category token of object snapshot subjects: `<p>.obj.<origin>.<group>.<version>.<kind>.<ns>.<name>`.
pub const OBJ: &str = "obj";
/// Category token of drift event subjects: `<p>.drift.<cluster>.<group>.<kind>.<ns>.<name>`.
pub const DRIFT: &str = "drift";
/// Category token of reported-state subjects: `<p>.status.<cluster>.<group>.<version>.<kind>.<ns>.<name>`.
pub const STATUS: &str = "status";
/// Category token of conflict event subjects: `<p>.conflict.<cluster>.<group>.<version>.<kind>.<ns>.<name>`.
pub const CONFLICT: &str = "conflict";
/// Category token of command subjects: `<p>.cmd.<cluster>.<verb>`.
pub const CMD: &str = "cmd";

/// A subject that does not parse as the expected kind of fleetbus subject.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SubjectError {
    /// The subject does not start with `<prefix>.<category>.`.
    #[error("subject {subject:?} is not under {expected:?}")]
    WrongPrefix {
        /// The subject.
        subject: String,
        /// The expected leading tokens.
        expected: String,
    },
    /// Wrong number of tokens after the category.
    #[error("subject {subject:?} has {found} tokens after the category, want {expected}")]
    TokenCount {
        /// The subject.
        subject: String,
        /// Tokens expected.
        expected: usize,
        /// Tokens found.
        found: usize,
    },
    /// One token does not decode.
    #[error("invalid {field} token")]
    Token {
        /// Which field the token encodes.
        field: &'static str,
        /// Why it does not decode.
        #[source]
        source: TokenError,
    },
    /// The tokens decode but do not name what the category holds.
    #[error("subject {0:?} names no valid key")]
    Malformed(String),
}

pub(super) fn tok(field: &'static str) -> impl Fn(TokenError) -> SubjectError {
    move |source| SubjectError::Token { field, source }
}

/// Splits `subject` into the `n` tokens after `<prefix>.<category>.`.
pub(super) fn split<'a>(
    prefix: &Prefix,
    category: &str,
    subject: &'a str,
    n: usize,
) -> Result<Vec<&'a str>, SubjectError> {
    let head = format!("{prefix}.{category}.");
    let rest = subject
        .strip_prefix(&head)
        .ok_or_else(|| SubjectError::WrongPrefix {
            subject: subject.to_owned(),
            expected: head.clone(),
        })?;
    let tokens: Vec<&str> = rest.split('.').collect();
    if tokens.len() != n {
        return Err(SubjectError::TokenCount {
            subject: subject.to_owned(),
            expected: n,
            found: tokens.len(),
        });
    }
    Ok(tokens)
}

/// Splits an `apiVersion` (`apps/v1`, `v1`) into group and version.
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// Joins group and version into an `apiVersion` (`v1` for the core group).
pub fn api_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// Identity of one object published by one origin cluster; names its snapshot subject.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// Name of the cluster that published the object.
    pub origin: String,
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
}

impl ObjectKey {
    /// Builds a key from an object's `apiVersion`.
    pub fn from_api_version(
        origin: &str,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Self {
        let (group, version) = split_api_version(api_version);
        Self {
            origin: origin.to_owned(),
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.map(str::to_owned),
            name: name.to_owned(),
        }
    }

    /// Builds a key from an object's own `apiVersion`, `kind`, `metadata.namespace` and
    /// `metadata.name`; `None` if any of apiVersion, kind or name is missing.
    pub fn from_object(origin: &str, object: &serde_json::Value) -> Option<Self> {
        fn s(v: Option<&serde_json::Value>) -> Option<&str> {
            v.and_then(serde_json::Value::as_str)
        }
        let meta = object.get("metadata");
        Some(Self::from_api_version(
            origin,
            s(object.get("apiVersion"))?,
            s(object.get("kind"))?,
            s(meta.and_then(|m| m.get("namespace"))).filter(|ns| !ns.is_empty()),
            s(meta.and_then(|m| m.get("name")))?,
        ))
    }

    /// `apiVersion` of the object.
    pub fn api_version(&self) -> String {
        api_version(&self.group, &self.version)
    }

    /// `<p>.obj.<origin>.<group>.<version>.<kind>.<namespace>.<name>`, every token escaped.
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        Versioned {
            cluster: &self.origin,
            group: &self.group,
            version: &self.version,
            kind: &self.kind,
            namespace: self.namespace.as_deref(),
            name: &self.name,
        }
        .subject(prefix, OBJ)
    }

    /// Inverse of [`ObjectKey::to_subject`].
    pub fn parse_subject(prefix: &Prefix, subject: &str) -> Result<Self, SubjectError> {
        parse_versioned(prefix, OBJ, subject, "origin")
    }

    /// The drift subject key for this object as seen on `cluster`.
    pub fn drift_key(&self, cluster: &str) -> DriftKey {
        DriftKey {
            cluster: cluster.to_owned(),
            group: self.group.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// Identity of the drift events of one object on one (sink) cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DriftKey {
    /// Cluster where the drift was detected (the publisher).
    pub cluster: String,
    /// API group (`""` for core).
    pub group: String,
    /// Kind.
    pub kind: String,
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
}

impl DriftKey {
    /// `<p>.drift.<cluster>.<group>.<kind>.<namespace>.<name>`.
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        format!(
            "{prefix}.{DRIFT}.{}.{}.{}.{}.{}",
            encode_token(&self.cluster),
            encode_group(&self.group),
            encode_token(&self.kind),
            encode_namespace(self.namespace.as_deref()),
            encode_token(&self.name),
        )
    }

    /// Inverse of [`DriftKey::to_subject`].
    pub fn parse_subject(prefix: &Prefix, subject: &str) -> Result<Self, SubjectError> {
        let t = split(prefix, DRIFT, subject, 5)?;
        Ok(Self {
            cluster: decode_token(t[0]).map_err(tok("cluster"))?,
            group: decode_group(t[1]).map_err(tok("group"))?,
            kind: decode_token(t[2]).map_err(tok("kind"))?,
            namespace: decode_namespace(t[3]).map_err(tok("namespace"))?,
            name: decode_token(t[4]).map_err(tok("name"))?,
        })
    }
}

impl DriftKey {
    /// The key of this object's current drift in the drift KV bucket:
    /// `<cluster>.<group>.<kind>.<namespace>.<name>` (the drift subject without `<p>.drift.`).
    pub fn to_kv_key(&self) -> String {
        format!(
            "{}.{}.{}.{}.{}",
            encode_token(&self.cluster),
            encode_group(&self.group),
            encode_token(&self.kind),
            encode_namespace(self.namespace.as_deref()),
            encode_token(&self.name),
        )
    }

    /// Inverse of [`DriftKey::to_kv_key`].
    pub fn parse_kv_key(key: &str) -> Result<Self, SubjectError> {
        let t: Vec<&str> = key.split('.').collect();
        if t.len() != 5 {
            return Err(SubjectError::TokenCount {
                subject: key.to_owned(),
                expected: 5,
                found: t.len(),
            });
        }
        Ok(Self {
            cluster: decode_token(t[0]).map_err(tok("cluster"))?,
            group: decode_group(t[1]).map_err(tok("group"))?,
            kind: decode_token(t[2]).map_err(tok("kind"))?,
            namespace: decode_namespace(t[3]).map_err(tok("namespace"))?,
            name: decode_token(t[4]).map_err(tok("name"))?,
        })
    }

    /// Drift KV key filter for every object of `cluster`: `<cluster>.>`.
    pub fn kv_keys_of_cluster(cluster: &str) -> String {
        format!("{}.>", encode_token(cluster))
    }
}

/// Identity of the reported status of one object on one (sink) cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StatusKey {
    /// Cluster whose copy's status this is (the publisher).
    pub cluster: String,
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Object name.
    pub name: String,
}

impl StatusKey {
    /// `<p>.status.<cluster>.<group>.<version>.<kind>.<namespace>.<name>`.
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        Versioned {
            cluster: &self.cluster,
            group: &self.group,
            version: &self.version,
            kind: &self.kind,
            namespace: self.namespace.as_deref(),
            name: &self.name,
        }
        .subject(prefix, STATUS)
    }

    /// Inverse of [`StatusKey::to_subject`].
    pub fn parse_subject(prefix: &Prefix, subject: &str) -> Result<Self, SubjectError> {
        let k = parse_versioned(prefix, STATUS, subject, "cluster")?;
        Ok(Self {
            cluster: k.origin,
            group: k.group,
            version: k.version,
            kind: k.kind,
            namespace: k.namespace,
            name: k.name,
        })
    }
}

/// Identity of the conflict events about one target object on one (sink) cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConflictKey {
    /// Cluster where the conflict was detected (the publisher, the sink).
    pub cluster: String,
    /// API group (`""` for core).
    pub group: String,
    /// API version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace of the target object, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name of the target object on the sink.
    pub name: String,
}

impl ConflictKey {
    /// `<p>.conflict.<cluster>.<group>.<version>.<kind>.<namespace>.<name>`.
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        Versioned {
            cluster: &self.cluster,
            group: &self.group,
            version: &self.version,
            kind: &self.kind,
            namespace: self.namespace.as_deref(),
            name: &self.name,
        }
        .subject(prefix, CONFLICT)
    }

    /// Inverse of [`ConflictKey::to_subject`].
    pub fn parse_subject(prefix: &Prefix, subject: &str) -> Result<Self, SubjectError> {
        let k = parse_versioned(prefix, CONFLICT, subject, "cluster")?;
        Ok(Self {
            cluster: k.origin,
            group: k.group,
            version: k.version,
            kind: k.kind,
            namespace: k.namespace,
            name: k.name,
        })
    }
}

/// The six tokens object, status and conflict subjects share after their verb:
/// `<cluster>.<group>.<version>.<kind>.<namespace>.<name>`.
struct Versioned<'a> {
    cluster: &'a str,
    group: &'a str,
    version: &'a str,
    kind: &'a str,
    namespace: Option<&'a str>,
    name: &'a str,
}

impl Versioned<'_> {
    fn subject(&self, prefix: &Prefix, verb: &str) -> String {
        format!(
            "{prefix}.{verb}.{}.{}.{}.{}.{}.{}",
            encode_token(self.cluster),
            encode_group(self.group),
            encode_token(self.version),
            encode_token(self.kind),
            encode_namespace(self.namespace),
            encode_token(self.name),
        )
    }
}

/// Inverse of [`Versioned::subject`]; `cluster_field` names the first token in
/// errors (`origin` for objects, `cluster` for status and conflicts).
fn parse_versioned(
    prefix: &Prefix,
    verb: &str,
    subject: &str,
    cluster_field: &'static str,
) -> Result<ObjectKey, SubjectError> {
    let t = split(prefix, verb, subject, 6)?;
    Ok(ObjectKey {
        origin: decode_token(t[0]).map_err(tok(cluster_field))?,
        group: decode_group(t[1]).map_err(tok("group"))?,
        version: decode_token(t[2]).map_err(tok("version"))?,
        kind: decode_token(t[3]).map_err(tok("kind"))?,
        namespace: decode_namespace(t[4]).map_err(tok("namespace"))?,
        name: decode_token(t[5]).map_err(tok("name"))?,
    })
}

/// Verb of the drift correction command (`<p>.cmd.<cluster>.correct`).
pub const CORRECT_VERB: &str = "correct";
/// Verb of the label command (`fleetbus clusters label`).
pub const LABEL_VERB: &str = "label";
/// Verb of the sync progress query (`fleetbus sync progress`).
pub const PROGRESS_VERB: &str = "progress";
/// Verb of the rule preview query (`fleetbus rules preview`, PROTOCOL §6.8).
pub const PREVIEW_VERB: &str = "preview";
/// Verb of the origin's side of a preview (`fleetbus rules preview`, PROTOCOL §6.8).
pub const PREVIEW_SOURCE_VERB: &str = "preview-source";

/// A command addressed to one cluster's agent: `<p>.cmd.<cluster>.<verb>` (core NATS request/reply).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CommandKey {
    /// Target cluster.
    pub cluster: String,
    /// Command verb, e.g. `resync`.
    pub verb: String,
}

impl CommandKey {
    /// The drift correction command for `cluster`.
    pub fn correct(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            verb: CORRECT_VERB.to_owned(),
        }
    }

    /// The label command for `cluster`.
    pub fn label(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            verb: LABEL_VERB.to_owned(),
        }
    }

    /// The sync progress query for `cluster`.
    pub fn progress(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            verb: PROGRESS_VERB.to_owned(),
        }
    }

    /// The rule preview query for `cluster`.
    pub fn preview(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            verb: PREVIEW_VERB.to_owned(),
        }
    }

    /// The preview's source query for `cluster` (an origin).
    pub fn preview_source(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            verb: PREVIEW_SOURCE_VERB.to_owned(),
        }
    }

    /// `<p>.cmd.<cluster>.<verb>`.
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        format!(
            "{prefix}.{CMD}.{}.{}",
            encode_token(&self.cluster),
            encode_token(&self.verb)
        )
    }

    /// Inverse of [`CommandKey::to_subject`].
    pub fn parse_subject(prefix: &Prefix, subject: &str) -> Result<Self, SubjectError> {
        let t = split(prefix, CMD, subject, 2)?;
        Ok(Self {
            cluster: decode_token(t[0]).map_err(tok("cluster"))?,
            verb: decode_token(t[1]).map_err(tok("verb"))?,
        })
    }
}
