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

use fleetbus_schemas::crd::{SyncRule, UpdatePolicy};
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::well_known;
use serde_json::Value;
use tokio::time::Instant;

use super::apply::WriteError;
use super::bundle::{self, BundlePass, BundleSource};
use super::cache::{CandidateCache, Computed};
use super::conflicts;
use super::look::Looked;
use super::mutate::{self, CopyInput};
use super::wave::{Step, Why, Write};
use crate::sync::digest::Digest;
use crate::sync::engine::{namespace_gvk, Engine};
use crate::sync::model::backoff::Input;
use crate::sync::model::meta::{annotation, describe_key, is_original};
use crate::sync::model::{Baseline, Candidate, Conflict, Outcome, RuleReport, Target};
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching;
use crate::sync::rules::template::TemplateContext;
use crate::sync::source::publish::qualifies;

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
    pub(in crate::sync) fn rule_ready(&self, rule: &CompiledRule) -> bool {
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
    pub(in crate::sync) fn rule_problem(&self, rule: &CompiledRule) -> Option<String> {
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
                return Some(format!(
                    "cannot watch {}: {e}",
                    crate::sync::model::meta::describe_gvk(g)
                ));
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
    pub(in crate::sync) fn selects_us(&self, rule: &CompiledRule) -> bool {
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
    /// why there is none (memoized by `cache`).
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
    /// nothing wants, and records what each rule did. Returns when to run
    /// again for the drift announcements that failed (see `drift::state`).
    pub(in crate::sync) async fn sink_pass(&mut self) -> Option<Instant> {
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
        // One wave per install rank, in rank order (see `wave`).
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
        for (rule, errors) in &self.source.errors {
            if let Some(r) = reports.get_mut(rule) {
                r.errors.extend(errors.clone());
            }
        }
        self.note_kept(&mut reports);
        for (rule, withheld) in &self.source.withheld {
            if let Some(r) = reports.get_mut(rule) {
                r.withheld.clone_from(withheld);
            }
        }
        self.report_conflicts(found).await;
        self.note_unknown_update_policies(&reports);
        self.reports = reports;
        self.finish_bundles(bundles);
        self.held = held;
        self.drift.take_wake()
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
            let outcome = match self.classify(target, winner, now) {
                Step::Write(w) => {
                    writes.push((target, winner, w));
                    continue;
                }
                Step::Serial(Why::FirstLook { policy }) => {
                    looks.push((target, winner, policy));
                    continue;
                }
                step => self.settle(target, winner, step).await,
            };
            self.settled(target, winner, outcome, tally);
        }
        for (target, winner, looked) in self.first_looks(looks).await {
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
        for (i, outcome) in self.run_writes(writes).await {
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
            self.in_flight.settled();
        }
        tally.add(target, winner, outcome);
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

    /// Records a write of the copy at `target`: its baseline is what the
    /// server made of it, its failures end, its rule synced now.
    pub(in crate::sync) fn wrote(
        &mut self,
        target: &Target,
        c: &Candidate,
        server: Value,
    ) -> Outcome {
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
    /// `failures`), and the pass reports the error.
    pub(in crate::sync) fn failed(
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
