//! The read-only view of the fleet that sync follows.
//!
//! The reconciler computes it after each pass from the registry records and the
//! local Cluster objects (an operator disables a peer by annotating its Peer
//! object here) and publishes it on a `tokio::sync::watch` channel: sync
//! re-evaluates which peers are sources whenever it changes. Liveness is
//! deliberately not part of it: a Disconnected peer stays a source, because
//! nothing is ever deleted on silence.

use std::collections::BTreeMap;

use fleetbus_schemas::registry::{ClusterRecord, FeatureRecord, MemberState};

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
        }
    }
}

/// A record as templates see it: the wire JSON minus what changes every
/// heartbeat (so a heartbeat does not look like a change of the fleet).
pub fn template_record(record: &ClusterRecord) -> serde_json::Value {
    let mut v = serde_json::to_value(record).unwrap_or(serde_json::Value::Null);
    if let Some(map) = v.as_object_mut() {
        for volatile in ["heartbeatAt", "seq", "members", "api", "startedAt"] {
            map.remove(volatile);
        }
    }
    v
}

/// The view as of now: records from the membership, the disabled annotation
/// from the local Peer objects, our own record as the publisher builds it.
pub(super) fn compute(
    reg: &super::Registry,
    clusters: &[std::sync::Arc<fleetbus_schemas::crd::Cluster>],
    synced: bool,
) -> FleetView {
    use kube::ResourceExt;

    let local_name = reg.ctx.cfg.cluster_name.clone();
    let info = reg.local_info();
    let own = super::publisher::build_record(reg, MemberState::Active);
    let mut view = FleetView {
        local: LocalView {
            name: local_name.clone(),
            labels: info.labels,
            features: info.features,
            record: template_record(&own),
        },
        peers: BTreeMap::new(),
        synced,
    };
    let disabled = |name: &str| {
        clusters
            .iter()
            .any(|c| c.name_any() == name && super::is_disabled(c))
    };
    let m = reg.membership();
    let mut by_name: BTreeMap<&str, Vec<&ClusterRecord>> = BTreeMap::new();
    for p in m.peers() {
        if p.record.name != local_name {
            by_name.entry(&p.record.name).or_default().push(&p.record);
        }
    }
    for (name, records) in by_name {
        let active: Vec<&ClusterRecord> = records
            .iter()
            .copied()
            .filter(|r| r.state == MemberState::Active)
            .collect();
        // The active record if there is one: a Left record next to an active
        // one with the same name is a previous incarnation.
        let Some(chosen) = active.first().or(records.first()) else {
            continue;
        };
        view.peers.insert(
            name.to_owned(),
            FleetView::peer(chosen, disabled(name), active.len() > 1),
        );
    }
    view
}
