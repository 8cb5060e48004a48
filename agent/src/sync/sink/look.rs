//! First looks: a live copy this agent has no baseline for (the first pass
//! after a start) is compared with what the API server makes of its desired
//! state in a dry run, so that server defaults are not taken for a
//! difference and a copy nobody changed is not written.
//!
//! After a restart every copy on the cluster takes this path. The dry runs
//! write nothing, so a wave runs them together ([`WRITE_CONCURRENCY`] at
//! once), like its creates and replaces: one at a time on the serial path
//! they held back every create of the wave for as long as they took (a sink
//! SIGKILLed in its catch-up spent 80 s on 500 of them before creating the
//! 5,800 copies it lacked; RELIABILITY.md, `catchup-kill`). What each dry run
//! found is then folded in one at a time: equal, drift (the serial path), or
//! a plain replace the wave runs with its other writes.

use fleetbus_schemas::well_known;
use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::apply::{self, WriteError};
use super::compare;
use super::drifted::Drifted;
use super::state::SinkState;
use super::wave::{failed, verified, Wave};
use crate::context::Context;
use crate::sync::drift::announce;
use crate::sync::drift::policy::{keep_excluded, Policy};
use crate::sync::drift::state::DriftState;
use crate::sync::model::meta::{annotation, annotations_mut};
use crate::sync::model::CopyError;
use crate::sync::model::{Baseline, Candidate, Outcome, Packed, Target};
use crate::sync::rollout::state::RolloutBook;
use crate::sync::world::World;

/// What a first look decided.
#[derive(Debug)]
pub(in crate::sync) enum Looked {
    /// Settled: equal, drift handled, or failed.
    Done(Outcome),
    /// The copy was made from another source version and differs from what
    /// the server makes of the new one: a plain replace keeping these paths
    /// (drift exclusions), as for any desired state that moved.
    Replace(Vec<String>),
}

/// A first look about to be taken: the copy, the API of its kind, the live
/// copy as the watch last saw it, and the body of the dry run.
struct Request<'a> {
    target: &'a Target,
    c: &'a Candidate,
    policy: Policy,
    api: Api<DynamicObject>,
    live: Value,
    body: Value,
}

/// The dry run of `r`, the `i`th of its pass's first looks.
fn dry_run<'a>(i: usize, r: &'a Request<'_>) -> BoxFuture<'a, (usize, Result<Value, WriteError>)> {
    Box::pin(async move { (i, apply::dry_run_replace(&r.api, &r.body).await) })
}

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

/// The body of the dry run: the desired copy with what the live one keeps
/// (resourceVersion, finalizers, excluded paths) and the live copy's own
/// source hash, so that a source change that leaves the copy alone (the
/// origin's status, when status is not synced) is no reason to write after
/// a restart, as it was none while running (`Digest`).
pub(in crate::sync) fn dry_run_body(
    c: &Candidate,
    live: &Value,
    policy: &Policy,
) -> Result<Value, WriteError> {
    let mut body = c.desired.value()?;
    compare::carry_over(&mut body, live);
    keep_excluded(&mut body, live, &policy.exclude);
    keep_source_hash(&mut body, live);
    Ok(body)
}

/// What first looks read and change: the World, the sink's state (a dry
/// run makes a baseline), the drift stage's (what a look finds drifted
/// goes down the serial path's drift handling), the rollouts' holds and
/// the context.
pub(in crate::sync) struct Look<'a> {
    pub world: &'a World,
    pub sink: &'a mut SinkState,
    pub drift: &'a mut DriftState,
    pub rollout: &'a RolloutBook,
    pub ctx: &'a Context,
}

impl Look<'_> {
    /// The same borrows, for a wave's folding of a write.
    fn wave(&mut self) -> Wave<'_> {
        Wave {
            world: self.world,
            sink: self.sink,
            drift: self.drift,
            ctx: self.ctx,
        }
    }

    /// The same borrows, for drift found by a look.
    fn drifted(&mut self) -> Drifted<'_> {
        Drifted {
            world: self.world,
            sink: self.sink,
            drift: self.drift,
            rollout: self.rollout,
            ctx: self.ctx,
        }
    }

    /// The API of `target`'s kind and its live copy as the watch last saw
    /// it; the outcome instead when the kind is not watched or the copy is
    /// not there (decided from the live copy, which does not change within
    /// a pass).
    fn look_at(&self, target: &Target) -> Result<(Api<DynamicObject>, Value), Outcome> {
        let gvk = target.gvk();
        let Some(kind) = self.world.kinds.get(&gvk) else {
            return Err(Outcome::Failed(CopyError::transient(format!(
                "kind {} is not watched",
                crate::sync::model::meta::describe_gvk(&gvk)
            ))));
        };
        let Some(live) = kind.objects.get(&target.local_key()) else {
            return Err(Outcome::InSync);
        };
        let api = apply::api(&self.ctx.copy_writer, &kind.ar, target.namespace.as_deref());
        Ok((api, live.clone()))
    }

    /// One first look, taken on its own (the serial path: a copy whose
    /// namespace is created first).
    pub(in crate::sync) async fn first_look(
        &mut self,
        target: &Target,
        c: &Candidate,
        policy: Policy,
    ) -> Outcome {
        let (api, live) = match self.look_at(target) {
            Ok(place) => place,
            Err(outcome) => return outcome,
        };
        let result = match dry_run_body(c, &live, &policy) {
            Ok(body) => apply::dry_run_replace(&api, &body).await,
            Err(e) => Err(e),
        };
        match self.looked(target, c, &policy, &api, &live, result).await {
            Looked::Done(outcome) => outcome,
            Looked::Replace(exclude) => {
                let written =
                    apply::replace(self.ctx, &api, &c.desired, &live, c.with_status, &exclude)
                        .await;
                self.wave()
                    .written(target, c, true, written.map(Baseline::pack_server))
                    .await
            }
        }
    }

    /// First looks at many copies: their dry runs run together, then what
    /// each found is folded in (in the order they finished).
    pub(in crate::sync) async fn first_looks<'a>(
        &mut self,
        looks: Vec<(&'a Target, &'a Candidate, Policy)>,
    ) -> Vec<(&'a Target, &'a Candidate, Looked)> {
        let mut out = Vec::with_capacity(looks.len());
        let mut requests = Vec::with_capacity(looks.len());
        for (target, c, policy) in looks {
            match self.look_at(target) {
                Ok((api, live)) => {
                    let body = match dry_run_body(c, &live, &policy) {
                        Ok(body) => body,
                        Err(e) => {
                            let outcome = failed(
                                self.sink,
                                self.ctx,
                                target,
                                c,
                                compare::resource_version(&live).map(str::to_owned),
                                e,
                            );
                            out.push((target, c, Looked::Done(outcome)));
                            continue;
                        }
                    };
                    requests.push(Request {
                        target,
                        c,
                        policy,
                        api,
                        live,
                        body,
                    });
                }
                Err(outcome) => out.push((target, c, Looked::Done(outcome))),
            }
        }
        // Each dry run's future made as a slot frees (`wave::bounded`).
        let results =
            super::wave::bounded(requests.iter().enumerate().map(|(i, r)| dry_run(i, r))).await;
        for (i, result) in results {
            let Some(r) = requests.get(i) else { continue };
            let looked = self
                .looked(r.target, r.c, &r.policy, &r.api, &r.live, result)
                .await;
            out.push((r.target, r.c, looked));
        }
        out
    }

    /// Folds in what the dry run of a first look at `target` returned: the
    /// baseline it makes, and whether the live copy is equal to it, drifted
    /// (it was built from this very source version, as its source hash says,
    /// so the difference was made here while we were away) or to be
    /// replaced (its source changed).
    async fn looked(
        &mut self,
        target: &Target,
        c: &Candidate,
        policy: &Policy,
        api: &Api<DynamicObject>,
        live: &Value,
        result: Result<Value, WriteError>,
    ) -> Looked {
        let server = match result {
            Ok(mut server) => {
                crate::sync::model::meta::compact_managed_fields(&mut server);
                server
            }
            Err(e) => {
                return Looked::Done(failed(
                    self.sink,
                    self.ctx,
                    target,
                    c,
                    compare::resource_version(live).map(str::to_owned),
                    e,
                ))
            }
        };
        self.sink.baselines.insert(
            target.clone(),
            Baseline {
                desired: c.digest,
                server: Packed::new(&server),
                verified: None,
            },
        );
        if policy.same(&server, live, c.with_status) {
            verified(
                self.sink,
                target,
                compare::resource_version(live),
                c.with_status,
            );
            self.sink.retries.remove(target);
            announce::drift_resolved(self.drift, self.ctx, target).await;
            return Looked::Done(Outcome::InSync);
        }
        let desired = match c.desired.value() {
            Ok(d) => d,
            Err(e) => {
                let rv = compare::resource_version(live).map(str::to_owned);
                return Looked::Done(failed(self.sink, self.ctx, target, c, rv, e.into()));
            }
        };
        let same_source = annotation(live, well_known::ANNOTATION_SOURCE_HASH)
            == annotation(&desired, well_known::ANNOTATION_SOURCE_HASH);
        if same_source {
            let outcome = self
                .drifted()
                .modified(target, c, api, live.clone(), server, policy.clone())
                .await;
            return Looked::Done(outcome);
        }
        Looked::Replace(policy.exclude.clone())
    }
}
