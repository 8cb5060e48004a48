//! The origin's signature over an envelope (PROTOCOL §4.9): ed25519 by the
//! signing key its certificate (§2.7) names, over a canonical encoding of
//! what a receiver believes of the envelope.
//!
//! Signed bytes (v1): [`SIGNED_MAGIC`] (32 bytes), then each field as a
//! 4-byte big-endian length and its UTF-8 bytes, an optional field as one
//! byte 0 (absent) or 1 and the field, integers big-endian:
//! the subject's object identity (origin, group, version, kind, namespace?,
//! name), `origin`, `originClusterID?`, `uid`, `resourceVersion`,
//! `generation?` (i64), `contentHash`, `time` (Unix milliseconds, i64),
//! `tombstone` (one byte 0/1), `tombstoneReason` (one byte: 0 none,
//! 1 `Deleted`, 2 `Unpublished`). The object itself is covered through
//! `contentHash`, which a receiver recomputes (§4.7); a sealed payload is
//! covered the same way once opened. Binding the subject's identity stops a
//! valid signature from being replayed under another object's subject.

use base64::Engine as _;
use ed25519_dalek::{Signer as _, SigningKey, VerifyingKey};
use thiserror::Error;

use super::{Envelope, Signature, TombstoneReason};
use crate::subject::ObjectKey;

/// `signature.algorithm` of v1 signatures.
pub const SIGNATURE_ALGORITHM: &str = "ed25519";
/// The first 32 bytes of the signed encoding: version and domain separation.
pub const SIGNED_MAGIC: [u8; 32] = *b"fleetbus/envelope-sig/v1\0\0\0\0\0\0\0\0";

/// Why an envelope's signature is not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum SignatureError {
    /// No `signature`.
    #[error("the envelope is not signed")]
    Unsigned,
    /// Another algorithm, a value that is not base64 of 64 bytes, or a
    /// signature that does not verify with the key.
    #[error("the envelope's signature does not verify")]
    BadSignature,
}

/// Appends the canonical encoding of the signed fields (see the module docs).
pub(crate) struct Canonical(Vec<u8>);

impl Canonical {
    fn new() -> Self {
        let mut v = Vec::with_capacity(256);
        v.extend_from_slice(&SIGNED_MAGIC);
        Canonical(v)
    }

    fn str(&mut self, s: &str) {
        // Lengths beyond u32 cannot occur (payloads are bounded far below).
        let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
        self.0.extend_from_slice(&len.to_be_bytes());
        self.0.extend_from_slice(s.as_bytes());
    }

    fn opt_str(&mut self, s: Option<&str>) {
        match s {
            None => self.0.push(0),
            Some(s) => {
                self.0.push(1);
                self.str(s);
            }
        }
    }
}

impl Envelope {
    /// The bytes the origin signs for this envelope under `key`'s subject.
    pub fn signed_bytes(&self, key: &ObjectKey) -> Vec<u8> {
        let mut c = Canonical::new();
        c.str(&key.origin);
        c.str(&key.group);
        c.str(&key.version);
        c.str(&key.kind);
        c.opt_str(key.namespace.as_deref());
        c.str(&key.name);
        c.str(&self.origin);
        c.opt_str(self.origin_cluster_id.as_deref());
        c.str(&self.uid);
        c.str(&self.resource_version);
        match self.generation {
            None => c.0.push(0),
            Some(g) => {
                c.0.push(1);
                c.0.extend_from_slice(&g.to_be_bytes());
            }
        }
        c.str(&self.content_hash);
        c.0.extend_from_slice(&self.time.timestamp_millis().to_be_bytes());
        c.0.push(u8::from(self.tombstone));
        c.0.push(match self.tombstone_reason {
            None => 0,
            Some(TombstoneReason::Deleted) => 1,
            Some(TombstoneReason::Unpublished) => 2,
        });
        c.0
    }

    /// Signs the envelope as published under `key`'s subject; `key_id` names
    /// the certificate (its serial in hex).
    pub fn sign(&mut self, key: &ObjectKey, signer: &SigningKey, key_id: &str) {
        self.signature = Some(sign_value(&self.signed_bytes(key), signer, key_id));
    }

    /// Checks the signature with `signer` (the key of the certificate its
    /// `keyId` names; the caller looks that up and checks it is the origin's).
    pub fn verify_signature(
        &self,
        key: &ObjectKey,
        signer: &VerifyingKey,
    ) -> Result<(), SignatureError> {
        let sig = self.signature.as_ref().ok_or(SignatureError::Unsigned)?;
        verify_value(sig, &self.signed_bytes(key), signer)
    }
}

/// Checks one signature value over `bytes` (shared by every signed message).
pub fn verify_value(
    sig: &Signature,
    bytes: &[u8],
    signer: &VerifyingKey,
) -> Result<(), SignatureError> {
    if sig.algorithm != SIGNATURE_ALGORITHM || sig.value.len() > 128 {
        return Err(SignatureError::BadSignature);
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(&sig.value)
        .map_err(|_| SignatureError::BadSignature)?;
    let raw: [u8; 64] = raw.try_into().map_err(|_| SignatureError::BadSignature)?;
    signer
        .verify_strict(bytes, &ed25519_dalek::Signature::from_bytes(&raw))
        .map_err(|_| SignatureError::BadSignature)
}

/// Signs `bytes`: the [`Signature`] of any signed message.
pub fn sign_value(bytes: &[u8], signer: &SigningKey, key_id: &str) -> Signature {
    Signature {
        algorithm: SIGNATURE_ALGORITHM.to_owned(),
        key_id: key_id.to_owned(),
        value: base64::engine::general_purpose::STANDARD.encode(signer.sign(bytes).to_bytes()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use chrono::DateTime;
    use serde_json::json;

    use super::*;

    fn key() -> ObjectKey {
        ObjectKey::from_api_version("c2", "v1", "ConfigMap", Some("ns"), "cm")
    }

    fn env() -> Envelope {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "ns", "name": "cm", "uid": "u1", "resourceVersion": "7"},
            "data": {"a": "1"}});
        let t = DateTime::from_timestamp_millis(1_800_000_000_123).unwrap();
        Envelope::snapshot("c2", Some("id2"), obj, t).unwrap()
    }

    fn signer() -> SigningKey {
        SigningKey::from_bytes(&[3u8; 32])
    }

    #[test]
    fn a_signed_envelope_verifies_after_the_wire() {
        let mut e = env();
        e.sign(&key(), &signer(), "serial");
        let back = Envelope::decode(&e.encode().unwrap()).unwrap();
        back.verify_signature(&key(), &signer().verifying_key())
            .unwrap();
        assert_eq!(back.signature.as_ref().unwrap().key_id, "serial");
        let mut t =
            Envelope::tombstone("c2", None, "u1", "8", e.time, TombstoneReason::Unpublished);
        t.sign(&key(), &signer(), "serial");
        let back = Envelope::decode(&t.encode().unwrap()).unwrap();
        back.verify_signature(&key(), &signer().verifying_key())
            .unwrap();
    }

    #[test]
    fn unsigned_and_other_keys_are_refused() {
        let e = env();
        let vk = signer().verifying_key();
        assert_eq!(
            e.verify_signature(&key(), &vk),
            Err(SignatureError::Unsigned)
        );
        let mut e = env();
        e.sign(&key(), &SigningKey::from_bytes(&[4u8; 32]), "serial");
        assert_eq!(
            e.verify_signature(&key(), &vk),
            Err(SignatureError::BadSignature)
        );
    }

    #[test]
    fn every_signed_field_and_the_subject_are_bound() {
        let mut signed = env();
        signed.sign(&key(), &signer(), "serial");
        let vk = signer().verifying_key();
        let alter: [fn(&mut Envelope); 10] = [
            |e| e.origin = "c1".into(),
            |e| e.origin_cluster_id = None,
            |e| e.uid = "u2".into(),
            |e| e.resource_version = "8".into(),
            |e| e.generation = Some(1),
            |e| e.content_hash = "sha256:00".into(),
            |e| e.time += chrono::Duration::milliseconds(1),
            |e| e.tombstone = true,
            |e| e.tombstone_reason = Some(TombstoneReason::Deleted),
            |e| e.signature.as_mut().unwrap().algorithm = "none".into(),
        ];
        for f in alter {
            let mut e = signed.clone();
            f(&mut e);
            assert_eq!(
                e.verify_signature(&key(), &vk),
                Err(SignatureError::BadSignature),
                "{e:?}"
            );
        }
        for other in [
            ObjectKey::from_api_version("c2", "v1", "ConfigMap", Some("ns"), "cm2"),
            ObjectKey::from_api_version("c2", "v1", "Secret", Some("ns"), "cm"),
            ObjectKey::from_api_version("c2", "v1", "ConfigMap", None, "cm"),
            ObjectKey::from_api_version("c3", "v1", "ConfigMap", Some("ns"), "cm"),
        ] {
            assert_eq!(
                signed.verify_signature(&other, &vk),
                Err(SignatureError::BadSignature)
            );
        }
    }

    #[test]
    fn garbage_signature_values_are_bad_never_a_panic() {
        let mut signed = env();
        signed.sign(&key(), &signer(), "serial");
        let good = signed.signature.clone().unwrap().value;
        for value in [
            String::new(),
            "%%%".into(),
            good[..good.len() - 4].to_owned(),
            format!("{good}AAAA"),
            "A".repeat(100_000),
        ] {
            let mut e = signed.clone();
            e.signature.as_mut().unwrap().value = value;
            assert_eq!(
                e.verify_signature(&key(), &signer().verifying_key()),
                Err(SignatureError::BadSignature)
            );
        }
    }
}
