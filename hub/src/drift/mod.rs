//! `fleetbus drift ls|watch|history|correct`: the fleet's drift, read from the bus.
//!
//! Each command is one file; they share the connection ([`connect`]) and the rendering
//! ([`render`]). Nothing here writes to the bus except `correct`, which sends one
//! request (PROTOCOL §6.3) and prints the agent's reply.

pub(crate) mod correct;
mod error;
pub(crate) mod events;
pub(crate) mod history;
pub(crate) mod ls;
pub(crate) mod render;
mod watch;

use async_nats::jetstream;
use std::process::ExitCode;

use crate::cli::{BusArgs, DriftCommand};

pub use correct::correct;
pub use error::DriftError;
pub use history::{history, ObjectArg};
pub use ls::ls;
pub use watch::watch;

/// Runs one drift command; `Ok(FAILURE)` when the command ran but reports a failure
/// (a correction that failed on some copies).
pub async fn run(cmd: DriftCommand) -> Result<ExitCode, DriftError> {
    let mut out = std::io::stdout().lock();
    match cmd {
        DriftCommand::Ls(args) => ls(&args, &mut out).await.map(|()| ExitCode::SUCCESS),
        DriftCommand::Watch(args) => watch(&args, &mut out).await.map(|()| ExitCode::SUCCESS),
        DriftCommand::History(args) => history(&args, &mut out).await.map(|()| ExitCode::SUCCESS),
        DriftCommand::Correct(args) => correct(&args, &mut out).await.map(|all_ok| {
            if all_ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }),
    }
}

/// Every copy drifted now (the drift bucket), optionally of one cluster or rule.
pub async fn current(
    js: &jetstream::Context,
    prefix: &fleetbus_schemas::subject::Prefix,
    cluster: Option<&str>,
    rule: Option<&str>,
) -> Result<
    Vec<(
        fleetbus_schemas::subject::DriftKey,
        fleetbus_schemas::drift::DriftEvent,
    )>,
    DriftError,
> {
    let bucket = fleetbus_schemas::drift::drift_bucket(prefix);
    ls::read_current(js, prefix, &bucket, cluster, rule).await
}

/// The last `n` drift events of the fleet (oldest first), with when each was stored.
pub async fn last_events(
    js: &jetstream::Context,
    prefix: &fleetbus_schemas::subject::Prefix,
    n: usize,
) -> Result<
    Vec<(
        fleetbus_schemas::drift::DriftEvent,
        Option<chrono::DateTime<chrono::Utc>>,
    )>,
    DriftError,
> {
    events::last(js, prefix, n).await
}

/// Connects once (see [`crate::command::connect`]).
async fn connect(bus: &BusArgs) -> Result<(async_nats::Client, jetstream::Context), DriftError> {
    Ok(crate::command::connect(bus).await?)
}
