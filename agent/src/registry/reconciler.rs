//! The reconcile loop: Cluster/ClusterFeature watches, membership changes and liveness timers in; Cluster objects out.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use fleetbus_schemas::crd::{Cluster, ClusterFeature};
use futures::StreamExt;
use kube::runtime::{reflector, watcher};
use kube::Api;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::error::RegistryError;
use super::peer_failures::PeerFailures;
use super::peer_secret::SecretCache;
use super::publisher::build_record;
use super::record::feature_records;
use super::record::{ClusterRecord, MemberState};
use super::shared::Registry;
use super::status::StatusWriter;
use super::view::{
    is_disabled, named, sealing_key, sort_by_name, template_record, FleetView, LocalView,
};
use super::{local, peers};
use crate::kube::fresh_watch;

/// Longest time between two passes even when nothing seems to happen (a
/// missed watch event must not leave a status wrong for long).
const RESYNC: Duration = Duration::from_secs(30);
/// Most Cluster watch events folded in before a pass (a bound, so a flood
/// of events cannot hold the pass back for ever).
const MAX_BATCH: usize = 4096;
/// A fold of Cluster watch events ends after this long without a new one.
/// Taking only the events already queued was not enough: peers joining at
/// the pace of one registry write each arrive one by one, and each woke a
/// pass (CI counted 88 passes for 150 joins). 50 ms is little next to a
/// heartbeat and long next to the gap between events of one burst.
const FOLD_QUIET: Duration = Duration::from_millis(50);
/// Longest a fold may hold a pass back while events keep coming.
const FOLD_MAX: Duration = Duration::from_millis(500);
/// Slack after a liveness deadline, so the pass sees the peer as expired.
const DEADLINE_SLACK: Duration = Duration::from_millis(20);

/// Runs until `cancel`.
#[tracing::instrument(name = "reconciler", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    // Both start again on a new connection when theirs fails (`fresh_watch`):
    // a stale Cluster view is stale labels, features and peers.
    let ctx = &reg.ctx;
    let (clusters, cluster_writer) = reflector::store::<Cluster>();
    let cluster_events = reflector::reflector(
        cluster_writer,
        fresh_watch::watch(
            "clusters",
            &ctx.kube_config,
            ctx.client.clone(),
            Api::<Cluster>::all,
            watcher::Config::default(),
        ),
    );
    let (features, feature_writer) = reflector::store::<ClusterFeature>();
    let feature_events = reflector::reflector(
        feature_writer,
        fresh_watch::watch(
            "clusterfeatures",
            &ctx.kube_config,
            ctx.client.clone(),
            Api::<ClusterFeature>::all,
            watcher::Config::default(),
        ),
    );
    futures::pin_mut!(cluster_events, feature_events);

    let writer = StatusWriter::default();
    let secrets = SecretCache::default();
    let mut failures = PeerFailures::default();
    let mut clusters_listed = false;
    // Sync must not judge "who is a source, who is a sink" on our own labels
    // and features before they have been read (empty ones would make this
    // cluster drop out of every selector for a moment).
    let mut features_listed = false;
    let mut known_self = false;
    let mut dirty = true;
    let mut wake_at = Instant::now() + RESYNC;
    let mut woken_by = "start";
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            ev = cluster_events.next() => {
                if !on_cluster_event(&reg, ev, &mut clusters_listed) {
                    return Ok(());
                }
                // Fold the events of a burst in too: one pass per burst,
                // not per event. A pass over 1,000 peers costs milliseconds,
                // and the objects of 1,000 joining peers are 2,000 events
                // (create, status), each of which woke a pass of its own.
                let fold_end = Instant::now() + FOLD_MAX;
                for _ in 0..MAX_BATCH {
                    let quiet = (Instant::now() + FOLD_QUIET).min(fold_end);
                    let Ok(ev) = tokio::time::timeout_at(quiet, cluster_events.next()).await
                    else {
                        break;
                    };
                    if !on_cluster_event(&reg, ev, &mut clusters_listed) {
                        return Ok(());
                    }
                }
                dirty = true;
                woken_by = "cluster_watch";
            }
            ev = feature_events.next() => {
                match ev {
                    Some(Ok(ev)) => {
                        if matches!(ev, watcher::Event::InitDone) {
                            features_listed = true;
                        }
                        let list = feature_records(&features.state());
                        reg.update_local_info(|i| i.features = list);
                        dirty = true;
                        woken_by = "feature_watch";
                    }
                    Some(Err(error)) => tracing::warn!(%error, "ClusterFeature watch error"),
                    None => return Ok(()),
                }
            }
            _ = reg.membership_changed.notified() => {
                dirty = true;
                woken_by = "membership";
            }
            // Metadata (from the Node watch) or labels/features changed.
            _ = reg.local_changed.notified() => {
                dirty = true;
                woken_by = "local";
            }
            _ = tokio::time::sleep_until(wake_at) => {
                dirty = true;
                woken_by = "timer";
            }
        }
        if !dirty || !clusters_listed {
            continue;
        }
        dirty = false;
        reg.ctx
            .metrics
            .registry_passes
            .get_or_create(&vec![("wake", woken_by)])
            .inc();
        wake_at = pass(
            &reg,
            &writer,
            &secrets,
            &mut failures,
            &clusters,
            features_listed,
            &mut known_self,
        )
        .await;
    }
}

/// Folds one Cluster watch event in (the reflector already stored it);
/// false when the watch ended.
fn on_cluster_event(
    reg: &Registry,
    ev: Option<Result<watcher::Event<Cluster>, watcher::Error>>,
    clusters_listed: &mut bool,
) -> bool {
    match ev {
        Some(Ok(watcher::Event::InitDone)) => *clusters_listed = true,
        Some(Ok(_)) => {}
        Some(Err(error)) => {
            // The probe decides whether the API is down; ask it now.
            reg.probe_now.notify_one();
            tracing::warn!(%error, "Cluster watch error");
        }
        None => return false,
    }
    true
}

/// One pass over the Local and Peer Cluster objects; returns when the next is due.
async fn pass(
    reg: &Registry,
    writer: &StatusWriter,
    secrets: &SecretCache,
    failures: &mut PeerFailures,
    clusters: &reflector::Store<Cluster>,
    features_listed: bool,
    known_self: &mut bool,
) -> Instant {
    // Read before the membership is: if the registry had caught up by
    // now, a successful pass has materialised everything it held.
    let registry_synced = reg.ctx.readiness.registry_synced.load(Ordering::Relaxed);
    let mut snapshot = clusters.state();
    sort_by_name(&mut snapshot);
    let now = Instant::now();
    let local = local::reconcile(reg, writer, &snapshot, now).await;
    let peers = peers::reconcile(reg, writer, secrets, failures, &snapshot, now).await;
    if reg.beats_synced.load(Ordering::Relaxed) {
        reg.set_health(&peers.states);
    }
    // Latched: once known, a later failed pass does not make the fleet
    // unknown again (sync would stall for nothing).
    *known_self |= local.is_ok() && features_listed;
    reg.set_fleet(fleet_view(reg, &snapshot, registry_synced && *known_self));
    let mut wake_at = now + RESYNC;
    if let Some(at) = peers.wake_at {
        wake_at = wake_at.min(at + DEADLINE_SLACK);
    }
    match local {
        Ok(refresh) => {
            if let Some(r) = refresh {
                wake_at = wake_at.min(r);
            }
            // Peers refused for good do not hold readiness back (they are
            // reported on their own); peers still waiting for a retry do.
            if registry_synced
                && peers.pending == 0
                && !reg.ctx.readiness.caught_up.swap(true, Ordering::Relaxed)
            {
                tracing::info!("initial reconcile done");
            }
        }
        Err(e) => {
            if let RegistryError::Kube { source, .. } = &e {
                if crate::kube::client::is_transient(source) {
                    reg.probe_now.notify_one();
                }
            }
            tracing::warn!(error = %crate::report(&e), "reconcile of the Local Cluster object failed; retrying");
            wake_at = wake_at.min(now + Duration::from_secs(1));
        }
    }
    wake_at
}

/// The view of the fleet as of now: records from the membership, the
/// disabled annotation from the local Peer objects, our own record as the
/// publisher builds it.
fn fleet_view(reg: &Registry, clusters: &[Arc<Cluster>], synced: bool) -> FleetView {
    let info = reg.local_info();
    let own = build_record(reg, MemberState::Active);
    let m = reg.membership();
    let local = LocalView {
        name: reg.ctx.cfg.cluster_name.clone(),
        labels: info.labels,
        features: info.features,
        record: template_record(&own),
        taints: m.taints(&reg.ctx.cfg.cluster_name).to_vec(),
    };
    let disabled = |name: &str| named(clusters, name).is_some_and(|c| is_disabled(c));
    // Sealing keys only from certificates the fleet root vouches for; without
    // a root (insecure mode) nothing is sealed to anyone.
    let now = chrono::Utc::now();
    let root = reg.ctx.cfg.trust.as_ref().map(|t| *t.root());
    let sealing = |r: &ClusterRecord| root.as_ref().and_then(|root| sealing_key(r, root, now));
    let mut view = FleetView::compute(
        local,
        m.peers().map(|p| &p.record),
        disabled,
        sealing,
        synced,
    );
    for (name, peer) in &mut view.peers {
        peer.taints = m.taints(name).to_vec();
    }
    view
}
