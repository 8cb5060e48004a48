//! `taints.<name>` in the registry bucket: the operator's taints on cluster
//! `<name>` (`fleetbus clusters taint|cordon`, PROTOCOL §6.10). A record the
//! operator puts on the bus, not a request the tainted cluster's agent must
//! answer: a dead cluster can be tainted, which is when an operator needs it.
//! In the secure mode it is signed by the fleet root (like `revoked.<name>`),
//! so neither a member nor whoever may write the bucket can taint a cluster.
//! Only the admin writes these keys: members may write their own
//! `cluster.<self>.*` and `kubeconfig.<self>.*` keys alone.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::crd::ClusterTaint;
use crate::subject::{encode_token, TokenError};
use crate::time::rfc3339_ms;

use super::revoked::ROOT_KEY_ID;

/// `schema` of a [`TaintsRecord`].
pub const TAINTS_RECORD_SCHEMA: &str = "fleetbus.io/taints/v1";
/// The first token of a taints key.
pub const TAINTS_KEY_KIND: &str = "taints";
/// The most taints one cluster carries.
pub const MAX_TAINTS: usize = 32;
/// The taint `fleetbus clusters cordon` puts (NoSchedule).
pub const CORDONED_TAINT_KEY: &str = "fleetbus.io/cordoned";

/// One taint with when it was put (NoExecute counts `afterSeconds` from it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TimedTaint {
    /// The taint.
    #[serde(flatten)]
    pub taint: ClusterTaint,
    /// When the operator put it.
    #[serde(with = "rfc3339_ms")]
    pub added_at: DateTime<Utc>,
}

/// The value at `taints.<name>` (in the secure mode its `signature` member
/// is the fleet root's). An empty list: no taints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaintsRecord {
    /// The cluster tainted; equal to the key's token.
    pub name: String,
    /// Its taints, each key and effect once.
    pub taints: Vec<TimedTaint>,
}

/// Why a taints entry is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidTaints {
    /// More than [`MAX_TAINTS`].
    #[error("{0} taints, at most {MAX_TAINTS}")]
    Count(usize),
    /// A key that is no qualified name, or a value that is no label value.
    #[error("taint {0:?} is not key[=value] with a qualified key and a label value")]
    Taint(String),
    /// The same key and effect twice.
    #[error("taint {0:?} is listed twice")]
    Duplicate(String),
}

impl TaintsRecord {
    /// JSON with `"schema": "fleetbus.io/taints/v1"` first (unsigned).
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(TAINTS_RECORD_SCHEMA, self)
    }

    /// [`Self::encode`] with the fleet root's `signature` member.
    pub fn encode_signed(&self, root: &crate::trust::SigningKey) -> Result<Vec<u8>, EncodeError> {
        crate::trust::sign_json(&self.encode()?, root, ROOT_KEY_ID).map_err(EncodeError::new)
    }

    /// Decodes a record (its signature is checked by [`Self::verify`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(TAINTS_RECORD_SCHEMA, bytes)
    }

    /// Bounded, well formed, each (key, effect) once.
    pub fn validate(&self) -> Result<(), InvalidTaints> {
        if self.taints.len() > MAX_TAINTS {
            return Err(InvalidTaints::Count(self.taints.len()));
        }
        let mut seen = std::collections::BTreeSet::new();
        for t in &self.taints {
            let shown = format!(
                "{}={}:{}",
                t.taint.key,
                t.taint.value,
                t.taint.effect.as_str()
            );
            if !crate::k8s_names::is_qualified_name(&t.taint.key)
                || !crate::k8s_names::is_label_value(&t.taint.value)
            {
                return Err(InvalidTaints::Taint(shown));
            }
            if !seen.insert((t.taint.key.as_str(), t.taint.effect)) {
                return Err(InvalidTaints::Duplicate(shown));
            }
        }
        Ok(())
    }

    /// Checks that `raw` carries the fleet `root`'s signature.
    pub fn verify(
        raw: &[u8],
        root: &crate::trust::VerifyingKey,
    ) -> Result<(), crate::envelope::SignatureError> {
        super::revoked::RevokedRecord::verify(raw, root)
    }
}

/// `taints.<escaped name>`.
pub fn taints_key(name: &str) -> String {
    format!("{TAINTS_KEY_KIND}.{}", encode_token(name))
}

/// The name in a taints key; `None` for any other key.
pub fn parse_taints_key(key: &str) -> Option<Result<String, TokenError>> {
    super::forgotten::parse_name_key(TAINTS_KEY_KIND, key)
}

/// Reads `key[=value]:Effect` as `fleetbus clusters taint` takes it.
pub fn parse_taint(s: &str) -> Result<ClusterTaint, String> {
    let (kv, effect) = s
        .rsplit_once(':')
        .ok_or_else(|| format!("{s:?}: want key[=value]:NoSchedule|NoExecute"))?;
    let effect = crate::crd::TaintEffect::parse(effect)
        .ok_or_else(|| format!("{effect:?}: the effect is NoSchedule or NoExecute"))?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    if !crate::k8s_names::is_qualified_name(key) {
        return Err(format!(
            "{key:?}: a taint key is a qualified name ([prefix/]name)"
        ));
    }
    if !crate::k8s_names::is_label_value(value) {
        return Err(format!("{value:?}: a taint value is a label value"));
    }
    Ok(ClusterTaint {
        key: key.to_owned(),
        value: value.to_owned(),
        effect,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::crd::TaintEffect;
    use crate::trust::SigningKey;

    #[test]
    fn taints_parse_as_kubectl_taint_writes_them() {
        let t = parse_taint("maintenance=yes:NoExecute").unwrap();
        assert_eq!((t.key.as_str(), t.value.as_str()), ("maintenance", "yes"));
        assert_eq!(t.effect, TaintEffect::NoExecute);
        assert_eq!(
            parse_taint("fleetbus.io/cordoned:NoSchedule")
                .unwrap()
                .value,
            ""
        );
        for bad in [
            "x",
            "x:Sometimes",
            "bad key:NoSchedule",
            "k=v v:NoExecute",
            ":NoSchedule",
        ] {
            assert!(parse_taint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn records_are_bounded_signed_by_the_root_and_keyed_by_name() {
        let now = crate::time::truncate_to_ms(Utc::now());
        let t = |k: &str, e| TimedTaint {
            taint: ClusterTaint {
                key: k.into(),
                value: String::new(),
                effect: e,
            },
            added_at: now,
        };
        let rec = TaintsRecord {
            name: "c2".into(),
            taints: vec![
                t("a", TaintEffect::NoSchedule),
                t("a", TaintEffect::NoExecute),
            ],
        };
        rec.validate().unwrap();
        let twice = TaintsRecord {
            taints: vec![
                t("a", TaintEffect::NoSchedule),
                t("a", TaintEffect::NoSchedule),
            ],
            ..rec.clone()
        };
        assert!(matches!(twice.validate(), Err(InvalidTaints::Duplicate(_))));
        let root = SigningKey::from_bytes(&[7; 32]);
        let other = SigningKey::from_bytes(&[8; 32]);
        let signed = rec.encode_signed(&root).unwrap();
        TaintsRecord::verify(&signed, &root.verifying_key()).unwrap();
        assert!(TaintsRecord::verify(&signed, &other.verifying_key()).is_err());
        assert!(TaintsRecord::verify(&rec.encode().unwrap(), &root.verifying_key()).is_err());
        assert_eq!(TaintsRecord::decode(&signed).unwrap(), rec);
        assert_eq!(parse_taints_key(&taints_key("c2")).unwrap().unwrap(), "c2");
        assert!(parse_taints_key("forgotten.c2").is_none());
    }
}
