//! The inventory task: keeps one ClusterProfile per fleet member in the
//! agent's namespace, and this cluster's ClusterProperties, as the fleet
//! changes. A CRD that is not installed is reported (log, metric) and
//! looked for again until it is served; nothing fails meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fleetbus_schemas::crd::Cluster;
use fleetbus_schemas::multicluster::{
    ClusterManager, ClusterProfile, ClusterProfileSpec, CLUSTER_MANAGER_LABEL, CLUSTER_SET_LABEL,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::runtime::{reflector, watcher};
use kube::{Api, ResourceExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::identity::{self, IdentityPropertyError};
use super::pace::{self, Step};
use super::profile::{self, Desired, Inputs, MANAGER};
use crate::registry::{FleetView, Registry};

/// The ClusterProfile CRD's name, for messages and the missing-CRD metric.
pub const PROFILE_CRD: &str = "clusterprofiles.multicluster.x-k8s.io";

/// How often a missing CRD is looked for.
const LOOK_AGAIN: Duration = Duration::from_secs(5);
/// How often the profiles are listed again (a cache of what the API server
/// holds is kept between lists; a failed write lists again at once).
const RESYNC: Duration = Duration::from_secs(60);
/// The least time between two passes: the Cluster objects change with every
/// peer's state, and one pass answers a burst of them.
const MIN_PASS: Duration = Duration::from_secs(1);

/// What the task keeps between passes.
#[derive(Default)]
struct State {
    /// The profiles in the namespace as last read or written, by name.
    profiles: BTreeMap<String, ClusterProfile>,
    /// When they were last listed.
    listed_at: Option<Instant>,
    /// When each profile's status was last written.
    last_write: HashMap<String, Instant>,
    /// Which CRDs were reported missing (reported once per absence).
    missing: BTreeMap<&'static str, bool>,
    /// The ClusterProperty resource, once served; the name was claimed.
    properties: Option<ApiResource>,
    /// This cluster's ClusterProperties as last listed.
    local_properties: BTreeMap<String, String>,
    /// The namespace label was set.
    labelled: bool,
    /// Profiles owned by another manager, already reported.
    foreign: std::collections::BTreeSet<String>,
    /// Each peer's API server and CA, from its kubeconfig Secret.
    endpoints: BTreeMap<String, (String, Option<String>)>,
    /// When the endpoints were last read.
    endpoints_at: Option<Instant>,
}

/// Runs until `cancel`; on a leave (`--leave-on-shutdown`), withdraws this
/// cluster from the ClusterSet first.
#[tracing::instrument(name = "inventory", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) {
    let (clusters, cluster_writer) = reflector::store::<Cluster>();
    // Started again on a new connection when its own fails (`fresh_watch`).
    let events = reflector::reflector(
        cluster_writer,
        crate::kube::fresh_watch::watch(
            "clusters (inventory)",
            &reg.ctx.kube_config,
            reg.ctx.client.clone(),
            Api::<Cluster>::all,
            watcher::Config::default(),
        ),
    );
    futures::pin_mut!(events);
    let mut fleet = reg.fleet();
    let mut state = State::default();
    let mut listed = false;
    let mut wake_at = Instant::now();
    let mut last_pass: Option<Instant> = None;
    let mut dirty = true;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => break,
            ev = events.next() => match ev {
                Some(Ok(watcher::Event::InitDone)) => { listed = true; dirty = true; }
                Some(Ok(_)) => dirty = true,
                Some(Err(error)) => tracing::debug!(%error, "Cluster watch error"),
                None => return,
            },
            changed = fleet.changed() => {
                if changed.is_err() { return; }
                dirty = true;
            }
            _ = tokio::time::sleep_until(wake_at) => dirty = true,
        }
        let view = fleet.borrow().clone();
        if !dirty || !listed || !view.synced {
            continue;
        }
        // A burst of changes is answered by one pass, at most one a second.
        if let Some(earliest) = last_pass.map(|at| at + MIN_PASS) {
            if Instant::now() < earliest {
                wake_at = wake_at.min(earliest);
                continue;
            }
        }
        dirty = false;
        last_pass = Some(Instant::now());
        wake_at = pass(&reg, &mut state, &clusters.state(), &view, false).await;
    }
    if reg.ctx.cfg.leave_on_shutdown {
        let view = fleet.borrow().clone();
        leave(&reg, &mut state, &clusters.state(), &view).await;
    }
}

/// Leaving the fleet: `clusterset.k8s.io` goes, and this cluster's own
/// profile says it is no longer Joined. Bounded: the agent is stopping.
async fn leave(reg: &Registry, state: &mut State, clusters: &[Arc<Cluster>], view: &FleetView) {
    let work = async {
        if let Some(ar) = state.properties.clone() {
            if let Err(e) = identity::set_cluster_set(&reg.ctx.client, &ar, None).await {
                tracing::warn!(error = %crate::report(&e), "could not delete the clusterset.k8s.io ClusterProperty");
            }
        }
        pass(reg, state, clusters, view, true).await;
    };
    if tokio::time::timeout(Duration::from_secs(2), work)
        .await
        .is_err()
    {
        tracing::warn!("leaving: the ClusterSet's properties were not all withdrawn in time");
    }
}

/// One pass; returns when the next is due.
/// The ClusterProperties of this cluster's identity (PROTOCOL §8.3): the
/// name claimed once, the ClusterSet written while a member; returns when to
/// look again sooner than the resync.
async fn identity_pass(
    reg: &Registry,
    state: &mut State,
    leaving: bool,
    now: Instant,
) -> Option<Instant> {
    let cfg = &reg.ctx.cfg;
    let client = &reg.ctx.client;
    let mut next: Option<Instant> = None;
    let mut soon = |at: Instant| next = Some(next.map_or(at, |n: Instant| n.min(at)));
    match identity::served(client).await {
        Ok(Some(ar)) => {
            report_served(reg, state, identity::CRD, true);
            if state.properties.is_none() {
                match identity::claim(client, &ar, &cfg.cluster_name).await {
                    Ok(()) => state.properties = Some(ar.clone()),
                    Err(e @ IdentityPropertyError::Conflict { .. }) => {
                        // Claimed at start-up; a conflict now means it was
                        // changed while the agent ran: not overwritten.
                        tracing::error!(error = %e, "this cluster's name in its ClusterSet conflicts");
                        soon(now + RESYNC);
                    }
                    Err(e) => {
                        tracing::warn!(error = %crate::report(&e), "could not claim this cluster's name");
                        soon(now + LOOK_AGAIN);
                    }
                }
            }
            if state.properties.is_some() && !leaving {
                let fleet = Some(cfg.fleet_name.as_str());
                if let Err(e) = identity::set_cluster_set(client, &ar, fleet).await {
                    tracing::warn!(error = %crate::report(&e), "could not write the clusterset.k8s.io ClusterProperty");
                    soon(now + LOOK_AGAIN);
                }
                match identity::list(client, &ar).await {
                    Ok(p) => state.local_properties = p,
                    Err(e) => {
                        tracing::warn!(error = %crate::report(&e), "could not list ClusterProperties")
                    }
                }
            }
        }
        Ok(None) => {
            report_served(reg, state, identity::CRD, false);
            state.properties = None;
            soon(now + LOOK_AGAIN);
        }
        Err(e) => {
            tracing::debug!(error = %e, "discovery of ClusterProperty failed");
            soon(now + LOOK_AGAIN);
        }
    }
    next
}

async fn pass(
    reg: &Registry,
    state: &mut State,
    clusters: &[Arc<Cluster>],
    view: &FleetView,
    leaving: bool,
) -> Instant {
    let now = Instant::now();
    let cfg = &reg.ctx.cfg;
    let client = &reg.ctx.client;
    let mut next = now + RESYNC;
    // The identity first: it does not need the profiles' CRD.
    if let Some(at) = identity_pass(reg, state, leaving, now).await {
        next = next.min(at);
    }
    match profiles_served(client).await {
        Ok(true) => report_served(reg, state, PROFILE_CRD, true),
        Ok(false) => {
            report_served(reg, state, PROFILE_CRD, false);
            return next.min(now + LOOK_AGAIN);
        }
        Err(e) => {
            tracing::debug!(error = %e, "discovery of ClusterProfile failed");
            return next.min(now + LOOK_AGAIN);
        }
    }
    if !state.labelled {
        state.labelled = label_namespace(reg).await;
    }
    let api = Api::<ClusterProfile>::namespaced(client.clone(), &cfg.namespace);
    if state.listed_at.is_none_or(|at| now >= at + RESYNC) {
        let params = ListParams::default().labels(&format!("{CLUSTER_MANAGER_LABEL}={MANAGER}"));
        match api.list(&params).await {
            Ok(list) => {
                state.profiles = list
                    .items
                    .into_iter()
                    .filter_map(|p| Some((p.metadata.name.clone()?, p)))
                    .collect();
                state.listed_at = Some(now);
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not list ClusterProfiles");
                return next.min(now + LOOK_AGAIN);
            }
        }
    }
    if state.endpoints_at.is_none_or(|at| now >= at + RESYNC)
        || clusters.iter().any(|c| {
            c.spec.auth_info.is_some()
                && c.metadata
                    .name
                    .as_ref()
                    .is_some_and(|n| !state.endpoints.contains_key(n))
        })
    {
        state.endpoints = endpoints(reg, clusters).await;
        state.endpoints_at = Some(now);
    }
    let inputs = Inputs {
        endpoints: &state.endpoints,
        fleet: &cfg.fleet_name,
        namespace: &cfg.namespace,
        local_properties: &state.local_properties,
        leaving,
    };
    let desired = profile::desired(clusters, view, inputs);
    let stamp = crate::kube::conditions::now_seconds();
    let mut failed = false;
    for d in &desired {
        match write(reg, &api, state, d, &stamp, now).await {
            Ok(Some(at)) => next = next.min(at),
            Ok(None) => {}
            Err(e) => {
                failed = true;
                tracing::warn!(profile = %d.name, error = %e, "could not write ClusterProfile");
            }
        }
    }
    failed |= !delete_forgotten(reg, &api, state, &desired).await;
    reg.ctx
        .metrics
        .foreign_profiles
        .set(state.foreign.len() as i64);
    if failed {
        // What the API server holds may differ from the cache: read it again.
        state.listed_at = None;
        next = next.min(now + LOOK_AGAIN);
    }
    next
}

/// Deletes our profiles of clusters no longer in the fleet (only ours: the
/// list is of our label, and the spec must agree); false if one failed.
async fn delete_forgotten(
    reg: &Registry,
    api: &Api<ClusterProfile>,
    state: &mut State,
    desired: &[profile::Desired],
) -> bool {
    let mut ok = true;
    let keep: std::collections::BTreeSet<&str> = desired.iter().map(|d| d.name.as_str()).collect();
    let gone: Vec<String> = state
        .profiles
        .iter()
        .filter(|(name, p)| !keep.contains(name.as_str()) && p.spec.cluster_manager.name == MANAGER)
        .map(|(name, _)| name.clone())
        .collect();
    for name in gone {
        match api.delete(&name, &DeleteParams::default()).await {
            Ok(_) => {
                state.profiles.remove(&name);
                state.last_write.remove(&name);
                reg.ctx.metrics.kube_write("clusterprofile");
                tracing::info!(profile = %name, "deleted the ClusterProfile of a forgotten cluster");
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {
                state.profiles.remove(&name);
            }
            Err(e) => {
                ok = false;
                tracing::warn!(profile = %name, error = %e, "could not delete ClusterProfile");
            }
        }
    }
    ok
}

/// Creates, corrects and updates one profile; returns when its next timed
/// write is due.
async fn write(
    reg: &Registry,
    api: &Api<ClusterProfile>,
    state: &mut State,
    d: &Desired,
    stamp: &Time,
    now: Instant,
) -> Result<Option<Instant>, kube::Error> {
    let existing = match state.profiles.get(&d.name) {
        Some(p) => p.clone(),
        None => match create(reg, api, d).await? {
            Some(p) => p,
            None => return Ok(None),
        },
    };
    if existing.spec.cluster_manager.name != MANAGER {
        if state.foreign.insert(d.name.clone()) {
            tracing::warn!(profile = %d.name, manager = %existing.spec.cluster_manager.name, "a ClusterProfile of this name belongs to another cluster manager: left alone");
        }
        state.profiles.remove(&d.name);
        return Ok(None);
    }
    state.foreign.remove(&d.name);
    let mut current = existing;
    if current.spec.display_name.as_deref() != Some(d.name.as_str())
        || current
            .labels()
            .get(CLUSTER_MANAGER_LABEL)
            .map(String::as_str)
            != Some(MANAGER)
    {
        let patch = serde_json::json!({
            "metadata": {"labels": {CLUSTER_MANAGER_LABEL: MANAGER}},
            "spec": {"displayName": d.name},
        });
        current = api
            .patch(&d.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        reg.ctx.metrics.kube_write("clusterprofile");
    }
    let next = profile::status(d, current.status.as_ref(), stamp);
    match pace::decide(
        current.status.as_ref(),
        &next,
        state.last_write.get(&d.name).copied(),
        now,
    ) {
        Step::Skip => {
            state.profiles.insert(d.name.clone(), current);
            Ok(None)
        }
        Step::WriteAt(at) => {
            state.profiles.insert(d.name.clone(), current);
            Ok(Some(at))
        }
        Step::Write => {
            let mut status = serde_json::to_value(&next).unwrap_or_default();
            // A merge patch keeps what it does not name: an emptied list is
            // named as null so that it goes.
            if let Some(m) = status.as_object_mut() {
                for k in ["conditions", "properties", "accessProviders"] {
                    m.entry(k).or_insert(serde_json::Value::Null);
                }
            }
            let patch = serde_json::json!({"status": status});
            let written = api
                .patch_status(&d.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            reg.ctx.metrics.kube_write("clusterprofile");
            state.last_write.insert(d.name.clone(), now);
            state.profiles.insert(d.name.clone(), written);
            Ok(None)
        }
    }
}

/// Creates the profile of `d`; None when one of that name appeared
/// meanwhile (read again at the next list).
async fn create(
    reg: &Registry,
    api: &Api<ClusterProfile>,
    d: &Desired,
) -> Result<Option<ClusterProfile>, kube::Error> {
    let mut p = ClusterProfile::new(
        &d.name,
        ClusterProfileSpec {
            display_name: Some(d.name.clone()),
            cluster_manager: ClusterManager {
                name: MANAGER.to_owned(),
            },
        },
    );
    p.metadata.labels = Some([(CLUSTER_MANAGER_LABEL.to_owned(), MANAGER.to_owned())].into());
    match api.create(&PostParams::default(), &p).await {
        Ok(p) => {
            reg.ctx.metrics.kube_write("clusterprofile");
            tracing::info!(profile = %d.name, "created ClusterProfile");
            Ok(Some(p))
        }
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(api.get_opt(&d.name).await?),
        Err(e) => Err(e),
    }
}

/// Each peer's API server and CA, read from the kubeconfig Secret its
/// Cluster object names (what this cluster stores of a peer's published
/// kubeconfig). A Secret that cannot be read gives none, this time.
async fn endpoints(
    reg: &Registry,
    clusters: &[Arc<Cluster>],
) -> BTreeMap<String, (String, Option<String>)> {
    let mut out = BTreeMap::new();
    for c in clusters {
        let (Some(name), Some(auth)) = (c.metadata.name.as_ref(), c.spec.auth_info.as_ref()) else {
            continue;
        };
        let ns = if auth.secret_ref.namespace.is_empty() {
            &reg.ctx.cfg.namespace
        } else {
            &auth.secret_ref.namespace
        };
        let api = Api::<Secret>::namespaced(reg.ctx.client.clone(), ns);
        let secret = match api.get_opt(&auth.secret_ref.name).await {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(e) => {
                tracing::debug!(peer = %name, error = %e, "cannot read the peer's kubeconfig Secret");
                continue;
            }
        };
        let endpoint = secret
            .data
            .as_ref()
            .and_then(|d| d.get(fleetbus_schemas::well_known::SECRET_KEY_KUBECONFIG))
            .and_then(|k| std::str::from_utf8(&k.0).ok())
            .and_then(crate::credentials::endpoint_of);
        if let Some(endpoint) = endpoint {
            out.insert(name.clone(), endpoint);
        }
    }
    out
}

/// Whether the ClusterProfile kind is served.
async fn profiles_served(client: &kube::Client) -> Result<bool, kube::Error> {
    let gvk = GroupVersionKind::gvk("multicluster.x-k8s.io", "v1alpha1", "ClusterProfile");
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Says once when a CRD goes missing and once when it is served again, and
/// keeps `fleetbus_standard_crd_missing{crd}` current.
fn report_served(reg: &Registry, state: &mut State, crd: &'static str, served: bool) {
    reg.ctx
        .metrics
        .standard_crd_missing
        .get_or_create(&vec![("crd", crd)])
        .set(i64::from(!served));
    let was_missing = state.missing.insert(crd, !served).unwrap_or(false);
    match (served, was_missing) {
        (false, false) => tracing::warn!(
            crd,
            "the CRD {crd} is not installed: install it from upstream (see the README, \"Fleet inventory\"); looking again every {}s",
            LOOK_AGAIN.as_secs()
        ),
        (true, true) => tracing::info!(crd, "the CRD {crd} is served now"),
        _ => {}
    }
}

/// Labels the agent's namespace with the ClusterSet it holds the inventory of.
async fn label_namespace(reg: &Registry) -> bool {
    let cfg = &reg.ctx.cfg;
    let api = Api::<Namespace>::all(reg.ctx.client.clone());
    let patch = serde_json::json!({"metadata": {"labels": {CLUSTER_SET_LABEL: cfg.fleet_name}}});
    match api
        .patch(
            &cfg.namespace,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => true,
        Err(e) => {
            tracing::warn!(namespace = %cfg.namespace, error = %e, "could not label the namespace with its ClusterSet");
            false
        }
    }
}
