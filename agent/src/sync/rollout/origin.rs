//! The origin's rollout pass (PROTOCOL §6.9): for each of this cluster's
//! objects a rollout rule publishes, the decision of `decide` from the last
//! record, the newest version, the selected clusters and their reports; a
//! changed decision stores the version it names, then puts the record.
//!
//! Runs after the return pass, and only once the rules, this cluster's own
//! object subtree, the reports and the records have all been read: before
//! that it would decide from nothing (a restarted origin would start every
//! rollout again). Cost: one `decide` per (rollout rule, own object) per
//! pass; puts only on changed decisions.

use std::collections::BTreeMap;
use std::time::Duration;

use async_nats::HeaderMap;
use chrono::{DateTime, Utc};
use fleetbus_schemas::crd::Rollout;
use fleetbus_schemas::health::HealthStatus;
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::rollout::RolloutRecord;
use fleetbus_schemas::subject::{ObjectKey, RolloutKey, VersionKey};
use fleetbus_schemas::ObjectRef;
use tokio::time::Instant;

use super::decide::{decide, Cluster, Decision, Inputs, Report};
use super::state::RolloutBook;
use crate::context::Context;
use crate::sync::returns::returned::{returned_reports, rules_read};
use crate::sync::returns::state::StatusBook;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching;
use crate::sync::rules::matching::qualifies;
use crate::sync::world::World;

/// How long a failed put waits before the next pass tries again.
const RETRY: Duration = Duration::from_secs(2);

/// One decision to make: a rollout rule and one of our objects.
pub(super) struct Due {
    pub(super) key: RolloutKey,
    pub(super) spec: Rollout,
    pub(super) input: Inputs,
}

/// Decides every rollout of this cluster's objects and puts what changed
/// (see the module docs). Returns when the origin wants the next pass (a
/// decision's clock ends, a failed put is tried again).
pub(in crate::sync) async fn rollout_pass(
    world: &World,
    book: &mut RolloutBook,
    returns: &StatusBook,
    ctx: &Context,
) -> Option<Instant> {
    if !book.caught_up || !returns.caught_up || !rules_read(world) {
        return None;
    }
    let mut retry = None;
    let now = Utc::now();
    let reports = returned_reports(world, returns);
    track_current(book, &reports, now);
    let mut wake: Option<DateTime<Utc>> = None;
    let mut puts = Vec::new();
    for due in rollouts_due(world, book, &reports) {
        let prev = book.record(&due.key);
        let Decision {
            record,
            changed,
            wake: w,
        } = decide(prev, &due.spec, &due.input, now);
        wake = wake.min(w).or(wake).or(w);
        if changed {
            puts.push((due.key, record));
        }
    }
    for (key, record) in puts {
        if let Err(e) = put_decision(book, ctx, &key, &record).await {
            tracing::warn!(rollout = %key.to_subject(ctx.layout.prefix()), error = %e, "could not publish a rollout decision; retrying");
            retry = Some(Instant::now() + RETRY);
            continue;
        }
        // Believed at once: the consumer reads it back later.
        book.records.insert(key, record);
    }
    let timer = wake.map(|t| {
        let ahead = (t - now).to_std().unwrap_or_default();
        // A millisecond past the clock, so the pass that wakes sees it over.
        Instant::now() + ahead + Duration::from_millis(1)
    });
    retry.min(timer).or(retry).or(timer)
}

/// Since when each (cluster, object, version) has been reported Current,
/// by our clock: kept while it stays so, forgotten when it does not.
fn track_current(
    book: &mut RolloutBook,
    reports: &BTreeMap<ObjectKey, Vec<ReportedStatus>>,
    now: DateTime<Utc>,
) {
    let mut next = std::collections::HashMap::new();
    for (key, list) in reports {
        for r in list {
            let (Some(hash), Some(HealthStatus::Current)) =
                (&r.source_hash, r.health.as_ref().map(|h| h.status))
            else {
                continue;
            };
            let k = (r.cluster.clone(), key.clone(), hash.clone());
            let since = book.current_since.get(&k).copied().unwrap_or(now);
            next.insert(k, since);
        }
    }
    book.current_since = next;
}

/// The decisions to make: every rollout rule this cluster is a source
/// of, every object of ours it selects, and every record of ours whose
/// object is gone or no longer selected (it becomes `Gone`).
pub(super) fn rollouts_due(
    world: &World,
    book: &RolloutBook,
    reports: &BTreeMap<ObjectKey, Vec<ReportedStatus>>,
) -> Vec<Due> {
    let local = &world.fleet.local;
    let mut out = Vec::new();
    for rule in world.rules.values() {
        let Some(spec) = &rule.spec.rollout else {
            continue;
        };
        if rule.builtin || world.rule_problem(rule).is_some() {
            continue;
        }
        let Some(kind) = world.kinds.get(&rule.source).filter(|k| k.ready()) else {
            continue;
        };
        let source = qualifies(rule, &local.labels, &local.features);
        let clusters = rollout_clusters(world, rule, spec);
        let mut selected = std::collections::BTreeSet::new();
        for (key, meta) in kind.snapshots.iter_meta() {
            if key.origin != local.name || meta.tombstone || !source {
                continue;
            }
            let Some(obj) = kind.objects.get(&(key.namespace.clone(), key.name.clone())) else {
                continue;
            };
            if matching::matching_rules(&rule.spec, &obj).is_none() || meta.content_hash.is_empty()
            {
                continue;
            }
            selected.insert(key.clone());
            let source = ObjectRef {
                uid: Some(meta.uid.clone()),
                ..ObjectRef::new(
                    &key.api_version(),
                    &key.kind,
                    key.namespace.as_deref(),
                    &key.name,
                )
            };
            out.push(Due {
                key: RolloutKey::of(&rule.name, key),
                spec: spec.clone(),
                input: Inputs {
                    origin: local.name.clone(),
                    rule: rule.name.clone(),
                    source,
                    current: Some(meta.content_hash.clone()),
                    clusters: clusters.clone(),
                    reports: rollout_reports(book, rule, key, reports),
                },
            });
        }
        // Our records of objects no longer published under this rule.
        for (rk, rec) in &book.records {
            if rk.origin != local.name || rk.rule != rule.name || selected.contains(&rk.object()) {
                continue;
            }
            out.push(Due {
                key: rk.clone(),
                spec: spec.clone(),
                input: Inputs {
                    origin: local.name.clone(),
                    rule: rule.name.clone(),
                    source: rec.source.clone(),
                    current: None,
                    clusters: Vec::new(),
                    reports: BTreeMap::new(),
                },
            });
        }
    }
    out
}

/// The sinks `rule` selects, each in its rollout group, by (group, name).
/// Every member counts as connected: the registry's liveness is not in
/// the fleet view (a dead cluster that is admitted fails at its deadline).
fn rollout_clusters(world: &World, rule: &CompiledRule, spec: &Rollout) -> Vec<Cluster> {
    let local = &world.fleet.local.name;
    let mut out: Vec<Cluster> = world
        .fleet
        .peers
        .values()
        .filter(|p| &p.name != local && !p.left && !p.disabled && !p.name_conflict)
        .filter(|p| {
            matching::selector_matches(rule.spec.cluster_selector.as_ref(), &p.labels)
                .unwrap_or(false)
        })
        .map(|p| Cluster {
            name: p.name.clone(),
            group: spec
                .groups
                .iter()
                .position(|g| {
                    matching::selector_matches(Some(&g.cluster_selector), &p.labels)
                        .unwrap_or(false)
                })
                .unwrap_or(spec.groups.len()),
            connected: true,
        })
        .collect();
    out.sort_by(|a, b| (a.group, &a.name).cmp(&(b.group, &b.name)));
    out
}

/// The reports of `rule`'s copies of `key`, by cluster.
fn rollout_reports(
    book: &RolloutBook,
    rule: &CompiledRule,
    key: &ObjectKey,
    reports: &BTreeMap<ObjectKey, Vec<ReportedStatus>>,
) -> BTreeMap<String, Report> {
    reports
        .get(key)
        .into_iter()
        .flatten()
        .filter(|r| r.rule == rule.name)
        .map(|r| {
            let health = r.health.as_ref().map_or(
                if r.ready == Some(true) {
                    HealthStatus::Current
                } else {
                    HealthStatus::Unknown
                },
                |h| h.status,
            );
            let since = r.source_hash.as_ref().and_then(|h| {
                book.current_since
                    .get(&(r.cluster.clone(), key.clone(), h.clone()))
                    .copied()
            });
            let report = Report {
                hash: r.source_hash.clone(),
                health,
                message: r
                    .health
                    .as_ref()
                    .map(|h| h.message.clone())
                    .unwrap_or_default(),
                current_since: since.filter(|_| health == HealthStatus::Current),
            };
            (r.cluster.clone(), report)
        })
        .collect()
}

/// Stores the version a record names (before any record names it: a
/// sink never reads a record whose version is missing), then puts the
/// record; both awaited.
pub(super) async fn put_decision(
    book: &mut RolloutBook,
    ctx: &Context,
    key: &RolloutKey,
    record: &RolloutRecord,
) -> Result<(), String> {
    if let Some(target) = &record.target {
        let v = VersionKey {
            object: key.object(),
            hash: target.clone(),
        };
        if !book.stored.contains(&v) {
            store_version(ctx, &v).await?;
            book.stored.insert(v);
        }
    }
    let bytes = record.encode().map_err(|e| e.to_string())?;
    // Secure mode: signed by us, so a record written with other
    // credentials (a broker operator's) admits nothing (PROTOCOL §6.9).
    let bytes = crate::trust::sign_or_keep(ctx.cfg.trust.as_deref(), bytes);
    let subject = key.to_subject(ctx.layout.prefix());
    ctx.js
        .publish(subject, bytes.into())
        .await
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// Copies our envelope of `v` from the object stream to the version
/// store, byte for byte (sealed and signed as published), once it is the
/// version the object stream holds.
async fn store_version(ctx: &Context, v: &VersionKey) -> Result<(), String> {
    let prefix = ctx.layout.prefix();
    let objects = ctx
        .js
        .get_stream(ctx.layout.objects_stream().name)
        .await
        .map_err(|e| format!("objects stream: {e}"))?;
    let msg = objects
        .direct_get_last_for_subject(v.object.to_subject(prefix))
        .await
        .map_err(|e| format!("our envelope: {e}"))?;
    let env = fleetbus_schemas::envelope::Envelope::decode(&msg.payload)
        .map_err(|e| format!("our envelope: {e}"))?;
    let opened_hash = if env.is_sealed() {
        // The sealed form's hash binds the ciphertext; the record names
        // the object's: read it as a sink would.
        let opener = crate::sync::inputs::watches::Opener {
            me: ctx.cfg.cluster_name.clone(),
            key: ctx.sealing.as_ref().map(|k| k.secret.clone()),
        };
        crate::sync::inputs::watches::decode(
            &opener,
            None,
            prefix,
            &v.object.to_subject(prefix),
            &msg.payload,
        )
        .map(|(_, e)| e.content_hash)
        .map_err(|r| format!("our envelope: {r}"))?
    } else {
        env.content_hash.clone()
    };
    if opened_hash != v.hash {
        return Err("the object stream holds another version; the next pass decides again".into());
    }
    let mut headers = HeaderMap::new();
    let id = format!(
        "{}:{}:{}:version",
        v.object.origin, env.uid, env.resource_version
    );
    headers.insert("Nats-Msg-Id", id.as_str());
    ctx.js
        .publish_with_headers(v.to_subject(prefix), headers, msg.payload)
        .await
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

/// At most this many rollouts are listed in a rule's status.
const MAX_SUMMARIES: usize = 20;

/// This origin's rollouts of `rule`, for its status: those not Complete
/// first, at most [`MAX_SUMMARIES`], and why one is paused.
pub(in crate::sync) fn rollout_summaries(
    book: &RolloutBook,
    local: &str,
    rule: &str,
    report: &mut crate::sync::model::RuleReport,
) {
    use fleetbus_schemas::rollout::RolloutPhase;
    let mut mine: Vec<(&RolloutKey, &RolloutRecord)> = book
        .records
        .iter()
        .filter(|(k, r)| k.origin == local && k.rule == rule && r.phase != RolloutPhase::Gone)
        .collect();
    mine.sort_by_key(|(k, r)| (r.phase == RolloutPhase::Complete, (*k).clone()));
    report.rollouts_total = mine.len();
    report.rollouts_paused = mine
        .iter()
        .filter(|(_, r)| r.phase == RolloutPhase::Paused)
        .map(|(k, r)| format!("{} {}: {}", k.kind, describe(k), r.message))
        .next();
    report.rollouts = mine
        .iter()
        .take(MAX_SUMMARIES)
        .map(|(k, r)| fleetbus_schemas::crd::RolloutSummary {
            object: format!("{} {}", k.kind, describe(k)),
            phase: r.phase.to_string(),
            revision: i64::try_from(r.revision).unwrap_or(i64::MAX),
            step: format!("{}/{}", r.step + 1, r.steps.max(1)),
            admitted: r
                .target
                .as_ref()
                .and_then(|t| r.admitted.get(t))
                .map_or(0, |s| i64::try_from(s.len()).unwrap_or(i64::MAX)),
            message: r.message.clone(),
        })
        .collect();
}

/// `namespace/name`, or `name` for a cluster-scoped object.
fn describe(k: &RolloutKey) -> String {
    match &k.namespace {
        Some(ns) => format!("{ns}/{}", k.name),
        None => k.name.clone(),
    }
}
