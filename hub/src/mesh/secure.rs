//! The secure default of `mesh up`: the mesh directory is also a fleet
//! directory (`fleetbus fleet init`, kept across restarts so the JetStream
//! store stays the same account's), nats-server runs in operator mode over
//! TLS with a CA generated here, and every agent gets its own creds, keys
//! and certificate from `fleetbus join` (signatures on, PROTOCOL §4.9). Writes what an operator needs: `<dir>/ca.pem`,
//! `<dir>/admin.creds`, `<dir>/<cluster>/nats.creds`.

use std::path::{Path, PathBuf};

use fleetbus_launch::AgentCommand;
use fleetbus_schemas::subject::Prefix;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

use super::MeshError;
use crate::proc;
use crate::state::{MeshSecurity, MeshState};
use crate::trust::{self, files};

/// The CA of the mesh's NATS (PEM): what clients verify the server with.
pub const CA_FILE: &str = "ca.pem";
/// The server's certificate and key, under `<dir>/nats-tls/`.
const TLS_DIR: &str = "nats-tls";
const SERVER_CERT: &str = "server.pem";
const SERVER_KEY: &str = "server.key";
/// The names the server certificate was made for, one a line: a name it
/// lacks makes a new certificate.
const SERVER_NAMES: &str = "names";
/// The nats-server configuration of a secure mesh.
pub const NATS_CONF: &str = "nats.conf";

/// The names nats-server's certificate always has: what `mesh up`'s clients use.
const LOCAL_NAMES: [&str; 2] = ["127.0.0.1", "localhost"];

/// Prepares the fleet, the certificates and the nats-server configuration
/// in `dir`; returns the configuration's path and what clients need. The
/// server certificate names 127.0.0.1, localhost and `extra_hosts` (made
/// anew, with a new CA, when the existing one lacks one of them).
pub fn prepare(dir: &Path, extra_hosts: &[String]) -> Result<(PathBuf, MeshSecurity), MeshError> {
    // `force`: the mesh directory holds more than the fleet; existing keys
    // are never overwritten, an existing fleet is reused.
    trust::init(
        dir,
        "fleetbus-mesh",
        &Prefix::default(),
        &trust::DEFAULT_JS_LIMITS,
        true,
    )?;
    let tls = dir.join(TLS_DIR);
    let (cert, key) = (tls.join(SERVER_CERT), tls.join(SERVER_KEY));
    let ca = dir.join(CA_FILE);
    let names_file = tls.join(SERVER_NAMES);
    let mut names: Vec<String> = LOCAL_NAMES.iter().map(|n| (*n).to_owned()).collect();
    for host in extra_hosts {
        if !names.contains(host) {
            names.push(host.clone());
        }
    }
    let listed = names.join("\n") + "\n";
    // A directory of an earlier version has no names file: its certificate
    // names exactly the local names.
    let made_for = match std::fs::read_to_string(&names_file) {
        Ok(text) => text,
        Err(_) => LOCAL_NAMES.join("\n") + "\n",
    };
    let named = |n: &String| made_for.lines().any(|l| l == n);
    let usable = ca.exists() && cert.exists() && key.exists() && names.iter().all(named);
    if !usable {
        // The CA's key is not kept: a name the certificate lacks takes a new CA too.
        files::create_dir(&tls)?;
        let (ca_pem, cert_pem, key_pem) = generate_tls(&names).map_err(MeshError::Tls)?;
        files::write_file(&ca, ca_pem.as_bytes(), false, true)?;
        files::write_file(&cert, cert_pem.as_bytes(), false, true)?;
        files::write_file(&key, key_pem.as_bytes(), true, true)?;
        files::write_file(&names_file, listed.as_bytes(), false, true)?;
    }
    let q = |p: &Path| serde_json::to_string(&p.display().to_string()).unwrap_or_default();
    // The include is resolved against this file's directory (the mesh dir).
    // The server name is here as well as in `-n`: nats-server's config
    // reload (how `leave` revokes) does not keep a `-n` flag and refuses a
    // reload that would change the name.
    let conf = format!(
        "server_name: fleetbus-mesh\ninclude \"{}\"\ntls {{\n  cert_file: {}\n  key_file: {}\n  timeout: 5\n}}\n",
        files::SERVER_CONF,
        q(&cert),
        q(&key),
    );
    let conf_path = dir.join(NATS_CONF);
    files::write_file(&conf_path, conf.as_bytes(), false, true)?;
    Ok((
        conf_path,
        MeshSecurity {
            ca,
            admin_creds: dir.join(files::ADMIN_CREDS),
        },
    ))
}

/// `<dir>/<cluster>/nats.creds`: the cluster's creds from `join` (the same
/// on every `mesh up` in this directory). In a mesh from before the members
/// account, the last cluster to move has the running nats-server reload: the
/// fleet account then issues no user, and the creds from before stop working
/// (as `fleetbus join` does; `mesh up` joins after the server started).
pub fn cluster_creds(dir: &Path, name: &str) -> Result<PathBuf, MeshError> {
    let joined = trust::join(dir, name, false)?;
    if joined.old_creds_stopped {
        if let Some(Err(why)) = reload_nats(dir) {
            return Err(MeshError::Reload(why));
        }
    }
    let cdir = dir.join(name);
    files::create_dir(&cdir)?;
    let path = cdir.join(files::CLUSTER_CREDS);
    files::write_file(&path, joined.creds.as_bytes(), true, true)?;
    Ok(path)
}

/// The URL of the running nats-server of the mesh in `dir`, if any.
pub fn running_url(dir: &Path) -> Option<String> {
    let nats = MeshState::read(dir).ok()?.nats?;
    proc::is_alive(&nats.process).then_some(nats.url)
}

/// How long `reload_nats` waits for nats-server to log the reload's outcome.
const RELOAD_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Has the running nats-server of the secure mesh in `dir`, if there is
/// one, reload its configuration (SIGHUP: nats-server's `--signal reload`),
/// which includes the fleet's [`files::SERVER_CONF`]: how `leave` and
/// `join --rotate` revoke a user on a running mesh. `None`: no running
/// secure mesh there; else its pid, or the server's own words on why the
/// reload failed (read from its log: a signal has no answer).
pub fn reload_nats(dir: &Path) -> Option<Result<u32, String>> {
    let state = MeshState::read(dir).ok()?;
    state.security.as_ref()?;
    let nats = state.nats?;
    if !proc::is_alive(&nats.process) {
        return None;
    }
    let log = &nats.process.log;
    let before = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    proc::signal(&nats.process, "HUP");
    let deadline = std::time::Instant::now() + RELOAD_WAIT;
    loop {
        let text = std::fs::read(log).unwrap_or_default();
        let new = String::from_utf8_lossy(text.get(before as usize..).unwrap_or_default());
        if let Some(line) = new.lines().find(|l| l.contains("Failed to reload")) {
            return Some(Err(line.to_owned()));
        }
        if new.contains("Reloaded server configuration") {
            return Some(Ok(nats.process.pid));
        }
        if std::time::Instant::now() >= deadline {
            return Some(Err(format!(
                "nats-server (pid {}) logged no reload within {}s: see {}",
                nats.process.pid,
                RELOAD_WAIT.as_secs(),
                log.display()
            )));
        }
        // A signal gets no answer and nats-server offers no reload event to
        // wait on: its log is the only witness, polled until the deadline.
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// `cmd` in the secure mode of the mesh in `dir`: the cluster's creds from
/// `join` ([`cluster_creds`], minted now if need be), the mesh's CA, the
/// fleet root's public key, and the cluster's keys and certificate where
/// `join` keeps them.
pub fn secure_agent(
    dir: &Path,
    security: &MeshSecurity,
    cmd: AgentCommand,
) -> Result<AgentCommand, MeshError> {
    let name = cmd.cluster_name().to_owned();
    let creds = cluster_creds(dir, &name)?;
    let cluster = dir.join(files::CLUSTERS).join(&name);
    Ok(cmd
        .nats_creds(creds)
        .nats_tls_ca(&security.ca)
        .fleet_root(dir.join(files::ROOT_PUB))
        .cluster_key(cluster.join(files::CLUSTER_KEY))
        .cluster_cert(cluster.join(files::CLUSTER_CERT)))
}

/// A CA and a server certificate for `names` (host names or IP addresses)
/// signed by it: (CA PEM, server certificate PEM, server key PEM). The CA's
/// key is not kept: nothing else is ever signed with it.
fn generate_tls(names: &[String]) -> Result<(String, String, String), String> {
    let e = |e: rcgen::Error| e.to_string();
    let mut ca = CertificateParams::new(Vec::<String>::new()).map_err(e)?;
    ca.distinguished_name
        .push(DnType::CommonName, "fleetbus mesh CA");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca_key = KeyPair::generate().map_err(e)?;
    let ca_cert = ca.self_signed(&ca_key).map_err(e)?;
    let issuer = Issuer::new(ca, ca_key);
    let mut server = CertificateParams::new(names.to_vec()).map_err(e)?;
    server
        .distinguished_name
        .push(DnType::CommonName, "fleetbus mesh nats-server");
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate().map_err(e)?;
    let cert = server.signed_by(&key, &issuer).map_err(e)?;
    Ok((ca_cert.pem(), cert.pem(), key.serialize_pem()))
}
