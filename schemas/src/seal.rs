//! Sealing: a payload readable only by the clusters it is sealed to (PROTOCOL §4.8).
//!
//! Each sealing draws a fresh random 32-byte data key, encrypts the payload under it with
//! ChaCha20-Poly1305, and seals the data key to every recipient's X25519 sealing key with
//! HPKE (RFC 9180, base mode, DHKEM(X25519, HKDF-SHA256), HKDF-SHA256, ChaCha20-Poly1305).
//! The [`SealContext`] (origin, the object's identity, its uid and resourceVersion) is
//! bound twice: into every recipient's HPKE `info` (with the recipient's name) and as the
//! payload's AEAD associated data. A sealed blob moved to another object, another version
//! or another origin's subtree therefore does not open, and a recipient entry copied
//! under another cluster's name does not either.
//!
//! Pure: no IO; randomness comes from the caller's `CryptoRng`, so tests can pin it.

use chacha20poly1305::aead::{Aead as _, KeyInit as _, Payload};
use chacha20poly1305::ChaCha20Poly1305 as PayloadAead;
use hpke::aead::ChaCha20Poly1305;
use hpke::kdf::HkdfSha256;
use hpke::kem::X25519HkdfSha256;
use hpke::{Deserializable as _, Kem as _, OpModeR, OpModeS, Serializable as _};
use rand::CryptoRng;
use thiserror::Error;

/// The `encryption.algorithm` of a sealed envelope: the construction above, version 1.
pub const SEAL_ALGORITHM: &str = "fleetbus-seal-v1";

/// RFC 9180 identifiers of the HPKE suite, carried in the header so a reader can tell a
/// suite it does not implement from a corrupt message.
pub const HPKE_KEM_ID: u16 = 0x0020;
/// HKDF-SHA256.
pub const HPKE_KDF_ID: u16 = 0x0001;
/// ChaCha20-Poly1305 (also the payload's AEAD).
pub const HPKE_AEAD_ID: u16 = 0x0003;

/// Length of a sealing key, public or secret, and of an encapsulated key (X25519).
pub const KEY_LEN: usize = 32;
const DATA_KEY_LEN: usize = 32;
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;
/// Most recipients one sealed payload may name: a fleet's sinks plus the origin. Bounds
/// what a hostile header makes a reader scan.
pub const MAX_RECIPIENTS: usize = 10_000;

type Kem = X25519HkdfSha256;

/// A cluster's public sealing key (X25519), as its certificate carries it.
#[derive(Clone, PartialEq, Eq)]
pub struct SealingPublicKey(<Kem as hpke::Kem>::PublicKey);

/// A cluster's secret sealing key (X25519). Never leaves its cluster.
#[derive(Clone)]
pub struct SealingSecretKey(<Kem as hpke::Kem>::PrivateKey);

impl std::fmt::Debug for SealingPublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SealingPublicKey({})", hex::encode(self.to_bytes()))
    }
}

impl std::fmt::Debug for SealingSecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SealingSecretKey(..)")
    }
}

/// Key bytes of the wrong length, or not a usable X25519 key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("not an X25519 sealing key ({len} bytes; {KEY_LEN} expected)")]
pub struct BadKey {
    /// How many bytes were given.
    pub len: usize,
}

/// A key of the KEM from its raw bytes.
fn key_from<K: hpke::Deserializable>(bytes: &[u8]) -> Result<K, BadKey> {
    K::from_bytes(bytes).map_err(|_| BadKey { len: bytes.len() })
}

/// The raw bytes of a key of the KEM (32 for X25519; shorter output is zero-padded,
/// never a panic).
fn key_bytes<K: hpke::Serializable>(key: &K) -> [u8; KEY_LEN] {
    let mut out = [0; KEY_LEN];
    for (o, b) in out.iter_mut().zip(key.to_bytes().iter()) {
        *o = *b;
    }
    out
}

impl SealingPublicKey {
    /// The key from its 32 raw bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, BadKey> {
        key_from(bytes).map(Self)
    }

    /// The 32 raw bytes.
    pub fn to_bytes(&self) -> [u8; KEY_LEN] {
        key_bytes(&self.0)
    }

    /// A short name of the key: the first 8 bytes of its SHA-256, hex. Tells an
    /// origin that a recipient's key changed (a rotation) without opening anything.
    pub fn key_id(&self) -> String {
        use sha2::Digest as _;
        hex::encode(&sha2::Sha256::digest(self.to_bytes())[..8])
    }
}

impl SealingSecretKey {
    /// The key from its 32 raw bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, BadKey> {
        key_from(bytes).map(Self)
    }

    /// The 32 raw bytes (to store the key; handle as a secret).
    pub fn to_bytes(&self) -> [u8; KEY_LEN] {
        key_bytes(&self.0)
    }

    /// The matching public key.
    pub fn public_key(&self) -> SealingPublicKey {
        SealingPublicKey(Kem::sk_to_pk(&self.0))
    }

    /// A new random key.
    pub fn generate(rng: &mut impl CryptoRng) -> Self {
        Self(Kem::gen_keypair(rng).0)
    }
}

/// What a sealed payload is bound to: opening it under any other context fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealContext<'a> {
    /// What is sealed (`"object"`, `"kubeconfig"`): a blob of one use is never read as
    /// another.
    pub purpose: &'a str,
    /// The publishing cluster.
    pub origin: &'a str,
    /// The subject's identity of what is sealed (for an object: group, version, kind,
    /// namespace, name).
    pub subject: &'a [&'a str],
    /// `metadata.uid` of the object (or of the record) on the origin.
    pub uid: &'a str,
    /// `metadata.resourceVersion` (or the record's version).
    pub resource_version: &'a str,
}

impl SealContext<'_> {
    /// Length-prefixed fields, so no two contexts give the same bytes.
    fn bytes(&self, recipient: Option<&str>) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        let mut field = |s: &str| {
            let len = u32::try_from(s.len()).unwrap_or(u32::MAX);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        };
        field(SEAL_ALGORITHM);
        field(self.purpose);
        field(self.origin);
        field(&self.subject.len().to_string());
        for token in self.subject {
            field(token);
        }
        field(self.uid);
        field(self.resource_version);
        if let Some(r) = recipient {
            field(r);
        }
        out
    }
}

/// The data key sealed to one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SealedKey {
    /// The recipient cluster's name.
    pub cluster: String,
    /// [`SealingPublicKey::key_id`] of the key it was sealed to.
    pub key_id: String,
    /// The HPKE encapsulated key (32 bytes).
    pub enc: Vec<u8>,
    /// The data key sealed with HPKE (32 bytes and a 16-byte tag).
    pub key: Vec<u8>,
}

/// A sealed payload: what the `encryption` header of an envelope carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sealed {
    /// The payload AEAD's nonce (12 bytes).
    pub nonce: Vec<u8>,
    /// One entry per recipient, sorted by cluster name, names unique.
    pub recipients: Vec<SealedKey>,
    /// The payload under the data key, with its 16-byte tag.
    pub ciphertext: Vec<u8>,
}

/// Why a payload could not be sealed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SealError {
    /// Nobody to seal to (the origin always seals to itself too).
    #[error("no recipients")]
    NoRecipients,
    /// More recipients than [`MAX_RECIPIENTS`].
    #[error("{0} recipients; at most {MAX_RECIPIENTS}")]
    TooManyRecipients(usize),
    /// The crypto library refused (a low-order public key, say).
    #[error("sealing to {cluster:?} failed: {reason}")]
    Crypto {
        /// The recipient.
        cluster: String,
        /// What the library said.
        reason: String,
    },
}

/// Why a sealed payload did not open.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum OpenError {
    /// This cluster is not among the recipients: it is not meant to read it.
    #[error("this cluster is not a recipient")]
    NotARecipient,
    /// It names this cluster but does not open: tampered, moved to another object or
    /// version, sealed to a key this cluster no longer holds, or not well formed.
    #[error("the sealed payload does not open: {0}")]
    Corrupt(&'static str),
}

impl OpenError {
    /// A short name for metrics and logs: `not_a_recipient` or `seal_corrupt`.
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotARecipient => "not_a_recipient",
            Self::Corrupt(_) => "seal_corrupt",
        }
    }
}

/// Seals `payload` to `recipients` (a cluster named twice is sealed to once, with its
/// first key), bound to `ctx`.
pub fn seal(
    payload: &[u8],
    recipients: &[(&str, &SealingPublicKey)],
    ctx: &SealContext<'_>,
    rng: &mut impl CryptoRng,
) -> Result<Sealed, SealError> {
    if recipients.is_empty() {
        return Err(SealError::NoRecipients);
    }
    if recipients.len() > MAX_RECIPIENTS {
        return Err(SealError::TooManyRecipients(recipients.len()));
    }
    let mut data_key = [0u8; DATA_KEY_LEN];
    rng.fill_bytes(&mut data_key);
    let mut nonce = [0u8; NONCE_LEN];
    rng.fill_bytes(&mut nonce);
    let aad = ctx.bytes(None);
    let cipher = PayloadAead::new(chacha20poly1305::Key::from_slice(&data_key));
    let ciphertext = cipher
        .encrypt(
            chacha20poly1305::Nonce::from_slice(&nonce),
            Payload {
                msg: payload,
                aad: &aad,
            },
        )
        .map_err(|e| SealError::Crypto {
            cluster: String::new(),
            reason: e.to_string(),
        })?;
    let mut sorted: Vec<_> = recipients.to_vec();
    sorted.sort_by(|a, b| a.0.cmp(b.0));
    sorted.dedup_by(|a, b| a.0 == b.0);
    let mut keys = Vec::with_capacity(sorted.len());
    for (cluster, pk) in sorted {
        let info = ctx.bytes(Some(cluster));
        let (enc, key) = hpke::single_shot_seal::<ChaCha20Poly1305, HkdfSha256, Kem, _>(
            &OpModeS::Base,
            &pk.0,
            &info,
            &data_key,
            b"",
            rng,
        )
        .map_err(|e| SealError::Crypto {
            cluster: cluster.to_owned(),
            reason: e.to_string(),
        })?;
        keys.push(SealedKey {
            cluster: cluster.to_owned(),
            key_id: pk.key_id(),
            enc: enc.to_bytes().to_vec(),
            key,
        });
    }
    data_key.fill(0);
    Ok(Sealed {
        nonce: nonce.to_vec(),
        recipients: keys,
        ciphertext,
    })
}

impl Sealed {
    /// The recipients' names, in order.
    pub fn recipient_names(&self) -> impl Iterator<Item = &str> {
        self.recipients.iter().map(|r| r.cluster.as_str())
    }

    /// Whether `cluster` is among the recipients.
    pub fn is_recipient(&self, cluster: &str) -> bool {
        self.recipients.iter().any(|r| r.cluster == cluster)
    }

    /// The payload, opened by `me` with its secret key under `ctx`.
    pub fn open(
        &self,
        me: &str,
        secret: &SealingSecretKey,
        ctx: &SealContext<'_>,
    ) -> Result<Vec<u8>, OpenError> {
        if self.recipients.len() > MAX_RECIPIENTS {
            return Err(OpenError::Corrupt("too many recipients"));
        }
        let entry = self
            .recipients
            .iter()
            .find(|r| r.cluster == me)
            .ok_or(OpenError::NotARecipient)?;
        if entry.enc.len() != KEY_LEN || entry.key.len() != DATA_KEY_LEN + TAG_LEN {
            return Err(OpenError::Corrupt("a sealed key of the wrong length"));
        }
        if self.nonce.len() != NONCE_LEN || self.ciphertext.len() < TAG_LEN {
            return Err(OpenError::Corrupt(
                "a nonce or ciphertext of the wrong length",
            ));
        }
        let enc = <Kem as hpke::Kem>::EncappedKey::from_bytes(&entry.enc)
            .map_err(|_| OpenError::Corrupt("not an X25519 encapsulated key"))?;
        let info = ctx.bytes(Some(me));
        let mut data_key = hpke::single_shot_open::<ChaCha20Poly1305, HkdfSha256, Kem>(
            &OpModeR::Base,
            &secret.0,
            &enc,
            &info,
            &entry.key,
            b"",
        )
        .map_err(|_| {
            OpenError::Corrupt(
                "the data key does not open with this cluster's key under this context",
            )
        })?;
        if data_key.len() != DATA_KEY_LEN {
            return Err(OpenError::Corrupt("a data key of the wrong length"));
        }
        let aad = ctx.bytes(None);
        let cipher = PayloadAead::new(chacha20poly1305::Key::from_slice(&data_key));
        data_key.fill(0);
        cipher
            .decrypt(
                chacha20poly1305::Nonce::from_slice(&self.nonce),
                Payload {
                    msg: &self.ciphertext,
                    aad: &aad,
                },
            )
            .map_err(|_| OpenError::Corrupt("the payload does not open under its data key"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ctx<'a>(subject: &'a [&'a str], rv: &'a str) -> SealContext<'a> {
        SealContext {
            purpose: "object",
            origin: "c1",
            subject,
            uid: "u1",
            resource_version: rv,
        }
    }

    const SUBJECT: &[&str] = &["", "v1", "Secret", "apps", "db"];

    fn keys(n: usize) -> Vec<SealingSecretKey> {
        let mut rng = rand::rng();
        (0..n)
            .map(|_| SealingSecretKey::generate(&mut rng))
            .collect()
    }

    fn sealed_to(names: &[&str], sks: &[SealingSecretKey], payload: &[u8]) -> Sealed {
        let pks: Vec<_> = sks.iter().map(SealingSecretKey::public_key).collect();
        let recipients: Vec<_> = names.iter().copied().zip(pks.iter()).collect();
        seal(payload, &recipients, &ctx(SUBJECT, "7"), &mut rand::rng()).unwrap()
    }

    #[test]
    fn every_recipient_opens_it_and_no_one_else() {
        let sks = keys(3);
        let s = sealed_to(&["c2", "c1"], &sks[..2], b"s3cret");
        assert_eq!(s.recipient_names().collect::<Vec<_>>(), ["c1", "c2"]);
        assert_eq!(
            s.open("c2", &sks[0], &ctx(SUBJECT, "7")).unwrap(),
            b"s3cret"
        );
        assert_eq!(
            s.open("c1", &sks[1], &ctx(SUBJECT, "7")).unwrap(),
            b"s3cret"
        );
        assert_eq!(
            s.open("c3", &sks[2], &ctx(SUBJECT, "7")),
            Err(OpenError::NotARecipient)
        );
        assert_eq!(OpenError::NotARecipient.reason(), "not_a_recipient");
        // A cluster that claims a recipient's name but holds another key.
        assert!(matches!(
            s.open("c2", &sks[2], &ctx(SUBJECT, "7")),
            Err(OpenError::Corrupt(_))
        ));
        // The plaintext is nowhere in the sealed form.
        let all = [s.nonce.clone(), s.ciphertext.clone()].concat();
        assert!(!all.windows(6).any(|w| w == b"s3cret"));
    }

    #[test]
    fn each_sealing_has_its_own_data_key() {
        let sks = keys(1);
        let a = sealed_to(&["c1"], &sks, b"same");
        let b = sealed_to(&["c1"], &sks, b"same");
        assert_ne!(a.ciphertext, b.ciphertext);
        assert_ne!(a.recipients[0].key, b.recipients[0].key);
    }

    #[test]
    fn tampering_anywhere_is_corrupt() {
        let sks = keys(1);
        let s = sealed_to(&["c1"], &sks, b"payload");
        let c = ctx(SUBJECT, "7");
        let mut t = s.clone();
        t.ciphertext[0] ^= 1;
        assert!(matches!(
            t.open("c1", &sks[0], &c),
            Err(OpenError::Corrupt(_))
        ));
        let mut t = s.clone();
        t.nonce[0] ^= 1;
        assert!(matches!(
            t.open("c1", &sks[0], &c),
            Err(OpenError::Corrupt(_))
        ));
        let mut t = s.clone();
        t.recipients[0].key[3] ^= 1;
        assert!(matches!(
            t.open("c1", &sks[0], &c),
            Err(OpenError::Corrupt(_))
        ));
        let mut t = s.clone();
        t.recipients[0].enc[3] ^= 1;
        assert!(matches!(
            t.open("c1", &sks[0], &c),
            Err(OpenError::Corrupt(_))
        ));
        // An entry renamed to another recipient does not open for it either.
        let other = keys(1);
        let mut t = s.clone();
        t.recipients[0].cluster = "c9".into();
        assert!(matches!(
            t.open("c9", &other[0], &c),
            Err(OpenError::Corrupt(_))
        ));
        assert_eq!(s.open("c1", &sks[0], &c).unwrap(), b"payload");
    }

    #[test]
    fn a_blob_moved_to_another_object_version_or_origin_does_not_open() {
        let sks = keys(1);
        let s = sealed_to(&["c1"], &sks, b"payload");
        let other_name: &[&str] = &["", "v1", "Secret", "apps", "web"];
        let other_ns: &[&str] = &["", "v1", "Secret", "prod", "db"];
        let kind: &[&str] = &["", "v1", "ConfigMap", "apps", "db"];
        for c in [
            ctx(other_name, "7"),
            ctx(other_ns, "7"),
            ctx(kind, "7"),
            ctx(SUBJECT, "8"),
            SealContext {
                origin: "c2",
                ..ctx(SUBJECT, "7")
            },
            SealContext {
                uid: "u2",
                ..ctx(SUBJECT, "7")
            },
            SealContext {
                purpose: "kubeconfig",
                ..ctx(SUBJECT, "7")
            },
        ] {
            assert!(
                matches!(s.open("c1", &sks[0], &c), Err(OpenError::Corrupt(_))),
                "{c:?}"
            );
        }
        // Fields are length-prefixed: shifting a character between two is another context.
        let shifted: &[&str] = &["", "v1", "Secret", "app", "sdb"];
        assert!(s.open("c1", &sks[0], &ctx(shifted, "7")).is_err());
    }

    #[test]
    fn garbage_never_panics() {
        let sks = keys(1);
        let c = ctx(SUBJECT, "7");
        for (enc, key, nonce, ct) in [
            (vec![], vec![], vec![], vec![]),
            (vec![0; 32], vec![0; 48], vec![0; 12], vec![0; 16]),
            (vec![0; 31], vec![0; 48], vec![0; 12], vec![0; 40]),
            (vec![0xff; 32], vec![0; 47], vec![0; 12], vec![0; 40]),
            (vec![1; 32], vec![2; 48], vec![3; 11], vec![4; 15]),
        ] {
            let s = Sealed {
                nonce,
                recipients: vec![SealedKey {
                    cluster: "c1".into(),
                    key_id: String::new(),
                    enc,
                    key,
                }],
                ciphertext: ct,
            };
            assert!(matches!(
                s.open("c1", &sks[0], &c),
                Err(OpenError::Corrupt(_))
            ));
        }
        assert!(SealingPublicKey::from_bytes(&[1, 2, 3]).is_err());
        assert!(SealingSecretKey::from_bytes(&[0; 33]).is_err());
        assert_eq!(
            seal(b"x", &[], &c, &mut rand::rng()),
            Err(SealError::NoRecipients)
        );
    }

    #[test]
    fn keys_round_trip_through_bytes() {
        let sk = keys(1).remove(0);
        let back = SealingSecretKey::from_bytes(&sk.to_bytes()).unwrap();
        assert_eq!(back.public_key(), sk.public_key());
        let pk = SealingPublicKey::from_bytes(&sk.public_key().to_bytes()).unwrap();
        assert_eq!(pk, sk.public_key());
        assert_eq!(format!("{back:?}"), "SealingSecretKey(..)");
    }
}
