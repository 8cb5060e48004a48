//! [`ClustersError`]: why a `fleetbus clusters` command failed.

/// A `fleetbus clusters` command that could not do its job. The binary prints it with its
/// sources and exits 1.
#[derive(Debug, thiserror::Error)]
pub enum ClustersError {
    /// Connecting to NATS or the request to the agent failed (names the cluster).
    #[error(transparent)]
    Command(#[from] crate::command::CommandError),
    /// A label argument is not `key=value` or `key-`.
    #[error("label argument {0:?} is not KEY=VALUE or KEY-")]
    LabelArg(String),
    /// The request could not be encoded.
    #[error("cannot encode the request")]
    Encode(#[source] fleetbus_schemas::EncodeError),
    /// The agent's reply is not a label-reply/v1 message.
    #[error("cluster {cluster} sent a reply this fleetbus cannot read")]
    BadReply {
        /// The cluster asked.
        cluster: String,
        /// Why it does not decode.
        #[source]
        source: fleetbus_schemas::DecodeError,
    },
    /// The agent refused the request (the reply's `error`); nothing changed.
    #[error("cluster {cluster} refused to relabel: {reason}")]
    Refused {
        /// The cluster asked.
        cluster: String,
        /// The agent's reason.
        reason: String,
    },
    /// Another cluster answered: two clusters claim the name and the first reply
    /// came from the wrong one (PROTOCOL §6.4).
    #[error(
        "asked cluster {asked}, but cluster {answered:?} replied (is the name claimed twice?)"
    )]
    WrongCluster {
        /// The cluster asked.
        asked: String,
        /// The `cluster` of the reply.
        answered: String,
    },
    /// The registry bucket is missing or could not be read.
    #[error(transparent)]
    Registry(#[from] crate::kv::ReadError),
    /// The rule status or drift could not be read (`describe`).
    #[error(transparent)]
    Rules(#[from] crate::rules::RulesError),
    /// The drift bucket could not be read (`describe`).
    #[error(transparent)]
    Drift(#[from] crate::drift::DriftError),
    /// Writing to stdout failed (e.g. a closed pipe).
    #[error("cannot write the output")]
    Output(#[from] std::io::Error),
}
