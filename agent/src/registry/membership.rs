//! The fleet as read from the registry bucket: validated records, liveness, conflicts.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use super::liveness::Liveness;
use fleetbus_schemas::DecodeError;

use super::record::{heartbeat_stamp, ClusterRecord, KubeconfigRecord, MemberState, RegistryKey};

/// Why a registry entry was skipped (the `reason` label of
/// `fleetbus_registry_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The key is not `cluster.<name>.<id>` or `kubeconfig.<name>.<id>`.
    BadKey,
    /// The value is not the JSON of a record.
    Undecodable,
    /// The value carries another schema tag.
    WrongSchema,
    /// The name or clusterID in the value differs from the key's.
    NameMismatch,
    /// The name is not a DNS-1123 label.
    InvalidName,
    /// The record decoded but holds a value Kubernetes would refuse (a label,
    /// a name, an oversized list): it could never be materialised.
    InvalidRecord,
}

impl Rejection {
    /// Metric label value.
    pub fn reason(self) -> &'static str {
        match self {
            Rejection::BadKey => "bad_key",
            Rejection::Undecodable => "undecodable",
            Rejection::WrongSchema => "wrong_schema",
            Rejection::NameMismatch => "name_mismatch",
            Rejection::InvalidName => "invalid_name",
            Rejection::InvalidRecord => "invalid_record",
        }
    }
}

/// A registry entry that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub enum Decoded {
    /// A cluster record.
    Cluster(Box<ClusterRecord>),
    /// A kubeconfig record.
    Kubeconfig(KubeconfigRecord),
}

/// Validates one registry entry. Pure: garbage anywhere in the bucket must be
/// skipped, never trusted, never fatal.
pub fn decode(key: &str, value: &[u8]) -> Result<Decoded, Rejection> {
    let parsed = RegistryKey::parse(key).map_err(|_| Rejection::BadKey)?;
    if crate::cli::validate_dns_label(parsed.name()).is_err() {
        return Err(Rejection::InvalidName);
    }
    let (decoded, name, id) = match parsed {
        RegistryKey::Cluster { .. } => {
            let r = ClusterRecord::decode(value).map_err(rejection)?;
            let (name, id) = (r.name.clone(), r.cluster_id.clone());
            (Decoded::Cluster(Box::new(r)), name, id)
        }
        RegistryKey::Kubeconfig { .. } => {
            let r = KubeconfigRecord::decode(value).map_err(rejection)?;
            let (name, id) = (r.name.clone(), r.cluster_id.clone());
            (Decoded::Kubeconfig(r), name, id)
        }
    };
    // The key is the claim every reader trusts; a body that says otherwise is forged or broken.
    if name != parsed.name() || id != parsed.cluster_id() {
        return Err(Rejection::NameMismatch);
    }
    // Everything we would write into Kubernetes must be acceptable there: a
    // record the API server refuses would otherwise be retried for ever.
    let valid = match &decoded {
        Decoded::Cluster(r) => r.validate(),
        Decoded::Kubeconfig(k) => k.validate(),
    };
    valid.map_err(|_| Rejection::InvalidRecord)?;
    Ok(decoded)
}

fn rejection(e: DecodeError) -> Rejection {
    match e {
        DecodeError::UnsupportedVersion { .. } => Rejection::WrongSchema,
        DecodeError::Malformed { .. } => Rejection::Undecodable,
    }
}

/// One other cluster as known from the registry.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Its latest record.
    pub record: ClusterRecord,
    /// When its heartbeats last advanced, locally.
    pub liveness: Liveness,
    /// Its latest reader kubeconfig, if it publishes one.
    pub kubeconfig: Option<KubeconfigRecord>,
}

/// What applying a record changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// The set returned by [`Membership::members`] changed.
    pub members_changed: bool,
    /// Anything that the Cluster objects show changed (new peer, new heartbeat, ...).
    pub changed: bool,
    /// It was a new heartbeat from a peer.
    pub heartbeat: bool,
}

/// The fleet as this agent knows it. Owned by the registry and shared behind a
/// `std::sync::Mutex`: every method is quick and nothing awaits while it is held.
#[derive(Debug)]
pub struct Membership {
    local_name: String,
    local_id: String,
    peers: BTreeMap<(String, String), Peer>,
    /// Kubeconfigs that arrived before their cluster's record.
    orphan_kubeconfigs: BTreeMap<(String, String), KubeconfigRecord>,
}

impl Membership {
    /// An empty view for the local cluster `name`/`id`.
    pub fn new(local_name: &str, local_id: &str) -> Self {
        Membership {
            local_name: local_name.to_owned(),
            local_id: local_id.to_owned(),
            peers: BTreeMap::new(),
            orphan_kubeconfigs: BTreeMap::new(),
        }
    }

    fn is_self(&self, name: &str, id: &str) -> bool {
        name == self.local_name && id == self.local_id
    }

    /// Applies a valid entry received at `now`.
    pub fn apply(&mut self, decoded: Decoded, now: Instant) -> Applied {
        match decoded {
            Decoded::Cluster(r) => self.apply_cluster(*r, now),
            Decoded::Kubeconfig(k) => self.apply_kubeconfig(k),
        }
    }

    fn apply_cluster(&mut self, r: ClusterRecord, now: Instant) -> Applied {
        if self.is_self(&r.name, &r.cluster_id) {
            return Applied::default();
        }
        let before = self.members();
        let key = (r.name.clone(), r.cluster_id.clone());
        let mut applied = Applied::default();
        match self.peers.get_mut(&key) {
            Some(p) => {
                applied.heartbeat = p.liveness.observe(&heartbeat_stamp(&r), now);
                applied.changed = applied.heartbeat || p.record != r;
                p.record = r;
            }
            None => {
                let kubeconfig = self.orphan_kubeconfigs.remove(&key);
                let liveness = Liveness::first_seen(&heartbeat_stamp(&r), now);
                self.peers.insert(
                    key,
                    Peer {
                        record: r,
                        liveness,
                        kubeconfig,
                    },
                );
                applied.changed = true;
                applied.heartbeat = true;
            }
        }
        applied.members_changed = before != self.members();
        applied
    }

    fn apply_kubeconfig(&mut self, k: KubeconfigRecord) -> Applied {
        if self.is_self(&k.name, &k.cluster_id) {
            return Applied::default();
        }
        let key = (k.name.clone(), k.cluster_id.clone());
        match self.peers.get_mut(&key) {
            Some(p) => {
                let changed = p.kubeconfig.as_ref() != Some(&k);
                p.kubeconfig = Some(k);
                Applied {
                    changed,
                    ..Applied::default()
                }
            }
            None => {
                self.orphan_kubeconfigs.insert(key, k);
                Applied::default()
            }
        }
    }

    /// Forgets the record at `key` (deleted or purged from the bucket): a
    /// cluster record takes its peer (and its kubeconfig) out of memory, a
    /// kubeconfig record only the kubeconfig. Returns what that changed.
    pub fn remove(&mut self, key: &RegistryKey) -> Applied {
        let before = self.members();
        let id = (key.name().to_owned(), key.cluster_id().to_owned());
        let changed = match key {
            RegistryKey::Cluster { .. } => {
                self.orphan_kubeconfigs.remove(&id);
                self.peers.remove(&id).is_some()
            }
            RegistryKey::Kubeconfig { .. } => {
                let orphan = self.orphan_kubeconfigs.remove(&id).is_some();
                let held = self
                    .peers
                    .get_mut(&id)
                    .and_then(|p| p.kubeconfig.take())
                    .is_some();
                orphan || held
            }
        };
        Applied {
            members_changed: before != self.members(),
            changed,
            heartbeat: false,
        }
    }

    /// Names of the members this cluster sees, itself included: every cluster
    /// with a record that has not left. Disconnected peers stay members (they
    /// may come back); this is what ClustersSynced compares.
    pub fn members(&self) -> Vec<String> {
        let mut set: BTreeSet<&str> = self
            .peers
            .values()
            .filter(|p| p.record.state == MemberState::Active)
            .map(|p| p.record.name.as_str())
            .collect();
        set.insert(&self.local_name);
        set.into_iter().map(str::to_owned).collect()
    }

    /// Peers in a stable order (name, then clusterID).
    pub fn peers(&self) -> impl Iterator<Item = &Peer> {
        self.peers.values()
    }

    /// Active records claiming the local name with another clusterID.
    pub fn rivals(&self) -> Vec<&ClusterRecord> {
        self.peers
            .values()
            .filter(|p| p.record.name == self.local_name && p.record.state == MemberState::Active)
            .map(|p| &p.record)
            .collect()
    }

    /// Peer names claimed by more than one active clusterID (the local name
    /// is reported through [`Membership::rivals`] instead).
    pub fn conflicting_names(&self) -> BTreeSet<String> {
        let mut ids: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for p in self
            .peers
            .values()
            .filter(|p| p.record.state == MemberState::Active)
        {
            ids.entry(&p.record.name)
                .or_default()
                .insert(&p.record.cluster_id);
        }
        ids.into_iter()
            .filter(|(name, ids)| ids.len() > 1 && *name != self.local_name)
            .map(|(name, _)| name.to_owned())
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::registry::record::{cluster_key, kubeconfig_key};
    use chrono::{TimeZone, Utc};

    /// A record whose heartbeat number is `seq`.
    pub(crate) fn record(name: &str, id: &str, seq: u64) -> ClusterRecord {
        ClusterRecord {
            name: name.into(),
            cluster_id: id.into(),
            state: MemberState::Active,
            labels: BTreeMap::new(),
            kubernetes_api_endpoints: vec![],
            metadata: Default::default(),
            features: vec![],
            agent_version: "0.1.0".into(),
            started_at: Utc.timestamp_opt(1_000, 0).unwrap(),
            heartbeat_at: Utc
                .timestamp_opt(1_000 + i64::try_from(seq).unwrap(), 0)
                .unwrap(),
            heartbeat_interval_seconds: 1,
            seq,
            members: vec![],
            api: Default::default(),
        }
    }

    fn cluster(r: ClusterRecord) -> Decoded {
        Decoded::Cluster(Box::new(r))
    }

    #[test]
    fn decode_rejects_garbage() {
        let good = record("b", "id-b", 1).encode().unwrap();
        assert!(matches!(
            decode(&cluster_key("b", "id-b"), &good),
            Ok(Decoded::Cluster(_))
        ));
        assert_eq!(decode("cluster.b", &good), Err(Rejection::BadKey));
        assert_eq!(decode("node.b.id-b", &good), Err(Rejection::BadKey));
        assert_eq!(
            decode(&cluster_key("b", "id-b"), b"\x00\xffgarbage"),
            Err(Rejection::Undecodable)
        );
        assert_eq!(
            decode(
                &cluster_key("b", "id-b"),
                br#"{"schema":"fleetbus.io/cluster/v1"}"#
            ),
            Err(Rejection::Undecodable)
        );
        let mut wrong: serde_json::Value = serde_json::from_slice(&good).unwrap();
        wrong["schema"] = "fleetbus.io/cluster/v9".into();
        assert_eq!(
            decode(
                &cluster_key("b", "id-b"),
                &serde_json::to_vec(&wrong).unwrap()
            ),
            Err(Rejection::WrongSchema)
        );
        assert_eq!(
            decode(&cluster_key("c", "id-b"), &good),
            Err(Rejection::NameMismatch)
        );
        assert_eq!(
            decode(&cluster_key("b", "id-x"), &good),
            Err(Rejection::NameMismatch)
        );
        assert_eq!(
            decode(&cluster_key("B_1", "x"), &good),
            Err(Rejection::InvalidName)
        );
        assert_eq!(
            decode(&kubeconfig_key("b", "id-b"), &good),
            Err(Rejection::WrongSchema)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn members_and_heartbeats() {
        let mut m = Membership::new("a", "id-a");
        let now = Instant::now();
        let a = m.apply(cluster(record("a", "id-a", 1)), now);
        assert_eq!(a, Applied::default(), "own record is ignored");
        let a = m.apply(cluster(record("b", "id-b", 1)), now);
        assert!(a.members_changed && a.changed);
        assert_eq!(m.members(), vec!["a", "b"]);
        let a = m.apply(cluster(record("b", "id-b", 1)), now);
        assert!(!a.changed && !a.heartbeat, "redelivery changes nothing");
        let a = m.apply(cluster(record("b", "id-b", 2)), now);
        assert!(a.changed && a.heartbeat && !a.members_changed);
        let mut left = record("b", "id-b", 3);
        left.state = MemberState::Left;
        let a = m.apply(cluster(left), now);
        assert!(a.members_changed);
        assert_eq!(m.members(), vec!["a"]);
    }

    #[tokio::test(start_paused = true)]
    async fn conflicts() {
        let mut m = Membership::new("a", "id-a");
        let now = Instant::now();
        m.apply(cluster(record("a", "id-a2", 1)), now);
        m.apply(cluster(record("x", "id-x1", 1)), now);
        m.apply(cluster(record("x", "id-x2", 1)), now);
        m.apply(cluster(record("y", "id-y", 1)), now);
        assert_eq!(m.rivals().len(), 1);
        assert_eq!(m.conflicting_names(), BTreeSet::from(["x".to_owned()]));
        let mut gone = record("x", "id-x2", 2);
        gone.state = MemberState::Left;
        m.apply(cluster(gone), now);
        assert!(
            m.conflicting_names().is_empty(),
            "a cluster that left no longer conflicts"
        );
    }

    #[test]
    fn records_kubernetes_refuses_are_rejected() {
        let mut r = record("b", "id-b", 1);
        r.labels
            .insert("env".into(), "not a valid label value!".into());
        assert_eq!(
            decode(&cluster_key("b", "id-b"), &r.encode().unwrap()),
            Err(Rejection::InvalidRecord)
        );
        let mut r = record("b", "id-b", 1);
        r.labels = (0..1000).map(|i| (format!("k{i}"), "v".into())).collect();
        assert_eq!(
            decode(&cluster_key("b", "id-b"), &r.encode().unwrap()),
            Err(Rejection::InvalidRecord)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_removed_key_leaves_memory() {
        let mut m = Membership::new("a", "id-a");
        let now = Instant::now();
        m.apply(cluster(record("b", "id-b", 1)), now);
        m.apply(cluster(record("x", "id-x1", 1)), now);
        m.apply(cluster(record("x", "id-x2", 1)), now);
        assert_eq!(m.conflicting_names().len(), 1);
        let a = m.remove(&RegistryKey::cluster("x", "id-x2"));
        assert!(a.changed && !a.members_changed, "x is still a member");
        assert!(m.conflicting_names().is_empty(), "the purged rival is gone");
        let a = m.remove(&RegistryKey::cluster("b", "id-b"));
        assert!(a.changed && a.members_changed);
        assert_eq!(m.members(), vec!["a", "x"]);
        assert_eq!(
            m.remove(&RegistryKey::cluster("b", "id-b")),
            Applied::default(),
            "removing twice changes nothing"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn kubeconfig_before_record_is_kept() {
        let mut m = Membership::new("a", "id-a");
        let k = KubeconfigRecord {
            name: "b".into(),
            cluster_id: "id-b".into(),
            kubeconfig: "apiVersion: v1".into(),
            expires_at: None,
        };
        m.apply(Decoded::Kubeconfig(k.clone()), Instant::now());
        m.apply(cluster(record("b", "id-b", 1)), Instant::now());
        assert_eq!(m.peers().next().unwrap().kubeconfig.as_ref(), Some(&k));
    }
}
