//! Sealed snapshots (PROTOCOL §4.8): the object replaced by a payload only the clusters
//! it is sealed to can read ([`crate::seal`]).
//!
//! On the wire a sealed snapshot has `object: nil`, `tombstone: false` and an
//! `encryption` header that holds the sealed payload; its `contentHash` is the SHA-256 of
//! the ciphertext, never the object's hash: the hash of a low-entropy Secret, published
//! in clear, would let anyone who reads the stream try every value. What the origin
//! needs to know whether its last value is what it would publish (the object's hash) it
//! recomputes from the payload it opens: the origin is always a recipient.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use rand::CryptoRng;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

use super::{content_hash, pack_value, unpack_value, EncryptionHeader, Envelope};
use crate::seal::{
    self, OpenError, SealContext, SealError, Sealed, SealedKey, SealingPublicKey, SealingSecretKey,
    HPKE_AEAD_ID, HPKE_KDF_ID, HPKE_KEM_ID, SEAL_ALGORITHM,
};
use crate::subject::ObjectKey;

/// `purpose` of an object's [`SealContext`].
const PURPOSE: &str = "object";

/// The data key sealed to one recipient, as the `encryption` header carries it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecipientKey {
    /// The recipient cluster.
    pub cluster: String,
    /// Which of its keys: the first 8 bytes of the SHA-256 of its public sealing key,
    /// hex (an origin seals again when a recipient's key changes).
    #[serde(default)]
    pub key_id: String,
    /// The HPKE encapsulated key, base64 (standard, padded); empty once opened.
    #[serde(default)]
    pub enc: String,
    /// The data key sealed to the recipient, base64; empty once opened.
    #[serde(default)]
    pub key: String,
}

/// Why a snapshot could not be sealed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SealEnvelopeError {
    /// Only a snapshot not sealed yet can be sealed.
    #[error("only a plain snapshot can be sealed")]
    NotASnapshot,
    /// The object does not name a subject (no apiVersion, kind or name).
    #[error("the object does not name a subject")]
    NoSubject,
    /// The object could not be encoded.
    #[error("the object could not be encoded: {0}")]
    Encode(String),
    /// Sealing failed.
    #[error(transparent)]
    Seal(#[from] SealError),
}

/// Why a sealed snapshot could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpenEnvelopeError {
    /// The envelope is not sealed.
    #[error("the envelope is not sealed")]
    NotSealed,
    /// Not sealed to this cluster, or does not open.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The header or the payload inside is not well formed.
    #[error("the sealed envelope is malformed: {0}")]
    Malformed(&'static str),
}

impl OpenEnvelopeError {
    /// A short name for metrics and logs: `not_a_recipient`, `seal_corrupt` or
    /// `seal_malformed`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Open(e) => e.reason(),
            Self::NotSealed | Self::Malformed(_) => "seal_malformed",
        }
    }
}

/// The subject tokens an object's sealing is bound to.
fn subject_tokens(key: &ObjectKey) -> [&str; 5] {
    [
        key.group.as_str(),
        key.version.as_str(),
        key.kind.as_str(),
        key.namespace.as_deref().unwrap_or(""),
        key.name.as_str(),
    ]
}

fn context<'a>(env: &'a Envelope, subject: &'a [&'a str]) -> SealContext<'a> {
    SealContext {
        purpose: PURPOSE,
        origin: &env.origin,
        subject,
        uid: &env.uid,
        resource_version: &env.resource_version,
    }
}

/// Hex SHA-256 of a sealed payload's ciphertext: a sealed envelope's `contentHash`.
pub fn sealed_hash(ciphertext: &[u8]) -> String {
    hex::encode(Sha256::digest(ciphertext))
}

impl EncryptionHeader {
    /// Whether this is a sealing this build reads ([`SEAL_ALGORITHM`]).
    pub fn is_sealed(&self) -> bool {
        self.algorithm == SEAL_ALGORITHM
    }

    /// The recipients' names.
    pub fn recipient_names(&self) -> impl Iterator<Item = &str> {
        self.recipients.iter().map(|r| r.cluster.as_str())
    }

    /// `payload` (any bytes, not an object: a reader kubeconfig, §5.2) sealed
    /// to `recipients` under `ctx`, as a header JSON carries it.
    pub fn seal_payload(
        payload: &[u8],
        recipients: &[(&str, &SealingPublicKey)],
        ctx: &SealContext<'_>,
        rng: &mut impl CryptoRng,
    ) -> Result<Self, crate::seal::SealError> {
        crate::seal::seal(payload, recipients, ctx, rng).map(|s| Self::from_sealed(&s))
    }

    /// The payload of [`Self::seal_payload`], opened by `me`.
    pub fn open_payload(
        &self,
        me: &str,
        secret: &SealingSecretKey,
        ctx: &SealContext<'_>,
    ) -> Result<Vec<u8>, OpenError> {
        if !self.is_sealed() {
            return Err(OpenError::Corrupt("not a fleetbus-seal-v1 payload"));
        }
        self.to_sealed()
            .map_err(OpenError::Corrupt)?
            .open(me, secret, ctx)
    }

    fn to_sealed(&self) -> Result<Sealed, &'static str> {
        let b64 = |s: &str| STANDARD.decode(s).map_err(|_| "a field is not base64");
        if self.kem != HPKE_KEM_ID || self.kdf != HPKE_KDF_ID || self.aead != HPKE_AEAD_ID {
            return Err("an HPKE suite other than X25519/HKDF-SHA256/ChaCha20-Poly1305");
        }
        if self.recipients.len() > seal::MAX_RECIPIENTS {
            return Err("too many recipients");
        }
        let mut recipients = Vec::with_capacity(self.recipients.len());
        for r in &self.recipients {
            recipients.push(SealedKey {
                cluster: r.cluster.clone(),
                key_id: r.key_id.clone(),
                enc: b64(&r.enc)?,
                key: b64(&r.key)?,
            });
        }
        Ok(Sealed {
            nonce: b64(&self.nonce)?,
            recipients,
            ciphertext: b64(&self.ciphertext)?,
        })
    }

    fn from_sealed(s: &Sealed) -> Self {
        Self {
            algorithm: SEAL_ALGORITHM.to_owned(),
            // Each version has its own data key, sealed to each recipient below: there is
            // no long-lived key to name.
            key_id: String::new(),
            nonce: STANDARD.encode(&s.nonce),
            kem: HPKE_KEM_ID,
            kdf: HPKE_KDF_ID,
            aead: HPKE_AEAD_ID,
            recipients: s
                .recipients
                .iter()
                .map(|r| RecipientKey {
                    cluster: r.cluster.clone(),
                    key_id: r.key_id.clone(),
                    enc: STANDARD.encode(&r.enc),
                    key: STANDARD.encode(&r.key),
                })
                .collect(),
            ciphertext: STANDARD.encode(&s.ciphertext),
        }
    }

    /// The header with its names only: what an opened envelope keeps (the origin
    /// compares recipients; nothing needs the key material once opened).
    pub fn names_only(&self) -> Self {
        Self {
            nonce: String::new(),
            recipients: self
                .recipients
                .iter()
                .map(|r| RecipientKey {
                    cluster: r.cluster.clone(),
                    key_id: r.key_id.clone(),
                    enc: String::new(),
                    key: String::new(),
                })
                .collect(),
            ciphertext: String::new(),
            ..self.clone()
        }
    }
}

impl Envelope {
    /// Whether the envelope carries a sealed payload (opened or not).
    pub fn is_sealed(&self) -> bool {
        self.encryption
            .as_ref()
            .is_some_and(EncryptionHeader::is_sealed)
    }

    /// The clusters a sealed envelope is sealed to (none for a plain one).
    pub fn sealed_to(&self) -> impl Iterator<Item = &str> {
        self.encryption
            .iter()
            .filter(|e| e.is_sealed())
            .flat_map(EncryptionHeader::recipient_names)
    }

    /// This snapshot as it goes on the wire sealed to `recipients` (PROTOCOL §4.8): the
    /// object packed and sealed into the `encryption` header, `object` nil, `contentHash`
    /// the hash of the ciphertext. Bound to the origin, the object's subject, uid and
    /// resourceVersion.
    pub fn seal(
        &self,
        recipients: &[(&str, &SealingPublicKey)],
        rng: &mut impl CryptoRng,
    ) -> Result<Envelope, SealEnvelopeError> {
        let object = match (&self.object, self.tombstone, &self.encryption) {
            (Some(o), false, None) => o,
            _ => return Err(SealEnvelopeError::NotASnapshot),
        };
        let key =
            ObjectKey::from_object(&self.origin, object).ok_or(SealEnvelopeError::NoSubject)?;
        let tokens = subject_tokens(&key);
        let payload = pack_value(object).map_err(|e| SealEnvelopeError::Encode(e.to_string()))?;
        let sealed = seal::seal(&payload, recipients, &context(self, &tokens), rng)?;
        Ok(Envelope {
            content_hash: sealed_hash(&sealed.ciphertext),
            object: None,
            encryption: Some(EncryptionHeader::from_sealed(&sealed)),
            ..self.clone()
        })
    }

    /// A sealed envelope received on `key`'s subject, opened by `me`: the object back,
    /// `contentHash` recomputed from it (§4.1), the header kept with the recipients'
    /// names only. Check the result with [`Envelope::check`] like any snapshot.
    pub fn open(
        &self,
        key: &ObjectKey,
        me: &str,
        secret: &SealingSecretKey,
    ) -> Result<Envelope, OpenEnvelopeError> {
        let header = match (&self.encryption, self.tombstone, &self.object) {
            (Some(h), false, None) if h.is_sealed() => h,
            _ => return Err(OpenEnvelopeError::NotSealed),
        };
        let sealed = header.to_sealed().map_err(OpenEnvelopeError::Malformed)?;
        let tokens = subject_tokens(key);
        let payload = sealed.open(me, secret, &context(self, &tokens))?;
        let object = unpack_value(&payload)
            .map_err(|_| OpenEnvelopeError::Malformed("the sealed object does not decode"))?;
        Ok(Envelope {
            content_hash: content_hash(&object),
            object: Some(object),
            encryption: Some(header.names_only()),
            ..self.clone()
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{json, Value};

    fn secret(value: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"namespace": "apps", "name": "db", "uid": "u1", "resourceVersion": "7"},
               "type": "Opaque", "data": {"password": value}})
    }

    fn snapshot(obj: Value) -> Envelope {
        let t = chrono::DateTime::parse_from_rfc3339("2026-11-27T08:00:00.123Z").unwrap();
        Envelope::snapshot("c1", None, obj, t.into()).unwrap()
    }

    fn key_of(obj: &Value) -> ObjectKey {
        ObjectKey::from_object("c1", obj).unwrap()
    }

    fn keys() -> (SealingSecretKey, SealingSecretKey, SealingSecretKey) {
        let mut rng = rand::rng();
        (
            SealingSecretKey::generate(&mut rng),
            SealingSecretKey::generate(&mut rng),
            SealingSecretKey::generate(&mut rng),
        )
    }

    #[test]
    fn a_sealed_snapshot_round_trips_for_its_recipients_only() {
        let (k1, k2, k3) = keys();
        let obj = secret("czNjcmV0");
        let plain = snapshot(obj.clone());
        let (p1, p2) = (k1.public_key(), k2.public_key());
        let sealed = plain
            .seal(&[("c1", &p1), ("c2", &p2)], &mut rand::rng())
            .unwrap();
        assert!(sealed.is_sealed());
        assert_eq!(sealed.object, None);
        assert_ne!(sealed.content_hash, plain.content_hash);
        assert_eq!(sealed.sealed_to().collect::<Vec<_>>(), ["c1", "c2"]);
        let bytes = sealed.encode().unwrap();
        for needle in ["czNjcmV0", "s3cret", "password", &plain.content_hash] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle.as_bytes()),
                "{needle} on the wire"
            );
        }
        let back = Envelope::decode(&bytes).unwrap();
        assert_eq!(back, sealed);
        let key = key_of(&obj);
        assert_eq!(back.check(&key), Ok(()));
        let opened = back.open(&key, "c2", &k2).unwrap();
        assert_eq!(opened.object.as_ref(), Some(&obj));
        assert_eq!(opened.content_hash, plain.content_hash);
        assert_eq!(opened.check(&key), Ok(()));
        assert_eq!(opened.sealed_to().collect::<Vec<_>>(), ["c1", "c2"]);
        assert!(opened.encryption.as_ref().unwrap().ciphertext.is_empty());
        assert!(back.open(&key, "c1", &k1).is_ok());
        let not = back.open(&key, "c3", &k3).unwrap_err();
        assert_eq!(not.reason(), "not_a_recipient");
    }

    #[test]
    fn an_opened_envelope_is_never_published_in_clear() {
        let (k1, ..) = keys();
        let obj = secret("czNjcmV0");
        let sealed = snapshot(obj.clone())
            .seal(&[("c1", &k1.public_key())], &mut rand::rng())
            .unwrap();
        let opened = sealed.open(&key_of(&obj), "c1", &k1).unwrap();
        assert!(opened.encode().is_err());
        assert_eq!(
            opened.seal(&[("c1", &k1.public_key())], &mut rand::rng()),
            Err(SealEnvelopeError::NotASnapshot)
        );
    }

    #[test]
    fn a_sealed_blob_moved_to_another_object_or_version_does_not_open() {
        let (k1, ..) = keys();
        let obj = secret("czNjcmV0");
        let sealed = snapshot(obj.clone())
            .seal(&[("c1", &k1.public_key())], &mut rand::rng())
            .unwrap();
        // The same blob on another object's subject.
        let mut other = obj.clone();
        other["metadata"]["name"] = json!("web");
        let moved = sealed.open(&key_of(&other), "c1", &k1).unwrap_err();
        assert_eq!(moved.reason(), "seal_corrupt");
        // Under another resourceVersion or uid (a replay dressed as new).
        let mut bumped = sealed.clone();
        bumped.resource_version = "8".into();
        assert_eq!(
            bumped.open(&key_of(&obj), "c1", &k1).unwrap_err().reason(),
            "seal_corrupt"
        );
        let mut re_uid = sealed.clone();
        re_uid.uid = "u2".into();
        assert_eq!(
            re_uid.open(&key_of(&obj), "c1", &k1).unwrap_err().reason(),
            "seal_corrupt"
        );
    }

    #[test]
    fn a_tampered_header_is_refused_without_a_panic() {
        let (k1, ..) = keys();
        let obj = secret("czNjcmV0");
        let sealed = snapshot(obj.clone())
            .seal(&[("c1", &k1.public_key())], &mut rand::rng())
            .unwrap();
        let key = key_of(&obj);
        let tamper = |f: &dyn Fn(&mut EncryptionHeader)| {
            let mut e = sealed.clone();
            f(e.encryption.as_mut().unwrap());
            e.open(&key, "c1", &k1).unwrap_err().reason()
        };
        assert_eq!(tamper(&|h| h.ciphertext = "!!".into()), "seal_malformed");
        assert_eq!(tamper(&|h| h.nonce = String::new()), "seal_corrupt");
        assert_eq!(tamper(&|h| h.kem = 0x10), "seal_malformed");
        assert_eq!(
            tamper(&|h| h.recipients[0].key = "AAAA".into()),
            "seal_corrupt"
        );
        assert_eq!(
            tamper(&|h| h.ciphertext = STANDARD.encode(b"0123456789abcdef0123")),
            "seal_corrupt"
        );
        // A changed ciphertext no longer matches the declared contentHash.
        let mut e = sealed.clone();
        e.encryption.as_mut().unwrap().ciphertext = STANDARD.encode(b"x");
        assert_eq!(e.check(&key), Err(super::super::Mismatch::ContentHash));
        // Sealed with an object as well: malformed on decode.
        let mut wire: Value = rmp_serde::from_slice(&sealed.encode_msgpack().unwrap()).unwrap();
        wire["object"] = obj.clone();
        let both = rmp_serde::to_vec_named(&wire).unwrap();
        assert!(matches!(
            Envelope::decode(&both),
            Err(crate::DecodeError::Malformed { .. })
        ));
        // And a sealed tombstone.
        wire["object"] = Value::Null;
        wire["tombstone"] = json!(true);
        let tomb = rmp_serde::to_vec_named(&wire).unwrap();
        assert!(matches!(
            Envelope::decode(&tomb),
            Err(crate::DecodeError::Malformed { .. })
        ));
    }

    #[test]
    fn every_flipped_byte_of_a_sealed_envelope_is_refused_or_opens_the_same() {
        let (k1, ..) = keys();
        let obj = secret("czNjcmV0");
        let key = key_of(&obj);
        let bytes = snapshot(obj.clone())
            .seal(&[("c1", &k1.public_key())], &mut rand::rng())
            .unwrap()
            .encode_msgpack()
            .unwrap();
        let mut opened_some = 0;
        for i in 0..bytes.len() {
            let mut b = bytes.clone();
            b[i] ^= 0x41;
            // Never a panic; never another object. A flip in a field the
            // sealing does not bind (time, keyId) may still open to the same.
            let Ok(env) = Envelope::decode(&b) else {
                continue;
            };
            if env.check(&key).is_err() {
                continue;
            }
            if let Ok(opened) = env.open(&key, "c1", &k1) {
                assert_eq!(opened.object.as_ref(), Some(&obj), "byte {i}");
                opened_some += 1;
            }
        }
        // The unbound fields exist (so the loop reached `open`), and are few.
        assert!(
            opened_some > 0 && opened_some < bytes.len() / 4,
            "{opened_some}"
        );
    }

    #[test]
    fn a_large_object_is_compressed_inside_the_sealing() {
        let (k1, ..) = keys();
        let obj = secret(&"QUJD".repeat(50_000));
        let sealed = snapshot(obj.clone())
            .seal(&[("c1", &k1.public_key())], &mut rand::rng())
            .unwrap();
        let ciphertext = STANDARD
            .decode(&sealed.encryption.as_ref().unwrap().ciphertext)
            .unwrap();
        assert!(ciphertext.len() < 20_000, "{} bytes", ciphertext.len());
        let opened = sealed.open(&key_of(&obj), "c1", &k1).unwrap();
        assert_eq!(opened.object, Some(obj));
    }
}
