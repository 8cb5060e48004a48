//! The origin's placement pass (PROTOCOL §6.10): for each unit of this
//! cluster's objects a placement rule publishes (a (rule, object), or a
//! placement group), the decision of `decide` from the last record, the
//! matched clusters with their health and taints, and the copies' reports;
//! a changed decision is put on the bus.
//!
//! Runs only once the rules, this cluster's own objects, the reports, the
//! records and the peers' health have all been read: before that it would
//! decide from nothing (a restarted origin would move copies for no reason).
//! Cost: the candidates gathered once per rule, then one `decide` per unit
//! per pass over the matched clusters (`fleetbus_placement_pass_seconds`);
//! puts only on changed decisions.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use fleetbus_schemas::crd::Placement;
use fleetbus_schemas::health::HealthStatus;
use fleetbus_schemas::placement::{PlacementKey, PlacementRecord, PlacementUnit};
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::ObjectKey;
use tokio::time::Instant;

use super::announce;
use super::decide::{decide, Candidate, Health, Inputs};
use super::fitness;
use super::sink::unit_key;
use super::state::PlacementBook;
use crate::context::Context;
use crate::sync::returns::returned::{returned_reports, rules_read};
use crate::sync::returns::state::StatusBook;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching::{self, qualifies};
use crate::sync::world::World;

/// How long a failed put waits before the next pass tries again.
const RETRY: Duration = Duration::from_secs(2);

/// One unit to decide, with what it reads.
struct Due<'a> {
    key: PlacementKey,
    rule: &'a CompiledRule,
    spec: &'a Placement,
    objects: Vec<ObjectKey>,
    replicas: Option<i64>,
}

/// Decides every placement of this cluster's objects and puts what
/// changed. Returns when the origin wants the next pass (a failover window
/// or a release step ends, a failed put is tried again).
pub(in crate::sync) async fn placement_pass(
    world: &World,
    book: &mut PlacementBook,
    returns: &StatusBook,
    ctx: &Context,
) -> Option<Instant> {
    if !book.caught_up() || !returns.caught_up || !rules_read(world) || !health_known(world) {
        return None;
    }
    let started = std::time::Instant::now();
    let now = Utc::now();
    let reports = returned_reports(world, returns);
    let unfit = fitness::unfit_clusters(world, returns);
    let placed = if fitness::any_placed_dependency(world) {
        fitness::placed_by_rule(world, book)
    } else {
        BTreeMap::new()
    };
    let mut wake: Option<DateTime<Utc>> = None;
    let mut puts = Vec::new();
    let units = units_due(world);
    let count = units.len();
    // A rule's candidates are the same for each of its units: gathered once
    // per pass (per unit, that was most of a pass over 1,000 clusters).
    let mut fleet: BTreeMap<&str, RuleFleet> = BTreeMap::new();
    for due in units {
        let RuleFleet {
            candidates,
            dependency_misses,
        } = fleet
            .entry(due.rule.name.as_str())
            .or_insert_with(|| RuleFleet::of(world, due.rule, &placed))
            .clone();
        let mut refused = (*dependency_misses).clone();
        for object in &due.objects {
            for (cluster, why) in unfit.get(object).into_iter().flatten() {
                refused
                    .entry(cluster.clone())
                    .or_insert_with(|| why.clone());
            }
        }
        let input = Inputs {
            rule: due.rule.name.clone(),
            seed: due.key.unit.seed(),
            candidates,
            healthy: copies(&reports, &due, true),
            reporting: copies(&reports, &due, false),
            replicas: due.replicas,
            refused,
        };
        let d = decide(book.record(&due.key), due.spec, &input, now);
        wake = [wake, d.wake].into_iter().flatten().min();
        if d.changed {
            puts.push((due.key, d.record));
        }
    }
    // The deciding alone (what grows with units × clusters); the puts are
    // the bus's time. A pass with no unit costs nothing worth a sample.
    if count > 0 {
        ctx.metrics
            .placement_pass_seconds
            .observe(started.elapsed().as_secs_f64());
    }
    ctx.metrics
        .placement_units
        .set(i64::try_from(count).unwrap_or(i64::MAX));
    let mut retry = None;
    let mut changes = Vec::new();
    for (key, record) in puts {
        if let Err(e) = put(ctx, &key, &record).await {
            tracing::warn!(placement = %key.to_subject(ctx.layout.prefix()), error = %e, "could not publish a placement decision; retrying");
            retry = Some(Instant::now() + RETRY);
            continue;
        }
        changes.extend(announce::change(&key, book.record(&key), &record));
        ctx.metrics.placement_decisions.inc();
        if !record.replaced.is_empty()
            && book
                .record(&key)
                .is_none_or(|old| old.replaced != record.replaced)
        {
            ctx.metrics.placement_failovers.inc();
            tracing::info!(placement = %key.to_subject(ctx.layout.prefix()), replaced = ?record.replaced, "placement failed over");
        }
        // Believed at once: the consumer reads it back later.
        book.read.records.insert(key, record);
    }
    for (rule, type_, reason, message) in announce::events(changes) {
        let rule_ref = crate::sync::model::meta::rule_ref(&rule);
        ctx.recorder
            .publish(&rule_ref, type_, reason, &message)
            .await;
    }
    let timer = wake.map(|t| {
        let ahead = (t - now).to_std().unwrap_or_default();
        // A millisecond past the clock, so the pass that wakes sees it over.
        Instant::now() + ahead + Duration::from_millis(1)
    });
    [retry, timer].into_iter().flatten().min()
}

/// What every unit of one rule reads of the fleet in one pass.
#[derive(Clone)]
struct RuleFleet {
    candidates: Arc<Vec<Candidate>>,
    /// The candidates where a dependency with placement places nothing.
    dependency_misses: Arc<BTreeMap<String, String>>,
}

impl RuleFleet {
    fn of(world: &World, rule: &CompiledRule, placed: &BTreeMap<String, BTreeSet<String>>) -> Self {
        let candidates = candidates(world, rule);
        let deps = fitness::placed_dependencies(world, rule);
        let mut misses =
            fitness::dependency_misses(&deps, placed, candidates.iter().map(|c| c.name.as_str()));
        for (name, why) in fitness::unserved(world, rule) {
            misses.entry(name).or_insert(why);
        }
        Self {
            candidates: Arc::new(candidates),
            dependency_misses: Arc::new(misses),
        }
    }
}

/// Whether the registry has judged the peers' health: until then every
/// peer would look Ready (or absent), and a decision could pick a dead one.
fn health_known(world: &World) -> bool {
    world.fleet.peers.is_empty() || !world.health.is_empty()
}

/// Every placement unit of this cluster's objects: one per (rule, object),
/// or one per group (its rule first by name decides; its objects are those
/// of every rule in the group).
fn units_due(world: &World) -> Vec<Due<'_>> {
    let local = &world.fleet.local;
    let mut out: Vec<Due<'_>> = Vec::new();
    let mut groups: BTreeMap<String, usize> = BTreeMap::new();
    for rule in world.rules.values() {
        let Some(spec) = &rule.spec.placement else {
            continue;
        };
        if rule.builtin || world.rule_problem(rule).is_some() {
            continue;
        }
        let Some(kind) = world.kinds.get(&rule.source).filter(|k| k.ready()) else {
            continue;
        };
        if !qualifies(rule, &local.labels, &local.features) {
            continue;
        }
        for (key, meta) in kind.snapshots.iter_meta() {
            if key.origin != local.name || meta.tombstone || meta.content_hash.is_empty() {
                continue;
            }
            let Some(obj) = kind.objects.get(&(key.namespace.clone(), key.name.clone())) else {
                continue;
            };
            if matching::matching_rules(&rule.spec, &obj).is_none() {
                continue;
            }
            let Some(pk) = unit_key(rule, key) else {
                continue;
            };
            if let PlacementUnit::Group(g) = &pk.unit {
                // Rules are visited by name: the first one of a group decides.
                if let Some(i) = groups.get(g) {
                    out[*i].objects.push(key.clone());
                    continue;
                }
                groups.insert(g.clone(), out.len());
            }
            let replicas = spec
                .replicas
                .as_ref()
                .filter(|_| spec.group.is_none())
                .and_then(|r| obj.pointer(&r.path))
                .and_then(serde_json::Value::as_i64);
            out.push(Due {
                key: pk,
                rule,
                spec,
                objects: vec![key.clone()],
                replicas,
            });
        }
    }
    out
}

/// The clusters `rule` may place copies on: every peer its
/// `clusterSelector` matches that is a member (not Left, Disabled or
/// claimed by two records), with its health and taints.
pub(in crate::sync) fn candidates(world: &World, rule: &CompiledRule) -> Vec<Candidate> {
    let now = Utc::now();
    let peers = world
        .fleet
        .peers
        .values()
        .filter(|p| !p.left && !p.disabled && !p.name_conflict);
    peers
        .filter(|p| selects(rule, &p.labels))
        .map(|p| candidate(world, now, (&p.name, &p.labels, &p.taints, &p.record)))
        .collect()
}

/// [`candidates`] as a sink sees them for the objects of `origin` (a
/// preview asking whether placement would choose it): every peer but the
/// origin, and this cluster itself (Ready: it is answering).
pub(in crate::sync) fn candidates_seen_by_a_sink(
    world: &World,
    rule: &CompiledRule,
    origin: &str,
) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = candidates(world, rule)
        .into_iter()
        .filter(|c| c.name != origin)
        .collect();
    let l = &world.fleet.local;
    if l.name != origin && selects(rule, &l.labels) {
        let mut me = candidate(
            world,
            Utc::now(),
            (&l.name, &l.labels, &l.taints, &l.record),
        );
        me.health = Health::Ready;
        out.push(me);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

fn selects(rule: &CompiledRule, labels: &BTreeMap<String, String>) -> bool {
    matching::selector_matches(rule.spec.cluster_selector.as_ref(), labels).unwrap_or(false)
}

/// One cluster (name, labels, taints, record) as a candidate, its health
/// as the registry judged it.
fn candidate(
    world: &World,
    now: DateTime<Utc>,
    (name, labels, taints, record): (
        &String,
        &BTreeMap<String, String>,
        &Vec<fleetbus_schemas::registry::TimedTaint>,
        &serde_json::Value,
    ),
) -> Candidate {
    let health = match world.health.get(name) {
        Some(h) if h.state != "Ready" => Health::Failing {
            since: h.since,
            state: h.state,
        },
        Some(_) => Health::Ready,
        // Not judged yet (a peer just joined): not Ready either.
        None => Health::Failing {
            since: now,
            state: "Unknown",
        },
    };
    Candidate {
        name: name.clone(),
        labels: labels.clone(),
        taints: taints.clone(),
        health,
        capacity: capacity(record),
    }
}

/// Allocatable CPU (millicores) and memory (bytes) from a peer's record, if
/// it publishes them (`metadata.allocatable`; agents before placement do not).
/// Scores use only ratios between candidates, so the units need not match.
fn capacity(record: &serde_json::Value) -> (Option<f64>, Option<f64>) {
    let read = |k: &str| {
        record
            .pointer(&format!("/metadata/allocatable/{k}"))
            .and_then(serde_json::Value::as_f64)
    };
    (read("cpuMillis"), read("memoryBytes"))
}

/// The clusters reporting a copy of every object of `due` (`healthy`: a
/// Current copy of each; else any copy of any).
fn copies(
    reports: &BTreeMap<ObjectKey, Vec<ReportedStatus>>,
    due: &Due<'_>,
    healthy: bool,
) -> BTreeSet<String> {
    let of = |key: &ObjectKey| -> BTreeSet<String> {
        reports
            .get(key)
            .into_iter()
            .flatten()
            .filter(|r| !healthy || current(r))
            .map(|r| r.cluster.clone())
            .collect()
    };
    let mut sets = due.objects.iter().map(of);
    let first = sets.next().unwrap_or_default();
    sets.fold(first, |acc, s| {
        if healthy {
            acc.intersection(&s).cloned().collect()
        } else {
            acc.union(&s).cloned().collect()
        }
    })
}

fn current(r: &ReportedStatus) -> bool {
    match &r.health {
        Some(h) => h.status == HealthStatus::Current,
        None => r.ready == Some(true),
    }
}

/// Puts one record (signed in the secure mode), awaited.
async fn put(ctx: &Context, key: &PlacementKey, record: &PlacementRecord) -> Result<(), String> {
    let bytes = record.encode().map_err(|e| e.to_string())?;
    let bytes = crate::trust::sign_or_keep(ctx.cfg.trust.as_deref(), bytes);
    ctx.js
        .publish(key.to_subject(ctx.layout.prefix()), bytes.into())
        .await
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use fleetbus_schemas::crd::{Allocatable, ClusterMetadata};

    /// The reader follows the record's real field names (a record written
    /// by the schemas' type, not a hand-made JSON that could drift from it).
    #[test]
    fn capacity_reads_what_a_cluster_record_publishes() {
        let meta = ClusterMetadata {
            allocatable: Some(Allocatable {
                cpu_millis: 3_800,
                memory_bytes: 1 << 34,
            }),
            ..ClusterMetadata::default()
        };
        let record = serde_json::json!({ "metadata": serde_json::to_value(&meta).unwrap() });
        assert_eq!(
            super::capacity(&record),
            (Some(3_800.0), Some((1u64 << 34) as f64))
        );
        let old = serde_json::json!({ "metadata": {} });
        assert_eq!(super::capacity(&old), (None, None));
    }
}
