//! The sink's writes of one install rank, run as a wave: the common cases
//! (a copy that is equal, a missing copy to create, a copy whose desired
//! state changed) are decided from the state without writing, and their
//! writes run concurrently; everything else (drift, dry runs after a
//! restart, create-only re-creations) takes the serial path
//! (`serial`), told why by [`decide`].
//!
//! Ranks run as successive waves (`bundle::install_rank`): a Bundle's
//! Namespace and CRD are written before what uses them. Namespaces a wave's
//! copies need (`createNamespace`) are created before its writes start.
//! Targets are distinct, so there is one write per target per pass.

use std::collections::BTreeSet;

use fleetbus_schemas::crd::{DriftMode, UpdatePolicy};
use fleetbus_schemas::well_known;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use serde_json::Value;
use tokio::time::Instant;

use super::apply::{self, WriteError};
use super::compare::resource_version;
use super::failures;
use super::state::SinkState;
use crate::context::Context;
use crate::mark::{CopyMark, Ownership};
use crate::sync::drift::announce;
use crate::sync::drift::policy::Policy;
use crate::sync::drift::state::DriftState;
use crate::sync::model::backoff::{Backoff, Input};
use crate::sync::model::meta::{has_annotation, is_terminating};
use crate::sync::model::{
    Baseline, Candidate, Conflict, CopyError, FailureKind, Outcome, Packed, Target,
};
use crate::sync::progress::InFlight;
use crate::sync::rollout::state::RolloutBook;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::world::{namespace_gvk, World};

/// Writes in flight at once: enough to hide the API server's latency, few
/// enough not to swamp it (or the agent's client pool).
pub const WRITE_CONCURRENCY: usize = 24;

/// What a held copy is not (its rule is suspended or waits for its
/// `dependsOn`); drift of a copy it wrote is still reported.
const HELD_CREATE: &str = "the copy is not created";
const HELD_UPDATE: &str = "the new version is not written";
const HELD_LOOK: &str = "the copy is not compared with its source until the hold ends";

/// One running write of a wave: its place in the wave and its result.
type Job<'a> = BoxFuture<'a, (usize, Result<Packed, WriteError>)>;

/// Runs the futures of `jobs`, at most WRITE_CONCURRENCY at once; their
/// results as they finish.
///
/// Each future is made as a slot frees, not all up front: a boxed write
/// future is ~1.5 KB, and a first sync's wave is thousands of writes
/// (heaptrack, docs/design/memory.md: 15 MB of a 10,000-copy sink's peak were boxed
/// futures waiting for a slot). A plain loop over `FuturesUnordered`, not
/// `buffer_unordered` over a stream: a stream of borrowing async blocks
/// trips the compiler's `Send` inference for the spawned sync task.
pub(in crate::sync) async fn bounded<'a, T>(
    mut jobs: impl Iterator<Item = BoxFuture<'a, T>> + Send,
) -> Vec<T> {
    let mut results = Vec::new();
    let mut running: FuturesUnordered<BoxFuture<'a, T>> = FuturesUnordered::new();
    loop {
        while running.len() < WRITE_CONCURRENCY {
            let Some(job) = jobs.next() else { break };
            running.push(job);
        }
        match running.next().await {
            Some(done) => results.push(done),
            None => return results,
        }
    }
}

/// What a decided step ends besides its outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::sync) enum Ends {
    /// The copy is known equal now: its retry state and an open drift end.
    RetryAndDrift,
    /// Nothing: the copy is not known equal.
    Nothing,
}

/// How one target is handled, decided without writing.
#[derive(Debug)]
pub(in crate::sync) enum Step {
    /// Decided: the outcome, and what it ends.
    Done(Outcome, Ends),
    /// Equal after comparing with the baseline: also remember the live
    /// resourceVersion (and status mode), so the next pass does not compare.
    Verified {
        resource_version: Option<String>,
        with_status: bool,
    },
    /// A plain write that may run alongside others.
    Write(Write),
    /// Everything else: one at a time, down the path [`Why`] names.
    Serial(Why),
}

/// Why a target takes the serial path (it needs a read, a dry run or an
/// Event before it knows what to write), with what that path needs.
#[derive(Debug)]
pub(in crate::sync) enum Why {
    /// A create-only copy we wrote is missing: created again, and that is
    /// not drift (PROTOCOL §8.1), unless our create's watch event is still
    /// on its way.
    Recreate {
        /// A namespace to create first (`createNamespace`).
        namespace: Option<String>,
    },
    /// A copy we wrote is missing while its desired state did not change:
    /// someone deleted it (drift of type Deleted), unless our create's
    /// watch event is still on its way.
    Deleted {
        /// A namespace to create first (`createNamespace`).
        namespace: Option<String>,
        /// The drift policy, read from the copy as last written.
        policy: Policy,
    },
    /// A copy we wrote is missing and its desired state changed: created.
    Gone {
        /// A namespace to create first (`createNamespace`).
        namespace: Option<String>,
    },
    /// The copy is here but its namespace is not (as the watch last saw
    /// it): the namespace is created, then `then` is done.
    Namespace {
        /// The namespace to create.
        name: String,
        /// What to do once it exists.
        then: Box<Step>,
    },
    /// No baseline (the first look since start): a dry run makes one, and
    /// the copy is compared with it.
    FirstLook {
        /// The drift policy of the live copy.
        policy: Policy,
    },
    /// The live copy differs from the baseline of the same desired state:
    /// someone changed it (drift of type Modified).
    Drift {
        /// The drift policy of the live copy.
        policy: Policy,
    },
}

/// A create or replace decided by [`classify`].
#[derive(Debug)]
pub(in crate::sync) struct Write {
    /// A namespace to create first (`createNamespace`).
    pub namespace: Option<String>,
    /// Replace the live copy keeping these paths (drift exclusions); None: create.
    pub replace: Option<Vec<String>>,
}

/// What the sink knows of one target, borrowed from the World and the
/// sink's state.
#[derive(Debug, Clone, Copy)]
pub(in crate::sync) struct View<'a> {
    /// Its backoff after failures.
    pub retry: Option<&'a Backoff>,
    /// Whether its kind is namespaced; None: the kind is not watched.
    pub namespaced: Option<bool>,
    /// The live copy.
    pub live: Option<&'a Value>,
    /// Its namespace exists (or it has none).
    pub namespace_exists: bool,
    /// Its baseline.
    pub baseline: Option<&'a Baseline>,
    /// The winner's rule.
    pub rule: Option<&'a CompiledRule>,
    /// Why the winner's rule holds its copies here (suspended, waiting for
    /// its `dependsOn`), if it does: nothing is created or updated.
    pub hold: Option<&'a str>,
    /// Which objects are copies this cluster's agent wrote.
    pub marker: &'a CopyMark,
}

/// Why the live object at a target is not written, when it is being deleted
/// (a deletionTimestamp, finalizers pending): a write would revive nothing
/// and count a doomed object as in sync. Its watch's DELETED event starts
/// the pass that creates the copy anew.
pub(in crate::sync) fn terminating(live: &Value) -> Option<String> {
    if !is_terminating(live) {
        return None;
    }
    let finalizers: Vec<&str> = live
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| f.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    Some(format!(
        "the object here is being deleted (finalizers: {}): it is not written, and the copy is created once it is gone",
        finalizers.join(", ")
    ))
}

/// The drift policy of the copy `live` at `target` under `rule`; a copy
/// whose rule is unknown is corrected and excludes nothing.
fn policy(rule: Option<&CompiledRule>, target: &Target, live: &Value) -> Policy {
    rule.map_or_else(
        || Policy {
            mode: DriftMode::Correct,
            exclude: Vec::new(),
        },
        |r| Policy::of(r, target, live),
    )
}

/// How the sink handles `target` this pass: decided here when it needs no
/// write or only a create or replace, else the serial path and [`Why`].
/// Borrows only: no object is cloned, and an unchanged copy whose live
/// version was verified before costs a few lookups.
pub(in crate::sync) fn decide(v: &View<'_>, target: &Target, c: &Candidate, now: Instant) -> Step {
    if let Some(r) = v.retry {
        let input = Input {
            desired: Some(c.digest),
            live_rv: v.live.and_then(resource_version).map(str::to_owned),
        };
        if r.holds(&input, now) {
            return Step::Done(Outcome::Failed(r.error.clone()), Ends::Nothing);
        }
    }
    let failed = |why: CopyError| Step::Done(Outcome::Failed(why), Ends::Nothing);
    let Some(namespaced) = v.namespaced else {
        // Its watch starts with the next pass.
        return failed(CopyError::transient(format!(
            "kind {} is not watched",
            crate::sync::model::meta::describe_gvk(&target.gvk())
        )));
    };
    match (namespaced, &target.namespace) {
        (true, None) => {
            return failed(CopyError::invalid(
                "the kind is namespaced but the copy has no namespace",
            ))
        }
        (false, Some(_)) => {
            return failed(CopyError::invalid(
                "the kind is cluster-scoped but the copy has a namespace",
            ))
        }
        _ => {}
    }
    let namespace = match &target.namespace {
        Some(ns) if !v.namespace_exists => {
            if !c.create_namespace {
                return failed(CopyError::new(
                    FailureKind::NotFound,
                    format!("namespace {ns} not found (set createNamespace: true to create it)"),
                ));
            }
            Some(ns.clone())
        }
        _ => None,
    };
    let Some(live) = v.live else {
        if let Some(why) = v.hold {
            return Step::Done(
                Outcome::Held(format!("{why}: {HELD_CREATE}")),
                Ends::Nothing,
            );
        }
        return missing(v, target, c, namespace);
    };
    if let Some(why) = terminating(live) {
        // Tried again once it is gone.
        return Step::Done(Outcome::Failed(CopyError::transient(why)), Ends::Nothing);
    }
    let then = present(v, target, c, live);
    match namespace {
        Some(name) => Step::Serial(Why::Namespace {
            name,
            then: Box::new(then),
        }),
        None => then,
    }
}

/// [`decide`] for a copy that is not here: a create, concurrent unless a
/// baseline says we wrote it before (then the serial path finds out why it
/// is gone).
fn missing(v: &View<'_>, target: &Target, c: &Candidate, namespace: Option<String>) -> Step {
    let Some(base) = v.baseline else {
        return Step::Write(Write {
            namespace,
            replace: None,
        });
    };
    if c.update == UpdatePolicy::CreateOnly {
        return Step::Serial(Why::Recreate { namespace });
    }
    match v.rule {
        Some(rule) if base.desired == c.digest => match base.server.value() {
            Ok(server) => Step::Serial(Why::Deleted {
                namespace,
                policy: Policy::of(rule, target, &server),
            }),
            Err(e) => Step::Done(
                Outcome::Failed(CopyError::invalid(e.to_string())),
                Ends::Nothing,
            ),
        },
        _ => Step::Serial(Why::Gone { namespace }),
    }
}

/// [`decide`] for a live copy that is not being deleted, its namespace
/// taken as existing.
fn present(v: &View<'_>, target: &Target, c: &Candidate, live: &Value) -> Step {
    // Only a copy this agent wrote is overwritten: an original, or an
    // object that merely names an origin, is someone else's (`model::mark`).
    match v.marker.judge_object(live) {
        Ownership::Copy { .. } => {}
        Ownership::Original => {
            return Step::Done(
                Outcome::Conflict(Box::new(Conflict::local_object(target, c, live))),
                Ends::Nothing,
            )
        }
        Ownership::LookAlike { origin, why } => {
            return Step::Done(
                Outcome::Conflict(Box::new(Conflict::look_alike(target, c, live, origin, why))),
                Ends::Nothing,
            )
        }
    }
    if has_annotation(live, well_known::ANNOTATION_RESOURCE_SYNC_DISABLED)
        || c.update == UpdatePolicy::CreateOnly
    {
        // Pinned by an operator, or created once by policy: left alone.
        return Step::Done(Outcome::InSync, Ends::Nothing);
    }
    let Some(base) = v.baseline else {
        if let Some(why) = v.hold {
            // A first look compares with a dry run of the desired state, and
            // may write it: a held rule only looks at what it wrote.
            return Step::Done(Outcome::Held(format!("{why}: {HELD_LOOK}")), Ends::Nothing);
        }
        return Step::Serial(Why::FirstLook {
            policy: policy(v.rule, target, live),
        });
    };
    let live_rv = resource_version(live);
    if let (Some(why), true) = (v.hold, base.desired != c.digest) {
        // The new version waits; what we wrote is still watched for drift.
        return match drifted(v, target, c, base, live) {
            Ok(Some(policy)) => Step::Serial(Why::Drift { policy }),
            Ok(None) => Step::Done(
                Outcome::Held(format!("{why}: {HELD_UPDATE}")),
                Ends::Nothing,
            ),
            Err(e) => Step::Done(Outcome::Failed(CopyError::invalid(e)), Ends::Nothing),
        };
    }
    if base.desired != c.digest {
        // The desired state changed: write it.
        return Step::Write(Write {
            namespace: None,
            replace: Some(policy(v.rule, target, live).exclude),
        });
    }
    if let (Some(rv), Some((seen, with_status))) = (live_rv, &base.verified) {
        if rv == seen && *with_status == c.with_status {
            return Step::Done(Outcome::InSync, Ends::RetryAndDrift);
        }
    }
    match drifted(v, target, c, base, live) {
        Ok(None) => Step::Verified {
            resource_version: live_rv.map(str::to_owned),
            with_status: c.with_status,
        },
        Ok(Some(policy)) => Step::Serial(Why::Drift { policy }),
        Err(e) => Step::Done(Outcome::Failed(CopyError::invalid(e)), Ends::Nothing),
    }
}

/// Whether the live copy differs from what we last wrote (`base`): the drift
/// policy to handle it with, or None when it is the same (the verified memo
/// is not consulted: the callers do).
fn drifted(
    v: &View<'_>,
    target: &Target,
    c: &Candidate,
    base: &Baseline,
    live: &Value,
) -> Result<Option<Policy>, String> {
    if let (Some(rv), Some((seen, with_status))) = (resource_version(live), &base.verified) {
        if rv == seen && *with_status == c.with_status {
            return Ok(None);
        }
    }
    let policy = policy(v.rule, target, live);
    let server = base.server.value().map_err(|e| e.to_string())?;
    Ok((!policy.same(&server, live, c.with_status)).then_some(policy))
}

/// Whether namespace `ns` exists here (as the watch last saw it).
fn namespace_exists(world: &World, ns: &str) -> bool {
    world
        .kinds
        .get(&namespace_gvk())
        .is_some_and(|k| k.objects.contains_key(&(None, ns.to_owned())))
}

/// How the sink handles `target` this pass (see [`decide`]): its winner's
/// rule held by the sink's holds or by its rollout (`rollout`'s holds).
pub(in crate::sync) fn classify(
    world: &World,
    sink: &SinkState,
    rollout: &RolloutBook,
    marker: &CopyMark,
    target: &Target,
    c: &Candidate,
    now: Instant,
) -> Step {
    let live = live(world, target);
    let rule = world.rules.get(&c.rule);
    let hold = sink
        .holds
        .get(&c.rule)
        .map(String::as_str)
        .or_else(|| rollout.hold(&c.rule, &c.key));
    decide(
        &view(world, sink, marker, target, live.as_ref(), rule, hold),
        target,
        c,
        now,
    )
}

/// The live copy at `target`, as the watch last saw it.
pub(in crate::sync) fn live(world: &World, target: &Target) -> Option<Value> {
    world
        .kinds
        .get(&target.gvk())
        .and_then(|k| k.objects.get(&target.local_key()))
}

/// What the sink knows of `target` for [`decide`], its winner's rule
/// being `rule` and held for `hold` (the preview passes a candidate's).
pub(in crate::sync) fn view<'a>(
    world: &'a World,
    sink: &'a SinkState,
    marker: &'a CopyMark,
    target: &Target,
    live: Option<&'a Value>,
    rule: Option<&'a CompiledRule>,
    hold: Option<&'a str>,
) -> View<'a> {
    View {
        retry: sink.retries.get(target),
        namespaced: world.kinds.get(&target.gvk()).map(|k| k.namespaced),
        live,
        namespace_exists: target
            .namespace
            .as_deref()
            .is_none_or(|ns| namespace_exists(world, ns)),
        baseline: sink.baselines.get(target),
        rule,
        hold,
        marker,
    }
}

/// Remembers that the copy at `target`, at live version `rv`, equals its
/// baseline.
pub(in crate::sync) fn verified(
    sink: &mut SinkState,
    target: &Target,
    rv: Option<&str>,
    with_status: bool,
) {
    if let (Some(b), Some(rv)) = (sink.baselines.get_mut(target), rv) {
        b.verified = Some((rv.to_owned(), with_status));
    }
}

/// What a wave's writes read and change: the World (kinds, live copies),
/// the sink's state (baselines, backoffs), the drift stage's (a replace
/// ends an open drift) and the context for the API calls.
pub(in crate::sync) struct Wave<'a> {
    pub world: &'a World,
    pub sink: &'a mut SinkState,
    pub drift: &'a mut DriftState,
    pub ctx: &'a Context,
}

impl Wave<'_> {
    /// Runs the writes of one wave: namespaces first, then every write with
    /// at most [`WRITE_CONCURRENCY`] in flight; returns each write's
    /// outcome by its index in `writes`' order.
    pub(in crate::sync) async fn run_writes(
        &mut self,
        writes: Vec<(&Target, &Candidate, Write)>,
    ) -> Vec<(usize, Outcome)> {
        let mut outcomes = Vec::new();
        let mut created: BTreeSet<String> = BTreeSet::new();
        let mut ready = Vec::new();
        for (i, (target, c, w)) in writes.into_iter().enumerate() {
            if let Some(ns) = w.namespace.as_ref().filter(|ns| !created.contains(*ns)) {
                // One try per copy while it fails, as the serial path did.
                match apply::create_namespace(self.ctx, ns).await {
                    Ok(()) => {
                        created.insert(ns.clone());
                    }
                    Err(e) => {
                        outcomes.push((i, failed(self.sink, self.ctx, target, c, None, e)));
                        continue;
                    }
                }
            }
            ready.push((i, target, c, w));
        }
        // Results carry their place in `ready`.
        let (world, ctx, in_flight) = (self.world, self.ctx, &*self.sink.in_flight);
        let results = bounded(
            ready
                .iter()
                .enumerate()
                .map(|(k, (_, target, c, w))| write_job(world, ctx, in_flight, k, target, c, w)),
        )
        .await;
        for (k, result) in results {
            let Some((i, target, c, w)) = ready.get(k) else {
                continue;
            };
            let outcome = self.written(target, c, w.replace.is_some(), result).await;
            outcomes.push((*i, outcome));
        }
        outcomes
    }

    /// Folds the result of a create or replace at `target` into the state.
    pub(in crate::sync) async fn written(
        &mut self,
        target: &Target,
        c: &Candidate,
        replaced: bool,
        result: Result<Packed, WriteError>,
    ) -> Outcome {
        match result {
            Ok(server) => {
                if replaced {
                    // The desired state moved: an open drift ends with it.
                    announce::drift_resolved(self.drift, self.ctx, target).await;
                }
                wrote(self.sink, self.ctx, target, c, server)
            }
            Err(e) => {
                let live_rv = if replaced {
                    self.world
                        .kinds
                        .get(&target.gvk())
                        .and_then(|k| k.objects.get(&target.local_key()))
                        .and_then(|live| resource_version(&live).map(str::to_owned))
                } else {
                    None
                };
                failed(self.sink, self.ctx, target, c, live_rv, e)
            }
        }
    }
}

/// Records a write of the copy at `target`: its baseline is what the
/// server made of it, its failures end, its rule synced now.
pub(in crate::sync) fn wrote(
    sink: &mut SinkState,
    ctx: &Context,
    target: &Target,
    c: &Candidate,
    server: Packed,
) -> Outcome {
    tracing::info!(copy = %target, rule = %c.rule, origin = %c.key.origin, "wrote copy");
    // A new version reached this cluster (not a correction or a rewrite of
    // the version it had): that is the lag an operator watches.
    if sink
        .baselines
        .get(target)
        .is_none_or(|b| b.desired != c.digest)
    {
        let lag = (chrono::Utc::now() - c.published)
            .to_std()
            .unwrap_or_default();
        ctx.metrics.sync_lag(&c.rule, lag);
    }
    sink.baselines.insert(
        target.clone(),
        Baseline {
            desired: c.digest,
            server,
            verified: None,
        },
    );
    sink.retries.remove(target);
    sink.last_sync
        .insert(c.rule.clone(), crate::kube::conditions::now_seconds());
    Outcome::Wrote
}

/// A write of the copy at `target` failed: it backs off (see
/// `failures`), and the pass reports the error.
pub(in crate::sync) fn failed(
    sink: &mut SinkState,
    ctx: &Context,
    target: &Target,
    c: &Candidate,
    live_rv: Option<String>,
    e: WriteError,
) -> Outcome {
    let input = Input {
        desired: Some(c.digest),
        live_rv,
    };
    Outcome::Failed(failures::copy_failed(
        sink, ctx, target, &c.rule, input, "write", &e,
    ))
}

/// The write at `target`, the `k`th of its wave, as `run_writes` runs it.
fn write_job<'a>(
    world: &'a World,
    ctx: &'a Context,
    in_flight: &'a InFlight,
    k: usize,
    target: &'a Target,
    c: &'a Candidate,
    w: &'a Write,
) -> Job<'a> {
    Box::pin(async move {
        let result = write_one(world, ctx, target, c, w).await;
        if result.is_ok() {
            // Shown by `fleetbus clusters progress` while the wave runs.
            in_flight.settled();
        }
        (k, result)
    })
}

/// One create or replace (no state changes: they are folded in after
/// the wave).
pub(in crate::sync) async fn write_one(
    world: &World,
    ctx: &Context,
    target: &Target,
    c: &Candidate,
    w: &Write,
) -> Result<Packed, WriteError> {
    let kind = world.kinds.get(&target.gvk());
    let live = kind.and_then(|k| k.objects.get(&target.local_key()));
    let Some(kind) = kind else {
        // Classified as a write only while the kind is known, and the
        // kinds do not change during a pass.
        return Err(WriteError::Gone(target.to_string()));
    };
    let api = apply::api(&ctx.copy_writer, &kind.ar, target.namespace.as_deref());
    let server = match (&w.replace, live) {
        (Some(exclude), Some(live)) => {
            apply::replace(ctx, &api, &c.desired, &live, c.with_status, exclude).await
        }
        _ => apply::create(ctx, &api, &c.desired, c.with_status).await,
    };
    server.map(Baseline::pack_server)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::digest::Digest;
    use crate::sync::model::meta::annotations_mut;
    use crate::sync::rules::compile::{self as rules, RuleSet};
    use fleetbus_schemas::subject::ObjectKey;
    use serde_json::json;

    /// However many jobs a wave has, at most WRITE_CONCURRENCY of their
    /// futures exist at once (made all up front, a 10,000-copy first sync
    /// held 15 MB of them), and every result comes back.
    #[tokio::test]
    async fn bounded_makes_each_future_only_as_a_slot_frees() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let (alive, most) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let n = WRITE_CONCURRENCY * 4 + 3;
        let jobs = (0..n).map(|i| -> BoxFuture<'_, usize> {
            let now = alive.fetch_add(1, SeqCst) + 1;
            most.fetch_max(now, SeqCst);
            let alive = &alive;
            Box::pin(async move {
                tokio::task::yield_now().await;
                alive.fetch_sub(1, SeqCst);
                i
            })
        });
        let mut done = bounded(jobs).await;
        done.sort_unstable();
        assert_eq!(done, (0..n).collect::<Vec<_>>());
        assert_eq!(most.load(SeqCst), WRITE_CONCURRENCY);
    }

    fn rules() -> RuleSet {
        let r = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
                       "metadata": {"name": "cm", "generation": 1},
                       "spec": {"groupVersionKind": {"version": "v1", "kind": "ConfigMap"}}});
        rules::compile(&[&r])
    }

    fn desired(value: &str, hash: &str) -> Value {
        crate::mark::tests::marked(json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"namespace": "apps", "name": "c",
                            "annotations": {well_known::ANNOTATION_ORIGIN_CLUSTER: "c1",
                                            well_known::ANNOTATION_SOURCE_HASH: hash}},
               "data": {"k": value}}))
    }

    /// The live copy: the desired one as the server keeps it, at `rv`.
    fn live(value: &str, rv: &str) -> Value {
        let mut v = desired(value, "h");
        if let Some(m) = v.pointer_mut("/metadata").and_then(Value::as_object_mut) {
            m.insert("resourceVersion".to_owned(), json!(rv));
            m.insert("uid".to_owned(), json!("u1"));
        }
        v
    }

    fn candidate(value: &str, hash: &str) -> Candidate {
        let d = desired(value, hash);
        Candidate {
            rule: "cm".to_owned(),
            key: ObjectKey::from_api_version("c1", "v1", "ConfigMap", Some("apps"), "c").into(),
            created: String::new(),
            digest: Digest::of_desired(&d),
            desired: d.into(),
            with_status: false,
            update: UpdatePolicy::Update,
            create_namespace: false,
            published: chrono::DateTime::default(),
        }
    }

    fn baseline(value: &str, server_rv: &str, verified: Option<&str>) -> Baseline {
        Baseline {
            desired: Digest::of_desired(&desired(value, "h")),
            server: live(value, server_rv).into(),
            verified: verified.map(|rv| (rv.to_owned(), false)),
        }
    }

    fn target() -> Target {
        Target::from(crate::sync::model::Place {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            namespace: Some("apps".into()),
            name: "c".into(),
        })
    }

    fn view<'a>(rules: &'a RuleSet, live: Option<&'a Value>, b: Option<&'a Baseline>) -> View<'a> {
        View {
            retry: None,
            namespaced: Some(true),
            live,
            namespace_exists: true,
            baseline: b,
            rule: rules.get("cm"),
            hold: rules
                .get("cm")
                .filter(|r| r.spec.suspend)
                .map(|_| "the rule is suspended"),
            marker: crate::mark::tests::marker_ref(),
        }
    }

    fn kind_of(step: &Step) -> String {
        match step {
            Step::Done(Outcome::InSync, ends) => format!("in sync (ends: {ends:?})"),
            Step::Done(Outcome::Failed(e), _) => {
                format!("done: Failed({:?}, {:?})", e.kind, e.message)
            }
            Step::Done(o, _) => format!("done: {o:?}"),
            Step::Verified {
                resource_version, ..
            } => format!("verified at {resource_version:?}"),
            Step::Write(w) => format!(
                "{} (namespace {:?})",
                if w.replace.is_some() {
                    "replace"
                } else {
                    "create"
                },
                w.namespace
            ),
            Step::Serial(why) => format!("serial: {}", why_of(why)),
        }
    }

    fn why_of(why: &Why) -> String {
        match why {
            Why::Recreate { namespace } => format!("recreate (namespace {namespace:?})"),
            Why::Deleted { namespace, policy } => {
                format!("deleted (namespace {namespace:?}, {:?})", policy.mode)
            }
            Why::Gone { namespace } => format!("gone (namespace {namespace:?})"),
            Why::Namespace { name, then } => format!("namespace {name}, then {}", kind_of(then)),
            Why::FirstLook { policy } => format!("first look ({:?})", policy.mode),
            Why::Drift { policy } => format!("drift ({:?})", policy.mode),
        }
    }

    fn decided(v: &View<'_>, c: &Candidate) -> String {
        kind_of(&decide(v, &target(), c, Instant::now()))
    }

    #[test]
    fn a_changed_desired_copy_is_written_even_when_the_live_version_was_verified() {
        let rs = rules();
        let l = live("a", "7");
        let b = baseline("a", "7", Some("7"));
        assert_eq!(
            decided(&view(&rs, Some(&l), Some(&b)), &candidate("a", "h1")),
            "in sync (ends: RetryAndDrift)"
        );
        // Only the source hash moved: still nothing to write.
        assert_eq!(
            decided(&view(&rs, Some(&l), Some(&b)), &candidate("a", "h2")),
            "in sync (ends: RetryAndDrift)"
        );
        // The desired content moved, the live copy did not: replace.
        assert_eq!(
            decided(&view(&rs, Some(&l), Some(&b)), &candidate("b", "h2")),
            "replace (namespace None)"
        );
    }

    #[test]
    fn a_suspended_rule_writes_nothing_and_reports_drift() {
        let r = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
                       "metadata": {"name": "cm", "generation": 1},
                       "spec": {"groupVersionKind": {"version": "v1", "kind": "ConfigMap"},
                                "suspend": true}});
        let rs = rules::compile(&[&r]);
        let l = live("a", "7");
        let b = baseline("a", "7", Some("7"));
        let held = |got: String, why: &str| {
            assert!(got.starts_with("done: Held") && got.contains(why), "{got}");
        };
        // Missing, with or without a baseline: not created.
        held(
            decided(&view(&rs, None, None), &candidate("a", "h")),
            "not created",
        );
        held(
            decided(&view(&rs, None, Some(&b)), &candidate("a", "h")),
            "not created",
        );
        // A new version at the source: not written.
        held(
            decided(&view(&rs, Some(&l), Some(&b)), &candidate("b", "h2")),
            "new version",
        );
        // No baseline (a restart): no first look (it could write).
        held(
            decided(&view(&rs, Some(&l), None), &candidate("a", "h")),
            "compared",
        );
        // Unchanged: in sync, as before.
        assert_eq!(
            decided(&view(&rs, Some(&l), Some(&b)), &candidate("a", "h")),
            "in sync (ends: RetryAndDrift)"
        );
        // Edited by someone: drift, reported and not corrected.
        assert_eq!(
            decided(
                &view(&rs, Some(&live("edited", "8")), Some(&b)),
                &candidate("a", "h")
            ),
            "serial: drift (Report)"
        );
        // A local object in the way is still a conflict, not hidden by the hold.
        let mut original = live("x", "3");
        original["metadata"]["annotations"] = json!({});
        let got = decided(&view(&rs, Some(&original), Some(&b)), &candidate("a", "h"));
        assert!(got.starts_with("done: Conflict"), "{got}");
    }

    #[test]
    fn an_object_that_only_looks_like_a_copy_is_a_conflict_never_overwritten() {
        let rs = rules();
        let b = baseline("x", "3", None);
        // The origin annotation and even the managed label, without the
        // mark: what a user re-applying a copy's YAML, or an attacker, writes.
        for strip in [
            &[well_known::ANNOTATION_COPY_MARK][..],
            &[well_known::ANNOTATION_COPY_MARK, "labels"][..],
        ] {
            let mut look_alike = live("x", "3");
            for k in strip {
                if *k == "labels" {
                    look_alike["metadata"]["labels"] = json!({});
                } else {
                    look_alike["metadata"]["annotations"]
                        .as_object_mut()
                        .unwrap()
                        .remove(*k);
                }
            }
            for base in [None, Some(&b)] {
                let got = decided(&view(&rs, Some(&look_alike), base), &candidate("a", "h2"));
                assert!(got.starts_with("done: Conflict"), "{strip:?}: {got}");
            }
        }
        // The same object with its mark is a copy, and is written.
        let got = decided(
            &view(&rs, Some(&live("x", "3")), None),
            &candidate("a", "h2"),
        );
        assert!(!got.starts_with("done: Conflict"), "{got}");
    }

    #[test]
    fn a_copy_being_deleted_is_never_written_nor_in_sync() {
        let rs = rules();
        let mut doomed = live("a", "7");
        doomed["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        doomed["metadata"]["finalizers"] = json!(["example.com/hold"]);
        let b = baseline("a", "7", Some("7"));
        // Whatever the desired state (equal, changed) or the baseline (none
        // after a collect or a restart): not written, not counted in sync.
        for (base, c) in [
            (Some(&b), candidate("a", "h")),
            (Some(&b), candidate("b", "h2")),
            (None, candidate("b", "h2")),
        ] {
            let got = decided(&view(&rs, Some(&doomed), base), &c);
            assert!(
                got.starts_with("done: Failed") && got.contains("example.com/hold"),
                "{got}"
            );
        }
        // Gone: created from the new source.
        assert_eq!(
            decided(&view(&rs, None, None), &candidate("b", "h2")),
            "create (namespace None)"
        );
    }

    #[test]
    fn a_live_change_invalidates_the_verified_memo() {
        let rs = rules();
        let b = baseline("a", "7", Some("7"));
        let c = candidate("a", "h");
        // Someone edited the copy: a new resourceVersion and a new value. The
        // memo no longer applies; the comparison finds drift (serial path).
        let edited = live("edited", "8");
        assert_eq!(
            decided(&view(&rs, Some(&edited), Some(&b)), &c),
            "serial: drift (Correct)"
        );
        // A new version equal to the baseline (a no-op update): compared,
        // found equal, and remembered at the new version.
        let touched = live("a", "9");
        assert_eq!(
            decided(&view(&rs, Some(&touched), Some(&b)), &c),
            "verified at Some(\"9\")"
        );
        // Without a memo the same comparison is made.
        let fresh = baseline("a", "7", None);
        assert_eq!(
            decided(&view(&rs, Some(&touched), Some(&fresh)), &c),
            "verified at Some(\"9\")"
        );
        // A memo of another status mode does not count.
        let mut with_status = c.clone();
        with_status.with_status = true;
        let same = live("a", "7");
        assert_eq!(
            decided(&view(&rs, Some(&same), Some(&b)), &with_status),
            "verified at Some(\"7\")"
        );
    }

    #[test]
    fn missing_copies_are_created_concurrently_unless_a_baseline_makes_it_drift() {
        let rs = rules();
        let c = candidate("a", "h");
        assert_eq!(
            decided(&view(&rs, None, None), &c),
            "create (namespace None)"
        );
        let b = baseline("a", "7", Some("7"));
        assert_eq!(
            decided(&view(&rs, None, Some(&b)), &c),
            "serial: deleted (namespace None, Correct)"
        );
        // A missing namespace: created first when the rule says so.
        let mut no_ns = view(&rs, None, None);
        no_ns.namespace_exists = false;
        assert_eq!(
            decided(&no_ns, &c),
            "done: Failed(NotFound, \"namespace apps not found (set createNamespace: true to create it)\")"
        );
        let mut creates = c.clone();
        creates.create_namespace = true;
        assert_eq!(
            decided(&no_ns, &creates),
            "create (namespace Some(\"apps\"))"
        );
    }

    #[test]
    fn waiting_unwatched_and_first_looks_are_told_apart() {
        let rs = rules();
        let c = candidate("a", "h");
        let l = live("a", "7");
        let now = Instant::now();
        let input = Input {
            desired: Some(c.digest),
            live_rv: Some("7".to_owned()),
        };
        let retry = Backoff {
            attempts: 1,
            at: now + std::time::Duration::from_secs(5),
            error: CopyError::transient("boom"),
            input,
        };
        let mut waiting = view(&rs, Some(&l), None);
        waiting.retry = Some(&retry);
        assert_eq!(
            kind_of(&decide(&waiting, &target(), &c, now)),
            "done: Failed(Transient { retry_after: None }, \"boom\")"
        );
        // What failed changed (someone edited the copy, or the source): tried
        // again at once, down the usual path.
        let edited = live("a", "8");
        let mut changed = view(&rs, Some(&edited), None);
        changed.retry = Some(&retry);
        assert_eq!(
            kind_of(&decide(&changed, &target(), &c, now)),
            "serial: first look (Correct)"
        );
        let mut unwatched = view(&rs, Some(&l), None);
        unwatched.namespaced = None;
        assert_eq!(
            decided(&unwatched, &c),
            "done: Failed(Transient { retry_after: None }, \"kind v1 ConfigMap is not watched\")"
        );
        // No baseline: a dry run first.
        assert_eq!(
            decided(&view(&rs, Some(&l), None), &c),
            "serial: first look (Correct)"
        );
        // An original object there: a conflict, decided without writing.
        let mut original = l.clone();
        if let Some(m) = annotations_mut(&mut original) {
            m.clear();
        }
        assert!(decided(&view(&rs, Some(&original), None), &c).starts_with("done: Conflict"));
    }

    #[test]
    fn a_missing_copy_we_wrote_says_why_it_is_serial() {
        let rs = rules();
        let b = baseline("a", "7", Some("7"));
        // Create-only: created again, never drift.
        let mut once = candidate("a", "h");
        once.update = UpdatePolicy::CreateOnly;
        assert_eq!(
            decided(&view(&rs, None, Some(&b)), &once),
            "serial: recreate (namespace None)"
        );
        // The desired state moved since: a plain create.
        assert_eq!(
            decided(&view(&rs, None, Some(&b)), &candidate("b", "h")),
            "serial: gone (namespace None)"
        );
        // Unchanged: someone deleted it; the policy is read from the copy as
        // last written, and a namespace to create comes along.
        let mut paused = baseline("a", "7", None);
        let mut server = paused.server.value().unwrap();
        server["metadata"]["annotations"][well_known::ANNOTATION_CORRECTION_PAUSED] = json!("true");
        paused.server = server.into();
        let mut no_ns = view(&rs, None, Some(&paused));
        no_ns.namespace_exists = false;
        let mut creates = candidate("a", "h");
        creates.create_namespace = true;
        assert_eq!(
            decided(&no_ns, &creates),
            "serial: deleted (namespace Some(\"apps\"), Report)"
        );
    }

    #[test]
    fn a_live_copy_in_a_namespace_to_create_carries_what_follows() {
        let rs = rules();
        let l = live("a", "7");
        let mut c = candidate("a", "h");
        c.create_namespace = true;
        let b = baseline("a", "7", Some("7"));
        let mut v = view(&rs, Some(&l), Some(&b));
        v.namespace_exists = false;
        assert_eq!(
            decided(&v, &c),
            "serial: namespace apps, then in sync (ends: RetryAndDrift)"
        );
        let edited = live("edited", "8");
        v.live = Some(&edited);
        assert_eq!(
            decided(&v, &c),
            "serial: namespace apps, then serial: drift (Correct)"
        );
        v.baseline = None;
        assert_eq!(
            decided(&v, &c),
            "serial: namespace apps, then serial: first look (Correct)"
        );
    }

    #[test]
    fn a_scope_the_kind_does_not_have_fails_without_a_write() {
        let rs = rules();
        let c = candidate("a", "h");
        let mut cluster_scoped = view(&rs, None, None);
        cluster_scoped.namespaced = Some(false);
        assert_eq!(
            decided(&cluster_scoped, &c),
            "done: Failed(Invalid, \"the kind is cluster-scoped but the copy has a namespace\")"
        );
        let no_namespace = Target::from(crate::sync::model::Place {
            namespace: None,
            ..(*target()).clone()
        });
        assert_eq!(
            kind_of(&decide(
                &view(&rs, None, None),
                &no_namespace,
                &c,
                Instant::now()
            )),
            "done: Failed(Invalid, \"the kind is namespaced but the copy has no namespace\")"
        );
    }
}
