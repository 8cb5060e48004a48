//! What can go wrong running a mesh.

use std::path::PathBuf;

use crate::proc::SpawnError;
use crate::state::StateError;
use fleetbus_launch::LocateError;

/// A mesh command failed.
#[derive(Debug, thiserror::Error)]
pub enum MeshError {
    /// A binary the mesh runs is missing.
    #[error("cannot find a binary the mesh needs")]
    Locate(#[from] LocateError),
    /// The state file could not be read or written.
    #[error(transparent)]
    State(#[from] StateError),
    /// A component could not be started.
    #[error("cannot start {what}")]
    Spawn {
        /// Component, e.g. `a/agent`.
        what: String,
        /// Why.
        #[source]
        source: SpawnError,
    },
    /// A directory or port could not be set up.
    #[error("cannot prepare {what}")]
    Io {
        /// What was being prepared.
        what: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `mesh stop|start` asked for something this mesh cannot do.
    #[error("{0}")]
    Usage(String),
    /// `mesh up` found a mesh still running in the directory.
    #[error("a mesh is already running in {0} (stop it with `fleetbus mesh down --dir {0}`)")]
    AlreadyRunning(PathBuf),
    /// A component did not become ready in time.
    #[error("{what} not ready after {secs}s (last seen: {last})\n--- last lines of {log} ---\n{tail}", log = log.display())]
    NotReady {
        /// Component.
        what: String,
        /// The timeout.
        secs: u64,
        /// The last probe result.
        last: String,
        /// Its log file.
        log: PathBuf,
        /// The end of its log.
        tail: String,
    },
    /// A component exited while starting.
    #[error("{what} exited ({status})\n--- last lines of {log} ---\n{tail}", log = log.display())]
    Exited {
        /// Component.
        what: String,
        /// Exit status, as text.
        status: String,
        /// Its log file.
        log: PathBuf,
        /// The end of its log.
        tail: String,
    },
    /// The mesh's fleet (keys, creds) could not be set up.
    #[error("cannot set up the mesh's credentials")]
    Trust(#[from] crate::trust::TrustError),
    /// The mesh's TLS certificates could not be generated.
    #[error("cannot generate the mesh's TLS certificates: {0}")]
    Tls(String),
    /// An upstream CRD file could not be read, or a cluster refused it.
    #[error("cannot install the upstream CRD {file}{into}: {reason}", file = file.display(), into = cluster.as_ref().map(|c| format!(" into {c}")).unwrap_or_default())]
    UpstreamCrd {
        /// The file.
        file: PathBuf,
        /// The cluster that refused it (none: the file could not be read).
        cluster: Option<String>,
        /// Why.
        reason: String,
    },
    /// The mesh's nats-server did not reload the fleet's configuration after
    /// the last cluster moved to the members account.
    #[error(
        "the mesh's nats-server did not reload the fleet's configuration \
         (credentials from before the members account keep working until it does): {0}"
    )]
    Reload(String),
    /// SIGINT or SIGTERM arrived while the mesh was starting.
    #[error("interrupted while starting the mesh; stopped what had started")]
    Interrupted,
}
