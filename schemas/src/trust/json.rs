//! Signed JSON messages (PROTOCOL §5.1 and §2.7): the registry's cluster
//! records carry their cluster's signature in a `signature` member, so the
//! message stays plain JSON that any tool reads.
//!
//! The signed bytes are [`JSON_SIG_MAGIC`] followed by the canonical JSON
//! (sorted keys, no whitespace: `envelope::canonical_json`) of the message
//! without its `signature` member. The receiver computes them from the
//! message as received, so members it does not know are covered too.

use chrono::{DateTime, Utc};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde_json::Value;

use super::cert::{verify, CertError, SignedCertificate};

use crate::envelope::{canonical_json, sign_value, verify_value, Signature, SignatureError};

/// The first bytes of what a JSON message's signature is over.
pub const JSON_SIG_MAGIC: &[u8] = b"fleetbus/json-sig/v1\n";

/// The bytes signed for `message` (its `signature` member left out).
pub fn json_signed_bytes(message: &Value) -> Vec<u8> {
    let mut unsigned = message.clone();
    if let Some(map) = unsigned.as_object_mut() {
        map.remove("signature");
    }
    let mut out = JSON_SIG_MAGIC.to_vec();
    out.extend_from_slice(canonical_json(&unsigned).as_bytes());
    out
}

/// Adds a `signature` member to the JSON object `json` (bytes as
/// `serde_json` writes them): appended as the last member, so the others
/// keep their order and bytes (`schema` stays first).
pub fn sign_json(json: &[u8], signer: &SigningKey, key_id: &str) -> Result<Vec<u8>, String> {
    let value: Value = serde_json::from_slice(json).map_err(|e| e.to_string())?;
    if !value.is_object() || value.get("signature").is_some() {
        return Err("not an unsigned JSON object".into());
    }
    let sig = sign_value(&json_signed_bytes(&value), signer, key_id);
    let sig = serde_json::to_vec(&sig).map_err(|e| e.to_string())?;
    let mut member = b"\"signature\":".to_vec();
    member.extend_from_slice(&sig);
    append_members(json, &member)
}

/// The JSON object `json` with `members` (`"name":value,...`) appended as
/// its last members: the others keep their order and bytes.
pub(super) fn append_members(json: &[u8], members: &[u8]) -> Result<Vec<u8>, String> {
    let body = json.trim_ascii_end();
    let Some((b'}', head)) = body.split_last() else {
        return Err("not a JSON object".into());
    };
    let mut out = head.to_vec();
    // `{}`: no member before ours.
    if head.trim_ascii_end() != b"{" {
        out.push(b',');
    }
    out.extend_from_slice(members);
    out.push(b'}');
    Ok(out)
}

/// The `signature` member of a JSON message, if it has one that parses.
pub fn json_signature(message: &Value) -> Result<Signature, SignatureError> {
    let sig = message.get("signature").ok_or(SignatureError::Unsigned)?;
    serde_json::from_value(sig.clone()).map_err(|_| SignatureError::BadSignature)
}

/// Checks the `signature` member of `message` with `signer`.
pub fn verify_json(message: &Value, signer: &VerifyingKey) -> Result<Signature, SignatureError> {
    let sig = json_signature(message)?;
    verify_value(&sig, &json_signed_bytes(message), signer)?;
    Ok(sig)
}

/// Why a cluster's signed JSON record (its registry record, PROTOCOL §5.1)
/// is not believed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordRefusal {
    /// It carries no certificate, or no signature.
    #[error("unsigned")]
    Unsigned,
    /// Its certificate is not the fleet root's for this cluster, now.
    #[error(transparent)]
    Certificate(#[from] CertError),
    /// Its certificate is on the fleet root's revocation list.
    #[error("its certificate is revoked")]
    Revoked,
    /// The record's signature does not verify with its certificate's key.
    #[error("its signature does not verify")]
    BadSignature,
    /// Signed under another key id than its certificate's serial.
    #[error("signed under another key than its certificate's")]
    SignerMismatch,
}

/// Checks the record `raw` that `cluster` published with the certificate
/// text `cert` (its `certificate` member): the certificate is the fleet
/// `root`'s for `cluster`, valid at `now` and not `revoked` (by serial), and
/// the record is signed with its key. The one check of agents and of the
/// `fleetbus` views; freshness (a replayed older record) needs what the
/// reader saw before and is the reader's.
pub fn verify_record(
    root: &VerifyingKey,
    cluster: &str,
    cert: Option<&str>,
    raw: &[u8],
    now: DateTime<Utc>,
    revoked: impl Fn(&str) -> bool,
) -> Result<SignedCertificate, RecordRefusal> {
    let signed = SignedCertificate::decode(cert.ok_or(RecordRefusal::Unsigned)?)?;
    verify(&signed, root, cluster, now)?;
    if revoked(&signed.cert.serial_hex()) {
        return Err(RecordRefusal::Revoked);
    }
    let key = signed.verifying_key()?;
    let value: Value = serde_json::from_slice(raw).map_err(|_| RecordRefusal::BadSignature)?;
    let sig = verify_json(&value, &key).map_err(|e| match e {
        SignatureError::Unsigned => RecordRefusal::Unsigned,
        SignatureError::BadSignature => RecordRefusal::BadSignature,
    })?;
    if sig.key_id != signed.cert.serial_hex() {
        return Err(RecordRefusal::SignerMismatch);
    }
    Ok(signed)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_signed_message_keeps_its_members_and_verifies() {
        let k = SigningKey::from_bytes(&[1; 32]);
        let json = br#"{"schema":"fleetbus.io/cluster/v1","name":"c2","labels":{"b":"1","a":"2"}}"#;
        let signed = sign_json(json, &k, "id").unwrap();
        let text = String::from_utf8(signed.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"schema":"fleetbus.io/cluster/v1","name":"c2""#),
            "{text}"
        );
        let v: Value = serde_json::from_slice(&signed).unwrap();
        assert_eq!(verify_json(&v, &k.verifying_key()).unwrap().key_id, "id");
        // Any change, a member added (unknown to this version too), or
        // another key: refused.
        for tampered in [
            text.replace(r#""a":"2""#, r#""a":"3""#),
            text.replace(r#""name":"c2""#, r#""name":"c2","extra":1"#),
        ] {
            let v: Value = serde_json::from_str(&tampered).unwrap();
            assert_eq!(
                verify_json(&v, &k.verifying_key()).unwrap_err(),
                SignatureError::BadSignature
            );
        }
        let other = SigningKey::from_bytes(&[2; 32]).verifying_key();
        assert_eq!(
            verify_json(&v, &other).unwrap_err(),
            SignatureError::BadSignature
        );
        let unsigned: Value = serde_json::from_slice(json).unwrap();
        assert_eq!(
            verify_json(&unsigned, &k.verifying_key()).unwrap_err(),
            SignatureError::Unsigned
        );
        for garbage in [
            r#""x""#,
            r#"{"value":1}"#,
            "null",
            r#"{"algorithm":"ed25519","keyId":"id","value":"AAAA"}"#,
        ] {
            let mut g = v.clone();
            g["signature"] = serde_json::from_str(garbage).unwrap();
            assert!(verify_json(&g, &k.verifying_key()).is_err(), "{garbage}");
        }
        assert!(sign_json(b"[1]", &k, "id").is_err());
        assert!(sign_json(&signed, &k, "id").is_err());
        assert!(sign_json(b"{}", &k, "id").is_ok());
    }
}
