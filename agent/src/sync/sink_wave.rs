//! The sink's writes of one install rank, run as a wave: the common cases
//! (a copy that is equal, a missing copy to create, a copy whose desired
//! state changed) are decided from the state without writing, and their
//! writes run concurrently; everything else (drift, dry runs after a
//! restart, create-only re-creations, refused writes) takes the serial path
//! of `apply_target`, as before.
//!
//! Ranks run as successive waves (`bundle::install_rank`): a Bundle's
//! Namespace and CRD are written before what uses them. Namespaces a wave's
//! copies need (`createNamespace`) are created before its writes start.
//! Targets are distinct, so there is one write per target per pass.

use std::collections::BTreeSet;

use fleetbus_schemas::crd::UpdatePolicy;
use fleetbus_schemas::well_known;
use futures::future::BoxFuture;
use futures::StreamExt;
use serde_json::Value;
use tokio::time::Instant;

use super::apply::{self, WriteError};
use super::conflicts::Conflict;
use super::drift::{self, Policy};
use super::engine::{namespace_gvk, Engine, Target};
use super::sink::{Candidate, Outcome};
use super::source::is_original;

/// Writes in flight at once: enough to hide the API server's latency, few
/// enough not to swamp it (or the agent's client pool).
pub const WRITE_CONCURRENCY: usize = 24;

/// How one target is handled, decided without writing.
#[derive(Debug)]
pub(super) enum Step {
    /// Decided: the outcome, and whether the copy is known equal now (its
    /// retry state and an open drift end).
    Done(Outcome, bool),
    /// Equal after comparing with the baseline: also remember the live
    /// resourceVersion (and status mode), so the next pass does not compare.
    Verified(Option<String>, bool),
    /// A plain write that may run alongside others.
    Write(Write),
    /// Everything else: `apply_target`, one at a time.
    Serial,
}

/// A create or replace decided by [`Engine::classify`].
#[derive(Debug)]
pub(super) struct Write {
    /// A namespace to create first (`createNamespace`).
    pub namespace: Option<String>,
    /// Replace the live copy keeping these paths (drift exclusions); None: create.
    pub replace: Option<Vec<String>>,
}

fn resource_version(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

impl Engine {
    /// Whether namespace `ns` exists here (as the watch last saw it).
    fn namespace_exists(&self, ns: &str) -> bool {
        self.kinds
            .get(&namespace_gvk())
            .is_some_and(|k| k.objects.contains_key(&(None, ns.to_owned())))
    }

    /// What `apply_target` would do at `target`, when it is a common case
    /// that needs neither a write nor anything but a create or replace.
    /// Borrows only: no object is cloned, and an unchanged copy whose live
    /// version was verified before costs a few map lookups.
    pub(super) fn classify(&self, target: &Target, c: &Candidate, now: Instant) -> Step {
        if let Some(r) = self.retries.get(target) {
            if r.at > now {
                return Step::Done(Outcome::Failed(r.error.clone()), false);
            }
        }
        let Some(kind) = self.kinds.get(&target.gvk()) else {
            return Step::Serial;
        };
        if kind.namespaced != target.namespace.is_some() || self.refused.contains_key(target) {
            return Step::Serial;
        }
        let namespace = match &target.namespace {
            Some(ns) if !self.namespace_exists(ns) => {
                if !c.create_namespace {
                    return Step::Serial;
                }
                Some(ns.clone())
            }
            _ => None,
        };
        let Some(live) = kind.objects.get(&target.local_key()) else {
            // With a baseline, a missing copy may be drift (Deleted) or a
            // create whose watch event is still on its way: serial.
            if self.baselines.contains_key(target) {
                return Step::Serial;
            }
            return Step::Write(Write {
                namespace,
                replace: None,
            });
        };
        if namespace.is_some() {
            return Step::Serial;
        }
        if is_original(live) {
            return Step::Done(
                Outcome::Conflict(Box::new(Conflict::local_object(target, c, live))),
                false,
            );
        }
        if live
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(well_known::ANNOTATION_RESOURCE_SYNC_DISABLED))
            .is_some()
            || c.update == UpdatePolicy::CreateOnly
        {
            return Step::Done(Outcome::InSync, false);
        }
        let (Some(rule), Some(base)) = (self.rules.get(&c.rule), self.baselines.get(target)) else {
            // No baseline (first look since start): a dry run, serial.
            return Step::Serial;
        };
        let live_rv = resource_version(live);
        if base.desired != c.digest {
            // The desired state changed: write it.
            let policy = Policy::of(rule, target, live);
            return Step::Write(Write {
                namespace: None,
                replace: Some(policy.exclude),
            });
        }
        if let (Some(rv), Some((seen, with_status))) = (live_rv, &base.verified) {
            if rv == seen && *with_status == c.with_status {
                return Step::Done(Outcome::InSync, true);
            }
        }
        let policy = Policy::of(rule, target, live);
        if drift::comparable(&base.server, c.with_status, &policy.exclude)
            == drift::comparable(live, c.with_status, &policy.exclude)
        {
            return Step::Verified(live_rv.map(str::to_owned), c.with_status);
        }
        // Drift: serial.
        Step::Serial
    }

    /// Remembers that the copy at `target`, at live version `rv`, equals its
    /// baseline.
    pub(super) fn verified(&mut self, target: &Target, rv: Option<&str>, with_status: bool) {
        if let (Some(b), Some(rv)) = (self.baselines.get_mut(target), rv) {
            b.verified = Some((rv.to_owned(), with_status));
        }
    }

    /// Runs the writes of one wave: namespaces first, then every write with
    /// at most [`WRITE_CONCURRENCY`] in flight; returns each write's
    /// outcome by its index in `writes`' order.
    pub(super) async fn run_writes(
        &mut self,
        writes: Vec<(&Target, &Candidate, Write)>,
    ) -> Vec<(usize, Outcome)> {
        let mut outcomes = Vec::new();
        let mut created: BTreeSet<String> = BTreeSet::new();
        let mut ready = Vec::new();
        for (i, (target, c, w)) in writes.into_iter().enumerate() {
            if let Some(ns) = w.namespace.as_ref().filter(|ns| !created.contains(*ns)) {
                // One try per copy while it fails, as the serial path did.
                match apply::create_namespace(&self.ctx, ns).await {
                    Ok(()) => {
                        created.insert(ns.clone());
                    }
                    Err(e) => {
                        outcomes.push((i, self.failed(target, c, None, e)));
                        continue;
                    }
                }
            }
            ready.push((i, target, c, w));
        }
        // Results carry their place in `ready`.
        let results: Vec<(usize, Result<Value, WriteError>)> = {
            let this = &*self;
            // Boxed and collected first: a lazy stream of borrowing async
            // blocks trips the compiler's `Send` inference for the spawned
            // sync task.
            let jobs: Vec<BoxFuture<'_, (usize, Result<Value, WriteError>)>> = ready
                .iter()
                .enumerate()
                .map(|(k, (_, target, c, w))| {
                    let job: BoxFuture<'_, _> =
                        Box::pin(async move { (k, this.write_one(target, c, w).await) });
                    job
                })
                .collect();
            futures::stream::iter(jobs)
                .buffer_unordered(WRITE_CONCURRENCY)
            .collect()
            .await
        };
        for (k, result) in results {
            let Some((i, target, c, w)) = ready.get(k) else {
                continue;
            };
            let (i, replaced) = (*i, w.replace.is_some());
            let outcome = match result {
                Ok(server) => {
                    if replaced {
                        // The desired state moved: an open drift ends with it.
                        self.drift_resolved(target).await;
                    }
                    self.wrote(target, c, server)
                }
                Err(e) => {
                    let live_rv = if replaced {
                        self.kinds
                            .get(&target.gvk())
                            .and_then(|k| k.objects.get(&target.local_key()))
                            .and_then(resource_version)
                            .map(str::to_owned)
                    } else {
                        None
                    };
                    self.failed(target, c, live_rv, e)
                }
            };
            outcomes.push((i, outcome));
        }
        outcomes
    }

    /// One create or replace (no state changes: they are folded in after
    /// the wave).
    async fn write_one(
        &self,
        target: &Target,
        c: &Candidate,
        w: &Write,
    ) -> Result<Value, WriteError> {
        let kind = self.kinds.get(&target.gvk());
        let live = kind.and_then(|k| k.objects.get(&target.local_key()));
        let Some(kind) = kind else {
            // Classified as a write only while the kind is known, and the
            // kinds do not change during a pass.
            return Err(WriteError::Gone(target.to_string()));
        };
        let api = apply::api(&self.ctx.client, &kind.ar, target.namespace.as_deref());
        match (&w.replace, live) {
            (Some(exclude), Some(live)) => {
                apply::replace(&self.ctx, &api, &c.desired, live, c.with_status, exclude).await
            }
            _ => apply::create(&self.ctx, &api, &c.desired, c.with_status).await,
        }
    }
}
