//! What became of a target in a pass, and a conflict: a target a copy
//! was not written to, and why.

use std::time::Duration;

use fleetbus_schemas::conflict::ConflictReason;
use fleetbus_schemas::ObjectRef;
use serde_json::Value;

use super::candidate::Candidate;
use super::target::Target;

/// What became of one target in a pass.
#[derive(Debug)]
pub enum Outcome {
    /// Already equal.
    InSync,
    /// Written now.
    Wrote,
    /// Not written: someone else's object is there.
    Conflict(Box<Conflict>),
    /// Not written: an error.
    Failed(CopyError),
    /// Not written, on purpose: its rule holds it (`spec.suspend`), with why.
    Held(String),
}

/// Why a copy was not written: what its backoff branches on
/// (`model::backoff`), and the message its rule's status shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyError {
    pub kind: FailureKind,
    pub message: String,
}

/// What kind of failure, as far as trying again goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// Trying again can succeed by itself (a connection, a 5xx, throttling,
    /// the local view lagging): after the server's `Retry-After` when it
    /// said one, else after the copy's backoff step.
    Transient { retry_after: Option<Duration> },
    /// Someone else changed the object meanwhile (409 Conflict): tried
    /// again after the backoff step, with what the watch shows then.
    Conflict,
    /// The server refuses the copy as it is (400, 422), or fleetbus cannot
    /// build it.
    Invalid,
    /// This agent may not write it (401, 403: RBAC, an admission policy).
    Forbidden,
    /// Over a size limit (413, or a refusal that says so).
    TooLarge,
    /// What the write needs is not there (404: its namespace, its kind).
    NotFound,
}

impl FailureKind {
    /// Whether only a change can make the write succeed: the copy waits for
    /// a new input (source version, rule, live copy, an operator's
    /// correction) or, since RBAC, quotas, webhooks and namespaces change
    /// without the engine seeing it, at most `backoff::PERMANENT_WAIT`.
    pub fn is_permanent(self) -> bool {
        matches!(
            self,
            FailureKind::Invalid
                | FailureKind::Forbidden
                | FailureKind::TooLarge
                | FailureKind::NotFound
        )
    }
}

impl CopyError {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Self {
        CopyError {
            kind,
            message: message.into(),
        }
    }

    /// A failure decided without asking the server that only a change of
    /// input ends (a copy that cannot be built or placed).
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Invalid, message)
    }

    /// A failure that ends by itself (the local view catching up).
    pub fn transient(message: impl Into<String>) -> Self {
        Self::new(FailureKind::Transient { retry_after: None }, message)
    }
}

impl std::fmt::Display for CopyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// One conflict found in a pass.
#[derive(Debug, Clone)]
pub struct Conflict {
    /// The rule whose copy was not written.
    pub rule: String,
    /// The origin whose object was not written.
    pub origin: String,
    /// Where.
    pub target: Target,
    /// The live object there, if any (for uid and resourceVersion).
    pub live: Option<(String, String)>,
    /// Why.
    pub reason: ConflictReason,
    /// Whose copy is there instead (OtherOrigin).
    pub winner: Option<String>,
    /// For the status, the Event and the bus.
    pub message: String,
}

impl Conflict {
    /// A local object not made by fleetbus holds the target.
    pub fn local_object(target: &Target, c: &Candidate, live: &Value) -> Conflict {
        let s = |p: &str| live.pointer(p).and_then(Value::as_str).map(str::to_owned);
        Conflict {
            rule: c.rule.clone(),
            origin: c.key.origin.clone(),
            target: target.clone(),
            live: s("/metadata/uid").zip(s("/metadata/resourceVersion")),
            reason: ConflictReason::LocalObject,
            winner: None,
            message: format!(
                "{target} exists on this cluster and was not made by fleetbus: not overwritten with the copy from {}",
                c.key.origin
            ),
        }
    }

    /// An object that names an origin but is no copy this cluster's agent
    /// wrote (`model::mark`) holds the target: a local object all the same,
    /// and the message says why it is not taken for a copy.
    pub fn look_alike(
        target: &Target,
        c: &Candidate,
        live: &Value,
        claimed: &str,
        why: crate::mark::LookAlike,
    ) -> Conflict {
        let mut conflict = Conflict::local_object(target, c, live);
        conflict.message = format!(
            "{target} exists on this cluster and names fleetbus.io/origin-cluster={claimed}, but is no copy fleetbus wrote here ({}): not overwritten with the copy from {}; delete it to have the copy written",
            why.as_str(),
            c.key.origin
        );
        conflict
    }

    /// Another source's copy wins the target.
    pub fn other_origin(target: &Target, loser: &Candidate, winner: &Candidate) -> Conflict {
        Conflict {
            rule: loser.rule.clone(),
            origin: loser.key.origin.clone(),
            target: target.clone(),
            live: None,
            reason: ConflictReason::OtherOrigin,
            winner: Some(winner.key.origin.clone()),
            message: format!(
                "{target} is published by {} and {}: the copy from {} wins (older, or first by name)",
                winner.key.origin, loser.key.origin, winner.key.origin
            ),
        }
    }

    /// The object the conflict is about, as the bus and Events name it.
    pub fn object_ref(&self) -> ObjectRef {
        let mut r = ObjectRef::new(
            &self.target.api_version,
            &self.target.kind,
            self.target.namespace.as_deref(),
            &self.target.name,
        );
        if let Some((uid, rv)) = &self.live {
            r.uid = Some(uid.clone());
            r.resource_version = Some(rv.clone());
        }
        r
    }
}
