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
use super::decide::{decide, Candidate, Health, Inputs, RELEASE_STEP};
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
    let mut retry_at: Option<Instant> = None;
    let mut puts = Vec::new();
    let grace_ends = grace(world, book);
    let units = units_due(world);
    let count = units.len();
    let mut releases = ReleaseBudget::of(&units, book, now);
    // A rule's candidates are the same for each of its units: gathered once
    // per pass (per unit, that was most of a pass over 1,000 clusters).
    let mut fleet: BTreeMap<&str, RuleFleet> = BTreeMap::new();
    for due in units {
        // Placement just turned on for a rule with copies everywhere: the
        // sinks' reports of those copies are on their way (the rule reports
        // now); decided before they arrive, the clusters not chosen would
        // not be known to hold copies, and would lose them all at once.
        let prev = decided_now(book, &due);
        if prev.is_none() {
            if let Some(ends) = grace_ends.get(due.rule.name.as_str()) {
                retry_at = [retry_at, Some(*ends)].into_iter().flatten().min();
                continue;
            }
        }
        let RuleFleet {
            candidates,
            dependency_misses,
        } = fleet
            .entry(due.rule.name.as_str())
            .or_insert_with(|| RuleFleet::of(world, due.rule, &placed))
            .clone();
        // What the sinks said of this unit's objects, for a rule of it.
        let said: Vec<&(String, String, String)> = due
            .objects
            .iter()
            .flat_map(|o| unfit.get(o).into_iter().flatten())
            .filter(|(_, rule, _)| same_unit(world, due.rule, rule))
            .collect();
        let refused = if said.is_empty() {
            dependency_misses
        } else {
            let mut own = (*dependency_misses).clone();
            for (cluster, _, why) in said {
                own.entry(cluster.clone()).or_insert_with(|| why.clone());
            }
            Arc::new(own)
        };
        let input = Inputs {
            rule: due.rule.name.clone(),
            seed: due.key.unit.seed(),
            candidates,
            healthy: copies(&reports, &due, true),
            reporting: copies(&reports, &due, false),
            replicas: due.replicas,
            refused,
            release_from: releases.from(&due.rule.name),
        };
        let d = decide(prev, due.spec, &input, now);
        if d.record.last_release != prev.and_then(|p| p.last_release) {
            releases.note(&due.rule.name, d.record.last_release);
        }
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
    let retry = put_all(ctx, book, puts).await;
    let timer = wake.map(|t| {
        let ahead = (t - now).to_std().unwrap_or_default();
        // A millisecond past the clock, so the pass that wakes sees it over.
        Instant::now() + ahead + Duration::from_millis(1)
    });
    [retry, timer, retry_at].into_iter().flatten().min()
}

/// Puts the changed decisions, believes them at once (the consumer reads
/// them back later), counts them and says them as Events on the rules.
/// Returns when to try again, when a put failed.
async fn put_all(
    ctx: &Context,
    book: &mut PlacementBook,
    puts: Vec<(PlacementKey, PlacementRecord)>,
) -> Option<Instant> {
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
    retry
}

/// The unit's record, unless it was decided before placement was last
/// turned on for its rule (then it is no decision of the rule as it is).
fn decided_now<'b>(book: &'b PlacementBook, due: &Due<'_>) -> Option<&'b PlacementRecord> {
    let since = book.turned_on_at.get(&due.rule.name);
    book.record(&due.key)
        .filter(|r| since.is_none_or(|t| r.decided_at >= *t))
}

/// How long an origin waits, after placement is turned on for a rule it
/// saw without it, before deciding the rule's units that have no record yet.
pub(in crate::sync) const GRACE: Duration = Duration::from_secs(5);

/// The rules whose placement was turned on less than [`GRACE`] ago, with
/// when their grace ends (and the book's memory of the rules brought up to
/// date). A rule first seen with placement (new, or this agent restarted)
/// has no grace: a new rule has no copies, and a restarted origin has the
/// records of what it decided before.
fn grace<'w>(world: &'w World, book: &mut PlacementBook) -> BTreeMap<&'w str, Instant> {
    let now = Instant::now();
    let mut out = BTreeMap::new();
    for rule in world.rules.values() {
        let placed = rule.spec.placement.is_some();
        if placed && book.rules.get(&rule.name) == Some(&false) {
            book.turned_on.insert(rule.name.clone(), now);
            let at = fleetbus_schemas::time::truncate_to_ms(Utc::now());
            book.turned_on_at.insert(rule.name.clone(), at);
        }
        if !placed {
            book.turned_on_at.remove(&rule.name);
        }
        book.rules.insert(rule.name.clone(), placed);
        if let Some(since) = book.turned_on.get(&rule.name) {
            if placed && now < *since + GRACE {
                out.insert(rule.name.as_str(), *since + GRACE);
            }
        }
    }
    book.rules.retain(|r, _| world.rules.contains_key(r));
    book.turned_on_at.retain(|r, _| world.rules.contains_key(r));
    book.turned_on
        .retain(|r, since| world.rules.contains_key(r) && now < *since + GRACE);
    out
}

/// At most this many percent of a rule's units (at least one) release a
/// copy per [`RELEASE_STEP`]: turning placement on for a rule over many
/// objects removes their copies in steps, never all at once (each unit
/// also releases one cluster per step, after its chosen copies are Current).
const RELEASE_PERCENT: usize = 25;

/// The rule-wide release steps of one pass: per rule, how many units may
/// release per step and when the units did within the last step (read
/// from the records, so a restart does not reset it).
struct ReleaseBudget {
    per_rule: BTreeMap<String, (usize, Vec<DateTime<Utc>>)>,
}

impl ReleaseBudget {
    fn of(units: &[Due<'_>], book: &PlacementBook, now: DateTime<Utc>) -> Self {
        let last = units.iter().map(|due| {
            let at = book.record(&due.key).and_then(|r| r.last_release);
            (due.rule.name.as_str(), at)
        });
        Self::new(last, now)
    }

    /// From each unit's rule and last release.
    fn new<'r>(
        units: impl Iterator<Item = (&'r str, Option<DateTime<Utc>>)>,
        now: DateTime<Utc>,
    ) -> Self {
        let mut per_rule: BTreeMap<String, (usize, Vec<DateTime<Utc>>)> = BTreeMap::new();
        for (rule, last) in units {
            let e = per_rule.entry(rule.to_owned()).or_default();
            e.0 += 1;
            if let Some(t) = last.filter(|t| now - *t < RELEASE_STEP) {
                e.1.push(t);
            }
        }
        for (limit, _) in per_rule.values_mut() {
            *limit = (*limit * RELEASE_PERCENT).div_ceil(100).max(1);
        }
        Self { per_rule }
    }

    /// When `rule`'s next unit may release (None: now).
    fn from(&self, rule: &str) -> Option<DateTime<Utc>> {
        let (limit, recent) = self.per_rule.get(rule)?;
        (recent.len() >= *limit)
            .then(|| recent.iter().min().map(|t| *t + RELEASE_STEP))
            .flatten()
    }

    fn note(&mut self, rule: &str, at: Option<DateTime<Utc>>) {
        if let (Some(e), Some(t)) = (self.per_rule.get_mut(rule), at) {
            e.1.push(t);
        }
    }
}

/// What every unit of one rule reads of the fleet in one pass.
#[derive(Clone)]
struct RuleFleet {
    candidates: Arc<Vec<Candidate>>,
    /// The candidates where a dependency with placement places nothing.
    dependency_misses: Arc<BTreeMap<String, String>>,
}

impl RuleFleet {
    /// For `rule`'s units: a group's unit holds every rule of the group's
    /// objects, so what any of them cannot have counts.
    fn of(world: &World, rule: &CompiledRule, placed: &BTreeMap<String, BTreeSet<String>>) -> Self {
        let candidates = candidates(world, rule);
        let group: Vec<&CompiledRule> = world
            .rules
            .values()
            .filter(|r| same_unit(world, rule, &r.name))
            .collect();
        let deps: Vec<&str> = group
            .iter()
            .flat_map(|r| fitness::placed_dependencies(world, r))
            .collect();
        let mut misses =
            fitness::dependency_misses(&deps, placed, candidates.iter().map(|c| c.name.as_str()));
        for r in group {
            for (name, why) in fitness::unserved(world, r) {
                misses.entry(name).or_insert(why);
            }
        }
        Self {
            candidates: Arc::new(candidates),
            dependency_misses: Arc::new(misses),
        }
    }
}

/// Whether `other` (a rule's name) shares `rule`'s units: it is `rule`, or
/// in `rule`'s placement group.
fn same_unit(world: &World, rule: &CompiledRule, other: &str) -> bool {
    if rule.name == other {
        return true;
    }
    let group = |r: &CompiledRule| r.spec.placement.as_ref().and_then(|p| p.group.clone());
    group(rule).is_some_and(|g| world.rules.get(other).and_then(group) == Some(g))
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

    use super::{ReleaseBudget, RELEASE_STEP};

    /// A rule's units release at most 25% (at least one) per step: the
    /// budget counts the releases of the last step, those of this pass
    /// included, and says when the oldest of them frees a place.
    #[test]
    fn a_rule_releases_a_quarter_of_its_units_per_step_and_says_when_the_next_may() {
        let now = chrono::Utc::now();
        let recent = now - chrono::Duration::seconds(2);
        let old = now - RELEASE_STEP - chrono::Duration::seconds(1);
        // 10 units of `big` (3 per step), one released 2 s ago, one long ago;
        // 4 units of `small` (1 per step), none released yet.
        let units = (0..10)
            .map(|i| {
                let last = match i {
                    0 => Some(recent),
                    1 => Some(old),
                    _ => None,
                };
                ("big", last)
            })
            .chain((0..4).map(|_| ("small", None)));
        let mut b = ReleaseBudget::new(units, now);
        assert_eq!(b.from("big"), None, "1 of 3 used");
        b.note("big", Some(now));
        assert_eq!(b.from("big"), None, "2 of 3 used");
        b.note("big", Some(now));
        assert_eq!(
            b.from("big"),
            Some(recent + RELEASE_STEP),
            "full: the release 2 s ago frees the next place"
        );
        assert_eq!(b.from("small"), None);
        b.note("small", Some(now));
        assert_eq!(b.from("small"), Some(now + RELEASE_STEP));
        // A rule with no unit here has nothing to hold.
        assert_eq!(b.from("other"), None);
        b.note("other", Some(now));
        assert_eq!(b.from("other"), None);
    }

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
