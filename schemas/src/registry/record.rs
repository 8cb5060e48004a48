//! Registry records: what each agent announces about its cluster (JSON, schema-tagged).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::crd::{ClusterMetadata, KubernetesApiEndpoint};
use crate::envelope::EncryptionHeader;
use crate::seal::{OpenError, SealContext, SealError, SealingPublicKey, SealingSecretKey};
use crate::time::{rfc3339_ms, rfc3339_ms_opt};

use super::members::MembersDigest;

/// `schema` of a [`ClusterRecord`].
pub const CLUSTER_RECORD_SCHEMA: &str = "fleetbus.io/cluster/v1";
/// `schema` of a [`KubeconfigRecord`].
pub const KUBECONFIG_RECORD_SCHEMA: &str = "fleetbus.io/kubeconfig/v1";
/// Default seconds between two puts of an agent's cluster record.
pub const DEFAULT_HEARTBEAT_INTERVAL_SECONDS: u32 = 10;
/// A member is considered gone after this many heartbeat intervals without a put.
pub const MISSED_HEARTBEATS_BEFORE_DISCONNECTED: u32 = 3;

/// Whether the agent is a member or has announced that it left.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum MemberState {
    /// The agent is running and heartbeating.
    Active,
    /// The agent left the fleet on purpose (uninstall, shutdown with `--leave`).
    Left,
}

/// A ClusterFeature advertised by a cluster: enough for `clusterFeatureMatch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FeatureRecord {
    /// `spec.featureName` of the ClusterFeature.
    pub feature_name: String,
    /// Labels of the ClusterFeature object.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// The record an agent keeps at `cluster.<name>.<clusterID>`: put at start-up and
/// whenever it changes (an agent without [`ClusterRecord::beats`] re-puts it every
/// heartbeat interval instead).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRecord {
    /// Cluster name (the name of its Cluster object everywhere).
    pub name: String,
    /// kube-system UID.
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// Active, or Left once the agent announced leaving.
    pub state: MemberState,
    /// Labels of the local Cluster object (what cluster selectors match).
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// API server endpoints, as in `Cluster.spec.kubernetesApiEndpoints`.
    #[serde(default)]
    pub kubernetes_api_endpoints: Vec<KubernetesApiEndpoint>,
    /// Facts gathered from the cluster's Nodes.
    #[serde(default)]
    pub metadata: ClusterMetadata,
    /// ClusterFeatures of the cluster.
    #[serde(default)]
    pub features: Vec<FeatureRecord>,
    /// Version of the agent.
    pub agent_version: String,
    /// The fleet protocol the agent speaks ([`super::PROTOCOL_VERSION`] of
    /// its revision): what its peers judge the version skew by (PROTOCOL
    /// §7.1). Absent from agents before the member, which speak
    /// [`super::PROTOCOL_BEFORE_VERSIONS`].
    #[serde(default = "super::protocol::before_versions")]
    pub protocol: u32,
    /// When this agent process started.
    #[serde(with = "rfc3339_ms")]
    pub started_at: DateTime<Utc>,
    /// When this record was written.
    #[serde(with = "rfc3339_ms")]
    pub heartbeat_at: DateTime<Utc>,
    /// Seconds until the next put; readers derive liveness from it.
    pub heartbeat_interval_seconds: u32,
    /// Increases by one with every put within one agent run (restarts at 1 with a new `startedAt`).
    pub seq: u64,
    /// Names of the clusters this agent currently sees as members (for
    /// ClustersSynced): all of them in a record without `membersDigest` (an
    /// agent before digests); with it, only while they are at most
    /// [`super::MEMBER_NAMES_MAX`], else empty (see [`super::members`]).
    #[serde(default)]
    pub members: Vec<String>,
    /// Count and digest of the member set (absent from agents before digests).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub members_digest: Option<MembersDigest>,
    /// Whether the cluster's own API server answers its agent. Omitted while it
    /// does, so a record without it (an older agent) reads as healthy.
    #[serde(default, skip_serializing_if = "ApiHealth::is_reachable")]
    pub api: ApiHealth,
    /// This agent's liveness travels in the beats bucket (see [`super::beat`])
    /// and this record is put only when it changes. Absent (false) from
    /// agents before beats: every put of their record is a heartbeat.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub beats: bool,
    /// The cluster's certificate from the fleet root
    /// ([`crate::trust::SignedCertificate::encode`], base64), when its agent
    /// runs with a fleet root (PROTOCOL §2.7, §5.1). Absent in the insecure
    /// mode and from agents older than the secure mode. Readers with a fleet root accept
    /// the record only if it verifies and names [`Self::name`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<String>,
    /// Kinds the fleet's rules name that this cluster's API server does not
    /// serve (no CRD yet), as [`kind_id`]s, sorted, at most
    /// [`MAX_UNSERVED_KINDS`]: placement does not choose a cluster for a
    /// copy it cannot hold (PROTOCOL §6.10, "Fitness"). Absent when none,
    /// and from older agents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unserved_kinds: Vec<String>,
    /// This agent says when it cannot hold a placement's copy (`unfit`
    /// status reports, PROTOCOL §6.10) and takes it back when it can.
    /// Readers believe `unfit` only from a cluster whose record says so:
    /// an agent rolled back to a release without it would never take back
    /// what it said. Absent (false) from older agents.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fitness: bool,
}

/// At most this many entries in [`ClusterRecord::unserved_kinds`].
pub const MAX_UNSERVED_KINDS: usize = 64;

/// How a kind is named in [`ClusterRecord::unserved_kinds`]: its
/// `apiVersion`, a slash and its kind (`v1/ConfigMap`, `example.com/v1/Widget`).
pub fn kind_id(group: &str, version: &str, kind: &str) -> String {
    if group.is_empty() {
        format!("{version}/{kind}")
    } else {
        format!("{group}/{version}/{kind}")
    }
}

/// The health of a cluster's API server as its own agent sees it (watches and
/// a periodic probe). Travels in the heartbeat, which keeps flowing while the
/// API is down: that is how peers learn of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiHealth {
    /// The API server answered the agent's last probe.
    pub reachable: bool,
    /// Why it is unreachable (empty while reachable).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Default for ApiHealth {
    /// Reachable: what a record without the member means.
    fn default() -> Self {
        ApiHealth::reachable()
    }
}

impl ApiHealth {
    /// The API server answers.
    pub fn reachable() -> Self {
        ApiHealth {
            reachable: true,
            message: String::new(),
        }
    }

    /// The API server does not answer, because of `message`.
    pub fn unreachable(message: impl Into<String>) -> Self {
        ApiHealth {
            reachable: false,
            message: message.into(),
        }
    }

    /// Whether the API server answers (also serde's skip test).
    pub fn is_reachable(&self) -> bool {
        self.reachable
    }
}

impl ClusterRecord {
    /// JSON with `"schema": "fleetbus.io/cluster/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(CLUSTER_RECORD_SCHEMA, self)
    }

    /// Decodes a record; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(CLUSTER_RECORD_SCHEMA, bytes)
    }

    /// [`Self::encode`] with the cluster's signature in a last `signature`
    /// member (secure mode, PROTOCOL §5.1): see [`crate::trust::sign_json`].
    pub fn encode_signed(
        &self,
        signer: &crate::trust::SigningKey,
        key_id: &str,
    ) -> Result<Vec<u8>, EncodeError> {
        crate::trust::sign_json(&self.encode()?, signer, key_id).map_err(EncodeError::new)
    }

    /// True if the record is Active and its last heartbeat is recent enough at `now`:
    /// within `heartbeatIntervalSeconds * MISSED_HEARTBEATS_BEFORE_DISCONNECTED`.
    pub fn is_alive(&self, now: DateTime<Utc>) -> bool {
        let grace = Duration::from_secs(
            u64::from(self.heartbeat_interval_seconds.max(1))
                * u64::from(MISSED_HEARTBEATS_BEFORE_DISCONNECTED),
        );
        let age = now.signed_duration_since(self.heartbeat_at);
        self.state == MemberState::Active && age.to_std().map_or(true, |age| age <= grace)
    }

    /// The record's key in the registry bucket.
    pub fn key(&self) -> super::RegistryKey {
        super::RegistryKey::cluster(&self.name, &self.cluster_id)
    }
}

/// A reader kubeconfig published at `kubeconfig.<name>.<clusterID>`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigRecord {
    /// Cluster name.
    pub name: String,
    /// kube-system UID.
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    /// The kubeconfig YAML.
    pub kubeconfig: String,
    /// When the credentials in it expire (null: unknown or never).
    #[serde(default, with = "rfc3339_ms_opt")]
    pub expires_at: Option<DateTime<Utc>>,
    /// The kubeconfig sealed to the peers (PROTOCOL §5.2, secure mode):
    /// `kubeconfig` is then empty. Absent in the insecure mode and from
    /// agents before sealing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealed: Option<EncryptionHeader>,
}

/// The `purpose` a sealed kubeconfig is bound to (§5.2).
pub const KUBECONFIG_SEAL_PURPOSE: &str = "kubeconfig";

impl KubeconfigRecord {
    /// JSON with `"schema": "fleetbus.io/kubeconfig/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(KUBECONFIG_RECORD_SCHEMA, self)
    }

    /// Decodes a record; another `schema` is [`DecodeError::UnsupportedVersion`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(KUBECONFIG_RECORD_SCHEMA, bytes)
    }

    /// The record's key in the registry bucket.
    pub fn key(&self) -> super::RegistryKey {
        super::RegistryKey::kubeconfig(&self.name, &self.cluster_id)
    }

    /// What a sealed kubeconfig is bound to: this record's cluster, its ID
    /// and its expiry (a sealing moved to another record does not open).
    fn seal_context<'a>(&'a self, subject: &'a [&'a str], expiry: &'a str) -> SealContext<'a> {
        SealContext {
            purpose: KUBECONFIG_SEAL_PURPOSE,
            origin: &self.name,
            subject,
            uid: &self.cluster_id,
            resource_version: expiry,
        }
    }

    fn expiry_token(&self) -> String {
        self.expires_at
            .map(|t| t.timestamp().to_string())
            .unwrap_or_default()
    }

    /// Seals `kubeconfig` to `recipients` (into `sealed`, emptying `kubeconfig`).
    pub fn seal(
        &mut self,
        recipients: &[(&str, &SealingPublicKey)],
        rng: &mut impl rand::CryptoRng,
    ) -> Result<(), SealError> {
        let expiry = self.expiry_token();
        let subject = [self.name.as_str(), self.cluster_id.as_str()];
        let header = EncryptionHeader::seal_payload(
            self.kubeconfig.as_bytes(),
            recipients,
            &self.seal_context(&subject, &expiry),
            rng,
        )?;
        self.kubeconfig.clear();
        self.sealed = Some(header);
        Ok(())
    }

    /// The kubeconfig: as it is, or opened by `me` with `secret` when sealed
    /// (`None`: sealed and no key to open it with).
    pub fn open(&self, me: &str, secret: Option<&SealingSecretKey>) -> Result<String, OpenError> {
        let Some(header) = &self.sealed else {
            return Ok(self.kubeconfig.clone());
        };
        let secret = secret.ok_or(OpenError::NotARecipient)?;
        let expiry = self.expiry_token();
        let subject = [self.name.as_str(), self.cluster_id.as_str()];
        let bytes = header.open_payload(me, secret, &self.seal_context(&subject, &expiry))?;
        String::from_utf8(bytes).map_err(|_| OpenError::Corrupt("the kubeconfig is not UTF-8"))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_kubeconfig_opens_for_its_peers_only() {
        let mut rng = rand::rng();
        let (c1, c2, c3) = (
            SealingSecretKey::generate(&mut rng),
            SealingSecretKey::generate(&mut rng),
            SealingSecretKey::generate(&mut rng),
        );
        let text = "apiVersion: v1\nusers: [{user: {token: s3cr3t-token}}]\n";
        let mut r = KubeconfigRecord {
            name: "c2".into(),
            cluster_id: "id-2".into(),
            kubeconfig: text.into(),
            expires_at: DateTime::from_timestamp(1_800_000_000, 0),
            sealed: None,
        };
        assert_eq!(r.open("anyone", None).unwrap(), text, "not sealed: as is");
        r.seal(
            &[("c1", &c1.public_key()), ("c2", &c2.public_key())],
            &mut rng,
        )
        .unwrap();
        let bytes = r.encode().unwrap();
        assert!(!String::from_utf8_lossy(&bytes).contains("s3cr3t"));
        r.validate().unwrap();
        let back = KubeconfigRecord::decode(&bytes).unwrap();
        assert_eq!(back.kubeconfig, "");
        assert_eq!(back.open("c1", Some(&c1)).unwrap(), text);
        assert_eq!(back.open("c2", Some(&c2)).unwrap(), text);
        assert_eq!(
            back.open("c3", Some(&c3)).unwrap_err(),
            OpenError::NotARecipient
        );
        assert_eq!(back.open("c1", None).unwrap_err(), OpenError::NotARecipient);
        // Moved to another cluster's record, or another expiry: does not open.
        let moved = KubeconfigRecord {
            name: "c9".into(),
            ..back.clone()
        };
        assert!(matches!(
            moved.open("c1", Some(&c1)),
            Err(OpenError::Corrupt(_))
        ));
        let later = KubeconfigRecord {
            expires_at: DateTime::from_timestamp(1_900_000_000, 0),
            ..back.clone()
        };
        assert!(later.open("c1", Some(&c1)).is_err());
        // Garbage in the header: an error, never a panic.
        let mut bad = back.clone();
        if let Some(h) = bad.sealed.as_mut() {
            h.ciphertext = "%%%".into();
        }
        assert!(bad.open("c1", Some(&c1)).is_err());
        // Unsealed with an empty kubeconfig is invalid; sealed it is fine.
        let empty = KubeconfigRecord {
            sealed: None,
            ..back
        };
        assert!(empty.validate().is_err());
    }
}
