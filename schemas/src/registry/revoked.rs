//! `revoked.<name>` in the registry bucket: the fleet root's word that the
//! certificates it names (by serial) of cluster `<name>` are revoked
//! (`fleetbus leave`, PROTOCOL §5.5). Signed by the fleet root itself, not
//! by a cluster: whoever may write the bucket (the broker operator, a member
//! with wide credentials) cannot revoke a cluster nor take a revocation back
//! by writing another value, because a value that does not verify against
//! the root is refused. An agent with a fleet root refuses, from then on,
//! every message and record signed by a revoked certificate.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::subject::{encode_token, TokenError};
use crate::time::rfc3339_ms;

/// `schema` of a [`RevokedRecord`].
pub const REVOKED_RECORD_SCHEMA: &str = "fleetbus.io/revoked/v1";
/// The first token of a revocation key.
pub const REVOKED_KEY_KIND: &str = "revoked";
/// The `keyId` of the fleet root's signatures (there is one root per fleet).
pub const ROOT_KEY_ID: &str = "root";
/// The most serials one entry lists: a cluster rotated this often in its
/// life is not plausible; the bound keeps a reader's work small.
pub const MAX_REVOKED_SERIALS: usize = 1024;

/// The value at `revoked.<name>` (its `signature` member is the root's).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RevokedRecord {
    /// The cluster whose certificates are revoked; equal to the key's token.
    pub name: String,
    /// The revoked certificates' serials, 32 lowercase hex digits each.
    pub serials: Vec<String>,
    /// When the operator revoked them.
    #[serde(with = "rfc3339_ms")]
    pub revoked_at: DateTime<Utc>,
}

/// Why a decoded revocation entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRevoked {
    /// No serial, or more than [`MAX_REVOKED_SERIALS`].
    #[error("{0} serials (1..={MAX_REVOKED_SERIALS})")]
    Count(usize),
    /// A serial that is not 32 lowercase hex digits.
    #[error("serial {0:?} is not 32 lowercase hex digits")]
    Serial(String),
}

impl RevokedRecord {
    /// JSON with `"schema": "fleetbus.io/revoked/v1"` first (unsigned).
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(REVOKED_RECORD_SCHEMA, self)
    }

    /// [`Self::encode`] with the fleet root's `signature` member (PROTOCOL §5.5).
    pub fn encode_signed(&self, root: &crate::trust::SigningKey) -> Result<Vec<u8>, EncodeError> {
        crate::trust::sign_json(&self.encode()?, root, ROOT_KEY_ID).map_err(EncodeError::new)
    }

    /// Decodes a record (its signature is not checked here: [`Self::verify`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(REVOKED_RECORD_SCHEMA, bytes)
    }

    /// The serials are well formed and bounded.
    pub fn validate(&self) -> Result<(), InvalidRevoked> {
        if self.serials.is_empty() || self.serials.len() > MAX_REVOKED_SERIALS {
            return Err(InvalidRevoked::Count(self.serials.len()));
        }
        let hex = |s: &str| {
            s.len() == 32
                && s.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        match self.serials.iter().find(|s| !hex(s)) {
            Some(bad) => Err(InvalidRevoked::Serial(bad.clone())),
            None => Ok(()),
        }
    }

    /// Checks that `raw` (this record as received, JSON) carries the fleet
    /// `root`'s signature under [`ROOT_KEY_ID`].
    pub fn verify(
        raw: &[u8],
        root: &crate::trust::VerifyingKey,
    ) -> Result<(), crate::envelope::SignatureError> {
        use crate::envelope::SignatureError;
        let value: serde_json::Value =
            serde_json::from_slice(raw).map_err(|_| SignatureError::BadSignature)?;
        let sig = crate::trust::verify_json(&value, root)?;
        if sig.key_id != ROOT_KEY_ID {
            return Err(SignatureError::BadSignature);
        }
        Ok(())
    }
}

/// `revoked.<escaped name>`.
pub fn revoked_key(name: &str) -> String {
    format!("{REVOKED_KEY_KIND}.{}", encode_token(name))
}

/// The name in a revocation key; `None` for any other key, `Some(Err)` for
/// a revocation key whose token does not decode or that has more tokens.
pub fn parse_revoked_key(key: &str) -> Option<Result<String, TokenError>> {
    super::forgotten::parse_name_key(REVOKED_KEY_KIND, key)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::envelope::SignatureError;
    use crate::trust::SigningKey;

    fn record() -> RevokedRecord {
        RevokedRecord {
            name: "c2".into(),
            serials: vec!["0a".repeat(16)],
            revoked_at: Utc::now(),
        }
    }

    #[test]
    fn keys_round_trip_and_other_keys_are_not_revocations() {
        assert_eq!(
            parse_revoked_key(&revoked_key("c2")).unwrap().unwrap(),
            "c2"
        );
        for other in ["cluster.c2.id", "revokedx.c2", "forgotten.c2", "revoked"] {
            assert!(parse_revoked_key(other).is_none(), "{other}");
        }
        assert!(parse_revoked_key("revoked.a.b").unwrap().is_err());
    }

    #[test]
    fn only_the_roots_signature_verifies() {
        let root = SigningKey::from_bytes(&[7; 32]);
        let signed = record().encode_signed(&root).unwrap();
        let text = String::from_utf8(signed.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"schema":"fleetbus.io/revoked/v1""#),
            "{text}"
        );
        assert_eq!(RevokedRecord::decode(&signed).unwrap().name, "c2");
        RevokedRecord::verify(&signed, &root.verifying_key()).unwrap();
        // Another key (a member's, a forger's), unsigned, a serial taken
        // out or added, garbage: refused.
        let other = SigningKey::from_bytes(&[8; 32]);
        let forged = record().encode_signed(&other).unwrap();
        assert_eq!(
            RevokedRecord::verify(&forged, &root.verifying_key()),
            Err(SignatureError::BadSignature)
        );
        assert_eq!(
            RevokedRecord::verify(&record().encode().unwrap(), &root.verifying_key()),
            Err(SignatureError::Unsigned)
        );
        let tampered = text.replace(&"0a".repeat(16), &"0b".repeat(16));
        assert_eq!(
            RevokedRecord::verify(tampered.as_bytes(), &root.verifying_key()),
            Err(SignatureError::BadSignature)
        );
        assert!(RevokedRecord::verify(b"not json", &root.verifying_key()).is_err());
        // The root's signature under another key id is not the root's word.
        let wrong_id = crate::trust::sign_json(&record().encode().unwrap(), &root, "0a0a").unwrap();
        assert_eq!(
            RevokedRecord::verify(&wrong_id, &root.verifying_key()),
            Err(SignatureError::BadSignature)
        );
    }

    #[test]
    fn serials_are_bounded_hex() {
        record().validate().unwrap();
        let with = |serials: Vec<String>| RevokedRecord {
            serials,
            ..record()
        };
        assert_eq!(with(vec![]).validate(), Err(InvalidRevoked::Count(0)));
        assert!(with(vec!["0A".repeat(16)]).validate().is_err());
        assert!(with(vec!["0a".repeat(15)]).validate().is_err());
        assert!(with(vec!["zz".repeat(16)]).validate().is_err());
        assert_eq!(
            with(vec!["0a".repeat(16); MAX_REVOKED_SERIALS + 1]).validate(),
            Err(InvalidRevoked::Count(MAX_REVOKED_SERIALS + 1))
        );
    }
}
