//! [`MembershipError`]: why `fleet init`, `join` or `leave` stopped.

use std::path::PathBuf;

/// A step a membership command cannot go on from. The binary prints it with
/// its sources and exits 1. None of them is
/// transient: each needs a different input or a repaired fleet directory.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    /// The fleet directory's keys or files (names the file or the input at fault).
    #[error(transparent)]
    Trust(#[from] crate::trust::TrustError),
    /// `join --ca FILE` (or the fleet's `ca.pem`) could not be read.
    #[error("--ca {}", path.display())]
    ReadCa {
        /// The CA file.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: std::io::Error,
    },
    /// `fleet.json` names a subject prefix that is not valid.
    #[error("fleet.json's subject prefix")]
    SubjectPrefix(#[source] fleetbus_schemas::subject::InvalidPrefix),
    /// The leaving cluster's keys (which sign its Left record) could not be read.
    #[error("the cluster's keys")]
    ClusterKeys(#[source] crate::trust::TrustError),
}
