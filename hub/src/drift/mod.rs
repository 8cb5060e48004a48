//! `fleetbus drift ls|watch|history|correct`: the fleet's drift, read from the bus.
//!
//! Each command is one file; they share the connection ([`connect`]) and the rendering
//! ([`render`]). Nothing here writes to the bus except `correct`, which sends one
//! request (PROTOCOL §6.3) and prints the agent's reply.

mod correct;
mod error;
mod events;
mod history;
mod ls;
mod render;
mod watch;

use std::process::ExitCode;
use std::time::Duration;

use async_nats::jetstream;

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

/// Connects once, failing fast: an operator's command should say "cannot connect", not
/// retry forever.
async fn connect(bus: &BusArgs) -> Result<(async_nats::Client, jetstream::Context), DriftError> {
    let client = async_nats::ConnectOptions::new()
        .connection_timeout(Duration::from_secs(5))
        .connect(bus.nats_url.as_str())
        .await
        .map_err(|source| DriftError::Connect {
            url: redact(&bus.nats_url),
            source,
        })?;
    let js = jetstream::new(client.clone());
    Ok((client, js))
}

/// The URL without its password (`nats://c1:secret@host` -> `nats://c1:***@host`), for
/// messages: agents and operators put credentials in the URL (deploy/nats/accounts.conf).
fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let Some((userinfo, host)) = rest.rsplit_once('@') else {
        return url.to_owned();
    };
    let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
    let sep = if scheme.is_empty() { "" } else { "://" };
    if userinfo.contains(':') {
        format!("{scheme}{sep}{user}:***@{host}")
    } else {
        // A bare token or nkey user: all of it is the secret.
        format!("{scheme}{sep}***@{host}")
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn urls_in_messages_carry_no_secret() {
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(redact("nats://c1:pw@nats:4222"), "nats://c1:***@nats:4222");
        assert_eq!(redact("tls://s3cr3t@nats:4222"), "tls://***@nats:4222");
        assert_eq!(redact("c1:p@ss@nats:4222"), "c1:***@nats:4222");
    }
}
