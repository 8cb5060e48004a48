//! Talking to agents over core NATS: the connection every bus command makes, and one
//! request to one cluster's agent (`<p>.cmd.<cluster>.<verb>`, PROTOCOL §6.3, §6.4) with
//! the failures an operator must tell apart.

use std::time::Duration;

use async_nats::jetstream;
use async_nats::RequestErrorKind;

use crate::cli::BusArgs;

/// Why a bus connection or a request to an agent failed. Messages name the cluster.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The NATS server could not be reached or refused the connection.
    #[error("cannot connect to NATS at {url}")]
    Connect {
        /// The URL given (`--nats-url`), without its password.
        url: String,
        /// What the client reported.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The credentials file could not be read.
    #[error("cannot read the NATS credentials file {path} (--creds)")]
    Creds {
        /// The file given.
        path: String,
        /// What the client reported.
        #[source]
        source: std::io::Error,
    },
    /// Nobody subscribes to the cluster's command subject.
    #[error("no agent answers for cluster {cluster} (is it running and connected?)")]
    NoResponder {
        /// The cluster asked.
        cluster: String,
    },
    /// An agent is subscribed but did not reply in time.
    #[error("no reply from cluster {cluster} within {}", humantime::format_duration(*.timeout))]
    Timeout {
        /// The cluster asked.
        cluster: String,
        /// How long the command waited.
        timeout: Duration,
    },
    /// The request could not be sent.
    #[error("request to cluster {cluster} failed")]
    Request {
        /// The cluster asked.
        cluster: String,
        /// What the client reported.
        #[source]
        source: async_nats::RequestError,
    },
}

/// Connects once, failing fast: an operator's command should say "cannot connect", not
/// retry forever.
pub(crate) async fn connect(
    bus: &BusArgs,
) -> Result<(async_nats::Client, jetstream::Context), CommandError> {
    let options = match &bus.creds {
        Some(path) => async_nats::ConnectOptions::with_credentials_file(path)
            .await
            .map_err(|source| CommandError::Creds {
                path: path.display().to_string(),
                source,
            })?,
        None => async_nats::ConnectOptions::new(),
    };
    let client = options
        .connection_timeout(Duration::from_secs(5))
        .connect(bus.nats_url.as_str())
        .await
        .map_err(|source| CommandError::Connect {
            url: redact(&bus.nats_url),
            source,
        })?;
    let js = jetstream::new(client.clone());
    Ok((client, js))
}

/// Sends `payload` to `subject`, the command subject of `cluster`, and waits up to
/// `timeout` for the agent's reply.
pub(crate) async fn request(
    client: &async_nats::Client,
    subject: String,
    payload: Vec<u8>,
    cluster: &str,
    timeout: Duration,
) -> Result<async_nats::Message, CommandError> {
    client
        .send_request(
            subject,
            async_nats::Request::new()
                .payload(payload.into())
                .timeout(Some(timeout)),
        )
        .await
        .map_err(|source| match source.kind() {
            RequestErrorKind::NoResponders => CommandError::NoResponder {
                cluster: cluster.to_owned(),
            },
            RequestErrorKind::TimedOut => CommandError::Timeout {
                cluster: cluster.to_owned(),
                timeout,
            },
            _ => CommandError::Request {
                cluster: cluster.to_owned(),
                source,
            },
        })
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
