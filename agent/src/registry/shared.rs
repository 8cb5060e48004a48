//! The state the registry tasks share: membership, what we publish about ourselves, and the notifies between the tasks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use async_nats::jetstream::kv;
use fleetbus_schemas::crd::ClusterMetadata;
use fleetbus_schemas::registry::ApiHealth;
use tokio::sync::{watch, Notify};

use super::membership::Membership;
use super::record;
use super::view::{FleetHealth, FleetView, PeerHealth};
use crate::context::Context;

/// What this cluster publishes about itself besides identity.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LocalInfo {
    /// Labels of the Local Cluster object.
    pub labels: BTreeMap<String, String>,
    /// The local ClusterFeatures, sorted by feature name.
    pub features: Vec<record::FeatureRecord>,
    /// Facts from the Nodes and /version.
    pub metadata: ClusterMetadata,
    /// Kinds the rules name that discovery does not serve here (set by
    /// sync after each pass; see `ClusterRecord::unserved_kinds`).
    pub unserved_kinds: Vec<String>,
}

/// State shared by the registry tasks (one per agent, behind an `Arc`):
/// membership, what we publish about ourselves, and the notifies that connect
/// the publisher, watcher and reconciler. Agent-wide handles are in `ctx`.
pub struct Registry {
    /// What every task shares (config, clients, metrics, readiness).
    pub ctx: Arc<Context>,
    /// The registry bucket.
    pub kv: kv::Store,
    /// The beats bucket.
    pub beats: kv::Store,
    /// The beats watch has delivered the bucket's current beats: until then
    /// a peer that beats may look dead only because its beat is still on
    /// its way, so its Cluster object is not judged.
    pub beats_synced: AtomicBool,
    /// Wakes the beats watcher: the records watch has caught up (beats of
    /// clusters whose record is not known yet would be dropped).
    pub records_caught_up: Notify,
    /// Wakes the beats watcher to watch again (the beats bucket was recreated).
    pub rewatch_beats: Notify,
    /// The fleet as read from the bucket.
    membership: Mutex<Membership>,
    /// What we publish about ourselves.
    local: Mutex<LocalInfo>,
    /// The read-only view of the fleet that sync follows (see [`FleetView`]).
    fleet: watch::Sender<Arc<FleetView>>,
    /// Every peer's health and since when, for placement (see [`FleetHealth`]).
    health: watch::Sender<Arc<FleetHealth>>,
    /// Wakes the reconciler: the membership changed.
    pub membership_changed: Notify,
    /// Wakes the publisher: something we publish changed.
    pub publish_now: Notify,
    /// Wakes the reconciler: something we publish changed (the Local object shows it).
    pub local_changed: Notify,
    /// When this agent last put its record successfully (the Local object's
    /// `lastHeartbeatTime`).
    last_heartbeat: Mutex<Option<chrono::DateTime<chrono::Utc>>>,
    /// The local API server's health as the probe last saw it (published).
    api_health: Mutex<ApiHealth>,
    /// Wakes the API probe early (a watch broke).
    pub probe_now: Notify,
    /// Wakes the registry watcher to watch again (the bucket was recreated).
    pub rewatch: Notify,
    /// Wakes the kubeconfig publisher: the bucket was recreated, so the
    /// reader kubeconfig record it held is gone until published again.
    pub republish_kubeconfig: Notify,
    /// Which incarnation of the registry bucket the watcher watches (its
    /// stream's creation time; see `bus::layout::Ensured`).
    bucket_incarnation: Mutex<String>,
    /// Heartbeat sequence number within this run (record puts and beats).
    seq: AtomicU64,
    /// The record we last put (to put it again only when it changed).
    published: Mutex<Option<record::ClusterRecord>>,
}

impl Registry {
    /// A registry over the registry bucket `kv` and the beats bucket `beats`.
    pub fn new(ctx: Arc<Context>, kv: kv::Store, beats: kv::Store) -> Self {
        let (fleet, _) = watch::channel(Arc::new(FleetView::new(&ctx.cfg.cluster_name)));
        Registry {
            membership: Mutex::new(Membership::new(
                &ctx.cfg.cluster_name,
                &ctx.cluster_id,
                ctx.cfg.peer_timeout,
            )),
            local: Mutex::new(LocalInfo::default()),
            ctx,
            kv,
            beats,
            beats_synced: AtomicBool::new(false),
            records_caught_up: Notify::new(),
            rewatch_beats: Notify::new(),
            fleet,
            health: watch::channel(Arc::new(FleetHealth::new())).0,
            membership_changed: Notify::new(),
            publish_now: Notify::new(),
            local_changed: Notify::new(),
            last_heartbeat: Mutex::new(None),
            api_health: Mutex::new(ApiHealth::reachable()),
            probe_now: Notify::new(),
            rewatch: Notify::new(),
            republish_kubeconfig: Notify::new(),
            bucket_incarnation: Mutex::new(String::new()),
            seq: AtomicU64::new(0),
            published: Mutex::new(None),
        }
    }

    /// Follows the fleet as sync needs it: peers with their labels, features
    /// and whether they may be a source. The receiver sees every change.
    pub fn fleet(&self) -> watch::Receiver<Arc<FleetView>> {
        self.fleet.subscribe()
    }

    /// Publishes a new fleet view if it differs from the current one.
    pub fn set_fleet(&self, view: FleetView) {
        self.fleet.send_if_modified(|current| {
            if **current == view {
                return false;
            }
            *current = Arc::new(view);
            true
        });
    }

    /// Follows every peer's health (changes only when a state does).
    pub fn health(&self) -> watch::Receiver<Arc<FleetHealth>> {
        self.health.subscribe()
    }

    /// Publishes the peers' states as a pass judged them: a state that
    /// changed starts its `since` now; peers not named are forgotten.
    pub fn set_health(&self, states: &[(String, &'static str)]) {
        let now = chrono::Utc::now();
        self.health.send_if_modified(|current| {
            let next: FleetHealth = states
                .iter()
                .map(|(name, state)| {
                    let since = current
                        .get(name)
                        .filter(|h| h.state == *state)
                        .map_or(now, |h| h.since);
                    (name.clone(), PeerHealth { state, since })
                })
                .collect();
            if **current == next {
                return false;
            }
            *current = Arc::new(next);
            true
        });
    }

    /// Locks the membership. A std mutex is right here: every critical section
    /// is a few map operations and never awaits. A poisoned lock only means a
    /// panic elsewhere; the data is still consistent map state, so use it.
    pub fn membership(&self) -> MutexGuard<'_, Membership> {
        self.membership.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The next heartbeat sequence number (1, 2, ...).
    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// A copy of what we publish about ourselves.
    pub fn local_info(&self) -> LocalInfo {
        self.local.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Changes what we publish; republishes promptly when it changed.
    pub fn update_local_info(&self, f: impl FnOnce(&mut LocalInfo)) {
        let changed = {
            let mut guard = self.local.lock().unwrap_or_else(|p| p.into_inner());
            let before = guard.clone();
            f(&mut guard);
            *guard != before
        };
        if changed {
            self.publish_now.notify_one();
            self.local_changed.notify_one();
        }
    }

    /// Records that our record with heartbeat time `at` is in the bucket.
    pub fn note_heartbeat(&self, at: chrono::DateTime<chrono::Utc>) {
        *self
            .last_heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(at);
    }

    /// Records the registry bucket's incarnation; returns whether it differs
    /// from the one recorded before (none recorded counts as no change).
    pub fn note_bucket_incarnation(&self, incarnation: &str) -> bool {
        if incarnation.is_empty() {
            return false;
        }
        let mut guard = self
            .bucket_incarnation
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let changed = !guard.is_empty() && *guard != incarnation;
        incarnation.clone_into(&mut guard);
        changed
    }

    /// Remembers `r` as the record in the bucket.
    pub fn note_published(&self, r: &record::ClusterRecord) {
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) = Some(r.clone());
    }

    /// Whether `r` says something the record in the bucket does not (any
    /// field but which put it is: `heartbeatAt`, `seq`).
    pub fn differs_from_published(&self, r: &record::ClusterRecord) -> bool {
        let guard = self.published.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .is_none_or(|old| !record::same_content(old, r))
    }

    /// Whether the record this agent last put is one readers accept. Only
    /// such a record is put back over a foreign write: an invalid one would
    /// be refused by this agent's own watch again, and put back again.
    pub fn published_is_valid(&self) -> bool {
        let guard = self.published.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().is_some_and(|r| r.validate().is_ok())
    }

    /// Forgets the record in the bucket (the bucket was recreated empty).
    pub fn forget_published(&self) {
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The local API server's health as last probed.
    pub fn api_health(&self) -> ApiHealth {
        self.api_health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Records a probe result: `/readyz` follows it at once, and a change is
    /// published at once (peers show it within one heartbeat).
    pub fn set_api_health(&self, health: ApiHealth) {
        self.ctx
            .readiness
            .kube
            .store(health.reachable, Ordering::Relaxed);
        let changed_reachability = {
            let mut guard = self.api_health.lock().unwrap_or_else(|p| p.into_inner());
            let flipped = guard.reachable != health.reachable;
            *guard = health.clone();
            flipped
        };
        // Only a flip is news; a new error text while still down is not worth
        // an extra publish (the next heartbeat carries it anyway).
        if changed_reachability {
            if health.reachable {
                tracing::info!("local API server answers again");
            } else {
                tracing::warn!(reason = %health.message, "local API server unreachable");
            }
            self.publish_now.notify_one();
        }
    }

    /// When our record was last put successfully (None before the first put).
    pub fn last_heartbeat(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        *self
            .last_heartbeat
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}
