//! [`RulesError`]: why a view over rule status (`rules`, `status`) failed;
//! [`PreviewError`]: why `rules preview` could not ask or print.

/// A view that could not read the bus. The binary prints it with its sources.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// Connecting to NATS failed.
    #[error(transparent)]
    Command(#[from] crate::command::CommandError),
    /// No rule status bucket for this prefix.
    #[error(
        "no agent has written rule status on this NATS (no bucket {bucket} for subject prefix \
         {prefix:?}): is a fleetbus agent (this version or newer) connected to it, with \
         --subject-prefix {prefix}?"
    )]
    NoRuleStatus {
        /// The bucket looked for.
        bucket: String,
        /// The `--subject-prefix` given.
        prefix: String,
    },
    /// A bucket or stream is missing or could not be read.
    #[error(transparent)]
    Read(#[from] crate::kv::ReadError),
    /// Reading drift failed (`status`).
    #[error(transparent)]
    Drift(#[from] crate::drift::DriftError),
    /// Writing to stdout failed (e.g. a closed pipe).
    #[error("cannot write the output")]
    Output(#[from] std::io::Error),
}

/// Why the preview could not be asked or printed at all.
#[derive(Debug, thiserror::Error)]
pub enum PreviewError {
    /// The file could not be read or parsed.
    #[error("cannot read {path}: {why}")]
    File {
        /// The file given.
        path: String,
        /// What went wrong.
        why: String,
    },
    /// The rule (or the request) is not valid.
    #[error("{0}")]
    Invalid(String),
    /// Connecting, or reading the fleet, failed.
    #[error(transparent)]
    Bus(#[from] RulesError),
    /// Writing to stdout failed.
    #[error("cannot write the output")]
    Output(#[from] std::io::Error),
}
