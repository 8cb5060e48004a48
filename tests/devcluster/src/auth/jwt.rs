//! ServiceAccount tokens: ES256-signed JWTs with kube-apiserver's claims.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED,
    ECDSA_P256_SHA256_FIXED_SIGNING,
};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The issuer kube-apiserver uses by default (`--service-account-issuer`).
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// File in `--data-dir` holding the signing key (PKCS#8), so tokens survive restarts.
const KEY_FILE: &str = "sa-signing-key.pk8";

/// Why a key could not be loaded or a token was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    /// Reading or writing the key file failed.
    #[error("failed to read or write the ServiceAccount signing key")]
    Io(#[from] std::io::Error),
    /// The key file holds no valid P-256 PKCS#8 key, or the RNG failed.
    #[error("invalid ServiceAccount signing key: {0}")]
    Key(String),
    /// The token is not three base64url parts with JSON header and claims.
    #[error("malformed token")]
    Malformed,
    /// The signature does not verify with this server's key.
    #[error("invalid token signature")]
    Signature,
    /// `exp` is in the past (or `nbf` in the future).
    #[error("token has expired")]
    Expired,
    /// Serialising claims failed.
    #[error("failed to encode token claims")]
    Encode(#[from] serde_json::Error),
}

/// `kubernetes.io.serviceaccount` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SaRef {
    /// ServiceAccount name.
    pub name: String,
    /// ServiceAccount uid at mint time.
    pub uid: String,
}

/// `kubernetes.io` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KubeClaim {
    /// Namespace of the ServiceAccount.
    pub namespace: String,
    /// The ServiceAccount.
    pub serviceaccount: SaRef,
}

/// Claims of a bound ServiceAccount token, as kube-apiserver writes them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Audiences.
    pub aud: Vec<String>,
    /// Expiry, seconds since the epoch.
    pub exp: i64,
    /// Issued at.
    pub iat: i64,
    /// Issuer.
    pub iss: String,
    /// Token id.
    pub jti: String,
    /// Who the token is for.
    #[serde(rename = "kubernetes.io")]
    pub kubernetes_io: KubeClaim,
    /// Not before.
    pub nbf: i64,
    /// `system:serviceaccount:<ns>:<name>`.
    pub sub: String,
}

impl Claims {
    /// Claims for a token of `namespace/name` (uid `uid`) valid `lifetime` seconds from `now`.
    pub fn new(
        namespace: &str,
        name: &str,
        uid: &str,
        aud: Vec<String>,
        now: i64,
        lifetime: i64,
    ) -> Self {
        Claims {
            aud,
            exp: now + lifetime,
            iat: now,
            iss: ISSUER.to_string(),
            jti: uuid::Uuid::new_v4().to_string(),
            kubernetes_io: KubeClaim {
                namespace: namespace.to_string(),
                serviceaccount: SaRef {
                    name: name.to_string(),
                    uid: uid.to_string(),
                },
            },
            nbf: now,
            sub: format!("system:serviceaccount:{namespace}:{name}"),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Header {
    alg: String,
    kid: String,
}

/// The key tokens are signed and verified with.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    kid: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish()
    }
}

impl SigningKey {
    /// Loads the key from `data_dir`, creating it there if missing; a fresh
    /// in-memory key without a data dir.
    pub fn load_or_create(data_dir: Option<&Path>) -> Result<Self, JwtError> {
        let rng = SystemRandom::new();
        let path = data_dir.map(|d| d.join(KEY_FILE));
        let pkcs8 = match path.as_deref().filter(|p| p.exists()) {
            Some(p) => std::fs::read(p)?,
            None => {
                let doc = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .map_err(|e| JwtError::Key(e.to_string()))?;
                if let Some(p) = &path {
                    // Whoever reads it mints tokens for any ServiceAccount:
                    // its owner's alone, as kube-apiserver's key files are.
                    use std::io::Write as _;
                    use std::os::unix::fs::OpenOptionsExt as _;
                    std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(p)?
                        .write_all(doc.as_ref())?;
                }
                doc.as_ref().to_vec()
            }
        };
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &pkcs8, &rng)
            .map_err(|e| JwtError::Key(e.to_string()))?;
        // kube's kid is a hash of the public key; any stable id serves.
        let kid = URL_SAFE_NO_PAD.encode(&sha2_256(pair.public_key().as_ref())[..20]);
        Ok(SigningKey { pair, kid, rng })
    }

    /// A signed compact JWT with `claims`.
    pub fn sign(&self, claims: &Claims) -> Result<String, JwtError> {
        let header = Header {
            alg: "ES256".into(),
            kid: self.kid.clone(),
        };
        let input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&header)?),
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims)?)
        );
        let sig = self
            .pair
            .sign(&self.rng, input.as_bytes())
            .map_err(|e| JwtError::Key(e.to_string()))?;
        Ok(format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig.as_ref())))
    }

    /// The claims of `token` if this key signed it and it is valid at `now`.
    pub fn verify(&self, token: &str, now: i64) -> Result<Claims, JwtError> {
        let mut parts = token.split('.');
        let (Some(h), Some(c), Some(s), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(JwtError::Malformed);
        };
        let header: Header = decode_part(h)?;
        if header.alg != "ES256" {
            return Err(JwtError::Signature);
        }
        let sig = URL_SAFE_NO_PAD.decode(s).map_err(|_| JwtError::Malformed)?;
        let input = &token[..h.len() + 1 + c.len()];
        UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.pair.public_key().as_ref())
            .verify(input.as_bytes(), &sig)
            .map_err(|_| JwtError::Signature)?;
        let claims: Claims = decode_part(c)?;
        if claims.exp <= now || claims.nbf > now {
            return Err(JwtError::Expired);
        }
        Ok(claims)
    }
}

/// True if `token` has the shape of a JWT (three base64url parts, a JSON header):
/// such a token must verify; anything else is an opaque token.
pub fn looks_like_jwt(token: &str) -> bool {
    let mut parts = token.split('.');
    matches!((parts.next(), parts.next(), parts.next(), parts.next()), (Some(h), Some(_), Some(_), None) if decode_part::<serde_json::Value>(h).is_ok())
}

fn decode_part<T: serde::de::DeserializeOwned>(part: &str) -> Result<T, JwtError> {
    let bytes = URL_SAFE_NO_PAD
        .decode(part)
        .map_err(|_| JwtError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| JwtError::Malformed)
}

fn sha2_256(b: &[u8]) -> Vec<u8> {
    use sha2::Digest;
    sha2::Sha256::digest(b).to_vec()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_signing_key_file_is_its_owners_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        super::SigningKey::load_or_create(Some(dir.path())).unwrap();
        let mode = std::fs::metadata(dir.path().join(super::KEY_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // Read back, not written again.
        super::SigningKey::load_or_create(Some(dir.path())).unwrap();
    }

    use super::*;

    fn claims(now: i64, lifetime: i64) -> Claims {
        Claims::new("ns", "sa", "uid-1", vec![ISSUER.into()], now, lifetime)
    }

    #[test]
    fn signed_token_verifies_and_carries_kube_claims() {
        let key = SigningKey::load_or_create(None).unwrap();
        let t = key.sign(&claims(1000, 600)).unwrap();
        assert!(looks_like_jwt(&t));
        let c = key.verify(&t, 1001).unwrap();
        assert_eq!(c.sub, "system:serviceaccount:ns:sa");
        assert_eq!(c.kubernetes_io.serviceaccount.uid, "uid-1");
        let raw: serde_json::Value = decode_part(t.split('.').nth(1).unwrap()).unwrap();
        assert_eq!(raw["kubernetes.io"]["namespace"], "ns");
        assert_eq!(raw["exp"], 1600);
    }

    #[test]
    fn expired_forged_and_foreign_tokens_are_refused() {
        let key = SigningKey::load_or_create(None).unwrap();
        let t = key.sign(&claims(1000, 600)).unwrap();
        assert!(matches!(key.verify(&t, 1600), Err(JwtError::Expired)));
        let other = SigningKey::load_or_create(None).unwrap();
        assert!(matches!(other.verify(&t, 1001), Err(JwtError::Signature)));
        // Claims swapped for another SA's, signature kept.
        let mut parts: Vec<String> = t.split('.').map(String::from).collect();
        let mut forged = claims(1000, 600);
        forged.sub = "system:serviceaccount:kube-system:admin".into();
        parts[1] = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert!(matches!(
            key.verify(&parts.join("."), 1001),
            Err(JwtError::Signature)
        ));
        assert!(!looks_like_jwt("fbdc.opaque"));
        assert!(matches!(key.verify("a.b", 0), Err(JwtError::Malformed)));
    }

    #[test]
    fn key_in_data_dir_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let t = SigningKey::load_or_create(Some(dir.path()))
            .unwrap()
            .sign(&claims(1000, 600))
            .unwrap();
        let again = SigningKey::load_or_create(Some(dir.path())).unwrap();
        assert!(again.verify(&t, 1001).is_ok());
    }
}
