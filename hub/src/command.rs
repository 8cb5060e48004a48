//! Talking to agents over core NATS: the connection every bus command makes, and one
//! request to one cluster's agent (`<p>.cmd.<cluster>.<verb>`, PROTOCOL §6.3, §6.4) with
//! the failures an operator must tell apart.

use std::path::PathBuf;
use std::time::Duration;

use async_nats::jetstream;
use async_nats::RequestErrorKind;

use crate::cli::BusArgs;
use crate::state::MeshState;

/// Why a bus connection or a request to an agent failed. Messages name the cluster.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// The NATS server could not be reached or refused the connection.
    #[error("cannot connect to NATS at {url}{hint}")]
    Connect {
        /// The URL given (`--nats-url`), without its password.
        url: String,
        /// What the operator may have missed (empty when nothing applies).
        hint: String,
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
    /// The CA file could not be read or holds no certificate.
    #[error("cannot use the NATS CA file {path} (--ca)")]
    Ca {
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
    /// `--dir` holds a `root.key` that is not the fleet root's PEM.
    #[error("cannot sign requests with {path}: {why}")]
    RootKey {
        /// The file.
        path: String,
        /// What is wrong (never key material).
        why: String,
    },
    /// `--dir` holds a `root.pub` that is not the fleet root's public key.
    #[error("cannot verify records with {path}: {why}")]
    RootPublic {
        /// The file.
        path: String,
        /// What is wrong.
        why: String,
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

/// The fleet root key requests are signed with (PROTOCOL §6.7), when the
/// directory of `--dir` holds one (`root.key`, as `fleet init` and the
/// secure mesh write it). Set by [`connect`]: one bus per process.
static REQUEST_SIGNER: std::sync::OnceLock<fleetbus_schemas::trust::SigningKey> =
    std::sync::OnceLock::new();

/// Loads `dir/root.key` into [`REQUEST_SIGNER`] when it exists. A file that
/// is there and does not parse is an error: requests would go out unsigned
/// and be refused by every secure agent, for a reason the operator would
/// not see.
fn load_request_signer(dir: &std::path::Path) -> Result<(), CommandError> {
    let path = dir.join(crate::trust::files::ROOT_KEY);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let key =
        fleetbus_schemas::trust::parse_root_key(&zeroize::Zeroizing::new(text)).map_err(|e| {
            CommandError::RootKey {
                path: path.display().to_string(),
                why: e.to_string(),
            }
        })?;
    let _ = REQUEST_SIGNER.set(key);
    Ok(())
}

/// The fleet root key, when `--dir` holds one (what operator records such
/// as taints are signed with).
pub(crate) fn root_signer() -> Option<&'static fleetbus_schemas::trust::SigningKey> {
    REQUEST_SIGNER.get()
}

/// The fleet root's public key registry records are verified with
/// (`fleet::read_records`), when `--dir` holds `root.pub` (or `root.key`).
/// Set by [`connect`], like [`REQUEST_SIGNER`].
static FLEET_ROOT: std::sync::OnceLock<fleetbus_schemas::trust::VerifyingKey> =
    std::sync::OnceLock::new();

/// The fleet root's public key, when `--dir` gave one (see [`FLEET_ROOT`]).
pub(crate) fn fleet_root() -> Option<&'static fleetbus_schemas::trust::VerifyingKey> {
    FLEET_ROOT.get()
}

/// Loads `dir/root.pub` into [`FLEET_ROOT`] (else the public half of the
/// root key loaded already). A file that is there and does not parse is an
/// error: the views would otherwise show what agents refuse, silently.
fn load_fleet_root(dir: &std::path::Path) -> Result<(), CommandError> {
    let path = dir.join(crate::trust::files::ROOT_PUB);
    let refused = |why: String| CommandError::RootPublic {
        path: path.display().to_string(),
        why,
    };
    let key = match std::fs::read_to_string(&path) {
        Ok(text) => {
            fleetbus_schemas::trust::parse_root_public(&text).map_err(|e| refused(e.to_string()))?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => match REQUEST_SIGNER.get() {
            Some(k) => k.verifying_key(),
            None => return Ok(()),
        },
        // There but unreadable: verifying nothing would be silent.
        Err(e) => return Err(refused(e.to_string())),
    };
    let _ = FLEET_ROOT.set(key);
    Ok(())
}

/// Connects once, failing fast: an operator's command should say "cannot connect", not
/// retry forever.
pub(crate) async fn connect(
    bus: &BusArgs,
) -> Result<(async_nats::Client, jetstream::Context), CommandError> {
    connect_with_inbox(bus, None).await
}

/// [`connect`], with replies under `inbox_prefix` in place of `_INBOX`: a user
/// whose permissions name its own inbox (`fleetbus notify`'s) can only read there.
pub(crate) async fn connect_with_inbox(
    bus: &BusArgs,
    inbox_prefix: Option<&str>,
) -> Result<(async_nats::Client, jetstream::Context), CommandError> {
    load_request_signer(&bus.mesh_dir)?;
    load_fleet_root(&bus.mesh_dir)?;
    let (creds, ca) = auth(bus);
    // A secure server refuses a client with neither: say where they come from.
    let hint = if creds.is_none() && ca.is_none() {
        format!(
            " (no --creds or --ca given, and {} holds no secure mesh on this server)",
            bus.mesh_dir.display()
        )
    } else {
        String::new()
    };
    let mut options = match &creds {
        Some(path) => async_nats::ConnectOptions::with_credentials_file(path)
            .await
            .map_err(|source| CommandError::Creds {
                path: path.display().to_string(),
                source,
            })?,
        None => async_nats::ConnectOptions::new(),
    };
    if let Some(ca) = ca {
        // async-nats reads the file only when it connects: check it here so a
        // missing CA is named as such, not as a TLS failure.
        std::fs::metadata(&ca).map_err(|source| CommandError::Ca {
            path: ca.display().to_string(),
            source,
        })?;
        options = options.add_root_certificates(ca).require_tls(true);
    }
    if let Some(inbox) = inbox_prefix {
        options = options.custom_inbox_prefix(inbox);
    }
    let client = options
        .connection_timeout(Duration::from_secs(5))
        .connect(bus.nats_url.as_str())
        .await
        .map_err(|source| CommandError::Connect {
            url: redact(&bus.nats_url),
            hint,
            source,
        })?;
    let js = jetstream::new(client.clone());
    Ok((client, js))
}

/// The creds and CA to connect with: `--creds`/`--ca` (or their environment
/// variables) when either is given; else, when `--nats-url` is the server of
/// the secure mesh recorded in `--dir`'s mesh.json, that mesh's admin creds
/// and CA, so the tour's commands work on the secure mesh as they did on the
/// open one.
fn auth(bus: &BusArgs) -> (Option<PathBuf>, Option<PathBuf>) {
    if bus.creds.is_some() || bus.ca.is_some() {
        return (bus.creds.clone(), bus.ca.clone());
    }
    let Ok(state) = MeshState::read(&bus.mesh_dir) else {
        return (None, None);
    };
    match (&state.security, &state.nats) {
        (Some(s), Some(n)) if same_server(&bus.nats_url, n.port) => {
            (Some(s.admin_creds.clone()), Some(s.ca.clone()))
        }
        _ => (None, None),
    }
}

/// Whether `url` (`[scheme://][user[:pw]@]host:port[,...]`) names a local
/// server on `port`, as the mesh's nats-server listens.
fn same_server(url: &str, port: u16) -> bool {
    url.split(',').any(|u| {
        let rest = u.trim().split_once("://").map_or(u.trim(), |(_, r)| r);
        let hostport = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        let hostport = hostport.split('/').next().unwrap_or_default();
        ["127.0.0.1", "localhost"]
            .iter()
            .any(|host| hostport == format!("{host}:{port}"))
    })
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
    // Signed by the fleet root when we hold it: agents with a fleet root
    // refuse unsigned requests that change state. A query (no payload) is
    // sent as it is. Generic over the verb.
    let payload = match REQUEST_SIGNER.get() {
        Some(root) if !payload.is_empty() => {
            fleetbus_schemas::trust::sign_request(&payload, &subject, root, chrono::Utc::now())
                .unwrap_or(payload)
        }
        _ => payload,
    };
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

/// How many times a refused request is asked again when the agent says
/// when (`retryAfterMs`: over its rate, or its previews busy).
pub(crate) const RATE_WAITS: u32 = 3;

/// [`request`], the reply decoded; asked again up to [`RATE_WAITS`] times
/// while the agent refuses it with a time to ask again (`retry_after`
/// reads it from the reply; at most 10 s is waited at a time).
pub(crate) async fn request_patiently<R>(
    client: &async_nats::Client,
    (subject, payload): (String, Vec<u8>),
    cluster: &str,
    timeout: Duration,
    decode: impl Fn(&[u8]) -> Result<R, String>,
    retry_after: impl Fn(&R) -> Option<u64>,
) -> Result<R, String> {
    let mut waits = 0;
    loop {
        let msg = request(client, subject.clone(), payload.clone(), cluster, timeout)
            .await
            .map_err(|e| e.to_string())?;
        let reply = decode(&msg.payload)
            .map_err(|e| format!("cluster {cluster} sent an unreadable reply: {e}"))?;
        match retry_after(&reply) {
            Some(ms) if waits < RATE_WAITS => {
                waits += 1;
                tokio::time::sleep(Duration::from_millis(ms.min(10_000))).await;
            }
            _ => return Ok(reply),
        }
    }
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
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::state::{MeshSecurity, NatsRecord, ProcRecord};
    use clap::Parser;

    fn bus(args: &[&str]) -> BusArgs {
        let cli = crate::cli::Cli::try_parse_from(
            ["fleetbus", "status"].iter().chain(args.iter()).copied(),
        )
        .unwrap();
        match cli.command {
            crate::cli::Command::Status(s) => s.bus,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_secure_mesh_lends_its_admin_creds_to_commands_on_its_server() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_str().unwrap();
        // No mesh.json: nothing.
        assert_eq!(auth(&bus(&["--dir", d])), (None, None));
        let process = ProcRecord {
            pid: 1,
            start_ticks: 1,
            log: "/m/nats.log".into(),
        };
        let mut state = MeshState {
            nats: Some(NatsRecord {
                process,
                port: 4333,
                url: "tls://127.0.0.1:4333".into(),
                store_dir: "/m/nats".into(),
            }),
            ..MeshState::default()
        };
        state.write(dir.path()).unwrap();
        // An open mesh: nothing.
        let url = ["--nats-url", "tls://127.0.0.1:4333", "--dir", d];
        assert_eq!(auth(&bus(&url)), (None, None));
        let security = MeshSecurity {
            ca: "/m/ca.pem".into(),
            admin_creds: "/m/admin.creds".into(),
        };
        state.security = Some(security.clone());
        state.write(dir.path()).unwrap();
        let mesh = (
            Some(security.admin_creds.clone()),
            Some(security.ca.clone()),
        );
        assert_eq!(auth(&bus(&url)), mesh);
        assert_eq!(
            auth(&bus(&["--nats-url", "nats://localhost:4333", "--dir", d])),
            mesh
        );
        // Another server: not the mesh's creds.
        assert_eq!(
            auth(&bus(&["--nats-url", "nats://127.0.0.1:4222", "--dir", d])),
            (None, None)
        );
        assert_eq!(
            auth(&bus(&["--nats-url", "nats://10.0.0.1:4333", "--dir", d])),
            (None, None)
        );
        // Explicit flags win, whole.
        let mut args = url.to_vec();
        args.extend(["--creds", "/x.creds"]);
        assert_eq!(auth(&bus(&args)), (Some("/x.creds".into()), None));
    }

    #[test]
    fn urls_in_messages_carry_no_secret() {
        assert_eq!(redact("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(redact("nats://c1:pw@nats:4222"), "nats://c1:***@nats:4222");
        assert_eq!(redact("tls://s3cr3t@nats:4222"), "tls://***@nats:4222");
        assert_eq!(redact("c1:p@ss@nats:4222"), "c1:***@nats:4222");
    }
}
