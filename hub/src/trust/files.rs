//! The files of a fleet directory, and how secrets are written (0600,
//! atomically, never over an existing file unless replacing is asked for).

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::TrustError;

/// `fleet.json`: what the fleet is (public keys, prefix). Written last by
/// `fleet init`, so its presence means the directory is complete.
pub const FLEET_JSON: &str = "fleet.json";
/// The operator's JWT (public).
pub const OPERATOR_JWT: &str = "operator.jwt";
/// The operator's nkey seed (secret).
pub const OPERATOR_SEED: &str = "operator.nk";
/// The system account's nkey seed (secret).
pub const SYSTEM_SEED: &str = "system-account.nk";
/// The fleet account's identity nkey seed (secret; kept offline in practice).
pub const ACCOUNT_SEED: &str = "fleet-account.nk";
/// The fleet account's signing key seed (secret): issues every user.
pub const SIGNING_SEED: &str = "fleet-account-signing.nk";
/// The members account's identity nkey seed (secret): where the users of a
/// fleet whose streams have their own account live (SECURITY.md, "Deliveries
/// a member steers"). Not in [`INIT_FILES`]: a fleet made before the split
/// gets it from the next `fleet init`.
pub const MEMBERS_SEED: &str = "members-account.nk";
/// The members account's signing key seed (secret): issues every user of a
/// split fleet.
pub const MEMBERS_SIGNING_SEED: &str = "members-account-signing.nk";
/// The nats-server include for operator mode (public JWTs only).
pub const SERVER_CONF: &str = "nats-operator.conf";
/// The admin's credentials (secret).
pub const ADMIN_CREDS: &str = "admin.creds";
/// The fleet root key, ed25519 PKCS#8 PEM (secret).
pub const ROOT_KEY: &str = "root.key";
/// The fleet root's public key, SPKI PEM.
pub const ROOT_PUB: &str = "root.pub";
/// Per-cluster material lives under `clusters/<name>/`.
pub const CLUSTERS: &str = "clusters";
/// A cluster's credentials, `clusters/<name>/nats.creds` (secret).
pub const CLUSTER_CREDS: &str = "nats.creds";
/// A cluster's signing and sealing keys, `clusters/<name>/cluster.key` (secret).
pub const CLUSTER_KEY: &str = "cluster.key";
/// A cluster's certificate from the fleet root, `clusters/<name>/cluster.cert`.
pub const CLUSTER_CERT: &str = "cluster.cert";

/// The users revoked in the fleet account, `{user public key: unix time}`
/// (public; written by `leave` and `join --rotate`, folded into the account
/// JWT of [`SERVER_CONF`]).
pub const REVOCATIONS: &str = "revocations.json";
/// Every user public key ever issued to a cluster, one a line,
/// `clusters/<name>/issued-keys`: what `leave` revokes.
pub const ISSUED_KEYS: &str = "issued-keys";

/// Every certificate serial ever issued to a cluster, one a line (hex),
/// `clusters/<name>/issued-serials`: what `leave` revokes on the bus.
pub const ISSUED_SERIALS: &str = "issued-serials";
/// The root-signed revocation entry `leave` put on the bus,
/// `clusters/<name>/revoked.json` (public): a later `join` issues a new
/// certificate rather than hand out a revoked one.
pub const REVOKED_ENTRY: &str = "revoked.json";

/// The `fleetbus notify` bridge's NATS credentials (its own user, consumer
/// `fleetbus-notify`), written by `fleet init`; not in [`INIT_FILES`], so a
/// fleet made before it gets them from the next `fleet init`.
pub const NOTIFY_CREDS: &str = "notify.creds";

/// Every file `fleet init` writes.
pub const INIT_FILES: &[&str] = &[
    FLEET_JSON,
    OPERATOR_JWT,
    OPERATOR_SEED,
    SYSTEM_SEED,
    ACCOUNT_SEED,
    SIGNING_SEED,
    SERVER_CONF,
    ADMIN_CREDS,
    ROOT_KEY,
    ROOT_PUB,
];

/// Writes `contents` to `path` through a temporary file and a rename, with
/// mode 0600 when `secret`. Refuses to replace an existing file unless
/// `replace`.
pub fn write_file(
    path: &Path,
    contents: &[u8],
    secret: bool,
    replace: bool,
) -> Result<(), TrustError> {
    let io = |e: std::io::Error| TrustError::Io {
        path: path.to_owned(),
        source: e,
    };
    if !replace && path.exists() {
        return Err(TrustError::WouldOverwrite(path.to_owned()));
    }
    let tmp = tmp_path(path);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    opts.mode(if secret { 0o600 } else { 0o644 });
    // A leftover of an interrupted write is ours to remove.
    let _ = std::fs::remove_file(&tmp);
    let mut f = opts.open(&tmp).map_err(io)?;
    f.write_all(contents).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

fn tmp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Reads a text file of the fleet directory, naming it on failure.
pub fn read(path: &Path) -> Result<String, TrustError> {
    std::fs::read_to_string(path).map_err(|source| TrustError::Io {
        path: path.to_owned(),
        source,
    })
}

/// The non-empty lines of the list file at `path` (none when it does not exist).
pub fn read_lines(path: &Path) -> Result<Vec<String>, TrustError> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    Ok(read(path)?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect())
}

/// Appends `line` to the list file at `path` (rewritten whole, atomically).
pub fn append_line(path: &Path, line: &str) -> Result<(), TrustError> {
    let mut text = if path.exists() {
        read(path)?
    } else {
        String::new()
    };
    text.push_str(line);
    text.push('\n');
    write_file(path, text.as_bytes(), false, true)
}

/// Creates `dir` (and parents), private to the user when new.
pub fn create_dir(dir: &Path) -> Result<(), TrustError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|source| TrustError::Io {
            path: dir.to_owned(),
            source,
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn secrets_are_0600_and_never_silently_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("s.nk");
        write_file(&p, b"one", true, false).unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let err = write_file(&p, b"two", true, false).unwrap_err();
        assert!(matches!(err, TrustError::WouldOverwrite(_)), "{err}");
        assert_eq!(read(&p).unwrap(), "one");
        write_file(&p, b"two", true, true).unwrap();
        assert_eq!(read(&p).unwrap(), "two");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}
