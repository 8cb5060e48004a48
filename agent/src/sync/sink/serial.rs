//! The sink's serial path: the targets `wave::decide` could not settle
//! without a read, a dry run or an Event, each handled one at a time down
//! the path its [`Why`] names. Nothing here decides again what `decide`
//! already did.

use fleetbus_schemas::crd::DriftMode;
use fleetbus_schemas::drift::DriftType;
use futures::future::BoxFuture;
use kube::api::{Api, DynamicObject};
use serde_json::Value;

use super::apply;
use super::compare::resource_version;
use super::drifted::{effective_mode, Drifted};
use super::look::Look;
use super::state::SinkState;
use super::wave::{failed, verified, write_one, Ends, Step, Wave, Why};
use crate::context::Context;
use crate::sync::drift::announce::{self, Found};
use crate::sync::drift::policy::Policy;
use crate::sync::drift::state::DriftState;
use crate::sync::model::CopyError;
use crate::sync::model::{Baseline, Candidate, Outcome, Target};
use crate::sync::rollout::state::RolloutBook;
use crate::sync::world::World;

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

    /// The same borrows, for drift found here.
    fn drifted(&mut self) -> Drifted<'_> {
        Drifted {
            world: self.world,
            sink: self.sink,
            drift: self.drift,
            rollout: self.rollout,
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
                Step::Done(outcome, ends) => {
                    if ends == Ends::RetryAndDrift {
                        self.sink.retries.remove(target);
                        announce::drift_resolved(self.drift, self.ctx, target).await;
                    }
                    outcome
                }
                Step::Verified {
                    resource_version,
                    with_status,
                } => {
                    verified(self.sink, target, resource_version.as_deref(), with_status);
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
                        let mut drifted = self.drifted();
                        drifted
                            .modified(target, c, &api, live, server, policy)
                            .await
                    }
                    (live, Some(Err(e))) => {
                        let rv = live.as_ref().and_then(resource_version).map(str::to_owned);
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
            return Err(Outcome::Failed(CopyError::transient(format!(
                "kind {} is not watched",
                crate::sync::model::meta::describe_gvk(&gvk)
            ))));
        };
        let api = apply::api(&self.ctx.copy_writer, &kind.ar, target.namespace.as_deref());
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
        let mode = effective_mode(self.drift, target, policy.mode);
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
        self.drifted().corrected(target, c, None, written).await
    }
}
