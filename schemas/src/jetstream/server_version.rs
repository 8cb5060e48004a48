//! The minimum nats-server version and a parser for the version the server reports.

use std::fmt;

use thiserror::Error;

/// Oldest nats-server the agent accepts: 2.11 brought per-message TTLs and
/// subject delete markers, which the beats bucket needs (before that, 2.10.8
/// added fields to the account info reply that async-nats needs to create KV
/// buckets, and 2.10 multi-filter consumers).
pub const MIN_NATS_SERVER_VERSION: ServerVersion = ServerVersion {
    major: 2,
    minor: 11,
    patch: 0,
};

/// A `major.minor.patch` server version (pre-release and build suffixes ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ServerVersion {
    /// Major version.
    pub major: u32,
    /// Minor version.
    pub minor: u32,
    /// Patch version.
    pub patch: u32,
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// A server version that is unusable.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ServerVersionError {
    /// The version string is not `[v]major.minor.patch[-pre][+build]`.
    #[error("cannot parse nats-server version {0:?}")]
    Unparsable(String),
    /// The server is older than [`MIN_NATS_SERVER_VERSION`].
    #[error("nats-server {found} is too old: fleetbus needs {required} or newer (upgrade the NATS server)")]
    TooOld {
        /// Version the server reported.
        found: ServerVersion,
        /// Minimum version.
        required: ServerVersion,
    },
}

impl ServerVersion {
    /// Parses `2.15.1`, `v2.10.8-beta`, `2.11.0-RC.1+abc`.
    pub fn parse(s: &str) -> Result<Self, ServerVersionError> {
        let bad = || ServerVersionError::Unparsable(s.to_owned());
        let core = s.trim();
        let core = core.strip_prefix('v').unwrap_or(core);
        let core = core.split(['-', '+']).next().unwrap_or_default();
        let mut parts = core.split('.');
        let mut next = || -> Result<u32, ServerVersionError> {
            parts.next().ok_or_else(bad)?.parse().map_err(|_| bad())
        };
        let v = Self {
            major: next()?,
            minor: next()?,
            patch: next()?,
        };
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(v)
    }
}

/// Parses the version from the server's INFO and checks it against [`MIN_NATS_SERVER_VERSION`].
/// Pre-releases count as their release (`2.11.0-beta` passes).
pub fn check_server_version(reported: &str) -> Result<ServerVersion, ServerVersionError> {
    let v = ServerVersion::parse(reported)?;
    if v < MIN_NATS_SERVER_VERSION {
        return Err(ServerVersionError::TooOld {
            found: v,
            required: MIN_NATS_SERVER_VERSION,
        });
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(major: u32, minor: u32, patch: u32) -> ServerVersion {
        ServerVersion {
            major,
            minor,
            patch,
        }
    }

    #[test]
    fn parses() {
        assert_eq!(ServerVersion::parse("2.15.1").unwrap(), v(2, 15, 1));
        assert_eq!(ServerVersion::parse("v2.10.8-beta").unwrap(), v(2, 10, 8));
        assert_eq!(
            ServerVersion::parse("2.11.0-RC.1+abc").unwrap(),
            v(2, 11, 0)
        );
        for bad in ["", "2", "2.10", "2.x.1", "2.10.8.1", "v", "latest"] {
            assert!(
                matches!(
                    ServerVersion::parse(bad),
                    Err(ServerVersionError::Unparsable(_))
                ),
                "{bad}"
            );
        }
        assert_eq!(v(2, 15, 1).to_string(), "2.15.1");
    }

    #[test]
    fn compares_numerically() {
        assert_eq!(check_server_version("2.15.1").unwrap(), v(2, 15, 1));
        assert!(check_server_version("2.11.0").is_ok());
        assert!(check_server_version("v2.11.0-beta").is_ok());
        assert!(check_server_version("3.0.0").is_ok());
        assert!(check_server_version("2.11.10").is_ok());
        assert!(check_server_version("2.10.8").is_err());
        assert_eq!(
            check_server_version("2.10.29"),
            Err(ServerVersionError::TooOld {
                found: v(2, 10, 29),
                required: MIN_NATS_SERVER_VERSION
            })
        );
        assert!(check_server_version("2.9.10").is_err());
        assert!(check_server_version("1.99.99").is_err());
    }
}
