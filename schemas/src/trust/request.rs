//! Command requests signed by the fleet root (PROTOCOL §6.7): whoever sends
//! `<p>.cmd.<cluster>.<verb>` requests that change state (correct, label,
//! and the verbs later versions add) signs them, when it holds the root key,
//! so that an agent with a fleet root can tell the operator from anyone else
//! who may publish on the bus. Generic over the verb: the request's JSON
//! gets two members appended, then the root's `signature` ([`sign_json`]):
//!
//! - `to`: the subject it is sent on (a request signed for one cluster or
//!   verb is not accepted on another);
//! - `requestedAt`: when it was signed (RFC 3339, ms): a replay later than
//!   [`REQUEST_MAX_AGE`] is refused.
//!
//! The payload stays the verb's own JSON, so an agent that does not verify
//! reads it as before (unknown members are ignored).

use chrono::{DateTime, Utc};
use ed25519_dalek::{SigningKey, VerifyingKey};

use super::json::{append_members, sign_json, verify_json};
use crate::envelope::SignatureError;
use crate::registry::ROOT_KEY_ID;

/// How old a signed request may be when it arrives (and how far in the
/// future, for clock skew): a captured request replayed later is refused.
pub const REQUEST_MAX_AGE: chrono::Duration = chrono::Duration::minutes(5);

/// Why a request is not the root's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestAuthError {
    /// No `signature` member.
    #[error("the request is not signed by the fleet root")]
    Unsigned,
    /// A signature that is not the root's, or over other content.
    #[error("the request's signature is not the fleet root's")]
    BadSignature,
    /// Signed for another subject (cluster or verb).
    #[error("the request was signed for {0:?}, not this cluster's subject")]
    WrongSubject(String),
    /// `requestedAt` missing, unreadable, or outside [`REQUEST_MAX_AGE`] of now.
    #[error("the request is stale or replayed (requestedAt {0:?})")]
    Stale(String),
    /// Fresh, but taken before: the same signed request sent again (the
    /// receiver remembers what it took while it could still be fresh).
    #[error("the request was taken before (a replay)")]
    Replayed,
}

impl RequestAuthError {
    /// The `reason` label of `fleetbus_rejected_messages_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            RequestAuthError::Unsigned => "unsigned",
            RequestAuthError::BadSignature => "bad_signature",
            RequestAuthError::WrongSubject(_) => "signer_mismatch",
            RequestAuthError::Stale(_) | RequestAuthError::Replayed => "replay",
        }
    }
}

/// `json` (a request object) with `to` = `subject`, `requestedAt` = `now`
/// and the root's signature appended.
pub fn sign_request(
    json: &[u8],
    subject: &str,
    root: &SigningKey,
    now: DateTime<Utc>,
) -> Result<Vec<u8>, String> {
    let to = serde_json::to_string(subject).map_err(|e| e.to_string())?;
    let at = now.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let members = format!("\"to\":{to},\"requestedAt\":\"{at}\"");
    sign_json(
        &append_members(json, members.as_bytes())?,
        root,
        ROOT_KEY_ID,
    )
}

/// A request [`verify_request`] took: what a receiver remembers to refuse
/// the same request sent again while it is fresh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedRequest {
    /// Its `requestedAt`: it is fresh until [`REQUEST_MAX_AGE`] after.
    pub requested_at: DateTime<Utc>,
    /// Its signature's value (base64): the same request has the same one.
    pub signature: String,
}

impl VerifiedRequest {
    /// When it stops being fresh, so a replay is refused as stale anyway.
    pub fn fresh_until(&self) -> DateTime<Utc> {
        self.requested_at + REQUEST_MAX_AGE
    }
}

/// Checks that `raw`, received on `subject` at `now`, is signed by `root`
/// for that subject and fresh. A fresh request sent again verifies again:
/// refusing it is the receiver's, which remembers what it took.
pub fn verify_request(
    raw: &[u8],
    subject: &str,
    root: &VerifyingKey,
    now: DateTime<Utc>,
) -> Result<VerifiedRequest, RequestAuthError> {
    let value: serde_json::Value =
        serde_json::from_slice(raw).map_err(|_| RequestAuthError::Unsigned)?;
    let sig = verify_json(&value, root).map_err(|e| match e {
        SignatureError::Unsigned => RequestAuthError::Unsigned,
        SignatureError::BadSignature => RequestAuthError::BadSignature,
    })?;
    if sig.key_id != ROOT_KEY_ID {
        return Err(RequestAuthError::BadSignature);
    }
    let to = value.get("to").and_then(|v| v.as_str()).unwrap_or_default();
    if to != subject {
        return Err(RequestAuthError::WrongSubject(to.to_owned()));
    }
    let at = value.get("requestedAt").and_then(|v| v.as_str());
    let stale = || RequestAuthError::Stale(at.unwrap_or_default().to_owned());
    let at = at
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .ok_or_else(stale)?
        .with_timezone(&Utc);
    if (now - at).abs() > REQUEST_MAX_AGE {
        return Err(stale());
    }
    Ok(VerifiedRequest {
        requested_at: at,
        signature: sig.value,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const SUBJECT: &str = "fleetbus.cmd.c1.label";

    #[test]
    fn a_signed_request_verifies_only_for_its_subject_while_fresh() {
        let root = SigningKey::from_bytes(&[7; 32]);
        let rv = root.verifying_key();
        let now = Utc::now();
        let json = br#"{"schema":"fleetbus.io/label-request/v1","set":{"env":"prod"}}"#;
        let signed = sign_request(json, SUBJECT, &root, now).unwrap();
        let text = String::from_utf8(signed.clone()).unwrap();
        assert!(text.starts_with(r#"{"schema":"fleetbus.io/label-request/v1","set""#));
        verify_request(&signed, SUBJECT, &rv, now).unwrap();
        verify_request(&signed, SUBJECT, &rv, now + chrono::Duration::minutes(4)).unwrap();
        // The verb's own decoder still reads it.
        let v: serde_json::Value = serde_json::from_slice(&signed).unwrap();
        assert_eq!(v["set"]["env"], "prod");
        assert_eq!(
            verify_request(&signed, "fleetbus.cmd.c2.label", &rv, now),
            Err(RequestAuthError::WrongSubject(SUBJECT.into()))
        );
        assert!(matches!(
            verify_request(&signed, SUBJECT, &rv, now + chrono::Duration::minutes(6)),
            Err(RequestAuthError::Stale(_))
        ));
        // Unsigned, another key, altered, garbage: refused.
        assert_eq!(
            verify_request(json, SUBJECT, &rv, now),
            Err(RequestAuthError::Unsigned)
        );
        let member = SigningKey::from_bytes(&[8; 32]);
        let by_member = sign_request(json, SUBJECT, &member, now).unwrap();
        assert_eq!(
            verify_request(&by_member, SUBJECT, &rv, now),
            Err(RequestAuthError::BadSignature)
        );
        let altered = text.replace("prod", "pwned");
        assert_eq!(
            verify_request(altered.as_bytes(), SUBJECT, &rv, now),
            Err(RequestAuthError::BadSignature)
        );
        for garbage in [&b""[..], b"null", b"[1]", b"{", b"\xff"] {
            assert!(verify_request(garbage, SUBJECT, &rv, now).is_err());
        }
        assert!(sign_request(b"[1]", SUBJECT, &root, now).is_err());
        sign_request(b"{}", SUBJECT, &root, now).unwrap();
    }
}
