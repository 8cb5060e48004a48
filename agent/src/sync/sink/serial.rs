//! The sink's serial path: the targets `wave::decide` could not settle
//! without a read, a dry run or an Event, each handled one at a time down
//! the path its [`Why`] names. Nothing here decides again what `decide`
//! already did.

use fleetbus_schemas::crd::DriftMode;
use fleetbus_schemas::drift::DriftType;
use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject};
use serde_json::Value;
use tokio::time::Instant;

use super::apply::{self, WriteError};
use super::look::Look;
use super::pass::{failed, wrote};
use super::state::SinkState;
use super::wave::{verified, write_one, Step, Wave, Why};
use crate::context::Context;
use crate::sync::drift::announce::{self, Found};
use crate::sync::drift::fight::Verdict;
use crate::sync::drift::policy::Policy;
use crate::sync::drift::state::DriftState;
use crate::sync::model::{Baseline, Candidate, Outcome, Target};
use crate::sync::rollout::state::RolloutBook;
use crate::sync::world::World;

fn resource_version(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// What the serial path reads and changes: the World, the sink's state,
/// the drift stage's (drift is found and announced here), the rollouts'
/// holds (a held copy's drift is reported, not corrected) and the context.
pub(in crate::sync) struct Serial<'a> {
    pub world: &'a World,
    pub sink: &'a mut SinkState,
    pub drift: &'a mut DriftState,
    pub rollout: &'a RolloutBook,
    pub ctx: &'a Context,
}

impl Serial<'_> {
    /// The same borrows, for a wave's folding of a write.
    fn wave(&mut self) -> Wave<'_> {
        Wave {
            world: self.world,
            sink: self.sink,
            drift: self.drift,
            ctx: self.ctx,
        }
    }

    /// The same borrows, for a first look.
    fn look(&mut self) -> Look<'_> {
        Look {
            world: self.world,
            sink: self.sink,
            drift: self.drift,
            rollout: self.rollout,
            ctx: self.ctx,
        }
    }

    /// Carries out a decided step at `target`, writes included, on its own
    /// (the wave runs its plain writes together instead). Boxed: a
    /// namespace's step holds the step that follows it.
    pub(in crate::sync) fn settle<'b>(
        &'b mut self,
        target: &'b Target,
        c: &'b Candidate,
        step: Step,
    ) -> BoxFuture<'b, Outcome> {
        Box::pin(async move {
            match step {
                Step::Done(outcome, equal) => {
                    if equal {
                        self.sink.retries.remove(target);
                        announce::drift_resolved(self.drift, self.ctx, target).await;
                    }
                    outcome
                }
                Step::Verified(rv, with_status) => {
                    verified(self.sink, target, rv.as_deref(), with_status);
                    self.sink.retries.remove(target);
                    announce::drift_resolved(self.drift, self.ctx, target).await;
                    Outcome::InSync
                }
                Step::Write(w) => {
                    let result = write_one(self.world, self.ctx, target, c, &w).await;
                    self.wave()
                        .written(target, c, w.replace.is_some(), result)
                        .await
                }
                Step::Serial(why) => self.serial(target, c, why).await,
            }
        })
    }

    /// The serial path of `target`, by why it was taken.
    async fn serial(&mut self, target: &Target, c: &Candidate, why: Why) -> Outcome {
        match why {
            Why::Namespace { name, then } => match apply::create_namespace(self.ctx, &name).await {
                Ok(()) => self.settle(target, c, *then).await,
                Err(e) => failed(self.sink, self.ctx, target, c, None, e),
            },
            Why::Recreate { namespace } => self.create_missing(target, c, namespace, true).await,
            Why::Deleted { namespace, policy } => self.deleted(target, c, namespace, policy).await,
            Why::Gone { namespace } => self.create_missing(target, c, namespace, false).await,
            Why::FirstLook { policy } => self.look().first_look(target, c, policy).await,
            Why::Drift { policy } => {
                let (api, live) = match self.place(target) {
                    Ok(p) => p,
                    Err(outcome) => return outcome,
                };
                let server = self.sink.baselines.get(target).map(|b| b.server.value());
                match (live, server) {
                    (Some(live), Some(Ok(server))) => {
                        self.modified(target, c, &api, live, server, policy).await
                    }
                    (live, Some(Err(e))) => {
                        let rv = live.as_ref().and_then(resource_version);
                        failed(self.sink, self.ctx, target, c, rv, e.into())
                    }
                    // Decided from both, and neither changes within a pass.
                    _ => Outcome::InSync,
                }
            }
        }
    }

    /// The API of `target`'s kind, and its live copy as the watch last saw it.
    fn place(&self, target: &Target) -> Result<(Api<DynamicObject>, Option<Value>), Outcome> {
        let gvk = target.gvk();
        let Some(kind) = self.world.kinds.get(&gvk) else {
            return Err(Outcome::Failed(format!(
                "kind {} is not watched",
                crate::sync::model::meta::describe_gvk(&gvk)
            )));
        };
        let api = apply::api(&self.ctx.client, &kind.ar, target.namespace.as_deref());
        Ok((api, kind.objects.get(&target.local_key())))
    }

    /// For a copy that is missing: creates `namespace` first when one is
    /// given, and returns the API of the copy's kind; the failure otherwise.
    async fn missing_copy_api(
        &mut self,
        target: &Target,
        c: &Candidate,
        namespace: Option<String>,
    ) -> Result<Api<DynamicObject>, Outcome> {
        if let Some(ns) = namespace {
            if let Err(e) = apply::create_namespace(self.ctx, &ns).await {
                return Err(failed(self.sink, self.ctx, target, c, None, e));
            }
        }
        self.place(target).map(|(api, _)| api)
    }

    /// Replaces the live copy with the desired one, keeping what `policy`
    /// excludes.
    async fn replace_live(
        &self,
        api: &Api<DynamicObject>,
        c: &Candidate,
        live: &Value,
        policy: &Policy,
    ) -> Result<Value, WriteError> {
        apply::replace(
            self.ctx,
            api,
            &c.desired,
            live,
            c.with_status,
            &policy.exclude,
        )
        .await
    }

    /// [`Why::Gone`] and [`Why::Recreate`]: creates the copy. A create-only
    /// copy we wrote (`recreate`) is created again only once the server says
    /// it is gone (our create's watch event may still be on its way), and
    /// that is not drift: no Deleted drift, whatever the drift mode.
    async fn create_missing(
        &mut self,
        target: &Target,
        c: &Candidate,
        namespace: Option<String>,
        recreate: bool,
    ) -> Outcome {
        let api = match self.missing_copy_api(target, c, namespace).await {
            Ok(api) => api,
            Err(outcome) => return outcome,
        };
        if recreate {
            if let Ok(Some(_)) = announce::fresh(&api, &target.name).await {
                return Outcome::InSync;
            }
        }
        let written = apply::create(self.ctx, &api, &c.desired, c.with_status).await;
        self.wave()
            .written(target, c, false, written.map(Baseline::pack_server))
            .await
    }

    /// [`Why::Deleted`]: a copy we wrote is gone while its desired state did
    /// not change: someone deleted it (drift of type Deleted), reported and
    /// created again per the drift mode.
    async fn deleted(
        &mut self,
        target: &Target,
        c: &Candidate,
        namespace: Option<String>,
        policy: Policy,
    ) -> Outcome {
        let api = match self.missing_copy_api(target, c, namespace).await {
            Ok(api) => api,
            Err(outcome) => return outcome,
        };
        let last = match self.sink.baselines.get(target).map(|b| b.server.value()) {
            Some(Ok(last)) => last,
            Some(Err(e)) => return failed(self.sink, self.ctx, target, c, None, e.into()),
            // Decided from the baseline, which does not change within a pass.
            None => return Outcome::InSync,
        };
        if let Ok(Some(_)) = announce::fresh(&api, &target.name).await {
            // Our create's watch event has not arrived yet: no drift.
            return Outcome::InSync;
        }
        let mode = self.effective_mode(target, policy.mode);
        if mode == DriftMode::Ignore {
            return Outcome::InSync;
        }
        let found = Found {
            live: &last,
            baseline: &last,
            type_: DriftType::Deleted,
            action: mode,
            exclude: &policy.exclude,
            with_status: c.with_status,
        };
        announce::drift_detected(self.drift, self.ctx, self.world, target, c, found).await;
        if mode == DriftMode::Report {
            return Outcome::InSync;
        }
        let written = apply::create(self.ctx, &api, &c.desired, c.with_status).await;
        self.corrected(target, c, None, written).await
    }

    /// Drift of type Modified: the copy differs from `server`, what the
    /// server made of the same desired state. Reported, and corrected per
    /// the drift mode unless another writer fights over the copy.
    pub(super) async fn modified(
        &mut self,
        target: &Target,
        c: &Candidate,
        api: &Api<DynamicObject>,
        cached: Value,
        server: Value,
        policy: Policy,
    ) -> Outcome {
        // A copy another writer fights over is left alone while it waits
        // (no read, no write); an operator's request ends that.
        if self.drift.forced.contains(target) {
            self.drift.fights.forget(target);
        } else if self
            .drift
            .fights
            .holding(target, resource_version(&cached).as_deref(), Instant::now())
            .is_some()
        {
            return Outcome::Failed(announce::fight_message(self.drift, target));
        }
        // What the server has now, not the watch cache (which may still
        // show the version our last write replaced).
        let live = match announce::fresh(api, &target.name).await {
            Ok(Some(now)) => now,
            // Deleted meanwhile: its watch event decides.
            Ok(None) => return Outcome::InSync,
            Err(e) => {
                tracing::debug!(copy = %target, error = %e, "re-reading a drifted copy failed; using the cache");
                cached
            }
        };
        if policy.same(&server, &live, c.with_status) {
            return Outcome::InSync;
        }
        let live_rv = resource_version(&live);
        // A held rule (suspended, or waiting for its dependsOn) writes
        // nothing, an operator's correction included (it would write the
        // version the hold keeps back): drift of what it wrote is reported.
        let hold = self
            .sink
            .holds
            .get(&c.rule)
            .cloned()
            .or_else(|| self.rollout.hold(&c.rule, &c.key).map(str::to_owned));
        if let Some(why) = &hold {
            self.forced_done(
                target,
                Err(format!("{why}: nothing is written until the hold ends")),
            );
        }
        let mode = match (&hold, policy.mode) {
            (Some(_), DriftMode::Ignore) => DriftMode::Ignore,
            (Some(_), _) => DriftMode::Report,
            (None, mode) => self.effective_mode(target, mode),
        };
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
        let verdict = if mode == DriftMode::Correct && !self.drift.forced.contains(target) {
            announce::fight_verdict(self.drift, target, &found)
        } else {
            Verdict::Correct
        };
        announce::drift_detected(self.drift, self.ctx, self.world, target, c, found).await;
        if verdict != Verdict::Correct {
            return announce::drift_fight(
                self.drift,
                self.ctx,
                target,
                verdict,
                live_rv.as_deref(),
            )
            .await;
        }
        if mode == DriftMode::Report {
            return Outcome::InSync;
        }
        let written = self.replace_live(api, c, &live, &policy).await;
        self.corrected(target, c, live_rv, written).await
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
                announce::drift_corrected(self.drift, self.ctx, target).await;
                self.forced_done(target, Ok(()));
                wrote(
                    self.sink,
                    self.ctx,
                    target,
                    c,
                    Baseline::pack_server(server),
                )
            }
            Err(e) => {
                let message = crate::report(&e);
                announce::drift_failed(self.drift, self.ctx, target, &message).await;
                self.forced_done(target, Err(message));
                failed(self.sink, self.ctx, target, c, live_rv, e)
            }
        }
    }

    /// The drift mode in effect: an operator's `fleetbus drift correct` makes
    /// it `Correct` for this pass, whatever the rule or annotations say.
    fn effective_mode(&self, target: &Target, mode: DriftMode) -> DriftMode {
        if self.drift.forced.contains(target) {
            DriftMode::Correct
        } else {
            mode
        }
    }

    /// Records the result of a correction an operator asked for.
    fn forced_done(&mut self, target: &Target, result: Result<(), String>) {
        if self.drift.forced.remove(target) {
            self.drift.forced_results.push((target.clone(), result));
        }
    }
}
