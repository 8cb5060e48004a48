//! The origin's placement decision for one unit, pure (PROTOCOL §6.10):
//! from the last record, the placement spec, the clusters the rule's
//! `clusterSelector` matches (with their health, taints and capacity) and
//! the reports of the copies, the next record and when to look again.
//!
//! Restart safety rests on this being a function of what is on the bus:
//! an origin that restarts reads its records back and, in `Steady` mode,
//! keeps every choice that still holds, so a restart moves nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use chrono::{DateTime, Duration, Utc};
use fleetbus_schemas::crd::{
    divide, Capacity, ClusterCount, Divide, Failback, Placement, PlacementMode, Purge, TaintEffect,
};
use fleetbus_schemas::placement::{cut_reason, Chosen, Failing, Passed, PlacementRecord, Released};
use fleetbus_schemas::registry::TimedTaint;
use fleetbus_schemas::time::truncate_to_ms;
use sha2::{Digest as _, Sha256};

use crate::sync::rules::matching;

/// At most this many passed-over clusters are listed in a record.
const MAX_PASSED: usize = 50;
/// At most one released cluster loses its copy per this interval (the
/// "steps" of turning placement on for a rule that had copies everywhere).
pub(in crate::sync) const RELEASE_STEP: Duration = Duration::seconds(5);

/// A cluster's health as the registry judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::sync) enum Health {
    /// Ready.
    Ready,
    /// Disconnected or ApiUnreachable since then (by this agent's clock).
    Failing {
        /// Since when.
        since: DateTime<Utc>,
        /// Its state.
        state: &'static str,
    },
}

/// One cluster the rule's `clusterSelector` matches (Left, Disabled and
/// name-conflicted clusters are not candidates at all).
#[derive(Debug, Clone)]
pub(in crate::sync) struct Candidate {
    /// Its name.
    pub name: String,
    /// Its Cluster labels.
    pub labels: BTreeMap<String, String>,
    /// The operator's taints on it.
    pub taints: Vec<TimedTaint>,
    /// Its health.
    pub health: Health,
    /// Allocatable CPU (cores) and memory (bytes), if published.
    pub capacity: (Option<f64>, Option<f64>),
}

/// What one decision reads besides the last record and the spec.
#[derive(Debug, Clone, Default)]
pub(in crate::sync) struct Inputs {
    /// The rule whose placement decides.
    pub rule: String,
    /// The tie-break seed (the unit).
    pub seed: String,
    /// The candidates: the same for every unit of a rule in one pass, so
    /// shared rather than rebuilt per unit (a pass decides units × clusters).
    pub candidates: Arc<Vec<Candidate>>,
    /// Clusters whose copy of the unit is reported Current.
    pub healthy: BTreeSet<String>,
    /// Clusters reporting a copy of the unit at all.
    pub reporting: BTreeSet<String>,
    /// The replica count of the source (`replicas.path`), if divided.
    pub replicas: Option<i64>,
    /// Clusters that cannot hold the unit's copy, with why (`fitness`: a
    /// sink's SyncPolicy, a dependency placed elsewhere): never chosen, and
    /// a chosen one is replaced at once.
    pub refused: Arc<BTreeMap<String, String>>,
    /// No release before this time (None: whenever the unit's own step
    /// allows): the rule's releases are spread over steps (`origin`).
    pub release_from: Option<DateTime<Utc>>,
}

/// The next record and when it may change by time alone.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::sync) struct Decision {
    /// The record to stand by.
    pub record: PlacementRecord,
    /// Whether it differs from the last one (and so must be put).
    pub changed: bool,
    /// When a failover window or a release step ends.
    pub wake: Option<DateTime<Utc>>,
}

/// Where a candidate stands this decision.
struct Judged<'a> {
    c: &'a Candidate,
    score: f64,
    /// The unit, for the tie-break.
    seed: &'a str,
    /// The tie-break, hashed when first compared: only candidates whose
    /// score ties with one that is read need it (see [`Ranked`]).
    tie: std::cell::OnceCell<u64>,
    /// It may take a new copy now (Ready, no untolerated taint).
    fit: bool,
    /// Why not, if not.
    unfit: Option<String>,
    /// Failing (down, or tainted NoExecute) since, and what.
    failing: Option<(DateTime<Utc>, String)>,
    /// It cannot hold the copy at all (`Inputs::refused`).
    refused: bool,
}

/// The judged candidates by name: an index sorted by name, searched by
/// bisection. Built per decision from candidates that usually come sorted
/// (the fleet view is a map by name), so the sort is one linear check; a
/// map of strings per decision was most of a pass over 1,000 clusters.
struct ByName<'j, 'a> {
    judged: &'j [Judged<'a>],
    order: Vec<usize>,
}

impl<'j, 'a> ByName<'j, 'a> {
    fn new(judged: &'j [Judged<'a>]) -> Self {
        let mut order: Vec<usize> = (0..judged.len()).collect();
        // Names are unique (the fleet view is keyed by them); were they not,
        // one of the same name would be found, the same for the same input.
        order.sort_by(|a, b| judged[*a].c.name.cmp(&judged[*b].c.name));
        Self { judged, order }
    }

    fn get(&self, name: &str) -> Option<&'j Judged<'a>> {
        let judged = self.judged;
        self.order
            .binary_search_by(|i| judged[*i].c.name.as_str().cmp(name))
            .ok()
            .map(|at| &judged[self.order[at]])
    }

    fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }
}

/// Decides (see the module docs).
pub(in crate::sync) fn decide(
    prev: Option<&PlacementRecord>,
    spec: &Placement,
    input: &Inputs,
    now: DateTime<Utc>,
) -> Decision {
    // Stored times are at millisecond precision; clocks compare exactly.
    let exact = now;
    let now = truncate_to_ms(now);
    let after = Duration::seconds(i64::from(spec.failover.after_seconds));
    let judged = judge(spec, input);
    let by_name = ByName::new(&judged);
    let want = spec
        .clusters
        .as_ref()
        .and_then(|c| ClusterCount::parse(c).ok())
        .map_or(judged.len(), |c| c.of(judged.len()));
    let failed = |j: &Judged<'_>| j.failing.as_ref().is_some_and(|(s, _)| exact - *s >= after);
    let prev_chosen: BTreeSet<&str> = prev.map(|p| p.chosen_names().collect()).unwrap_or_default();

    let (keep, mut replaced) = what_stays(prev, spec, &by_name, &prev_chosen, &failed);
    let mut kept: Vec<&Judged<'_>> = keep.iter().filter_map(|n| by_name.get(n)).collect();
    kept.sort_by(|a, b| {
        rank(b)
            .partial_cmp(&rank(a))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    kept.truncate(want);
    let (picked, spread_miss) = pick(spec, &judged, &kept, want);
    let chosen_names: BTreeSet<&str> = picked.iter().map(|j| j.c.name.as_str()).collect();

    // Failovers: each failed earlier choice is paired with a new pick.
    let failed_out: Vec<&str> = prev_chosen
        .iter()
        .filter(|n| !chosen_names.contains(*n))
        .filter(|n| by_name.get(n).is_some_and(failed))
        .copied()
        .collect();
    let mut new_picks = chosen_names.iter().filter(|n| !prev_chosen.contains(*n));
    for gone in &failed_out {
        if let Some(by) = new_picks.next() {
            replaced.retain(|(g, _)| g != gone);
            replaced.push(((*gone).to_owned(), (*by).to_owned()));
        }
    }
    let chosen = chosen_list(spec, input, &picked, &replaced);

    let (draining, kept_for_good, last_release) = releases(
        prev,
        spec,
        input,
        &chosen_names,
        &prev_chosen,
        (&judged, &by_name),
        now,
    );
    let failing: Vec<Failing> = picked
        .iter()
        .filter_map(|j| {
            j.failing.as_ref().map(|(since, why)| Failing {
                cluster: j.c.name.clone(),
                since: truncate_to_ms(*since),
                reason: cut_reason(why.clone()),
            })
        })
        .collect();
    let passed = passed_over(&judged, &chosen_names, &draining, &kept_for_good);
    let degraded = degraded(want, chosen.len(), judged.len(), spread_miss);
    let same_choice = prev.is_some_and(|p| p.chosen == chosen);
    let mut record = PlacementRecord {
        rule: input.rule.clone(),
        revision: prev.map_or(1, |p| {
            if same_choice {
                p.revision
            } else {
                p.revision + 1
            }
        }),
        chosen,
        draining,
        kept: kept_for_good,
        failing,
        replaced,
        passed,
        degraded,
        decided_at: if same_choice {
            prev.map_or(now, |p| p.decided_at)
        } else {
            now
        },
        last_release,
    };
    record.replaced.sort();
    let changed = prev != Some(&record);
    // A release waits on time only once every chosen copy is healthy;
    // before that, the reports that say so wake the origin.
    let releasable = !record.chosen.is_empty()
        && record
            .chosen
            .iter()
            .all(|c| input.healthy.contains(&c.cluster));
    let release_from = releasable.then_some(input.release_from);
    let wake = wake(&record, &by_name, (after, release_from), now);
    Decision {
        record,
        changed,
        wake,
    }
}

/// What stays chosen: in Steady mode every earlier choice that still
/// matches and has not failed; in Rebalance mode only those failing within
/// their window (a decision never drops a cluster for being down less than
/// afterSeconds); with failback Immediate, a replaced cluster that is back
/// instead of its replacement. And the failovers still remembered.
fn what_stays(
    prev: Option<&PlacementRecord>,
    spec: &Placement,
    by_name: &ByName<'_, '_>,
    prev_chosen: &BTreeSet<&str>,
    failed: &dyn Fn(&Judged<'_>) -> bool,
) -> (BTreeSet<String>, Vec<(String, String)>) {
    let mut keep: BTreeSet<String> = prev_chosen
        .iter()
        .filter_map(|n| by_name.get(n))
        .filter(|j| !failed(j) && !j.refused)
        .filter(|j| spec.mode == PlacementMode::Steady || j.failing.is_some())
        .map(|j| j.c.name.clone())
        .collect();
    let mut replaced: Vec<(String, String)> = prev.map(|p| p.replaced.clone()).unwrap_or_default();
    if spec.failover.failback == Failback::Immediate {
        for (gone, by) in &replaced {
            if by_name.get(gone).is_some_and(|j| j.fit) {
                keep.insert(gone.clone());
                keep.remove(by);
            }
        }
    }
    // The returned cluster is chosen again, or (failback Never) no longer
    // waited for once it is back or gone.
    replaced.retain(|(gone, _)| {
        !keep.contains(gone)
            && by_name
                .get(gone)
                .is_some_and(|j| !j.fit || spec.failover.failback == Failback::Immediate)
    });
    (keep, replaced)
}

/// The chosen clusters by name, with their reasons and replica shares.
fn chosen_list(
    spec: &Placement,
    input: &Inputs,
    picked: &[&Judged<'_>],
    replaced: &[(String, String)],
) -> Vec<Chosen> {
    let mut chosen: Vec<Chosen> = picked
        .iter()
        .map(|j| Chosen {
            cluster: j.c.name.clone(),
            score: (j.score * 1000.0).round() / 1000.0,
            replicas: None,
            reason: cut_reason(reason_chosen(spec, j, replaced)),
        })
        .collect();
    chosen.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    if let (Some(r), Some(total)) = (&spec.replicas, input.replicas) {
        let weights: Vec<f64> = chosen
            .iter()
            .map(|c| match r.divide {
                Divide::Equal => 1.0,
                Divide::Weighted => c.score,
            })
            .collect();
        for (c, share) in chosen.iter_mut().zip(divide(total, &weights)) {
            c.replicas = Some(share);
        }
    }
    chosen
}

/// Scores, tie-breaks and fitness of every candidate.
fn judge<'a>(spec: &Placement, input: &'a Inputs) -> Vec<Judged<'a>> {
    let max = |f: fn(&Candidate) -> Option<f64>| {
        input
            .candidates
            .iter()
            .filter_map(f)
            .fold(0.0_f64, f64::max)
    };
    let (max_cpu, max_mem) = (max(|c| c.capacity.0), max(|c| c.capacity.1));
    input
        .candidates
        .iter()
        .map(|c| {
            let mut score = 0.0;
            for p in &spec.prefer {
                let w = f64::from(p.weight);
                if let Some(sel) = &p.cluster_selector {
                    if matching::selector_matches(Some(sel), &c.labels).unwrap_or(false) {
                        score += w;
                    }
                }
                let share =
                    |v: Option<f64>, m: f64| if m > 0.0 { v.unwrap_or(0.0) / m } else { 0.0 };
                match p.capacity {
                    Some(Capacity::Cpu) => score += w * share(c.capacity.0, max_cpu),
                    Some(Capacity::Memory) => score += w * share(c.capacity.1, max_mem),
                    None => {}
                }
            }
            let untolerated = |e: TaintEffect| {
                c.taints
                    .iter()
                    .filter(|t| t.taint.effect == e)
                    .find(|t| !spec.tolerations.iter().any(|tol| tol.tolerates(&t.taint)))
            };
            let no_exec = untolerated(TaintEffect::NoExecute);
            let no_sched = untolerated(TaintEffect::NoSchedule).or(no_exec);
            let down = match &c.health {
                Health::Ready => None,
                Health::Failing { since, state } => Some((*since, (*state).to_owned())),
            };
            let tainted = no_exec.map(|t| (t.added_at, format!("tainted {}", show(t))));
            let failing = match (down, tainted) {
                (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
                (a, b) => a.or(b),
            };
            let refused = input.refused.get(&c.name);
            let unfit = match (&c.health, no_sched, refused) {
                (_, _, Some(why)) => Some(why.clone()),
                (Health::Failing { state, .. }, _, _) => Some((*state).to_owned()),
                (_, Some(t), _) => Some(format!("tainted {} (not tolerated)", show(t))),
                _ => None,
            };
            Judged {
                c,
                score,
                seed: &input.seed,
                tie: std::cell::OnceCell::new(),
                fit: unfit.is_none(),
                unfit,
                failing,
                refused: refused.is_some(),
            }
        })
        .collect()
}

fn show(t: &TimedTaint) -> String {
    let t = &t.taint;
    if t.value.is_empty() {
        format!("{}:{}", t.key, t.effect.as_str())
    } else {
        format!("{}={}:{}", t.key, t.value, t.effect.as_str())
    }
}

impl Judged<'_> {
    fn tie(&self) -> u64 {
        *self.tie.get_or_init(|| tie(self.seed, &self.c.name))
    }
}

/// The fit candidates in [`rank`] order, read from the best: sorted by
/// score, and each run of equal scores sorted by its tie-break when the
/// reading first reaches it. A pick usually reads a few of the best, so
/// most candidates are never hashed (a SHA-256 per candidate per unit was
/// a third of a pass over 1,000 clusters); the order is the full sort's.
struct Ranked<'b, 'a> {
    pool: Vec<&'b Judged<'a>>,
    /// `pool[..settled]` is in rank order and ends at a change of score.
    settled: usize,
}

impl<'b, 'a> Ranked<'b, 'a> {
    fn new(mut pool: Vec<&'b Judged<'a>>) -> Self {
        pool.sort_by(|a, b| {
            b.score
                .partial_cmp(&a.score)
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        Self { pool, settled: 0 }
    }

    fn is_empty(&self) -> bool {
        self.pool.is_empty()
    }

    /// Puts `pool[..=i]` in rank order.
    fn settle(&mut self, i: usize) {
        while self.settled <= i && self.settled < self.pool.len() {
            let score = self.pool[self.settled].score;
            let run = self.pool[self.settled..]
                .iter()
                .take_while(|j| j.score == score)
                .count();
            let end = self.settled + run;
            // The lower hash first, as `rank` orders them.
            self.pool[self.settled..end].sort_by_key(|j| j.tie());
            self.settled = end;
        }
    }

    /// The first candidate in rank order that `ok` accepts.
    fn position(&mut self, ok: impl Fn(&Judged<'a>) -> bool) -> Option<usize> {
        (0..self.pool.len()).find(|i| {
            self.settle(*i);
            ok(self.pool[*i])
        })
    }

    fn remove(&mut self, at: usize) -> &'b Judged<'a> {
        self.settle(at);
        self.settled -= 1;
        self.pool.remove(at)
    }
}

/// A stable hash of (unit, cluster): the tie-break, the same on every agent.
fn tie(seed: &str, cluster: &str) -> u64 {
    let mut h = Sha256::new();
    h.update(seed.as_bytes());
    h.update([0]);
    h.update(cluster.as_bytes());
    let d = h.finalize();
    let mut b = [0u8; 8];
    b.copy_from_slice(&d[..8]);
    u64::from_be_bytes(b)
}

/// Higher is better: score, then the lower hash.
fn rank(j: &Judged<'_>) -> (f64, std::cmp::Reverse<u64>) {
    (j.score, std::cmp::Reverse(j.tie()))
}

/// The spread domain of `c` under `key` (None: the label is missing).
fn domain<'a>(c: &'a Candidate, key: &str) -> Option<&'a str> {
    c.labels.get(key).map(String::as_str)
}

/// Fills `kept` up to `want` clusters from the fit candidates, best first,
/// each pick keeping every spread constraint's skew (chosen count of the
/// fullest domain minus that of the emptiest, among the domains of fit or
/// kept clusters) within its `maxSkew` when any candidate can. Returns the
/// choice and the constraints that could not be kept.
fn pick<'a, 'b>(
    spec: &Placement,
    judged: &'b [Judged<'a>],
    kept: &[&'b Judged<'a>],
    want: usize,
) -> (Vec<&'b Judged<'a>>, Vec<String>) {
    let mut chosen: Vec<&Judged<'_>> = kept.to_vec();
    let mut misses = Vec::new();
    let mut pool = Ranked::new(
        judged
            .iter()
            .filter(|j| j.fit && !chosen.iter().any(|k| std::ptr::eq(*k, *j)))
            .collect(),
    );
    // Each constraint's domains: those of the clusters that can hold a copy.
    let domains: Vec<BTreeSet<&str>> = spec
        .spread
        .iter()
        .map(|s| {
            judged
                .iter()
                .filter(|j| j.fit || chosen.iter().any(|k| std::ptr::eq(*k, *j)))
                .filter_map(|j| domain(j.c, &s.topology_key))
                .collect()
        })
        .collect();
    for (s, d) in spec.spread.iter().zip(&domains) {
        if d.is_empty() && !pool.is_empty() {
            misses.push(format!(
                "spread over {}: no cluster has the label",
                s.topology_key
            ));
        }
    }
    let skew_ok = |chosen: &[&Judged<'_>], cand: &Judged<'_>| {
        spec.spread.iter().zip(&domains).all(|(s, doms)| {
            if doms.is_empty() {
                return true;
            }
            let Some(d) = domain(cand.c, &s.topology_key) else {
                return false;
            };
            let count = |dom: &str| {
                chosen
                    .iter()
                    .filter(|k| domain(k.c, &s.topology_key) == Some(dom))
                    .count()
                    + usize::from(dom == d)
            };
            let max = doms.iter().map(|x| count(x)).max().unwrap_or(0);
            let min = doms.iter().map(|x| count(x)).min().unwrap_or(0);
            max - min <= s.max_skew as usize
        })
    };
    while chosen.len() < want && !pool.is_empty() {
        let at = pool.position(|c| skew_ok(&chosen, c)).unwrap_or_else(|| {
            if let Some(s) = spec.spread.first() {
                let m = format!(
                    "spread over {} (maxSkew {}) could not be kept",
                    s.topology_key, s.max_skew
                );
                if !misses.contains(&m) {
                    misses.push(m);
                }
            }
            0
        });
        chosen.push(pool.remove(at));
    }
    (chosen, misses)
}

fn reason_chosen(spec: &Placement, j: &Judged<'_>, replaced: &[(String, String)]) -> String {
    let mut parts = vec![format!("score {:.1}", j.score)];
    for s in &spec.spread {
        if let Some(d) = domain(j.c, &s.topology_key) {
            parts.push(format!("{}={d}", s.topology_key));
        }
    }
    if let Some((gone, _)) = replaced.iter().find(|(_, by)| *by == j.c.name) {
        parts.push(format!("replaces {gone} (failover)"));
    }
    if let Some((_, why)) = &j.failing {
        parts.push(format!("{why}, not replaced yet"));
    }
    parts.join(", ")
}

/// The clusters no longer chosen that keep their copies: `draining`
/// (purge Graciously) until every chosen copy is healthy, then released one
/// per [`RELEASE_STEP`]; `kept` (purge Never) for good; Immediately: none.
fn releases(
    prev: Option<&PlacementRecord>,
    spec: &Placement,
    input: &Inputs,
    chosen: &BTreeSet<&str>,
    prev_chosen: &BTreeSet<&str>,
    (judged, by_name): (&[Judged<'_>], &ByName<'_, '_>),
    now: DateTime<Utc>,
) -> (Vec<Released>, Vec<Released>, Option<DateTime<Utc>>) {
    let mut draining: Vec<Released> = prev.map(|p| p.draining.clone()).unwrap_or_default();
    let mut kept: Vec<Released> = prev.map(|p| p.kept.clone()).unwrap_or_default();
    let mut last_release = prev.and_then(|p| p.last_release);
    let released = |name: &str, why: &str| Released {
        cluster: name.to_owned(),
        since: now,
        reason: cut_reason(why.to_owned()),
    };
    let mut newly: Vec<Released> = prev_chosen
        .iter()
        .filter(|n| !chosen.contains(*n))
        .map(|n| {
            let why = by_name
                .get(n)
                .and_then(|j| {
                    let refused = j.unfit.as_ref().filter(|_| j.refused);
                    let failed = j.failing.as_ref().map(|(_, w)| format!("{w}: failed over"));
                    refused.cloned().or(failed)
                })
                .unwrap_or_else(|| "no longer chosen".to_owned());
            released(n, &why)
        })
        .collect();
    if prev.is_none() {
        // Placement turned on for a rule that may have copies everywhere:
        // the clusters not chosen lose them in steps, not all at once.
        newly.extend(
            judged
                .iter()
                .filter(|j| !chosen.contains(j.c.name.as_str()))
                .filter(|j| input.reporting.contains(&j.c.name))
                .map(|j| released(&j.c.name, "placement turned on: not chosen")),
        );
    }
    match spec.failover.purge {
        Purge::Immediately => draining.clear(),
        Purge::Never => kept.append(&mut newly),
        Purge::Graciously => draining.append(&mut newly),
    }
    // Chosen again: no longer released. Gone from the candidates (left,
    // unmatched): nothing to keep.
    let candidate = |n: &str| by_name.contains(n);
    draining.retain(|d| !chosen.contains(d.cluster.as_str()) && candidate(&d.cluster));
    kept.retain(|d| !chosen.contains(d.cluster.as_str()) && candidate(&d.cluster));
    draining.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    draining.dedup_by(|a, b| a.cluster == b.cluster);
    kept.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    kept.dedup_by(|a, b| a.cluster == b.cluster);
    let all_healthy = !chosen.is_empty() && chosen.iter().all(|c| input.healthy.contains(*c));
    let step_over = last_release.is_none_or(|t| now - t >= RELEASE_STEP)
        && input.release_from.is_none_or(|t| now >= truncate_to_ms(t));
    if all_healthy && step_over && !draining.is_empty() {
        draining.remove(0);
        last_release = Some(now);
    }
    (draining, kept, last_release)
}

fn passed_over(
    judged: &[Judged<'_>],
    chosen: &BTreeSet<&str>,
    draining: &[Released],
    kept: &[Released],
) -> Vec<Passed> {
    // Only the first MAX_PASSED by name are listed: pick them before
    // formatting a reason (formatting every one was most of a pass).
    let mut not_chosen: Vec<&Judged<'_>> = judged
        .iter()
        .filter(|j| !chosen.contains(j.c.name.as_str()))
        .collect();
    not_chosen.sort_by(|a, b| a.c.name.cmp(&b.c.name));
    not_chosen.truncate(MAX_PASSED);
    not_chosen
        .into_iter()
        .map(|j| {
            let mut why = j
                .unfit
                .clone()
                .unwrap_or_else(|| format!("score {:.1}: enough clusters chosen", j.score));
            if draining.iter().any(|d| d.cluster == j.c.name) {
                why.push_str("; keeps its copy until the chosen ones are healthy");
            } else if kept.iter().any(|d| d.cluster == j.c.name) {
                why.push_str("; keeps its copy (purge: Never)");
            }
            Passed {
                cluster: j.c.name.clone(),
                reason: cut_reason(why),
            }
        })
        .collect()
}

fn degraded(want: usize, got: usize, matched: usize, spread: Vec<String>) -> Option<String> {
    let mut parts = spread;
    if got < want {
        parts.insert(
            0,
            format!("{got} of {want} clusters can hold a copy ({matched} matched)"),
        );
    }
    (!parts.is_empty()).then(|| cut_reason(parts.join("; ")))
}

/// When a chosen cluster's failover window ends, or the next release step
/// (`release`: Some when a release waits on time alone, with the rule's
/// own earliest time if it has one).
fn wake(
    rec: &PlacementRecord,
    by_name: &ByName<'_, '_>,
    (after, release): (Duration, Option<Option<DateTime<Utc>>>),
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let windows = rec.chosen.iter().filter_map(|c| {
        by_name
            .get(&c.cluster)
            .and_then(|j| j.failing.as_ref())
            .map(|(since, _)| *since + after)
    });
    let step = release.filter(|_| !rec.draining.is_empty()).map(|from| {
        let own = rec.last_release.map_or(now, |t| t + RELEASE_STEP);
        from.map_or(own, |t| own.max(t))
    });
    windows.chain(step).filter(|t| *t >= now).min()
}

#[cfg(test)]
mod tests;
