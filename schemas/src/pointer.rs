//! JSON Pointers (RFC 6901) as used by rule overrides, content matches and drift exclusions.

use thiserror::Error;

/// A JSON Pointer that failed to parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PointerError {
    /// A non-empty pointer must start with `/`.
    #[error("JSON pointer must start with '/'")]
    MissingLeadingSlash,
    /// `~` must be followed by `0` (for `~`) or `1` (for `/`).
    #[error("invalid escape '~' not followed by '0' or '1' in token {token:?}")]
    InvalidEscape {
        /// The offending raw token.
        token: String,
    },
    /// The pointer is empty (refers to the whole document) where a field is required.
    #[error("JSON pointer must not be empty")]
    Empty,
}

/// Parses a JSON Pointer into its unescaped reference tokens. `""` parses to no tokens
/// (the whole document).
pub fn parse_pointer(pointer: &str) -> Result<Vec<String>, PointerError> {
    if pointer.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = pointer.strip_prefix('/') else {
        return Err(PointerError::MissingLeadingSlash);
    };
    rest.split('/').map(unescape_token).collect()
}

/// Like [`parse_pointer`] but rejects the empty pointer: used where a field must be named.
pub fn parse_field_pointer(pointer: &str) -> Result<Vec<String>, PointerError> {
    if pointer.is_empty() {
        return Err(PointerError::Empty);
    }
    parse_pointer(pointer)
}

/// Escapes one reference token (`~` -> `~0`, `/` -> `~1`).
pub fn escape_token(token: &str) -> String {
    token.replace('~', "~0").replace('/', "~1")
}

/// Builds a pointer from unescaped tokens.
pub fn to_pointer<I, S>(tokens: I) -> String
where
    I: IntoIterator<Item = S>,
    S: AsRef<str>,
{
    tokens
        .into_iter()
        .map(|t| format!("/{}", escape_token(t.as_ref())))
        .collect()
}

fn unescape_token(raw: &str) -> Result<String, PointerError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.next() {
                Some('0') => out.push('~'),
                Some('1') => out.push('/'),
                _ => {
                    return Err(PointerError::InvalidEscape {
                        token: raw.to_owned(),
                    })
                }
            }
        } else {
            out.push(c);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_rfc6901_examples() {
        assert_eq!(parse_pointer("").unwrap(), Vec::<String>::new());
        assert_eq!(parse_pointer("/foo/0").unwrap(), vec!["foo", "0"]);
        assert_eq!(parse_pointer("/a~1b").unwrap(), vec!["a/b"]);
        assert_eq!(parse_pointer("/m~0n").unwrap(), vec!["m~n"]);
        assert_eq!(parse_pointer("/").unwrap(), vec![""]);
        assert_eq!(
            parse_pointer("/metadata/annotations/fleetbus.io~1rule").unwrap(),
            vec!["metadata", "annotations", "fleetbus.io/rule"]
        );
    }

    #[test]
    fn rejects_bad_pointers() {
        assert_eq!(
            parse_pointer("spec/replicas"),
            Err(PointerError::MissingLeadingSlash)
        );
        assert!(matches!(
            parse_pointer("/a~2"),
            Err(PointerError::InvalidEscape { .. })
        ));
        assert!(matches!(
            parse_pointer("/a~"),
            Err(PointerError::InvalidEscape { .. })
        ));
        assert_eq!(parse_field_pointer(""), Err(PointerError::Empty));
    }

    proptest! {
        #[test]
        fn round_trips(tokens in proptest::collection::vec(".*", 0..6)) {
            let p = to_pointer(&tokens);
            prop_assert_eq!(parse_pointer(&p).unwrap(), tokens);
        }
    }
}
