//! Where the binaries under test and the external tools live.

use std::path::{Path, PathBuf};

/// Repository root (this crate lives at `<root>/tests/support`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The SIG Multicluster CRDs as published upstream, pinned unchanged beside
/// the project (`<root>/../shared/reference/crds`, or `FLEETBUS_UPSTREAM_CRDS`):
/// what tests install, as a platform team installs them.
///
/// # Panics
/// If the directory is missing, saying where it was looked for.
pub fn upstream_crds() -> PathBuf {
    let dir = std::env::var_os("FLEETBUS_UPSTREAM_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/reference/crds"));
    assert!(
        dir.join("multicluster.x-k8s.io_clusterprofiles.yaml")
            .is_file(),
        "the upstream CRDs are not at {} (set FLEETBUS_UPSTREAM_CRDS)",
        dir.display()
    );
    dir
}

/// `target/<profile>/<name>`: the binary built by `cargo build --workspace`.
///
/// Test executables live in `target/<profile>/deps/`, binaries one level up;
/// a binary calling this (e.g. a chaos driver) already lives in `target/<profile>/`.
///
/// # Panics
/// If the binary is missing, with a message saying how to build it.
pub fn cargo_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let mut dir = exe
        .parent()
        .expect("executable has a parent dir")
        .to_path_buf();
    if dir.file_name().is_some_and(|n| n == "deps") {
        dir.pop();
    }
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "binary {} not found: run `cargo build --workspace` first",
        bin.display()
    );
    bin
}

/// The `nats-server` to run: `$FLEETBUS_NATS_SERVER`, else `nats-server` on
/// `PATH`, else `<repo>/.tools/venv/bin/nats-server` (installed by `scripts/test`);
/// the lookup `fleetbus mesh up` uses too.
///
/// # Panics
/// If there is none, with a message saying how to install it.
pub fn nats_server_bin() -> PathBuf {
    locate_nats_server().unwrap_or_else(|e| panic!("{e}"))
}

/// [`nats_server_bin`] as a `Result`.
pub(crate) fn locate_nats_server() -> Result<PathBuf, fleetbus_launch::LocateError> {
    fleetbus_launch::nats_server(&[repo_root().join(fleetbus_launch::NATS_VENV_PATH)])
}

/// The `helm` to run: `$FLEETBUS_HELM`, else `<repo>/.tools/bin/helm`
/// (installed by `scripts/test`), else `helm` on `PATH`.
pub fn helm_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FLEETBUS_HELM").filter(|p| !p.is_empty()) {
        return PathBuf::from(p);
    }
    let local = repo_root().join(".tools/bin/helm");
    if local.is_file() {
        return local;
    }
    find_on_path("helm").unwrap_or(local)
}

/// `/usr/lib/google-cloud-sdk/bin/kubectl.<version>`, e.g. version `"1.33"`.
pub fn kubectl_bin(version: &str) -> PathBuf {
    PathBuf::from(format!("/usr/lib/google-cloud-sdk/bin/kubectl.{version}"))
}

pub(crate) fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "run `cargo build --workspace` first")]
    fn cargo_bin_missing_says_how_to_build() {
        cargo_bin("no-such-binary-fleetbus");
    }

    #[test]
    fn repo_root_has_workspace_manifest() {
        assert!(repo_root().join("Cargo.toml").is_file());
    }
}
