//! Shared encode/decode errors and the schema-tagged JSON codec used by registry records and drift events.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use thiserror::Error;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A message that could not be decoded. Receivers skip the message and count it;
/// retrying cannot help.
#[derive(Debug, Error)]
pub enum DecodeError {
    /// The message declares a schema version this build does not know (a newer writer).
    #[error("unsupported schema version {found:?}")]
    UnsupportedVersion {
        /// The version the message declares.
        found: String,
    },
    /// The bytes are not a valid message of the expected schema.
    #[error("malformed message")]
    Malformed {
        /// What the decoder tripped on.
        #[source]
        source: BoxError,
    },
}

impl DecodeError {
    pub(crate) fn malformed(source: impl Into<BoxError>) -> Self {
        Self::Malformed {
            source: source.into(),
        }
    }

    /// Never: a message that does not decode now will not decode on a retry.
    pub fn is_transient(&self) -> bool {
        false
    }
}

/// A message that could not be encoded (a value with no representation in the format).
#[derive(Debug, Error)]
#[error("failed to encode message")]
pub struct EncodeError {
    #[source]
    source: BoxError,
}

impl EncodeError {
    pub(crate) fn new(source: impl Into<BoxError>) -> Self {
        Self {
            source: source.into(),
        }
    }
}

/// Deepest MessagePack nesting a reader accepts. Kubernetes objects reach the agent through
/// serde_json, whose limit is 128 levels; the envelope map and `object` add two. Without a
/// limit a hostile message of nested one-element arrays overflows the reader's stack.
pub const MAX_MSGPACK_DEPTH: usize = 130;

/// Decodes exactly one MessagePack value filling all of `bytes` (trailing bytes are an
/// error, so each message has one meaning), nested at most [`MAX_MSGPACK_DEPTH`] deep.
pub(crate) fn decode_msgpack<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    let mut cursor = std::io::Cursor::new(bytes);
    let value = {
        let mut de = rmp_serde::Deserializer::new(&mut cursor);
        de.set_max_depth(MAX_MSGPACK_DEPTH);
        T::deserialize(&mut de).map_err(DecodeError::malformed)?
    };
    let used = usize::try_from(cursor.position()).unwrap_or(usize::MAX);
    if used != bytes.len() {
        return Err(DecodeError::malformed(format!(
            "{} trailing bytes after the message",
            bytes.len().saturating_sub(used)
        )));
    }
    Ok(value)
}

#[derive(Serialize)]
struct Tagged<'a, T> {
    schema: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

#[derive(Deserialize)]
struct Probe {
    schema: Option<String>,
}

/// Encodes `body` as a JSON object whose first member is `"schema": <schema>`.
pub(crate) fn encode_json<T: Serialize>(schema: &str, body: &T) -> Result<Vec<u8>, EncodeError> {
    serde_json::to_vec(&Tagged { schema, body }).map_err(EncodeError::new)
}

/// Decodes a JSON object written by [`encode_json`], rejecting other schemas first so
/// that a newer writer's message is reported as [`DecodeError::UnsupportedVersion`].
pub(crate) fn decode_json<T: DeserializeOwned>(
    schema: &str,
    bytes: &[u8],
) -> Result<T, DecodeError> {
    let probe: Probe = serde_json::from_slice(bytes).map_err(DecodeError::malformed)?;
    match probe.schema {
        None => Err(DecodeError::malformed("missing \"schema\" member")),
        Some(found) if found != schema => Err(DecodeError::UnsupportedVersion { found }),
        Some(_) => serde_json::from_slice(bytes).map_err(DecodeError::malformed),
    }
}
