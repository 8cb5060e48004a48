//! NATS JWTs (the decentralised auth model of nats-server: operator, account
//! and user claims signed with `nkeys`) and `.creds` files, encoded and
//! checked here. Pure: no IO.
//!
//! The format is that of the NATS JWT v2 library (what `nsc` writes): a
//! header `{"typ":"JWT","alg":"ed25519-nkey"}`, the claims, and the ed25519
//! signature of `header.claims` by the issuer's nkey, each part base64url
//! without padding. Of the crates that encode NATS claims, `nats-jwt` 0.3
//! cannot issue operator JWTs and `nats-io-jwt`/`nats-jwt-rs` are early 0.x
//! work in progress; the encoding is a few lines over `nkeys`, and the e2e
//! tests prove nats-server accepts it.

use std::collections::BTreeMap;

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use thiserror::Error;

use fleetbus_schemas::permissions::{Permissions, Shared};

const HEADER: &str = r#"{"typ":"JWT","alg":"ed25519-nkey"}"#;

/// A JWT or creds file that cannot be used.
#[derive(Debug, Error)]
pub enum JwtError {
    /// Signing with an nkey failed (a public-only key).
    #[error("cannot sign with {key}: {source}")]
    Sign {
        /// The signer's public key.
        key: String,
        /// The nkeys error.
        source: nkeys::error::Error,
    },
    /// Not three base64url parts with JSON claims.
    #[error("not a NATS JWT: {0}")]
    Malformed(String),
    /// The signature does not verify with the claimed issuer's key.
    #[error("the JWT's signature does not verify with its issuer {0}")]
    BadSignature(String),
    /// Not a `.creds` file: the JWT or the seed block is missing.
    #[error("not a NATS credentials file: {0}")]
    Creds(String),
}

/// Claims common to every NATS JWT, and the `nats` part specific to its type.
fn claims(issuer: &str, subject: &str, name: &str, iat: DateTime<Utc>, nats: Value) -> Value {
    let mut claims = json!({
        "iat": iat.timestamp(),
        "iss": issuer,
        "name": name,
        "sub": subject,
        "nats": nats,
    });
    // The JWT ID names this issuance: a hash of the claims without it.
    let jti = hex::encode_upper(Sha256::digest(claims.to_string().as_bytes()));
    claims["jti"] = Value::String(jti);
    claims
}

/// Signs `claims` with `issuer`: `header.claims.signature`.
fn sign(issuer: &nkeys::KeyPair, claims: &Value) -> Result<String, JwtError> {
    let input = format!("{}.{}", B64.encode(HEADER), B64.encode(claims.to_string()));
    let sig = issuer
        .sign(input.as_bytes())
        .map_err(|source| JwtError::Sign {
            key: issuer.public_key(),
            source,
        })?;
    Ok(format!("{input}.{}", B64.encode(sig)))
}

/// The operator's self-signed JWT, naming the system account.
pub fn operator_jwt(
    operator: &nkeys::KeyPair,
    name: &str,
    system_account: &str,
    iat: DateTime<Utc>,
) -> Result<String, JwtError> {
    let pk = operator.public_key();
    let nats = json!({"type": "operator", "version": 2, "system_account": system_account});
    sign(operator, &claims(&pk, &pk, name, iat, nats))
}

/// The fleet account's JetStream limits (`-1`: unlimited), as nats-server
/// reads them from the account JWT's `limits`. They bound the whole account:
/// NATS has no per-user JetStream limits, so they cap what all members
/// together may hold, and one member reaching them refuses the others' new
/// streams or consumers too (existing ones keep working).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JsLimits {
    /// File storage, bytes.
    pub disk_storage: i64,
    /// Memory storage, bytes.
    pub mem_storage: i64,
    /// Streams.
    pub streams: i64,
    /// Consumers.
    pub consumers: i64,
}

impl JsLimits {
    /// No limit at all (fleets from before limits).
    pub const UNLIMITED: JsLimits = JsLimits {
        disk_storage: -1,
        mem_storage: -1,
        streams: -1,
        consumers: -1,
    };
}

/// What an account shares with another (SECURITY.md, "Deliveries a member
/// steers"): the fleet's streams account exports its JetStream API, stream
/// subjects and advisories, and the members account imports them from it.
#[derive(Debug, Clone, Copy)]
pub enum Links<'a> {
    /// Neither (the system account; a fleet from before the split).
    None,
    /// Exports these subjects.
    Exports(&'a [(String, Shared)]),
    /// Imports these subjects from the account `from`.
    Imports {
        /// The exporting account's public key.
        from: &'a str,
        /// What it exports.
        subjects: &'a [(String, Shared)],
    },
}

/// One account's JWT: who it is and what it may do.
#[derive(Debug, Clone, Copy)]
pub struct AccountSpec<'a> {
    /// Its public key.
    pub account: &'a str,
    /// Its name.
    pub name: &'a str,
    /// JetStream enabled with these limits; `None` without JetStream (the
    /// system account, the members account).
    pub jetstream: Option<&'a JsLimits>,
    /// Keys that may issue its users.
    pub signing_keys: &'a [String],
    /// A user's public key to a unix time: nats-server refuses that user's
    /// JWTs issued at or before it, and closes its connections when the
    /// account JWT carrying the entry is loaded.
    pub revocations: &'a BTreeMap<String, i64>,
    /// Exports or imports.
    pub links: Links<'a>,
}

/// An account JWT signed by the operator.
pub fn account_jwt(
    operator: &nkeys::KeyPair,
    spec: &AccountSpec<'_>,
    iat: DateTime<Utc>,
) -> Result<String, JwtError> {
    let mut limits = json!({
        "subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1,
        "wildcards": true, "conn": -1, "leaf": -1,
    });
    if let Some(js) = spec.jetstream {
        limits["disk_storage"] = json!(js.disk_storage);
        limits["mem_storage"] = json!(js.mem_storage);
        limits["streams"] = json!(js.streams);
        limits["consumer"] = json!(js.consumers);
    }
    let mut nats = json!({
        "type": "account", "version": 2, "limits": limits,
        "signing_keys": spec.signing_keys,
        "default_permissions": {"pub": {}, "sub": {}},
    });
    if !spec.revocations.is_empty() {
        nats["revocations"] = json!(spec.revocations);
    }
    match spec.links {
        Links::None => {}
        Links::Exports(subjects) => nats["exports"] = links(subjects, None),
        Links::Imports { from, subjects } => nats["imports"] = links(subjects, Some(from)),
    }
    sign(
        operator,
        &claims(&operator.public_key(), spec.account, spec.name, iat, nats),
    )
}

/// The JWT v2 `exports` (no `from`) or `imports` (from the account `from`) of
/// `subjects`. A service with many replies is `response_type: Stream` (a pull's
/// messages); others are nats-server's default, one reply (`Singleton`).
fn links(subjects: &[(String, Shared)], from: Option<&str>) -> Value {
    let entries = subjects.iter().map(|(subject, shared)| {
        let kind = match shared {
            Shared::Service { .. } => "service",
            Shared::Stream => "stream",
        };
        let mut entry = json!({"name": subject, "subject": subject, "type": kind});
        match from {
            Some(account) => entry["account"] = json!(account),
            None if matches!(shared, Shared::Service { many: true }) => {
                entry["response_type"] = json!("Stream")
            }
            None => {}
        }
        entry
    });
    Value::Array(entries.collect())
}

/// A user JWT issued by one of `account`'s signing keys. `None` permissions:
/// everything the account allows (the fleet's admin).
pub fn user_jwt(
    signer: &nkeys::KeyPair,
    account: &str,
    user: &str,
    name: &str,
    permissions: Option<&Permissions>,
    iat: DateTime<Utc>,
) -> Result<String, JwtError> {
    let (publish, subscribe) = match permissions {
        Some(p) => (
            json!({"allow": p.publish_allow}),
            json!({"allow": p.subscribe_allow}),
        ),
        None => (json!({}), json!({})),
    };
    let mut nats = json!({
        "type": "user", "version": 2, "issuer_account": account,
        "pub": publish, "sub": subscribe,
        "subs": -1, "data": -1, "payload": -1,
    });
    // One reply to each request received, whatever its inbox (nats-server's
    // default expiry): replies without publishing rights on `_INBOX.>`.
    if permissions.is_some_and(|p| p.allow_responses) {
        nats["resp"] = json!({"max": 1, "ttl": 0});
    }
    sign(signer, &claims(&signer.public_key(), user, name, iat, nats))
}

/// A JWT's claims after its signature was checked against its `iss`.
pub fn verify(jwt: &str) -> Result<Value, JwtError> {
    let malformed = |why: &str| JwtError::Malformed(why.to_owned());
    let mut parts = jwt.trim().split('.');
    let (Some(header), Some(body), Some(sig), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed("want three dot-separated parts"));
    };
    let body_bytes = B64
        .decode(body)
        .map_err(|_| malformed("claims are not base64url"))?;
    let sig = B64
        .decode(sig)
        .map_err(|_| malformed("signature is not base64url"))?;
    let claims: Value =
        serde_json::from_slice(&body_bytes).map_err(|_| malformed("claims are not JSON"))?;
    let iss = claims["iss"]
        .as_str()
        .ok_or_else(|| malformed("no issuer"))?;
    let key =
        nkeys::KeyPair::from_public_key(iss).map_err(|_| malformed("issuer is not an nkey"))?;
    key.verify(format!("{header}.{body}").as_bytes(), &sig)
        .map_err(|_| JwtError::BadSignature(iss.to_owned()))?;
    Ok(claims)
}

/// A `.creds` file: the user JWT and its nkey seed, as nsc writes them.
pub fn creds_file(user_jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{user_jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}

/// A creds file checked whole: its JWT's claims (signature verified) and
/// its seed's key pair, which must be the JWT's subject.
pub fn parse_creds(text: &str) -> Result<(Value, nkeys::KeyPair), JwtError> {
    let block = |begin: &str| -> Result<&str, JwtError> {
        let start = text
            .find(begin)
            .ok_or_else(|| JwtError::Creds(format!("no {begin:?} block")))?;
        let rest = &text[start + begin.len()..];
        rest.lines()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .ok_or_else(|| JwtError::Creds(format!("empty {begin:?} block")))
    };
    let claims = verify(block("-----BEGIN NATS USER JWT-----")?)?;
    let seed = block("-----BEGIN USER NKEY SEED-----")?;
    let key = nkeys::KeyPair::from_seed(seed)
        .map_err(|_| JwtError::Creds("the seed is not a user nkey seed".into()))?;
    if claims["sub"].as_str() != Some(key.public_key().as_str()) {
        return Err(JwtError::Creds(
            "the seed does not belong to the JWT's user".into(),
        ));
    }
    Ok((claims, key))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn user_creds() -> (nkeys::KeyPair, String) {
        let signer = nkeys::KeyPair::new_account();
        let user = nkeys::KeyPair::new_user();
        let jwt = user_jwt(
            &signer,
            "AACCOUNT",
            &user.public_key(),
            "c1",
            None,
            Utc::now(),
        )
        .unwrap();
        (signer, creds_file(&jwt, &user.seed().unwrap()))
    }

    #[test]
    fn creds_round_trip_and_name_their_issuer() {
        let (signer, creds) = user_creds();
        let (claims, _) = parse_creds(&creds).unwrap();
        assert_eq!(claims["iss"], signer.public_key());
        assert_eq!(claims["name"], "c1");
        assert_eq!(claims["nats"]["issuer_account"], "AACCOUNT");
    }

    #[test]
    fn tampered_creds_are_refused() {
        let (_, creds) = user_creds();
        // A changed claim (the name) breaks the signature.
        let jwt = creds.lines().nth(1).unwrap();
        let parts: Vec<&str> = jwt.split('.').collect();
        let mut claims: Value = serde_json::from_slice(&B64.decode(parts[1]).unwrap()).unwrap();
        claims["name"] = json!("c2");
        let forged = format!(
            "{}.{}.{}",
            parts[0],
            B64.encode(claims.to_string()),
            parts[2]
        );
        let err = parse_creds(&creds.replace(jwt, &forged)).unwrap_err();
        assert!(matches!(err, JwtError::BadSignature(_)), "{err}");
        // Another user's seed.
        let other = nkeys::KeyPair::new_user().seed().unwrap();
        let seed = creds.lines().find(|l| l.starts_with("SU")).unwrap();
        let err = parse_creds(&creds.replace(seed, &other)).unwrap_err();
        assert!(err.to_string().contains("does not belong"), "{err}");
        // Garbage.
        for bad in ["", "hello", "-----BEGIN NATS USER JWT-----\na.b\n"] {
            assert!(parse_creds(bad).is_err(), "{bad:?}");
        }
    }
}
