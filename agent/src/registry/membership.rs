//! The fleet as read from the registry bucket: validated records, liveness, conflicts.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::time::Instant;

use super::liveness::Liveness;
use fleetbus_schemas::registry::{
    beat_interval, parse_forgotten_key, parse_revoked_key, ForgottenRecord, RevokedRecord,
    TaintsRecord, TimedTaint,
};
use fleetbus_schemas::DecodeError;

use super::record::{
    run_stamp, same_content, BeatRecord, ClusterRecord, KubeconfigRecord, MemberState, RegistryKey,
};

/// Why a registry entry was skipped (the `reason` label of
/// `fleetbus_registry_rejected_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejection {
    /// The key is not `cluster.<name>.<id>` or `kubeconfig.<name>.<id>` (in
    /// the beats bucket: not `beat.<name>.<id>`).
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
    /// `forgotten.<name>`: the operator forgot the cluster (PROTOCOL §5.5).
    Forgotten(String),
    /// `taints.<name>`: the operator's taints on a cluster (PROTOCOL §6.10);
    /// believed in the secure mode only with the fleet root's signature.
    Taints(TaintsRecord),
    /// `revoked.<name>`: certificates the fleet root revoked (PROTOCOL §5.5);
    /// believed only once its root signature verifies (the watcher's check).
    Revoked(RevokedRecord),
}

/// Validates one registry entry. Pure: garbage anywhere in the bucket must be
/// skipped, never trusted, never fatal.
pub fn decode(key: &str, value: &[u8]) -> Result<Decoded, Rejection> {
    if let Some(name) = parse_forgotten_key(key) {
        let name = name.map_err(|_| Rejection::BadKey)?;
        if crate::cli::validate_dns_label(&name).is_err() {
            return Err(Rejection::InvalidName);
        }
        let r = ForgottenRecord::decode(value).map_err(rejection)?;
        if r.name != name {
            return Err(Rejection::NameMismatch);
        }
        return Ok(Decoded::Forgotten(name));
    }
    if let Some(name) = fleetbus_schemas::registry::parse_taints_key(key) {
        let name = name.map_err(|_| Rejection::BadKey)?;
        if crate::cli::validate_dns_label(&name).is_err() {
            return Err(Rejection::InvalidName);
        }
        let r = TaintsRecord::decode(value).map_err(rejection)?;
        if r.name != name {
            return Err(Rejection::NameMismatch);
        }
        r.validate().map_err(|_| Rejection::InvalidRecord)?;
        return Ok(Decoded::Taints(r));
    }
    if let Some(name) = parse_revoked_key(key) {
        let name = name.map_err(|_| Rejection::BadKey)?;
        if crate::cli::validate_dns_label(&name).is_err() {
            return Err(Rejection::InvalidName);
        }
        let r = RevokedRecord::decode(value).map_err(rejection)?;
        if r.name != name {
            return Err(Rejection::NameMismatch);
        }
        r.validate().map_err(|_| Rejection::InvalidRecord)?;
        return Ok(Decoded::Revoked(r));
    }
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
        // Beats live in their own bucket.
        RegistryKey::Beat { .. } => return Err(Rejection::BadKey),
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
        Decoded::Forgotten(_) | Decoded::Revoked(_) | Decoded::Taints(_) => Ok(()),
    };
    valid.map_err(|_| Rejection::InvalidRecord)?;
    Ok(decoded)
}

/// Whether `new` is older than `held`, records of the same key: an earlier
/// run, or the same run and a lower `seq`.
pub fn record_is_older(held: &ClusterRecord, new: &ClusterRecord) -> bool {
    (new.started_at, new.seq) < (held.started_at, held.seq)
}

/// A beat that passed validation: whose it is (from the key) and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Beat {
    /// Cluster name, from the key.
    pub name: String,
    /// clusterID, from the key.
    pub cluster_id: String,
    /// The value.
    pub beat: BeatRecord,
}

/// Validates one entry of the beats bucket. Pure, like [`decode`]: a forged
/// or broken beat is skipped and counted, never trusted.
pub fn decode_beat(key: &str, value: &[u8]) -> Result<Beat, Rejection> {
    let RegistryKey::Beat { name, cluster_id } =
        RegistryKey::parse(key).map_err(|_| Rejection::BadKey)?
    else {
        return Err(Rejection::BadKey);
    };
    if crate::cli::validate_dns_label(&name).is_err() {
        return Err(Rejection::InvalidName);
    }
    let beat = BeatRecord::decode(value).map_err(rejection)?;
    Ok(Beat {
        name,
        cluster_id,
        beat,
    })
}

/// The key of a beat entry whose value is gone (expired or deleted), if it
/// is a well-formed beat key.
pub fn beat_owner(key: &str) -> Option<(String, String)> {
    match RegistryKey::parse(key) {
        Ok(RegistryKey::Beat { name, cluster_id }) => Some((name, cluster_id)),
        _ => None,
    }
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
    /// When its last new beat arrived, by our wall clock (its Cluster
    /// object's `lastHeartbeatTime`; a peer that beats puts no time of its own).
    pub beat_received_at: Option<DateTime<Utc>>,
}

impl Peer {
    /// Whether the peer counts as alive at `now`. A peer whose liveness is
    /// in the beats bucket must have shown a heartbeat newer than its first
    /// record: the record alone may be a dead peer's, replayed at start-up.
    pub fn alive(&self, now: Instant, peer_timeout: Duration) -> bool {
        self.liveness.alive(now, peer_timeout) && (!self.record.beats || self.liveness.advanced())
    }
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
    /// The protocol a peer announced, when its record is the first seen of
    /// it or says another than the last did (an upgrade): for the skew check.
    pub protocol: Option<u32>,
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
    /// `--peer-timeout`: how long a heartbeat keeps a peer alive (at least).
    peer_timeout: Duration,
    /// Names the operator forgot (`forgotten.<name>` keys): a Peer object of
    /// such a name with no record is deleted, not kept Disconnected.
    forgotten: BTreeSet<String>,
    /// The operator's taints, by cluster name (`taints.<name>` keys).
    taints: BTreeMap<String, Vec<TimedTaint>>,
}

impl Membership {
    /// An empty view for the local cluster `name`/`id`.
    pub fn new(local_name: &str, local_id: &str, peer_timeout: Duration) -> Self {
        Membership {
            local_name: local_name.to_owned(),
            local_id: local_id.to_owned(),
            peers: BTreeMap::new(),
            orphan_kubeconfigs: BTreeMap::new(),
            peer_timeout,
            forgotten: BTreeSet::new(),
            taints: BTreeMap::new(),
        }
    }

    /// Whether the operator forgot the cluster `name` (and has not taken
    /// that back by deleting the `forgotten.<name>` key).
    pub fn is_forgotten(&self, name: &str) -> bool {
        self.forgotten.contains(name)
    }

    /// The operator's taints on `name`.
    pub fn taints(&self, name: &str) -> &[TimedTaint] {
        self.taints.get(name).map_or(&[], Vec::as_slice)
    }

    /// The `taints.<name>` key was deleted or purged: no taints.
    pub fn untaint(&mut self, name: &str) -> bool {
        self.taints.remove(name).is_some()
    }

    /// The `forgotten.<name>` key was deleted or purged.
    pub fn unforget(&mut self, name: &str) -> Applied {
        Applied {
            changed: self.forgotten.remove(name),
            ..Applied::default()
        }
    }

    /// Whether `r` is older than the record held for its key (freshness,
    /// PROTOCOL §5.1): from an earlier run (`startedAt`), or from the same
    /// run with a lower `seq`, e.g. the Active record from before the Left
    /// one replayed by whoever may write the bucket. The same record again
    /// (a watch restart) is not older. Pure; the watcher asks it in the
    /// secure mode only, where records are signed (a replay is then the
    /// only way to put words in a cluster's mouth).
    pub fn is_replay(&self, r: &ClusterRecord) -> bool {
        let key = (r.name.clone(), r.cluster_id.clone());
        self.peers
            .get(&key)
            .is_some_and(|held| record_is_older(&held.record, r))
    }

    fn is_self(&self, name: &str, id: &str) -> bool {
        name == self.local_name && id == self.local_id
    }

    /// Applies a valid entry received at `now`; `live`: it came after the
    /// watch's replay of the bucket (put as we watched, so news).
    pub fn apply(&mut self, decoded: Decoded, now: Instant, live: bool) -> Applied {
        match decoded {
            Decoded::Cluster(r) => self.apply_cluster(*r, now, live),
            Decoded::Kubeconfig(k) => self.apply_kubeconfig(k),
            Decoded::Forgotten(name) => Applied {
                changed: self.forgotten.insert(name),
                ..Applied::default()
            },
            Decoded::Taints(t) => {
                let changed = self.taints.get(&t.name) != Some(&t.taints);
                if t.taints.is_empty() {
                    self.taints.remove(&t.name);
                } else {
                    self.taints.insert(t.name, t.taints);
                }
                Applied {
                    changed,
                    ..Applied::default()
                }
            }
            // What a revocation changes is in the Signers (the watcher);
            // the member's state comes from its Left record.
            Decoded::Revoked(_) => Applied::default(),
        }
    }

    /// A record put counts as a heartbeat (the only kind an agent without
    /// beats sends). What the Cluster objects show changes only when the
    /// record's content does or the peer comes alive: a steady peer's
    /// heartbeat moves its deadline and wakes nobody.
    fn apply_cluster(&mut self, r: ClusterRecord, now: Instant, live: bool) -> Applied {
        if self.is_self(&r.name, &r.cluster_id) {
            return Applied::default();
        }
        let before = self.members();
        let key = (r.name.clone(), r.cluster_id.clone());
        let mut applied = Applied::default();
        let timeout = self.peer_timeout;
        match self.peers.get_mut(&key) {
            Some(p) => {
                let was_alive = p.alive(now, timeout);
                applied.heartbeat = p.liveness.observe(run_stamp(&r.started_at), r.seq, now);
                applied.changed = !same_content(&p.record, &r);
                applied.protocol = (p.record.protocol != r.protocol).then_some(r.protocol);
                p.record = r;
                applied.changed |= p.alive(now, timeout) != was_alive;
            }
            None => {
                let kubeconfig = self.orphan_kubeconfigs.remove(&key);
                let liveness = Liveness::first_seen(run_stamp(&r.started_at), r.seq, now, live);
                applied.protocol = Some(r.protocol);
                self.peers.insert(
                    key,
                    Peer {
                        record: r,
                        liveness,
                        kubeconfig,
                        beat_received_at: None,
                    },
                );
                applied.changed = true;
                applied.heartbeat = true;
                self.expect_intervals();
            }
        }
        applied.members_changed = before != self.members();
        applied
    }

    /// Gives every peer that beats but has not announced its interval yet
    /// the interval the fleet's size calls for (`beat_interval` of its own
    /// base): the fleet grew, and so will their intervals. Peers that joined
    /// together get their first beat judged by the size they joined into.
    fn expect_intervals(&mut self) {
        let size = self.peers.len() + 1;
        for p in self.peers.values_mut() {
            if p.record.beats && !p.liveness.announced() {
                let base =
                    Duration::from_secs(u64::from(p.record.heartbeat_interval_seconds.max(1)));
                p.liveness.expect_interval(beat_interval(base, size));
            }
        }
    }

    /// Applies a valid beat received at `now` (`wall`: our clock). A beat of
    /// a cluster without a record, or whose record says it left, changes
    /// nothing: a beat cannot make a Left peer alive again (its agent must
    /// put an Active record first), nor conjure a peer.
    pub fn apply_beat(&mut self, b: &Beat, now: Instant, wall: DateTime<Utc>) -> Applied {
        let timeout = self.peer_timeout;
        let key = (b.name.clone(), b.cluster_id.clone());
        let Some(p) = self.peers.get_mut(&key) else {
            return Applied::default();
        };
        if p.record.state == MemberState::Left {
            return Applied::default();
        }
        let was_alive = p.alive(now, timeout);
        let heartbeat = p
            .liveness
            .observe(run_stamp(&b.beat.started_at), b.beat.seq, now);
        // A changed interval moves the deadline the reconciler sleeps until.
        let interval_changed = p.liveness.set_interval(b.beat.interval());
        if heartbeat {
            p.beat_received_at = Some(wall);
        }
        Applied {
            members_changed: false,
            changed: interval_changed || p.alive(now, timeout) != was_alive,
            heartbeat,
            protocol: None,
        }
    }

    /// The server expired (or someone deleted) the beat of `name`/`id`.
    pub fn expire_beat(&mut self, name: &str, id: &str, now: Instant) -> Applied {
        let timeout = self.peer_timeout;
        let Some(p) = self.peers.get_mut(&(name.to_owned(), id.to_owned())) else {
            return Applied::default();
        };
        let was_alive = p.alive(now, timeout);
        p.liveness.expire();
        Applied {
            changed: was_alive,
            ..Applied::default()
        }
    }

    /// Whether some active peer puts no beats (an agent of an older
    /// version): it knows liveness only from record puts, so ours must
    /// keep coming every interval while it is in the fleet.
    pub fn has_peer_without_beats(&self) -> bool {
        self.peers
            .values()
            .any(|p| p.record.state == MemberState::Active && !p.record.beats)
    }

    /// How many clusters the fleet counts, this one included (sizes the
    /// beat interval).
    pub fn fleet_size(&self) -> usize {
        1 + self
            .peers
            .values()
            .filter(|p| p.record.state == MemberState::Active)
            .count()
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
            RegistryKey::Beat { .. } => false,
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
            protocol: None,
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
    use crate::registry::record::{beat_key, cluster_key, kubeconfig_key};
    use chrono::TimeZone;

    const T: Duration = Duration::from_secs(6);

    /// A record whose heartbeat number is `seq`.
    pub(crate) fn record(name: &str, id: &str, seq: u64) -> ClusterRecord {
        ClusterRecord {
            fitness: false,
            unserved_kinds: Vec::new(),
            certificate: None,
            name: name.into(),
            cluster_id: id.into(),
            state: MemberState::Active,
            labels: BTreeMap::new(),
            kubernetes_api_endpoints: vec![],
            metadata: Default::default(),
            features: vec![],
            agent_version: "0.1.0".into(),
            protocol: fleetbus_schemas::registry::PROTOCOL_VERSION,
            started_at: Utc.timestamp_opt(1_000, 0).unwrap(),
            heartbeat_at: Utc
                .timestamp_opt(1_000 + i64::try_from(seq).unwrap(), 0)
                .unwrap(),
            heartbeat_interval_seconds: 1,
            seq,
            members: vec![],
            members_digest: None,
            api: Default::default(),
            beats: false,
        }
    }

    fn cluster(r: ClusterRecord) -> Decoded {
        Decoded::Cluster(Box::new(r))
    }

    #[test]
    fn a_peers_protocol_is_told_when_first_seen_and_when_it_changes() {
        let mut m = Membership::new("me", "me-id", T);
        let now = Instant::now();
        let mut old = record("c2", "id", 1);
        old.protocol = fleetbus_schemas::registry::PROTOCOL_BEFORE_VERSIONS;
        assert_eq!(m.apply(cluster(old.clone()), now, true).protocol, Some(1));
        // Its heartbeats say nothing new; its upgrade does; so does a peer
        // seen for the first time.
        old.seq = 2;
        assert_eq!(m.apply(cluster(old), now, true).protocol, None);
        let upgraded = record("c2", "id", 3);
        let ours = fleetbus_schemas::registry::PROTOCOL_VERSION;
        assert_eq!(m.apply(cluster(upgraded), now, true).protocol, Some(ours));
        assert_eq!(
            m.apply(cluster(record("c3", "id", 1)), now, true).protocol,
            Some(ours)
        );
    }

    #[test]
    fn an_older_record_of_a_held_key_is_a_replay() {
        let mut m = Membership::new("me", "me-id", T);
        // Nothing held: nothing to replay over.
        assert!(!m.is_replay(&record("c2", "id", 5)));
        m.apply(cluster(record("c2", "id", 5)), Instant::now(), true);
        let mut left = record("c2", "id", 6);
        left.state = MemberState::Left;
        m.apply(cluster(left.clone()), Instant::now(), true);
        // The Active record from before the Left one, any lower seq, an
        // earlier run: older. The same record again (a watch restart), a
        // newer seq or run, another cluster ID: not.
        assert!(m.is_replay(&record("c2", "id", 5)));
        assert!(m.is_replay(&record("c2", "id", 1)));
        let mut earlier_run = record("c2", "id", 900);
        earlier_run.started_at = Utc.timestamp_opt(999, 0).unwrap();
        assert!(m.is_replay(&earlier_run));
        assert!(!m.is_replay(&left));
        assert!(!m.is_replay(&record("c2", "id", 7)));
        let mut next_run = record("c2", "id", 1);
        next_run.started_at = Utc.timestamp_opt(1_001, 0).unwrap();
        assert!(!m.is_replay(&next_run));
        assert!(!m.is_replay(&record("c2", "other-id", 1)));
    }

    #[test]
    fn revocation_entries_are_checked() {
        use fleetbus_schemas::registry::{revoked_key, RevokedRecord};
        let rec = |name: &str, serial: &str| {
            RevokedRecord {
                name: name.into(),
                serials: vec![serial.into()],
                revoked_at: Utc::now(),
            }
            .encode()
            .unwrap()
        };
        let serial = "0a".repeat(16);
        let key = revoked_key("c2");
        assert!(matches!(
            decode(&key, &rec("c2", &serial)),
            Ok(Decoded::Revoked(r)) if r.serials == [serial.clone()]
        ));
        assert_eq!(
            decode(&key, &rec("c3", &serial)),
            Err(Rejection::NameMismatch)
        );
        assert_eq!(
            decode(&key, &rec("c2", "not-hex")),
            Err(Rejection::InvalidRecord)
        );
        assert_eq!(decode(&key, b"garbage"), Err(Rejection::Undecodable));
        assert_eq!(
            decode("revoked.a.b", &rec("a", &serial)),
            Err(Rejection::BadKey)
        );
        assert_eq!(
            decode(&revoked_key("UP"), &rec("UP", &serial)),
            Err(Rejection::InvalidName)
        );
    }

    #[test]
    fn forgotten_keys_are_checked_and_tracked() {
        use fleetbus_schemas::registry::{forgotten_key, ForgottenRecord};
        let rec = |name: &str| {
            ForgottenRecord {
                name: name.into(),
                forgotten_at: Utc::now(),
            }
            .encode()
            .unwrap()
        };
        let key = forgotten_key("c3");
        assert_eq!(
            decode(&key, &rec("c3")),
            Ok(Decoded::Forgotten("c3".into()))
        );
        assert_eq!(decode(&key, &rec("c2")), Err(Rejection::NameMismatch));
        assert_eq!(decode(&key, b"garbage"), Err(Rejection::Undecodable));
        assert_eq!(decode("forgotten.a.b", &rec("a")), Err(Rejection::BadKey));
        assert_eq!(
            decode(&forgotten_key("UP"), &rec("UP")),
            Err(Rejection::InvalidName)
        );
        let mut m = Membership::new("a", "id-a", Duration::from_secs(2));
        assert!(!m.is_forgotten("c3"));
        let applied = m.apply(Decoded::Forgotten("c3".into()), Instant::now(), true);
        assert!(applied.changed && !applied.members_changed);
        assert!(m.is_forgotten("c3"));
        assert!(
            !m.apply(Decoded::Forgotten("c3".into()), Instant::now(), true)
                .changed
        );
        assert!(m.unforget("c3").changed);
        assert!(!m.is_forgotten("c3"));
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
        let mut m = Membership::new("a", "id-a", T);
        let now = Instant::now();
        let a = m.apply(cluster(record("a", "id-a", 1)), now, true);
        assert_eq!(a, Applied::default(), "own record is ignored");
        let a = m.apply(cluster(record("b", "id-b", 1)), now, true);
        assert!(a.members_changed && a.changed);
        assert_eq!(m.members(), vec!["a", "b"]);
        let a = m.apply(cluster(record("b", "id-b", 1)), now, true);
        assert!(!a.changed && !a.heartbeat, "redelivery changes nothing");
        let a = m.apply(cluster(record("b", "id-b", 2)), now, true);
        assert!(
            a.heartbeat && !a.changed && !a.members_changed,
            "a steady peer's heartbeat moves its deadline and wakes nobody"
        );
        let mut relabelled = record("b", "id-b", 3);
        relabelled.labels.insert("tier".into(), "gold".into());
        let a = m.apply(cluster(relabelled), now, true);
        assert!(a.heartbeat && a.changed, "new content is news");
        let mut left = record("b", "id-b", 3);
        left.state = MemberState::Left;
        let a = m.apply(cluster(left), now, true);
        assert!(a.members_changed);
        assert_eq!(m.members(), vec!["a"]);
    }

    #[tokio::test(start_paused = true)]
    async fn conflicts() {
        let mut m = Membership::new("a", "id-a", T);
        let now = Instant::now();
        m.apply(cluster(record("a", "id-a2", 1)), now, true);
        m.apply(cluster(record("x", "id-x1", 1)), now, true);
        m.apply(cluster(record("x", "id-x2", 1)), now, true);
        m.apply(cluster(record("y", "id-y", 1)), now, true);
        assert_eq!(m.rivals().len(), 1);
        assert_eq!(m.conflicting_names(), BTreeSet::from(["x".to_owned()]));
        let mut gone = record("x", "id-x2", 2);
        gone.state = MemberState::Left;
        m.apply(cluster(gone), now, true);
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
        let mut m = Membership::new("a", "id-a", T);
        let now = Instant::now();
        m.apply(cluster(record("b", "id-b", 1)), now, true);
        m.apply(cluster(record("x", "id-x1", 1)), now, true);
        m.apply(cluster(record("x", "id-x2", 1)), now, true);
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
        let mut m = Membership::new("a", "id-a", T);
        let k = KubeconfigRecord {
            name: "b".into(),
            cluster_id: "id-b".into(),
            kubeconfig: "apiVersion: v1".into(),
            expires_at: None,
            sealed: None,
        };
        m.apply(Decoded::Kubeconfig(k.clone()), Instant::now(), true);
        m.apply(cluster(record("b", "id-b", 1)), Instant::now(), true);
        assert_eq!(m.peers().next().unwrap().kubeconfig.as_ref(), Some(&k));
    }

    fn beat(name: &str, id: &str, seq: u64) -> Beat {
        Beat {
            name: name.into(),
            cluster_id: id.into(),
            beat: BeatRecord {
                seq,
                started_at: Utc.timestamp_opt(1_000, 0).unwrap(),
                interval_ms: 2_000,
            },
        }
    }

    fn beating(name: &str, id: &str, seq: u64) -> ClusterRecord {
        ClusterRecord {
            certificate: None,
            beats: true,
            ..record(name, id, seq)
        }
    }

    #[test]
    fn decode_beat_rejects_garbage() {
        let good = beat("b", "id-b", 3).beat.encode().unwrap();
        assert_eq!(
            decode_beat(&beat_key("b", "id-b"), &good),
            Ok(beat("b", "id-b", 3))
        );
        let a_record = record("b", "id-b", 1).encode().unwrap();
        let beat_b = beat_key("b", "id-b");
        // (key, value, why): every one skipped with its reason.
        let bad: [(&str, &[u8], Rejection); 6] = [
            ("beat.b", &good, Rejection::BadKey),
            (&cluster_key("b", "id-b"), &good, Rejection::BadKey),
            (&beat_key("B_1", "x"), &good, Rejection::InvalidName),
            (&beat_b, b"not json", Rejection::Undecodable),
            (
                &beat_b,
                br#"{"schema":"fleetbus.io/beat/v1"}"#,
                Rejection::Undecodable,
            ),
            (&beat_b, &a_record, Rejection::WrongSchema),
        ];
        for (key, value, want) in bad {
            assert_eq!(decode_beat(key, value), Err(want), "{key}");
        }
        assert_eq!(
            decode(&beat_b, &good),
            Err(Rejection::BadKey),
            "a beat key in the registry bucket"
        );
        assert_eq!(beat_owner("beat.b.id-b"), Some(("b".into(), "id-b".into())));
        assert_eq!(beat_owner("cluster.b.id-b"), None);
    }

    #[tokio::test(start_paused = true)]
    async fn beats_keep_a_beating_peer_alive_and_its_replayed_record_does_not() {
        let mut m = Membership::new("a", "id-a", T);
        let now = Instant::now();
        let wall = Utc::now();
        // Replayed at start-up: a record alone may be a dead peer's.
        m.apply(cluster(beating("b", "id-b", 5)), now, false);
        let p = |m: &Membership| m.peers().next().unwrap().clone();
        assert!(!p(&m).alive(now, T));
        assert!(!m.has_peer_without_beats());
        assert_eq!(m.fleet_size(), 2);
        // An older beat of the run (put before the record) is no news.
        let a = m.apply_beat(&beat("b", "id-b", 4), now, wall);
        assert!(!a.heartbeat && !p(&m).alive(now, T));
        let a = m.apply_beat(&beat("b", "id-b", 6), now, wall);
        assert!(a.heartbeat && a.changed, "it came alive");
        assert_eq!(p(&m).beat_received_at, Some(wall));
        tokio::time::advance(Duration::from_secs(2)).await;
        let a = m.apply_beat(&beat("b", "id-b", 7), Instant::now(), wall);
        assert!(a.heartbeat && !a.changed, "steady: nothing to write");
        // The beat's TTL ran out on the server: dead at once.
        let a = m.expire_beat("b", "id-b", Instant::now());
        assert!(a.changed && !p(&m).alive(Instant::now(), T));
        assert_eq!(
            m.expire_beat("b", "id-b", Instant::now()),
            Applied::default()
        );
        // Beats of strangers change nothing.
        assert_eq!(
            m.apply_beat(&beat("zz", "id-z", 9), Instant::now(), wall),
            Applied::default()
        );
        assert_eq!(m.expire_beat("zz", "id-z", now), Applied::default());
    }

    #[tokio::test(start_paused = true)]
    async fn peers_joining_a_large_fleet_are_not_judged_before_their_first_beat_can_come() {
        use fleetbus_schemas::registry::beat_ttl;
        let mut m = Membership::new("a", "id-a", T);
        // 999 clusters join at once (live records, no beat yet): a fleet of
        // 1,000 beats every 10 s, so `--peer-timeout` (T) alone called them
        // all Disconnected before their first beat could come.
        for i in 0..999 {
            let r = beating(&format!("p{i}"), &format!("id-{i}"), 1);
            m.apply(cluster(r), Instant::now(), true);
        }
        let base = Duration::from_secs(u64::from(beating("x", "y", 1).heartbeat_interval_seconds));
        let ttl = beat_ttl(beat_interval(base, 1_000));
        assert!(ttl > T + Duration::from_secs(1), "{ttl:?}");
        tokio::time::advance(T + Duration::from_secs(1)).await;
        let now = Instant::now();
        assert!(m.peers().all(|p| p.alive(now, T)), "judged too early");
        // No beat within the fleet's TTL: Disconnected.
        tokio::time::advance(ttl).await;
        let now = Instant::now();
        assert!(m.peers().all(|p| !p.alive(now, T)));
        // Once a peer announces its interval, that is what counts.
        let mut b = beat("p1", "id-1", 2);
        b.beat.interval_ms = 1_000;
        m.apply_beat(&b, Instant::now(), Utc::now());
        tokio::time::advance(T + Duration::from_secs(1)).await;
        let p1 = m.peers().find(|p| p.record.name == "p1").unwrap();
        assert!(!p1.alive(Instant::now(), T), "its own 1 s interval: T");
        // A small fleet is judged by `--peer-timeout`, as before.
        let mut small = Membership::new("a", "id-a", T);
        small.apply(cluster(beating("b", "id-b", 1)), Instant::now(), true);
        tokio::time::advance(T + Duration::from_secs(1)).await;
        assert!(!small.peers().next().unwrap().alive(Instant::now(), T));
    }

    #[tokio::test(start_paused = true)]
    async fn a_beat_cannot_make_a_left_peer_alive_again() {
        let mut m = Membership::new("a", "id-a", T);
        m.apply(cluster(beating("b", "id-b", 1)), Instant::now(), true);
        let mut left = beating("b", "id-b", 2);
        left.state = MemberState::Left;
        m.apply(cluster(left), Instant::now(), true);
        tokio::time::advance(Duration::from_secs(60)).await;
        let a = m.apply_beat(&beat("b", "id-b", 3), Instant::now(), Utc::now());
        assert_eq!(a, Applied::default());
        let p = m.peers().next().unwrap();
        assert!(!p.alive(Instant::now(), T));
        assert_eq!(p.record.state, MemberState::Left);
        assert_eq!(m.members(), vec!["a"]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_older_agent_is_alive_by_record_puts_and_asks_for_ours() {
        let mut m = Membership::new("a", "id-a", T);
        m.apply(cluster(record("b", "id-b", 1)), Instant::now(), false);
        assert!(m.has_peer_without_beats());
        let p = m.peers().next().unwrap();
        assert!(p.alive(Instant::now(), T), "legacy: alive from its record");
        tokio::time::advance(Duration::from_secs(7)).await;
        assert!(!m.peers().next().unwrap().alive(Instant::now(), T));
        let a = m.apply(cluster(record("b", "id-b", 2)), Instant::now(), true);
        assert!(a.heartbeat && a.changed, "its record put is its beat");
    }
}
