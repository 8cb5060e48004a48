//! A cluster's signing and sealing keys and its certificate from the fleet
//! root (`clusters/<name>/cluster.key`, `cluster.cert`): minted by `join`,
//! kept, re-issued by `join --rotate`.

use std::path::Path;

use chrono::{Duration, Utc};
use fleetbus_schemas::registry::RevokedRecord;
use fleetbus_schemas::trust::{
    parse_root_key, parse_root_public, verify, ClusterCertificate, ClusterKeys, SignedCertificate,
    SigningKey,
};
use rand::RngCore as _;
use zeroize::Zeroizing;

use super::files::{
    append_line, read, read_lines, write_file, CLUSTER_CERT, CLUSTER_KEY, ISSUED_SERIALS,
    REVOKED_ENTRY, ROOT_KEY, ROOT_PUB,
};
use super::{damaged, TrustError};

/// How long a certificate `join` issues is valid. A year: long enough that
/// no fleet breaks between two routine `--rotate`s, short enough that a
/// forgotten key stops counting on its own.
pub const CERT_VALIDITY_DAYS: i64 = 365;
/// Backdating of `notBefore`, so that a peer whose clock is a little behind
/// the issuer's accepts a certificate issued just now.
pub const CLOCK_SKEW_MINUTES: i64 = 5;

/// A cluster's keys and certificate, as files hold them.
#[derive(Debug, Clone)]
pub struct Identity {
    /// `cluster.key` (secret).
    pub key: Zeroizing<String>,
    /// `cluster.cert`.
    pub cert: String,
    /// The fleet root's public key (`root.pub`, SPKI PEM).
    pub root_pub: String,
}

/// The fleet root key, checked against `root.pub`.
fn load_root(dir: &Path) -> Result<(SigningKey, String), TrustError> {
    let key_path = dir.join(ROOT_KEY);
    let root = parse_root_key(&Zeroizing::new(read(&key_path)?))
        .map_err(|e| damaged(&key_path, e.to_string()))?;
    let pub_path = dir.join(ROOT_PUB);
    let root_pub = read(&pub_path)?;
    let public = parse_root_public(&root_pub).map_err(|e| damaged(&pub_path, e.to_string()))?;
    if public != root.verifying_key() {
        return Err(damaged(&pub_path, "not the public key of root.key"));
    }
    Ok((root, root_pub))
}

/// `name`'s identity under `cluster_dir`: the stored one (checked) unless
/// `rotate` or there is none yet, else new keys and a new certificate.
/// Returns whether it was issued now.
pub fn ensure(
    dir: &Path,
    cluster_dir: &Path,
    name: &str,
    rotate: bool,
) -> Result<(Identity, bool), TrustError> {
    let (root, root_pub) = load_root(dir)?;
    let key_path = cluster_dir.join(CLUSTER_KEY);
    let cert_path = cluster_dir.join(CLUSTER_CERT);
    // A certificate `leave` revoked is replaced as a rotation replaces one.
    let rotate = rotate || revoked(cluster_dir, &cert_path)?;
    if !rotate && (key_path.exists() || cert_path.exists()) {
        let key = Zeroizing::new(read(&key_path)?);
        let cert = read(&cert_path)?;
        check_stored(&root, name, &cert_path, &key, &cert)?;
        return Ok((
            Identity {
                key,
                cert,
                root_pub,
            },
            false,
        ));
    }
    let mut seed = Zeroizing::new([0u8; 32]);
    let mut sealing = Zeroizing::new([0u8; 32]);
    let mut serial = [0u8; 16];
    let mut rng = rand::rng();
    rng.fill_bytes(&mut *seed);
    rng.fill_bytes(&mut *sealing);
    rng.fill_bytes(&mut serial);
    let keys = ClusterKeys::from_random(*seed, *sealing);
    let now = Utc::now();
    let cert = ClusterCertificate {
        cluster: name.to_owned(),
        signing_key: keys.signing_public(),
        sealing_key: keys.sealing_public(),
        not_before: now - Duration::minutes(CLOCK_SKEW_MINUTES),
        not_after: now + Duration::days(CERT_VALIDITY_DAYS),
        serial,
    }
    .sign(&root);
    let key = Zeroizing::new(format!("{}\n", *keys.encode()));
    let serial_hex = cert.cert.serial_hex();
    let cert = format!("{}\n", cert.encode());
    // The serial first: a certificate that exists anywhere is one `leave`
    // revokes. Then the key: a cert without its key is useless, a key
    // without its cert is re-certified by the next `--rotate`.
    super::files::create_dir(cluster_dir)?;
    append_line(&cluster_dir.join(ISSUED_SERIALS), &serial_hex)?;
    write_file(&key_path, key.as_bytes(), true, rotate)?;
    write_file(&cert_path, cert.as_bytes(), false, rotate)?;
    Ok((
        Identity {
            key,
            cert,
            root_pub,
        },
        true,
    ))
}

/// A stored identity must be this fleet's, for `name`, valid now, and the
/// key must be the one certified.
fn check_stored(
    root: &SigningKey,
    name: &str,
    cert_path: &Path,
    key: &str,
    cert: &str,
) -> Result<(), TrustError> {
    let bad = |why: String| TrustError::BadIdentity {
        path: cert_path.to_owned(),
        name: name.to_owned(),
        why,
    };
    let signed = SignedCertificate::decode(cert).map_err(|e| bad(e.to_string()))?;
    verify(&signed, &root.verifying_key(), name, Utc::now()).map_err(|e| bad(e.to_string()))?;
    let keys = ClusterKeys::decode(key).map_err(|e| bad(format!("cluster.key: {e}")))?;
    if !keys.matches(&signed.cert) {
        return Err(bad(
            "cluster.key is not the key the certificate names".into()
        ));
    }
    Ok(())
}

/// What signs a registry record in a cluster's name when the operator
/// writes it (`leave` marking it Left): its signing key, the key id its
/// peers verify with (the certificate's serial) and the certificate the
/// record carries. Without it, a secure agent drops the record as unsigned.
pub struct RecordSigner {
    /// The cluster's signing key.
    pub key: SigningKey,
    /// The certificate's serial, hex.
    pub key_id: String,
    /// The certificate, base64, as records carry it.
    pub certificate: String,
}

/// The signer of `name`'s records, from the keys `join` keeps under
/// `dir/clusters/NAME/`; None when there are none (a fleet made before
/// cluster keys: its agents verify nothing either).
pub fn record_signer(dir: &Path, name: &str) -> Result<Option<RecordSigner>, TrustError> {
    let cluster_dir = dir.join(super::files::CLUSTERS).join(name);
    let (key_path, cert_path) = (
        cluster_dir.join(CLUSTER_KEY),
        cluster_dir.join(CLUSTER_CERT),
    );
    if !key_path.exists() || !cert_path.exists() {
        return Ok(None);
    }
    let keys = ClusterKeys::decode(&Zeroizing::new(read(&key_path)?))
        .map_err(|e| damaged(&key_path, e.to_string()))?;
    let text = read(&cert_path)?;
    let cert =
        SignedCertificate::decode(text.trim()).map_err(|e| damaged(&cert_path, e.to_string()))?;
    Ok(Some(RecordSigner {
        key: keys.signing().clone(),
        key_id: cert.cert.serial_hex(),
        certificate: text.trim().to_owned(),
    }))
}

/// Whether the stored certificate at `cert_path` is one `leave` revoked
/// (listed in `cluster_dir`'s [`REVOKED_ENTRY`]).
fn revoked(cluster_dir: &Path, cert_path: &Path) -> Result<bool, TrustError> {
    let entry = cluster_dir.join(REVOKED_ENTRY);
    if !entry.exists() || !cert_path.exists() {
        return Ok(false);
    }
    let record = RevokedRecord::decode(read(&entry)?.as_bytes())
        .map_err(|e| damaged(&entry, e.to_string()))?;
    let cert = SignedCertificate::decode(&read(cert_path)?)
        .map_err(|e| damaged(cert_path, e.to_string()))?;
    Ok(record.serials.contains(&cert.cert.serial_hex()))
}

/// `fleetbus leave NAME`'s entry for the bus: every certificate serial
/// `name` was ever issued (its current one included), signed by the fleet
/// root (PROTOCOL §5.5), and kept as [`REVOKED_ENTRY`] so that a later
/// `join` issues a new certificate. None when `name` has no certificate (a
/// fleet made before cluster keys).
pub fn revocation(dir: &Path, name: &str) -> Result<Option<Vec<u8>>, TrustError> {
    let cluster_dir = dir.join(super::files::CLUSTERS).join(name);
    let mut serials = read_lines(&cluster_dir.join(ISSUED_SERIALS))?;
    let cert_path = cluster_dir.join(CLUSTER_CERT);
    if cert_path.exists() {
        let cert = SignedCertificate::decode(&read(&cert_path)?)
            .map_err(|e| damaged(&cert_path, e.to_string()))?;
        serials.push(cert.cert.serial_hex());
    }
    serials.sort();
    serials.dedup();
    if serials.is_empty() {
        return Ok(None);
    }
    let (root, _) = load_root(dir)?;
    let record = RevokedRecord {
        name: name.to_owned(),
        serials,
        revoked_at: Utc::now(),
    };
    let entry = cluster_dir.join(REVOKED_ENTRY);
    record
        .validate()
        .map_err(|e| damaged(&entry, e.to_string()))?;
    let bytes = record
        .encode_signed(&root)
        .map_err(|e| damaged(&entry, e.to_string()))?;
    write_file(&entry, &bytes, false, true)?;
    Ok(Some(bytes))
}
