//! A cluster's secret keys (`cluster.key`) and the fleet root's PEM files.
//!
//! `cluster.key` is one line of standard base64 over 96 bytes:
//! [`KEY_MAGIC`] (32), the ed25519 signing key's seed (32), the X25519
//! sealing secret (32, clamped as RFC 7748 requires). The sealing secret is
//! what `hpke`'s `X25519HkdfSha256` private key deserialises from
//! (`Deserializable::from_bytes`), and [`ClusterKeys::sealing_public`] is the
//! public key that crate derives from it.

use base64::Engine as _;
use ed25519_dalek::pkcs8::{DecodePrivateKey as _, DecodePublicKey as _};
use ed25519_dalek::{SigningKey, VerifyingKey};
use thiserror::Error;
use zeroize::Zeroizing;

use super::cert::ClusterCertificate;

/// The first 32 bytes of a v1 `cluster.key`.
pub const KEY_MAGIC: [u8; 32] = *b"fleetbus/cluster-key/v1\0\0\0\0\0\0\0\0\0";

/// Why a key file is not accepted. Never includes key material.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    /// Not the expected encoding.
    #[error("malformed key: {0}")]
    Malformed(&'static str),
}

/// A cluster's two secret keys.
pub struct ClusterKeys {
    signing: SigningKey,
    sealing: Zeroizing<[u8; 32]>,
}

impl std::fmt::Debug for ClusterKeys {
    /// Public halves only: a key must not reach a log through `{:?}`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterKeys")
            .field("signing_public", &hex::encode(self.signing_public()))
            .field("sealing_public", &hex::encode(self.sealing_public()))
            .finish()
    }
}

/// RFC 7748 clamping: what X25519 does to a scalar anyway, done once so the
/// stored secret is the scalar in use.
fn clamp(mut k: [u8; 32]) -> [u8; 32] {
    k[0] &= 248;
    k[31] &= 127;
    k[31] |= 64;
    k
}

impl ClusterKeys {
    /// Keys from 64 random bytes (the caller's RNG: this crate does no IO).
    pub fn from_random(signing_seed: [u8; 32], sealing_secret: [u8; 32]) -> ClusterKeys {
        ClusterKeys {
            signing: SigningKey::from_bytes(&signing_seed),
            sealing: Zeroizing::new(clamp(sealing_secret)),
        }
    }

    /// The signing key.
    pub fn signing(&self) -> &SigningKey {
        &self.signing
    }

    /// The ed25519 public key.
    pub fn signing_public(&self) -> [u8; 32] {
        self.signing.verifying_key().to_bytes()
    }

    /// The X25519 secret key bytes (for the `hpke` crate's private key).
    pub fn sealing_secret(&self) -> &[u8; 32] {
        &self.sealing
    }

    /// The X25519 public key.
    pub fn sealing_public(&self) -> [u8; 32] {
        let secret = x25519_dalek::StaticSecret::from(*self.sealing);
        x25519_dalek::PublicKey::from(&secret).to_bytes()
    }

    /// Whether `cert` certifies these keys.
    pub fn matches(&self, cert: &ClusterCertificate) -> bool {
        cert.signing_key == self.signing_public() && cert.sealing_key == self.sealing_public()
    }

    /// The text of `cluster.key` (secret).
    pub fn encode(&self) -> Zeroizing<String> {
        let mut bytes = Zeroizing::new([0u8; 96]);
        bytes[..32].copy_from_slice(&KEY_MAGIC);
        bytes[32..64].copy_from_slice(&self.signing.to_bytes());
        bytes[64..].copy_from_slice(&*self.sealing);
        Zeroizing::new(base64::engine::general_purpose::STANDARD.encode(bytes.as_slice()))
    }

    /// Decodes [`Self::encode`]; surrounding whitespace is ignored.
    pub fn decode(text: &str) -> Result<ClusterKeys, KeyError> {
        let text = text.trim();
        if text.len() != 128 {
            return Err(KeyError::Malformed("not a fleetbus v1 cluster key"));
        }
        let bytes = Zeroizing::new(
            base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| KeyError::Malformed("not base64"))?,
        );
        if bytes.len() != 96 || bytes[..32] != KEY_MAGIC {
            return Err(KeyError::Malformed("not a fleetbus v1 cluster key"));
        }
        let mut seed = Zeroizing::new([0u8; 32]);
        seed.copy_from_slice(&bytes[32..64]);
        let mut sealing = Zeroizing::new([0u8; 32]);
        sealing.copy_from_slice(&bytes[64..]);
        if *sealing != clamp(*sealing) {
            return Err(KeyError::Malformed(
                "the sealing key is not a clamped X25519 scalar",
            ));
        }
        Ok(ClusterKeys {
            signing: SigningKey::from_bytes(&seed),
            sealing,
        })
    }
}

/// The fleet root's public key from `root.pub` (SPKI PEM, as `fleet init` writes it).
pub fn parse_root_public(pem: &str) -> Result<VerifyingKey, KeyError> {
    VerifyingKey::from_public_key_pem(pem.trim())
        .map_err(|_| KeyError::Malformed("not an ed25519 public key in SPKI PEM"))
}

/// The fleet root key from `root.key` (PKCS#8 PEM, as `fleet init` writes it).
pub fn parse_root_key(pem: &str) -> Result<SigningKey, KeyError> {
    SigningKey::from_pkcs8_pem(pem.trim())
        .map_err(|_| KeyError::Malformed("not an ed25519 private key in PKCS#8 PEM"))
}
