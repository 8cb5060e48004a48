//! Reversible escaping of one name into one subject token (also a valid KV key token).

use std::borrow::Cow;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use thiserror::Error;

/// First character of an escaped token. It is outside the plain alphabet, so a token
/// starting with it is always an escaped one, and it is valid in subjects and KV keys.
pub const ESCAPE_MARKER: char = '=';

/// Token for the core API group (whose name is the empty string).
pub const CORE_GROUP_TOKEN: &str = "core";

/// Token for "no namespace" (cluster-scoped objects).
pub const CLUSTER_SCOPED_TOKEN: &str = "_";

/// Plain tokens that stand for something else; a real name equal to one is escaped.
const RESERVED: [&str; 2] = [CORE_GROUP_TOKEN, CLUSTER_SCOPED_TOKEN];

/// A subject token that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TokenError {
    /// The token is empty.
    #[error("empty token")]
    Empty,
    /// A plain token with a character outside `[A-Za-z0-9_-]`.
    #[error("token {0:?} has a character outside [A-Za-z0-9_-] and is not escaped")]
    InvalidChar(String),
    /// A reserved word (`core`, `_`) where a name is expected.
    #[error("token {0:?} is reserved and does not stand for a name here")]
    Reserved(String),
    /// The part after the marker is not unpadded URL-safe base64.
    #[error("escaped token {0:?} is not unpadded URL-safe base64")]
    BadBase64(String),
    /// The escaped bytes are not UTF-8.
    #[error("escaped token {0:?} does not decode to UTF-8")]
    NotUtf8(String),
    /// The token decodes, but the encoder would have written it differently
    /// (e.g. an escaped plain name); rejected so each name has exactly one subject.
    #[error("token {0:?} is not in canonical form")]
    NonCanonical(String),
}

fn is_plain(raw: &str) -> bool {
    !raw.is_empty()
        && raw
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        && !RESERVED.contains(&raw)
}

/// Encodes any string as a token: names of the form `[A-Za-z0-9_-]+` (except the reserved
/// `core` and `_`) are kept as they are; anything else becomes `=` + unpadded URL-safe base64
/// of its UTF-8 bytes. The result is a valid subject token and KV key token, and distinct
/// inputs give distinct tokens.
pub fn encode_token(raw: &str) -> Cow<'_, str> {
    if is_plain(raw) {
        Cow::Borrowed(raw)
    } else {
        let mut out = String::with_capacity(1 + raw.len().div_ceil(3) * 4);
        out.push(ESCAPE_MARKER);
        URL_SAFE_NO_PAD.encode_string(raw.as_bytes(), &mut out);
        Cow::Owned(out)
    }
}

/// Decodes a token written by [`encode_token`]. Only canonical tokens are accepted.
pub fn decode_token(token: &str) -> Result<String, TokenError> {
    if token.is_empty() {
        return Err(TokenError::Empty);
    }
    let Some(b64) = token.strip_prefix(ESCAPE_MARKER) else {
        if is_plain(token) {
            return Ok(token.to_owned());
        }
        if RESERVED.contains(&token) {
            return Err(TokenError::Reserved(token.to_owned()));
        }
        return Err(TokenError::InvalidChar(token.to_owned()));
    };
    let bytes = URL_SAFE_NO_PAD
        .decode(b64)
        .map_err(|_| TokenError::BadBase64(token.to_owned()))?;
    let raw = String::from_utf8(bytes).map_err(|_| TokenError::NotUtf8(token.to_owned()))?;
    if is_plain(&raw) {
        return Err(TokenError::NonCanonical(token.to_owned()));
    }
    Ok(raw)
}

/// Token for an API group: the core group `""` is `core`.
pub fn encode_group(group: &str) -> Cow<'_, str> {
    if group.is_empty() {
        Cow::Borrowed(CORE_GROUP_TOKEN)
    } else {
        encode_token(group)
    }
}

/// Inverse of [`encode_group`].
pub fn decode_group(token: &str) -> Result<String, TokenError> {
    if token == CORE_GROUP_TOKEN {
        Ok(String::new())
    } else {
        decode_token(token)
    }
}

/// Token for a namespace: cluster-scoped (`None`) is `_`.
pub fn encode_namespace(namespace: Option<&str>) -> Cow<'_, str> {
    match namespace {
        None => Cow::Borrowed(CLUSTER_SCOPED_TOKEN),
        Some(ns) => encode_token(ns),
    }
}

/// Inverse of [`encode_namespace`].
pub fn decode_namespace(token: &str) -> Result<Option<String>, TokenError> {
    if token == CLUSTER_SCOPED_TOKEN {
        Ok(None)
    } else {
        decode_token(token).map(Some)
    }
}

/// True if `token` can be one token of a NATS subject: non-empty, no `.`, `*`, `>` or whitespace.
pub fn is_valid_subject_token(token: &str) -> bool {
    !token.is_empty()
        && !token
            .chars()
            .any(|c| c == '.' || c == '*' || c == '>' || c.is_whitespace() || c == '\0')
}

/// True if `token` can be one dot-separated part of a JetStream KV key (`[-/_=A-Za-z0-9]+`).
pub fn is_valid_kv_token(token: &str) -> bool {
    !token.is_empty()
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'/' | b'_' | b'='))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn examples() {
        assert_eq!(encode_token("apps"), "apps");
        assert_eq!(
            encode_token("networking.k8s.io"),
            "=bmV0d29ya2luZy5rOHMuaW8"
        );
        assert_eq!(
            encode_token("system:controller:foo"),
            "=c3lzdGVtOmNvbnRyb2xsZXI6Zm9v"
        );
        assert_eq!(encode_token("kube-system"), "kube-system");
        assert_eq!(encode_token(""), "=");
        assert_eq!(encode_token("core"), "=Y29yZQ");
        assert_eq!(encode_token("_"), "=Xw");
        assert_eq!(encode_group(""), "core");
        assert_eq!(encode_group("core"), "=Y29yZQ");
        assert_eq!(encode_namespace(None), "_");
        assert_eq!(encode_namespace(Some("_")), "=Xw");
        assert_eq!(decode_group("core").unwrap(), "");
        assert_eq!(decode_group("=Y29yZQ").unwrap(), "core");
        assert_eq!(decode_namespace("_").unwrap(), None);
        assert_eq!(decode_token("=").unwrap(), "");
    }

    #[test]
    fn rejects_non_canonical_and_garbage() {
        // "apps" escaped: decodes, but the encoder writes it plain.
        assert_eq!(
            decode_token("=YXBwcw"),
            Err(TokenError::NonCanonical("=YXBwcw".into()))
        );
        assert!(matches!(
            decode_token("a.b"),
            Err(TokenError::InvalidChar(_))
        ));
        assert!(matches!(decode_token("=!!"), Err(TokenError::BadBase64(_))));
        assert!(matches!(
            decode_token("=Y29yZQ=="),
            Err(TokenError::BadBase64(_))
        ));
        // Non-zero trailing bits: another spelling of the same bytes.
        assert!(matches!(decode_token("=Xx"), Err(TokenError::BadBase64(_))));
        assert!(matches!(decode_token("=_w"), Err(TokenError::NotUtf8(_))));
        assert_eq!(decode_token(""), Err(TokenError::Empty));
        // The reserved words are not names by themselves in the generic codec.
        assert!(matches!(decode_token("core"), Err(TokenError::Reserved(_))));
        assert!(matches!(decode_token("_"), Err(TokenError::Reserved(_))));
    }
}
