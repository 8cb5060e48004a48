//! The fleet's root of trust as data (the secure mode): cluster certificates signed
//! by the fleet root, a cluster's secret keys, and their text encodings.
//! Pure: the caller supplies randomness, files and the current time.
//!
//! - [`ClusterCertificate`]: a cluster's name, ed25519 signing key, X25519
//!   sealing key, validity and serial; [`ClusterCertificate::sign`] with the
//!   root key, [`verify`] against the root's public key.
//! - [`ClusterKeys`]: the two secret keys of `cluster.key`.
//! - [`parse_root_public`], [`parse_root_key`]: the PEM files `fleet init` writes.
//! - [`sign_json`], [`verify_json`]: the `signature` member of signed JSON messages.
//! - [`sign_request`], [`verify_request`]: command requests signed by the root.
//!
//! docs/PROTOCOL.md §2.7 specifies the encodings.

mod cert;
mod json;
mod keys;
mod request;

pub use cert::{
    verify, CertError, ClusterCertificate, SignedCertificate, CERT_MAGIC, MAX_CERT_BYTES,
};
pub use ed25519_dalek::{SigningKey, VerifyingKey};
pub use json::{
    json_signature, json_signed_bytes, sign_json, verify_json, verify_record, RecordRefusal,
    JSON_SIG_MAGIC,
};
pub use keys::{parse_root_key, parse_root_public, ClusterKeys, KeyError, KEY_MAGIC};
pub use request::{
    sign_request, verify_request, RequestAuthError, VerifiedRequest, REQUEST_MAX_AGE,
};

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
