//! What the views check a cluster's signed messages with: the signing key of
//! each cluster whose registry record verified against the fleet root
//! (`fleet::signers`), so that drift events are shown only when their
//! cluster signed them, as agents check status reports (PROTOCOL §6.7).
//!
//! A message verifies when it carries a `signature` member that verifies
//! with the key of a certificate the root issued to the cluster it is stored
//! under (its bucket key names the cluster), signed under that
//! certificate's serial, and the certificate is not revoked. Freshness (an
//! older event put back) needs what was read before; a view cannot tell.

use std::collections::BTreeMap;

use fleetbus_schemas::envelope::SignatureError;
use fleetbus_schemas::trust::{verify_json, VerifyingKey};

/// Why a cluster's message is not shown (left out, named on stderr).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotSigned {
    /// The message is not JSON, or carries no signature.
    #[error("it is not signed")]
    Unsigned,
    /// No record of the cluster verifies against the fleet root (unknown,
    /// forged, expired or revoked).
    #[error("cluster {0} has no record that verifies against the fleet root")]
    UnknownCluster(String),
    /// The signature does not verify with the cluster's key (forged, altered
    /// or signed by another cluster).
    #[error("its signature does not verify with cluster {0}'s key")]
    BadSignature(String),
}

/// The verified signing keys of the fleet's clusters, by cluster name (a
/// cluster that joined again has a record, so a key, per cluster ID).
#[derive(Debug, Clone, Default)]
pub struct Signers(BTreeMap<String, Vec<(VerifyingKey, String)>>);

impl Signers {
    /// Adds `cluster`'s `key`, issued under certificate `serial`.
    pub fn insert(&mut self, cluster: &str, key: VerifyingKey, serial: String) {
        self.0
            .entry(cluster.to_owned())
            .or_default()
            .push((key, serial));
    }

    /// Whether `bytes` (a JSON message stored under `cluster`) is signed by
    /// that cluster.
    pub fn check(&self, cluster: &str, bytes: &[u8]) -> Result<(), NotSigned> {
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|_| NotSigned::Unsigned)?;
        let keys = self
            .0
            .get(cluster)
            .ok_or_else(|| NotSigned::UnknownCluster(cluster.to_owned()))?;
        let mut bad = false;
        for (key, serial) in keys {
            match verify_json(&value, key) {
                Ok(sig) if &sig.key_id == serial => return Ok(()),
                Ok(_) | Err(SignatureError::BadSignature) => bad = true,
                Err(SignatureError::Unsigned) => return Err(NotSigned::Unsigned),
            }
        }
        debug_assert!(bad || keys.is_empty());
        Err(NotSigned::BadSignature(cluster.to_owned()))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use fleetbus_schemas::trust::{sign_json, SigningKey};

    fn signers() -> (Signers, SigningKey) {
        let c2 = SigningKey::from_bytes(&[2; 32]);
        let mut s = Signers::default();
        s.insert("c2", c2.verifying_key(), "serial-c2".into());
        let c1 = SigningKey::from_bytes(&[1; 32]);
        s.insert("c1", c1.verifying_key(), "serial-c1".into());
        (s, c2)
    }

    const EVENT: &[u8] = br#"{"schema":"fleetbus.io/drift/v1","cluster":"c2","rule":"web"}"#;

    #[test]
    fn a_message_signed_by_its_cluster_verifies() {
        let (s, c2) = signers();
        let signed = sign_json(EVENT, &c2, "serial-c2").unwrap();
        assert_eq!(s.check("c2", &signed), Ok(()));
    }

    #[test]
    fn unsigned_altered_misattributed_or_unknown_messages_do_not() {
        let (s, c2) = signers();
        assert_eq!(s.check("c2", EVENT), Err(NotSigned::Unsigned));
        assert_eq!(s.check("c2", b"not json"), Err(NotSigned::Unsigned));
        let signed = sign_json(EVENT, &c2, "serial-c2").unwrap();
        // Stored under another cluster than the one that signed it.
        assert_eq!(
            s.check("c1", &signed),
            Err(NotSigned::BadSignature("c1".into()))
        );
        assert_eq!(
            s.check("evil", &signed),
            Err(NotSigned::UnknownCluster("evil".into()))
        );
        let altered = String::from_utf8(signed).unwrap().replace("web", "bew");
        assert_eq!(
            s.check("c2", altered.as_bytes()),
            Err(NotSigned::BadSignature("c2".into()))
        );
        // The right key under another certificate's serial.
        let other = sign_json(EVENT, &c2, "old-serial").unwrap();
        assert_eq!(
            s.check("c2", &other),
            Err(NotSigned::BadSignature("c2".into()))
        );
    }
}
