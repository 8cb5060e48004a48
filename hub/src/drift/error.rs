//! [`DriftError`]: why a `fleetbus drift` command failed.

/// A `fleetbus drift` command that could not do its job. Messages are one line; the
/// binary prints them with their sources and exits 1.
#[derive(Debug, thiserror::Error)]
pub enum DriftError {
    /// Connecting to NATS or the request to an agent failed.
    #[error(transparent)]
    Command(#[from] crate::command::CommandError),
    /// The drift stream or bucket is missing or could not be read.
    #[error(transparent)]
    Read(#[from] crate::kv::ReadError),
    /// The object argument of `history` is not KIND/NAMESPACE/NAME or KIND/NAME.
    #[error("object {0:?} is not KIND/NAMESPACE/NAME or KIND/NAME")]
    ObjectArg(String),
    /// The request could not be encoded.
    #[error("cannot encode the request")]
    Encode(#[source] fleetbus_schemas::EncodeError),
    /// The agent's reply is not a correct-reply/v1 message.
    #[error("cluster {cluster} sent a reply this fleetbus cannot read")]
    BadReply {
        /// The cluster asked.
        cluster: String,
        /// Why it does not decode.
        #[source]
        source: fleetbus_schemas::DecodeError,
    },
    /// The agent refused the request as a whole (the reply's `error`).
    #[error("cluster {cluster} refused the request: {reason}")]
    Refused {
        /// The cluster asked.
        cluster: String,
        /// The agent's reason.
        reason: String,
    },
    /// Writing to stdout failed (e.g. a closed pipe).
    #[error("cannot write the output")]
    Output(#[from] std::io::Error),
}
