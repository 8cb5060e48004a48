//! The read-only view of the fleet that sync follows.
//!
//! The reconciler computes it after each pass from the registry records and the
//! local Cluster objects (an operator disables a peer by annotating its Peer
//! object here) and publishes it on a `tokio::sync::watch` channel: sync
//! re-evaluates which peers are sources whenever it changes. Liveness is
//! deliberately not part of it: a Disconnected peer stays a source, because
//! nothing is ever deleted on silence.

use std::collections::BTreeMap;

use fleetbus_schemas::crd::{Cluster, ClusterState, ClusterType};
use fleetbus_schemas::registry::{ClusterRecord, FeatureRecord, MemberState};
use fleetbus_schemas::seal::SealingPublicKey;
use fleetbus_schemas::well_known::ANNOTATION_CLUSTER_DISABLED;
use kube::ResourceExt;

/// Sorts a snapshot of the Cluster objects by name, for [`named`].
pub fn sort_by_name(clusters: &mut [std::sync::Arc<Cluster>]) {
    clusters.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
}

/// The Cluster object called `name` in a snapshot sorted by
/// [`sort_by_name`]: a binary search, because a pass looks up every peer and a
/// scan per peer made each pass O(N²) at 1,000 peers.
pub fn named<'a>(
    clusters: &'a [std::sync::Arc<Cluster>],
    name: &str,
) -> Option<&'a std::sync::Arc<Cluster>> {
    debug_assert!(clusters.is_sorted_by(|a, b| a.metadata.name <= b.metadata.name));
    clusters
        .binary_search_by(|c| c.metadata.name.as_deref().unwrap_or_default().cmp(name))
        .ok()
        .and_then(|i| clusters.get(i))
}

/// A peer's health as placement reads it: its state and since when (by
/// this agent's clock: a restarted agent counts a failover window again,
/// which only delays a failover). Kept apart from the [`FleetView`], which
/// changes only when what sync copies may change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerHealth {
    /// `Ready`, `Disconnected` or `ApiUnreachable` (others are not candidates).
    pub state: &'static str,
    /// Since when.
    pub since: chrono::DateTime<chrono::Utc>,
}

/// Every peer's health, by name.
pub type FleetHealth = BTreeMap<String, PeerHealth>;

/// One peer as sync sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerView {
    /// Cluster name.
    pub name: String,
    /// Labels of the peer's own Cluster object (from its record).
    pub labels: BTreeMap<String, String>,
    /// The peer's advertised ClusterFeatures.
    pub features: Vec<FeatureRecord>,
    /// The agent announced that it left the fleet: its copies are collected.
    pub left: bool,
    /// An operator disabled sync from it (`fleetbus.io/cluster-disabled` on
    /// the local Peer object).
    pub disabled: bool,
    /// Two active records claim this name: who is who is unclear.
    pub name_conflict: bool,
    /// The record as JSON, for `{{ .Cluster… }}` templates.
    pub record: serde_json::Value,
    /// The peer's sealing key, from its certificate (PROTOCOL §4.8): what is
    /// sealed to it. None: it has none (insecure mode), and gets nothing sealed.
    pub sealing_key: Option<SealingPublicKey>,
    /// The operator's taints on it (`taints.<name>`, PROTOCOL §6.10).
    pub taints: Vec<fleetbus_schemas::registry::TimedTaint>,
    /// Kinds the fleet's rules name that the peer does not serve (its
    /// record's `unservedKinds`): placement does not choose it for them.
    pub unserved_kinds: Vec<String>,
    /// Its agent says and takes back `unfit` (its record's `fitness`).
    pub fitness: bool,
}

impl PeerView {
    /// Whether objects may be taken from this peer at all (rules may narrow it).
    pub fn may_be_source(&self) -> bool {
        !self.left && !self.disabled && !self.name_conflict
    }
}

/// The local cluster as sync sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LocalView {
    /// This cluster's name.
    pub name: String,
    /// Labels of the Local Cluster object.
    pub labels: BTreeMap<String, String>,
    /// The local ClusterFeatures.
    pub features: Vec<FeatureRecord>,
    /// Our own record as JSON, for `{{ .LocalCluster… }}` templates.
    pub record: serde_json::Value,
    /// The operator's taints on this cluster (as on a peer), for a preview
    /// that asks whether placement would choose it.
    pub taints: Vec<fleetbus_schemas::registry::TimedTaint>,
}

/// The whole fleet as sync sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FleetView {
    /// This cluster.
    pub local: LocalView,
    /// Every other cluster with a record, by name.
    pub peers: BTreeMap<String, PeerView>,
    /// The registry has been read to its end at least once (before that, an
    /// absent peer may simply not have been read yet).
    pub synced: bool,
}

impl FleetView {
    /// An empty view for the cluster `name`.
    pub fn new(name: &str) -> Self {
        FleetView {
            local: LocalView {
                name: name.to_owned(),
                ..LocalView::default()
            },
            ..FleetView::default()
        }
    }

    /// The view with `local` as given and, for each other name among
    /// `records`, the peer as its active record shows it (a Left record next
    /// to an active one of the same name is a previous incarnation). A name
    /// with two active records is in conflict; `disabled` says which names an
    /// operator disabled.
    /// `sealing_key` gives the sealing key of a peer's record, if it has a
    /// certificate that verifies ([`sealing_key`]).
    pub fn compute<'a>(
        local: LocalView,
        records: impl IntoIterator<Item = &'a ClusterRecord>,
        disabled: impl Fn(&str) -> bool,
        sealing_key: impl Fn(&ClusterRecord) -> Option<SealingPublicKey>,
        synced: bool,
    ) -> Self {
        let mut by_name: BTreeMap<&str, Vec<&ClusterRecord>> = BTreeMap::new();
        for r in records {
            if r.name != local.name {
                by_name.entry(&r.name).or_default().push(r);
            }
        }
        let mut peers = BTreeMap::new();
        for (name, records) in by_name {
            let active: Vec<&ClusterRecord> = records
                .iter()
                .copied()
                .filter(|r| r.state == MemberState::Active)
                .collect();
            let Some(chosen) = active.first().or(records.first()) else {
                continue;
            };
            let mut peer = FleetView::peer(chosen, disabled(name), active.len() > 1);
            peer.sealing_key = sealing_key(chosen);
            peers.insert(name.to_owned(), peer);
        }
        FleetView {
            local,
            peers,
            synced,
        }
    }

    /// The view of one peer record.
    pub fn peer(record: &ClusterRecord, disabled: bool, name_conflict: bool) -> PeerView {
        PeerView {
            name: record.name.clone(),
            labels: record.labels.clone(),
            features: record.features.clone(),
            left: record.state == MemberState::Left,
            disabled,
            name_conflict,
            record: template_record(record),
            sealing_key: None,
            taints: Vec::new(),
            unserved_kinds: record.unserved_kinds.clone(),
            fitness: record.fitness,
        }
    }
}

/// The sealing key a peer's record certifies (PROTOCOL §4.8): its
/// certificate, if it verifies against the fleet `root` for the record's name
/// at `now`; None for a record without one, or one that does not verify (a
/// peer is sealed to only with a key the root vouches for).
pub fn sealing_key(
    record: &ClusterRecord,
    root: &fleetbus_schemas::trust::VerifyingKey,
    now: chrono::DateTime<chrono::Utc>,
) -> Option<SealingPublicKey> {
    let cert =
        fleetbus_schemas::trust::SignedCertificate::decode(record.certificate.as_deref()?).ok()?;
    fleetbus_schemas::trust::verify(&cert, root, &record.name, now).ok()?;
    SealingPublicKey::from_bytes(&cert.cert.sealing_key).ok()
}

/// A record as templates see it: the wire JSON minus what changes every
/// heartbeat (so a heartbeat does not look like a change of the fleet).
pub fn template_record(record: &ClusterRecord) -> serde_json::Value {
    // Without the members list before it becomes JSON: at 1,000 clusters it
    // is 1,000 names per record, turned into JSON and dropped for every peer
    // at every pass otherwise.
    let slim = ClusterRecord {
        fitness: false,
        unserved_kinds: Vec::new(),
        certificate: None,
        name: record.name.clone(),
        cluster_id: record.cluster_id.clone(),
        state: record.state,
        labels: record.labels.clone(),
        kubernetes_api_endpoints: record.kubernetes_api_endpoints.clone(),
        metadata: record.metadata.clone(),
        features: record.features.clone(),
        agent_version: record.agent_version.clone(),
        protocol: record.protocol,
        started_at: record.started_at,
        heartbeat_at: record.heartbeat_at,
        heartbeat_interval_seconds: record.heartbeat_interval_seconds,
        seq: record.seq,
        members: Vec::new(),
        members_digest: None,
        api: record.api.clone(),
        beats: record.beats,
    };
    let mut v = serde_json::to_value(&slim).unwrap_or(serde_json::Value::Null);
    if let Some(map) = v.as_object_mut() {
        for volatile in [
            "heartbeatAt",
            "seq",
            "members",
            "membersDigest",
            "api",
            "startedAt",
        ] {
            map.remove(volatile);
        }
    }
    v
}

/// Whether later sync may take objects from this peer: not when an operator
/// disabled it (annotation `fleetbus.io/cluster-disabled`), nor when its state
/// is Disabled or Conflict (who is who is unclear), nor for the Local object.
pub fn sync_allowed(cluster: &Cluster) -> bool {
    if cluster
        .annotations()
        .contains_key(ANNOTATION_CLUSTER_DISABLED)
    {
        return false;
    }
    let status = cluster.status.as_ref();
    if status.and_then(|s| s.type_) != Some(ClusterType::Peer) {
        return false;
    }
    !matches!(
        status.and_then(|s| s.state),
        Some(ClusterState::Disabled | ClusterState::Conflict)
    )
}

/// The peer-disabled annotation is set on this Cluster object.
pub fn is_disabled(cluster: &Cluster) -> bool {
    cluster
        .annotations()
        .contains_key(ANNOTATION_CLUSTER_DISABLED)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::membership::tests::record;
    use fleetbus_schemas::crd::{ClusterSpec, ClusterStatus};

    #[test]
    fn named_finds_every_object_of_a_sorted_snapshot_and_nothing_else() {
        let mut snapshot: Vec<std::sync::Arc<Cluster>> = ["c", "a", "b", "sim-0999", "sim-0001"]
            .iter()
            .map(|n| std::sync::Arc::new(Cluster::new(n, ClusterSpec::default())))
            .collect();
        sort_by_name(&mut snapshot);
        for n in ["a", "b", "c", "sim-0001", "sim-0999"] {
            assert_eq!(
                named(&snapshot, n).map(|c| c.name_any()),
                Some(n.to_owned())
            );
        }
        for n in ["", "d", "sim-0500", "A"] {
            assert!(named(&snapshot, n).is_none(), "{n}");
        }
        assert!(named(&[], "a").is_none());
    }

    fn peer(state: ClusterState, disabled: bool) -> Cluster {
        let mut c = Cluster::new("b", ClusterSpec::default());
        c.status = Some(ClusterStatus {
            type_: Some(ClusterType::Peer),
            state: Some(state),
            ..ClusterStatus::default()
        });
        if disabled {
            c.annotations_mut()
                .insert(ANNOTATION_CLUSTER_DISABLED.into(), "true".into());
        }
        c
    }

    #[test]
    fn sync_allowed_only_from_enabled_unconflicted_peers() {
        assert!(sync_allowed(&peer(ClusterState::Ready, false)));
        assert!(sync_allowed(&peer(ClusterState::Disconnected, false)));
        assert!(!sync_allowed(&peer(ClusterState::Ready, true)));
        assert!(!sync_allowed(&peer(ClusterState::Disabled, false)));
        assert!(!sync_allowed(&peer(ClusterState::Conflict, false)));
        let mut local = peer(ClusterState::Ready, false);
        local.status.as_mut().unwrap().type_ = Some(ClusterType::Local);
        assert!(!sync_allowed(&local));
    }

    #[test]
    fn the_view_shows_each_peer_by_its_active_record() {
        let local = LocalView {
            name: "a".into(),
            ..LocalView::default()
        };
        let own = record("a", "id-a", 1);
        let mut old_b = record("b", "id-b-old", 1);
        old_b.state = MemberState::Left;
        let mut new_b = record("b", "id-b", 2);
        new_b.labels.insert("env".into(), "prod".into());
        let c1 = record("c", "id-c1", 1);
        let c2 = record("c", "id-c2", 1);
        let mut gone = record("d", "id-d", 1);
        gone.state = MemberState::Left;
        let records = [&own, &old_b, &new_b, &c1, &c2, &gone];
        let view = FleetView::compute(local, records, |name| name == "c", |_| None, true);
        assert!(view.synced);
        assert_eq!(view.local.name, "a");
        assert_eq!(view.peers.keys().collect::<Vec<_>>(), ["b", "c", "d"]);
        let b = &view.peers["b"];
        assert!(!b.left, "the active record wins over the Left one");
        assert_eq!(b.labels["env"], "prod");
        assert!(b.may_be_source());
        let c = &view.peers["c"];
        assert!(c.name_conflict && c.disabled && !c.may_be_source());
        assert!(view.peers["d"].left);
    }
}
