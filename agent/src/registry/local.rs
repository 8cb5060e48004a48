//! The Local Cluster object: created if missing, status kept current, LocalConflict and NameConflict reported.

use std::sync::Arc;

use fleetbus_schemas::crd::{Cluster, ClusterSpec, ClusterState, ClusterStatus, ClusterType};
use fleetbus_schemas::well_known::condition;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};
use tokio::time::Instant;

use super::liveness::members_match;
use super::publisher::AGENT_VERSION;
use super::record::MemberState;
use super::status::{heartbeat_time, keep_coarse_heartbeat, StatusWriter};
use super::{Registry, RegistryError};
use crate::kube::conditions::{merge, status_of, Desired};
use crate::kube::events::EventType;

/// What the membership says about the local cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalFacts {
    /// clusterIDs of active records that claim our name.
    pub rivals: Vec<String>,
    /// Live peers whose member set differs from ours.
    pub unsynced_peers: Vec<String>,
}

/// Collects [`LocalFacts`] from the membership.
pub fn facts(reg: &Registry, now: Instant) -> LocalFacts {
    let m = reg.membership();
    let ours = m.members();
    let rivals = m.rivals().iter().map(|r| r.cluster_id.clone()).collect();
    let unsynced_peers = m
        .peers()
        .filter(|p| {
            p.record.state == MemberState::Active
                && p.record.name != reg.ctx.cfg.cluster_name
                && p.liveness.alive(now, reg.ctx.cfg.peer_timeout)
                && !members_match(&ours, &p.record.members)
        })
        .map(|p| p.record.name.clone())
        .collect();
    LocalFacts {
        rivals,
        unsynced_peers,
    }
}

/// Ensures the Local Cluster object exists and shows the truth. Returns when
/// its `lastHeartbeatTime` falls due for a refresh (no pass may come sooner
/// when the cluster has no peers).
#[tracing::instrument(name = "local", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn reconcile(
    reg: &Registry,
    writer: &StatusWriter,
    clusters: &[Arc<Cluster>],
    now: Instant,
) -> Result<Option<Instant>, RegistryError> {
    let name = &reg.ctx.cfg.cluster_name;
    let api = Api::<Cluster>::all(reg.ctx.client.clone());
    let cached = clusters.iter().find(|c| &c.name_any() == name);
    // An object we created a moment ago may not be in the lagging watch cache yet.
    let remembered = writer.created_not_cached(name, cached.is_some(), now);
    let fetched;
    let ours: &Cluster = match (cached, &remembered) {
        (Some(c), _) => c,
        (None, Some(c)) => c,
        (None, None) => {
            let obj = Cluster::new(
                name,
                ClusterSpec {
                    cluster_id: reg.ctx.cluster_id.clone(),
                    ..ClusterSpec::default()
                },
            );
            fetched = match api.create(&PostParams::default(), &obj).await {
                Ok(created) => {
                    reg.ctx.metrics.kube_write("cluster");
                    tracing::info!("created Local Cluster object");
                    created
                }
                // It exists although neither the watch cache nor our memory
                // shows it: read it rather than create again on every pass.
                Err(kube::Error::Api(s)) if s.is_already_exists() => {
                    api.get(name).await.map_err(|source| RegistryError::Kube {
                        action: "get Cluster",
                        object: name.clone(),
                        source,
                    })?
                }
                Err(source) => {
                    return Err(RegistryError::Kube {
                        action: "create Cluster",
                        object: name.clone(),
                        source,
                    })
                }
            };
            writer.note_created(&fetched, now);
            &fetched
        }
    };
    if ours.spec.cluster_id != reg.ctx.cluster_id {
        // Someone else's object carries our name (a peer of the same name seen
        // earlier, or a hand-made object). Never overwrite it; say so.
        tracing::error!(
            object_cluster_id = %ours.spec.cluster_id,
            local_cluster_id = %reg.ctx.cluster_id,
            "a Cluster object named like this cluster has another clusterID; leaving it alone"
        );
        return Ok(None);
    }
    reg.update_local_info(|i| i.labels = ours.labels().clone());

    let claiming: Vec<&Arc<Cluster>> = clusters
        .iter()
        .filter(|c| c.spec.cluster_id == reg.ctx.cluster_id)
        .collect();
    let local_conflict = claiming.len() > 1;
    let conflict_msg = format!(
        "{} Cluster objects claim clusterID {}: {}",
        claiming.len(),
        reg.ctx.cluster_id,
        claiming
            .iter()
            .map(|c| c.name_any())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let f = facts(reg, now);
    let info = reg.local_info();
    let mut other_conflicts = 0;
    {
        let m = reg.membership();
        other_conflicts += m.conflicting_names().len();
    }
    reg.ctx
        .metrics
        .name_conflicts
        .set(i64::try_from(f.rivals.len() + other_conflicts).unwrap_or(i64::MAX));

    let prev = writer.current(ours).unwrap_or_default();
    let name_conflict_msg = format!(
        "cluster name {name:?} is also claimed by clusterID(s) {}; this cluster is {}",
        f.rivals.join(", "),
        reg.ctx.cluster_id
    );
    let desired = [
        Desired {
            type_: condition::READY,
            status: true,
            reason: "AgentRunning",
            message: "the fleetbus agent is running".to_owned(),
        },
        Desired {
            type_: condition::CLUSTERS_SYNCED,
            status: f.unsynced_peers.is_empty(),
            reason: if f.unsynced_peers.is_empty() {
                "MembersAgree"
            } else {
                "MembersDiffer"
            },
            message: if f.unsynced_peers.is_empty() {
                "every live peer sees the same members".to_owned()
            } else {
                format!(
                    "peers seeing other members: {}",
                    f.unsynced_peers.join(", ")
                )
            },
        },
        Desired {
            type_: condition::LOCAL_CONFLICT,
            status: local_conflict,
            reason: if local_conflict {
                "DuplicateLocal"
            } else {
                "Unique"
            },
            message: if local_conflict {
                conflict_msg.clone()
            } else {
                String::new()
            },
        },
        Desired {
            type_: condition::NAME_CONFLICT,
            status: !f.rivals.is_empty(),
            reason: if f.rivals.is_empty() {
                "Unique"
            } else {
                "DuplicateName"
            },
            message: if f.rivals.is_empty() {
                String::new()
            } else {
                name_conflict_msg.clone()
            },
        },
    ];
    let mut status = ClusterStatus {
        type_: Some(ClusterType::Local),
        state: Some(if local_conflict {
            ClusterState::Conflict
        } else {
            ClusterState::Ready
        }),
        message: if local_conflict {
            Some(conflict_msg.clone())
        } else if !f.rivals.is_empty() {
            Some(name_conflict_msg.clone())
        } else {
            None
        },
        conditions: merge(&prev.conditions, &desired, ours.metadata.generation),
        last_heartbeat_time: reg.last_heartbeat().as_ref().and_then(heartbeat_time),
        agent_version: Some(AGENT_VERSION.to_owned()),
        metadata: (info.metadata != Default::default()).then_some(info.metadata),
        features: info
            .features
            .iter()
            .map(|f| f.feature_name.clone())
            .collect(),
    };
    // Our own heartbeat, like a peer's: at most every HEARTBEAT_REFRESH while
    // nothing else changes, at once with any other change.
    let refresh_in = keep_coarse_heartbeat(&prev, &mut status);
    report_transition(
        reg,
        ours,
        &prev,
        &status,
        condition::LOCAL_CONFLICT,
        &conflict_msg,
    )
    .await;
    report_transition(
        reg,
        ours,
        &prev,
        &status,
        condition::NAME_CONFLICT,
        &name_conflict_msg,
    )
    .await;
    if !f.rivals.is_empty() && status_of(&prev.conditions, condition::NAME_CONFLICT) != Some("True")
    {
        tracing::error!(rivals = ?f.rivals, "another cluster claims this cluster's name");
    }
    writer.write(reg, ours, None, status).await?;

    // The other claimants: report on them too, change nothing else.
    for other in claiming.iter().filter(|c| c.name_any() != *name) {
        let prev = writer.current(other).unwrap_or_default();
        let mut status = prev.clone();
        let flagged = Desired {
            type_: condition::LOCAL_CONFLICT,
            status: true,
            reason: "DuplicateLocal",
            message: conflict_msg.clone(),
        };
        // Conditions of other types are not ours to judge on this object: keep them.
        let mut conditions: Vec<_> = prev
            .conditions
            .iter()
            .filter(|c| c.type_ != condition::LOCAL_CONFLICT)
            .cloned()
            .collect();
        conditions.extend(merge(
            &prev.conditions,
            &[flagged],
            other.metadata.generation,
        ));
        status.conditions = conditions;
        report_transition(
            reg,
            other,
            &prev,
            &status,
            condition::LOCAL_CONFLICT,
            &conflict_msg,
        )
        .await;
        writer.write(reg, other, None, status).await?;
    }
    // The kept time is refreshed by the first pass after it is due; by then
    // the newest record may be up to one interval older, hence the slack.
    Ok(refresh_in.map(|d| now + d + reg.ctx.cfg.heartbeat_interval + REFRESH_SLACK))
}

/// Past a refresh due time, so the pass sees a heartbeat old enough to write.
const REFRESH_SLACK: std::time::Duration = std::time::Duration::from_secs(1);

/// Records an Event when condition `type_` turns True (or back to False).
async fn report_transition(
    reg: &Registry,
    obj: &Cluster,
    prev: &ClusterStatus,
    next: &ClusterStatus,
    type_: &str,
    message: &str,
) {
    let before = status_of(&prev.conditions, type_) == Some("True");
    let after = status_of(&next.conditions, type_) == Some("True");
    if before == after {
        return;
    }
    let (kind, reason, msg) = if after {
        (EventType::Warning, type_.to_owned(), message.to_owned())
    } else {
        (
            EventType::Normal,
            format!("{type_}Resolved"),
            format!("{type_} resolved"),
        )
    };
    reg.ctx
        .recorder
        .publish(&obj.object_ref(&()), kind, &reason, &msg)
        .await;
}

/// Reads what the first record must carry about this cluster: the labels of
/// its Local Cluster object (if it exists and is ours) and its
/// ClusterFeatures. Published before the watches have run, a record without
/// them would make peers drop this cluster from every source selector for a
/// moment, and collect the copies of its objects.
pub async fn preload(reg: &Registry) -> Result<(), RegistryError> {
    use kube::api::ListParams;
    let clusters: Api<Cluster> = Api::all(reg.ctx.client.clone());
    let ours = clusters
        .get_opt(&reg.ctx.cfg.cluster_name)
        .await
        .map_err(|source| RegistryError::Kube {
            action: "read",
            object: format!("Cluster {}", reg.ctx.cfg.cluster_name),
            source,
        })?;
    let labels = ours
        .filter(|c| c.spec.cluster_id == reg.ctx.cluster_id)
        .map(|c| c.labels().clone())
        .unwrap_or_default();
    let features: Api<fleetbus_schemas::crd::ClusterFeature> = Api::all(reg.ctx.client.clone());
    let list = features
        .list(&ListParams::default())
        .await
        .map_err(|source| RegistryError::Kube {
            action: "list",
            object: "ClusterFeatures".to_owned(),
            source,
        })?;
    let items: Vec<std::sync::Arc<_>> = list.items.into_iter().map(std::sync::Arc::new).collect();
    let features = super::reconciler::feature_records(&items);
    reg.update_local_info(|i| {
        i.labels = labels;
        i.features = features;
    });
    Ok(())
}
