//! `fleetbus-agent`: parse flags, set up logging, run until SIGTERM/SIGINT.

use std::process::ExitCode;

use clap::Parser;
use fleetbus_agent::{Args, Config};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing_subscriber::EnvFilter;

/// jemalloc rather than glibc's malloc: the agent holds many small, long-lived
/// allocations (parsed objects) beside short-lived ones (passes, messages), and
/// glibc's arenas kept far more resident than was live (BENCHMARKS.md, scenario 6).
/// Its settings (freed pages returned at once) are built in from
/// `.cargo/config.toml`.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        // --help and --version: clap prints them to stdout.
        Err(e) if !e.use_stderr() => {
            return match e.print() {
                Ok(()) => ExitCode::SUCCESS,
                Err(_) => ExitCode::FAILURE,
            };
        }
        Err(e) => {
            eprintln!("error: {}", fleetbus_agent::usage_error(&e));
            return ExitCode::from(2);
        }
    };
    let config = match Config::try_from(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: failed to start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async_main(config))
}

async fn async_main(config: Config) -> ExitCode {
    let shutdown = CancellationToken::new();
    let signals =
        tokio::spawn(wait_for_signal(shutdown.clone()).instrument(tracing::info_span!("signals")));
    let result = fleetbus_agent::run(config, shutdown.clone()).await;
    // Also stops the signal listener, which returns once `shutdown` is cancelled.
    shutdown.cancel();
    if signals.await.is_err() {
        tracing::warn!("signal listener panicked");
    }
    match result {
        Ok(()) => {
            tracing::info!("stopped");
            ExitCode::SUCCESS
        }
        Err(e) => {
            let msg = fleetbus_agent::report(&e);
            tracing::error!(error = %msg, "agent failed");
            eprintln!("error: {msg}");
            ExitCode::FAILURE
        }
    }
}

/// Cancels `shutdown` on SIGTERM or SIGINT (the agent then leaves the fleet).
async fn wait_for_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = ctrl_c => tracing::info!("SIGINT received; leaving the fleet"),
                    _ = term.recv() => tracing::info!("SIGTERM received; leaving the fleet"),
                    _ = shutdown.cancelled() => return,
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM; only SIGINT stops gracefully");
                tokio::select! {
                    _ = ctrl_c => {}
                    _ = shutdown.cancelled() => return,
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        tokio::select! {
            _ = ctrl_c => {}
            _ = shutdown.cancelled() => return,
        }
    }
    shutdown.cancel();
}
