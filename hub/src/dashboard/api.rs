//! The read endpoints behind the pages (see the module docs for each one's shape).
//! Queries are parsed strictly: an unknown parameter or a bad value is a 400 that says
//! which, never a silently ignored filter.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use chrono::Utc;
use fleetbus_schemas::crd::ClusterState;
use fleetbus_schemas::k8s_names::is_dns1123_label;
use fleetbus_schemas::subject::drift_of_cluster;
use futures::Stream;
use serde::Deserialize;
use serde_json::{json, Value};

use super::error::ApiError;
use super::mirror::Snapshot;
use super::{AppState, CATCH_UP, FEED_WAIT};
use crate::drift::render::event_json;
use crate::drift::ObjectArg;
use crate::fleet::ClusterView;
use crate::kv::ReadError;

type ApiResult = Result<Json<Value>, ApiError>;

/// The query, or a 400 naming what is wrong with it.
fn query<T>(q: Result<Query<T>, QueryRejection>) -> Result<T, ApiError> {
    q.map(|Query(t)| t)
        .map_err(|e| ApiError::bad_request(format!("bad query: {}", e.body_text())))
}

/// A `cluster` parameter must be a cluster name (it goes into subjects).
pub(crate) fn cluster_param(c: Option<String>) -> Result<Option<String>, ApiError> {
    match c {
        Some(c) if !is_dns1123_label(&c) => Err(ApiError::bad_request(format!(
            "cluster {c:?} is not a cluster name (a DNS-1123 label)"
        ))),
        c => Ok(c),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ClustersQuery {
    state: Option<ClusterState>,
    /// `key=value`, or `key` for "has the label".
    label: Option<String>,
    /// A substring of the name.
    name: Option<String>,
}

/// `GET /api/clusters`.
pub(crate) async fn clusters(
    State(s): State<Arc<AppState>>,
    q: Result<Query<ClustersQuery>, QueryRejection>,
) -> ApiResult {
    let q = query(q)?;
    let label = q.label.as_deref().map(parse_label).transpose()?;
    let now = Utc::now();
    let registry = s.registry().await?;
    let unverified: Vec<Value> = (registry.unverified.iter())
        .map(|u| json!({"key": u.key, "why": u.why}))
        .collect();
    let views = crate::fleet::views(registry.records, &registry.beats, now);
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for v in &views {
        *counts.entry(state_word(v.state)).or_default() += 1;
    }
    let total = views.len();
    let shown: Vec<Value> = views
        .iter()
        .filter(|v| q.state.is_none_or(|st| st == v.state))
        .filter(|v| q.name.as_deref().is_none_or(|n| v.record.name.contains(n)))
        .filter(|v| {
            label.as_ref().is_none_or(|(k, want)| {
                v.record
                    .labels
                    .get(k)
                    .is_some_and(|have| want.as_ref().is_none_or(|w| w == have))
            })
        })
        .map(cluster_json)
        .collect();
    Ok(Json(json!({
        "now": now, "total": total, "counts": counts, "clusters": shown,
        "unverified": unverified,
    })))
}

/// `key=value` (that value) or `key` (any value).
fn parse_label(l: &str) -> Result<(String, Option<String>), ApiError> {
    let (k, v) = match l.split_once('=') {
        Some((k, v)) => (k, Some(v.to_owned())),
        None => (l, None),
    };
    if k.is_empty() {
        return Err(ApiError::bad_request(format!(
            "label {l:?}: give KEY or KEY=VALUE"
        )));
    }
    Ok((k.to_owned(), v))
}

fn state_word(s: ClusterState) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{s:?}"))
}

fn cluster_json(v: &ClusterView) -> Value {
    let r = &v.record;
    let m = &r.metadata;
    json!({
        "name": r.name,
        "clusterId": r.cluster_id,
        "state": state_word(v.state),
        "heartbeatAgeSeconds": v.heartbeat_age.map(|d| d.as_secs()),
        "heartbeatAt": r.heartbeat_at,
        "startedAt": r.started_at,
        "agentVersion": r.agent_version,
        "kubernetesVersion": m.kubernetes_version,
        "distribution": m.distribution,
        "provider": m.provider,
        "region": m.locality.as_ref().and_then(|l| l.region.clone()),
        "labels": r.labels,
        "apiReachable": r.api.is_reachable(),
        "apiMessage": r.api.message,
        "members": r.member_count(),
    })
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RulesQuery {
    rule: Option<String>,
    cluster: Option<String>,
}

/// `GET /api/rules`.
pub(crate) async fn rules(
    State(s): State<Arc<AppState>>,
    q: Result<Query<RulesQuery>, QueryRejection>,
) -> ApiResult {
    let q = query(q)?;
    let cluster = cluster_param(q.cluster)?;
    let (rule, cluster) = (q.rule.as_deref(), cluster.as_deref());
    let (registry, signers) = match s.registry().await {
        Ok(r) => (r.records, r.signers),
        Err(_) => Default::default(),
    };
    let read = s
        .rule_status
        .read(CATCH_UP, |current| {
            // With the fleet root known, a record its cluster did not sign
            // is skipped, as `fleetbus rules` skips it.
            let checked = current.iter().map(|(k, e)| {
                let checked = crate::rules::read::signed(k, &e.raw, signers.as_ref())
                    .and_then(|()| e.checked.clone());
                (k, checked)
            });
            // The cells asked for, and every skipped record (the count is the bucket's).
            let wanted = checked.filter(|(_, checked)| match checked {
                Ok(r) => rule.is_none_or(|x| x == r.rule) && cluster.is_none_or(|x| x == r.cluster),
                Err(_) => true,
            });
            crate::rules::read::collect(wanted.map(|(k, checked)| (k.clone(), checked)))
        })
        .await;
    let grid = match read {
        Snapshot::Read(statuses) => super::rules::of(registry, statuses, rule, cluster),
        Snapshot::Failed(e) => match &*e {
            ReadError::Missing { name, .. } => super::rules::no_bucket(registry, name),
            e => return Err(e.into()),
        },
        Snapshot::NotYet => super::rules::grid(&s.js, &s.prefix, registry, rule, cluster).await?,
    };
    Ok(Json(serde_json::to_value(grid).unwrap_or_default()))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct DriftQuery {
    cluster: Option<String>,
    rule: Option<String>,
}

/// `GET /api/drift`: the copies drifted now.
pub(crate) async fn drift(
    State(s): State<Arc<AppState>>,
    q: Result<Query<DriftQuery>, QueryRejection>,
) -> ApiResult {
    let q = query(q)?;
    let cluster = cluster_param(q.cluster)?;
    let (cluster, rule) = (cluster.as_deref(), q.rule.as_deref());
    // With the fleet root known, only what each cluster signed is shown;
    // the rest is named in `unverified`, as `fleetbus drift ls` names it.
    let signers = s.registry().await?.signers;
    let read = s
        .drift
        .read(CATCH_UP, |current| {
            let mut unverified = Vec::new();
            let shown = current.iter().filter_map(|(key, d)| {
                let checked = signers
                    .as_ref()
                    .map(|s| s.check(&d.entry.0.cluster, &d.raw));
                match checked {
                    Some(Err(why)) => {
                        unverified.push(json!({"key": key, "why": why.to_string()}));
                        None
                    }
                    _ => Some(&d.entry),
                }
            });
            let events = crate::drift::ls::select(shown, cluster, rule);
            (events, unverified)
        })
        .await;
    let (events, unverified) = match read {
        Snapshot::Read(read) => read,
        Snapshot::Failed(e) => return Err((&*e).into()),
        Snapshot::NotYet => {
            let bucket = fleetbus_schemas::drift::drift_bucket(&s.prefix);
            let events =
                crate::drift::ls::read_current(&s.js, &s.prefix, &bucket, cluster, rule).await?;
            (events, Vec::new())
        }
    };
    let drifted: Vec<Value> = events.iter().map(|(_, e)| event_json(e)).collect();
    Ok(Json(
        json!({ "now": Utc::now(), "drifted": drifted, "unverified": unverified }),
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HistoryQuery {
    object: Option<String>,
    cluster: Option<String>,
}

/// `GET /api/drift/history?object=KIND/NAMESPACE/NAME`.
pub(crate) async fn history(
    State(s): State<Arc<AppState>>,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> ApiResult {
    let q = query(q)?;
    let cluster = cluster_param(q.cluster)?;
    let object: ObjectArg = q
        .object
        .ok_or_else(|| {
            ApiError::bad_request("object=KIND/NAMESPACE/NAME (or KIND/NAME) is required")
        })?
        .parse()?;
    let events =
        crate::drift::history::read_history(&s.js, &s.prefix, &object, cluster.as_deref()).await?;
    let events: Vec<Value> = events
        .iter()
        .map(|(e, published)| json!({ "event": event_json(e), "published": published }))
        .collect();
    Ok(Json(json!({ "events": events })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProgressQuery {
    cluster: Option<String>,
}

/// `GET /api/progress?cluster=C`: asks C's agent (PROTOCOL §6.5).
pub(crate) async fn progress(
    State(s): State<Arc<AppState>>,
    q: Result<Query<ProgressQuery>, QueryRejection>,
) -> ApiResult {
    let q = query(q)?;
    let cluster = cluster_param(q.cluster)?
        .ok_or_else(|| ApiError::bad_request("cluster=NAME is required"))?;
    let seen = crate::clusters::progress::ask(&s.client, &s.prefix, &cluster).await;
    Ok(Json(crate::clusters::progress::to_json(&cluster, &seen)))
}

/// `GET /api/config`: what the page needs to know about this server.
pub(crate) async fn config(State(s): State<Arc<AppState>>) -> Json<Value> {
    Json(json!({
        "allowActions": s.allow_actions,
        "subjectPrefix": s.prefix.to_string(),
        "version": env!("CARGO_PKG_VERSION"),
    }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventsQuery {
    cluster: Option<String>,
}

/// `GET /api/events`: drift events as server-sent events (`event: drift`), new ones
/// only, from the process's one reader of the drift stream. The first message is
/// `event: ready` once that reader's consumer exists, so a client knows that what
/// happens from then on will reach it; a read failure, or falling too far behind, is
/// sent as `event: failed` and ends the stream (EventSource reconnects).
pub(crate) async fn events(
    State(s): State<Arc<AppState>>,
    q: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let q = query(q)?;
    let cluster = cluster_param(q.cluster)?;
    // `<p>.drift.<cluster>.>` as a prefix: the subjects a consumer filtered by it got.
    let only = cluster.map(|c| {
        drift_of_cluster(&s.prefix, &c)
            .trim_end_matches('>')
            .to_owned()
    });
    let items = s.feed.subscribe(FEED_WAIT).await?;
    Ok(Sse::new(super::feed::events(items, only)).keep_alive(KeepAlive::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_filters_are_key_or_key_value() {
        assert_eq!(parse_label("env").unwrap(), ("env".to_owned(), None));
        assert_eq!(
            parse_label("env=prod").unwrap(),
            ("env".to_owned(), Some("prod".to_owned()))
        );
        assert_eq!(
            parse_label("a=b=c").unwrap(),
            ("a".to_owned(), Some("b=c".to_owned()))
        );
        for bad in ["", "=", "=prod"] {
            assert!(parse_label(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn cluster_params_cannot_be_subject_wildcards() {
        assert_eq!(
            cluster_param(Some("c2".into())).unwrap().as_deref(),
            Some("c2")
        );
        assert_eq!(cluster_param(None).unwrap(), None);
        for bad in ["*", ">", "b.c", "", "C2"] {
            assert!(cluster_param(Some(bad.into())).is_err(), "{bad:?}");
        }
    }
}
