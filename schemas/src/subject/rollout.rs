//! Subjects of progressive rollouts (PROTOCOL §2.2, §6.9): the origin's rollout
//! records and its version store, each in the origin's own subtree.

use super::keys::{split, tok, ObjectKey, SubjectError};
use super::prefix::Prefix;
use super::token::{
    decode_group, decode_namespace, decode_token, encode_group, encode_namespace, encode_token,
};

/// Category token of rollout records:
/// `<p>.rollout.<origin>.<rule>.<group>.<version>.<kind>.<ns>.<name>`.
pub const ROLLOUT: &str = "rollout";
/// Category token of the version store:
/// `<p>.ver.<origin>.<group>.<version>.<kind>.<ns>.<name>.<contentHash>`.
pub const VER: &str = "ver";
/// Verb of the rollout command (`<p>.cmd.<origin>.rollout`).
pub const ROLLOUT_VERB: &str = "rollout";

/// Identity of one rollout: a rule's rollout of one source object of one origin.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RolloutKey {
    /// The origin (the only writer).
    pub origin: String,
    /// The rule.
    pub rule: String,
    /// API group of the source (`""` for core).
    pub group: String,
    /// API version of the source.
    pub version: String,
    /// Kind of the source.
    pub kind: String,
    /// Namespace, `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// Name of the source.
    pub name: String,
}

impl RolloutKey {
    /// The key of `rule`'s rollout of `object`.
    pub fn of(rule: &str, object: &ObjectKey) -> Self {
        Self {
            origin: object.origin.clone(),
            rule: rule.to_owned(),
            group: object.group.clone(),
            version: object.version.clone(),
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
        }
    }

    /// The source object the rollout is about.
    pub fn object(&self) -> ObjectKey {
        ObjectKey {
            origin: self.origin.clone(),
            group: self.group.clone(),
            version: self.version.clone(),
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }

    /// `<p>.rollout.<origin>.<rule>.<group>.<version>.<kind>.<namespace>.<name>`.
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        format!(
            "{prefix}.{ROLLOUT}.{}.{}.{}.{}.{}.{}.{}",
            encode_token(&self.origin),
            encode_token(&self.rule),
            encode_group(&self.group),
            encode_token(&self.version),
            encode_token(&self.kind),
            encode_namespace(self.namespace.as_deref()),
            encode_token(&self.name),
        )
    }

    /// Inverse of [`RolloutKey::to_subject`].
    pub fn parse_subject(prefix: &Prefix, subject: &str) -> Result<Self, SubjectError> {
        let t = split(prefix, ROLLOUT, subject, 7)?;
        Ok(Self {
            origin: decode_token(t[0]).map_err(tok("origin"))?,
            rule: decode_token(t[1]).map_err(tok("rule"))?,
            group: decode_group(t[2]).map_err(tok("group"))?,
            version: decode_token(t[3]).map_err(tok("version"))?,
            kind: decode_token(t[4]).map_err(tok("kind"))?,
            namespace: decode_namespace(t[5]).map_err(tok("namespace"))?,
            name: decode_token(t[6]).map_err(tok("name"))?,
        })
    }

    /// `<p>.rollout.*.<rule>.>`: every origin's rollouts of one rule.
    pub fn of_rule(prefix: &Prefix, rule: &str) -> String {
        format!("{prefix}.{ROLLOUT}.*.{}.>", encode_token(rule))
    }
}

/// One stored version of a source object: its envelope by content hash.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VersionKey {
    /// The source object (with its origin).
    pub object: ObjectKey,
    /// The envelope's content hash.
    pub hash: String,
}

impl VersionKey {
    /// `<p>.ver.<origin>.<group>.<version>.<kind>.<namespace>.<name>.<hash>`.
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        let o = &self.object;
        format!(
            "{prefix}.{VER}.{}.{}.{}.{}.{}.{}.{}",
            encode_token(&o.origin),
            encode_group(&o.group),
            encode_token(&o.version),
            encode_token(&o.kind),
            encode_namespace(o.namespace.as_deref()),
            encode_token(&o.name),
            encode_token(&self.hash),
        )
    }

    /// Inverse of [`VersionKey::to_subject`].
    pub fn parse_subject(prefix: &Prefix, subject: &str) -> Result<Self, SubjectError> {
        let t = split(prefix, VER, subject, 7)?;
        Ok(Self {
            object: ObjectKey {
                origin: decode_token(t[0]).map_err(tok("origin"))?,
                group: decode_group(t[1]).map_err(tok("group"))?,
                version: decode_token(t[2]).map_err(tok("version"))?,
                kind: decode_token(t[3]).map_err(tok("kind"))?,
                namespace: decode_namespace(t[4]).map_err(tok("namespace"))?,
                name: decode_token(t[5]).map_err(tok("name"))?,
            },
            hash: decode_token(t[6]).map_err(tok("hash"))?,
        })
    }
}

/// `<p>.rollout.>`: every rollout record (the ROLLOUTS stream's subjects).
pub fn all_rollouts(prefix: &Prefix) -> String {
    format!("{prefix}.{ROLLOUT}.>")
}

/// `<p>.ver.>`: every stored version (the VERSIONS stream's subjects).
pub fn all_versions(prefix: &Prefix) -> String {
    format!("{prefix}.{VER}.>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_escape_names() {
        let p = Prefix::default();
        let obj = ObjectKey::from_api_version("hub", "apps/v1", "Deployment", Some("apps"), "web");
        let k = RolloutKey::of("web.rule", &obj);
        let s = k.to_subject(&p);
        assert_eq!(
            s,
            "fleetbus.rollout.hub.=d2ViLnJ1bGU.apps.v1.Deployment.apps.web"
        );
        assert_eq!(RolloutKey::parse_subject(&p, &s), Ok(k.clone()));
        assert_eq!(k.object(), obj);
        let cm = ObjectKey::from_api_version("hub", "v1", "ConfigMap", None, "x");
        let v = VersionKey {
            object: cm,
            hash: "ab".repeat(32),
        };
        let s = v.to_subject(&p);
        assert_eq!(
            s,
            format!("fleetbus.ver.hub.core.v1.ConfigMap._.x.{}", "ab".repeat(32))
        );
        assert_eq!(VersionKey::parse_subject(&p, &s), Ok(v));
        assert!(RolloutKey::parse_subject(&p, "fleetbus.rollout.hub.r.apps.v1").is_err());
        assert!(VersionKey::parse_subject(&p, "fleetbus.obj.hub.core.v1.ConfigMap._.x.h").is_err());
        assert_eq!(RolloutKey::of_rule(&p, "web"), "fleetbus.rollout.*.web.>");
        assert_eq!(all_rollouts(&p), "fleetbus.rollout.>");
        assert_eq!(all_versions(&p), "fleetbus.ver.>");
    }
}
