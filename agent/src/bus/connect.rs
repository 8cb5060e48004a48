//! NATS connection, the minimum server version check, and the registry bucket set-up.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, kv};

use fleetbus_schemas::jetstream::{
    check_server_version as check, KvSpec, ServerVersionError, Storage,
};

use crate::health::Readiness;

/// How the agent authenticates to NATS and verifies it, beyond the URL's
/// user/password or token.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsAuth {
    /// `--nats-creds`.
    pub creds: Option<PathBuf>,
    /// `--nats-tls-ca`; TLS is required when set.
    pub tls_ca: Option<PathBuf>,
    /// `--nats-tls-cert` and `--nats-tls-key`.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

/// Failure to connect to NATS or to set up JetStream.
#[derive(Debug, thiserror::Error)]
pub enum NatsError {
    /// The server could not be reached or refused the connection.
    #[error("failed to connect to NATS at {url}")]
    Connect {
        /// `--nats-url`.
        url: String,
        /// Cause.
        #[source]
        source: async_nats::ConnectError,
    },
    /// The credentials file could not be loaded (checked readable at start-up,
    /// so it changed since or does not parse).
    #[error("failed to load the NATS credentials file {}", path.display())]
    Creds {
        /// `--nats-creds`.
        path: std::path::PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The server is older than fleetbus needs, or reports a version that does not parse.
    #[error("unsuitable NATS server")]
    ServerVersion(#[source] ServerVersionError),
    /// The server has no JetStream (started without `-js`?).
    #[error("JetStream is not enabled on the NATS server (start nats-server with -js)")]
    NoJetStream,
    /// The bucket exists with a configuration this agent did not expect.
    #[error("registry bucket {bucket} exists with a different configuration: {diff}")]
    BucketMismatch {
        /// Bucket name.
        bucket: String,
        /// Human-readable difference.
        diff: String,
    },
    /// The server cannot hold the replicas asked for (`--replicas` above 1 on a
    /// single, non-clustered nats-server).
    #[error("the NATS server cannot keep {replicas} replicas of {bucket} (a single nats-server supports --replicas=1 only)")]
    ReplicasNotSupported {
        /// Bucket name.
        bucket: String,
        /// `--replicas`.
        replicas: usize,
        /// Cause.
        #[source]
        source: async_nats::Error,
    },
    /// Creating or opening the bucket failed.
    #[error("failed to create or open the registry bucket {bucket}")]
    Bucket {
        /// Bucket name.
        bucket: String,
        /// Cause.
        #[source]
        source: async_nats::Error,
    },
}

impl NatsError {
    /// Whether trying again later can help.
    pub fn is_transient(&self) -> bool {
        matches!(self, NatsError::Connect { .. } | NatsError::Bucket { .. })
    }
}

/// Connects to NATS and keeps `readiness.nats` current through the event callback.
/// Retries are the caller's business: one attempt here.
pub async fn connect(
    url: &str,
    auth: &NatsAuth,
    cluster_name: &str,
    readiness: Arc<Readiness>,
) -> Result<async_nats::Client, NatsError> {
    let r = readiness.clone();
    let opts = with_auth(
        with_url_credentials(async_nats::ConnectOptions::new(), url),
        auth,
    )
    .await?;
    let client = opts
        .name(format!("fleetbus-agent/{cluster_name}"))
        // Its own inbox prefix: the only subjects a member's NATS user may
        // subscribe to besides its commands (PROTOCOL §2.6), so no member
        // reads another's replies or consumer deliveries.
        .custom_inbox_prefix(fleetbus_schemas::permissions::agent_inbox_prefix(
            cluster_name,
        ))
        .connection_timeout(Duration::from_secs(5))
        .event_callback(move |event| {
            let r = r.clone();
            async move {
                match event {
                    async_nats::Event::Connected => {
                        tracing::info!("NATS connected");
                        r.nats.store(true, Ordering::Relaxed);
                        r.nats_connections.send_modify(|n| *n = n.wrapping_add(1));
                    }
                    async_nats::Event::Disconnected | async_nats::Event::Closed => {
                        tracing::warn!(%event, "NATS connection lost");
                        r.nats.store(false, Ordering::Relaxed);
                    }
                    other => tracing::warn!(event = %other, "NATS event"),
                }
            }
        })
        .connect(url)
        .await
        .map_err(|source| NatsError::Connect {
            url: url.to_owned(),
            source,
        })?;
    // The Connected event fires only on reconnects in some versions; the
    // first connection is established once connect() returns.
    readiness.nats.store(true, Ordering::Relaxed);
    Ok(client)
}

/// Credentials given in a NATS URL.
#[derive(Debug, Clone, PartialEq, Eq)]
enum UrlCredentials {
    /// `nats://user:password@host`.
    UserPassword(String, String),
    /// `nats://token@host`.
    Token(String),
}

/// The credentials of the first URL of the (comma-separated) list that has any.
fn url_credentials(url: &str) -> Option<UrlCredentials> {
    url.split(',')
        .filter_map(|u| u.trim().parse::<async_nats::ServerAddr>().ok())
        .find_map(|a| {
            let user = a.username()?.to_owned();
            Some(match a.password() {
                Some(p) => UrlCredentials::UserPassword(user, p.to_owned()),
                None => UrlCredentials::Token(user),
            })
        })
}

/// async-nats 0.51 parses the credentials of a URL but never sends them, so
/// they are set on the options here.
fn with_url_credentials(opts: async_nats::ConnectOptions, url: &str) -> async_nats::ConnectOptions {
    match url_credentials(url) {
        Some(UrlCredentials::UserPassword(user, password)) => {
            opts.user_and_password(user, password)
        }
        Some(UrlCredentials::Token(token)) => opts.token(token),
        None => opts,
    }
}

/// Adds `--nats-creds` and the TLS files to the options.
async fn with_auth(
    mut opts: async_nats::ConnectOptions,
    auth: &NatsAuth,
) -> Result<async_nats::ConnectOptions, NatsError> {
    if let Some(path) = &auth.creds {
        opts = opts
            .credentials_file(path)
            .await
            .map_err(|source| NatsError::Creds {
                path: path.clone(),
                source,
            })?;
    }
    if let Some(ca) = &auth.tls_ca {
        // A CA given means the operator expects TLS: never fall back to plain text.
        opts = opts.add_root_certificates(ca.clone()).require_tls(true);
    }
    if let Some((cert, key)) = &auth.client_cert {
        opts = opts.add_client_certificate(cert.clone(), key.clone());
    }
    Ok(opts)
}

/// Refuses servers older than `fleetbus_schemas::jetstream::MIN_NATS_SERVER_VERSION` (2.11.0: older ones
/// have no per-message TTLs for the beats bucket, break KV bucket creation in
/// async-nats (before 2.10.8) and ignore multi-filter consumers).
pub fn check_server_version(version: &str) -> Result<(), NatsError> {
    check(version).map(|_| ()).map_err(NatsError::ServerVersion)
}

/// The async-nats form of the schemas crate's registry bucket spec.
pub fn registry_bucket_config(spec: &KvSpec) -> kv::Config {
    kv::Config {
        bucket: spec.bucket.clone(),
        description: spec.description.clone(),
        history: spec.history,
        max_age: spec.max_age.unwrap_or_default(),
        num_replicas: spec.replicas,
        max_value_size: 1024 * 1024,
        storage: match spec.storage {
            Storage::File => jetstream::stream::StorageType::File,
            Storage::Memory => jetstream::stream::StorageType::Memory,
        },
        limit_markers: spec.limit_markers,
        ..kv::Config::default()
    }
}

/// Creates the registry bucket if missing (then the flag is true); an
/// existing one with the same settings is reused, one with different
/// settings is reported.
pub async fn ensure_bucket(
    js: &jetstream::Context,
    config: kv::Config,
) -> Result<(kv::Store, bool), NatsError> {
    let bucket = config.bucket.clone();
    match js.get_key_value(&bucket).await {
        Ok(store) => {
            let status = store.status().await.map_err(|e| NatsError::Bucket {
                bucket: bucket.clone(),
                source: Box::new(e),
            })?;
            let mut diff = Vec::new();
            if status.history() != config.history {
                diff.push(format!(
                    "history {} (expected {})",
                    status.history(),
                    config.history
                ));
            }
            if status.info.config.num_replicas.max(1) != config.num_replicas.max(1) {
                diff.push(format!(
                    "replicas {} (expected {}; see --replicas)",
                    status.info.config.num_replicas, config.num_replicas
                ));
            }
            if status.info.config.storage != config.storage {
                diff.push(format!(
                    "storage {:?} (expected {:?})",
                    status.info.config.storage, config.storage
                ));
            }
            // The beats bucket is useless without TTLs: a dead agent's beat would stay.
            if config.limit_markers.is_some() && !status.info.config.allow_message_ttl {
                diff.push("no per-message TTLs (expected allow_msg_ttl)".to_owned());
            }
            if !diff.is_empty() {
                return Err(NatsError::BucketMismatch {
                    bucket,
                    diff: diff.join(", "),
                });
            }
            if status.max_age() != config.max_age {
                // Not fatal: records still work, they may just expire.
                tracing::warn!(%bucket, max_age = ?status.max_age(), "registry bucket has a max age; idle clusters may vanish from it");
            }
            Ok((store, false))
        }
        Err(e) if e.kind() == jetstream::context::KeyValueErrorKind::GetBucket => {
            tracing::info!(%bucket, "creating registry bucket");
            let replicas = config.num_replicas;
            js.create_key_value(config)
                .await
                .map(|s| (s, true))
                .map_err(|e| {
                    if e.kind() == jetstream::context::CreateKeyValueErrorKind::BucketCreate
                        && (e.to_string().contains("10039")
                            || e.to_string().contains("no responders"))
                    {
                        return NatsError::NoJetStream;
                    }
                    // The server's error code, as async-nats keeps only the text of it.
                    if e.to_string().contains("10074") {
                        return NatsError::ReplicasNotSupported {
                            bucket,
                            replicas,
                            source: Box::new(e),
                        };
                    }
                    NatsError::Bucket {
                        bucket,
                        source: Box::new(e),
                    }
                })
        }
        Err(e) => Err(NatsError::Bucket {
            bucket,
            source: Box::new(e),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_check() {
        for ok in ["v2.11.0", "2.11.9", "2.15.1", "3.0.0", "2.12.0-RC.1"] {
            assert!(check_server_version(ok).is_ok(), "{ok}");
        }
        for old in ["2.9.10", "2.10.7", "2.10.29", "1.4.1"] {
            assert!(
                matches!(
                    check_server_version(old),
                    Err(NatsError::ServerVersion(ServerVersionError::TooOld { .. }))
                ),
                "{old}"
            );
        }
        assert!(matches!(
            check_server_version("banana"),
            Err(NatsError::ServerVersion(ServerVersionError::Unparsable(_)))
        ));
    }

    #[test]
    fn bucket_keeps_one_value_per_key() {
        let layout = fleetbus_schemas::jetstream::Layout::new(Default::default(), 1);
        let c = registry_bucket_config(&layout.registry_bucket());
        assert_eq!(c.history, 1);
        assert_eq!(c.bucket, "fleetbus-registry");
        assert_eq!(c.storage, jetstream::stream::StorageType::File);
        assert_eq!(c.num_replicas, 1);
        let clustered = fleetbus_schemas::jetstream::Layout::new(Default::default(), 3);
        assert_eq!(
            registry_bucket_config(&clustered.registry_bucket()).num_replicas,
            3
        );
    }

    #[test]
    fn url_credentials_are_taken_from_the_url() {
        assert_eq!(
            url_credentials("nats://c1:s3cret@127.0.0.1:4222"),
            Some(UrlCredentials::UserPassword("c1".into(), "s3cret".into()))
        );
        assert_eq!(
            url_credentials("nats://tok@nats:4222"),
            Some(UrlCredentials::Token("tok".into()))
        );
        assert_eq!(
            url_credentials("nats://a:4222, nats://u:p@b:4222"),
            Some(UrlCredentials::UserPassword("u".into(), "p".into()))
        );
        assert_eq!(url_credentials("nats://127.0.0.1:4222"), None);
    }
}
