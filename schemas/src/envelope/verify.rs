//! What a receiver checks before it believes an envelope (PROTOCOL §4.7): that it is
//! what its subject says it is, and that its `contentHash` is the hash of its object.
//!
//! Without signatures (reserved in v1) this cannot tell a member's own message from a
//! forgery that is consistent; it makes accidental and naive corruption harmless.

use thiserror::Error;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

use super::sealed::sealed_hash;
use super::{content_hash, Envelope};
use crate::subject::ObjectKey;

/// Why an envelope is not believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum Mismatch {
    /// `origin` is not the cluster the subject names.
    #[error("the envelope's origin is not the cluster its subject names")]
    Origin,
    /// The object's group, version, kind, namespace or name is not what the subject names.
    #[error("the envelope's object is not the object its subject names")]
    Object,
    /// `uid`, `resourceVersion` or `generation` is not the object's own
    /// (`metadata.uid`, `.resourceVersion`, `.generation`), which is where the
    /// origin reads them from.
    #[error("the envelope's uid, resourceVersion or generation is not its object's")]
    Metadata,
    /// `contentHash` is not the [`content_hash`] of the object.
    #[error("the envelope's contentHash is not the hash of its object")]
    ContentHash,
}

impl Mismatch {
    /// A short name for metrics and logs: `subject_mismatch`, `metadata_mismatch`
    /// or `hash_mismatch`.
    pub fn reason(self) -> &'static str {
        match self {
            Self::Origin | Self::Object => "subject_mismatch",
            Self::Metadata => "metadata_mismatch",
            Self::ContentHash => "hash_mismatch",
        }
    }
}

impl Envelope {
    /// Checks the envelope against the key its subject names: the origin cluster, the
    /// object's group, version, kind, namespace and name; for a snapshot also that uid,
    /// resourceVersion and generation are the object's, and that `contentHash` is the
    /// hash of the object, recomputed here. A tombstone carries no object: only its
    /// origin is checked.
    pub fn check(&self, key: &ObjectKey) -> Result<(), Mismatch> {
        if self.origin != key.origin {
            return Err(Mismatch::Origin);
        }
        let Some(object) = &self.object else {
            // A sealed snapshot not opened: its hash is the ciphertext's (§4.8); what the
            // ciphertext holds is checked once opened.
            if let Some(enc) = self.encryption.as_ref().filter(|e| e.is_sealed()) {
                let ciphertext = STANDARD.decode(&enc.ciphertext).unwrap_or_default();
                if sealed_hash(&ciphertext) != self.content_hash {
                    return Err(Mismatch::ContentHash);
                }
            }
            return Ok(());
        };
        if ObjectKey::from_object(&key.origin, object).as_ref() != Some(key) {
            return Err(Mismatch::Object);
        }
        let meta = |field: &str| object.pointer(&format!("/metadata/{field}"));
        if meta("uid").and_then(|v| v.as_str()) != Some(self.uid.as_str())
            || meta("resourceVersion").and_then(|v| v.as_str())
                != Some(self.resource_version.as_str())
            || meta("generation").and_then(|v| v.as_i64()) != self.generation
        {
            return Err(Mismatch::Metadata);
        }
        if content_hash(object) != self.content_hash {
            return Err(Mismatch::ContentHash);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use serde_json::{json, Value};

    fn object(ns: &str, name: &str, data: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
               "metadata": {"namespace": ns, "name": name, "uid": "u1", "resourceVersion": "5"},
               "spec": {"replicas": 1, "x": data}})
    }

    fn snapshot(origin: &str, obj: Value) -> Envelope {
        Envelope::snapshot(origin, None, obj, chrono::Utc::now()).unwrap()
    }

    fn key(origin: &str, obj: &Value) -> ObjectKey {
        ObjectKey::from_object(origin, obj).unwrap()
    }

    #[test]
    fn an_envelope_as_published_passes() {
        let obj = object("apps", "api", "v");
        assert_eq!(snapshot("c1", obj.clone()).check(&key("c1", &obj)), Ok(()));
    }

    #[test]
    fn a_changed_object_under_the_old_hash_is_refused() {
        let obj = object("apps", "api", "v");
        let mut env = snapshot("c1", obj.clone());
        env.object = Some(object("apps", "api", "forged"));
        assert_eq!(env.check(&key("c1", &obj)), Err(Mismatch::ContentHash));
        // Any hash that is not the object's, and none at all.
        env.content_hash = "0".repeat(64);
        assert_eq!(env.check(&key("c1", &obj)), Err(Mismatch::ContentHash));
        env.content_hash = String::new();
        assert_eq!(env.check(&key("c1", &obj)), Err(Mismatch::ContentHash));
        // Volatile metadata is not in the hash: a new resourceVersion alone passes
        // when the envelope says the same.
        let mut bumped = snapshot("c1", obj.clone());
        if let Some(o) = bumped.object.as_mut() {
            o["metadata"]["resourceVersion"] = json!("6");
        }
        assert_eq!(bumped.check(&key("c1", &obj)), Err(Mismatch::Metadata));
        bumped.resource_version = "6".into();
        assert_eq!(bumped.check(&key("c1", &obj)), Ok(()));
    }

    #[test]
    fn uid_resource_version_and_generation_must_be_the_objects() {
        let mut obj = object("apps", "api", "v");
        obj["metadata"]["generation"] = json!(2);
        let k = key("c1", &obj);
        let good = snapshot("c1", obj.clone());
        assert_eq!(good.generation, Some(2));
        let mut env = good.clone();
        env.uid = "u2".into();
        assert_eq!(env.check(&k), Err(Mismatch::Metadata));
        let mut env = good.clone();
        env.resource_version = "6".into();
        assert_eq!(env.check(&k), Err(Mismatch::Metadata));
        let mut env = good.clone();
        env.generation = None;
        assert_eq!(env.check(&k), Err(Mismatch::Metadata));
        assert_eq!(Mismatch::Metadata.reason(), "metadata_mismatch");
    }

    #[test]
    fn every_field_the_subject_names_must_agree() {
        let obj = object("apps", "api", "v");
        let env = snapshot("c1", obj.clone());
        let k = key("c1", &obj);
        assert_eq!(env.check(&key("c2", &obj)), Err(Mismatch::Origin));
        let others = [
            ObjectKey {
                group: "batch".into(),
                ..k.clone()
            },
            ObjectKey {
                version: "v2".into(),
                ..k.clone()
            },
            ObjectKey {
                kind: "StatefulSet".into(),
                ..k.clone()
            },
            ObjectKey {
                namespace: Some("other".into()),
                ..k.clone()
            },
            ObjectKey {
                namespace: None,
                ..k.clone()
            },
            ObjectKey {
                name: "web".into(),
                ..k.clone()
            },
        ];
        for other in others {
            assert_eq!(env.check(&other), Err(Mismatch::Object), "{other:?}");
        }
        assert_eq!(Mismatch::Object.reason(), "subject_mismatch");
        assert_eq!(Mismatch::ContentHash.reason(), "hash_mismatch");
    }

    #[test]
    fn a_tombstone_is_checked_for_its_origin_only() {
        let obj = object("apps", "api", "v");
        let t = Envelope::tombstone(
            "c1",
            None,
            "u1",
            "5",
            chrono::Utc::now(),
            super::super::TombstoneReason::Deleted,
        );
        assert_eq!(t.check(&key("c1", &obj)), Ok(()));
        assert_eq!(t.check(&key("c2", &obj)), Err(Mismatch::Origin));
    }

    #[test]
    fn the_check_holds_after_a_round_trip_on_the_wire() {
        // Floats, big integers and unicode survive MessagePack unchanged, so the
        // hash recomputed by a receiver is the one the origin computed.
        let mut obj = object("apps", "api", "é 😀");
        obj["spec"]["f"] = json!(0.1);
        obj["spec"]["one"] = json!(1.0);
        obj["spec"]["big"] = json!(u64::MAX);
        obj["spec"]["neg"] = json!(i64::MIN);
        let env = snapshot("c1", obj.clone());
        let back = Envelope::decode(&env.encode().unwrap()).unwrap();
        assert_eq!(back.check(&key("c1", &obj)), Ok(()));
    }
}
