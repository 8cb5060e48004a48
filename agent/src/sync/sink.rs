//! The sink side: every desired copy, computed from the envelopes on the bus
//! and the rules here, made equal on the local API; copies nothing wants any
//! more collected per the orphan policy.
//!
//! "Equal" is judged against a baseline (what the API server made of our
//! last write, or of a dry run of it), so server defaults never look like a
//! difference while a key someone added does; the write is a full replace,
//! which removes it (see `compare`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fleetbus_schemas::crd::{DriftMode, SyncRule, UpdatePolicy};
use fleetbus_schemas::drift::DriftType;
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::well_known;
use serde_json::Value;
use tokio::time::Instant;

use super::apply::{self, WriteError};
use super::bundle::{self, BundlePass, BundleSource};
use super::compare;
use super::conflicts;
use super::digest::Digest;
use super::drift::{self, Policy};
use super::drift_report::{self, Found};
use super::engine::{namespace_gvk, Engine};
use super::fight::Verdict;
use super::matching;
use super::model::backoff::Input;
use super::model::meta::{annotation, annotations_mut, describe_key, is_original};
use super::model::{Baseline, Candidate, Conflict, Outcome, RuleReport, Target};
use super::mutate::{self, CopyInput};
use super::rules::CompiledRule;
use super::sink_cache::{CandidateCache, Computed};
use super::sink_wave::Step;
use super::source::qualifies;
use super::template::TemplateContext;

/// Sets `body`'s source-hash annotation to `live`'s, when live has one.
fn keep_source_hash(body: &mut Value, live: &Value) {
    let Some(hash) = annotation(live, well_known::ANNOTATION_SOURCE_HASH) else {
        return;
    };
    if let Some(a) = annotations_mut(body) {
        a.insert(
            well_known::ANNOTATION_SOURCE_HASH.to_owned(),
            Value::String(hash.to_owned()),
        );
    }
}

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

impl Engine {
    /// Whether everything a rule needs has been read (its kinds, namespaces).
    pub(super) fn rule_ready(&self, rule: &CompiledRule) -> bool {
        let kind_ready = |g| self.kinds.get(g).is_some_and(|k| k.ready());
        kind_ready(&rule.source)
            && rule
                .targets
                .iter()
                .all(|t| self.kinds.get(t).is_some_and(|k| k.listed))
            && self.kinds.get(&namespace_gvk()).is_some_and(|k| k.listed)
    }

    /// Why a rule cannot work right now, if it cannot: its spec, or a kind
    /// discovery does not serve, or a kind the agent may not watch.
    pub(super) fn rule_problem(&self, rule: &CompiledRule) -> Option<String> {
        if let Some(p) = &rule.problem {
            return Some(p.clone());
        }
        if let Some(p) = self.version_clash(rule) {
            return Some(p);
        }
        for g in std::iter::once(&rule.source).chain(rule.targets.iter()) {
            if let Some(why) = self.unresolved.get(g) {
                return Some(why.clone());
            }
            // A failing watch is reported while it fails, also after an
            // earlier list succeeded (rights revoked): a re-list clears it.
            if let Some(e) = self.kinds.get(g).and_then(|k| k.watch_error.as_ref()) {
                return Some(format!("cannot watch {}: {e}", super::watches::describe(g)));
            }
        }
        None
    }

    /// Another rule already syncs the same kind at another version: one
    /// version per kind, else each version's copies would look unwanted in
    /// the other version's watch (the rule first by name keeps it).
    fn version_clash(&self, rule: &CompiledRule) -> Option<String> {
        self.rules
            .values()
            .filter(|o| o.name < rule.name && o.problem.is_none())
            .find(|o| {
                o.source.group == rule.source.group
                    && o.source.kind == rule.source.kind
                    && o.source.version != rule.source.version
            })
            .map(|o| {
                format!(
                    "rule {} already syncs {} at version {}: one version per kind",
                    o.name, rule.source.kind, o.source.version
                )
            })
    }

    /// Whether this cluster is a sink of `rule` (its `clusterSelector`).
    pub(super) fn selects_us(&self, rule: &CompiledRule) -> bool {
        matching::selector_matches(
            rule.spec.cluster_selector.as_ref(),
            &self.fleet.local.labels,
        )
        .unwrap_or(false)
    }

    /// Every copy a rule wants here, and the errors of those it cannot make.
    fn candidates(
        &self,
        rule: &CompiledRule,
        report: &mut RuleReport,
        bundles: &mut BundlePass,
        cache: &mut CandidateCache,
    ) -> Vec<(Target, Candidate)> {
        let mut out = Vec::new();
        let Some(kind) = self.kinds.get(&rule.source) else {
            return out;
        };
        let sources: BTreeMap<&str, &crate::registry::PeerView> = self
            .fleet
            .peers
            .values()
            .filter(|p| p.may_be_source() && qualifies(rule, &p.labels, &p.features))
            .map(|p| (p.name.as_str(), p))
            .collect();
        report.sources = sources.keys().map(|s| (*s).to_owned()).collect();
        for (key, env) in &kind.snapshots {
            let Some(peer) = sources.get(key.origin.as_str()) else {
                continue;
            };
            let Some(obj) = env.object.as_ref().filter(|_| !env.tombstone) else {
                continue;
            };
            // A copy on the bus would be a loop; an origin never publishes
            // one, so this only guards against a misbehaving publisher.
            if !is_original(obj)
                || annotation(obj, well_known::ANNOTATION_RESOURCE_SYNC_DISABLED).is_some()
            {
                continue;
            }
            if rule.spec.unwrap {
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
                out.extend(self.unwrap(&src, report, bundles));
                continue;
            }
            let computed = cache.get_or_compute(&rule.name, key, env, || {
                match matching::matching_rules(&rule.spec, obj) {
                    Some(entries) => {
                        self.compute_candidate(rule, key, env, obj, &peer.record, &entries)
                    }
                    None => Computed::default(),
                }
            });
            if computed.unknown_policy {
                report.unknown_update_policy.insert(key.clone());
            }
            match computed.result {
                Some(Ok(pair)) => out.push(pair),
                Some(Err(message)) => {
                    report.errors.insert(describe_key(key), message);
                }
                None => {}
            }
        }
        out
    }

    /// What `rule` makes of one source object: the copy and its place, or
    /// why there is none (memoized by `sink_cache`).
    fn compute_candidate(
        &self,
        rule: &CompiledRule,
        key: &ObjectKey,
        env: &Envelope,
        obj: &Value,
        origin_record: &Value,
        entries: &[&SyncRule],
    ) -> Computed {
        let templates = TemplateContext {
            object: obj.clone(),
            cluster: origin_record.clone(),
            local_cluster: self.fleet.local.record.clone(),
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
        };
        let (update, unknown_policy) = update_policy(rule.spec.update_policy, obj);
        let result = match mutate::desired_copy(&input).map(|d| (Target::of(&d), d)) {
            Ok((Some(target), desired)) => Ok((
                target,
                Candidate {
                    rule: rule.name.clone(),
                    key: key.clone(),
                    created: obj
                        .pointer("/metadata/creationTimestamp")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned(),
                    digest: Digest::of_desired(&desired),
                    desired: Arc::new(desired),
                    with_status: mutate::syncs_status(entries),
                    update,
                    create_namespace: rule.spec.create_namespace,
                },
            )),
            Ok((None, _)) => Err("the mutated copy has no apiVersion, kind or name".to_owned()),
            Err(e) => Err(crate::report(&e)),
        };
        Computed {
            result: Some(result),
            unknown_policy,
        }
    }

    /// Computes every desired copy, writes what differs, collects what
    /// nothing wants, and records what each rule did.
    pub(super) async fn sink_pass(&mut self) {
        let mut reports: BTreeMap<String, RuleReport> = BTreeMap::new();
        let mut by_target: BTreeMap<Target, Vec<Candidate>> = BTreeMap::new();
        let mut bundles = BundlePass::default();
        let rules: Vec<CompiledRule> = self.rules.values().cloned().collect();
        // Taken out for the pass, so `candidates` can borrow the engine.
        let mut cache = std::mem::take(&mut self.candidate_cache);
        cache.begin(&self.fleet, self.rules_generation);
        for rule in &rules {
            let mut report = RuleReport::default();
            if self.rule_problem(rule).is_none() && self.rule_ready(rule) && self.selects_us(rule) {
                report.selected = true;
                for (target, c) in self.candidates(rule, &mut report, &mut bundles, &mut cache) {
                    by_target.entry(target).or_default().push(c);
                }
            } else {
                report.selected = self.selects_us(rule);
            }
            reports.insert(rule.name.clone(), report);
        }
        tracing::trace!(memoized = cache.hits, "candidates computed");
        cache.finish();
        self.candidate_cache = cache;
        let mut found: Vec<Conflict> = Vec::new();
        let wanted: BTreeSet<Target> = by_target.keys().cloned().collect();
        let mut held = BTreeMap::new();
        // What others need first (a Bundle's Namespace, CRD, ServiceAccount
        // and RBAC before what uses them); by target within a rank.
        let mut ordered: Vec<(Target, Vec<Candidate>)> = by_target.into_iter().collect();
        ordered.sort_by_key(|(t, _)| bundle::install_rank(t));
        let mut winners: Vec<(Target, Candidate)> = Vec::with_capacity(ordered.len());
        for (target, mut cands) in ordered {
            conflicts::order(&mut cands);
            let winner = cands.remove(0);
            held.insert(target.clone(), (winner.key.clone(), winner.rule.clone()));
            for loser in &cands {
                let c = Conflict::other_origin(&target, loser, &winner);
                if let Some(r) = reports.get_mut(&loser.rule) {
                    r.conflicts.insert(target.to_string(), c.message.clone());
                }
                bundles.record(&loser.key, &target, Err(c.message.clone()));
                found.push(c);
            }
            winners.push((target, winner));
        }
        // One wave per install rank, in rank order (see `sink_wave`).
        self.in_flight.begin(winners.len());
        let mut tally = Tally {
            reports: &mut reports,
            bundles: &mut bundles,
            found: &mut found,
        };
        for wave in
            winners.chunk_by(|(a, _), (b, _)| bundle::install_rank(a) == bundle::install_rank(b))
        {
            self.apply_wave(wave, &mut tally).await;
        }
        self.in_flight.end();
        // Watch times matter only for copies (drift latency).
        self.seen.retain(|t, _| wanted.contains(t));
        self.drift_forget_except(&wanted).await;
        self.drift_flush().await;
        // A copy held in the last pass and not wanted now may be collectable.
        let shrank = self.held.keys().any(|t| !wanted.contains(t));
        if shrank || self.collect_due {
            self.collect(&wanted, &mut reports).await;
        }
        self.announce_failures().await;
        for (rule, errors) in &self.source_errors {
            if let Some(r) = reports.get_mut(rule) {
                r.errors.extend(errors.clone());
            }
        }
        self.note_kept(&mut reports);
        for (rule, withheld) in &self.source_withheld {
            if let Some(r) = reports.get_mut(rule) {
                r.withheld.clone_from(withheld);
            }
        }
        self.report_conflicts(found).await;
        self.note_unknown_update_policies(&reports);
        self.reports = reports;
        self.finish_bundles(bundles);
        self.held = held;
    }

    /// Makes the copies of one install rank equal to their winners: decided
    /// cases are tallied, serial ones applied one by one, then the plain
    /// writes run concurrently.
    async fn apply_wave(&mut self, wave: &[(Target, Candidate)], tally: &mut Tally<'_>) {
        let now = Instant::now();
        let mut writes = Vec::new();
        for (target, winner) in wave {
            let outcome = match self.classify(target, winner, now) {
                Step::Done(outcome, equal) => {
                    if equal {
                        self.retries.remove(target);
                        self.drift_resolved(target).await;
                    }
                    outcome
                }
                Step::Verified(rv, with_status) => {
                    self.verified(target, rv.as_deref(), with_status);
                    self.retries.remove(target);
                    self.drift_resolved(target).await;
                    Outcome::InSync
                }
                Step::Serial => self.apply_target(target, winner).await,
                Step::Write(w) => {
                    writes.push((target, winner, w));
                    continue;
                }
            };
            if matches!(outcome, Outcome::InSync | Outcome::Wrote) {
                self.in_flight.settled();
            }
            tally.add(target, winner, outcome);
        }
        let places: Vec<(&Target, &Candidate)> = writes.iter().map(|(t, c, _)| (*t, *c)).collect();
        for (i, outcome) in self.run_writes(writes).await {
            if let Some((target, winner)) = places.get(i) {
                tally.add(target, winner, outcome);
            }
        }
    }

    /// Sets the gauge of ignored `fleetbus.io/update-policy` values; warns when
    /// their number changes (not every pass).
    fn note_unknown_update_policies(&self, reports: &BTreeMap<String, RuleReport>) {
        // Per source object, however many rules select it.
        let n = reports
            .values()
            .flat_map(|r| r.unknown_update_policy.iter())
            .collect::<BTreeSet<_>>()
            .len();
        let n = i64::try_from(n).unwrap_or(i64::MAX);
        let gauge = &self.ctx.metrics.sync_unknown_update_policy;
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

    /// Makes the copy at `target` equal to the winner's desired state.
    async fn apply_target(&mut self, target: &Target, c: &Candidate) -> Outcome {
        let gvk = target.gvk();
        let Some(kind) = self.kinds.get(&gvk) else {
            return Outcome::Failed(format!(
                "kind {} is not watched",
                super::watches::describe(&gvk)
            ));
        };
        let ar = kind.ar.clone();
        let namespaced = kind.namespaced;
        let live = kind.objects.get(&target.local_key()).cloned();
        let live_rv = live
            .as_ref()
            .and_then(|l| l.pointer("/metadata/resourceVersion"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let input = Input {
            desired: Some(c.digest),
            live_rv: live_rv.clone(),
        };
        if let Some(error) = self.waiting(target, &input, Instant::now()) {
            return Outcome::Failed(error);
        }
        if namespaced && target.namespace.is_none() {
            return Outcome::Failed(
                "the kind is namespaced but the copy has no namespace".to_owned(),
            );
        }
        if !namespaced && target.namespace.is_some() {
            return Outcome::Failed(
                "the kind is cluster-scoped but the copy has a namespace".to_owned(),
            );
        }
        if let Some(ns) = &target.namespace {
            let exists = self
                .kinds
                .get(&namespace_gvk())
                .is_some_and(|k| k.objects.contains_key(&(None, ns.clone())));
            if !exists {
                if !c.create_namespace {
                    return Outcome::Failed(format!(
                        "namespace {ns} not found (set createNamespace: true to create it)"
                    ));
                }
                if let Err(e) = apply::create_namespace(&self.ctx, ns).await {
                    return self.failed(target, c, None, e);
                }
            }
        }
        let client = self.ctx.client.clone();
        let api = apply::api(&client, &ar, target.namespace.as_deref());
        let rule = self.rules.get(&c.rule).cloned();
        let Some(live) = live else {
            if c.update == UpdatePolicy::CreateOnly {
                // A deleted create-only copy is created again, and that is not
                // drift (PROTOCOL §8.1): no baseline, no Deleted drift, whatever
                // the drift mode.
                if self.baselines.contains_key(target) {
                    if let Ok(Some(_)) = drift_report::fresh(&api, &target.name).await {
                        // Our create's watch event has not arrived yet.
                        return Outcome::InSync;
                    }
                }
                return match apply::create(&self.ctx, &api, &c.desired, c.with_status).await {
                    Ok(server) => self.wrote(target, c, server),
                    Err(e) => self.failed(target, c, None, e),
                };
            }
            // A copy we wrote is gone while its desired state did not change:
            // someone deleted it (drift of type Deleted).
            let known = self
                .baselines
                .get(target)
                .filter(|b| b.desired == c.digest)
                .map(|b| b.server.clone());
            if let (Some(last), Some(rule)) = (known, rule.as_ref()) {
                if let Ok(Some(_)) = drift_report::fresh(&api, &target.name).await {
                    // Our create's watch event has not arrived yet: no drift.
                    return Outcome::InSync;
                }
                let policy = Policy::of(rule, target, &last);
                let mode = self.effective_mode(target, policy.mode);
                if mode == DriftMode::Ignore {
                    return Outcome::InSync;
                }
                self.drift_detected(
                    target,
                    c,
                    Found {
                        live: &last,
                        baseline: &last,
                        type_: DriftType::Deleted,
                        action: mode,
                        exclude: &policy.exclude,
                        with_status: c.with_status,
                    },
                )
                .await;
                if mode == DriftMode::Report {
                    return Outcome::InSync;
                }
                let written = apply::create(&self.ctx, &api, &c.desired, c.with_status).await;
                return self.corrected(target, c, None, written).await;
            }
            return match apply::create(&self.ctx, &api, &c.desired, c.with_status).await {
                Ok(server) => self.wrote(target, c, server),
                Err(e) => self.failed(target, c, None, e),
            };
        };
        if let Some(why) = super::sink_wave::terminating(&live) {
            return Outcome::Failed(why);
        }
        if is_original(&live) {
            return Outcome::Conflict(Box::new(Conflict::local_object(target, c, &live)));
        }
        if annotation(&live, well_known::ANNOTATION_RESOURCE_SYNC_DISABLED).is_some()
            || c.update == UpdatePolicy::CreateOnly
        {
            // Pinned by an operator, or created once by policy: left alone.
            return Outcome::InSync;
        }
        let policy = rule
            .as_ref()
            .map(|r| Policy::of(r, target, &live))
            .unwrap_or(Policy {
                mode: DriftMode::Correct,
                exclude: Vec::new(),
            });
        // The baseline, and whether a difference from it is drift: it is when
        // the desired copy is the one the baseline was made from (someone
        // changed the copy), not when the source changed.
        let baseline = match self.baselines.get(target) {
            Some(b) if b.desired == c.digest => Some((b.server.clone(), true)),
            Some(_) => None, // the desired state changed: write it
            None => {
                // No baseline (first look since start): ask the server what it
                // would make of the desired state, without writing. The copy
                // was built from this very source version if its source hash
                // says so; then a difference was made here while we were away.
                let mut body = Value::clone(&c.desired);
                compare::carry_over(&mut body, &live);
                drift::keep_excluded(&mut body, &live, &policy.exclude);
                // Compare with the copy's own source hash: a source change
                // that leaves the copy alone (the origin's status, when
                // status is not synced) is no reason to write after a
                // restart, as it was none while running (`Digest`).
                keep_source_hash(&mut body, &live);
                match apply::dry_run_replace(&api, &body).await {
                    Ok(server) => {
                        self.baselines.insert(
                            target.clone(),
                            Baseline {
                                desired: c.digest,
                                server: server.clone(),
                                verified: None,
                            },
                        );
                        let same_source = annotation(&live, well_known::ANNOTATION_SOURCE_HASH)
                            == annotation(&c.desired, well_known::ANNOTATION_SOURCE_HASH);
                        Some((server, same_source))
                    }
                    Err(e) => return self.failed(target, c, live_rv, e),
                }
            }
        };
        if let Some((server, is_drift)) = baseline {
            if drift::comparable(&server, c.with_status, &policy.exclude)
                == drift::comparable(&live, c.with_status, &policy.exclude)
            {
                self.verified(target, live_rv.as_deref(), c.with_status);
                self.retries.remove(target);
                self.drift_resolved(target).await;
                return Outcome::InSync;
            }
            if is_drift {
                // A copy another writer fights over is left alone while it
                // waits (no read, no write); an operator's request ends that.
                if self.forced.contains(target) {
                    self.fights.forget(target);
                } else if self
                    .fights
                    .holding(target, live_rv.as_deref(), Instant::now())
                    .is_some()
                {
                    return Outcome::Failed(self.fight_message(target));
                }
                // What the server has now, not the watch cache (which may
                // still show the version our last write replaced).
                let live = match drift_report::fresh(&api, &target.name).await {
                    Ok(Some(now)) => now,
                    // Deleted meanwhile: its watch event decides.
                    Ok(None) => return Outcome::InSync,
                    Err(e) => {
                        tracing::debug!(copy = %target, error = %e, "re-reading a drifted copy failed; using the cache");
                        live
                    }
                };
                if drift::comparable(&server, c.with_status, &policy.exclude)
                    == drift::comparable(&live, c.with_status, &policy.exclude)
                {
                    return Outcome::InSync;
                }
                let live_rv = live
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let mode = self.effective_mode(target, policy.mode);
                if mode == DriftMode::Ignore {
                    return Outcome::InSync;
                }
                let found = Found {
                    live: &live,
                    baseline: &server,
                    type_: DriftType::Modified,
                    action: mode,
                    exclude: &policy.exclude,
                    with_status: c.with_status,
                };
                let verdict = if mode == DriftMode::Correct && !self.forced.contains(target) {
                    self.fight_verdict(target, &found)
                } else {
                    Verdict::Correct
                };
                self.drift_detected(target, c, found).await;
                if verdict != Verdict::Correct {
                    return self.drift_fight(target, verdict, live_rv.as_deref()).await;
                }
                if mode == DriftMode::Report {
                    return Outcome::InSync;
                }
                let written = apply::replace(
                    &self.ctx,
                    &api,
                    &c.desired,
                    &live,
                    c.with_status,
                    &policy.exclude,
                )
                .await;
                return self.corrected(target, c, live_rv, written).await;
            }
        }
        match apply::replace(
            &self.ctx,
            &api,
            &c.desired,
            &live,
            c.with_status,
            &policy.exclude,
        )
        .await
        {
            Ok(server) => {
                // The desired state moved: an open drift ends with it.
                self.drift_resolved(target).await;
                self.wrote(target, c, server)
            }
            Err(e) => self.failed(target, c, live_rv, e),
        }
    }

    /// Ends a correction: the drift closes (or stays, failed), an operator's
    /// request gets its result, and the write counts like any other.
    async fn corrected(
        &mut self,
        target: &Target,
        c: &Candidate,
        live_rv: Option<String>,
        written: Result<Value, WriteError>,
    ) -> Outcome {
        match written {
            Ok(server) => {
                self.drift_corrected(target).await;
                self.forced_done(target, Ok(()));
                self.wrote(target, c, server)
            }
            Err(e) => {
                let message = crate::report(&e);
                self.drift_failed(target, &message).await;
                self.forced_done(target, Err(message));
                self.failed(target, c, live_rv, e)
            }
        }
    }

    /// The drift mode in effect: an operator's `fleetbus drift correct` makes
    /// it `Correct` for this pass, whatever the rule or annotations say.
    fn effective_mode(&self, target: &Target, mode: DriftMode) -> DriftMode {
        if self.forced.contains(target) {
            DriftMode::Correct
        } else {
            mode
        }
    }

    /// Records the result of a correction an operator asked for.
    fn forced_done(&mut self, target: &Target, result: Result<(), String>) {
        if self.forced.remove(target) {
            self.forced_results.push((target.clone(), result));
        }
    }

    pub(super) fn wrote(&mut self, target: &Target, c: &Candidate, server: Value) -> Outcome {
        tracing::info!(copy = %target, rule = %c.rule, origin = %c.key.origin, "wrote copy");
        self.baselines.insert(
            target.clone(),
            Baseline {
                desired: c.digest,
                server,
                verified: None,
            },
        );
        self.retries.remove(target);
        self.last_sync
            .insert(c.rule.clone(), crate::kube::conditions::now_seconds());
        Outcome::Wrote
    }

    /// A write of the copy at `target` failed: it backs off (see
    /// `sink_failures`), and the pass reports the error.
    pub(super) fn failed(
        &mut self,
        target: &Target,
        c: &Candidate,
        live_rv: Option<String>,
        e: WriteError,
    ) -> Outcome {
        let input = Input {
            desired: Some(c.digest),
            live_rv,
        };
        Outcome::Failed(self.copy_failed(target, &c.rule, input, "write", &e))
    }
}

/// Where a sink pass records what became of each target.
struct Tally<'a> {
    reports: &'a mut BTreeMap<String, RuleReport>,
    bundles: &'a mut BundlePass,
    found: &'a mut Vec<Conflict>,
}

impl Tally<'_> {
    /// Records the winner's outcome at `target` in its rule's report and its Bundle.
    fn add(&mut self, target: &Target, winner: &Candidate, outcome: Outcome) {
        self.bundles
            .record(&winner.key, target, bundle::outcome_result(&outcome));
        let Some(report) = self.reports.get_mut(&winner.rule) else {
            return;
        };
        match outcome {
            Outcome::InSync => report.synced += 1,
            Outcome::Wrote => {
                report.synced += 1;
                report.wrote = true;
            }
            Outcome::Conflict(c) => {
                report
                    .conflicts
                    .insert(target.to_string(), c.message.clone());
                self.found.push(*c);
            }
            Outcome::Failed(e) => {
                report.errors.insert(target.to_string(), e);
            }
        }
    }
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
