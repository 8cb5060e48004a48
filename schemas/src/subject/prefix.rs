//! The configurable subject prefix (default `fleetbus`) and names derived from it.

use std::fmt;
use std::str::FromStr;

use thiserror::Error;

/// The default subject prefix.
pub const DEFAULT_PREFIX: &str = "fleetbus";

/// A subject prefix: one or more dot-separated tokens of `[a-z0-9-]`, at most 64 chars.
/// Lowercase-only so that stream and bucket names derived from it cannot collide.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Prefix(String);

/// A prefix that is not of the form `[a-z0-9-]+(\.[a-z0-9-]+)*`.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("invalid subject prefix {0:?}: want dot-separated tokens of [a-z0-9-], at most 64 chars")]
pub struct InvalidPrefix(pub String);

impl Prefix {
    /// Validates and wraps a prefix.
    pub fn new(prefix: impl Into<String>) -> Result<Self, InvalidPrefix> {
        let prefix = prefix.into();
        let ok = prefix.len() <= 64
            && prefix.split('.').all(|t| {
                !t.is_empty()
                    && t.bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            });
        if ok {
            Ok(Self(prefix))
        } else {
            Err(InvalidPrefix(prefix))
        }
    }

    /// The prefix as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Stream name for a suffix: `fleetbus` + `OBJECTS` -> `FLEETBUS_OBJECTS`
    /// (dots become `_`, which cannot occur in a prefix token, so names stay distinct).
    pub fn stream_name(&self, suffix: &str) -> String {
        format!("{}_{suffix}", self.0.replace('.', "_").to_ascii_uppercase())
    }

    /// KV bucket name for a suffix: `fleetbus` + `registry` -> `fleetbus-registry`.
    pub fn bucket_name(&self, suffix: &str) -> String {
        format!("{}-{suffix}", self.0.replace('.', "_"))
    }
}

impl Default for Prefix {
    fn default() -> Self {
        Self(DEFAULT_PREFIX.to_owned())
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Prefix {
    type Err = InvalidPrefix;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl AsRef<str> for Prefix {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validates() {
        assert_eq!(Prefix::default().as_str(), "fleetbus");
        assert!(Prefix::new("acme.fleetbus").is_ok());
        assert!(Prefix::new("fleet-bus2").is_ok());
        for bad in [
            "", "Fleetbus", "a..b", ".a", "a.", "a*", "a>", "a b", "a_b", "$js",
        ] {
            assert!(Prefix::new(bad).is_err(), "{bad}");
        }
        assert!(Prefix::new("a".repeat(65)).is_err());
    }

    #[test]
    fn derived_names() {
        let p = Prefix::new("acme.fleetbus").unwrap();
        assert_eq!(p.stream_name("OBJECTS"), "ACME_FLEETBUS_OBJECTS");
        assert_eq!(p.bucket_name("registry"), "acme_fleetbus-registry");
        assert_eq!(Prefix::default().stream_name("DRIFT"), "FLEETBUS_DRIFT");
        assert_eq!(
            Prefix::default().bucket_name("registry"),
            "fleetbus-registry"
        );
    }
}
