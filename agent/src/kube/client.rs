//! Building the Kubernetes client for the local cluster.

use std::path::Path;

use kube::config::{KubeConfigOptions, Kubeconfig};

/// Failure to build a client for the local cluster.
#[derive(Debug, thiserror::Error)]
pub enum KubeClientError {
    /// The kubeconfig file given with --kubeconfig could not be read.
    #[error("failed to read kubeconfig {path}")]
    Read {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The kubeconfig was read but does not describe a usable cluster.
    #[error("failed to load kubeconfig {path}")]
    Load {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// Neither in-cluster configuration, $KUBECONFIG nor ~/.kube/config worked.
    #[error(
        "failed to infer a Kubernetes configuration (in-cluster, $KUBECONFIG, ~/.kube/config)"
    )]
    Infer(#[source] kube::config::InferConfigError),
    /// The client could not be constructed (e.g. bad TLS material).
    #[error("failed to build the Kubernetes client")]
    Build(#[source] kube::Error),
}

impl KubeClientError {
    /// Never: configuration that does not load will not load on a retry.
    pub fn is_transient(&self) -> bool {
        false
    }
}

/// Loads the configuration (explicit file, else inferred) and builds a client.
/// The configuration is returned too: the published kubeconfig reuses its
/// server URL and CA.
pub async fn build(
    kubeconfig: Option<&Path>,
) -> Result<(kube::Client, kube::Config), KubeClientError> {
    let config = match kubeconfig {
        Some(path) => {
            let shown = path.display().to_string();
            let kc = Kubeconfig::read_from(path).map_err(|source| KubeClientError::Read {
                path: shown.clone(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|source| KubeClientError::Load {
                    path: shown,
                    source,
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(KubeClientError::Infer)?,
    };
    let config = identified(config);
    let client = connect(&config)?;
    Ok((client, config))
}

/// What the agent sends as `User-Agent` (kube-rs sends none): the API
/// server's logs, audit and request metrics name the agent by it, as they
/// name a client-go program (`<binary>/<version> (<os>/<arch>)`), and tests
/// tell its requests from their own.
pub fn user_agent() -> String {
    format!(
        "fleetbus-agent/{} ({}/{})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

/// `config` sending [`user_agent`], unless it names an agent of its own.
fn identified(mut config: kube::Config) -> kube::Config {
    let named = config
        .headers
        .iter()
        .any(|(name, _)| name == http::header::USER_AGENT);
    if !named {
        if let Ok(v) = http::HeaderValue::from_str(&user_agent()) {
            config.headers.push((http::header::USER_AGENT, v));
        }
    }
    config
}

/// A new client for `config`, with a connection pool of its own: what a
/// watch whose connection failed starts again on, so that it cannot pick up
/// a pooled connection of the same fate (see [`is_connection_error`]).
/// Every request on it but a watch is answered within
/// [`super::deadline::ANSWER_WITHIN`] or fails (see that module).
pub fn connect(config: &kube::Config) -> Result<kube::Client, KubeClientError> {
    let builder =
        kube::client::ClientBuilder::try_from(config.clone()).map_err(KubeClientError::Build)?;
    let within = super::deadline::DeadlineLayer(super::deadline::ANSWER_WITHIN);
    Ok(builder.with_layer(&within).build())
}

/// Whether a request failed below HTTP: no answer was read (connect, TLS,
/// a connection reset or closed mid-request or mid-stream). Not an API
/// error (an answer), nor a decoding error.
pub fn is_connection_error(e: &kube::Error) -> bool {
    matches!(
        e,
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_)
    )
}

/// Whether an error from the Kubernetes API is worth retrying: connection
/// problems, update conflicts, throttling and server-side 5xx. AlreadyExists
/// is a 409 too, but repeating the same create cannot succeed: callers must
/// read the object instead.
pub fn is_transient(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) if s.is_already_exists() => false,
        kube::Error::Api(s) => matches!(s.code, 409 | 429 | 500..=599),
        kube::Error::HyperError(_)
        | kube::Error::Service(_)
        | kube::Error::HttpError(_)
        | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        let mut s = Status::failure("x", reason);
        s.code = code;
        kube::Error::Api(Box::new(s))
    }

    #[test]
    fn the_agent_names_itself_once() {
        let config = identified(kube::Config::new("http://127.0.0.1:1".parse().unwrap()));
        let agents: Vec<_> = config
            .headers
            .iter()
            .filter(|(n, _)| n == http::header::USER_AGENT)
            .map(|(_, v)| v.to_str().unwrap().to_owned())
            .collect();
        assert_eq!(agents, vec![user_agent()]);
        assert!(agents[0].starts_with("fleetbus-agent/"), "{agents:?}");
        assert_eq!(identified(config).headers.len(), 1, "not added twice");
    }

    #[test]
    fn already_exists_is_not_retried_but_conflicts_are() {
        assert!(!is_transient(&api_error(409, "AlreadyExists")));
        assert!(is_transient(&api_error(409, "Conflict")));
        assert!(is_transient(&api_error(503, "ServiceUnavailable")));
        assert!(!is_transient(&api_error(422, "Invalid")));
    }

    #[test]
    fn connection_errors_are_those_without_an_answer() {
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(is_connection_error(&kube::Error::ReadEvents(reset)));
        assert!(is_connection_error(&kube::Error::Service("reset".into())));
        assert!(!is_connection_error(&api_error(503, "ServiceUnavailable")));
        assert!(!is_connection_error(&api_error(410, "Expired")));
    }
}
