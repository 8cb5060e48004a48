//! The Local Cluster object: created if missing, status kept current, LocalConflict and NameConflict reported.
//!
//! A pass reads or creates the object (`ensure_object`), judges it from the
//! facts (`judge`, pure), writes its status, reports conflicts as Events and
//! flags the other objects that claim our clusterID.

use std::borrow::Cow;
use std::sync::Arc;

use fleetbus_schemas::crd::{Cluster, ClusterSpec, ClusterState, ClusterStatus, ClusterType};
use fleetbus_schemas::well_known::condition;
use kube::api::PostParams;
use kube::{Api, Resource, ResourceExt};
use tokio::time::Instant;

use super::error::RegistryError;
use super::publisher::AGENT_VERSION;
use super::record::{MemberSet, MemberState};
use super::shared::{LocalInfo, Registry};
use super::status::{heartbeat_time, keep_coarse_heartbeat, StatusWriter};
use super::view::named;
use crate::kube::conditions::{merge, replace_one, status_of, Desired};
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
    let ours = MemberSet::new(m.members());
    let rivals = m.rivals().iter().map(|r| r.cluster_id.clone()).collect();
    let unsynced_peers = m
        .peers()
        .filter(|p| {
            p.record.state == MemberState::Active
                && p.record.name != reg.ctx.cfg.cluster_name
                && p.liveness.alive(now, reg.ctx.cfg.peer_timeout)
                && !ours.agrees_with(&p.record)
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
    let ours = ensure_object(reg, writer, clusters, now).await?;
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
    let claimants: Vec<String> = claiming.iter().map(|c| c.name_any()).collect();
    let f = facts(reg, now);
    let other_conflicts = reg.membership().conflicting_names().len();
    reg.ctx
        .metrics
        .name_conflicts
        .set(i64::try_from(f.rivals.len() + other_conflicts).unwrap_or(i64::MAX));

    let judged = judge(name, &reg.ctx.cluster_id, &claimants, &f);
    let prev = writer.current(&ours).unwrap_or_default();
    let mut status = desired_status(
        &judged,
        &prev,
        ours.metadata.generation,
        reg.last_heartbeat(),
        reg.local_info(),
    );
    // The operator's taints on this cluster, as every peer shows them.
    status.taints = reg
        .membership()
        .taints(name)
        .iter()
        .map(|t| t.taint.clone())
        .collect();
    // Our own heartbeat, like a peer's: at most every HEARTBEAT_REFRESH while
    // nothing else changes, at once with any other change.
    let refresh_in = keep_coarse_heartbeat(&prev, &mut status);
    report_conflicts(reg, &ours, &prev, &status, &judged, &f.rivals).await;
    writer.write(reg, &ours, None, status).await?;
    flag_other_claimants(reg, writer, &claiming, &judged.conflict_msg).await?;
    // The kept time is refreshed by the first pass after it is due; by then
    // the newest record may be up to one interval older, hence the slack.
    Ok(refresh_in.map(|d| now + d + reg.ctx.cfg.heartbeat_interval + REFRESH_SLACK))
}

/// The Local Cluster object: from the watch cache, from our memory of a
/// create the cache does not show yet, or created (read when it exists).
async fn ensure_object<'a>(
    reg: &Registry,
    writer: &StatusWriter,
    clusters: &'a [Arc<Cluster>],
    now: Instant,
) -> Result<Cow<'a, Cluster>, RegistryError> {
    let name = &reg.ctx.cfg.cluster_name;
    let cached = named(clusters, name);
    // An object we created a moment ago may not be in the lagging watch cache
    // yet. (Asked even when the cache shows it: that drops the memory.)
    let remembered = writer.created_not_cached(name, cached.is_some(), now);
    if let Some(c) = cached {
        return Ok(Cow::Borrowed(&**c));
    }
    if let Some(c) = remembered {
        return Ok(Cow::Owned(c));
    }
    let api = Api::<Cluster>::all(reg.ctx.client.clone());
    let obj = Cluster::new(
        name,
        ClusterSpec {
            cluster_id: reg.ctx.cluster_id.clone(),
            ..ClusterSpec::default()
        },
    );
    let fetched = match api.create(&PostParams::default(), &obj).await {
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
    Ok(Cow::Owned(fetched))
}

/// What the Local Cluster object says about conflicts and membership.
#[derive(Debug, Clone, PartialEq)]
struct Judged {
    /// Its conditions, before timestamps.
    desired: [Desired; 4],
    /// Conflict when more than one object claims our clusterID, else Ready.
    state: ClusterState,
    /// The status message: the worse of the two conflicts, if any.
    message: Option<String>,
    /// Names the objects claiming our clusterID (the LocalConflict message).
    conflict_msg: String,
    /// Names the other clusterIDs claiming our name (the NameConflict message).
    name_conflict_msg: String,
}

/// Judges the local cluster `name` with `cluster_id`, given the names of
/// the Cluster objects claiming that clusterID (ours among them) and what
/// the membership says.
fn judge(name: &str, cluster_id: &str, claimants: &[String], f: &LocalFacts) -> Judged {
    let local_conflict = claimants.len() > 1;
    let conflict_msg = format!(
        "{} Cluster objects claim clusterID {}: {}",
        claimants.len(),
        cluster_id,
        claimants.join(", ")
    );
    let name_conflict_msg = format!(
        "cluster name {name:?} is also claimed by clusterID(s) {}; this cluster is {}",
        f.rivals.join(", "),
        cluster_id
    );
    let synced = f.unsynced_peers.is_empty();
    let rivals = !f.rivals.is_empty();
    let desired = [
        Desired {
            type_: condition::READY,
            status: true,
            reason: "AgentRunning",
            message: "the fleetbus agent is running".to_owned(),
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
            status: rivals,
            reason: if rivals { "DuplicateName" } else { "Unique" },
            message: if rivals {
                name_conflict_msg.clone()
            } else {
                String::new()
            },
        },
    ];
    let message = if local_conflict {
        Some(conflict_msg.clone())
    } else if rivals {
        Some(name_conflict_msg.clone())
    } else {
        None
    };
    Judged {
        desired,
        state: if local_conflict {
            ClusterState::Conflict
        } else {
            ClusterState::Ready
        },
        message,
        conflict_msg,
        name_conflict_msg,
    }
}

/// The status the Local Cluster object should show (before the coarse
/// heartbeat is applied): the judgement, our last heartbeat and what we
/// publish about ourselves.
fn desired_status(
    judged: &Judged,
    prev: &ClusterStatus,
    generation: Option<i64>,
    last_heartbeat: Option<chrono::DateTime<chrono::Utc>>,
    info: LocalInfo,
) -> ClusterStatus {
    ClusterStatus {
        type_: Some(ClusterType::Local),
        state: Some(judged.state),
        message: judged.message.clone(),
        conditions: merge(&prev.conditions, &judged.desired, generation),
        last_heartbeat_time: last_heartbeat.as_ref().and_then(heartbeat_time),
        agent_version: Some(AGENT_VERSION.to_owned()),
        metadata: (info.metadata != Default::default()).then_some(info.metadata),
        features: info
            .features
            .iter()
            .map(|f| f.feature_name.clone())
            .collect(),
        taints: Vec::new(),
    }
}

/// The status of another object claiming our clusterID: LocalConflict set,
/// everything else as it was (its other conditions are not ours to judge).
fn flagged_status(
    prev: &ClusterStatus,
    generation: Option<i64>,
    conflict_msg: &str,
) -> ClusterStatus {
    let flagged = Desired {
        type_: condition::LOCAL_CONFLICT,
        status: true,
        reason: "DuplicateLocal",
        message: conflict_msg.to_owned(),
    };
    ClusterStatus {
        conditions: replace_one(&prev.conditions, flagged, generation),
        ..prev.clone()
    }
}

/// Reports the local object's conflicts as they begin or end: Events for
/// LocalConflict and NameConflict, and an error log when a rival appears.
async fn report_conflicts(
    reg: &Registry,
    ours: &Cluster,
    prev: &ClusterStatus,
    status: &ClusterStatus,
    judged: &Judged,
    rivals: &[String],
) {
    report_transition(
        reg,
        ours,
        prev,
        status,
        condition::LOCAL_CONFLICT,
        &judged.conflict_msg,
    )
    .await;
    report_transition(
        reg,
        ours,
        prev,
        status,
        condition::NAME_CONFLICT,
        &judged.name_conflict_msg,
    )
    .await;
    if !rivals.is_empty() && status_of(&prev.conditions, condition::NAME_CONFLICT) != Some("True") {
        tracing::error!(rivals = ?rivals, "another cluster claims this cluster's name");
    }
}

/// The other objects claiming our clusterID: LocalConflict set on them too,
/// nothing else changed.
async fn flag_other_claimants(
    reg: &Registry,
    writer: &StatusWriter,
    claiming: &[&Arc<Cluster>],
    conflict_msg: &str,
) -> Result<(), RegistryError> {
    let name = &reg.ctx.cfg.cluster_name;
    for other in claiming.iter().filter(|c| c.name_any() != *name) {
        let prev = writer.current(other).unwrap_or_default();
        let status = flagged_status(&prev, other.metadata.generation, conflict_msg);
        report_transition(
            reg,
            other,
            &prev,
            &status,
            condition::LOCAL_CONFLICT,
            conflict_msg,
        )
        .await;
        writer.write(reg, other, None, status).await?;
    }
    Ok(())
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
    let features = super::record::feature_records(&items);
    reg.update_local_info(|i| {
        i.labels = labels;
        i.features = features;
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(rivals: &[&str], unsynced: &[&str]) -> LocalFacts {
        LocalFacts {
            rivals: rivals.iter().map(|s| s.to_string()).collect(),
            unsynced_peers: unsynced.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn claimants(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    fn desired<'a>(j: &'a Judged, type_: &str) -> &'a Desired {
        j.desired.iter().find(|d| d.type_ == type_).unwrap()
    }

    #[test]
    fn a_unique_cluster_whose_peers_agree_is_ready_with_no_message() {
        let j = judge("a", "id-a", &claimants(&["a"]), &facts(&[], &[]));
        assert_eq!(j.state, ClusterState::Ready);
        assert_eq!(j.message, None);
        assert!(desired(&j, condition::READY).status);
        let synced = desired(&j, condition::CLUSTERS_SYNCED);
        assert!(synced.status);
        assert_eq!(synced.reason, "MembersAgree");
        for type_ in [condition::LOCAL_CONFLICT, condition::NAME_CONFLICT] {
            let d = desired(&j, type_);
            assert!(!d.status, "{type_}");
            assert_eq!(d.reason, "Unique");
            assert_eq!(d.message, "");
        }
    }

    #[test]
    fn peers_seeing_other_members_are_named() {
        let j = judge("a", "id-a", &claimants(&["a"]), &facts(&[], &["b", "c"]));
        let synced = desired(&j, condition::CLUSTERS_SYNCED);
        assert!(!synced.status);
        assert_eq!(synced.reason, "MembersDiffer");
        assert_eq!(synced.message, "peers seeing other members: b, c");
        assert_eq!(j.state, ClusterState::Ready, "not a conflict");
    }

    #[test]
    fn two_objects_claiming_our_cluster_id_are_a_local_conflict() {
        let j = judge("a", "id-a", &claimants(&["a", "copy"]), &facts(&[], &[]));
        assert_eq!(j.state, ClusterState::Conflict);
        assert_eq!(
            j.conflict_msg,
            "2 Cluster objects claim clusterID id-a: a, copy"
        );
        assert_eq!(j.message.as_deref(), Some(j.conflict_msg.as_str()));
        let d = desired(&j, condition::LOCAL_CONFLICT);
        assert!(d.status);
        assert_eq!(d.reason, "DuplicateLocal");
        assert_eq!(d.message, j.conflict_msg);
    }

    #[test]
    fn a_rival_for_our_name_is_a_name_conflict_but_we_stay_ready() {
        let j = judge("a", "id-a", &claimants(&["a"]), &facts(&["id-x"], &[]));
        assert_eq!(j.state, ClusterState::Ready);
        let d = desired(&j, condition::NAME_CONFLICT);
        assert!(d.status);
        assert_eq!(d.reason, "DuplicateName");
        assert_eq!(
            d.message,
            "cluster name \"a\" is also claimed by clusterID(s) id-x; this cluster is id-a"
        );
        assert_eq!(j.message.as_deref(), Some(d.message.as_str()));
        // Both at once: the local conflict is the message.
        let both = judge("a", "id-a", &claimants(&["a", "b"]), &facts(&["id-x"], &[]));
        assert_eq!(both.message.as_deref(), Some(both.conflict_msg.as_str()));
    }

    #[test]
    fn the_desired_status_carries_what_we_publish_and_is_stable() {
        let j = judge("a", "id-a", &claimants(&["a"]), &facts(&[], &[]));
        let info = LocalInfo {
            features: vec![crate::registry::record::FeatureRecord {
                feature_name: "gpu".into(),
                labels: Default::default(),
            }],
            ..LocalInfo::default()
        };
        let at = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let s = desired_status(
            &j,
            &ClusterStatus::default(),
            Some(3),
            Some(at),
            info.clone(),
        );
        assert_eq!(s.type_, Some(ClusterType::Local));
        assert_eq!(s.state, Some(ClusterState::Ready));
        assert_eq!(s.features, ["gpu"]);
        assert_eq!(s.metadata, None, "no metadata known yet");
        assert_eq!(s.last_heartbeat_time, heartbeat_time(&at));
        assert_eq!(s.agent_version.as_deref(), Some(AGENT_VERSION));
        assert!(s
            .conditions
            .iter()
            .all(|c| c.observed_generation == Some(3)));
        let again = desired_status(&j, &s, Some(3), Some(at), info);
        assert_eq!(again, s, "nothing changed, nothing to write");
    }

    #[test]
    fn another_claimant_is_flagged_and_keeps_its_other_conditions() {
        let peer = judge("b", "id-b", &claimants(&["b"]), &facts(&[], &["x"]));
        let prev = ClusterStatus {
            type_: Some(ClusterType::Peer),
            state: Some(ClusterState::Ready),
            conditions: merge(&[], &peer.desired[..2], None),
            ..ClusterStatus::default()
        };
        let s = flagged_status(
            &prev,
            Some(2),
            "2 Cluster objects claim clusterID id-a: a, b",
        );
        assert_eq!(s.state, prev.state);
        assert_eq!(s.type_, prev.type_);
        assert_eq!(status_of(&s.conditions, condition::READY), Some("True"));
        assert_eq!(
            status_of(&s.conditions, condition::CLUSTERS_SYNCED),
            Some("False")
        );
        assert_eq!(
            status_of(&s.conditions, condition::LOCAL_CONFLICT),
            Some("True")
        );
        assert_eq!(
            flagged_status(&s, Some(2), "2 Cluster objects claim clusterID id-a: a, b"),
            s
        );
    }
}
