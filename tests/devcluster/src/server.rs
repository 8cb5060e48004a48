//! Startup and the connection loop: store, seed, listener, TLS, kubeconfig, serve.

use crate::api::{self, AppState};
use crate::auth::Auth;
use crate::cli::Cli;
use crate::persist::PersistError;
use crate::status::ApiError;
use crate::store::Store;
use crate::{bootstrap, kubeconfig, seed, tls};
use axum::body::Body;
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::future::Future;
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The data directory or state database could not be used.
    #[error("failed to open the state store")]
    Store(#[from] PersistError),
    /// Seeding the system objects failed.
    #[error("failed to seed system objects: {0}")]
    Seed(#[from] ApiError),
    /// Binding, kubeconfig or stdout I/O failed.
    #[error("I/O error during startup")]
    Io(#[from] std::io::Error),
    /// TLS material could not be created.
    #[error("failed to set up TLS")]
    Tls(#[from] tls::TlsError),
    /// The ServiceAccount token signing key could not be loaded or created.
    #[error("failed to set up ServiceAccount tokens")]
    Auth(#[from] crate::auth::JwtError),
    /// The kubeconfig could not be rendered.
    #[error("failed to render the kubeconfig")]
    Kubeconfig(#[from] serde_saphyr::SerializeError),
    /// `--debug-faults-plan` is not a usable plan.
    #[error("invalid --debug-faults-plan: {0}")]
    FaultPlan(String),
}

/// The fault layer `--debug-faults` asks for, with `--debug-faults-plan`'s
/// plan in force.
fn faults(cli: &Cli) -> Result<Option<Arc<crate::faults::Faults>>, ServerError> {
    let Some(text) = &cli.debug_faults_plan else {
        return Ok(cli
            .debug_faults
            .then(|| Arc::new(crate::faults::Faults::default())));
    };
    let plan: crate::faults::Plan =
        serde_json::from_str(text).map_err(|e| ServerError::FaultPlan(e.to_string()))?;
    plan.check().map_err(ServerError::FaultPlan)?;
    tracing::info!(?plan, "fault plan set");
    let faults = crate::faults::Faults::default();
    faults.set(plan);
    Ok(Some(Arc::new(faults)))
}

/// The admin token: `--token`, or the one kept in `--token-file` (made
/// there, random, when the file does not exist).
fn admin_token(cli: &Cli) -> std::io::Result<Option<String>> {
    let Some(path) = &cli.token_file else {
        return Ok(cli.token.clone());
    };
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(text.trim().to_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            use rand::RngCore as _;
            use std::io::Write as _;
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut bytes = [0u8; 24];
            rand::rng().fill_bytes(&mut bytes);
            let token = hex::encode(bytes);
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(path)?;
            f.write_all(token.as_bytes())?;
            f.sync_all()?;
            Ok(Some(token))
        }
        Err(e) => Err(e),
    }
}

/// Runs the server until `shutdown` resolves.
pub async fn run(mut cli: Cli, shutdown: impl Future<Output = ()>) -> Result<(), ServerError> {
    if let Some(d) = &cli.data_dir {
        std::fs::create_dir_all(d)?;
    }
    cli.token = admin_token(&cli)?;
    let store = Store::open(cli.data_dir.as_deref(), cli.watch_history)?;
    // Microseconds since the epoch: always above any RV a previous run handed out.
    // Without --data-dir everything is new; with it, a crash may have lost writes
    // that readers saw while they were being committed (see `store`), and their RVs
    // must not name other writes now.
    let base = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    store.start_epoch(base);
    seed::seed(&store, &cli.name, cli.nodes)?;
    let listener = TcpListener::bind(cli.listen).await?;
    let addr = listener.local_addr()?;
    bootstrap::bootstrap(&store, addr)?;
    let host = if addr.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else if addr.is_ipv6() {
        format!("[{}]", addr.ip())
    } else {
        addr.ip().to_string()
    };
    let server_addr = format!("{host}:{}", addr.port());
    let tls = if cli.tls {
        Some(tls::load_or_create(cli.data_dir.as_deref(), &cli.tls_san)?)
    } else {
        None
    };
    let url = format!(
        "{}://{server_addr}",
        if tls.is_some() { "https" } else { "http" }
    );
    if let Some(path) = &cli.kubeconfig_out {
        let kc = kubeconfig::render(
            &cli.name,
            cli.kubeconfig_server.as_deref().unwrap_or(&url),
            tls.as_ref().map(|t| t.ca_pem.as_str()),
            cli.token.as_deref(),
        )?;
        kubeconfig::write(path, &kc)?;
    }
    // The URL is the first stdout line: test harnesses wait for it.
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{url}")?;
        out.flush()?;
    }
    tracing::info!(cluster = %cli.name, %url, persistent = cli.data_dir.is_some(), "fleetbus-devcluster serving");
    let state = Arc::new(AppState {
        store,
        auth: Auth::new(
            cli.token.clone(),
            cli.authorization,
            cli.data_dir.as_deref(),
        )?,
        bookmark_every: Duration::from_secs(cli.bookmark_interval.max(1)),
        server_addr,
        faults: faults(&cli)?,
    });
    let acceptor = tls.map(|t| tokio_rustls::TlsAcceptor::from(t.config));
    let mut conns = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let state = state.clone();
                let acceptor = acceptor.clone();
                conns.spawn(async move {
                    let svc = hyper::service::service_fn(move |req: http::Request<hyper::body::Incoming>| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(api::handle(state, req.map(Body::new)).await) }
                    });
                    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let result = match acceptor {
                        Some(acc) => match acc.accept(stream).await {
                            Ok(s) => builder.serve_connection(TokioIo::new(s), svc).await,
                            Err(e) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed");
                                return;
                            }
                        },
                        None => builder.serve_connection(TokioIo::new(stream), svc).await,
                    };
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                });
            }
        }
    }
    tracing::info!("shutting down");
    conns.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parsed(args: &[&str]) -> Cli {
        Cli::try_parse_from([&["x"], args].concat()).expect("flags parse")
    }

    #[test]
    fn a_start_plan_is_in_force_and_a_bad_one_names_its_field() {
        assert!(faults(&parsed(&[])).expect("no faults").is_none());
        assert!(faults(&parsed(&["--debug-faults"]))
            .expect("faults")
            .is_some());
        let plan = r#"{"path": "/api/v1/secrets", "slow": 1.0, "latencyMs": 1000}"#;
        let on = faults(&parsed(&["--debug-faults-plan", plan]))
            .expect("a valid plan")
            .expect("faults on without --debug-faults");
        assert_eq!(on.report()["plan"]["latencyMs"], 1000, "{}", on.report());
        for (bad, field) in [
            ("{", "EOF"),
            (r#"{"slow": 2.0}"#, "slow"),
            (r#"{"latencyMs": 600000}"#, "latencyMs"),
        ] {
            let err = faults(&parsed(&["--debug-faults-plan", bad]))
                .expect_err(bad)
                .to_string();
            assert!(err.contains(field), "{bad}: {err}");
        }
    }

    #[test]
    fn a_token_file_is_made_once_private_and_then_read() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        let cli = parsed(&["--token-file", file.to_str().unwrap()]);
        let made = admin_token(&cli).unwrap().unwrap();
        assert_eq!(made.len(), 48);
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(
            admin_token(&cli).unwrap().unwrap(),
            made,
            "kept across restarts"
        );
        std::fs::write(&file, "chosen\n").unwrap();
        assert_eq!(admin_token(&cli).unwrap().as_deref(), Some("chosen"));
        assert!(
            Cli::try_parse_from(["x", "--token", "t", "--token-file", "f"]).is_err(),
            "one or the other"
        );
    }
}
