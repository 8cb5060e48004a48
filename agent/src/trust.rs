//! This cluster's place in the fleet's root of trust (the secure mode): the fleet
//! root's public key, this cluster's signing and sealing keys, and its
//! certificate, loaded once at start-up from `--fleet-root`,
//! `--cluster-key` and `--cluster-cert`.
//!
//! With all three the agent runs in the secure mode: it signs what it
//! publishes and (as later slices land) trusts only what chains to the root.
//! With none it runs in the insecure mode of earlier versions: nothing is
//! signed or verified (README, SECURITY.md). Any other combination, or files
//! that do not verify, stop start-up with exit 2: an agent that believes it
//! is secure and is not would be worse than one that says it is not.

use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::trust::{
    parse_root_public, verify, CertError, ClusterKeys, KeyError, RecordRefusal, SignedCertificate,
    SigningKey, VerifyingKey,
};
use zeroize::Zeroizing;

/// Why the trust files were refused.
#[derive(Debug, thiserror::Error)]
pub enum TrustLoadError {
    /// Some but not all of the three flags.
    #[error(
        "{given} needs {missing}: the secure mode takes --fleet-root, --cluster-key and \
         --cluster-cert together (none of them: the insecure mode)"
    )]
    Incomplete {
        /// A flag that was given.
        given: &'static str,
        /// A flag that is missing.
        missing: &'static str,
    },
    /// A file cannot be read.
    #[error("{flag} {}: cannot read the file", path.display())]
    Unreadable {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A key file does not parse.
    #[error("{flag} {}: {source}", path.display())]
    Key {
        /// The flag naming the file.
        flag: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong (never key material).
        #[source]
        source: KeyError,
    },
    /// The certificate does not parse, is not the root's, names another
    /// cluster, or is outside its validity.
    #[error("--cluster-cert {}: {source}", path.display())]
    Cert {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: CertError,
    },
    /// The certificate certifies other keys than `--cluster-key` holds.
    #[error(
        "--cluster-key {} is not the key --cluster-cert certifies (issued by different \
         `fleetbus join` runs? run it again and use both files it writes)",
        .0.display()
    )]
    KeyMismatch(PathBuf),
}

/// This cluster's keys and certificate, verified against the fleet root.
#[derive(Debug)]
pub struct Identity {
    root: VerifyingKey,
    keys: ClusterKeys,
    cert: SignedCertificate,
    cert_text: String,
}

impl Identity {
    /// The fleet root's public key: every certificate must verify against it.
    pub fn root(&self) -> &VerifyingKey {
        &self.root
    }

    /// This cluster's signing key.
    pub fn signing_key(&self) -> &SigningKey {
        self.keys.signing()
    }

    /// This cluster's X25519 secret key (sealed Secrets are opened with it).
    pub fn sealing_secret(&self) -> &[u8; 32] {
        self.keys.sealing_secret()
    }

    /// This cluster's certificate.
    pub fn certificate(&self) -> &SignedCertificate {
        &self.cert
    }

    /// The `keyId` of this cluster's signatures: its certificate's serial in hex.
    pub fn key_id(&self) -> String {
        self.cert.cert.serial_hex()
    }

    /// This cluster as a [`Signer`] (known before its own record is read back).
    pub fn signer(&self) -> Signer {
        Signer {
            key: self.keys.signing().verifying_key(),
            serial: self.key_id(),
            not_after: self.cert.cert.not_after,
        }
    }

    /// The certificate as the ClusterRecord carries it (base64).
    pub fn certificate_text(&self) -> &str {
        &self.cert_text
    }

    /// Reads and checks the three files for cluster `cluster` at `now`.
    pub fn load(
        cluster: &str,
        root: &Path,
        key: &Path,
        cert: &Path,
        now: DateTime<Utc>,
    ) -> Result<Identity, TrustLoadError> {
        let read = |flag: &'static str, path: &Path| {
            std::fs::read_to_string(path)
                .map(Zeroizing::new)
                .map_err(|source| TrustLoadError::Unreadable {
                    flag,
                    path: path.to_owned(),
                    source,
                })
        };
        fn key_error(flag: &'static str, path: &Path) -> impl FnOnce(KeyError) -> TrustLoadError {
            let path = path.to_owned();
            move |source| TrustLoadError::Key { flag, path, source }
        }
        let root_key = parse_root_public(&read("--fleet-root", root)?)
            .map_err(key_error("--fleet-root", root))?;
        let keys = ClusterKeys::decode(&read("--cluster-key", key)?)
            .map_err(key_error("--cluster-key", key))?;
        let cert_error = |source| TrustLoadError::Cert {
            path: cert.to_owned(),
            source,
        };
        let cert_text = read("--cluster-cert", cert)?.trim().to_owned();
        let signed = SignedCertificate::decode(&cert_text).map_err(cert_error)?;
        verify(&signed, &root_key, cluster, now).map_err(cert_error)?;
        if !keys.matches(&signed.cert) {
            return Err(TrustLoadError::KeyMismatch(key.to_owned()));
        }
        Ok(Identity {
            root: root_key,
            keys,
            cert: signed,
            cert_text,
        })
    }

    /// The identity the flags name: `None` when none is given (the insecure
    /// mode), an error when only some are.
    pub fn from_flags(
        cluster: &str,
        root: Option<&Path>,
        key: Option<&Path>,
        cert: Option<&Path>,
        now: DateTime<Utc>,
    ) -> Result<Option<Identity>, TrustLoadError> {
        const FLAGS: [&str; 3] = ["--fleet-root", "--cluster-key", "--cluster-cert"];
        let given = [root, key, cert];
        match given {
            [Some(root), Some(key), Some(cert)] => {
                Identity::load(cluster, root, key, cert, now).map(Some)
            }
            [None, None, None] => Ok(None),
            _ => {
                let flag = |want: bool| {
                    given
                        .iter()
                        .zip(FLAGS)
                        .find(|(g, _)| g.is_some() == want)
                        .map_or("", |(_, f)| f)
                };
                Err(TrustLoadError::Incomplete {
                    given: flag(true),
                    missing: flag(false),
                })
            }
        }
    }
}

/// The `reason` labels of `fleetbus_rejected_messages_total`.
pub mod reason {
    /// A message without a signature (or a record without a certificate).
    pub const UNSIGNED: &str = "unsigned";
    /// A signature or certificate that does not verify, or does not parse.
    pub const BAD_SIGNATURE: &str = "bad_signature";
    /// Signed under a key id no known certificate has.
    pub const UNKNOWN_SIGNER: &str = "unknown_signer";
    /// Signed by another cluster than the one the subject names (or a
    /// record whose certificate names another cluster).
    pub const SIGNER_MISMATCH: &str = "signer_mismatch";
    /// The signer's certificate has expired (or is not valid yet).
    pub const EXPIRED_CERTIFICATE: &str = "expired_certificate";
    /// An older version of an object than the one already received.
    pub const REPLAY: &str = "replay";
    /// A `contentHash` that is not the hash of the object.
    pub const CONTENT_HASH: &str = "content_hash";
    /// Signed by a certificate the fleet root revoked (PROTOCOL §5.5).
    pub const REVOKED: &str = "revoked";
}

/// The metric reason of a certificate that was refused.
pub fn cert_reason(e: &CertError) -> &'static str {
    match e {
        CertError::Malformed(_) | CertError::BadSignature => reason::BAD_SIGNATURE,
        CertError::WrongCluster { .. } => reason::SIGNER_MISMATCH,
        CertError::Expired { .. } | CertError::NotYetValid { .. } => reason::EXPIRED_CERTIFICATE,
    }
}

/// The metric reason of a record that was refused.
pub fn record_reason(e: &RecordRefusal) -> &'static str {
    match e {
        RecordRefusal::Unsigned => reason::UNSIGNED,
        RecordRefusal::Certificate(c) => cert_reason(c),
        RecordRefusal::Revoked => reason::REVOKED,
        RecordRefusal::BadSignature => reason::BAD_SIGNATURE,
        RecordRefusal::SignerMismatch => reason::SIGNER_MISMATCH,
    }
}

/// One cluster's certified signing key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signer {
    /// The ed25519 public key.
    pub key: VerifyingKey,
    /// The certificate's serial in hex: the `keyId` of its signatures.
    pub serial: String,
    /// When the certificate expires.
    pub not_after: DateTime<Utc>,
}

/// The certified signing keys of the fleet's clusters, as their registry
/// records announced them (each certificate checked against the root).
/// Written by the registry watcher, read by whoever verifies messages;
/// [`Signers::subscribe`] tells readers that a key became known or changed
/// (a message dropped as from an unknown signer may verify now).
#[derive(Debug)]
pub struct Signers {
    by_cluster: std::sync::RwLock<std::collections::HashMap<String, Signer>>,
    /// Serials the fleet root revoked (`revoked.<name>` entries that
    /// verified): never taken back while the agent runs, whatever the bucket
    /// says later (only the root could, and it never signs an un-revocation).
    revoked: std::sync::RwLock<std::collections::HashSet<String>>,
    /// This cluster's own serial: never refused as revoked here. A revoked
    /// agent that still runs (a broker that did not revoke its user) would
    /// otherwise refuse its own subtree and republish it for ever; its peers
    /// refuse it, which is what revocation is for.
    own_serial: Option<String>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Signers {
    fn default() -> Self {
        Signers {
            by_cluster: std::sync::RwLock::default(),
            revoked: std::sync::RwLock::default(),
            own_serial: None,
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl Signers {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, std::collections::HashMap<String, Signer>> {
        // A panic while holding the lock leaves a map that is still usable.
        self.by_cluster
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn is_revoked(&self, serial: &str) -> bool {
        if self.own_serial.as_deref() == Some(serial) {
            return false;
        }
        self.revoked
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(serial)
    }

    /// Revokes the certificates of `serials` (a root-signed revocation entry
    /// the caller verified): every message or record signed under one of
    /// them is refused from now on ([`reason::REVOKED`]). Returns whether
    /// any was new.
    pub fn revoke<'a>(&self, serials: impl IntoIterator<Item = &'a str>) -> bool {
        let mut revoked = self
            .revoked
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut new = false;
        for s in serials {
            if self.own_serial.as_deref() == Some(s) && !revoked.contains(s) {
                tracing::error!(
                    serial = s,
                    "the fleet root revoked this cluster's certificate: every peer refuses what \
                     it publishes (`fleetbus join` issues a new one)"
                );
            }
            new |= revoked.insert(s.to_owned());
        }
        new
    }

    /// A record's certificate (`cert`), checked against `root` for
    /// `cluster` at `now` and not revoked; the error is the metric reason.
    fn certified(
        &self,
        root: &VerifyingKey,
        cluster: &str,
        cert: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<SignedCertificate, &'static str> {
        let text = cert.ok_or(reason::UNSIGNED)?;
        let signed = SignedCertificate::decode(text).map_err(|e| cert_reason(&e))?;
        verify(&signed, root, cluster, now).map_err(|e| cert_reason(&e))?;
        if self.is_revoked(&signed.cert.serial_hex()) {
            return Err(reason::REVOKED);
        }
        Ok(signed)
    }

    /// Checks `cert` (a record's `certificate`) against `root` for `cluster`
    /// at `now`, and makes its key `cluster`'s signer. The error is the
    /// metric reason; the known signer is then left as it was.
    pub fn learn(
        &self,
        root: &VerifyingKey,
        cluster: &str,
        cert: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<(), &'static str> {
        let signed = self.certified(root, cluster, cert, now)?;
        self.learn_certified(cluster, &signed)
    }

    /// Makes the key of `signed` (a certificate already checked for
    /// `cluster`: [`Self::verify_record`]'s) `cluster`'s signer.
    pub fn learn_certified(
        &self,
        cluster: &str,
        signed: &SignedCertificate,
    ) -> Result<(), &'static str> {
        let signer = Signer {
            key: signed.verifying_key().map_err(|e| cert_reason(&e))?,
            serial: signed.cert.serial_hex(),
            not_after: signed.cert.not_after,
        };
        let mut map = self
            .by_cluster
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if map.get(cluster) != Some(&signer) {
            map.insert(cluster.to_owned(), signer);
            drop(map);
            self.changed.send_modify(|g| *g += 1);
        }
        Ok(())
    }

    /// [`Self::learn`] from a cluster record as received (`raw`, JSON):
    /// the record must also be signed by the key its certificate names, and
    /// nothing is learnt otherwise.
    pub fn learn_record(
        &self,
        root: &VerifyingKey,
        cluster: &str,
        cert: Option<&str>,
        raw: &[u8],
        now: DateTime<Utc>,
    ) -> Result<(), &'static str> {
        let signed = self.verify_record(root, cluster, cert, raw, now)?;
        self.learn_certified(cluster, &signed)
    }

    /// The checks of [`Self::learn_record`] without learning: whether the
    /// record as received (`raw`) is signed by the certified, unrevoked key
    /// its certificate names (that certificate, checked). The caller decides freshness before learning
    /// (a replayed record must not bring back a rotated-out key).
    pub fn verify_record(
        &self,
        root: &VerifyingKey,
        cluster: &str,
        cert: Option<&str>,
        raw: &[u8],
        now: DateTime<Utc>,
    ) -> Result<SignedCertificate, &'static str> {
        let revoked = |serial: &str| self.is_revoked(serial);
        fleetbus_schemas::trust::verify_record(root, cluster, cert, raw, now, revoked)
            .map_err(|e| record_reason(&e))
    }

    /// Signers knowing this cluster's own key (`None`: the insecure mode).
    pub fn new(own: Option<&Identity>) -> Signers {
        let signers = Signers {
            own_serial: own.map(Identity::key_id),
            ..Signers::default()
        };
        if let Some(id) = own {
            signers
                .by_cluster
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert(id.certificate().cert.cluster.clone(), id.signer());
        }
        signers
    }

    /// `cluster`'s signer, if its certificate is known.
    pub fn get(&self, cluster: &str) -> Option<Signer> {
        self.read().get(cluster).cloned()
    }

    /// Changes whenever a signer is learnt or replaced.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// The signer of a message claimed by `cluster` under `key_id`, valid at
    /// `now`: the reason when there is none.
    pub fn signer_of(
        &self,
        cluster: &str,
        key_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Signer, &'static str> {
        // First: a revoked key is refused as such, even where its cluster's
        // current certificate is another (a re-join after a leave).
        if self.is_revoked(key_id) {
            return Err(reason::REVOKED);
        }
        let map = self.read();
        let signer = map.get(cluster).filter(|s| s.serial == key_id);
        let Some(signer) = signer else {
            // Another cluster's key on this cluster's subject is a member
            // speaking for another; a key id nobody has may be a rotation
            // whose record has not arrived yet.
            return Err(if map.values().any(|s| s.serial == key_id) {
                reason::SIGNER_MISMATCH
            } else {
                reason::UNKNOWN_SIGNER
            });
        };
        if now > signer.not_after {
            return Err(reason::EXPIRED_CERTIFICATE);
        }
        Ok(signer.clone())
    }

    /// Checks an object envelope received under `key`'s subject: signed by
    /// the certified key of the cluster the subject names. The error is the
    /// metric reason.
    pub fn check_envelope(
        &self,
        key: &ObjectKey,
        env: &Envelope,
        now: DateTime<Utc>,
    ) -> Result<(), &'static str> {
        let sig = env.signature.as_ref().ok_or(reason::UNSIGNED)?;
        let signer = self.signer_of(&key.origin, &sig.key_id, now)?;
        env.verify_signature(key, &signer.key)
            .map_err(|_| reason::BAD_SIGNATURE)
    }
}

/// `json` (a JSON message this agent publishes: a status report, a reply)
/// with this cluster's `signature` member in the secure mode (PROTOCOL
/// §5.1's form), as it is otherwise. The error says why it could not be
/// signed (never for the objects our own encoders make).
pub fn sign_json_as(trust: Option<&Identity>, json: Vec<u8>) -> Result<Vec<u8>, String> {
    match trust {
        Some(id) => fleetbus_schemas::trust::sign_json(&json, id.signing_key(), &id.key_id()),
        None => Ok(json),
    }
}

/// [`sign_json_as`] for what is published whatever happens (events, rule
/// status, replies): unsigned, with a warning, when signing fails (never for
/// our own encodings), rather than not at all.
pub fn sign_or_keep(trust: Option<&Identity>, json: Vec<u8>) -> Vec<u8> {
    if trust.is_none() {
        return json;
    }
    match sign_json_as(trust, json.clone()) {
        Ok(signed) => signed,
        Err(error) => {
            tracing::warn!(%error, "could not sign a message; publishing it unsigned");
            json
        }
    }
}

impl Signers {
    /// Checks a JSON message claimed by `cluster` (its subject or key names
    /// it), as received (`raw`): its `signature` member is by the certified,
    /// unrevoked key of that cluster. The error is the metric reason.
    pub fn check_json(
        &self,
        cluster: &str,
        raw: &[u8],
        now: DateTime<Utc>,
    ) -> Result<(), &'static str> {
        use fleetbus_schemas::envelope::SignatureError;
        let value: serde_json::Value =
            serde_json::from_slice(raw).map_err(|_| reason::BAD_SIGNATURE)?;
        let sig = fleetbus_schemas::trust::json_signature(&value).map_err(|e| match e {
            SignatureError::Unsigned => reason::UNSIGNED,
            SignatureError::BadSignature => reason::BAD_SIGNATURE,
        })?;
        let signer = self.signer_of(cluster, &sig.key_id, now)?;
        fleetbus_schemas::trust::verify_json(&value, &signer.key)
            .map(|_| ())
            .map_err(|_| reason::BAD_SIGNATURE)
    }
}

/// Whether `new`, received for an object whose last envelope was `old`, is
/// an older version replayed over it (PROTOCOL §4.9, freshness): the same
/// uid with a lower resourceVersion (numeric, as kube-apiserver's are), or
/// the same version published earlier with other content. Versions that
/// are not numbers are ordered by the origin's publish time. A new uid is
/// a new object: never a replay.
pub fn is_replay(old: &Envelope, new: &Envelope) -> bool {
    if old.uid != new.uid {
        return false;
    }
    let older = new.time < old.time;
    match (
        old.resource_version.parse::<u64>(),
        new.resource_version.parse::<u64>(),
    ) {
        (Ok(o), Ok(n)) if n != o => n < o,
        (Ok(_), Ok(_)) => {
            older && (new.content_hash != old.content_hash || new.tombstone != old.tombstone)
        }
        _ => older,
    }
}

/// One "dropped a message" line per cluster and reason every 10 s.
static DROPPED: crate::log_gate::LogGate =
    crate::log_gate::LogGate::new(std::time::Duration::from_secs(10));

/// How often at most one Event is raised per cluster and reason: a forger
/// sending thousands of messages costs the API server one write a minute.
pub const EVENT_INTERVAL: std::time::Duration = std::time::Duration::from_secs(60);

/// When the last Event of a cluster and reason was raised, and how many
/// messages were dropped since.
type LastEvent = (std::time::Instant, i32);

/// Counts rejected messages and raises them as Kubernetes Events on the
/// Cluster object of the cluster they claim to come from, at most one per
/// [`EVENT_INTERVAL`] per cluster and reason (carrying how many were
/// dropped since the last one; the metric counts each).
#[derive(Debug, Default)]
pub struct Rejections {
    last: std::sync::Mutex<std::collections::HashMap<(String, &'static str), LastEvent>>,
}

impl Rejections {
    /// One message claimed by `cluster` dropped for `reason`; `what` says
    /// which (a subject or a key), for the log and the Event.
    pub fn reject(
        &self,
        metrics: &crate::metrics::Metrics,
        recorder: &crate::kube::events::Recorder,
        cluster: &str,
        reason: &'static str,
        what: &str,
    ) {
        metrics.rejected_message(reason);
        // Counted each; logged once per cluster and reason a while.
        if let Some(held_back) = DROPPED.admit(&format!("{cluster}/{reason}")) {
            tracing::warn!(
                cluster,
                reason,
                what,
                held_back,
                "dropped a message that failed the trust checks (more from this cluster for this reason are counted, logged every 10 s)"
            );
        }
        let now = std::time::Instant::now();
        let count = {
            let mut last = self
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let entry = last
                .entry((cluster.to_owned(), reason))
                .or_insert((now - EVENT_INTERVAL, 0));
            entry.1 = entry.1.saturating_add(1);
            if now.duration_since(entry.0) < EVENT_INTERVAL {
                return;
            }
            entry.0 = now;
            std::mem::take(&mut entry.1)
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let object = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(fleetbus_schemas::well_known::API_VERSION.to_owned()),
            kind: Some("Cluster".to_owned()),
            name: Some(cluster.to_owned()),
            ..Default::default()
        };
        // The same message each time, so the Event's count is raised
        // rather than a new Event created (what differs is in the log).
        let message = format!(
            "dropped messages claimed by {cluster} that failed the trust checks: {reason} \
             (fleetbus_rejected_messages_total; the agent's log names each)"
        );
        let recorder = recorder.clone();
        runtime.spawn(async move {
            recorder
                .publish_counted(
                    &object,
                    crate::kube::events::EventType::Warning,
                    "RejectedMessage",
                    &message,
                    count,
                )
                .await;
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use chrono::Duration;
    use fleetbus_schemas::trust::ClusterCertificate;

    use super::*;

    struct Files {
        dir: tempfile::TempDir,
    }

    impl Files {
        fn path(&self, f: &str) -> std::path::PathBuf {
            self.dir.path().join(f)
        }
        fn write(&self, f: &str, text: &str) {
            std::fs::write(self.path(f), text).unwrap();
        }
        fn load(&self, cluster: &str, now: DateTime<Utc>) -> Result<Identity, TrustLoadError> {
            Identity::load(
                cluster,
                &self.path("root.pub"),
                &self.path("cluster.key"),
                &self.path("cluster.cert"),
                now,
            )
        }
    }

    fn root() -> SigningKey {
        SigningKey::from_bytes(&[7u8; 32])
    }

    /// The root's public key as `fleet init` writes it (SPKI PEM).
    fn root_pem(k: &SigningKey) -> String {
        let vk = k.verifying_key();
        // SPKI for ed25519 (RFC 8410): a fixed 12-byte prefix, then the key.
        let mut der = vec![
            0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
        ];
        der.extend_from_slice(vk.as_bytes());
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, der);
        format!("-----BEGIN PUBLIC KEY-----\n{b64}\n-----END PUBLIC KEY-----\n")
    }

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    /// A fleet with cluster `name`'s files, certified by `root`.
    fn files(name: &str, root: &SigningKey, seed: u8) -> Files {
        let dir = tempfile::tempdir().unwrap();
        let f = Files { dir };
        let keys = ClusterKeys::from_random([seed; 32], [seed.wrapping_add(1); 32]);
        let cert = ClusterCertificate {
            cluster: name.to_owned(),
            signing_key: keys.signing_public(),
            sealing_key: keys.sealing_public(),
            not_before: now() - Duration::minutes(5),
            not_after: now() + Duration::days(365),
            serial: [seed; 16],
        }
        .sign(root);
        f.write("root.pub", &root_pem(&self::root()));
        f.write("cluster.key", &format!("{}\n", *keys.encode()));
        f.write("cluster.cert", &format!("{}\n", cert.encode()));
        f
    }

    #[test]
    fn a_certified_cluster_loads() {
        let f = files("c1", &root(), 1);
        let id = f.load("c1", now()).unwrap();
        assert_eq!(id.certificate().cert.cluster, "c1");
        assert_eq!(id.root(), &root().verifying_key());
        assert_eq!(
            id.certificate_text(),
            std::fs::read_to_string(f.path("cluster.cert"))
                .unwrap()
                .trim()
        );
        let keys = ClusterKeys::from_random([1; 32], [2; 32]);
        assert_eq!(id.sealing_secret(), keys.sealing_secret());
        assert_eq!(
            id.signing_key().verifying_key().to_bytes(),
            keys.signing_public()
        );
    }

    #[test]
    fn a_certificate_of_another_cluster_root_or_time_is_refused() {
        let f = files("c2", &root(), 1);
        let err = f.load("c1", now()).unwrap_err();
        assert!(
            matches!(
                err,
                TrustLoadError::Cert {
                    source: CertError::WrongCluster { .. },
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("names cluster \"c2\""), "{err}");
        let f = files("c1", &SigningKey::from_bytes(&[9u8; 32]), 1);
        let err = f.load("c1", now()).unwrap_err();
        assert!(
            err.to_string().contains("not signed by the fleet root"),
            "{err}"
        );
        let f = files("c1", &root(), 1);
        let err = f.load("c1", now() + Duration::days(366)).unwrap_err();
        assert!(err.to_string().contains("expired"), "{err}");
        let err = f.load("c1", now() - Duration::hours(1)).unwrap_err();
        assert!(err.to_string().contains("not valid before"), "{err}");
    }

    #[test]
    fn a_key_the_certificate_does_not_name_is_refused() {
        let f = files("c1", &root(), 1);
        let other = files("c1", &root(), 5);
        std::fs::copy(other.path("cluster.key"), f.path("cluster.key")).unwrap();
        let err = f.load("c1", now()).unwrap_err();
        assert!(matches!(err, TrustLoadError::KeyMismatch(_)), "{err}");
    }

    #[test]
    fn garbage_files_are_refused_with_the_flag_never_a_panic() {
        let f = files("c1", &root(), 1);
        let cert = std::fs::read_to_string(f.path("cluster.cert")).unwrap();
        let key = std::fs::read_to_string(f.path("cluster.key")).unwrap();
        let cases: [(&str, String, &str); 7] = [
            (
                "cluster.cert",
                cert[..cert.len() / 2].to_owned(),
                "--cluster-cert",
            ),
            ("cluster.cert", "%%%".into(), "--cluster-cert"),
            ("cluster.cert", key.clone(), "--cluster-cert"),
            ("cluster.key", cert.clone(), "--cluster-key"),
            ("cluster.key", String::new(), "--cluster-key"),
            (
                "root.pub",
                "-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----\n".into(),
                "--fleet-root",
            ),
            ("root.pub", cert.clone(), "--fleet-root"),
        ];
        for (file, text, flag) in cases {
            let g = files("c1", &root(), 1);
            g.write(file, &text);
            let err = g.load("c1", now()).unwrap_err().to_string();
            assert!(err.starts_with(flag), "{file} {text:?}: {err}");
            assert!(!err.contains(key.trim()), "{err}");
        }
        std::fs::remove_file(f.path("cluster.key")).unwrap();
        let err = f.load("c1", now()).unwrap_err();
        assert!(
            matches!(
                err,
                TrustLoadError::Unreadable {
                    flag: "--cluster-key",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn all_three_flags_or_none() {
        let f = files("c1", &root(), 1);
        let (r, k, c) = (
            f.path("root.pub"),
            f.path("cluster.key"),
            f.path("cluster.cert"),
        );
        let load = |r: Option<&Path>, k: Option<&Path>, c: Option<&Path>| {
            Identity::from_flags("c1", r, k, c, now())
        };
        assert!(load(None, None, None).unwrap().is_none());
        assert!(load(Some(&r), Some(&k), Some(&c)).unwrap().is_some());
        for (args, given, missing) in [
            ((Some(&*r), None, None), "--fleet-root", "--cluster-key"),
            (
                (None, Some(&*k), Some(&*c)),
                "--cluster-key",
                "--fleet-root",
            ),
            (
                (Some(&*r), Some(&*k), None),
                "--fleet-root",
                "--cluster-cert",
            ),
        ] {
            let err = load(args.0, args.1, args.2).unwrap_err();
            assert!(
                matches!(err, TrustLoadError::Incomplete { given: g, missing: m } if g == given && m == missing),
                "{err}"
            );
        }
    }

    fn env_at(uid: &str, rv: &str, ms: i64, hash: &str) -> Envelope {
        let mut e = Envelope::tombstone(
            "c2",
            None,
            uid,
            rv,
            DateTime::from_timestamp_millis(ms).unwrap(),
            fleetbus_schemas::envelope::TombstoneReason::Deleted,
        );
        e.tombstone = false;
        e.tombstone_reason = None;
        e.content_hash = hash.into();
        e
    }

    #[test]
    fn an_older_version_of_the_same_object_is_a_replay() {
        let now = env_at("u", "10", 2_000, "h10");
        // Lower resourceVersion, whatever its time (a forger sets the time).
        assert!(is_replay(&now, &env_at("u", "9", 9_000, "h9")));
        // Same version, earlier, other content.
        assert!(is_replay(&now, &env_at("u", "10", 1_000, "hX")));
        // Not replays: newer versions, the same version again (a republish),
        // a new object under the same name, an origin whose clock went back.
        assert!(!is_replay(&now, &env_at("u", "11", 1_000, "h11")));
        assert!(!is_replay(&now, &env_at("u", "10", 3_000, "h10")));
        assert!(!is_replay(&now, &env_at("u", "10", 1_000, "h10")));
        assert!(!is_replay(&now, &env_at("v", "1", 1_000, "h1")));
        // Versions that are not numbers: by time.
        let odd = env_at("u", "b", 2_000, "h");
        assert!(is_replay(&odd, &env_at("u", "a", 1_000, "h")));
        assert!(!is_replay(&odd, &env_at("u", "a", 3_000, "h")));
    }

    fn signed_env(key: &ObjectKey, signer: &SigningKey, key_id: &str) -> Envelope {
        let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "ns", "name": "cm", "uid": "u1", "resourceVersion": "7"}});
        let mut e = Envelope::snapshot("c2", None, obj, now()).unwrap();
        e.sign(key, signer, key_id);
        e
    }

    #[test]
    fn envelopes_are_checked_against_the_origins_certificate() {
        let root_key = root();
        let signers = Signers::default();
        let c2 = ClusterKeys::from_random([2; 32], [3; 32]);
        let cert = ClusterCertificate {
            cluster: "c2".into(),
            signing_key: c2.signing_public(),
            sealing_key: c2.sealing_public(),
            not_before: now() - Duration::minutes(5),
            not_after: now() + Duration::days(1),
            serial: [2; 16],
        }
        .sign(&root_key);
        let serial = cert.cert.serial_hex();
        let key = ObjectKey::from_api_version("c2", "v1", "ConfigMap", Some("ns"), "cm");
        let good = signed_env(&key, c2.signing(), &serial);
        let rv = root_key.verifying_key();
        // Unknown until c2's record taught its key.
        assert_eq!(
            signers.check_envelope(&key, &good, now()),
            Err(reason::UNKNOWN_SIGNER)
        );
        let mut changed = signers.subscribe();
        signers
            .learn(&rv, "c2", Some(&cert.encode()), now())
            .unwrap();
        assert!(changed.has_changed().unwrap());
        changed.mark_unchanged();
        // Learning the same again is no change.
        signers
            .learn(&rv, "c2", Some(&cert.encode()), now())
            .unwrap();
        assert!(!changed.has_changed().unwrap());
        assert_eq!(signers.check_envelope(&key, &good, now()), Ok(()));
        // Unsigned; signed by an uncertified key under c2's key id.
        let mut unsigned = good.clone();
        unsigned.signature = None;
        assert_eq!(
            signers.check_envelope(&key, &unsigned, now()),
            Err(reason::UNSIGNED)
        );
        let forged = signed_env(&key, &SigningKey::from_bytes(&[9; 32]), &serial);
        assert_eq!(
            signers.check_envelope(&key, &forged, now()),
            Err(reason::BAD_SIGNATURE)
        );
        // c1's certified key speaking on c2's subject.
        let c1 = ClusterKeys::from_random([5; 32], [6; 32]);
        let c1_cert = ClusterCertificate {
            cluster: "c1".into(),
            signing_key: c1.signing_public(),
            sealing_key: c1.sealing_public(),
            not_before: now() - Duration::minutes(5),
            not_after: now() + Duration::days(1),
            serial: [1; 16],
        }
        .sign(&root_key);
        signers
            .learn(&rv, "c1", Some(&c1_cert.encode()), now())
            .unwrap();
        let by_c1 = signed_env(&key, c1.signing(), &c1_cert.cert.serial_hex());
        assert_eq!(
            signers.check_envelope(&key, &by_c1, now()),
            Err(reason::SIGNER_MISMATCH)
        );
        // After the certificate's end.
        assert_eq!(
            signers.check_envelope(&key, &good, now() + Duration::days(2)),
            Err(reason::EXPIRED_CERTIFICATE)
        );
        // Garbage signature values.
        for value in ["", "%%", "AAAA"] {
            let mut e = good.clone();
            e.signature.as_mut().unwrap().value = value.into();
            assert_eq!(
                signers.check_envelope(&key, &e, now()),
                Err(reason::BAD_SIGNATURE)
            );
        }
    }

    #[test]
    fn a_revoked_certificate_signs_nothing_any_more() {
        let root_key = root();
        let rv = root_key.verifying_key();
        let signers = Signers::default();
        let c2 = ClusterKeys::from_random([2; 32], [3; 32]);
        let cert = |serial: u8| {
            ClusterCertificate {
                cluster: "c2".into(),
                signing_key: c2.signing_public(),
                sealing_key: c2.sealing_public(),
                not_before: now() - Duration::minutes(5),
                not_after: now() + Duration::days(1),
                serial: [serial; 16],
            }
            .sign(&root_key)
        };
        let old = cert(2);
        let serial = old.cert.serial_hex();
        signers
            .learn(&rv, "c2", Some(&old.encode()), now())
            .unwrap();
        let key = ObjectKey::from_api_version("c2", "v1", "ConfigMap", Some("ns"), "cm");
        let env = signed_env(&key, c2.signing(), &serial);
        assert_eq!(signers.check_envelope(&key, &env, now()), Ok(()));
        assert!(signers.revoke([serial.as_str()]));
        assert!(!signers.revoke([serial.as_str()]), "already revoked");
        // Messages under it, and its certificate in a record: refused.
        assert_eq!(
            signers.check_envelope(&key, &env, now()),
            Err(reason::REVOKED)
        );
        assert_eq!(
            signers.learn(&rv, "c2", Some(&old.encode()), now()),
            Err(reason::REVOKED)
        );
        let json = br#"{"schema":"fleetbus.io/cluster/v1","name":"c2"}"#;
        let signed = fleetbus_schemas::trust::sign_json(json, c2.signing(), &serial).unwrap();
        assert_eq!(
            signers.learn_record(&rv, "c2", Some(&old.encode()), &signed, now()),
            Err(reason::REVOKED)
        );
        // A new certificate (a join after the leave) is not revoked; the
        // old key id stays refused as revoked, not as another's.
        let new = cert(4);
        signers
            .learn(&rv, "c2", Some(&new.encode()), now())
            .unwrap();
        let fresh = signed_env(&key, c2.signing(), &new.cert.serial_hex());
        assert_eq!(signers.check_envelope(&key, &fresh, now()), Ok(()));
        assert_eq!(
            signers.check_envelope(&key, &env, now()),
            Err(reason::REVOKED)
        );
        // Our own serial revoked: we still read our own subtree (else we
        // would republish it for ever); peers are what refuse us.
        let own = Signers {
            own_serial: Some(serial.clone()),
            ..Signers::default()
        };
        own.learn(&rv, "c2", Some(&old.encode()), now()).unwrap();
        own.revoke([serial.as_str()]);
        assert_eq!(own.check_envelope(&key, &env, now()), Ok(()));
    }

    #[test]
    fn records_teach_a_key_only_with_a_certificate_for_their_cluster() {
        let rv = root().verifying_key();
        let signers = Signers::default();
        let c2 = ClusterKeys::from_random([2; 32], [3; 32]);
        let cert = |name: &str, root: &SigningKey| {
            ClusterCertificate {
                cluster: name.into(),
                signing_key: c2.signing_public(),
                sealing_key: c2.sealing_public(),
                not_before: now() - Duration::minutes(5),
                not_after: now() + Duration::days(1),
                serial: [2; 16],
            }
            .sign(root)
            .encode()
        };
        assert_eq!(signers.learn(&rv, "c2", None, now()), Err(reason::UNSIGNED));
        assert_eq!(
            signers.learn(&rv, "c2", Some(&cert("c1", &root())), now()),
            Err(reason::SIGNER_MISMATCH)
        );
        let other_root = SigningKey::from_bytes(&[8; 32]);
        assert_eq!(
            signers.learn(&rv, "c2", Some(&cert("c2", &other_root)), now()),
            Err(reason::BAD_SIGNATURE)
        );
        assert_eq!(
            signers.learn(&rv, "c2", Some("garbage"), now()),
            Err(reason::BAD_SIGNATURE)
        );
        assert_eq!(
            signers.learn(
                &rv,
                "c2",
                Some(&cert("c2", &root())),
                now() + Duration::days(3)
            ),
            Err(reason::EXPIRED_CERTIFICATE)
        );
        assert!(signers.get("c2").is_none());
        // A record must be signed by the key its certificate names.
        let good = cert("c2", &root());
        let json = br#"{"schema":"fleetbus.io/cluster/v1","name":"c2"}"#;
        let learn = |raw: &[u8]| signers.learn_record(&rv, "c2", Some(&good), raw, now());
        assert_eq!(learn(json), Err(reason::UNSIGNED));
        let by_other = fleetbus_schemas::trust::sign_json(
            json,
            &SigningKey::from_bytes(&[7; 32]),
            &"02".repeat(16),
        );
        assert_eq!(learn(&by_other.unwrap()), Err(reason::BAD_SIGNATURE));
        let wrong_id = fleetbus_schemas::trust::sign_json(json, c2.signing(), "00");
        assert_eq!(learn(&wrong_id.unwrap()), Err(reason::SIGNER_MISMATCH));
        assert_eq!(learn(b"not json"), Err(reason::BAD_SIGNATURE));
        assert!(signers.get("c2").is_none());
        let signed = fleetbus_schemas::trust::sign_json(json, c2.signing(), &"02".repeat(16));
        learn(&signed.unwrap()).unwrap();
        assert_eq!(signers.get("c2").unwrap().serial, "02".repeat(16));
    }
}
