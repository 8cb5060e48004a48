//! Object snapshot envelope: the MessagePack message stored under `<p>.obj.<origin>...`.
//!
//! On the wire (PROTOCOL §4.6) the map is sent as it is up to [`COMPRESS_THRESHOLD`]
//! bytes, above that as one zstd frame when smaller. Readers tell the two apart by
//! [`ZSTD_MAGIC`] (a map never starts with `0x28`), not by a NATS header, so a payload
//! decodes from its bytes alone (KV and stream readers see no headers), and inflate at
//! most [`MAX_DECOMPRESSED`] bytes. The map inside is unchanged: `schemaVersion` stays 1.
//!
//! Layout (v1): one MessagePack map with string keys, written in this order:
//! `schemaVersion` (uint 1), `origin`, `originClusterID` (str|nil), `uid`,
//! `resourceVersion`, `generation` (int|nil), `contentHash`, `time` (RFC 3339 ms),
//! `tombstone` (bool), `object` (map|nil), `encryption` (nil), `signature` (nil),
//! `tombstoneReason` (nil | `"Deleted"` | `"Unpublished"`; appended last so the first
//! twelve entries keep their bytes). Readers look at `schemaVersion` first and skip
//! versions they do not know.

mod compress;
mod hash;
mod limits;
mod packed;
pub mod sealed;
mod sign;
mod verify;

pub use crate::codec::MAX_MSGPACK_DEPTH;
pub use compress::{COMPRESSION_LEVEL, COMPRESS_THRESHOLD, MAX_DECOMPRESSED, ZSTD_MAGIC};
pub use hash::{canonical_json, content_hash, normalize_for_hash, VOLATILE_METADATA_FIELDS};
pub use limits::{
    check_size, msg_id, republish_msg_id, tombstone_msg_id, TooLarge, DEFAULT_MAX_PAYLOAD,
    HEADER_ALLOWANCE,
};
pub use packed::{pack_value, unpack_value};
pub use sealed::{OpenEnvelopeError, RecipientKey, SealEnvelopeError};
pub use sign::{sign_value, verify_value, SignatureError, SIGNATURE_ALGORITHM, SIGNED_MAGIC};
pub use verify::Mismatch;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use thiserror::Error;

use crate::codec::{decode_msgpack, DecodeError, EncodeError};
use crate::time::rfc3339_ms;

/// The envelope version this build writes and reads.
pub const ENVELOPE_VERSION: u16 = 1;

/// One published version of an object, or its deletion (a tombstone).
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// Name of the publishing (origin) cluster.
    pub origin: String,
    /// kube-system UID of the origin cluster.
    pub origin_cluster_id: Option<String>,
    /// `metadata.uid` of the object on the origin.
    pub uid: String,
    /// `metadata.resourceVersion` of the object on the origin.
    pub resource_version: String,
    /// `metadata.generation`, if the kind has one.
    pub generation: Option<i64>,
    /// [`content_hash`] of `object`; empty for tombstones.
    pub content_hash: String,
    /// When the origin agent published this message.
    pub time: DateTime<Utc>,
    /// True if the object was deleted on the origin; `object` is then `None`.
    pub tombstone: bool,
    /// The object as JSON (apiVersion, kind, metadata, spec, ...).
    pub object: Option<Value>,
    /// The sealed payload of a sealed snapshot (`object` is then `None` on the wire, and
    /// once opened the object with the recipients' names here), else `None`.
    pub encryption: Option<EncryptionHeader>,
    /// The origin's signature ([`Envelope::sign`], PROTOCOL §4.9); `None`
    /// from agents in the insecure mode and before signatures.
    pub signature: Option<Signature>,
    /// Why the object is gone: `Some` exactly for tombstones. Decoding a tombstone
    /// written without the key gives `Some(Deleted)`.
    pub tombstone_reason: Option<TombstoneReason>,
}

/// Why a tombstone was published; sinks treat the two differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TombstoneReason {
    /// The object was deleted on the origin: every copy is deleted, whatever the rule's
    /// `orphanPolicy`.
    Deleted,
    /// The object still exists but is no longer published (it stopped matching, got the
    /// `resource-sync-disabled` annotation, or its rule went away): copies follow the
    /// rule's `orphanPolicy`.
    Unpublished,
}

impl TombstoneReason {
    /// The wire string (`Deleted` or `Unpublished`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Deleted => "Deleted",
            Self::Unpublished => "Unpublished",
        }
    }
}

impl std::fmt::Display for TombstoneReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How `object` is encrypted: for a sealed snapshot (PROTOCOL §4.8, [`sealed`]) the
/// sealed payload itself. `algorithm`, `keyId` and `nonce` are the three entries the first
/// release of v1 reserved (a reader of that release requires them and skips the message
/// as of an unsupported version); the others were added with sealing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EncryptionHeader {
    /// The construction: [`crate::seal::SEAL_ALGORITHM`] for a sealed snapshot.
    pub algorithm: String,
    /// Identifier of the key used; `""` when sealed (each version has its own data key).
    pub key_id: String,
    /// The payload AEAD's nonce, base64.
    pub nonce: String,
    /// RFC 9180 KEM id (`0x0020`, DHKEM(X25519, HKDF-SHA256)).
    #[serde(default)]
    pub kem: u16,
    /// RFC 9180 KDF id (`0x0001`, HKDF-SHA256).
    #[serde(default)]
    pub kdf: u16,
    /// RFC 9180 AEAD id (`0x0003`, ChaCha20-Poly1305), also the payload's AEAD.
    #[serde(default)]
    pub aead: u16,
    /// The data key sealed to each recipient, sorted by cluster name.
    #[serde(default)]
    pub recipients: Vec<RecipientKey>,
    /// The packed object (as [`pack_value`] packs it) under the data key, base64.
    #[serde(default)]
    pub ciphertext: String,
}

/// A signature over a message: the envelope's (PROTOCOL §4.9), and the same
/// shape wherever else a message is signed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Signature {
    /// Signature algorithm name.
    pub algorithm: String,
    /// Identifier of the signing key.
    pub key_id: String,
    /// Signature bytes, base64.
    pub value: String,
}

/// An object that cannot be wrapped in an envelope.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnvelopeError {
    /// The object lacks `metadata.uid` or `metadata.resourceVersion`.
    #[error("object has no metadata.{0}")]
    MissingMetadata(&'static str),
}

impl Envelope {
    /// A snapshot of `object` (uid, resourceVersion and generation read from its metadata,
    /// content hash computed).
    pub fn snapshot(
        origin: &str,
        origin_cluster_id: Option<&str>,
        object: Value,
        time: DateTime<Utc>,
    ) -> Result<Self, EnvelopeError> {
        let meta = object.get("metadata");
        let field = |name: &'static str| {
            meta.and_then(|m| m.get(name))
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or(EnvelopeError::MissingMetadata(name))
        };
        let uid = field("uid")?;
        let resource_version = field("resourceVersion")?;
        let generation = meta
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64);
        Ok(Self {
            origin: origin.to_owned(),
            origin_cluster_id: origin_cluster_id.map(str::to_owned),
            uid,
            resource_version,
            generation,
            content_hash: content_hash(&object),
            time,
            tombstone: false,
            object: Some(object),
            encryption: None,
            signature: None,
            tombstone_reason: None,
        })
    }

    /// A tombstone: the object with this uid was deleted on the origin (`Deleted`) or is
    /// no longer published (`Unpublished`). `resource_version` is the deletion's (or the
    /// object's current one when unpublished), or the last one published if unknown.
    pub fn tombstone(
        origin: &str,
        origin_cluster_id: Option<&str>,
        uid: &str,
        resource_version: &str,
        time: DateTime<Utc>,
        reason: TombstoneReason,
    ) -> Self {
        Self {
            origin: origin.to_owned(),
            origin_cluster_id: origin_cluster_id.map(str::to_owned),
            uid: uid.to_owned(),
            resource_version: resource_version.to_owned(),
            generation: None,
            content_hash: String::new(),
            time,
            tombstone: true,
            object: None,
            encryption: None,
            signature: None,
            tombstone_reason: Some(reason),
        }
    }

    /// The `Nats-Msg-Id` to publish this envelope with.
    pub fn msg_id(&self) -> String {
        if self.tombstone {
            let reason = self.tombstone_reason.unwrap_or(TombstoneReason::Deleted);
            tombstone_msg_id(&self.origin, &self.uid, &self.resource_version, reason)
        } else {
            msg_id(&self.origin, &self.uid, &self.resource_version)
        }
    }

    /// The `Nats-Msg-Id` for a snapshot published again after an `Unpublished` tombstone
    /// of the same version (see [`republish_msg_id`]), or for an envelope published again
    /// over a message its publisher did not publish; for a tombstone, its
    /// [`Self::msg_id`] followed by `:republished:<time>` (Unix milliseconds).
    pub fn republish_msg_id(&self) -> String {
        if self.tombstone {
            format!(
                "{}:republished:{}",
                self.msg_id(),
                self.time.timestamp_millis()
            )
        } else {
            republish_msg_id(&self.origin, &self.uid, &self.resource_version, self.time)
        }
    }

    /// The bytes to publish: the MessagePack map (v1 layout, see the module docs), in a
    /// zstd frame when it is larger than [`COMPRESS_THRESHOLD`] and the frame is smaller.
    /// An envelope above [`MAX_DECOMPRESSED`] before compression is an error: readers
    /// would refuse it.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        compress::maybe_compress(self.encode_msgpack()?)
    }

    /// The MessagePack map alone, never compressed (v1 layout, see the module docs).
    pub fn encode_msgpack(&self) -> Result<Vec<u8>, EncodeError> {
        if self.encryption.is_some() && self.object.is_some() {
            // An opened sealed envelope: encoding it would publish the object in clear.
            return Err(EncodeError::new(
                "an envelope with an encryption header carries no object on the wire",
            ));
        }
        let wire = WireOut {
            schema_version: ENVELOPE_VERSION,
            origin: &self.origin,
            origin_cluster_id: self.origin_cluster_id.as_deref(),
            uid: &self.uid,
            resource_version: &self.resource_version,
            generation: self.generation,
            content_hash: &self.content_hash,
            time: self.time,
            tombstone: self.tombstone,
            object: self.object.as_ref().map(SortedValue),
            encryption: self.encryption.as_ref(),
            signature: self.signature.as_ref(),
            tombstone_reason: self.tombstone_reason.map(TombstoneReason::as_str),
        };
        rmp_serde::to_vec_named(&wire).map_err(EncodeError::new)
    }

    /// Decodes an envelope. Another `schemaVersion`, or an encryption other than sealing
    /// (§4.8), is [`DecodeError::UnsupportedVersion`]; a sealed envelope decodes with its
    /// `object` `None` (open it with [`Envelope::open`]); anything else that does not
    /// decode is [`DecodeError::Malformed`], including a `tombstoneReason` on a snapshot
    /// or one that is not `Deleted`/`Unpublished`. A tombstone without the key (written
    /// before the key existed) reads as `Deleted`. Bytes starting with [`ZSTD_MAGIC`] are
    /// decompressed first (at most [`MAX_DECOMPRESSED`] bytes; a corrupt frame, trailing
    /// bytes or a larger output are `Malformed`).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        if compress::is_compressed(bytes) {
            let msgpack = compress::decompress(bytes)?;
            return Self::decode_msgpack(&msgpack);
        }
        Self::decode_msgpack(bytes)
    }

    /// Decodes the plain MessagePack map (what [`Self::encode_msgpack`] writes).
    fn decode_msgpack(bytes: &[u8]) -> Result<Self, DecodeError> {
        let probe: Probe = decode_msgpack(bytes)?;
        if probe.schema_version != u64::from(ENVELOPE_VERSION) {
            return Err(DecodeError::UnsupportedVersion {
                found: probe.schema_version.to_string(),
            });
        }
        let w: WireIn = decode_msgpack(bytes)?;
        let sealed = match &w.encryption {
            None => false,
            Some(enc) if enc.is_sealed() => {
                if w.tombstone || w.object.is_some() {
                    return Err(DecodeError::malformed(
                        "a sealed envelope is a snapshot whose object is nil",
                    ));
                }
                true
            }
            Some(enc) => {
                return Err(DecodeError::UnsupportedVersion {
                    found: format!("{ENVELOPE_VERSION}+encryption:{}", enc.algorithm),
                });
            }
        };
        if !sealed && w.tombstone != w.object.is_none() {
            return Err(DecodeError::malformed(
                "tombstones must have no object and snapshots must have one",
            ));
        }
        let tombstone_reason = match (w.tombstone, w.tombstone_reason.as_deref()) {
            (false, None) => None,
            (false, Some(_)) => {
                return Err(DecodeError::malformed(
                    "a snapshot must not have a tombstoneReason",
                ))
            }
            (true, None | Some("Deleted")) => Some(TombstoneReason::Deleted),
            (true, Some("Unpublished")) => Some(TombstoneReason::Unpublished),
            (true, Some(other)) => {
                return Err(DecodeError::malformed(format!(
                    "unknown tombstoneReason {other:?} (expected Deleted or Unpublished)"
                )))
            }
        };
        Ok(Self {
            origin: w.origin,
            origin_cluster_id: w.origin_cluster_id,
            uid: w.uid,
            resource_version: w.resource_version,
            generation: w.generation,
            content_hash: w.content_hash,
            time: w.time,
            tombstone: w.tombstone,
            object: w.object,
            encryption: w.encryption,
            signature: w.signature,
            tombstone_reason,
        })
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WireOut<'a> {
    schema_version: u16,
    origin: &'a str,
    #[serde(rename = "originClusterID")]
    origin_cluster_id: Option<&'a str>,
    uid: &'a str,
    resource_version: &'a str,
    generation: Option<i64>,
    content_hash: &'a str,
    #[serde(with = "rfc3339_ms")]
    time: DateTime<Utc>,
    tombstone: bool,
    object: Option<SortedValue<'a>>,
    encryption: Option<&'a EncryptionHeader>,
    signature: Option<&'a Signature>,
    // Last, after the twelve original entries, so their bytes do not move.
    tombstone_reason: Option<&'static str>,
}

/// Serializes a JSON value with object members sorted by key, so the bytes on the wire do
/// not depend on whether serde_json keeps insertion order (its `preserve_order` feature).
struct SortedValue<'a>(&'a Value);

impl Serialize for SortedValue<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self.0 {
            Value::Object(map) => {
                let mut entries: Vec<_> = map.iter().collect();
                entries.sort_by(|a, b| a.0.cmp(b.0));
                let mut m = serializer.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    m.serialize_entry(k, &SortedValue(v))?;
                }
                m.end()
            }
            Value::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for v in items {
                    seq.serialize_element(&SortedValue(v))?;
                }
                seq.end()
            }
            scalar => scalar.serialize(serializer),
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Probe {
    // u64, not u16: any future version number, however large, is reported as
    // unsupported rather than malformed.
    schema_version: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireIn {
    origin: String,
    #[serde(default, rename = "originClusterID")]
    origin_cluster_id: Option<String>,
    uid: String,
    resource_version: String,
    #[serde(default)]
    generation: Option<i64>,
    #[serde(default)]
    content_hash: String,
    #[serde(with = "rfc3339_ms")]
    time: DateTime<Utc>,
    #[serde(default)]
    tombstone: bool,
    #[serde(default)]
    object: Option<Value>,
    #[serde(default)]
    encryption: Option<EncryptionHeader>,
    #[serde(default)]
    signature: Option<Signature>,
    // A string here, checked in `decode`, so an unknown reason is reported as such.
    #[serde(default)]
    tombstone_reason: Option<String>,
}
