//! The origin's rollout decision for one (rule, source object), pure
//! (PROTOCOL §6.9): from the last record, the newest version, the selected
//! clusters and their reports, the next record, and when to look again.
//!
//! Restart safety rests on this being a function of what is on the bus: an
//! origin that restarts reads its records back and decides from them, so no
//! cluster is admitted twice and none is skipped. Only the `minReadySeconds`
//! clocks (`current_since`) are the origin's own and start again.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};
use fleetbus_schemas::crd::{MaxUnavailable, OnFailure, Rollout};
use fleetbus_schemas::health::HealthStatus;
use fleetbus_schemas::rollout::{
    cut_message, PausedBy, RolloutAction, RolloutPhase, RolloutRecord,
};
use fleetbus_schemas::time::truncate_to_ms;
use fleetbus_schemas::ObjectRef;

/// One selected sink cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::sync) struct Cluster {
    /// Its name.
    pub name: String,
    /// Index of the first rollout group whose selector matches it;
    /// `groups.len()` for the implicit last group.
    pub group: usize,
    /// Whether its agent is alive now: a dead cluster is not waited for
    /// (it would pause every rollout at its deadline) and not admitted.
    pub connected: bool,
}

/// What a sink last reported of its copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::sync) struct Report {
    /// The content hash the copy was written from.
    pub hash: Option<String>,
    /// Its health.
    pub health: HealthStatus,
    /// The health message.
    pub message: String,
    /// Since when the origin has seen this copy `Current` at `hash` (its own
    /// clock); None while not Current.
    pub current_since: Option<DateTime<Utc>>,
}

/// Everything one decision reads besides the last record and the spec.
#[derive(Debug, Clone)]
pub(in crate::sync) struct Inputs {
    /// This cluster (the origin).
    pub origin: String,
    /// The rule.
    pub rule: String,
    /// The source object (with its uid).
    pub source: ObjectRef,
    /// The newest version on our own `obj.` subject; None: the source is
    /// deleted (a tombstone).
    pub current: Option<String>,
    /// Selected clusters, the origin excluded.
    pub clusters: Vec<Cluster>,
    /// Their last reports, by cluster.
    pub reports: BTreeMap<String, Report>,
}

/// The next record and when it may change by time alone.
#[derive(Debug, Clone, PartialEq)]
pub(in crate::sync) struct Decision {
    /// The record to stand by.
    pub record: RolloutRecord,
    /// Whether it differs from the last one in what sinks or a restarted
    /// origin act on (and so must be put).
    pub changed: bool,
    /// The earliest time a clock (minReadySeconds, a progress deadline) ends.
    pub wake: Option<DateTime<Utc>>,
}

/// The first record for an object: nothing admitted, no stable version.
fn first(input: &Inputs, target: &str, now: DateTime<Utc>) -> RolloutRecord {
    RolloutRecord {
        origin: input.origin.clone(),
        rule: input.rule.clone(),
        source: input.source.clone(),
        revision: 1,
        stable: None,
        target: Some(target.to_owned()),
        phase: RolloutPhase::Progressing,
        admitted: BTreeMap::new(),
        admitted_at: BTreeMap::new(),
        failed: BTreeMap::new(),
        step: 0,
        steps: 0,
        paused_by: None,
        reason: String::new(),
        message: String::new(),
        updated_at: now,
    }
}

/// Whether two records differ in what is acted on. `step`, `reason`,
/// `message` and `updatedAt` are for people and never cause a put alone.
fn same_decision(a: &RolloutRecord, b: &RolloutRecord) -> bool {
    (
        &a.stable,
        &a.target,
        a.revision,
        a.phase,
        a.paused_by,
        &a.admitted,
        &a.admitted_at,
        &a.failed,
        &a.source.uid,
    ) == (
        &b.stable,
        &b.target,
        b.revision,
        b.phase,
        b.paused_by,
        &b.admitted,
        &b.admitted_at,
        &b.failed,
        &b.source.uid,
    )
}

/// Moves `cluster` to `target`: out of any older admission, and listed
/// unless `target` is what unlisted clusters run anyway.
fn admit(rec: &mut RolloutRecord, cluster: &str, now: DateTime<Utc>) {
    unlist(rec, cluster);
    if rec.target != rec.stable {
        if let Some(t) = &rec.target {
            rec.admitted
                .entry(t.clone())
                .or_default()
                .insert(cluster.to_owned());
        }
    }
    rec.admitted_at.insert(cluster.to_owned(), now);
}

fn unlist(rec: &mut RolloutRecord, cluster: &str) {
    for set in rec.admitted.values_mut() {
        set.remove(cluster);
    }
    rec.admitted.retain(|_, set| !set.is_empty());
}

/// The decision (see PROTOCOL §6.9, "How the origin decides").
pub(in crate::sync) fn decide(
    prev: Option<&RolloutRecord>,
    spec: &Rollout,
    input: &Inputs,
    now: DateTime<Utc>,
) -> Decision {
    decide_from(prev, prev, spec, input, now)
}

/// The decision after an operator's `action` on the stored record `prev`:
/// the command, then the rules in the same step, so the record put says
/// what the command did and what followed (a resume admits at once). The
/// error is why the command is refused (nothing changes then).
pub(in crate::sync) fn decide_with(
    prev: Option<&RolloutRecord>,
    action: RolloutAction,
    spec: &Rollout,
    input: &Inputs,
    now: DateTime<Utc>,
) -> Result<Decision, String> {
    let commanded = match prev {
        Some(p) => command(p, action, now)?,
        None => return Err("no rollout record yet: nothing decided to command".into()),
    };
    Ok(decide_from(
        prev,
        commanded.as_ref().or(prev),
        spec,
        input,
        now,
    ))
}

/// Decides from `base` (the stored record, or it after a command) and
/// compares with `stored` to know whether to put.
fn decide_from(
    stored: Option<&RolloutRecord>,
    base: Option<&RolloutRecord>,
    spec: &Rollout,
    input: &Inputs,
    now: DateTime<Utc>,
) -> Decision {
    let now = truncate_to_ms(now);
    let Some(current) = input.current.as_deref() else {
        return gone(stored, base, input, now);
    };
    let prev = base;
    let mut rec = match prev {
        // A deleted source that came back is a new object.
        Some(p) if p.phase != RolloutPhase::Gone => p.clone(),
        Some(p) => RolloutRecord {
            revision: p.revision + 1,
            ..first(input, current, now)
        },
        None => first(input, current, now),
    };
    rec.source = input.source.clone();
    if rec.target.as_deref() != Some(current) {
        new_target(&mut rec, current);
    }
    forget_unselected(&mut rec, input);
    let run = Run::new(spec, input, &rec, now);
    // Not after an abort or a rollback: a copy still reporting the target
    // there is on its way back, not a cluster to list as running it.
    if matches!(rec.phase, RolloutPhase::Progressing | RolloutPhase::Paused) {
        run.adopt(&mut rec);
        run.failures(&mut rec);
    }
    if rec.phase == RolloutPhase::Progressing {
        run.progress(&mut rec);
    } else {
        run.describe_stopped(&mut rec);
    }
    let wake = run.wake(&rec);
    finish(stored, rec, now, wake)
}

/// Keeps the last record when nothing acted on changed (no put), else
/// stamps the new one.
fn finish(
    prev: Option<&RolloutRecord>,
    mut rec: RolloutRecord,
    now: DateTime<Utc>,
    wake: Option<DateTime<Utc>>,
) -> Decision {
    rec.reason = cut_message(rec.reason);
    rec.message = cut_message(rec.message);
    match prev {
        Some(p) if same_decision(p, &rec) => Decision {
            record: p.clone(),
            changed: false,
            wake,
        },
        _ => {
            rec.updated_at = now;
            Decision {
                record: rec,
                changed: true,
                wake,
            }
        }
    }
}

/// The source is deleted: a final record naming no version (its tombstone
/// deletes every copy at once; deletes are not staged).
fn gone(
    prev: Option<&RolloutRecord>,
    base: Option<&RolloutRecord>,
    input: &Inputs,
    now: DateTime<Utc>,
) -> Decision {
    let mut rec = base.cloned().unwrap_or_else(|| first(input, "", now));
    rec.phase = RolloutPhase::Gone;
    rec.target = None;
    rec.admitted.clear();
    rec.admitted_at.clear();
    rec.failed.clear();
    rec.paused_by = None;
    rec.reason = "Gone".into();
    rec.message = "the source was deleted".into();
    match prev {
        // Nothing was ever decided for it: nothing to say.
        None => Decision {
            record: rec,
            changed: false,
            wake: None,
        },
        Some(_) => finish(prev, rec, now, None),
    }
}

/// A new source version: a new revision rolls from where the clusters are.
fn new_target(rec: &mut RolloutRecord, current: &str) {
    rec.target = Some(current.to_owned());
    rec.revision += 1;
    // Failures were about the old target; a new version is the usual fix.
    rec.failed.clear();
    if rec.paused_by == Some(PausedBy::Failure) {
        rec.paused_by = None;
    }
    if rec.paused_by.is_none() {
        rec.phase = RolloutPhase::Progressing;
    }
    // Clusters admitted to the new version already (a revert to a version
    // some run) stay, and so do clusters on older versions until their turn.
    let stable = rec.stable.clone();
    rec.admitted.retain(|hash, _| Some(hash) != stable.as_ref());
}

/// Clusters no longer selected are no business of the rollout.
fn forget_unselected(rec: &mut RolloutRecord, input: &Inputs) {
    let selected: BTreeSet<&str> = input.clusters.iter().map(|c| c.name.as_str()).collect();
    for set in rec.admitted.values_mut() {
        set.retain(|c| selected.contains(c.as_str()));
    }
    rec.admitted.retain(|_, set| !set.is_empty());
    rec.admitted_at.retain(|c, _| selected.contains(c.as_str()));
    rec.failed.retain(|c, _| selected.contains(c.as_str()));
}

/// One decision's view of the clusters.
struct Run<'a> {
    spec: &'a Rollout,
    input: &'a Inputs,
    target: String,
    now: DateTime<Utc>,
    min_ready: Duration,
    deadline: Duration,
    /// Clusters whose copy runs the target healthily for minReadySeconds.
    done: BTreeSet<&'a str>,
}

impl<'a> Run<'a> {
    fn new(spec: &'a Rollout, input: &'a Inputs, rec: &RolloutRecord, now: DateTime<Utc>) -> Self {
        let target = rec.target.clone().unwrap_or_default();
        let min_ready = Duration::seconds(i64::from(spec.min_ready_seconds));
        let done = input
            .clusters
            .iter()
            .filter(|c| {
                input.reports.get(&c.name).is_some_and(|r| {
                    r.hash.as_deref() == Some(target.as_str())
                        && r.health == HealthStatus::Current
                        && r.current_since.is_some_and(|t| t + min_ready <= now)
                })
            })
            .map(|c| c.name.as_str())
            .collect();
        Self {
            spec,
            input,
            target,
            now,
            min_ready,
            deadline: Duration::seconds(i64::from(spec.progress_deadline_seconds)),
            done,
        }
    }

    fn on_target(&self, rec: &RolloutRecord, c: &str) -> bool {
        rec.version_of(c) == Some(self.target.as_str())
    }

    fn continue_on_failure(&self) -> bool {
        self.spec.on_failure == OnFailure::Continue
    }

    /// Settled: done, or failed where failures do not hold the rollout.
    fn settled(&self, rec: &RolloutRecord, c: &str) -> bool {
        self.done.contains(c) || (self.continue_on_failure() && rec.failed.contains_key(c))
    }

    /// A cluster already running the target healthily (a rule given a
    /// rollout over existing copies, a revert) is listed as running it at
    /// no cost: its copy is never rewritten, and the record says so.
    fn adopt(&self, rec: &mut RolloutRecord) {
        for c in &self.done {
            rec.failed.remove(*c);
            if !self.on_target(rec, c) {
                admit(rec, c, self.now);
            }
        }
    }

    /// Admitted clusters whose copy failed or missed its deadline; under
    /// `onFailure: Pause` they pause the rollout.
    fn failures(&self, rec: &mut RolloutRecord) {
        let mut new = Vec::new();
        for c in &self.input.clusters {
            let name = c.name.as_str();
            if !self.on_target(rec, name)
                || self.done.contains(name)
                || rec.failed.contains_key(name)
            {
                continue;
            }
            let report = self.input.reports.get(name);
            let why = match (report, rec.admitted_at.get(name)) {
                (Some(r), _)
                    if r.hash.as_deref() == Some(self.target.as_str())
                        && r.health == HealthStatus::Failed =>
                {
                    Some(format!("{name}: Failed: {}", r.message))
                }
                // Current at the target but not for minReadySeconds yet (its
                // clock restarts with the origin) is healthy, not late.
                (Some(r), _)
                    if r.hash.as_deref() == Some(self.target.as_str())
                        && r.health == HealthStatus::Current =>
                {
                    None
                }
                (_, Some(at)) if *at + self.deadline <= self.now => Some(format!(
                    "{name}: not healthy within {}s",
                    self.spec.progress_deadline_seconds
                )),
                _ => None,
            };
            if let Some(why) = why {
                rec.failed.insert(name.to_owned(), cut_message(why));
                new.push(name);
            }
        }
        if !new.is_empty() && !self.continue_on_failure() && rec.phase == RolloutPhase::Progressing
        {
            rec.phase = RolloutPhase::Paused;
            rec.paused_by = Some(PausedBy::Failure);
        }
    }

    /// Admits the next clusters, or completes.
    fn progress(&self, rec: &mut RolloutRecord) {
        let groups = self.spec.groups.len();
        rec.steps = u32::try_from(groups + 1).unwrap_or(u32::MAX);
        let pending = |rec: &RolloutRecord, c: &Cluster| c.connected && !self.settled(rec, &c.name);
        let Some(group) = self
            .input
            .clusters
            .iter()
            .filter(|c| pending(rec, c))
            .map(|c| c.group)
            .min()
        else {
            return self.complete(rec);
        };
        rec.step = u32::try_from(group).unwrap_or(u32::MAX);
        let budget = self
            .spec
            .groups
            .get(group)
            .and_then(|g| g.max_unavailable.as_ref())
            .unwrap_or(&self.spec.max_unavailable);
        let budget = MaxUnavailable::parse(budget)
            .unwrap_or(MaxUnavailable::Count(1))
            .of(self.input.clusters.len());
        let mut room = budget.saturating_sub(self.unavailable(rec));
        let candidates: Vec<&str> = self
            .input
            .clusters
            .iter()
            .filter(|c| c.group == group && pending(rec, c) && !self.on_target(rec, &c.name))
            .map(|c| c.name.as_str())
            .collect();
        for c in candidates {
            if room == 0 {
                break;
            }
            admit(rec, c, self.now);
            room -= 1;
        }
        let waiting: Vec<&str> = self
            .input
            .clusters
            .iter()
            .filter(|c| self.on_target(rec, &c.name) && !self.settled(rec, &c.name))
            .map(|c| c.name.as_str())
            .collect();
        rec.reason = "WaitingForReady".into();
        rec.message = format!(
            "step {}/{}: waiting for {} to be Current for {}s",
            group + 1,
            groups + 1,
            list(&waiting),
            self.spec.min_ready_seconds
        );
    }

    /// Clusters making the fleet less available because of the rollout.
    fn unavailable(&self, rec: &RolloutRecord) -> usize {
        self.input
            .clusters
            .iter()
            .filter(|c| {
                let name = c.name.as_str();
                if self.settled(rec, name) {
                    return false;
                }
                if self.on_target(rec, name) {
                    // Admitted and not yet done, connected or not.
                    return true;
                }
                c.connected
                    && self
                        .input
                        .reports
                        .get(name)
                        .is_some_and(|r| r.health != HealthStatus::Current)
            })
            .count()
    }

    /// Every connected cluster is settled: the target is the new stable.
    /// Not while no selected cluster at all is done: a version nobody ran
    /// must not become everyone's because every cluster is away.
    fn complete(&self, rec: &mut RolloutRecord) {
        rec.step = rec.steps.saturating_sub(1);
        if !self.input.clusters.is_empty() && self.done.is_empty() {
            rec.reason = "WaitingForClusters".into();
            rec.message = format!(
                "no selected cluster runs {} healthily yet (the others are disconnected or failed)",
                short(&self.target)
            );
            return;
        }
        rec.stable = rec.target.clone();
        rec.admitted.clear();
        rec.admitted_at.clear();
        rec.failed.clear();
        rec.phase = RolloutPhase::Complete;
        rec.reason = "Complete".into();
        rec.message = format!("every selected cluster runs {}", short(&self.target));
    }

    /// Why a rollout is not moving.
    fn describe_stopped(&self, rec: &mut RolloutRecord) {
        let (reason, message) = match (rec.phase, rec.paused_by) {
            (RolloutPhase::Paused, Some(PausedBy::Failure)) => (
                "Failed",
                format!(
                    "paused: {}",
                    rec.failed.values().cloned().collect::<Vec<_>>().join("; ")
                ),
            ),
            (RolloutPhase::Paused, _) => ("Paused", "paused by an operator".to_owned()),
            (RolloutPhase::Aborted, _) => (
                "Aborted",
                "aborted by an operator: clusters keep what they run".to_owned(),
            ),
            (RolloutPhase::RolledBack, _) => (
                "RolledBack",
                format!(
                    "the source is at {}; the fleet runs {}; change the source to roll forward",
                    short(&self.target),
                    rec.stable.as_deref().map_or("nothing", short)
                ),
            ),
            (RolloutPhase::Complete, _) => (
                "Complete",
                format!("every selected cluster runs {}", short(&self.target)),
            ),
            (RolloutPhase::Progressing | RolloutPhase::Gone, _) => return,
        };
        rec.reason = reason.into();
        rec.message = message;
    }

    /// When a clock ends: a copy's minReadySeconds, an admission's deadline.
    fn wake(&self, rec: &RolloutRecord) -> Option<DateTime<Utc>> {
        if !matches!(rec.phase, RolloutPhase::Progressing | RolloutPhase::Paused) {
            return None;
        }
        let ready = self.input.reports.values().filter_map(|r| {
            (r.hash.as_deref() == Some(self.target.as_str()))
                .then_some(r.current_since)
                .flatten()
                .map(|t| t + self.min_ready)
        });
        let deadlines = rec
            .admitted_at
            .iter()
            .filter(|(c, _)| !self.done.contains(c.as_str()) && !rec.failed.contains_key(*c))
            .map(|(_, at)| *at + self.deadline);
        ready.chain(deadlines).filter(|t| *t > self.now).min()
    }
}

/// The first 12 hex digits of a content hash, as people read them.
pub(in crate::sync) fn short(hash: &str) -> &str {
    hash.get(..12).unwrap_or(hash)
}

fn list(names: &[&str]) -> String {
    match names {
        [] => "nothing".to_owned(),
        [one] => (*one).to_owned(),
        _ => names.join(", "),
    }
}

/// An operator's command on one record (PROTOCOL §6.9, "Commands"): the
/// changed record, `Ok(None)` when it changes nothing, or why it is refused.
pub(in crate::sync) fn command(
    rec: &RolloutRecord,
    action: RolloutAction,
    now: DateTime<Utc>,
) -> Result<Option<RolloutRecord>, String> {
    let now = truncate_to_ms(now);
    let mut next = rec.clone();
    match action {
        _ if rec.phase == RolloutPhase::Gone => return Ok(None),
        RolloutAction::Pause => {
            next.phase = RolloutPhase::Paused;
            next.paused_by = Some(PausedBy::Operator);
        }
        RolloutAction::Resume => {
            if !matches!(rec.phase, RolloutPhase::Paused | RolloutPhase::Aborted) {
                return Ok(None);
            }
            next.phase = RolloutPhase::Progressing;
            next.paused_by = None;
            next.failed.clear();
            // A new deadline for the clusters still on their way.
            let target = next.target.clone();
            for (hash, clusters) in &rec.admitted {
                if Some(hash) == target.as_ref() {
                    for c in clusters {
                        next.admitted_at.insert(c.clone(), now);
                    }
                }
            }
        }
        RolloutAction::Abort => {
            next.phase = RolloutPhase::Aborted;
            next.paused_by = None;
        }
        RolloutAction::Rollback => {
            if rec.stable.is_none() {
                return Err("no previous version to roll back to; use abort".into());
            }
            next.admitted.clear();
            next.admitted_at.clear();
            next.failed.clear();
            next.phase = RolloutPhase::RolledBack;
            next.paused_by = None;
        }
    }
    if same_decision(rec, &next) {
        return Ok(None);
    }
    next.updated_at = now;
    Ok(Some(next))
}

#[cfg(test)]
mod tests;
