//! A fleet's root of trust on disk: `fleetbus fleet init` and `fleetbus join`.
//!
//! `fleet init --dir D` creates, with the official `nkeys` crate, a NATS
//! operator, a system account and the fleet account (JetStream enabled, one
//! signing key that issues every user), the admin's credentials, a
//! nats-server include for operator mode, and the fleet root key (ed25519;
//! it signs cluster certificates). `join NAME --dir D` mints NAME's NATS
//! user with exactly [`fleetbus_schemas::permissions::agent_permissions`],
//! and NAME's signing and sealing keys with their certificate
//! ([`identity`]), kept under `D/clusters/NAME/` so that joining again gives
//! the same ones. [`files`] lists the layout.
//!
//! Secrets are written 0600 through a rename; nothing existing is replaced
//! except a cluster's credentials and keys under `join --rotate`.

pub mod files;
pub mod identity;
pub mod jwt;
mod output;

pub use output::{render, JoinOutput};

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use fleetbus_schemas::permissions::{
    agent_permissions, check_cluster_name, streams_account_exports, InvalidClusterName,
};
use fleetbus_schemas::subject::Prefix;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use files::*;
pub use jwt::JsLimits;
use jwt::{AccountSpec, JwtError, Links};

/// Why `fleet init` or `join` failed. Every variant names the file or the
/// input at fault.
#[derive(Debug, Error)]
pub enum TrustError {
    /// Reading or writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The IO error.
        source: std::io::Error,
    },
    /// `fleet init` into a non-empty directory that is not a fleet, without `--force`.
    #[error("{} is not empty and holds no fleet: choose an empty directory or pass --force", .0.display())]
    NotEmpty(PathBuf),
    /// Some of a fleet's files exist, `fleet.json` does not: an interrupted
    /// init or a damaged fleet. Never overwritten, not even with `--force`.
    #[error("{} holds part of a fleet ({}) but no fleet.json: refusing to overwrite keys; move them away first", dir.display(), files.join(", "))]
    PartialFleet {
        /// The directory.
        dir: PathBuf,
        /// The files found.
        files: Vec<String>,
    },
    /// A file that must not be replaced exists.
    #[error("{} exists: refusing to overwrite it", .0.display())]
    WouldOverwrite(PathBuf),
    /// `join --dir D` where D holds no fleet.
    #[error("{} is not a fleet directory (no fleet.json): create one with `fleetbus fleet init --dir {}`", .0.display(), .0.display())]
    NoFleet(PathBuf),
    /// A fleet file that does not parse or does not match fleet.json.
    #[error("{}: {why}", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Stored cluster credentials that do not verify against this fleet.
    #[error("{}: {why}; `fleetbus join {name} --rotate` issues new credentials", path.display())]
    BadCreds {
        /// The creds file.
        path: PathBuf,
        /// The cluster.
        name: String,
        /// What failed.
        why: String,
    },
    /// `leave NAME` for a name this fleet never issued credentials to.
    #[error("{name} never joined the fleet in {} (no credentials were issued to it)", dir.display())]
    NotJoined {
        /// The fleet directory.
        dir: PathBuf,
        /// The cluster.
        name: String,
    },
    /// A stored cluster key or certificate that does not verify against
    /// this fleet's root, has expired, or does not match.
    #[error("{}: {why}; `fleetbus join {name} --rotate` issues new keys and a new certificate", path.display())]
    BadIdentity {
        /// The certificate file.
        path: PathBuf,
        /// The cluster.
        name: String,
        /// What failed.
        why: String,
    },
    /// An invalid cluster name.
    #[error(transparent)]
    Name(#[from] InvalidClusterName),
    /// Encoding a JWT failed.
    #[error(transparent)]
    Jwt(#[from] JwtError),
    /// Generating or encoding a key failed.
    #[error("cannot generate a key: {0}")]
    Key(String),
}

/// The fleet account's JetStream limits `fleet init` sets unless told
/// otherwise: room for the fleet's eight streams and buckets and those of
/// later versions (64 streams), about ten consumers per agent for a
/// thousand clusters (10,000). Storage is not limited by default: an
/// account whose storage limit exceeds what its server can give (75% of the
/// free disk when `max_file_store` is not set) gets no JetStream at all
/// ("JetStream unavailable"): the secure mesh failed so on a machine with 10
/// GB free under an 8 GiB default. Set `--js-max-disk` / `--js-max-mem` to at
/// most the servers' `max_file_store` / `max_memory_store`. `fleet init
/// --js-max-*` changes them; `-1` lifts one.
pub const DEFAULT_JS_LIMITS: JsLimits = JsLimits {
    disk_storage: -1,
    mem_storage: -1,
    streams: 64,
    consumers: 10_000,
};

/// `fleet.json`: the fleet's public facts, what `join` needs besides the
/// signing key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetInfo {
    /// The fleet's name (operator and account names in the JWTs).
    pub name: String,
    /// The operator's public nkey.
    pub operator: String,
    /// The system account's public nkey.
    pub system_account: String,
    /// The fleet account's public nkey: it holds the fleet's streams and
    /// buckets. Split fleets (`members_account` set) have no user in it;
    /// before the split every agent and the admin were its users.
    pub account: String,
    /// The fleet account's signing key's public nkey: the issuer of every
    /// user before the split. A split fleet's streams account lists it only
    /// while some cluster still holds creds it issued ([`write_server_conf`]).
    pub signing_key: String,
    /// The members account's public nkey: every agent, the admin and the
    /// notify bridge are its users, and it imports the fleet account's
    /// JetStream (SECURITY.md, "Deliveries a member steers"). Absent from
    /// fleets made before the split; the next `fleet init` adds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members_account: Option<String>,
    /// The members account's signing key's public nkey: the issuer of every
    /// user of a split fleet.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members_signing_key: Option<String>,
    /// The subject prefix the permissions are written for.
    pub subject_prefix: String,
    /// When `fleet init` ran.
    pub created_at: DateTime<Utc>,
    /// The fleet account's JetStream limits, set at `fleet init` (absent from
    /// fleets made before limits: unlimited, as they were made).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jetstream_limits: Option<JsLimits>,
}

/// What `fleet init` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitOutcome {
    /// A new fleet was written.
    Created(FleetInfo),
    /// The directory held a fleet from before the members account: it was
    /// added, with new admin and notify credentials in it (the old ones
    /// keep working until every cluster has joined again).
    Split(FleetInfo),
    /// The directory already held a complete fleet: nothing was changed but,
    /// when true, the notify bridge's credentials it lacked were added.
    AlreadyInitialised(FleetInfo, bool),
}

fn damaged(path: &Path, why: impl Into<String>) -> TrustError {
    TrustError::Damaged {
        path: path.to_owned(),
        why: why.into(),
    }
}

/// `fleetbus fleet init --dir D`.
pub fn init(
    dir: &Path,
    name: &str,
    prefix: &Prefix,
    limits: &JsLimits,
    force: bool,
) -> Result<InitOutcome, TrustError> {
    if dir.join(FLEET_JSON).exists() {
        let info = load_info(dir)?;
        let missing: Vec<&str> = INIT_FILES
            .iter()
            .copied()
            .filter(|f| !dir.join(f).exists())
            .collect();
        if !missing.is_empty() {
            return Err(damaged(
                &dir.join(FLEET_JSON),
                format!("the fleet is missing {}", missing.join(", ")),
            ));
        }
        if info.members_account.is_none() {
            return split(dir, info).map(InitOutcome::Split);
        }
        let notify_added = ensure_notify_creds(dir, &info)?;
        return Ok(InitOutcome::AlreadyInitialised(info, notify_added));
    }
    let present: Vec<String> = INIT_FILES
        .iter()
        .filter(|f| dir.join(f).exists())
        .map(|f| (*f).to_owned())
        .collect();
    if !present.is_empty() {
        return Err(TrustError::PartialFleet {
            dir: dir.to_owned(),
            files: present,
        });
    }
    let non_empty = std::fs::read_dir(dir)
        .map(|mut d| d.next().is_some())
        .unwrap_or(false);
    if non_empty && !force {
        return Err(TrustError::NotEmpty(dir.to_owned()));
    }
    create_dir(dir)?;
    write_new_fleet(dir, name, prefix, limits).map(InitOutcome::Created)
}

/// Generates every key and writes every file of a new fleet, `fleet.json` last.
fn write_new_fleet(
    dir: &Path,
    name: &str,
    prefix: &Prefix,
    limits: &JsLimits,
) -> Result<FleetInfo, TrustError> {
    let now = Utc::now();
    let operator = nkeys::KeyPair::new_operator();
    let system = nkeys::KeyPair::new_account();
    let account = nkeys::KeyPair::new_account();
    let signing = nkeys::KeyPair::new_account();
    let members = nkeys::KeyPair::new_account();
    let members_signing = nkeys::KeyPair::new_account();
    let info = FleetInfo {
        name: name.to_owned(),
        operator: operator.public_key(),
        system_account: system.public_key(),
        account: account.public_key(),
        signing_key: signing.public_key(),
        members_account: Some(members.public_key()),
        members_signing_key: Some(members_signing.public_key()),
        subject_prefix: prefix.as_str().to_owned(),
        created_at: now,
        jetstream_limits: Some(*limits),
    };
    let operator_jwt = jwt::operator_jwt(&operator, name, &info.system_account, now)?;
    let secret = |f: &str, text: &str| write_file(&dir.join(f), text.as_bytes(), true, false);
    let public = |f: &str, text: &str| write_file(&dir.join(f), text.as_bytes(), false, false);
    secret(OPERATOR_SEED, &seed_line(&operator)?)?;
    secret(SYSTEM_SEED, &seed_line(&system)?)?;
    secret(ACCOUNT_SEED, &seed_line(&account)?)?;
    secret(SIGNING_SEED, &seed_line(&signing)?)?;
    secret(MEMBERS_SEED, &seed_line(&members)?)?;
    secret(MEMBERS_SIGNING_SEED, &seed_line(&members_signing)?)?;
    public(OPERATOR_JWT, &format!("{operator_jwt}\n"))?;
    write_server_conf(dir, &info, &operator, &BTreeMap::new(), now, false)?;
    secret(
        ADMIN_CREDS,
        &mint_user(&info, &members_signing, "admin", None, now)?.0,
    )?;
    let root = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519)
        .map_err(|e| TrustError::Key(e.to_string()))?;
    ensure_notify_creds(dir, &info)?;
    secret(ROOT_KEY, &root.serialize_pem())?;
    public(ROOT_PUB, &root.public_key_pem())?;
    let json = serde_json::to_string_pretty(&info)
        .map_err(|e| damaged(&dir.join(FLEET_JSON), e.to_string()))?;
    public(FLEET_JSON, &(json + "\n"))?;
    Ok(info)
}

/// Mints [`NOTIFY_CREDS`] unless the fleet has them: a user with
/// `notify_permissions` for the default consumer `fleetbus-notify`. True when
/// it wrote them.
fn ensure_notify_creds(dir: &Path, info: &FleetInfo) -> Result<bool, TrustError> {
    let path = dir.join(NOTIFY_CREDS);
    if path.exists() {
        return Ok(false);
    }
    let signing = user_signer(dir, info)?;
    let prefix = Prefix::new(info.subject_prefix.clone())
        .map_err(|e| damaged(&dir.join(FLEET_JSON), e.to_string()))?;
    let permissions = fleetbus_schemas::permissions::notify_permissions(&prefix, "fleetbus-notify")
        .map_err(|e| TrustError::Key(e.to_string()))?;
    let (creds, _) = mint_user(info, &signing, "notify", Some(&permissions), Utc::now())?;
    write_file(&path, creds.as_bytes(), true, false)?;
    Ok(true)
}

/// The account a fleet's users are issued in and the key that issues them:
/// the members account of a split fleet, else the fleet account.
fn user_issuer(info: &FleetInfo) -> (&str, &str) {
    match (&info.members_account, &info.members_signing_key) {
        (Some(account), Some(signing)) => (account, signing),
        _ => (&info.account, &info.signing_key),
    }
}

/// The key that issues `info`'s users, from its seed, checked against fleet.json.
fn user_signer(dir: &Path, info: &FleetInfo) -> Result<nkeys::KeyPair, TrustError> {
    let (_, signing_key) = user_issuer(info);
    let file = if info.members_signing_key.is_some() {
        MEMBERS_SIGNING_SEED
    } else {
        SIGNING_SEED
    };
    let path = dir.join(file);
    let signing = nkeys::KeyPair::from_seed(read(&path)?.trim())
        .map_err(|_| damaged(&path, "not an account nkey seed"))?;
    if signing.public_key() != signing_key {
        return Err(damaged(&path, "not the signing key fleet.json names"));
    }
    Ok(signing)
}

/// `fleet init` over a fleet from before the members account: adds it (new
/// keys, fleet.json rewritten), re-issues the admin's and the notify bridge's
/// credentials in it, and rewrites [`SERVER_CONF`]. Clusters get new creds
/// from their next `join`; until the last has, the fleet account keeps its
/// signing key, so that agents still running on the old creds keep working.
fn split(dir: &Path, mut info: FleetInfo) -> Result<FleetInfo, TrustError> {
    let now = Utc::now();
    let members = nkeys::KeyPair::new_account();
    let members_signing = nkeys::KeyPair::new_account();
    let operator = operator_key(dir, &info)?;
    // Seeds first, fleet.json after them: an interrupted split leaves a fleet
    // that is not split yet, and the next `fleet init` makes new seeds.
    write_file(
        &dir.join(MEMBERS_SEED),
        seed_line(&members)?.as_bytes(),
        true,
        true,
    )?;
    let signing_seed = seed_line(&members_signing)?;
    write_file(
        &dir.join(MEMBERS_SIGNING_SEED),
        signing_seed.as_bytes(),
        true,
        true,
    )?;
    info.members_account = Some(members.public_key());
    info.members_signing_key = Some(members_signing.public_key());
    let revocations = read_revocations(dir)?;
    write_server_conf(dir, &info, &operator, &revocations, now, true)?;
    let admin = mint_user(&info, &members_signing, "admin", None, now)?.0;
    write_file(&dir.join(ADMIN_CREDS), admin.as_bytes(), true, true)?;
    match std::fs::remove_file(dir.join(NOTIFY_CREDS)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(TrustError::Io {
                path: dir.join(NOTIFY_CREDS),
                source: e,
            })
        }
        _ => {}
    }
    ensure_notify_creds(dir, &info)?;
    let json = serde_json::to_string_pretty(&info)
        .map_err(|e| damaged(&dir.join(FLEET_JSON), e.to_string()))?;
    write_file(&dir.join(FLEET_JSON), (json + "\n").as_bytes(), false, true)?;
    Ok(info)
}

/// A key's seed as the line a seed file holds.
fn seed_line(key: &nkeys::KeyPair) -> Result<String, TrustError> {
    key.seed()
        .map(|s| s + "\n")
        .map_err(|e| TrustError::Key(e.to_string()))
}

/// Whether `creds` were issued by the fleet account's own signing key: from
/// before the members account.
fn from_before_split(info: &FleetInfo, creds: &str) -> bool {
    jwt::parse_creds(creds).is_ok_and(|(c, _)| c["iss"].as_str() == Some(info.signing_key.as_str()))
}

/// The operator's key, from its seed, checked against fleet.json.
fn operator_key(dir: &Path, info: &FleetInfo) -> Result<nkeys::KeyPair, TrustError> {
    let path = dir.join(OPERATOR_SEED);
    let operator = nkeys::KeyPair::from_seed(read(&path)?.trim())
        .map_err(|_| damaged(&path, "not an operator nkey seed"))?;
    if operator.public_key() != info.operator {
        return Err(damaged(&path, "not the operator fleet.json names"));
    }
    Ok(operator)
}

/// [`REVOCATIONS`], or none.
fn read_revocations(dir: &Path) -> Result<BTreeMap<String, i64>, TrustError> {
    let path = dir.join(REVOCATIONS);
    if !path.exists() {
        return Ok(BTreeMap::new());
    }
    serde_json::from_str(&read(&path)?).map_err(|e| damaged(&path, e.to_string()))
}

/// Whether some cluster of `dir` still holds creds issued by the fleet
/// account's own signing key (from before the split).
fn old_creds_remain(dir: &Path, info: &FleetInfo) -> Result<bool, TrustError> {
    let clusters = dir.join(CLUSTERS);
    let Ok(entries) = std::fs::read_dir(&clusters) else {
        return Ok(false);
    };
    for entry in entries {
        let entry = entry.map_err(|source| TrustError::Io {
            path: clusters.clone(),
            source,
        })?;
        let creds = entry.path().join(CLUSTER_CREDS);
        if !creds.exists() {
            continue;
        }
        if from_before_split(info, &read(&creds)?) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Writes [`SERVER_CONF`]: the operator's JWT (from [`OPERATOR_JWT`]) and
/// the accounts' JWTs signed now, the users' account carrying `revocations`.
/// A split fleet's streams account exports what its members account imports
/// (`streams_account_exports`), and issues users only while some cluster
/// still holds creds from before the split. `replace`: over an existing
/// include (revocation, split).
fn write_server_conf(
    dir: &Path,
    info: &FleetInfo,
    operator: &nkeys::KeyPair,
    revocations: &BTreeMap<String, i64>,
    now: DateTime<Utc>,
    replace: bool,
) -> Result<(), TrustError> {
    let operator_jwt = read(&dir.join(OPERATOR_JWT))?;
    let none = BTreeMap::new();
    let system_jwt = jwt::account_jwt(
        operator,
        &AccountSpec {
            account: &info.system_account,
            name: "SYS",
            jetstream: None,
            signing_keys: &[],
            revocations: &none,
            links: Links::None,
        },
        now,
    )?;
    let prefix = Prefix::new(info.subject_prefix.clone())
        .map_err(|e| damaged(&dir.join(FLEET_JSON), e.to_string()))?;
    let shared = streams_account_exports(&prefix);
    let limits = info.jetstream_limits.unwrap_or(JsLimits::UNLIMITED);
    let old_signing = std::slice::from_ref(&info.signing_key);
    let mut members_account = None;
    let streams = match (&info.members_account, &info.members_signing_key) {
        (Some(members), Some(members_signing)) => {
            let members_jwt = jwt::account_jwt(
                operator,
                &AccountSpec {
                    account: members,
                    name: &format!("{}-members", info.name),
                    jetstream: None,
                    signing_keys: std::slice::from_ref(members_signing),
                    revocations,
                    links: Links::Imports {
                        from: &info.account,
                        subjects: &shared,
                    },
                },
                now,
            )?;
            members_account = Some((members.clone(), members_jwt));
            let keep_old = old_creds_remain(dir, info)?;
            AccountSpec {
                account: &info.account,
                name: &info.name,
                jetstream: Some(&limits),
                signing_keys: if keep_old { old_signing } else { &[] },
                // With no signing key it has no user to revoke.
                revocations: if keep_old { revocations } else { &none },
                links: Links::Exports(&shared),
            }
        }
        _ => AccountSpec {
            account: &info.account,
            name: &info.name,
            jetstream: Some(&limits),
            signing_keys: old_signing,
            revocations,
            links: Links::None,
        },
    };
    // nats-server applies a changed account JWT by rebuilding the account's
    // exports, which drops the routes of replies in flight: a pull pending
    // when the server reloads would deliver its messages nowhere (tested:
    // after a revocation, an agent's registry watch went silent). Signed at a
    // fixed time, the streams account's JWT is the same text while its
    // claims are, and nats-server skips an identical JWT: revoking a member
    // (the members account's JWT) leaves it alone.
    let iat = if info.members_account.is_some() {
        info.created_at
    } else {
        now
    };
    let mut accounts = vec![(
        info.account.clone(),
        jwt::account_jwt(operator, &streams, iat)?,
    )];
    accounts.extend(members_account);
    accounts.push((info.system_account.clone(), system_jwt));
    let conf = server_conf(info, operator_jwt.trim(), &accounts);
    write_file(&dir.join(SERVER_CONF), conf.as_bytes(), false, replace)
}

/// The nats-server include for operator mode: the operator's JWT, the system
/// account, and every account preloaded into the memory resolver (no account
/// server to run). nats-server documents the memory resolver's preloads as
/// reloadable: a new account JWT (a revocation) takes effect on a config
/// reload (`nats-server --signal reload`, SIGHUP), no restart.
fn server_conf(info: &FleetInfo, operator_jwt: &str, accounts: &[(String, String)]) -> String {
    let preload: String = accounts
        .iter()
        .map(|(key, jwt)| format!("  {key}: {jwt}\n"))
        .collect();
    format!(
        "# fleetbus fleet {name:?}: nats-server operator mode. `include` this file from the\n\
         # server's configuration; users are the creds `fleetbus join` mints.\n\
         operator: {operator_jwt}\n\
         system_account: {sys}\n\
         resolver: MEMORY\n\
         resolver_preload: {{\n{preload}}}\n",
        name = info.name,
        sys = info.system_account,
    )
}

/// A user of the fleet account issued by its signing key: (creds file, the
/// user's public key).
fn mint_user(
    info: &FleetInfo,
    signing: &nkeys::KeyPair,
    name: &str,
    permissions: Option<&fleetbus_schemas::permissions::Permissions>,
    now: DateTime<Utc>,
) -> Result<(String, String), TrustError> {
    let user = nkeys::KeyPair::new_user();
    let user_jwt = jwt::user_jwt(
        signing,
        user_issuer(info).0,
        &user.public_key(),
        name,
        permissions,
        now,
    )?;
    let seed = user.seed().map_err(|e| TrustError::Key(e.to_string()))?;
    Ok((jwt::creds_file(&user_jwt, &seed), user.public_key()))
}

fn load_info(dir: &Path) -> Result<FleetInfo, TrustError> {
    let path = dir.join(FLEET_JSON);
    if !path.exists() {
        return Err(TrustError::NoFleet(dir.to_owned()));
    }
    serde_json::from_str(&read(&path)?).map_err(|e| damaged(&path, e.to_string()))
}

/// One cluster's credentials, keys and certificate, as `join` returns them.
#[derive(Debug, Clone)]
pub struct Joined {
    /// The fleet.
    pub info: FleetInfo,
    /// The cluster.
    pub name: String,
    /// The creds file's text.
    pub creds: String,
    /// Where they are kept.
    pub path: PathBuf,
    /// Whether the credentials were issued now (first join or `--rotate`).
    pub issued: bool,
    /// The cluster's earlier user keys revoked now (`--rotate`); when not
    /// empty, [`SERVER_CONF`] was rewritten and nats-server must reload it.
    pub revoked: Vec<String>,
    /// Its creds were from before the split: issued anew in the members account.
    pub moved: bool,
    /// It was the last cluster to move: the streams account issues no user
    /// any more ([`SERVER_CONF`] rewritten; nats-server must reload it), and
    /// every creds from before the split stops working.
    pub old_creds_stopped: bool,
    /// The cluster's keys, certificate and the fleet root's public key.
    pub identity: identity::Identity,
    /// Whether the keys and certificate were issued now.
    pub identity_issued: bool,
}

/// `fleetbus join NAME --dir D [--rotate]`: NAME's credentials, keys and
/// certificate, issued once and kept under `D/clusters/NAME/`; `rotate`
/// issues new ones.
pub fn join(dir: &Path, name: &str, rotate: bool) -> Result<Joined, TrustError> {
    check_cluster_name(name)?;
    let info = load_info(dir)?;
    let cluster_dir = dir.join(CLUSTERS).join(name);
    let path = cluster_dir.join(CLUSTER_CREDS);
    // Creds from before the split (issued in the streams account) are issued
    // anew in the members account. The old ones are not revoked one by one
    // (that would re-sign the streams account's JWT at each join, see
    // `write_server_conf`): they all stop at once when the last cluster has
    // moved and the streams account loses its signing key.
    let stored = if path.exists() {
        Some(read(&path)?)
    } else {
        None
    };
    let moved = info.members_account.is_some()
        && stored
            .as_deref()
            .is_some_and(|c| from_before_split(&info, c));
    let (creds, issued, revoked) = match stored {
        Some(creds) if !rotate && !moved => {
            check_stored(&info, name, &path, &creds)?;
            (creds, false, Vec::new())
        }
        _ => {
            let (creds, revoked) = mint_creds(dir, &info, name, rotate, moved)?;
            (creds, true, revoked)
        }
    };
    let old_creds_stopped = moved && !old_creds_remain(dir, &info)?;
    if old_creds_stopped {
        let operator = operator_key(dir, &info)?;
        let revocations = read_revocations(dir)?;
        write_server_conf(dir, &info, &operator, &revocations, Utc::now(), true)?;
    }
    let (identity, identity_issued) = identity::ensure(dir, &cluster_dir, name, rotate)?;
    Ok(Joined {
        info,
        name: name.to_owned(),
        creds,
        path,
        issued,
        revoked,
        moved,
        old_creds_stopped,
        identity,
        identity_issued,
    })
}

/// A new creds file for cluster `name`, issued by the account signing key
/// and written to `D/clusters/NAME/nats.creds`; with `rotate`, every key
/// issued to it before is revoked (returned).
fn mint_creds(
    dir: &Path,
    info: &FleetInfo,
    name: &str,
    rotate: bool,
    replace: bool,
) -> Result<(String, Vec<String>), TrustError> {
    let signing = user_signer(dir, info)?;
    let prefix = Prefix::new(info.subject_prefix.clone())
        .map_err(|e| damaged(&dir.join(FLEET_JSON), e.to_string()))?;
    let cluster_dir = dir.join(CLUSTERS).join(name);
    let path = cluster_dir.join(CLUSTER_CREDS);
    let permissions = agent_permissions(name, &prefix)?;
    let now = Utc::now();
    // Every earlier key of this cluster: a rotation is for creds that may
    // have leaked, so they must stop working, not merely be replaced.
    let earlier = if rotate {
        issued_keys(dir, name)?
    } else {
        Vec::new()
    };
    let (creds, key) = mint_user(info, &signing, name, Some(&permissions), now)?;
    create_dir(&cluster_dir)?;
    // Recorded before the creds are written: a key that exists anywhere is
    // one `leave` will find.
    record_issued(dir, name, &key)?;
    write_file(&path, creds.as_bytes(), true, rotate || replace)?;
    let revoked = revoke(dir, info, &earlier, now)?;
    Ok((creds, revoked))
}

/// What `leave` did.
#[derive(Debug, Clone)]
pub struct Left {
    /// The fleet.
    pub info: FleetInfo,
    /// The cluster.
    pub name: String,
    /// Every user key the cluster was ever issued (all revoked now).
    pub keys: Vec<String>,
    /// Those revoked by this call (empty: it had left already).
    pub newly_revoked: Vec<String>,
    /// The nats-server include that carries the revocations.
    pub server_conf: PathBuf,
}

/// `fleetbus leave NAME --dir D`: revokes every NATS user key NAME was ever
/// issued (in the fleet account JWT, re-signed by the operator, written into
/// [`SERVER_CONF`]) and removes its stored creds, so that a later `join`
/// issues new ones. Idempotent. nats-server applies it on a config reload.
pub fn leave(dir: &Path, name: &str) -> Result<Left, TrustError> {
    check_cluster_name(name)?;
    let info = load_info(dir)?;
    let keys = issued_keys(dir, name)?;
    if keys.is_empty() {
        return Err(TrustError::NotJoined {
            dir: dir.to_owned(),
            name: name.to_owned(),
        });
    }
    let newly_revoked = revoke(dir, &info, &keys, Utc::now())?;
    let creds = dir.join(CLUSTERS).join(name).join(CLUSTER_CREDS);
    match std::fs::remove_file(&creds) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(TrustError::Io {
                path: creds,
                source: e,
            })
        }
        _ => {}
    }
    Ok(Left {
        info,
        name: name.to_owned(),
        keys,
        newly_revoked,
        server_conf: dir.join(SERVER_CONF),
    })
}

/// Adds `keys` not yet revoked to [`REVOCATIONS`] at `now` and rewrites
/// [`SERVER_CONF`] with them; returns the keys added (none: nothing written).
fn revoke(
    dir: &Path,
    info: &FleetInfo,
    keys: &[String],
    now: DateTime<Utc>,
) -> Result<Vec<String>, TrustError> {
    let path = dir.join(REVOCATIONS);
    let mut revocations = read_revocations(dir)?;
    let added: Vec<String> = keys
        .iter()
        .filter(|k| !revocations.contains_key(*k))
        .cloned()
        .collect();
    if added.is_empty() {
        return Ok(added);
    }
    let operator = operator_key(dir, info)?;
    // A JWT issued in the same second as the revocation is revoked too
    // (nats-server compares `iat <= time`): only keys being revoked are
    // listed, so a cluster's new key is never one of them.
    for k in &added {
        revocations.insert(k.clone(), now.timestamp());
    }
    let json =
        serde_json::to_string_pretty(&revocations).map_err(|e| damaged(&path, e.to_string()))?;
    write_file(&path, (json + "\n").as_bytes(), false, true)?;
    write_server_conf(dir, info, &operator, &revocations, now, true)?;
    Ok(added)
}

/// Every user key issued to `name`: [`ISSUED_KEYS`], and the key of its
/// stored creds (fleets from before the list was kept).
fn issued_keys(dir: &Path, name: &str) -> Result<Vec<String>, TrustError> {
    let cluster_dir = dir.join(CLUSTERS).join(name);
    let list = cluster_dir.join(ISSUED_KEYS);
    let mut keys = read_lines(&list)?;
    let creds = cluster_dir.join(CLUSTER_CREDS);
    if creds.exists() {
        // Unparsable creds name no key (and cannot connect either).
        // Another cluster's creds copied there are not this one's to revoke.
        if let Ok((claims, _)) = jwt::parse_creds(&read(&creds)?) {
            if let (Some(sub), Some(n)) = (claims["sub"].as_str(), claims["name"].as_str()) {
                if n == name {
                    keys.push(sub.to_owned());
                }
            }
        }
    }
    keys.sort();
    keys.dedup();
    if let Some(bad) = keys
        .iter()
        .find(|k| nkeys::KeyPair::from_public_key(k).is_err())
    {
        return Err(damaged(&list, format!("{bad:?} is not a user public key")));
    }
    Ok(keys)
}

/// Appends `key` to `name`'s [`ISSUED_KEYS`] (rewritten whole, atomically).
fn record_issued(dir: &Path, name: &str, key: &str) -> Result<(), TrustError> {
    append_line(&dir.join(CLUSTERS).join(name).join(ISSUED_KEYS), key)
}

/// Stored creds must be this fleet's, for this cluster, and unaltered.
fn check_stored(info: &FleetInfo, name: &str, path: &Path, creds: &str) -> Result<(), TrustError> {
    let bad = |why: String| TrustError::BadCreds {
        path: path.to_owned(),
        name: name.to_owned(),
        why,
    };
    let (claims, _) = jwt::parse_creds(creds).map_err(|e| bad(e.to_string()))?;
    let (account, signing_key) = user_issuer(info);
    if claims["iss"].as_str() != Some(signing_key)
        || claims["nats"]["issuer_account"].as_str() != Some(account)
    {
        return Err(bad("not issued by this fleet's account signing key".into()));
    }
    if claims["name"].as_str() != Some(name) {
        return Err(bad(format!("issued for {}, not {name}", claims["name"])));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
