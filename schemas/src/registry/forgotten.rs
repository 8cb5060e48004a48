//! `forgotten.<name>` in the registry bucket: an operator's word that cluster
//! `<name>` will never come back (`fleetbus clusters forget`). Agents delete
//! their Peer Cluster object of that name while the registry holds no record
//! of it; a record put later (the cluster joins again) makes it a peer again.
//! Only the admin writes these keys: a member's permissions allow its own
//! `cluster.<self>.*` and `kubeconfig.<self>.*` keys alone.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::subject::{decode_token, encode_token, TokenError};
use crate::time::rfc3339_ms;

/// `schema` of a [`ForgottenRecord`].
pub const FORGOTTEN_RECORD_SCHEMA: &str = "fleetbus.io/forgotten/v1";
/// The first token of a forgotten key.
pub const FORGOTTEN_KEY_KIND: &str = "forgotten";

/// The value at `forgotten.<name>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForgottenRecord {
    /// The cluster forgotten; equal to the key's token.
    pub name: String,
    /// When the operator forgot it.
    #[serde(with = "rfc3339_ms")]
    pub forgotten_at: DateTime<Utc>,
}

impl ForgottenRecord {
    /// JSON with `"schema": "fleetbus.io/forgotten/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(FORGOTTEN_RECORD_SCHEMA, self)
    }

    /// Decodes a record; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(FORGOTTEN_RECORD_SCHEMA, bytes)
    }
}

/// `forgotten.<escaped name>`.
pub fn forgotten_key(name: &str) -> String {
    format!("{FORGOTTEN_KEY_KIND}.{}", encode_token(name))
}

/// The name in a forgotten key; `None` for any other key, `Some(Err)` for a
/// forgotten key whose token does not decode or that has more tokens.
pub fn parse_forgotten_key(key: &str) -> Option<Result<String, TokenError>> {
    parse_name_key(FORGOTTEN_KEY_KIND, key)
}

/// The name in a key `<kind>.<escaped name>`; `None` for a key of another
/// kind, `Some(Err)` when the token does not decode or more tokens follow.
pub(crate) fn parse_name_key(kind: &str, key: &str) -> Option<Result<String, TokenError>> {
    let rest = key.strip_prefix(kind)?.strip_prefix('.')?;
    if rest.contains('.') {
        return Some(Err(TokenError::InvalidChar(rest.to_owned())));
    }
    Some(decode_token(rest))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_other_keys_are_not_forgotten_ones() {
        for name in ["c2", "east-1"] {
            let key = forgotten_key(name);
            assert_eq!(parse_forgotten_key(&key).unwrap().unwrap(), name);
        }
        for other in [
            "cluster.c2.id",
            "forgottenx.c2",
            "kubeconfig.c2.id",
            "forgotten",
        ] {
            assert!(parse_forgotten_key(other).is_none(), "{other}");
        }
        assert!(parse_forgotten_key("forgotten.a.b").unwrap().is_err());
        let r = ForgottenRecord {
            name: "c2".into(),
            forgotten_at: Utc::now(),
        };
        let bytes = r.encode().unwrap();
        assert!(
            String::from_utf8_lossy(&bytes).starts_with(r#"{"schema":"fleetbus.io/forgotten/v1""#)
        );
        let back = ForgottenRecord::decode(&bytes).unwrap();
        assert_eq!(back.name, "c2");
        assert!(ForgottenRecord::decode(b"{}").is_err());
    }
}
