//! What a candidate rule would do on this cluster, computed from borrowed
//! state ([`Preview`]: the World, the sink's state, the context) through the
//! sink's own pieces (see `preview`'s docs).
//!
//! Mapping of `wave::decide`'s steps: a plain create, or a copy we wrote
//! that is gone, is a create; a replace of a changed desired state is an
//! update, and so is a drifted copy the rule's drift mode corrects; a first
//! look (no baseline since the agent started) is a dry run, equal or an
//! update. The candidate's own `suspend` and `dependsOn` do not change the
//! lists: they show what the rule does once applied and its hold ends, and
//! `held` counts what waits for the hold.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fleetbus_schemas::crd::{DriftMode, MatchEntry};
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::placement::{PlacementKey, PlacementRecord};
use fleetbus_schemas::preview::{
    DeleteAction, PreviewCreate, PreviewDelete, PreviewProblem, PreviewReply, PreviewRequest,
    PreviewSource, PreviewUpdate,
};
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::{well_known, ObjectRef};
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::time::Instant;

use super::diff::{self, Redact};
use super::reads::{read_bus, read_targets, Reads, READS_BUDGET};
use super::request::{answers_previews, candidate, source_ref};
use super::source::given_sources;
use crate::context::Context;
use crate::sync::drift::announce;
use crate::sync::drift::policy::Policy;
use crate::sync::model::meta::{annotation, describe_gvk};
use crate::sync::model::{Candidate, Conflict, Outcome, RuleReport, Target};
use crate::sync::placement::decide::{decide, Candidate as PlacementCandidate, Inputs};
use crate::sync::placement::origin::candidates_seen_by_a_sink;
use crate::sync::placement::sink::unit_key;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching;
use crate::sync::sink::apply::{self, WriteError};
use crate::sync::sink::bundle::BundlePass;
use crate::sync::sink::collect::{verdict_under, would_take, RuleOf, Verdict};
use crate::sync::sink::conflicts;
use crate::sync::sink::look::dry_run_body;
use crate::sync::sink::pass::{taken, Compute};
use crate::sync::sink::state::SinkState;
use crate::sync::sink::wave::{self, Step, Why};
use crate::sync::world::World;

/// The candidate rule's copies here: each target's candidates from it.
type Wanted = BTreeMap<Target, Vec<Candidate>>;

/// At most this many dry runs per preview (see `Preview::dry_runs`).
const MAX_DRY_RUNS: usize = 1000;

const CORRECTS_DRIFT: &str = "corrects drift";

/// The envelopes of the candidate's source kind on the bus: the kind's
/// consumer's where this sink follows it, else read once (`reads`).
enum OnBus<'a> {
    Followed(&'a crate::sync::model::Snapshots),
    Read(BTreeMap<ObjectKey, Envelope>),
}

impl OnBus<'_> {
    fn get(&self, key: &ObjectKey) -> Option<Envelope> {
        match self {
            OnBus::Followed(s) => s.get(key),
            OnBus::Read(m) => m.get(key).cloned(),
        }
    }

    fn iter(&self) -> Box<dyn Iterator<Item = (&ObjectKey, Envelope)> + '_> {
        match self {
            OnBus::Followed(s) => Box::new(s.iter()),
            OnBus::Read(m) => Box::new(m.iter().map(|(k, e)| (k, e.clone()))),
        }
    }
}

/// A replace the candidate would send: its dry run decides the update.
struct DryRun {
    target: Target,
    c: Candidate,
    live: Value,
    /// Drift exclusions kept from the live copy, as the replace keeps them.
    policy: Policy,
    /// Why, when it is not the new desired state.
    reason: Option<String>,
}

impl DryRun {
    fn update(&self, changes: Vec<fleetbus_schemas::drift::DriftChange>) -> PreviewUpdate {
        PreviewUpdate {
            object: object_ref(&self.target),
            origin: self.c.key.origin.clone(),
            changes,
            changes_omitted: 0,
            reason: self.reason.clone(),
        }
    }
}

fn object_ref(t: &Target) -> ObjectRef {
    ObjectRef::new(&t.api_version, &t.kind, t.namespace.as_deref(), &t.name)
}

/// What a preview reads: the World, the sink's state (the other rules'
/// candidates, baselines, retries, holds) and the context. It changes none
/// of them: a preview is answered between passes and must leave the next
/// pass as it would have been.
pub(super) struct Preview<'a> {
    pub world: &'a World,
    pub sink: &'a SinkState,
    /// The placement records read from the bus (every origin's).
    pub placement: &'a BTreeMap<PlacementKey, PlacementRecord>,
    pub ctx: &'a Context,
    /// Its share of the CPU (see [`Pace`]).
    pub pace: Pace,
}

/// The source criteria of a rule: which objects it selects, from whom. Two
/// rules with the same criteria have origins publish the same objects.
fn source_criteria(r: &CompiledRule) -> (Vec<&Vec<MatchEntry>>, String, String) {
    let matches = r.spec.rules.iter().map(|e| &e.match_).collect();
    let from = format!(
        "{:?}{:?}",
        r.spec.source_cluster_selector, r.spec.cluster_feature_match
    );
    (matches, from, describe_gvk(&r.source))
}

/// The envelope of a changed source object, as its origin would publish it:
/// the identity of the version on the bus (uid, resourceVersion, creation
/// time) when there is one, so the copy's origin annotations stay the same.
fn changed_source(src: &PreviewSource, current: Option<Envelope>) -> Result<Envelope, String> {
    let mut object = src.object.clone();
    let old = current.as_ref().and_then(|e| e.object.as_ref());
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in ["uid", "resourceVersion", "creationTimestamp"] {
            let was = old.and_then(|o| o.pointer(&format!("/metadata/{field}")));
            match (meta.get(field), was) {
                (None, Some(v)) => {
                    meta.insert(field.to_owned(), v.clone());
                }
                (None, None) => {
                    let made = if field == "creationTimestamp" {
                        chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    } else {
                        "preview".to_owned()
                    };
                    meta.insert(field.to_owned(), Value::String(made));
                }
                _ => {}
            }
        }
    }
    let cluster_id = current.as_ref().and_then(|e| e.origin_cluster_id.clone());
    Envelope::snapshot(
        &src.origin,
        cluster_id.as_deref(),
        object,
        chrono::Utc::now(),
    )
    .map_err(|e| format!("the source object is not usable: {e}"))
}

impl Preview<'_> {
    /// The preview of `req` (validated here), or why it cannot be made.
    pub(super) async fn preview_rule(&self, req: &PreviewRequest) -> Result<PreviewReply, String> {
        let name = req.validate().map_err(|e| e.to_string())?;
        answers_previews(self.world)?;
        let rule = candidate(self.world, req, &name)?;
        let mut reply = PreviewReply {
            cluster: self.world.fleet.local.name.clone(),
            rule: name,
            selected: self.world.selects_us(&rule),
            ..PreviewReply::default()
        };
        if let Some(p) = self.world.rule_problem(&rule) {
            // A real pass would neither write nor collect for it.
            reply
                .incomplete
                .push(format!("the rule cannot work here: {p}"));
            return Ok(reply);
        }
        // Every read below together: see READS_BUDGET.
        let deadline = Instant::now() + READS_BUDGET;
        let wanted = match reply.selected {
            true => {
                self.preview_wanted(&rule, req, deadline, &mut reply)
                    .await?
            }
            false => Wanted::new(),
        };
        let reads = read_targets(self.world, self.ctx, wanted.keys(), deadline).await;
        let now = Instant::now();
        let mut runs = Vec::new();
        for (target, own) in wanted.iter() {
            self.pace.breathe().await;
            let run = self.preview_target(&rule, target, own.clone(), now, &reads, &mut reply);
            runs.extend(run.await);
        }
        self.dry_runs(&rule, runs, &reads, &mut reply).await;
        self.preview_deletes(&rule, &wanted, &mut reply).await;
        let writes = reply.creates.len() + reply.updates.len();
        let held = if rule.spec.suspend {
            writes + reply.deletes.len()
        } else if !rule.spec.depends_on.is_empty() && self.sink.holds.contains_key(&rule.name) {
            writes
        } else {
            0
        };
        reply.held = u64::try_from(held).unwrap_or(u64::MAX);
        Ok(reply)
    }

    /// Every copy the candidate wants here, by target; the source objects it
    /// cannot make a copy of go to `reply.errors`.
    async fn preview_wanted(
        &self,
        rule: &CompiledRule,
        req: &PreviewRequest,
        deadline: Instant,
        reply: &mut PreviewReply,
    ) -> Result<Wanted, String> {
        let changed = req.source.as_ref();
        let mut wanted = Wanted::new();
        let followed = self
            .world
            .kinds
            .get(&rule.source)
            .filter(|k| k.source && k.ready());
        let on_bus = match followed {
            Some(kind) => OnBus::Followed(&kind.snapshots),
            // Not followed here (yet): read once (`reads`).
            None => match self.unfollowed(rule, deadline, reply).await {
                Some(read) => OnBus::Read(read),
                None => return Ok(wanted),
            },
        };
        // With every origin's `preview-source` answer in `sources`, nothing
        // the candidate selects is missing.
        let same_sources =
            self.world.rules.get(&rule.name).map(source_criteria) == Some(source_criteria(rule));
        if !same_sources && !req.sources_complete {
            reply.incomplete.push(
                "the candidate selects other source objects than the current rule: objects no current rule has origins publish are not seen here, so creates may be missing".to_owned(),
            );
        }
        if rule.spec.unwrap {
            if matches!(on_bus, OnBus::Read(_)) {
                // `unwrapped` reads the Bundles from the kind's consumer.
                reply.incomplete.push(format!(
                    "no current rule takes {} here: the Bundles of a kind this cluster does not follow are not previewed",
                    describe_gvk(&rule.source)
                ));
                return Ok(wanted);
            }
            return Ok(self.preview_unwrapped(rule, changed.is_some(), reply));
        }
        let changed = match changed {
            None => None,
            Some(src) => {
                let key = ObjectKey::from_object(&src.origin, &src.object)
                    .ok_or("the source object names no kind or name")?;
                if key.group != rule.source.group
                    || key.version != rule.source.version
                    || key.kind != rule.source.kind
                {
                    return Err(format!(
                        "the source object is not of the rule's kind {}",
                        describe_gvk(&rule.source)
                    ));
                }
                let env = changed_source(src, on_bus.get(&key))?;
                Some((key, env))
            }
        };
        let sources = self.world.sources(rule);
        // What the origins gave (checked as the bus's envelopes are), over
        // what the bus holds; a changed source over both.
        let mut given = given_sources(self.ctx, rule, &req.sources, reply);
        given.extend(changed);
        let overlaid: std::collections::BTreeSet<ObjectKey> = given.keys().cloned().collect();
        let bus = on_bus
            .iter()
            .filter(|(k, _)| !overlaid.contains(*k))
            .map(|(k, env)| (k.clone(), env));
        let compute = self.compute();
        let mut placement_candidates = BTreeMap::new();
        for (key, env) in bus.chain(given) {
            self.pace.breathe().await;
            let Some((env, obj, peer)) = taken(&sources, &key, Some(&env)) else {
                continue;
            };
            let Some(entries) = matching::matching_rules(&rule.spec, obj) else {
                continue;
            };
            if !self.placed_here(rule, (&key, obj), &mut placement_candidates) {
                reply.placed_elsewhere += 1;
                continue;
            }
            let computed =
                compute.compute_candidate(rule, &key, env, obj, (&peer.record, None), &entries);
            if let Some(why) = computed.refused {
                let message = format!("refused by this cluster's SyncPolicy: {why}");
                reply.errors.push(PreviewProblem {
                    object: source_ref(&key),
                    message,
                });
            }
            match computed.result {
                Some(Ok((target, c))) => wanted.entry(target).or_default().push(c),
                Some(Err(message)) => reply.errors.push(PreviewProblem {
                    object: source_ref(&key),
                    message,
                }),
                None => {}
            }
        }
        Ok(wanted)
    }

    /// Whether the candidate's placement (if it has one) puts the copy of
    /// the source object at `key` here: the record on the bus while the
    /// current rule places the same way, else what the origin's `decide`
    /// would make of the candidate's placement from that record (the
    /// clusters it chose taken as holding Current copies: a preview cannot
    /// see the origin's reports). What the pass does with a record is
    /// `placement::sink`; this is its question asked ahead of the origin.
    ///
    /// `seen` keeps each origin's candidates for the whole preview: they are
    /// the same for every object of that origin (a preview over thousands of
    /// objects in a fleet of hundreds would otherwise rebuild them each time).
    fn placed_here(
        &self,
        rule: &CompiledRule,
        (key, obj): (&ObjectKey, &Value),
        seen: &mut BTreeMap<String, Arc<Vec<PlacementCandidate>>>,
    ) -> bool {
        let (Some(spec), Some(unit)) = (&rule.spec.placement, unit_key(rule, key)) else {
            return true;
        };
        let local = &self.world.fleet.local.name;
        let record = self.placement.get(&unit);
        let current = self.world.rules.get(&rule.name);
        // The record answers only for the rule that made it: the same
        // placement over the same clusters (a new clusterSelector changes
        // the candidates, so the decision, even with the placement unchanged).
        let same = current.is_some_and(|r| {
            r.spec.placement.as_ref() == Some(spec)
                && r.spec.cluster_selector == rule.spec.cluster_selector
        });
        let chosen = |r: &PlacementRecord| r.chosen.iter().any(|c| &c.cluster == local);
        if let (Some(r), true) = (record, same) {
            return chosen(r);
        }
        let holding: BTreeSet<String> = record
            .map(|r| r.chosen.iter().map(|c| c.cluster.clone()).collect())
            .unwrap_or_default();
        let replicas = spec
            .replicas
            .as_ref()
            .filter(|_| spec.group.is_none())
            .and_then(|r| obj.pointer(&r.path))
            .and_then(Value::as_i64);
        let input = Inputs {
            rule: rule.name.clone(),
            seed: unit.unit.seed(),
            candidates: seen
                .entry(key.origin.clone())
                .or_insert_with(|| {
                    Arc::new(candidates_seen_by_a_sink(self.world, rule, &key.origin))
                })
                .clone(),
            healthy: holding.clone(),
            reporting: holding,
            replicas,
            // What other sinks refuse is on the origin, not here: the
            // record, once the origin decided, is the answer.
            refused: Arc::default(),
            release_from: None,
        };
        chosen(&decide(record, spec, &input, chrono::Utc::now()).record)
    }

    /// The envelopes of the candidate's source kind on the bus where this
    /// sink does not follow it; None (and why, in `reply.incomplete`) when
    /// a pass would not take the kind either: this cluster does not serve
    /// it. A read that fails is named in `reply.incomplete` too, and the
    /// preview goes on with what the origins gave (`sources`).
    async fn unfollowed(
        &self,
        rule: &CompiledRule,
        deadline: Instant,
        reply: &mut PreviewReply,
    ) -> Option<BTreeMap<ObjectKey, Envelope>> {
        if !self.world.kinds.contains_key(&rule.source) {
            // A pass watches the source kind here too: where discovery does
            // not serve it, the rule cannot work here (`rule_problem`).
            // Bounded as the lists are: the engine answers between passes,
            // and the client has no read timeout.
            let resolved = crate::sync::inputs::watches::resolve(&self.ctx.client, &rule.source);
            match tokio::time::timeout_at(deadline, resolved).await {
                Ok(Ok(_)) => {}
                Ok(Err(why)) => {
                    reply
                        .incomplete
                        .push(format!("the rule cannot work here: {why}"));
                    return None;
                }
                Err(_) => {
                    reply.incomplete.push(format!(
                        "discovery did not answer within the preview's {:?} for reads: whether this cluster serves {} is not known",
                        READS_BUDGET,
                        describe_gvk(&rule.source)
                    ));
                    return None;
                }
            }
        }
        match read_bus(self.ctx, &rule.source, deadline).await {
            Ok(read) => Some(read),
            Err(why) => {
                reply.incomplete.push(why);
                Some(BTreeMap::new())
            }
        }
    }

    /// The copies an unwrap rule wants here: the manifests of its Bundles,
    /// as the pass unwraps them (`sink::bundle`).
    fn preview_unwrapped(
        &self,
        rule: &CompiledRule,
        changed: bool,
        reply: &mut PreviewReply,
    ) -> Wanted {
        if changed {
            reply
                .incomplete
                .push("a changed Bundle is not previewed: the Bundles on the bus are".to_owned());
        }
        let mut report = RuleReport::default();
        let mut bundles = BundlePass::default();
        let mut wanted = Wanted::new();
        for (target, c) in self.compute().unwrapped(rule, &mut report, &mut bundles) {
            wanted.entry(target).or_default().push(c);
        }
        // Named as the rule status names them ("Kind ns/name"): no ObjectRef.
        let refused = report.refused.into_iter().map(|(o, r)| (o, r.to_string()));
        for (what, message) in report.errors.into_iter().chain(refused) {
            reply.errors.push(PreviewProblem {
                object: source_ref(&ObjectKey {
                    origin: String::new(),
                    group: rule.source.group.clone(),
                    version: rule.source.version.clone(),
                    kind: rule.source.kind.clone(),
                    namespace: None,
                    name: String::new(),
                }),
                message: format!("{what}: {message}"),
            });
        }
        wanted
    }

    /// What becomes of `target`, which the candidate wants (`own`: its
    /// candidates there), against the other rules' candidates: filed in
    /// `reply`, or the dry run that decides it.
    async fn preview_target(
        &self,
        rule: &CompiledRule,
        target: &Target,
        own: Vec<Candidate>,
        now: Instant,
        reads: &Reads,
        reply: &mut PreviewReply,
    ) -> Option<DryRun> {
        let mut cands: Vec<Candidate> = self
            .sink
            .plan
            .candidates(target)
            .into_iter()
            .filter(|c| c.rule != rule.name)
            .collect();
        cands.extend(own);
        conflicts::order(&mut cands);
        let (winner, losers) = cands.split_first()?;
        for loser in losers.iter().filter(|c| c.rule == rule.name) {
            reply.conflicts.push(PreviewProblem {
                object: object_ref(target),
                message: Conflict::other_origin(target, loser, winner).message,
            });
        }
        if winner.rule != rule.name {
            return None;
        }
        // A kind not watched here: as one LIST found it.
        let read = match reads.get(&target.gvk()) {
            Some(Err(why)) => {
                reply.errors.push(PreviewProblem {
                    object: object_ref(target),
                    message: why.clone(),
                });
                return None;
            }
            Some(Ok(read)) => Some(read),
            None => None,
        };
        let mut live = read.map_or_else(|| wave::live(self.world, target), |r| r.live(target));
        let namespaced = read.map(|r| r.namespaced);
        let decide =
            |live: Option<&Value>| self.preview_decide(rule, target, winner, live, namespaced, now);
        let mut step = decide(live.as_ref());
        if matches!(
            step,
            Step::Serial(
                Why::Deleted { .. } | Why::Recreate { .. } | Why::Gone { .. } | Why::Drift { .. }
            )
        ) {
            // As the serial path does before it calls a copy gone or
            // drifted: the watch may not have caught up with the agent's
            // own last write yet; the server says.
            if let Some(kind) = self.world.kinds.get(&target.gvk()) {
                let namespace = target.namespace.as_deref();
                let api = apply::api(&self.ctx.client, &kind.ar, namespace);
                if let Ok(fresh) = announce::fresh(&api, &target.name).await {
                    live = fresh;
                    step = decide(live.as_ref());
                }
            }
        }
        self.file_step(target, winner, live, step, reply)
    }

    /// `wave::decide` for the candidate's copy at `target`, as it decides
    /// once the rule's hold ends (`held` counts what waits for it);
    /// `namespaced`: the scope of a kind the preview listed itself.
    fn preview_decide(
        &self,
        rule: &CompiledRule,
        target: &Target,
        winner: &Candidate,
        live: Option<&Value>,
        namespaced: Option<bool>,
        now: Instant,
    ) -> Step {
        let (world, sink, marker) = (self.world, self.sink, &self.ctx.mark);
        let mut view = wave::view(world, sink, marker, target, live, Some(rule), None);
        view.namespaced = namespaced.or(view.namespaced);
        match wave::decide(&view, target, winner, now) {
            // The namespace is created on the way; what matters is the copy.
            Step::Serial(Why::Namespace { then, .. }) => *then,
            step => step,
        }
    }

    /// Files one decided step of the copy at `target` into `reply`, or
    /// returns the dry run that decides it.
    fn file_step(
        &self,
        target: &Target,
        winner: &Candidate,
        live: Option<Value>,
        step: Step,
        reply: &mut PreviewReply,
    ) -> Option<DryRun> {
        let problem = |message: String| PreviewProblem {
            object: object_ref(target),
            message,
        };
        let create = |reply: &mut PreviewReply| {
            reply.creates.push(PreviewCreate {
                object: object_ref(target),
                origin: winner.key.origin.clone(),
            });
        };
        let corrects = |p: &Policy| p.mode == DriftMode::Correct;
        let dry_run = |policy: Policy, reason: Option<&str>| {
            Some(DryRun {
                target: target.clone(),
                c: winner.clone(),
                live: live.clone()?,
                policy,
                reason: reason.map(str::to_owned),
            })
        };
        match step {
            Step::Done(Outcome::InSync | Outcome::Wrote | Outcome::Held(_), _)
            | Step::Verified { .. } => reply.unchanged += 1,
            Step::Done(Outcome::Conflict(conflict), _) => {
                reply.conflicts.push(problem(conflict.message));
            }
            Step::Done(Outcome::Failed(e), _) => reply.errors.push(problem(e.message)),
            Step::Write(w) if w.replace.is_none() => create(reply),
            Step::Serial(Why::Gone { .. } | Why::Recreate { .. }) => create(reply),
            Step::Serial(Why::Deleted { policy, .. }) if corrects(&policy) => create(reply),
            Step::Serial(Why::Drift { policy }) if corrects(&policy) => {
                return dry_run(policy, Some(CORRECTS_DRIFT));
            }
            // Drift the mode only reports: nothing is written.
            Step::Serial(Why::Deleted { .. } | Why::Drift { .. }) => reply.unchanged += 1,
            Step::Write(w) => {
                let exclude = w.replace.unwrap_or_default();
                let mode = DriftMode::Correct;
                return dry_run(Policy { mode, exclude }, None);
            }
            Step::Serial(Why::FirstLook { policy }) => {
                // As `sink::look` judges it: built from this very source
                // version, a difference is drift (written only if corrected).
                let hash = |o: &Value| {
                    annotation(o, well_known::ANNOTATION_SOURCE_HASH).map(str::to_owned)
                };
                let desired = winner.desired.value().ok();
                let same_source = live.as_ref().and_then(hash) == desired.as_ref().and_then(hash);
                if same_source && !corrects(&policy) {
                    reply.unchanged += 1;
                    return None;
                }
                return dry_run(policy, same_source.then_some(CORRECTS_DRIFT));
            }
            Step::Serial(Why::Namespace { .. }) => {
                let why = "the namespace and the copy are both to be made".to_owned();
                reply.errors.push(problem(why));
            }
        }
        None
    }

    /// Runs the dry runs of the replaces the preview found (WRITE_CONCURRENCY
    /// at once, as a wave runs its first looks), at most [`MAX_DRY_RUNS`]:
    /// the engine answers between passes, and a preview must not hold sync
    /// back for long. Each is an update with the paths it changes, or
    /// unchanged when it changes none.
    async fn dry_runs(
        &self,
        rule: &CompiledRule,
        runs: Vec<DryRun>,
        reads: &Reads,
        reply: &mut PreviewReply,
    ) {
        let (runs, over) = match runs.len() > MAX_DRY_RUNS {
            true => {
                let mut runs = runs;
                let over = runs.split_off(MAX_DRY_RUNS);
                (runs, over)
            }
            false => (runs, Vec::new()),
        };
        let jobs = runs.iter().enumerate().map(|(i, r)| -> BoxFuture<'_, _> {
            Box::pin(async move { (i, self.dry_run(r, reads).await) })
        });
        let mut results = wave::bounded(jobs).await;
        results.sort_by_key(|(i, _)| *i);
        for (i, result) in results {
            let Some(r) = runs.get(i) else { continue };
            let server = match result {
                Ok(server) => server,
                Err(e) => {
                    reply.errors.push(PreviewProblem {
                        object: object_ref(&r.target),
                        message: format!("the dry run of the update failed: {}", crate::report(&e)),
                    });
                    continue;
                }
            };
            let redact = Redact::of(&r.target, rule.spec.seal);
            let exclude = &r.policy.exclude;
            let changes = diff::changes(&server, &r.live, r.c.with_status, exclude, redact);
            if changes.is_empty() {
                reply.unchanged += 1;
                continue;
            }
            reply.updates.push(r.update(changes));
        }
        for r in over {
            let mut update = r.update(Vec::new());
            update.reason = Some(format!(
                "not compared: more than {MAX_DRY_RUNS} updates in one preview"
            ));
            reply.updates.push(update);
        }
    }

    /// The dry run of the replace a pass would send for `r` (writes nothing).
    async fn dry_run(&self, r: &DryRun, reads: &Reads) -> Result<Value, WriteError> {
        let gvk = r.target.gvk();
        let read = reads.get(&gvk).and_then(|r| r.as_ref().ok());
        let ar = read
            .map(|r| &r.ar)
            .or(self.world.kinds.get(&gvk).map(|k| &k.ar));
        let Some(ar) = ar else {
            return Err(WriteError::Gone(r.target.to_string()));
        };
        let namespace = r.target.namespace.as_deref();
        let api = apply::api(&self.ctx.client, ar, namespace);
        let body = dry_run_body(&r.c, &r.live, &r.policy)?;
        apply::dry_run_replace(&api, &body).await
    }

    /// The copies of the candidate rule here that it would no longer want,
    /// and what `collect` would do with each (the candidate's orphan policy;
    /// a Namespace or CRD whose deletion would take unmanaged objects along
    /// is kept, as `keep` decides).
    async fn preview_deletes(
        &self,
        rule: &CompiledRule,
        wanted: &Wanted,
        reply: &mut PreviewReply,
    ) {
        let local = &self.world.fleet.local.name;
        let mut served = None;
        for kind in self.world.kinds.values().filter(|k| k.listed) {
            for obj in kind.objects.values() {
                self.pace.breathe().await;
                if annotation(&obj, well_known::ANNOTATION_RULE) != Some(rule.name.as_str()) {
                    continue;
                }
                // As `collect`: only a copy this agent wrote.
                let Some(origin) = self.ctx.mark.copy_origin(&obj) else {
                    continue;
                };
                let Some(target) = Target::of(&obj) else {
                    continue;
                };
                let other_rules = self
                    .sink
                    .plan
                    .candidates(&target)
                    .iter()
                    .any(|c| c.rule != rule.name);
                if origin == local.as_str()
                    || wanted.contains_key(&target)
                    || other_rules
                    || crate::sync::model::meta::is_terminating(&obj)
                {
                    continue;
                }
                // The watch may not have seen a delete of the agent's own yet.
                let api = apply::api(&self.ctx.client, &kind.ar, target.namespace.as_deref());
                if let Ok(None) = announce::fresh(&api, &target.name).await {
                    continue;
                }
                let ready = RuleOf::Ready(rule.spec.orphan_policy);
                let (action, reason) = match verdict_under(self.world, &obj, origin, ready) {
                    Verdict::Orphan => (DeleteAction::Orphan, None),
                    Verdict::Keep => (
                        DeleteAction::Keep,
                        Some("its origin's identity is in doubt".to_owned()),
                    ),
                    Verdict::Delete => match would_take(self.ctx, &target, &obj, &mut served).await
                    {
                        Ok(found) if found.is_empty() => (DeleteAction::Delete, None),
                        Ok(found) => (
                            DeleteAction::Keep,
                            Some(format!(
                                "deleting it would delete what fleetbus does not manage: {}",
                                found.join(", ")
                            )),
                        ),
                        Err(e) => (
                            DeleteAction::Delete,
                            Some(format!(
                                "what deleting it would take along could not be checked: {}",
                                crate::report(&e)
                            )),
                        ),
                    },
                };
                reply.deletes.push(PreviewDelete {
                    object: object_ref(&target),
                    action,
                    reason,
                });
            }
        }
        reply.deletes.sort_by_key(|d| d.object.to_string());
    }

    /// The sink's computation of desired copies, over what the preview reads.
    fn compute(&self) -> Compute<'_> {
        Compute {
            world: self.world,
            ctx: self.ctx,
        }
    }
}
/// Paces a preview's computation: after each slice of work it sleeps as
/// long as the slice took. A preview of a rule over thousands of objects
/// computes every copy (hundreds of milliseconds of CPU); at the command
/// rate, back to back, that was a whole core on a machine whose other
/// core serves sync, the API server and NATS, and the propagation of
/// unrelated changes slowed (BENCHMARKS 2c). Paced, a preview takes at most
/// half a core and leaves the CPU free every few milliseconds; its answer
/// comes about twice as late, which a person asking does not notice.
pub(super) struct Pace {
    /// Since when the current slice has worked (a mutex for `Sync`: the
    /// dry runs share the preview; never contended).
    since: std::sync::Mutex<Instant>,
}

impl Pace {
    /// The work between two pauses.
    const SLICE: std::time::Duration = std::time::Duration::from_millis(2);

    pub(super) fn new() -> Pace {
        Pace {
            since: std::sync::Mutex::new(Instant::now()),
        }
    }

    /// Pauses if a slice of work was done since the last pause.
    pub(super) async fn breathe(&self) {
        let worked = match self.since.lock() {
            Ok(since) => since.elapsed(),
            Err(_) => return,
        };
        if worked >= Self::SLICE {
            tokio::time::sleep(worked).await;
            if let Ok(mut since) = self.since.lock() {
                *since = Instant::now();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A slice of work is followed by a pause as long; less than a slice
    /// is not paused.
    #[tokio::test(start_paused = true)]
    async fn a_preview_pauses_as_long_as_it_worked() {
        let pace = Pace::new();
        tokio::time::advance(Duration::from_millis(1)).await;
        let before = Instant::now();
        pace.breathe().await;
        assert_eq!(before.elapsed(), Duration::ZERO, "paused before a slice");
        tokio::time::advance(Duration::from_millis(4)).await;
        let before = Instant::now();
        pace.breathe().await;
        assert!(
            before.elapsed() >= Duration::from_millis(5),
            "{:?}",
            before.elapsed()
        );
        // A new slice starts after the pause.
        let before = Instant::now();
        pace.breathe().await;
        assert_eq!(before.elapsed(), Duration::ZERO);
    }
}
