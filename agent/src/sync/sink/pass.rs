//! The sink side: every desired copy, computed from the envelopes on the bus
//! and the rules here, made equal on the local API; copies nothing wants any
//! more collected per the orphan policy.
//!
//! "Equal" is judged against a baseline (what the API server made of our
//! last write, or of a dry run of it), so server defaults never look like a
//! difference while a key someone added does; the write is a full replace,
//! which removes it (see `compare`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use fleetbus_schemas::crd::{SyncRule, UpdatePolicy};
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::well_known;
use kube::core::GroupVersionKind;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::bundle::{self, BundlePass, BundleSource};
use super::collect;
use super::conflicts;
use super::failures;
use super::hold::rule_holds;
use super::look::{Look, Looked};
use super::mutate::{self, CopyInput};
use super::plan::{Computed, Gate, Plan, Settled, FULL_EVERY};
use super::refusal::import_refused;
use super::serial::Serial;
use super::state::SinkState;
use super::values::{rule_values, values_digest};
use super::wave::{classify, Step, Wave, Why, Write};
use crate::context::Context;
use crate::registry::PeerView;
use crate::sync::digest::Digest;
use crate::sync::drift::announce;
use crate::sync::drift::state::DriftState;
use crate::sync::model::meta::{annotation, is_original};
use crate::sync::model::{Candidate, Conflict, Outcome, Packed, RuleReport, Target};
use crate::sync::placement::sink::placed;
use crate::sync::placement::state::{Here, PlacementBook};
use crate::sync::rollout::sink::{fetch_versions, rollout_env, Taken};
use crate::sync::rollout::state::RolloutBook;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching;
use crate::sync::rules::template::TemplateContext;
use crate::sync::source::state::SourceState;
use crate::sync::world::World;

/// The update policy of `source`'s copies: create-only when the rule says so
/// or the source carries `fleetbus.io/update-policy: create-only`, else the
/// rule's. The bool is true for an annotation value fleetbus does not know
/// (ignored; counted by the caller).
fn update_policy(rule: UpdatePolicy, source: &Value) -> (UpdatePolicy, bool) {
    match annotation(source, well_known::ANNOTATION_UPDATE_POLICY) {
        None => (rule, false),
        Some(well_known::UPDATE_POLICY_CREATE_ONLY) => (UpdatePolicy::CreateOnly, false),
        Some(_) => (rule, true),
    }
}

/// What computing the desired copies reads: the World, and the context
/// (the copy mark, the agent's namespace for `valuesFrom`). Changes nothing.
#[derive(Clone, Copy)]
pub(in crate::sync) struct Compute<'a> {
    pub world: &'a World,
    pub ctx: &'a Context,
}

impl Compute<'_> {
    /// Every copy an unwrap rule wants here (the manifests of its Bundles),
    /// and the errors of those it cannot make.
    pub(in crate::sync) fn unwrapped(
        self,
        rule: &CompiledRule,
        report: &mut RuleReport,
        bundles: &mut BundlePass,
    ) -> Vec<(Target, Candidate)> {
        let mut out = Vec::new();
        let Some(kind) = self.world.kinds.get(&rule.source) else {
            return out;
        };
        let sources = self.world.sources(rule);
        for (key, env) in kind.snapshots.iter() {
            let Some((env, obj, peer)) = taken(&sources, key, Some(&env)) else {
                continue;
            };
            let Some(entries) = matching::matching_rules(&rule.spec, obj) else {
                continue;
            };
            // The manifests are wanted here, never the Bundle itself.
            let src = BundleSource {
                rule,
                key,
                env,
                bundle: obj,
                entries: &entries,
                origin_record: &peer.record,
            };
            for (target, c) in bundle::unwrap(self.world, self.ctx, &src, report, bundles) {
                match import_refused(self.world, rule, &target) {
                    Some(why) => {
                        bundles.record(key, &target, Err(why.to_string()));
                        report.refused.insert(target.to_string(), why);
                    }
                    None => out.push((target, c)),
                }
            }
        }
        out
    }

    /// Sets what `rule` makes of the envelope `env` at `key` in `plan`
    /// (computed only if that envelope version was not computed before),
    /// with what placement says of the copy here (`.Placement` for
    /// templates, the replica share written in when placement divides
    /// replicas; a change computes the pair again).
    fn plan_pair(
        self,
        plan: &mut Plan,
        (rule, sources, here): (&CompiledRule, &BTreeMap<&str, &PeerView>, Option<Here>),
        key: &ObjectKey,
        env: Option<&Envelope>,
        changed: &mut BTreeSet<Target>,
    ) {
        let pair = (rule.name.clone(), key.clone());
        let Some((env, obj, peer)) = taken(sources, key, env) else {
            plan.set(&pair, None, Computed::default, changed);
            return;
        };
        if plan.share(&pair) != here {
            plan.set(&pair, None, Computed::default, changed);
        }
        let compute = || match matching::matching_rules(&rule.spec, obj) {
            Some(entries) => {
                let mut c =
                    self.compute_candidate(rule, key, env, obj, (&peer.record, here), &entries);
                if let (Some(n), Some(r)) = (
                    here.and_then(|h| h.share),
                    rule.spec
                        .placement
                        .as_ref()
                        .and_then(|p| p.replicas.as_ref()),
                ) {
                    write_share(&mut c, &r.path, n);
                }
                c
            }
            None => Computed::default(),
        };
        plan.set(&pair, Some(env), compute, changed);
        plan.set_share(&pair, here);
    }

    /// What `rule` makes of one source object: the copy and its place, or
    /// why there is none (memoized by `plan`).
    pub(in crate::sync) fn compute_candidate(
        self,
        rule: &CompiledRule,
        key: &ObjectKey,
        env: &Envelope,
        obj: &Value,
        (origin_record, here): (&Value, Option<Here>),
        entries: &[&SyncRule],
    ) -> Computed {
        let values = match rule_values(self.world, &self.ctx.cfg.namespace, rule) {
            Ok(v) => v,
            Err(e) => {
                return Computed {
                    result: Some(Err(e)),
                    ..Computed::default()
                }
            }
        };
        let templates = TemplateContext {
            object: obj.clone(),
            cluster: origin_record.clone(),
            local_cluster: self.world.fleet.local.record.clone(),
            values,
            placement: match (&rule.spec.placement, here) {
                (None, _) => Value::Null,
                (Some(_), here) => here.unwrap_or(Here::STAND_IN).to_json(),
            },
        };
        let input = CopyInput {
            rule_name: &rule.name,
            spec: &rule.spec,
            entries,
            source: obj,
            origin: &key.origin,
            origin_uid: &env.uid,
            content_hash: &env.content_hash,
            templates: &templates,
            marker: &self.ctx.mark,
        };
        let (update, unknown_policy) = update_policy(rule.spec.update_policy, obj);
        let copy = mutate::desired_copy(&input).map(|d| (Target::of(&d), d));
        // What the copy is (its kind and namespace after mutations), not
        // what the source was, is what this cluster's policy judges.
        if let Ok((Some(target), _)) = &copy {
            if let Some(why) = import_refused(self.world, rule, target) {
                return Computed {
                    result: None,
                    unknown_policy,
                    refused: Some(Box::new(why)),
                };
            }
        }
        let result = match copy {
            Ok((Some(target), desired)) => Ok((
                target,
                Candidate {
                    rule: rule.name.clone(),
                    key: key.clone().into(),
                    created: obj
                        .pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    digest: Digest::of_desired(&desired),
                    desired: Packed::new(&desired),
                    with_status: mutate::syncs_status(entries),
                    update,
                    create_namespace: rule.spec.create_namespace,
                    published: env.time,
                },
            )),
            Ok((None, _)) => Err("the mutated copy has no apiVersion, kind or name".to_owned()),
            Err(e) => Err(crate::report(&e)),
        };
        Computed {
            result: Some(result),
            unknown_policy,
            refused: None,
        }
    }

    /// Each rule's report as far as the rules say (selected, sources, the
    /// errors of the Bundles it unwraps), the rules that make copies here
    /// now, and the copies the Bundles of unwrap rules want (computed in full
    /// every pass: Bundles are few, and one wants many targets).
    fn rule_reports(self, bundles: &mut BundlePass) -> RulesNow {
        let mut now = RulesNow::default();
        for rule in self.world.rules.values() {
            let mut report = RuleReport {
                selected: self.world.selects_us(rule),
                ..RuleReport::default()
            };
            if report.selected
                && self.world.rule_problem(rule).is_none()
                && self.world.rule_ready(rule)
            {
                if self.world.kinds.contains_key(&rule.source) {
                    report.sources = self
                        .world
                        .sources(rule)
                        .keys()
                        .map(|s| (*s).to_owned())
                        .collect();
                }
                if rule.spec.unwrap {
                    for (target, c) in self.unwrapped(rule, &mut report, bundles) {
                        now.unwrapped.entry(target).or_default().push(c);
                    }
                }
                now.active.push(rule.clone());
            }
            now.reports.insert(rule.name.clone(), report);
        }
        now
    }
}

/// What a full plan depends on besides the pairs: which rules make
/// copies, the kinds as the decisions see them, and the rules held (a
/// change of any can change every target's decision).
fn gate(world: &World, holds: &BTreeMap<String, String>, active: &[CompiledRule]) -> Gate {
    let mut kinds: Vec<(String, bool, bool, bool)> = world
        .kinds
        .iter()
        .map(|(g, k)| {
            let name = crate::sync::model::meta::describe_gvk(g);
            (name, k.listed, k.ready(), k.namespaced)
        })
        .collect();
    kinds.sort();
    let rules = active.iter().map(|r| r.name.clone()).collect();
    let held = holds.keys().cloned().collect();
    Gate { rules, kinds, held }
}

/// What a sink pass leaves for the engine: when to run again for the
/// drift announcements that failed (see `drift::state`), and each rule's
/// report (what `status` writes).
pub(in crate::sync) struct Passed {
    pub wake: Option<Instant>,
    pub reports: BTreeMap<String, RuleReport>,
}

/// Computes the desired copies that changed, writes what differs,
/// collects what nothing wants, and records what each rule did (see
/// `plan`). Placement's records say where copies live. The rollout book's holds are the sink's (set here), its
/// version reads are started here (their results come back on `tx`); the
/// source stage's errors, withheld and refused objects are read into the
/// rules' reports.
pub(in crate::sync) async fn sink_pass(
    world: &World,
    sink: &mut SinkState,
    drift: &mut DriftState,
    (rollout, placement): (&mut RolloutBook, &PlacementBook),
    source: &SourceState,
    ctx: &Arc<Context>,
    tx: &mpsc::Sender<crate::sync::model::Input>,
) -> Passed {
    Pass {
        world,
        sink,
        drift,
        rollout,
        placement,
        source,
        ctx,
        tx,
    }
    .run()
    .await
}

/// One sink pass's borrows (see [`sink_pass`]).
struct Pass<'a> {
    world: &'a World,
    sink: &'a mut SinkState,
    drift: &'a mut DriftState,
    rollout: &'a mut RolloutBook,
    placement: &'a PlacementBook,
    source: &'a SourceState,
    ctx: &'a Arc<Context>,
    tx: &'a mpsc::Sender<crate::sync::model::Input>,
}

impl<'a> Pass<'a> {
    /// The read-only half of the pass's borrows.
    fn compute(&self) -> Compute<'a> {
        Compute {
            world: self.world,
            ctx: self.ctx,
        }
    }

    /// The borrows of the serial path.
    fn serial(&mut self) -> Serial<'_> {
        Serial {
            world: self.world,
            sink: self.sink,
            drift: self.drift,
            rollout: self.rollout,
            ctx: self.ctx,
        }
    }

    /// The borrows of first looks.
    fn look(&mut self) -> Look<'_> {
        Look {
            world: self.world,
            sink: self.sink,
            drift: self.drift,
            rollout: self.rollout,
            ctx: self.ctx,
        }
    }

    /// The borrows of a wave's writes.
    fn wave(&mut self) -> Wave<'_> {
        Wave {
            world: self.world,
            sink: self.sink,
            drift: self.drift,
            ctx: self.ctx,
        }
    }

    /// Brings the plan up to date: only the pairs of the envelopes that
    /// changed, unless something that can change every pair or decision did
    /// (then every pair, reusing what was computed from the same envelope).
    /// Returns the targets to decide this pass, and whether it is a full one.
    fn replan(&mut self, rules: &RulesNow, now: Instant) -> (BTreeSet<Target>, bool) {
        let (world, compute) = (self.world, self.compute());
        let gate = gate(world, &self.sink.holds, &rules.active);
        let values = values_digest(world, &self.ctx.cfg.namespace);
        let state = &mut *self.sink;
        let same_inputs = state.rules_generation == world.rules_generation
            && state.values == values
            && state
                .fleet
                .as_ref()
                .is_some_and(|f| Arc::ptr_eq(f, &world.fleet) || **f == *world.fleet);
        let dirty = std::mem::take(&mut state.dirty);
        let full = dirty.full
            || !same_inputs
            || state.gate != gate
            || state.full_at.is_none_or(|at| now >= at + FULL_EVERY);
        if !same_inputs {
            state.plan.clear();
        }
        let planned = rules.active.iter().filter(|r| !r.spec.unwrap);
        let mut changed = BTreeSet::new();
        let mut rollouts = RolloutTaken::default();
        let local = &world.fleet.local.name;
        if full {
            state.unfit.clear();
            let mut seen = BTreeSet::new();
            for rule in planned {
                let Some(kind) = world.kinds.get(&rule.source) else {
                    continue;
                };
                let sources = world.sources(rule);
                // Each object parsed again (see `Snapshots`): ~10 µs a copy,
                // on top of the ~20 µs a full plan cost before.
                for (key, env) in kind.snapshots.iter() {
                    note_unfit(&mut state.unfit, compute, (rule, &sources), key, Some(&env));
                    let (taken, share) =
                        gate_pair(self.placement, self.rollout, local, rule, key, Some(env));
                    let share = kept_here(&state.plan, rule, key, share, taken.hold.is_some());
                    compute.plan_pair(
                        &mut state.plan,
                        (rule, &sources, share),
                        key,
                        taken.env.as_ref(),
                        &mut changed,
                    );
                    rollouts.note(rule, key, taken);
                    seen.insert((rule.name.clone(), key.clone()));
                }
            }
            state.plan.retain(&seen, &mut changed);
            state.full_at = Some(now);
            self.ctx.metrics.sync_full_plans.inc();
            changed = state.plan.every_target();
        } else {
            for rule in planned {
                let kind = world.kinds.get(&rule.source);
                let sources = world.sources(rule);
                for key in dirty.keys.iter().filter(|k| of_kind(k, &rule.source)) {
                    let env = kind.and_then(|k| k.snapshots.get(key));
                    note_unfit(
                        &mut state.unfit,
                        compute,
                        (rule, &sources),
                        key,
                        env.as_ref(),
                    );
                    let (taken, share) =
                        gate_pair(self.placement, self.rollout, local, rule, key, env);
                    let share = kept_here(&state.plan, rule, key, share, taken.hold.is_some());
                    compute.plan_pair(
                        &mut state.plan,
                        (rule, &sources, share),
                        key,
                        taken.env.as_ref(),
                        &mut changed,
                    );
                    rollouts.note(rule, key, taken);
                }
            }
            changed.extend(dirty.targets);
        }
        // Decided every pass: copies failing (their backoff may be over),
        // drifting, forced by an operator, and those of Bundles (this pass's
        // and the last's).
        changed.extend(state.retries.keys().cloned());
        changed.extend(self.drift.open.keys().cloned());
        changed.extend(self.drift.forced.iter().cloned());
        changed.extend(state.unwrapped.iter().cloned());
        state.unwrapped = rules.unwrapped.keys().cloned().collect();
        changed.extend(state.unwrapped.iter().cloned());
        // A copy held or let go by its rollout is decided again, though
        // what it would be may not have changed.
        for ((rule, key), hold) in rollouts.holds {
            if self.rollout.set_hold(&rule, &key, hold) {
                if let Some(t) = state.plan.target_of(&(rule, key)) {
                    changed.insert(t.clone());
                }
            }
        }
        state.gate = gate;
        state.fleet = Some(world.fleet.clone());
        state.rules_generation = world.rules_generation;
        state.values = values;
        fetch_versions(self.rollout, self.ctx, self.tx, rollouts.fetch);
        (changed, full)
    }

    /// The sink pass (see [`sink_pass`]).
    async fn run(mut self) -> Passed {
        let mut bundles = BundlePass::default();
        let mut rules = self.compute().rule_reports(&mut bundles);
        // Before replanning: a hold that starts or ends changes the gate.
        self.sink.holds = rule_holds(self.world, self.sink, &rules.active);
        for (name, why) in &self.sink.holds {
            if let Some(r) = rules.reports.get_mut(name) {
                r.hold = Some(why.clone());
            }
        }
        let (affected, full) = self.replan(&rules, Instant::now());
        let mut gone: Vec<Conflict> = Vec::new();
        // Copies of the pass that are in sync already and not decided again.
        let mut in_sync = self.sink.plan.synced();
        let mut ordered: Vec<(Target, Vec<Candidate>)> = Vec::with_capacity(affected.len());
        for target in affected {
            if self.sink.plan.is_synced(&target) {
                in_sync = in_sync.saturating_sub(1);
            }
            let mut cands = self.sink.plan.candidates(&target);
            if let Some(more) = rules.unwrapped.remove(&target) {
                cands.extend(more);
                // The order a full scan finds them in: by rule, then source.
                cands.sort_by(|a, b| (&a.rule, &a.key).cmp(&(&b.rule, &b.key)));
            }
            if cands.is_empty() {
                // Nothing wants a copy there (any more).
                if let Some(old) = self.sink.plan.settle(&target, None) {
                    // Held in the last pass and not wanted now: it may be
                    // collectable.
                    self.sink.collect.insert(target.clone());
                    gone.extend(old.conflicts);
                }
                self.sink.held.remove(&target);
                // Watch times matter only for copies (drift latency).
                self.drift.seen.remove(&target);
                continue;
            }
            ordered.push((target, cands));
        }
        // What others need first (a Bundle's Namespace, CRD, ServiceAccount
        // and RBAC before what uses them); by target within a rank.
        ordered.sort_by_key(|(t, _)| bundle::install_rank(t));
        let mut winners: Vec<(Target, Candidate)> = Vec::with_capacity(ordered.len());
        let mut settled_at: Vec<Settled> = Vec::with_capacity(ordered.len());
        for (target, mut cands) in ordered {
            conflicts::order(&mut cands);
            let winner = cands.remove(0);
            let pair = self.sink.plan.pair(&target, &winner.rule, &winner.key);
            self.sink.held.insert(target.clone(), pair);
            let mut settled = Settled {
                rule: winner.rule.clone(),
                ..Settled::default()
            };
            for loser in &cands {
                let c = Conflict::other_origin(&target, loser, &winner);
                bundles.record(&loser.key, &target, Err(c.message.clone()));
                settled.conflicts.push(c);
            }
            settled_at.push(settled);
            winners.push((target, winner));
        }
        let mut tally = Tally::new(&winners, settled_at, &mut bundles);
        // One wave per install rank, in rank order (see `wave`).
        self.sink.in_flight.begin(self.sink.held.len());
        self.sink.in_flight.also_in_sync(in_sync);
        for wave in
            winners.chunk_by(|(a, _), (b, _)| bundle::install_rank(a) == bundle::install_rank(b))
        {
            self.apply_wave(wave, &mut tally).await;
        }
        self.sink.in_flight.end();
        let Tally { wrote, settled, .. } = tally;
        let found = self.settle_all(&winners, settled, &mut gone);
        let reports = self
            .finish_sink_pass(rules.reports, wrote, full, (found, gone))
            .await;
        bundle::finish_bundles(self.sink, self.ctx, bundles);
        Passed {
            wake: self.drift.take_wake(),
            reports,
        }
    }

    /// Records the decisions of a pass in the plan (`settled[i]` that at
    /// `winners[i]`'s target), by target; returns the conflicts found, and
    /// adds those of the decisions replaced to `gone`.
    fn settle_all(
        &mut self,
        winners: &[(Target, Candidate)],
        mut settled: Vec<Settled>,
        gone: &mut Vec<Conflict>,
    ) -> Vec<Conflict> {
        // In target order, as when they were kept in a map by target.
        let mut order: Vec<usize> = (0..winners.len().min(settled.len())).collect();
        order.sort_by(|&a, &b| winners[a].0.cmp(&winners[b].0));
        let mut found = Vec::new();
        for i in order {
            let (Some((target, _)), Some(s)) = (winners.get(i), settled.get_mut(i)) else {
                continue;
            };
            let s = std::mem::take(s);
            found.extend(s.conflicts.iter().cloned());
            if let Some(old) = self.sink.plan.settle(target, Some(s)) {
                gone.extend(old.conflicts);
            }
        }
        found
    }

    /// After the writes of a sink pass: drifts and watch times of copies
    /// nothing wants are forgotten, what may have become collectable is
    /// collected, and the rules' reports are completed from the plan;
    /// returns them.
    async fn finish_sink_pass(
        &mut self,
        mut reports: BTreeMap<String, RuleReport>,
        wrote: BTreeSet<String>,
        full: bool,
        (found, gone): (Vec<Conflict>, Vec<Conflict>),
    ) -> BTreeMap<String, RuleReport> {
        let (world, ctx) = (self.world, &**self.ctx);
        for (name, report) in &mut reports {
            self.sink.fill(name, report);
            report.wrote = wrote.contains(name);
        }
        let scope = std::mem::take(&mut self.sink.collect);
        // A copy is wanted by a pair of the plan or by a Bundle. Both are
        // read while collecting changes the rest of the sink's state
        // (backoffs, baselines, kept copies): taken out meanwhile.
        let plan = std::mem::take(&mut self.sink.plan);
        let unwrapped = std::mem::take(&mut self.sink.unwrapped);
        let wants = |t: &Target| plan.wants(t) || unwrapped.contains(t);
        if full {
            self.drift.seen.retain(|t, _| wants(t));
        }
        announce::drift_forget_except(self.drift, ctx, &wants).await;
        announce::drift_flush(self.drift, ctx).await;
        // Every copy when something that concerns them all changed, else
        // only the copies named (see `collect`).
        let again = if self.sink.collect_due {
            self.sink.collect_due = false;
            collect::collect(world, self.sink, ctx, &wants, None, &mut reports).await
        } else if !scope.is_empty() {
            collect::collect(world, self.sink, ctx, &wants, Some(&scope), &mut reports).await
        } else {
            BTreeSet::new()
        };
        self.sink.collect = again;
        self.sink.plan = plan;
        self.sink.unwrapped = unwrapped;
        failures::announce_failures(self.sink, ctx).await;
        for (rule, errors) in &self.source.errors {
            if let Some(r) = reports.get_mut(rule) {
                r.errors.extend(errors.clone());
            }
        }
        collect::note_kept(world, self.sink, &mut reports);
        for (rule, withheld) in &self.source.withheld {
            if let Some(r) = reports.get_mut(rule) {
                r.withheld.clone_from(withheld);
            }
        }
        for (rule, refused) in &self.source.refused {
            if let Some(r) = reports.get_mut(rule) {
                r.refused
                    .extend(refused.iter().map(|(k, v)| (k.clone(), v.clone())));
            }
        }
        conflicts::report_conflicts(world, self.sink, ctx, found, &gone).await;
        note_unknown_update_policies(ctx, &reports);
        reports
    }

    /// Makes the copies of one install rank equal to their winners: decided
    /// cases are tallied, serial ones applied one by one, the first looks'
    /// dry runs run together (`look`), then the plain writes run
    /// concurrently, with the replaces first looks asked for.
    async fn apply_wave(&mut self, wave: &[(Target, Candidate)], tally: &mut Tally<'_>) {
        let now = Instant::now();
        let mut writes = Vec::new();
        let mut looks = Vec::new();
        for (target, winner) in wave {
            let (world, sink, rollout) = (self.world, &*self.sink, &*self.rollout);
            let outcome = match classify(world, sink, rollout, &self.ctx.mark, target, winner, now)
            {
                Step::Write(w) => {
                    writes.push((target, winner, w));
                    continue;
                }
                Step::Serial(Why::FirstLook { policy }) => {
                    looks.push((target, winner, policy));
                    continue;
                }
                step => self.serial().settle(target, winner, step).await,
            };
            self.settled(target, winner, outcome, tally);
        }
        for (target, winner, looked) in self.look().first_looks(looks).await {
            match looked {
                Looked::Done(outcome) => self.settled(target, winner, outcome, tally),
                Looked::Replace(exclude) => writes.push((
                    target,
                    winner,
                    Write {
                        namespace: None,
                        replace: Some(exclude),
                    },
                )),
            }
        }
        let places: Vec<(&Target, &Candidate)> = writes.iter().map(|(t, c, _)| (*t, *c)).collect();
        for (i, outcome) in self.wave().run_writes(writes).await {
            if let Some((target, winner)) = places.get(i) {
                tally.add(target, winner, outcome);
            }
        }
    }

    /// Tallies the outcome of a target settled outside the concurrent writes.
    fn settled(
        &self,
        target: &Target,
        winner: &Candidate,
        outcome: Outcome,
        tally: &mut Tally<'_>,
    ) {
        if matches!(outcome, Outcome::InSync | Outcome::Wrote) {
            self.sink.in_flight.settled();
        }
        tally.add(target, winner, outcome);
    }
}

/// Sets the gauge of ignored `fleetbus.io/update-policy` values; warns when
/// their number changes (not every pass).
fn note_unknown_update_policies(ctx: &Context, reports: &BTreeMap<String, RuleReport>) {
    // Per source object, however many rules select it.
    let n = reports
        .values()
        .flat_map(|r| r.unknown_update_policy.iter())
        .collect::<BTreeSet<_>>()
        .len();
    let n = i64::try_from(n).unwrap_or(i64::MAX);
    let gauge = &ctx.metrics.sync_unknown_update_policy;
    if gauge.get() != n {
        gauge.set(n);
        if n > 0 {
            tracing::warn!(
                count = n,
                annotation = well_known::ANNOTATION_UPDATE_POLICY,
                "source objects carry an unknown update policy (ignored; only create-only is known)"
            );
        }
    }
}

/// The rules as a sink pass finds them (see `Compute::rule_reports`).
#[derive(Default)]
struct RulesNow {
    /// Each rule's report, as far as the rules say.
    reports: BTreeMap<String, RuleReport>,
    /// The rules that make copies here now.
    active: Vec<CompiledRule>,
    /// The copies the Bundles of unwrap rules want, by target.
    unwrapped: BTreeMap<Target, Vec<Candidate>>,
}

/// Where a sink pass records what became of each target it decided.
///
/// What each target settled is kept in a `Vec` beside the pass's winners,
/// found by a hash index, not in a map by target: a first sync decides
/// every copy in one pass, and a `BTreeMap<Target, Settled>` filled in
/// target order (half-full nodes of 176-byte slots) was ~4.5 MB of a
/// 10,000-copy sink's peak (heaptrack, docs/design/memory.md).
struct Tally<'a> {
    /// Where each winner's target is in `settled`.
    places: HashMap<&'a Target, usize>,
    /// What became of each target, in the order of the pass's winners.
    settled: Vec<Settled>,
    bundles: &'a mut BundlePass,
    /// The rules that wrote a copy.
    wrote: BTreeSet<String>,
}

impl<'a> Tally<'a> {
    /// The tally of a pass whose `winners` start as `settled` says.
    fn new(
        winners: &'a [(Target, Candidate)],
        settled: Vec<Settled>,
        bundles: &'a mut BundlePass,
    ) -> Self {
        Tally {
            places: winners
                .iter()
                .enumerate()
                .map(|(i, (t, _))| (t, i))
                .collect(),
            settled,
            bundles,
            wrote: BTreeSet::new(),
        }
    }

    /// Records the winner's outcome at `target` and in its Bundle.
    fn add(&mut self, target: &Target, winner: &Candidate, outcome: Outcome) {
        self.bundles
            .record(&winner.key, target, bundle::outcome_result(&outcome));
        let Some(s) = self
            .places
            .get(target)
            .and_then(|&i| self.settled.get_mut(i))
        else {
            return;
        };
        match outcome {
            Outcome::InSync => s.synced = true,
            Outcome::Wrote => {
                s.synced = true;
                self.wrote.insert(winner.rule.clone());
            }
            Outcome::Conflict(c) => s.conflicts.push(*c),
            Outcome::Failed(e) => s.error = Some(e.message),
            Outcome::Held(_) => s.held = true,
        }
    }
}

/// Keeps whether this cluster would refuse `rule`'s copy of `key` (a
/// placement rule's source object it takes, chosen here or not), for the
/// `unfit` reports (`placement::fitness`). Judged on the copy as computed
/// (after mutations, which may move it to another namespace or kind), so a
/// cluster is never judged one way before it is chosen and another after
/// (a `Rebalance` origin would flap). This computes the copy of every
/// placement pair at each full plan (every 5 min, and when rules, the
/// policy or the fleet change) and each change of its source, besides the
/// plan's for the pairs placed here: the plan memoizes only what it keeps.
/// Pure (no write, no metric).
fn note_unfit(
    unfit: &mut BTreeMap<crate::sync::sink::plan::Pair, String>,
    compute: Compute<'_>,
    (rule, sources): (&CompiledRule, &BTreeMap<&str, &PeerView>),
    key: &ObjectKey,
    env: Option<&Envelope>,
) {
    if rule.spec.placement.is_none() {
        return;
    }
    let pair = (rule.name.clone(), key.clone());
    let why = taken(sources, key, env).and_then(|(env, obj, peer)| {
        let entries = matching::matching_rules(&rule.spec, obj)?;
        let c = compute.compute_candidate(rule, key, env, obj, (&peer.record, None), &entries);
        c.refused.map(|r| r.to_string())
    });
    match why {
        Some(why) => {
            unfit.insert(pair, why);
        }
        None => {
            unfit.remove(&pair);
        }
    }
}

/// What placement, then the rollout, make of one envelope here: the
/// envelope to compute from (None: no copy here), the hold (placement's
/// first), the versions to read, and what placement says of the copy here.
fn gate_pair(
    placement: &PlacementBook,
    rollout: &RolloutBook,
    local: &str,
    rule: &CompiledRule,
    key: &ObjectKey,
    env: Option<Envelope>,
) -> (Taken, Option<Here>) {
    let placed = placed(placement, local, rule, key, env);
    let mut taken = rollout_env(rollout, local, rule, key, placed.env);
    if placed.hold.is_some() {
        taken.hold = placed.hold;
    }
    (taken, placed.here)
}

/// What placement says of a pair's copy here: a copy held (placement
/// keeps it: records not read yet, released and kept; or a rollout)
/// keeps what was said when it was last chosen, so a hold computes
/// nothing again (and a restart, which holds every copy until the records
/// are read, computes what it computed before it was chosen as held).
fn kept_here(
    plan: &Plan,
    rule: &CompiledRule,
    key: &ObjectKey,
    here: Option<Here>,
    held: bool,
) -> Option<Here> {
    if here.is_some() || !held || rule.spec.placement.is_none() {
        return here;
    }
    plan.share(&(rule.name.clone(), key.clone()))
}

/// Writes a replica share at `path` of a computed copy (its digest anew).
fn write_share(c: &mut Computed, path: &str, n: i64) {
    let Some(Ok((_, cand))) = &mut c.result else {
        return;
    };
    let Ok(mut desired) = cand.desired.value() else {
        return;
    };
    let Ok(tokens) = fleetbus_schemas::pointer::parse_field_pointer(path) else {
        return;
    };
    if mutate::set_at(&mut desired, &tokens, Value::from(n)).is_ok() {
        cand.digest = Digest::of_desired(&desired);
        cand.desired = Packed::new(&desired);
    }
}

/// What the rollouts of a replan decided: the holds of the pairs planned
/// (None: not held) and the versions to read from the store.
#[derive(Default)]
struct RolloutTaken {
    holds: Vec<(crate::sync::sink::plan::Pair, Option<String>)>,
    fetch: Vec<fleetbus_schemas::subject::VersionKey>,
}

impl RolloutTaken {
    fn note(&mut self, rule: &CompiledRule, key: &ObjectKey, taken: Taken) {
        if rule.spec.rollout.is_some() || rule.spec.placement.is_some() {
            self.holds
                .push(((rule.name.clone(), key.clone()), taken.hold));
        }
        self.fetch.extend(taken.fetch);
    }
}

/// The envelope at `key`, its object and its origin, if a rule may take it:
/// live, from one of the rule's `sources`, an original (a copy on the bus
/// would be a loop; an origin never publishes one, so this only guards
/// against a misbehaving publisher) not disabled for sync.
pub(in crate::sync) fn taken<'a>(
    sources: &BTreeMap<&str, &'a PeerView>,
    key: &ObjectKey,
    env: Option<&'a Envelope>,
) -> Option<(&'a Envelope, &'a Value, &'a PeerView)> {
    let peer = *sources.get(key.origin.as_str())?;
    let env = env?;
    let obj = env.object.as_ref().filter(|_| !env.tombstone)?;
    if !is_original(obj) || annotation(obj, well_known::ANNOTATION_RESOURCE_SYNC_DISABLED).is_some()
    {
        return None;
    }
    Some((env, obj, peer))
}

/// Whether `key` names an object of kind `gvk`.
fn of_kind(key: &ObjectKey, gvk: &GroupVersionKind) -> bool {
    key.kind == gvk.kind && key.group == gvk.group && key.version == gvk.version
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_create_only_annotation_overrides_the_rule_and_other_values_are_ignored() {
        let with = |v: &str| json!({"metadata": {"annotations": {"fleetbus.io/update-policy": v}}});
        let plain = json!({"metadata": {}});
        assert_eq!(
            update_policy(UpdatePolicy::default(), &plain),
            (UpdatePolicy::default(), false)
        );
        assert_eq!(
            update_policy(UpdatePolicy::default(), &with("create-only")),
            (UpdatePolicy::CreateOnly, false)
        );
        assert_eq!(
            update_policy(UpdatePolicy::default(), &with("CreateOnly")),
            (UpdatePolicy::default(), true)
        );
        assert_eq!(
            update_policy(UpdatePolicy::CreateOnly, &with("bogus")),
            (UpdatePolicy::CreateOnly, true)
        );
    }
}
