//! Cluster certificates: a cluster's public keys, signed by the fleet root
//! (PROTOCOL §2.7).
//!
//! The encoding is fixed-layout binary rather than JSON or X.509 so that
//! there is exactly one byte string to sign and to check: no field order,
//! whitespace or number format a forger could play with, and no ASN.1 parser
//! on the path of untrusted input. Layout (v1), all integers big-endian:
//!
//! | bytes | field |
//! | --- | --- |
//! | 32 | [`CERT_MAGIC`] (`fleetbus/cluster-cert/v1`, NUL padded): version and domain separation |
//! | 1 + n | cluster name: its length n (1..=63), then its bytes |
//! | 32 | signing key (ed25519 public) |
//! | 32 | sealing key (X25519 public) |
//! | 8 | notBefore, Unix seconds (i64) |
//! | 8 | notAfter, Unix seconds (i64) |
//! | 16 | serial |
//! | 64 | the fleet root's ed25519 signature over every byte before it |
//!
//! In files and records the whole is standard base64 (with padding) on one line.

use base64::Engine as _;
use chrono::{DateTime, Utc};
use ed25519_dalek::{Signature, Signer as _, SigningKey, VerifyingKey};
use thiserror::Error;

/// The first 32 bytes of every v1 certificate.
pub const CERT_MAGIC: [u8; 32] = *b"fleetbus/cluster-cert/v1\0\0\0\0\0\0\0\0";

/// The longest cluster name (a DNS-1123 label).
const MAX_NAME: usize = 63;
/// Bytes after the name: two keys, two times, the serial.
const FIXED_TAIL: usize = 32 + 32 + 8 + 8 + 16;
/// The longest encoded certificate, signature included (what a reader accepts).
pub const MAX_CERT_BYTES: usize = 32 + 1 + MAX_NAME + FIXED_TAIL + 64;

/// What the fleet root certifies about one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterCertificate {
    /// The cluster's name in the fleet.
    pub cluster: String,
    /// Its ed25519 public key: verifies everything the cluster publishes.
    pub signing_key: [u8; 32],
    /// Its X25519 public key: what Secrets for it are sealed to.
    pub sealing_key: [u8; 32],
    /// Not valid before this second.
    pub not_before: DateTime<Utc>,
    /// Not valid after this second.
    pub not_after: DateTime<Utc>,
    /// Random, unique per issue: names the certificate (the key id of signatures).
    pub serial: [u8; 16],
}

/// A certificate with the fleet root's signature over its encoding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedCertificate {
    /// What is certified.
    pub cert: ClusterCertificate,
    /// The root's signature over [`ClusterCertificate::to_bytes`].
    pub signature: [u8; 64],
}

/// Why a certificate is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CertError {
    /// Not base64, not the v1 layout, truncated or too long.
    #[error("malformed certificate: {0}")]
    Malformed(String),
    /// The root's signature does not verify: not issued by this fleet's root, or altered.
    #[error("the certificate is not signed by the fleet root")]
    BadSignature,
    /// Past its `notAfter`.
    #[error("the certificate of {cluster} expired at {not_after}")]
    Expired {
        /// The certified cluster.
        cluster: String,
        /// When it expired.
        not_after: DateTime<Utc>,
    },
    /// Before its `notBefore`.
    #[error("the certificate of {cluster} is not valid before {not_before}")]
    NotYetValid {
        /// The certified cluster.
        cluster: String,
        /// When it becomes valid.
        not_before: DateTime<Utc>,
    },
    /// Certifies another cluster than the one it is presented for.
    #[error("the certificate names cluster {found:?}, not {expected:?}")]
    WrongCluster {
        /// The cluster it was presented for.
        expected: String,
        /// The cluster it names.
        found: String,
    },
}

fn malformed(why: impl Into<String>) -> CertError {
    CertError::Malformed(why.into())
}

impl ClusterCertificate {
    /// The canonical encoding: the bytes the root signs.
    pub fn to_bytes(&self) -> Vec<u8> {
        let name = self.cluster.as_bytes();
        let mut out = Vec::with_capacity(32 + 1 + name.len() + FIXED_TAIL);
        out.extend_from_slice(&CERT_MAGIC);
        // Names longer than a DNS label never get here (check_cluster_name at
        // issue); the length byte is saturated rather than wrapped regardless.
        out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(name);
        out.extend_from_slice(&self.signing_key);
        out.extend_from_slice(&self.sealing_key);
        out.extend_from_slice(&self.not_before.timestamp().to_be_bytes());
        out.extend_from_slice(&self.not_after.timestamp().to_be_bytes());
        out.extend_from_slice(&self.serial);
        out
    }

    /// Signs with the fleet root key.
    pub fn sign(self, root: &SigningKey) -> SignedCertificate {
        let signature = root.sign(&self.to_bytes()).to_bytes();
        SignedCertificate {
            cert: self,
            signature,
        }
    }

    /// The serial as lowercase hex: the key id of this cluster's signatures.
    pub fn serial_hex(&self) -> String {
        hex::encode(self.serial)
    }
}

/// Reads `N` bytes at `*at`, advancing it.
fn take<const N: usize>(bytes: &[u8], at: &mut usize) -> Result<[u8; N], CertError> {
    let end = at
        .checked_add(N)
        .filter(|e| *e <= bytes.len())
        .ok_or_else(|| malformed("truncated"))?;
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[*at..end]);
    *at = end;
    Ok(out)
}

fn time(secs: [u8; 8]) -> Result<DateTime<Utc>, CertError> {
    DateTime::from_timestamp(i64::from_be_bytes(secs), 0)
        .ok_or_else(|| malformed("time out of range"))
}

impl SignedCertificate {
    /// The binary encoding: the certificate, then the signature.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = self.cert.to_bytes();
        out.extend_from_slice(&self.signature);
        out
    }

    /// Decodes [`Self::to_bytes`]. Checks the layout only, not the signature.
    pub fn from_bytes(bytes: &[u8]) -> Result<SignedCertificate, CertError> {
        if bytes.len() > MAX_CERT_BYTES {
            return Err(malformed(format!(
                "{} bytes, at most {MAX_CERT_BYTES}",
                bytes.len()
            )));
        }
        let mut at = 0;
        if take::<32>(bytes, &mut at)? != CERT_MAGIC {
            return Err(malformed("not a fleetbus v1 cluster certificate"));
        }
        let [len] = take::<1>(bytes, &mut at)?;
        let len = usize::from(len);
        if len == 0 || len > MAX_NAME {
            return Err(malformed(format!("cluster name of {len} bytes")));
        }
        let name = bytes
            .get(at..at + len)
            .ok_or_else(|| malformed("truncated"))?;
        at += len;
        let cluster = std::str::from_utf8(name)
            .map_err(|_| malformed("cluster name is not UTF-8"))?
            .to_owned();
        let cert = ClusterCertificate {
            cluster,
            signing_key: take(bytes, &mut at)?,
            sealing_key: take(bytes, &mut at)?,
            not_before: time(take(bytes, &mut at)?)?,
            not_after: time(take(bytes, &mut at)?)?,
            serial: take(bytes, &mut at)?,
        };
        let signature = take(bytes, &mut at)?;
        if at != bytes.len() {
            return Err(malformed("trailing bytes"));
        }
        Ok(SignedCertificate { cert, signature })
    }

    /// The text form (files, records): standard base64 of [`Self::to_bytes`].
    pub fn encode(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(self.to_bytes())
    }

    /// Decodes [`Self::encode`]; surrounding whitespace is ignored (files end in a newline).
    pub fn decode(text: &str) -> Result<SignedCertificate, CertError> {
        let text = text.trim();
        // Bound the work before decoding: base64 is 4 characters per 3 bytes.
        if text.len() > MAX_CERT_BYTES.div_ceil(3) * 4 {
            return Err(malformed("too long"));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(|e| malformed(format!("not base64: {e}")))?;
        SignedCertificate::from_bytes(&bytes)
    }

    /// The certified signing key, if it is a valid ed25519 point.
    pub fn verifying_key(&self) -> Result<VerifyingKey, CertError> {
        VerifyingKey::from_bytes(&self.cert.signing_key)
            .map_err(|_| malformed("the signing key is not an ed25519 public key"))
    }
}

/// Checks that `cert` is signed by the fleet `root`, certifies `cluster`,
/// and is valid at `now`. The signature is checked first, so a forged
/// certificate reads as [`CertError::BadSignature`] whatever else it claims.
pub fn verify(
    cert: &SignedCertificate,
    root: &VerifyingKey,
    cluster: &str,
    now: DateTime<Utc>,
) -> Result<(), CertError> {
    let signature = Signature::from_bytes(&cert.signature);
    root.verify_strict(&cert.cert.to_bytes(), &signature)
        .map_err(|_| CertError::BadSignature)?;
    cert.verifying_key()?;
    let c = &cert.cert;
    if c.cluster != cluster {
        return Err(CertError::WrongCluster {
            expected: cluster.to_owned(),
            found: c.cluster.clone(),
        });
    }
    if now < c.not_before {
        return Err(CertError::NotYetValid {
            cluster: c.cluster.clone(),
            not_before: c.not_before,
        });
    }
    if now > c.not_after {
        return Err(CertError::Expired {
            cluster: c.cluster.clone(),
            not_after: c.not_after,
        });
    }
    Ok(())
}
