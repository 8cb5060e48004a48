//! Peer Cluster objects: one per other cluster in the registry, status kept current; deleted only for a cluster the operator forgot (`forgotten.<name>`, PROTOCOL §5.5).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use fleetbus_schemas::crd::{
    AuthInfo, Cluster, ClusterSpec, ClusterState, ClusterStatus, ClusterType, NamespacedName,
};
use fleetbus_schemas::well_known::{self, condition};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Resource, ResourceExt};
use tokio::time::Instant;

use super::error::RegistryError;
use super::peer_failures::{is_refusal, Content, PeerFailures, Verdict};
use super::peer_secret::{ensure_secret, SecretCache};
use super::peer_spec::{spec_patch, DesiredSpec};
use super::record::{ClusterRecord, KubeconfigRecord, MemberSet, MemberState};
use super::shared::Registry;
use super::status::{
    heartbeat_time, keep_coarse_heartbeat, keep_heartbeat_while_steady, StatusWriter,
};
use super::view::{is_disabled, named};
use crate::kube::conditions::{merge, replace_one, Desired};
use crate::kube::events::EventType;
use fleetbus_schemas::registry::{peer_state, PeerFacts, MEMBER_NAMES_MAX};

/// One peer name as the registry shows it, decided under the membership lock.
#[derive(Debug, Clone)]
struct Plan {
    name: String,
    record: ClusterRecord,
    alive: bool,
    advanced: bool,
    deadline: Instant,
    kubeconfig: Option<KubeconfigRecord>,
    /// clusterIDs of the active records claiming this name, when more than one.
    conflict_ids: Vec<String>,
    /// Shared by every plan of a pass (a fleet of N makes N lists of N).
    members_ours: Arc<MemberSet>,
    /// When its last beat arrived, by our clock (peers that beat).
    beat_received_at: Option<chrono::DateTime<chrono::Utc>>,
    /// The operator's taints on it.
    taints: Vec<fleetbus_schemas::crd::ClusterTaint>,
    /// How long it stays alive after a heartbeat (its beats may stretch
    /// `--peer-timeout`), for the status message.
    timeout: Duration,
}

/// What a pass over the peers found.
#[derive(Debug, Default)]
pub struct Outcome {
    /// When the pass should run again: the next liveness deadline or the
    /// next retry of a peer that failed transiently.
    pub wake_at: Option<Instant>,
    /// Peers not written because of a transient error that has not yet
    /// recurred often enough to count as that peer's own failure: the Cluster
    /// objects do not show them yet.
    pub pending: usize,
    /// Every peer's state as the pass judged it (for placement).
    pub states: Vec<(String, &'static str)>,
}

impl Outcome {
    fn wake(&mut self, at: Instant) {
        self.wake_at = Some(self.wake_at.map_or(at, |d| d.min(at)));
    }
}

/// Reconciles every peer. A peer whose writes fail is that peer's problem
/// alone (see `peer_failures`): the others are written all the same.
#[tracing::instrument(name = "peers", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn reconcile(
    reg: &Registry,
    writer: &StatusWriter,
    secrets: &SecretCache,
    failures: &mut PeerFailures,
    clusters: &[Arc<Cluster>],
    now: Instant,
) -> Outcome {
    // Until the beats bucket has been read, a peer that beats may look dead
    // only because its beat has not arrived yet: judge nobody.
    if !reg.beats_synced.load(std::sync::atomic::Ordering::Relaxed) {
        return Outcome {
            wake_at: None,
            pending: 1,
            states: Vec::new(),
        };
    }
    let plans = plan(reg, clusters, now);
    let states = plans
        .iter()
        .map(|p| {
            let facts = PeerFacts {
                left: p.record.state == MemberState::Left,
                alive: p.alive,
                disabled: false,
                name_conflict: !p.conflict_ids.is_empty(),
                api_unreachable: !p.record.api.reachable,
            };
            (p.name.clone(), state_label(peer_state(facts)))
        })
        .collect();
    let mut out = Outcome {
        states,
        ..Outcome::default()
    };
    let mut by_state: BTreeMap<&'static str, i64> = BTreeMap::new();
    for p in &plans {
        if p.alive && p.record.state == MemberState::Active {
            out.wake(p.deadline);
        }
        let content = Content::of(&p.record, p.kubeconfig.as_ref());
        match failures.verdict(&p.name, &content, now) {
            Verdict::Try => {}
            Verdict::Rejected => continue,
            Verdict::Wait(at) => {
                out.wake(at);
                if !failures.settled(&p.name) {
                    out.pending += 1;
                }
                continue;
            }
        }
        let existing = named(clusters, &p.name);
        let auth_info = kubeconfig_secret(reg, secrets, failures, clusters, p, now, &mut out).await;
        // The spec/labels patch has its own verdict: when it is refused the
        // status is still kept true.
        let spec_key = format!("{}/spec", p.name);
        let skip_spec = match failures.verdict(&spec_key, &content, now) {
            Verdict::Try => false,
            Verdict::Rejected => true,
            Verdict::Wait(at) => {
                out.wake(at);
                true
            }
        };
        match reconcile_one(reg, writer, p, existing, auth_info, skip_spec, now).await {
            Ok((state, spec_error)) => {
                failures.succeeded(&p.name);
                *by_state.entry(state_label(state)).or_default() += 1;
                match spec_error {
                    None if !skip_spec => failures.succeeded(&spec_key),
                    None => {}
                    Some(e) if is_refusal(&e) => {
                        let news = failures.rejected(&spec_key, content, now);
                        if news {
                            report_rejection(reg, clusters, &p.name, &e).await;
                        }
                    }
                    Some(e) => {
                        let at = failures.transient(&spec_key, now);
                        tracing::warn!(peer = %p.name, error = %crate::report(&e), retry_in = ?at.saturating_duration_since(now), "patching the peer's spec failed; retrying with backoff");
                        out.wake(at);
                    }
                }
            }
            Err(e) if is_refusal(&e) => {
                if failures.rejected(&p.name, content, now) {
                    report_rejection(reg, clusters, &p.name, &e).await;
                }
            }
            Err(e) => {
                let at = failures.transient(&p.name, now);
                tracing::warn!(peer = %p.name, error = %crate::report(&e), retry_in = ?at.saturating_duration_since(now), "peer reconcile failed; retrying this peer with backoff");
                out.wake(at);
                if !failures.settled(&p.name) {
                    out.pending += 1;
                }
            }
        }
    }
    let names: Vec<&str> = plans.iter().map(|p| p.name.as_str()).collect();
    failures.retain(&names);
    reg.ctx
        .metrics
        .peers_failing
        .set(i64::try_from(failures.failing()).unwrap_or(i64::MAX));
    if let Err(e) = orphans(reg, writer, clusters, &plans).await {
        tracing::warn!(error = %crate::report(&e), "marking peers without a record failed; retrying");
        out.wake(now + Duration::from_secs(1));
        out.pending += 1;
    }
    set_state_gauges(reg, &by_state);
    out
}

/// `fleetbus_peers{state}`: how many peers were written in each state (every
/// state named, so a state no peer is in any more drops to 0).
fn set_state_gauges(reg: &Registry, by_state: &BTreeMap<&'static str, i64>) {
    for state in crate::metrics::PEER_STATES {
        reg.ctx
            .metrics
            .peers
            .get_or_create(&vec![("state", state)])
            .set(by_state.get(state).copied().unwrap_or(0));
    }
}

/// Stores the peer's published kubeconfig as a Secret and returns where the
/// object should point, or `None` (keep `spec.authInfo` as it is) when there
/// is none, the name is in conflict, or the Secret cannot be written. A
/// Secret the API server refuses is that Secret's problem: reported once,
/// retried like a peer (key `<peer>/kubeconfig-secret` in `failures`), and
/// the Cluster object is written all the same.
async fn kubeconfig_secret(
    reg: &Registry,
    secrets: &SecretCache,
    failures: &mut PeerFailures,
    clusters: &[Arc<Cluster>],
    p: &Plan,
    now: Instant,
    out: &mut Outcome,
) -> Option<AuthInfo> {
    let k = p.kubeconfig.as_ref()?;
    if !p.conflict_ids.is_empty() {
        return None;
    }
    let key = format!("{}/kubeconfig-secret", p.name);
    let content = Content::of(&p.record, Some(k));
    match failures.verdict(&key, &content, now) {
        Verdict::Try => {}
        Verdict::Rejected => return None,
        Verdict::Wait(at) => {
            out.wake(at);
            return None;
        }
    }
    let secret_name = format!("{}-kubeconfig", p.name);
    match ensure_secret(reg, secrets, &secret_name, k).await {
        Ok(()) => {
            failures.succeeded(&key);
            Some(AuthInfo {
                secret_ref: NamespacedName {
                    name: secret_name,
                    namespace: reg.ctx.cfg.namespace.clone(),
                },
            })
        }
        Err(e) if is_refusal(&e) => {
            if failures.rejected(&key, content, now) {
                report_rejection(reg, clusters, &p.name, &e).await;
            }
            None
        }
        Err(e) => {
            let at = failures.transient(&key, now);
            tracing::warn!(peer = %p.name, error = %crate::report(&e), retry_in = ?at.saturating_duration_since(now), "storing the peer's kubeconfig failed; retrying with backoff");
            out.wake(at);
            None
        }
    }
}

/// Reports a refused peer: an error log, `fleetbus_peer_rejected_total`, and
/// a Warning Event `PeerRejected` on the Local Cluster object (the peer's own
/// object may not exist: its create may be what was refused).
async fn report_rejection(
    reg: &Registry,
    clusters: &[Arc<Cluster>],
    peer: &str,
    e: &RegistryError,
) {
    let action = match e {
        RegistryError::Kube { action, .. } => *action,
        _ => "encode",
    };
    reg.ctx
        .metrics
        .peer_rejected
        .get_or_create(&vec![("write", action)])
        .inc();
    let detail = crate::report(e);
    tracing::error!(peer = %peer, error = %detail, "the API server refused this peer's object; not retrying until its record changes");
    // The watch cache may not show the Local object yet (it lags our own
    // create); a reference by name (without uid) is then just as good.
    let local = named(clusters, &reg.ctx.cfg.cluster_name)
        .filter(|c| c.spec.cluster_id == reg.ctx.cluster_id)
        .map(|c| c.object_ref(&()))
        .unwrap_or_else(|| {
            Cluster::new(&reg.ctx.cfg.cluster_name, ClusterSpec::default()).object_ref(&())
        });
    // Event messages are capped (1 KiB is plenty for a Status message).
    let mut msg = format!("peer {peer}: the API server refused its object: {detail}");
    if msg.len() > 1024 {
        let mut cut = 1024;
        while !msg.is_char_boundary(cut) {
            cut -= 1;
        }
        msg.truncate(cut);
    }
    reg.ctx
        .recorder
        .publish(&local, EventType::Warning, "PeerRejected", &msg)
        .await;
}

fn state_label(s: ClusterState) -> &'static str {
    match s {
        ClusterState::Ready => "Ready",
        ClusterState::Disconnected => "Disconnected",
        ClusterState::Disabled => "Disabled",
        ClusterState::Conflict => "Conflict",
        ClusterState::Left => "Left",
        ClusterState::ApiUnreachable => "ApiUnreachable",
    }
}

/// Groups the membership by peer name and picks the record each object shows.
fn plan(reg: &Registry, clusters: &[Arc<Cluster>], now: Instant) -> Vec<Plan> {
    let m = reg.membership();
    let members_ours = Arc::new(MemberSet::new(m.members()));
    let mut by_name: BTreeMap<&str, Vec<&super::membership::Peer>> = BTreeMap::new();
    for p in m.peers() {
        // A record with our own name is a rival; the Local object reports it.
        if p.record.name != reg.ctx.cfg.cluster_name {
            by_name.entry(&p.record.name).or_default().push(p);
        }
    }
    // In name order (`by_name` is a BTreeMap): `orphans` searches them.
    let mut plans = Vec::new();
    for (name, group) in by_name {
        let existing_id = named(clusters, name).map(|c| c.spec.cluster_id.clone());
        let active: Vec<_> = group
            .iter()
            .filter(|p| p.record.state == MemberState::Active)
            .collect();
        let conflict_ids = if active.len() > 1 {
            active.iter().map(|p| p.record.cluster_id.clone()).collect()
        } else {
            Vec::new()
        };
        // Prefer the record the object already describes, then an active one.
        let pool: Vec<_> = if active.is_empty() {
            group.iter().collect()
        } else {
            active
        };
        let chosen = pool
            .iter()
            .find(|p| Some(&p.record.cluster_id) == existing_id.as_ref())
            .or_else(|| pool.first())
            .copied();
        let Some(chosen) = chosen else { continue };
        plans.push(Plan {
            name: name.to_owned(),
            record: chosen.record.clone(),
            alive: chosen.alive(now, reg.ctx.cfg.peer_timeout),
            advanced: chosen.liveness.advanced(),
            deadline: chosen.liveness.deadline(reg.ctx.cfg.peer_timeout),
            kubeconfig: chosen.kubeconfig.clone(),
            conflict_ids,
            members_ours: members_ours.clone(),
            beat_received_at: chosen.beat_received_at,
            timeout: chosen.liveness.timeout(reg.ctx.cfg.peer_timeout),
            taints: m.taints(name).iter().map(|t| t.taint.clone()).collect(),
        });
    }
    plans
}

/// Writes one peer's object: created if missing, spec and labels patched
/// (unless `skip_spec`: that patch was refused before), status written.
/// A failed spec patch does not stop the status write: it comes back as
/// the second value, so the peer's state stays true while its labels lag.
async fn reconcile_one(
    reg: &Registry,
    writer: &StatusWriter,
    p: &Plan,
    cached: Option<&Arc<Cluster>>,
    auth_info: Option<AuthInfo>,
    skip_spec: bool,
    now: Instant,
) -> Result<(ClusterState, Option<RegistryError>), RegistryError> {
    // The watch cache lags our own writes: an object we created a moment ago
    // may not be in it yet. Use what we created rather than create again.
    let remembered = writer.created_not_cached(&p.name, cached.is_some(), now);
    let existing: Option<&Cluster> = cached.map(|c| &**c).or(remembered.as_ref());
    let Some((obj, spec_error)) =
        ensure_object(reg, writer, p, existing, auth_info, skip_spec).await?
    else {
        return Ok((ClusterState::Conflict, None));
    };

    if cached.is_none() {
        writer.note_created(&obj, now);
    }

    // If the object came from a write of ours, the cache may still show the
    // version before it; that version must not be mistaken for news.
    let older = existing
        .map(|c| c.resource_version())
        .filter(|rv| *rv != obj.resource_version());
    let prev = writer.current(&obj).unwrap_or_default();
    let status = desired_status(
        p.timeout,
        p,
        &prev,
        is_disabled(&obj),
        obj.metadata.generation,
    );
    let state = status.state.unwrap_or(ClusterState::Disconnected);
    if prev.state != status.state {
        let (kind, reason, msg) = state_event(&status);
        tracing::info!(peer = %p.name, from = ?prev.state, to = ?state, "peer state changed");
        reg.ctx
            .recorder
            .publish(&obj.object_ref(&()), kind, &reason, &msg)
            .await;
    }
    writer.write(reg, &obj, older, status).await?;
    Ok((state, spec_error))
}

/// The peer's object after creating it or bringing its spec and labels up
/// to date, with the spec patch's error when only that failed; `None` when
/// the object of the peer's name describes the local cluster (left alone).
async fn ensure_object(
    reg: &Registry,
    writer: &StatusWriter,
    p: &Plan,
    existing: Option<&Cluster>,
    auth_info: Option<AuthInfo>,
    skip_spec: bool,
) -> Result<Option<(Cluster, Option<RegistryError>)>, RegistryError> {
    let api = Api::<Cluster>::all(reg.ctx.client.clone());
    let conflict = !p.conflict_ids.is_empty();
    let desired = DesiredSpec {
        cluster_id: (!conflict).then_some(p.record.cluster_id.as_str()),
        auth_info: auth_info.as_ref(),
        labels: &p.record.labels,
    };
    let current = match existing {
        Some(c) if describes_local(reg, c) => {
            warn_describes_local(p);
            return Ok(None);
        }
        // The cache may still show the object as it was before our last spec
        // patch; patching again on its say-so would repeat that patch.
        Some(c) if writer.spec_pending(c) || skip_spec => return Ok(Some((c.clone(), None))),
        Some(c) => c.clone(),
        None => match create(reg, &api, p, auth_info.clone()).await? {
            Some(obj) => return Ok(Some((obj, None))),
            // The object exists although neither the watch cache nor our
            // memory shows it (created by an earlier run, by hand, or the
            // cache lags for longer than the grace period). Creating again
            // would fail the same way on every pass: read it and bring it up
            // to date instead.
            None => {
                let fresh = api
                    .get(&p.name)
                    .await
                    .map_err(|source| RegistryError::Kube {
                        action: "get Cluster",
                        object: p.name.clone(),
                        source,
                    })?;
                if describes_local(reg, &fresh) {
                    warn_describes_local(p);
                    return Ok(None);
                }
                fresh
            }
        },
    };
    Ok(Some(
        match update_spec(reg, &api, writer, &current, &desired).await {
            Ok(obj) => (obj, None),
            Err(e) => (current, Some(e)),
        },
    ))
}

fn warn_describes_local(p: &Plan) {
    tracing::warn!(peer = %p.name, "a Cluster object of the peer's name describes the local cluster; leaving it alone");
}

/// The Event for a peer whose state became `status.state`: its type,
/// reason (`Peer<State>`) and message. Ready and Left are news, not trouble.
fn state_event(status: &ClusterStatus) -> (EventType, String, String) {
    let state = status.state.unwrap_or(ClusterState::Disconnected);
    let (kind, msg) = match state {
        ClusterState::Ready => (EventType::Normal, "peer heartbeats are arriving".to_owned()),
        _ => (
            if state == ClusterState::Left {
                EventType::Normal
            } else {
                EventType::Warning
            },
            status.message.clone().unwrap_or_default(),
        ),
    };
    (kind, format!("Peer{}", state_label(state)), msg)
}

/// Whether `c` is (or claims to be) the local cluster's object.
fn describes_local(reg: &Registry, c: &Cluster) -> bool {
    c.spec.cluster_id == reg.ctx.cluster_id
        || c.status.as_ref().and_then(|s| s.type_) == Some(ClusterType::Local)
}

/// Creates the peer object for `p`; `None` when an object of that name exists already.
async fn create(
    reg: &Registry,
    api: &Api<Cluster>,
    p: &Plan,
    auth_info: Option<AuthInfo>,
) -> Result<Option<Cluster>, RegistryError> {
    let mut obj = Cluster::new(
        &p.name,
        ClusterSpec {
            cluster_id: p.record.cluster_id.clone(),
            auth_info,
            ..ClusterSpec::default()
        },
    );
    obj.metadata.labels = (!p.record.labels.is_empty()).then(|| p.record.labels.clone());
    match api.create(&PostParams::default(), &obj).await {
        Ok(created) => {
            reg.ctx.metrics.kube_write("cluster");
            tracing::info!(peer = %p.name, cluster_id = %p.record.cluster_id, "created Peer Cluster object");
            Ok(Some(created))
        }
        Err(kube::Error::Api(s)) if s.is_already_exists() => {
            tracing::info!(peer = %p.name, "Peer Cluster object exists already; reading it");
            Ok(None)
        }
        Err(source) => Err(RegistryError::Kube {
            action: "create Cluster",
            object: p.name.clone(),
            source,
        }),
    }
}

/// Patches the spec and labels of `current` to `desired` if they differ;
/// returns the object as it is now.
async fn update_spec(
    reg: &Registry,
    api: &Api<Cluster>,
    writer: &StatusWriter,
    current: &Cluster,
    desired: &DesiredSpec<'_>,
) -> Result<Cluster, RegistryError> {
    let Some(patch) = spec_patch(current, desired)? else {
        return Ok(current.clone());
    };
    let name = current.name_any();
    let updated = api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| RegistryError::Kube {
            action: "patch Cluster",
            object: name.clone(),
            source,
        })?;
    reg.ctx.metrics.kube_write("cluster");
    writer.note_spec_patch(current);
    tracing::info!(peer = %name, "updated spec/labels of Peer Cluster object");
    Ok(updated)
}

/// The status a peer's object should show.
fn desired_status(
    peer_timeout: Duration,
    p: &Plan,
    prev: &ClusterStatus,
    disabled: bool,
    generation: Option<i64>,
) -> ClusterStatus {
    // A peer that beats puts no time of its own: its last beat's arrival by
    // our clock stands in (before any, the time of its record).
    let heartbeat = match (p.record.beats, &p.beat_received_at) {
        (true, Some(at)) => heartbeat_time(at),
        _ => heartbeat_time(&p.record.heartbeat_at),
    };
    // After our own restart the registry replays each peer's last record. If
    // we had already marked it Disconnected at that very heartbeat, it is
    // still dead until a newer heartbeat arrives. (A peer that beats is not
    // alive on a replayed record at all: see `Peer::alive`.)
    let replayed_dead = !p.record.beats
        && !p.advanced
        && prev.state == Some(ClusterState::Disconnected)
        && heartbeat.is_some()
        && prev.last_heartbeat_time == heartbeat;
    let facts = PeerFacts {
        left: p.record.state == MemberState::Left,
        alive: p.alive && !replayed_dead,
        disabled,
        name_conflict: !p.conflict_ids.is_empty(),
        api_unreachable: !p.record.api.reachable,
    };
    let state = peer_state(facts);
    let message = state_message(state, p, peer_timeout);
    let synced = p.members_ours.agrees_with(&p.record);
    let mut desired = vec![
        Desired {
            type_: condition::READY,
            status: state == ClusterState::Ready,
            reason: state_label(state),
            message: message
                .clone()
                .unwrap_or_else(|| "heartbeats are current".to_owned()),
        },
        Desired {
            type_: condition::CLUSTERS_SYNCED,
            status: synced,
            reason: if synced {
                "MembersAgree"
            } else {
                "MembersDiffer"
            },
            message: if synced {
                "this cluster and the peer see the same members".to_owned()
            } else {
                members_differ(&p.members_ours, &p.record)
            },
        },
    ];
    if facts.name_conflict {
        desired.push(Desired {
            type_: condition::NAME_CONFLICT,
            status: true,
            reason: "DuplicateName",
            message: message.clone().unwrap_or_default(),
        });
    }
    let mut status = ClusterStatus {
        type_: Some(ClusterType::Peer),
        state: Some(state),
        message,
        conditions: merge(&prev.conditions, &desired, generation),
        last_heartbeat_time: heartbeat,
        agent_version: Some(p.record.agent_version.clone()).filter(|v| !v.is_empty()),
        metadata: (p.record.metadata != Default::default()).then(|| p.record.metadata.clone()),
        features: p
            .record
            .features
            .iter()
            .map(|f| f.feature_name.clone())
            .collect(),
        taints: p.taints.clone(),
    };
    // A steady peer that beats keeps the time of the write that last changed
    // something: at 1,000 peers, refreshing every object now and then would
    // be a stream of writes (and watch events, and passes) for nothing.
    // Its Ready condition says it beats; the time moves with any change.
    if p.record.beats {
        keep_heartbeat_while_steady(prev, &mut status);
    } else {
        keep_coarse_heartbeat(prev, &mut status);
    }
    status
}

/// The ClustersSynced message when the sets differ: what each side lacks
/// (not both lists: at 1,000 clusters that would be two lists of 1,000), or,
/// when the peer's record carries only the digest (a large fleet), the counts.
fn members_differ(ours: &MemberSet, theirs: &ClusterRecord) -> String {
    use std::collections::BTreeSet;
    const SHOWN: usize = 10;
    if !theirs.names_members() {
        return format!(
            "this cluster counts {} members, the peer {} (in a fleet of more than {MEMBER_NAMES_MAX} the records name no members)",
            ours.names().len(),
            theirs.member_count()
        );
    }
    let a: BTreeSet<&str> = ours.names().iter().map(String::as_str).collect();
    let b: BTreeSet<&str> = theirs.members.iter().map(String::as_str).collect();
    let list = |v: Vec<&str>| {
        let more = v.len().saturating_sub(SHOWN);
        let mut s = v.into_iter().take(SHOWN).collect::<Vec<_>>().join(",");
        if more > 0 {
            s.push_str(&format!(" and {more} more"));
        }
        s
    };
    format!(
        "members seen here but not by the peer: {}; by the peer but not here: {}",
        list(a.difference(&b).copied().collect()),
        list(b.difference(&a).copied().collect())
    )
}

/// The status message of a peer in `state` (none when Ready).
fn state_message(state: ClusterState, p: &Plan, peer_timeout: Duration) -> Option<String> {
    match state {
        ClusterState::Ready => None,
        ClusterState::Disconnected => Some(format!(
            "no heartbeat received for more than {}",
            humantime::format_duration(peer_timeout)
        )),
        ClusterState::Left => {
            Some("the cluster's agent announced that it left the fleet".to_owned())
        }
        ClusterState::Disabled => Some(format!(
            "sync from this cluster is disabled by annotation {}",
            well_known::ANNOTATION_CLUSTER_DISABLED
        )),
        ClusterState::Conflict => Some(format!(
            "cluster name {:?} is claimed by clusterIDs {}",
            p.name,
            p.conflict_ids.join(", ")
        )),
        ClusterState::ApiUnreachable => Some(format!(
            "the cluster's agent reports its API server unreachable: {}",
            p.record.api.message
        )),
    }
}

/// Peer objects without any record (e.g. the bucket was wiped): once the
/// registry caught up, a Ready one becomes Disconnected; one the operator
/// forgot is deleted.
async fn orphans(
    reg: &Registry,
    writer: &StatusWriter,
    clusters: &[Arc<Cluster>],
    plans: &[Plan],
) -> Result<(), RegistryError> {
    if !reg
        .ctx
        .readiness
        .registry_synced
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return Ok(());
    }
    for c in clusters {
        let name = c.name_any();
        let prev = writer.current(c).unwrap_or_default();
        let is_peer = prev.type_ == Some(ClusterType::Peer);
        if !is_peer
            || plans
                .binary_search_by(|p| p.name.as_str().cmp(&name))
                .is_ok()
        {
            continue;
        }
        if reg.membership().is_forgotten(&name) {
            delete_forgotten(reg, c).await?;
            continue;
        }
        if prev.state != Some(ClusterState::Ready) {
            continue;
        }
        let mut status = prev.clone();
        status.state = Some(ClusterState::Disconnected);
        status.message = Some("no record of this cluster in the registry".to_owned());
        let ready = Desired {
            type_: condition::READY,
            status: false,
            reason: "Disconnected",
            message: "no record of this cluster in the registry".to_owned(),
        };
        status.conditions = replace_one(&prev.conditions, ready, c.metadata.generation);
        reg.ctx
            .recorder
            .publish(
                &c.object_ref(&()),
                EventType::Warning,
                "PeerDisconnected",
                "no record of this cluster in the registry",
            )
            .await;
        writer.write(reg, c, None, status).await?;
    }
    Ok(())
}

/// Deletes the Peer object of a cluster the operator forgot (`fleetbus
/// clusters forget`: a `forgotten.<name>` key and no record of the name).
/// Preconditioned on the object's uid: a Cluster object made anew under the
/// name meanwhile is not ours to delete.
async fn delete_forgotten(reg: &Registry, c: &Cluster) -> Result<(), RegistryError> {
    let name = c.name_any();
    let api = Api::<Cluster>::all(reg.ctx.client.clone());
    let params = DeleteParams {
        preconditions: c.uid().map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(&name, &params).await {
        Ok(_) => {
            reg.ctx.metrics.kube_write("cluster");
            tracing::info!(peer = %name, "deleted the Peer Cluster object of a forgotten cluster");
            Ok(())
        }
        // Gone already, or replaced (the uid precondition failed).
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(source) => Err(RegistryError::Kube {
            action: "delete Cluster",
            object: name,
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kube::conditions::status_of;
    use crate::registry::membership::tests::record;

    const TIMEOUT: Duration = Duration::from_secs(2);

    /// The condition `type_` of `s` (the test fails when it is missing).
    fn cond<'a>(
        s: &'a ClusterStatus,
        type_: &str,
    ) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        s.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    fn plan(alive: bool, advanced: bool) -> Plan {
        let mut r = record("b", "id-b", 7);
        r.members = vec!["a".into(), "b".into()];
        Plan {
            name: "b".into(),
            record: r,
            alive,
            advanced,
            deadline: Instant::now(),
            kubeconfig: None,
            conflict_ids: vec![],
            members_ours: Arc::new(MemberSet::new(["b", "a"])),
            beat_received_at: None,
            timeout: TIMEOUT,
            taints: vec![],
        }
    }

    #[test]
    fn live_peer_is_ready_and_synced() {
        let s = desired_status(
            TIMEOUT,
            &plan(true, true),
            &ClusterStatus::default(),
            false,
            None,
        );
        assert_eq!(s.type_, Some(ClusterType::Peer));
        assert_eq!(s.state, Some(ClusterState::Ready));
        assert_eq!(status_of(&s.conditions, condition::READY), Some("True"));
        assert_eq!(
            status_of(&s.conditions, condition::CLUSTERS_SYNCED),
            Some("True")
        );
        assert_eq!(
            s.last_heartbeat_time,
            heartbeat_time(&plan(true, true).record.heartbeat_at)
        );
    }

    #[test]
    fn different_members_are_not_synced() {
        let mut p = plan(true, true);
        p.members_ours = Arc::new(MemberSet::new(["b", "a", "c"]));
        let s = desired_status(TIMEOUT, &p, &ClusterStatus::default(), false, None);
        assert_eq!(
            status_of(&s.conditions, condition::CLUSTERS_SYNCED),
            Some("False")
        );
        let synced = cond(&s, condition::CLUSTERS_SYNCED);
        assert_eq!(
            synced.message,
            "members seen here but not by the peer: c; by the peer but not here: "
        );
        let many = MemberSet::new((0..1000).map(|i| format!("c{i}")));
        let mut none = p.record.clone();
        none.members.clear();
        let msg = members_differ(&many, &none);
        assert!(
            msg.ends_with("and 990 more; by the peer but not here: "),
            "{msg}"
        );
    }

    /// A large fleet's records carry the digest only: compared by it, and
    /// the message gives the counts (there are no names to show).
    #[test]
    fn a_peer_announcing_a_digest_is_compared_by_it() {
        let ours = MemberSet::new((0..=MEMBER_NAMES_MAX).map(|i| format!("c{i}")));
        let mut p = plan(true, true);
        p.record.set_members(&ours);
        assert!(p.record.members.is_empty());
        p.members_ours = Arc::new(ours);
        let s = desired_status(TIMEOUT, &p, &ClusterStatus::default(), false, None);
        assert_eq!(
            status_of(&s.conditions, condition::CLUSTERS_SYNCED),
            Some("True")
        );
        p.members_ours = Arc::new(MemberSet::new(
            (0..=MEMBER_NAMES_MAX + 1).map(|i| format!("c{i}")),
        ));
        let s = desired_status(TIMEOUT, &p, &ClusterStatus::default(), false, None);
        let synced = cond(&s, condition::CLUSTERS_SYNCED);
        assert_eq!(synced.status, "False");
        assert!(
            synced
                .message
                .starts_with("this cluster counts 102 members, the peer 101"),
            "{}",
            synced.message
        );
    }

    #[test]
    fn a_steady_peer_that_beats_is_not_written_again() {
        let mut p = plan(true, true);
        p.record.beats = true;
        let t0 = chrono::Utc::now() - chrono::Duration::hours(1);
        p.beat_received_at = Some(t0);
        let first = desired_status(TIMEOUT, &p, &ClusterStatus::default(), false, None);
        assert_eq!(first.state, Some(ClusterState::Ready));
        assert_eq!(first.last_heartbeat_time, heartbeat_time(&t0));
        // An hour of beats later, nothing else changed: the same status.
        p.beat_received_at = Some(chrono::Utc::now());
        let again = desired_status(TIMEOUT, &p, &first, false, None);
        assert_eq!(again, first, "no write per beat, nor per refresh period");
        // It goes silent: the write names its last beat.
        p.alive = false;
        let dead = desired_status(TIMEOUT, &p, &first, false, None);
        assert_eq!(dead.state, Some(ClusterState::Disconnected));
        assert_eq!(
            dead.last_heartbeat_time,
            heartbeat_time(&p.beat_received_at.unwrap())
        );
    }

    #[test]
    fn silent_peer_is_disconnected_and_steady_state_is_stable() {
        let s = desired_status(
            TIMEOUT,
            &plan(false, true),
            &ClusterStatus::default(),
            false,
            None,
        );
        assert_eq!(s.state, Some(ClusterState::Disconnected));
        assert_eq!(status_of(&s.conditions, condition::READY), Some("False"));
        let again = desired_status(TIMEOUT, &plan(false, true), &s, false, None);
        assert_eq!(again, s, "nothing changed, nothing to write");
    }

    #[test]
    fn replayed_record_of_a_dead_peer_stays_disconnected() {
        let dead = desired_status(
            TIMEOUT,
            &plan(false, true),
            &ClusterStatus::default(),
            false,
            None,
        );
        // After our restart the same record is replayed and looks fresh.
        let replay = desired_status(TIMEOUT, &plan(true, false), &dead, false, None);
        assert_eq!(replay.state, Some(ClusterState::Disconnected));
        // A newer heartbeat revives it.
        let mut newer = plan(true, true);
        newer.record.seq += 1;
        newer.record.heartbeat_at += chrono::Duration::seconds(1);
        let revived = desired_status(TIMEOUT, &newer, &dead, false, None);
        assert_eq!(revived.state, Some(ClusterState::Ready));
    }

    #[test]
    fn disabled_and_conflicting_peers() {
        let s = desired_status(
            TIMEOUT,
            &plan(true, true),
            &ClusterStatus::default(),
            true,
            None,
        );
        assert_eq!(s.state, Some(ClusterState::Disabled));
        let mut p = plan(true, true);
        p.conflict_ids = vec!["id-b".into(), "id-b2".into()];
        let s = desired_status(TIMEOUT, &p, &ClusterStatus::default(), false, None);
        assert_eq!(s.state, Some(ClusterState::Conflict));
        assert_eq!(
            status_of(&s.conditions, condition::NAME_CONFLICT),
            Some("True")
        );
        assert!(s.message.unwrap().contains("id-b2"));
    }

    #[test]
    fn a_live_peer_whose_api_is_down_is_api_unreachable_not_ready() {
        let mut p = plan(true, true);
        p.record.api = fleetbus_schemas::registry::ApiHealth::unreachable("timed out");
        let s = desired_status(TIMEOUT, &p, &ClusterStatus::default(), false, None);
        assert_eq!(s.state, Some(ClusterState::ApiUnreachable));
        let ready = cond(&s, condition::READY);
        assert_eq!(ready.status, "False");
        assert_eq!(ready.reason, "ApiUnreachable");
        // Silence outranks it: a dead peer cannot vouch for its API.
        let mut silent = plan(false, true);
        silent.record.api = p.record.api.clone();
        let s = desired_status(TIMEOUT, &silent, &ClusterStatus::default(), false, None);
        assert_eq!(s.state, Some(ClusterState::Disconnected));
    }

    #[test]
    fn state_events_warn_of_trouble_and_tell_of_news() {
        let event = |state, message: Option<&str>| {
            state_event(&ClusterStatus {
                state: Some(state),
                message: message.map(str::to_owned),
                ..ClusterStatus::default()
            })
        };
        assert_eq!(
            event(ClusterState::Ready, None),
            (
                EventType::Normal,
                "PeerReady".to_owned(),
                "peer heartbeats are arriving".to_owned()
            )
        );
        assert_eq!(
            event(ClusterState::Left, Some("left")),
            (EventType::Normal, "PeerLeft".to_owned(), "left".to_owned())
        );
        for state in [
            ClusterState::Disconnected,
            ClusterState::Disabled,
            ClusterState::Conflict,
            ClusterState::ApiUnreachable,
        ] {
            let (kind, reason, msg) = event(state, Some("why"));
            assert_eq!(kind, EventType::Warning, "{state:?}");
            assert_eq!(reason, format!("Peer{}", state_label(state)));
            assert_eq!(msg, "why");
        }
    }

    #[test]
    fn left_peer_is_left() {
        let mut p = plan(false, true);
        p.record.state = MemberState::Left;
        let s = desired_status(TIMEOUT, &p, &ClusterStatus::default(), false, None);
        assert_eq!(s.state, Some(ClusterState::Left));
    }
}
