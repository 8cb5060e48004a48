//! `fleetbus rules preview` on the wire (PROTOCOL §6.8): a request to one cluster's agent
//! on `<p>.cmd.<cluster>.preview` asking what a candidate ResourceSyncRule (or the current
//! rule with a changed source object) would create, update and delete there, and the
//! agent's reply. The agent writes nothing to answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::drift::DriftChange;
use crate::object_ref::ObjectRef;

/// `schema` of a [`PreviewRequest`].
pub const PREVIEW_REQUEST_SCHEMA: &str = "fleetbus.io/preview-request/v1";
/// `schema` of a [`PreviewReply`].
pub const PREVIEW_REPLY_SCHEMA: &str = "fleetbus.io/preview-reply/v1";
/// The API group and version a candidate rule must declare.
pub const RULE_API_VERSION: &str = "fleetbus.io/v1alpha1";
/// The kind a candidate rule must declare.
pub const RULE_KIND: &str = "ResourceSyncRule";

/// What to preview: a candidate rule (`rule`: the whole ResourceSyncRule object, as
/// `kubectl apply -f` would send it) replacing the rule of the same name or added, or
/// the current rule named `ruleName` as it is. `source`, when set, is a changed source
/// object, taken as if its origin had published it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewRequest {
    /// The candidate rule object. Absent: the current rule `ruleName`.
    #[serde(default)]
    pub rule: Option<Value>,
    /// The rule's name: required without `rule`; with it, must equal its
    /// `metadata.name`.
    #[serde(default)]
    pub rule_name: Option<String>,
    /// A changed source object.
    #[serde(default)]
    pub source: Option<PreviewSource>,
    /// For a new rule: the cluster it will be created on (its author, which a
    /// cluster's SyncPolicy may name). Absent: each agent takes itself. A rule that
    /// exists keeps its author.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Envelopes origins would publish for the candidate that are not on the bus as
    /// they are (their `preview-source` replies, forwarded by the CLI): checked as
    /// envelopes from the bus are, and taken over the bus's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<SourceEnvelope>,
    /// The CLI asked every origin for `sources` and every page of every answer is in
    /// `sources`: the agent then sees every object the candidate selects.
    #[serde(default, skip_serializing_if = "is_false")]
    pub sources_complete: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A source object as an origin would publish it (for `--rule NAME -f source.yaml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewSource {
    /// The cluster the object lives on.
    pub origin: String,
    /// The object (apiVersion, kind, metadata.name, and a namespace if namespaced).
    pub object: Value,
}

/// Why a [`PreviewRequest`] is refused before any work (the reply's `error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PreviewInvalid {
    /// Neither a rule nor a rule name.
    #[error("the request names no rule: give the candidate rule or ruleName")]
    NoRule,
    /// The candidate is not a ResourceSyncRule object.
    #[error("the candidate rule is not a {RULE_API_VERSION} {RULE_KIND}: {0}")]
    NotARule(String),
    /// A rule name that is not a DNS subdomain.
    #[error("invalid rule name {0:?}: must be a DNS-1123 subdomain")]
    BadName(String),
    /// `ruleName` and the rule's `metadata.name` differ.
    #[error("ruleName {given:?} is not the candidate rule's name {name:?}")]
    NameMismatch {
        /// `ruleName`.
        given: String,
        /// The candidate's `metadata.name`.
        name: String,
    },
    /// `author` is not a cluster name.
    #[error("invalid author {0:?}: not a cluster name")]
    BadAuthor(String),
    /// The changed source object is not usable.
    #[error("the source object is not usable: {0}")]
    BadSource(String),
    /// A `preview-source` request without a candidate rule.
    #[error("the request carries no candidate rule")]
    NoCandidate,
    /// A paging token that is not one this protocol gives.
    #[error("invalid paging token {0:?}")]
    BadToken(String),
}

impl PreviewRequest {
    /// JSON with `"schema": "fleetbus.io/preview-request/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(PREVIEW_REQUEST_SCHEMA, self)
    }

    /// Decodes a request; another `schema` is [`DecodeError::UnsupportedVersion`]. Not
    /// validated: see [`PreviewRequest::validate`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(PREVIEW_REQUEST_SCHEMA, bytes)
    }

    /// Checks the request's shape and returns the rule's name. Whether the rule's spec
    /// is valid is the agent's to say (it compiles it as it compiles every rule).
    pub fn validate(&self) -> Result<String, PreviewInvalid> {
        let name = match (&self.rule, &self.rule_name) {
            (None, None) => return Err(PreviewInvalid::NoRule),
            (None, Some(given)) => given.clone(),
            (Some(rule), given) => {
                let name = candidate_name(rule)?;
                if let Some(given) = given.as_ref().filter(|g| **g != name) {
                    return Err(PreviewInvalid::NameMismatch {
                        given: given.clone(),
                        name,
                    });
                }
                name
            }
        };
        if !crate::k8s_names::is_dns1123_subdomain(&name) {
            return Err(PreviewInvalid::BadName(name));
        }
        if let Some(source) = &self.source {
            source.validate()?;
        }
        if let Some(author) = self.author.as_ref() {
            if !crate::k8s_names::is_dns1123_label(author) {
                return Err(PreviewInvalid::BadAuthor(author.clone()));
            }
        }
        Ok(name)
    }
}

/// The candidate's `metadata.name`, once its apiVersion, kind and spec are checked.
fn candidate_name(rule: &Value) -> Result<String, PreviewInvalid> {
    let s = |p: &str| rule.pointer(p).and_then(Value::as_str);
    let not = |why: String| Err(PreviewInvalid::NotARule(why));
    if !rule.is_object() {
        return not("not an object".to_owned());
    }
    if s("/apiVersion") != Some(RULE_API_VERSION) || s("/kind") != Some(RULE_KIND) {
        return not(format!(
            "apiVersion {:?}, kind {:?}",
            s("/apiVersion").unwrap_or_default(),
            s("/kind").unwrap_or_default()
        ));
    }
    if !rule.get("spec").is_some_and(Value::is_object) {
        return not("no spec".to_owned());
    }
    match s("/metadata/name") {
        Some(name) => Ok(name.to_owned()),
        None => not("no metadata.name".to_owned()),
    }
}

impl PreviewSource {
    /// The object names its kind and place, and the origin is a cluster name.
    pub fn validate(&self) -> Result<(), PreviewInvalid> {
        let bad = |why: &str| Err(PreviewInvalid::BadSource(why.to_owned()));
        if !crate::k8s_names::is_dns1123_label(&self.origin) {
            return bad("origin is not a cluster name");
        }
        let s = |p: &str| self.object.pointer(p).and_then(Value::as_str);
        if s("/apiVersion").is_none_or(str::is_empty) || s("/kind").is_none_or(str::is_empty) {
            return bad("no apiVersion or kind");
        }
        if s("/metadata/name").is_none_or(str::is_empty) {
            return bad("no metadata.name");
        }
        if self
            .object
            .pointer("/metadata/namespace")
            .is_some_and(|n| !n.is_string())
        {
            return bad("metadata.namespace is not a string");
        }
        Ok(())
    }
}

/// What the agent would do with one copy it would delete.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum DeleteAction {
    /// Deleted.
    Delete,
    /// Left in place, no longer managed (`orphanPolicy: Orphan`).
    Orphan,
    /// Kept for now (its origin is in doubt, or deleting it would take objects
    /// fleetbus does not manage along): nothing is done.
    Keep,
}

/// A copy the rule would create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewCreate {
    /// The copy.
    pub object: ObjectRef,
    /// The cluster its source lives on.
    pub origin: String,
}

/// A copy the rule would replace, and how it would change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewUpdate {
    /// The copy.
    pub object: ObjectRef,
    /// The cluster its source lives on.
    pub origin: String,
    /// Leaf differences, live against what the write would make of it (as the
    /// API server's dry run returns it), sorted by path; values of Secrets and
    /// of `seal: true` rules redacted as in drift events.
    #[serde(default)]
    pub changes: Vec<DriftChange>,
    /// Changes cut to fit the reply in the bus's message size.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub changes_omitted: u64,
    /// Why, when it is not the new desired state: it corrects drift.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A copy the rule would no longer want.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewDelete {
    /// The copy.
    pub object: ObjectRef,
    /// What would become of it.
    pub action: DeleteAction,
    /// Why it is kept, for `Keep`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A copy the rule would not write, and why (a conflict or an error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewProblem {
    /// The copy (or, for an error before there is one, the source object).
    pub object: ObjectRef,
    /// What is wrong.
    pub message: String,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What one agent found. `error` set: the request was refused as a whole (malformed,
/// invalid rule, rate) and the lists are empty.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewReply {
    /// The cluster that answered.
    pub cluster: String,
    /// The rule previewed.
    #[serde(default)]
    pub rule: String,
    /// Whether the rule's `clusterSelector` selects this cluster.
    #[serde(default)]
    pub selected: bool,
    /// Copies it would create.
    #[serde(default)]
    pub creates: Vec<PreviewCreate>,
    /// Copies it would replace.
    #[serde(default)]
    pub updates: Vec<PreviewUpdate>,
    /// Copies it would delete, orphan or keep.
    #[serde(default)]
    pub deletes: Vec<PreviewDelete>,
    /// Copies another rule or a local object would keep it from writing.
    #[serde(default)]
    pub conflicts: Vec<PreviewProblem>,
    /// Copies it could not make or write.
    #[serde(default)]
    pub errors: Vec<PreviewProblem>,
    /// Copies already equal to what it wants.
    #[serde(default)]
    pub unchanged: u64,
    /// Of the changes listed, how many wait for a hold (`suspend`, `dependsOn`) before
    /// they happen.
    #[serde(default)]
    pub held: u64,
    /// Items (creates, updates, deletes, conflicts, errors) cut to fit the reply.
    #[serde(default)]
    pub omitted: u64,
    /// Source objects the candidate selects whose copies its placement puts
    /// on other clusters (`spec.placement`): no copy of them here.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub placed_elsewhere: u64,
    /// What this agent could not see, so the lists may miss changes (e.g. objects
    /// origins do not publish yet because no current rule selects them).
    #[serde(default)]
    pub incomplete: Vec<String>,
    /// Why the request was refused as a whole, else null.
    #[serde(default)]
    pub error: Option<String>,
    /// Refused for rate: milliseconds until the agent takes a request again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl PreviewReply {
    /// JSON with `"schema": "fleetbus.io/preview-reply/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(PREVIEW_REPLY_SCHEMA, self)
    }

    /// Decodes a reply; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(PREVIEW_REPLY_SCHEMA, bytes)
    }

    /// A reply refusing the whole request.
    pub fn refused(cluster: &str, error: impl Into<String>) -> Self {
        Self {
            cluster: cluster.to_owned(),
            error: Some(error.into()),
            ..Self::default()
        }
    }

    /// Whether applying the rule would change anything here (a `Keep` changes nothing;
    /// items cut to fit count as changes).
    pub fn has_changes(&self) -> bool {
        !self.creates.is_empty()
            || !self.updates.is_empty()
            || self.deletes.iter().any(|d| d.action != DeleteAction::Keep)
            || self.omitted > 0
    }

    /// Cuts the reply until it encodes in at most `max` bytes: path changes first
    /// (counted per update in `changesOmitted`), then items from the end of the longest
    /// list (counted in `omitted`). Returns the encoded reply.
    pub fn fit(&mut self, max: usize) -> Result<Vec<u8>, EncodeError> {
        let mut bytes = self.encode()?;
        while bytes.len() > max {
            if let Some(u) = self.updates.iter_mut().max_by_key(|u| u.changes.len()) {
                if !u.changes.is_empty() {
                    // Half of the longest list of changes at a time: few encodes.
                    let keep = u.changes.len() / 2;
                    let cut = u.changes.len() - keep;
                    u.changes.truncate(keep);
                    u.changes_omitted += cut as u64;
                    bytes = self.encode()?;
                    continue;
                }
            }
            let lists = [
                self.creates.len(),
                self.updates.len(),
                self.deletes.len(),
                self.conflicts.len(),
                self.errors.len(),
            ];
            let (longest, &n) = lists
                .iter()
                .enumerate()
                .max_by_key(|(_, n)| **n)
                .unwrap_or((0, &0));
            if n == 0 {
                // Nothing left to cut: what remains is the reply's frame.
                break;
            }
            let cut = n.div_ceil(2).max(1);
            let keep = n - cut;
            match longest {
                0 => self.creates.truncate(keep),
                1 => self.updates.truncate(keep),
                2 => self.deletes.truncate(keep),
                3 => self.conflicts.truncate(keep),
                _ => self.errors.truncate(keep),
            }
            self.omitted += cut as u64;
            bytes = self.encode()?;
        }
        Ok(bytes)
    }
}

/// `schema` of a [`PreviewSourceRequest`].
pub const PREVIEW_SOURCE_REQUEST_SCHEMA: &str = "fleetbus.io/preview-source-request/v1";
/// `schema` of a [`PreviewSourceReply`].
pub const PREVIEW_SOURCE_REPLY_SCHEMA: &str = "fleetbus.io/preview-source-reply/v1";
/// The longest paging token taken (a namespace and a name, each at most 253 bytes).
const MAX_TOKEN: usize = 512;

/// One envelope as it would be on the bus: its subject (`<p>.obj.<origin>.…`, the
/// claim a sink checks it against) and its bytes, standard base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceEnvelope {
    /// The subject the origin would publish it on.
    pub subject: String,
    /// The envelope's bytes (signed, sealed, as published), base64.
    pub data: String,
}

impl SourceEnvelope {
    /// `bytes` published on `subject`.
    pub fn new(subject: String, bytes: &[u8]) -> Self {
        use base64::Engine as _;
        Self {
            subject,
            data: base64::engine::general_purpose::STANDARD.encode(bytes),
        }
    }

    /// The envelope's bytes; None when `data` is not base64.
    pub fn bytes(&self) -> Option<Vec<u8>> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(&self.data)
            .ok()
    }

    /// What it costs in an encoded request or reply, beyond its frame.
    pub fn encoded_len(&self) -> usize {
        // `{"subject":"…","data":"…"},` (25 bytes besides the two); subjects
        // and base64 need no JSON escapes.
        self.subject.len() + self.data.len() + 25
    }
}

/// `<p>.cmd.<cluster>.preview-source`: the envelopes this origin would publish for a
/// candidate rule that the bus does not hold as they are (PROTOCOL §6.8).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewSourceRequest {
    /// The candidate rule object, as for [`PreviewRequest::rule`].
    pub rule: Value,
    /// For a new rule: the cluster it will be created on, as for
    /// [`PreviewRequest::author`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// The `next` of the previous page; absent: the first page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

impl PreviewSourceRequest {
    /// JSON with `"schema": "fleetbus.io/preview-source-request/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(PREVIEW_SOURCE_REQUEST_SCHEMA, self)
    }

    /// Decodes a request; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(PREVIEW_SOURCE_REQUEST_SCHEMA, bytes)
    }

    /// Checks the request's shape: the candidate's name, and where the page starts.
    pub fn validate(&self) -> Result<(String, Option<PageToken>), PreviewInvalid> {
        if self.rule.is_null() {
            return Err(PreviewInvalid::NoCandidate);
        }
        let as_preview = PreviewRequest {
            rule: Some(self.rule.clone()),
            author: self.author.clone(),
            ..PreviewRequest::default()
        };
        let name = as_preview.validate()?;
        let after = self.after.as_deref().map(PageToken::parse).transpose()?;
        Ok((name, after))
    }
}

/// Where a page of a `preview-source` answer ends: the last object's namespace (None
/// for a cluster-scoped kind) and name; the next page starts after it. Written
/// `namespace/name` (`/name` cluster-scoped).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PageToken {
    /// The namespace, None for a cluster-scoped object.
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl PageToken {
    /// `namespace/name`.
    pub fn encode(&self) -> String {
        format!("{}/{}", self.namespace.as_deref().unwrap_or(""), self.name)
    }

    /// Inverse of [`PageToken::encode`]: a DNS-1123 label for the namespace, a name
    /// without `/`.
    pub fn parse(token: &str) -> Result<Self, PreviewInvalid> {
        let bad = || PreviewInvalid::BadToken(token.chars().take(64).collect());
        if token.len() > MAX_TOKEN {
            return Err(bad());
        }
        let (ns, name) = token.split_once('/').ok_or_else(bad)?;
        let plain = |s: &str| !s.chars().any(|c| c == '/' || c.is_control());
        if name.is_empty() || !plain(name) {
            return Err(bad());
        }
        let namespace = match ns {
            "" => None,
            ns if crate::k8s_names::is_dns1123_label(ns) => Some(ns.to_owned()),
            _ => return Err(bad()),
        };
        Ok(Self {
            namespace,
            name: name.to_owned(),
        })
    }
}

/// One origin's answer to a [`PreviewSourceRequest`]: a page of envelopes, and the
/// token of the next page if there is one.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewSourceReply {
    /// The origin that answered.
    pub cluster: String,
    /// The envelopes it would publish for the candidate that the bus does not hold as
    /// they are, by namespace and name.
    #[serde(default)]
    pub envelopes: Vec<SourceEnvelope>,
    /// Objects the candidate selects that it cannot give (too large to publish or to
    /// fit a reply): a preview without them may miss creates.
    #[serde(default)]
    pub skipped: Vec<PreviewProblem>,
    /// The `after` of the next page; absent: this was the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
    /// Why the request was refused as a whole, else null.
    #[serde(default)]
    pub error: Option<String>,
    /// Refused for rate: milliseconds until the agent takes a request again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl PreviewSourceReply {
    /// JSON with `"schema": "fleetbus.io/preview-source-reply/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(PREVIEW_SOURCE_REPLY_SCHEMA, self)
    }

    /// Decodes a reply; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(PREVIEW_SOURCE_REPLY_SCHEMA, bytes)
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(name: &str) -> Value {
        json!({"apiVersion": RULE_API_VERSION, "kind": RULE_KIND,
               "metadata": {"name": name},
               "spec": {"groupVersionKind": {"version": "v1", "kind": "Secret"}}})
    }

    #[test]
    fn a_request_round_trips_and_names_its_rule() {
        let req = PreviewRequest {
            rule: Some(rule("web")),
            ..PreviewRequest::default()
        };
        let bytes = req.encode().unwrap();
        assert!(std::str::from_utf8(&bytes)
            .unwrap()
            .starts_with(r#"{"schema":"fleetbus.io/preview-request/v1""#));
        let back = PreviewRequest::decode(&bytes).unwrap();
        assert_eq!(back, req);
        assert_eq!(back.validate(), Ok("web".to_owned()));
        let by_name = PreviewRequest {
            rule_name: Some("web".into()),
            source: Some(PreviewSource {
                origin: "c1".into(),
                object: json!({"apiVersion": "v1", "kind": "Secret",
                               "metadata": {"name": "s", "namespace": "a"}}),
            }),
            ..PreviewRequest::default()
        };
        assert_eq!(by_name.validate(), Ok("web".to_owned()));
    }

    #[test]
    fn malformed_requests_say_why() {
        for bad in [
            &b"not json"[..],
            br#"{"schema":"fleetbus.io/preview-request/v9"}"#,
            br#"{"schema":"fleetbus.io/preview-request/v1","ruleName":5}"#,
            br#"{"schema":"fleetbus.io/preview-request/v1","ruleName":["x"]}"#,
            br#"{"schema":"fleetbus.io/preview-request/v1","source":{"origin":"c1"}}"#,
        ] {
            assert!(PreviewRequest::decode(bad).is_err(), "{bad:?}");
        }
        let check = |req: PreviewRequest| req.validate().unwrap_err();
        assert_eq!(check(PreviewRequest::default()), PreviewInvalid::NoRule);
        let mut not_a_rule = rule("web");
        not_a_rule["kind"] = json!("ConfigMap");
        assert!(matches!(
            check(PreviewRequest {
                rule: Some(not_a_rule),
                ..PreviewRequest::default()
            }),
            PreviewInvalid::NotARule(_)
        ));
        for r in [
            json!(5),
            json!({"apiVersion": RULE_API_VERSION, "kind": RULE_KIND, "spec": {}}),
            json!({"apiVersion": RULE_API_VERSION, "kind": RULE_KIND, "metadata": {"name": "x"}}),
        ] {
            assert!(matches!(
                check(PreviewRequest {
                    rule: Some(r),
                    ..PreviewRequest::default()
                }),
                PreviewInvalid::NotARule(_)
            ));
        }
        assert_eq!(
            check(PreviewRequest {
                rule: Some(rule("web")),
                rule_name: Some("other".into()),
                ..PreviewRequest::default()
            }),
            PreviewInvalid::NameMismatch {
                given: "other".into(),
                name: "web".into()
            }
        );
        assert!(matches!(
            check(PreviewRequest {
                rule_name: Some("Not A Name".into()),
                ..PreviewRequest::default()
            }),
            PreviewInvalid::BadName(_)
        ));
        assert!(matches!(
            check(PreviewRequest {
                rule: Some(rule("web")),
                author: Some("c1.*".into()),
                ..PreviewRequest::default()
            }),
            PreviewInvalid::BadAuthor(_)
        ));
        for (origin, object) in [
            ("c1", json!({"kind": "Secret", "metadata": {"name": "s"}})),
            (
                "c1",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}}),
            ),
            (
                "c1",
                json!({"apiVersion": "v1", "kind": "Secret",
                          "metadata": {"name": "s", "namespace": 3}}),
            ),
            (
                "c1.evil.>",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}),
            ),
        ] {
            let req = PreviewRequest {
                rule_name: Some("web".into()),
                source: Some(PreviewSource {
                    origin: origin.into(),
                    object,
                }),
                ..PreviewRequest::default()
            };
            assert!(matches!(check(req), PreviewInvalid::BadSource(_)));
        }
    }

    fn secret(name: &str) -> ObjectRef {
        ObjectRef::new("v1", "Secret", Some("a"), name)
    }

    #[test]
    fn changes_are_what_is_created_updated_deleted_but_not_kept() {
        let mut reply = PreviewReply::refused("c2", "x");
        reply.error = None;
        assert!(!reply.has_changes());
        reply.deletes.push(PreviewDelete {
            object: secret("k"),
            action: DeleteAction::Keep,
            reason: Some("origin in doubt".into()),
        });
        reply.unchanged = 4;
        assert!(!reply.has_changes());
        reply.deletes.push(PreviewDelete {
            object: secret("x"),
            action: DeleteAction::Orphan,
            reason: None,
        });
        assert!(reply.has_changes());
        let back = PreviewReply::decode(&reply.encode().unwrap()).unwrap();
        assert_eq!(back, reply);
    }

    #[test]
    fn a_large_reply_is_cut_to_fit_changes_first() {
        let mut reply = PreviewReply {
            cluster: "c2".into(),
            rule: "web".into(),
            ..PreviewReply::default()
        };
        for i in 0..200 {
            reply.creates.push(PreviewCreate {
                object: secret(&format!("new-{i}")),
                origin: "c1".into(),
            });
        }
        reply.updates.push(PreviewUpdate {
            object: secret("u"),
            origin: "c1".into(),
            changes: (0..500)
                .map(|i| DriftChange {
                    path: format!("/data/k{i}"),
                    desired: json!("x".repeat(40)),
                    live: Value::Null,
                })
                .collect(),
            changes_omitted: 0,
            reason: None,
        });
        let whole = reply.encode().unwrap().len();
        let mut cut = reply.clone();
        let bytes = cut.fit(whole / 2).unwrap();
        assert!(bytes.len() <= whole / 2);
        // Changes went first: every create is still there.
        assert_eq!(cut.creates.len(), 200);
        assert_eq!(cut.omitted, 0);
        let u = &cut.updates[0];
        assert_eq!(u.changes.len() as u64 + u.changes_omitted, 500);
        // Then items, counted.
        let mut small = reply.clone();
        let bytes = small.fit(4096).unwrap();
        assert!(bytes.len() <= 4096);
        assert!(small.omitted > 0);
        assert_eq!(
            small.creates.len() as u64 + small.updates.len() as u64 + small.omitted,
            201
        );
        assert!(small.has_changes());
        // A reply that fits is left alone.
        let mut same = reply.clone();
        same.fit(usize::MAX).unwrap();
        assert_eq!(same, reply);
    }
    #[test]
    fn a_preview_source_request_round_trips_and_pages() {
        let req = PreviewSourceRequest {
            rule: rule("web"),
            author: Some("c2".into()),
            after: Some(
                PageToken {
                    namespace: Some("a".into()),
                    name: "db".into(),
                }
                .encode(),
            ),
        };
        let bytes = req.encode().unwrap();
        assert!(std::str::from_utf8(&bytes)
            .unwrap()
            .starts_with(r#"{"schema":"fleetbus.io/preview-source-request/v1""#));
        let back = PreviewSourceRequest::decode(&bytes).unwrap();
        assert_eq!(back, req);
        let (name, after) = back.validate().unwrap();
        assert_eq!(name, "web");
        let after = after.unwrap();
        assert_eq!(
            (after.namespace.as_deref(), after.name.as_str()),
            (Some("a"), "db")
        );
        let cluster = PageToken::parse("/node-1").unwrap();
        assert_eq!(cluster.namespace, None);
        assert_eq!(PageToken::parse(&cluster.encode()).unwrap(), cluster);
        // Pages follow each other in namespace, name order.
        assert!(cluster < after);
        let reply = PreviewSourceReply {
            cluster: "c1".into(),
            envelopes: vec![SourceEnvelope::new(
                "fleetbus.obj.c1.x".into(),
                b"\x00\xffbytes",
            )],
            next: Some(after.encode()),
            ..PreviewSourceReply::default()
        };
        let back = PreviewSourceReply::decode(&reply.encode().unwrap()).unwrap();
        assert_eq!(back, reply);
        assert_eq!(back.envelopes[0].bytes().unwrap(), b"\x00\xffbytes");
        let mut garbled = back.envelopes[0].clone();
        garbled.data = "not base64!".into();
        assert_eq!(garbled.bytes(), None);
    }

    #[test]
    fn malformed_preview_source_requests_say_why() {
        for bad in [
            &b"\xff"[..],
            br#"{"schema":"fleetbus.io/preview-source-request/v2","rule":{}}"#,
            br#"{"schema":"fleetbus.io/preview-request/v1","rule":{}}"#,
            br#"{"schema":"fleetbus.io/preview-source-request/v1","rule":{},"after":7}"#,
        ] {
            assert!(PreviewSourceRequest::decode(bad).is_err(), "{bad:?}");
        }
        let check = |req: PreviewSourceRequest| req.validate().unwrap_err();
        assert_eq!(
            check(PreviewSourceRequest::default()),
            PreviewInvalid::NoCandidate
        );
        let mut cm = rule("web");
        cm["kind"] = json!("ConfigMap");
        assert!(matches!(
            check(PreviewSourceRequest {
                rule: cm,
                ..PreviewSourceRequest::default()
            }),
            PreviewInvalid::NotARule(_)
        ));
        assert!(matches!(
            check(PreviewSourceRequest {
                rule: rule("web"),
                author: Some("c1.>".into()),
                ..PreviewSourceRequest::default()
            }),
            PreviewInvalid::BadAuthor(_)
        ));
        let long = format!("a/{}", "x".repeat(600));
        for token in [
            "",
            "noslash",
            "a/",
            "a/b/c",
            "Not_A_Label/x",
            "a/x\n",
            long.as_str(),
        ] {
            let req = PreviewSourceRequest {
                rule: rule("web"),
                after: Some(token.into()),
                ..PreviewSourceRequest::default()
            };
            assert!(
                matches!(check(req), PreviewInvalid::BadToken(_)),
                "{token:?}"
            );
        }
    }

    #[test]
    fn a_preview_request_carries_sources_only_when_given() {
        let plain = PreviewRequest {
            rule: Some(rule("web")),
            ..PreviewRequest::default()
        };
        let text = String::from_utf8(plain.encode().unwrap()).unwrap();
        assert!(!text.contains("sources"), "{text}");
        let with = PreviewRequest {
            sources: vec![SourceEnvelope::new("fleetbus.obj.c1.x".into(), b"e")],
            sources_complete: true,
            ..plain
        };
        let text = String::from_utf8(with.encode().unwrap()).unwrap();
        assert!(text.contains(r#""sourcesComplete":true"#), "{text}");
        assert_eq!(PreviewRequest::decode(text.as_bytes()).unwrap(), with);
    }
}
