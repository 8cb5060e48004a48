//! Drift found on the sink's serial path (`serial`, `look`): a copy that
//! differs from what the server made of its desired state is reported, and
//! corrected per its drift mode (or an operator's `fleetbus drift correct`)
//! unless its rule is held or another writer fights over the copy.

use fleetbus_schemas::crd::DriftMode;
use fleetbus_schemas::drift::DriftType;
use kube::api::{Api, DynamicObject};
use serde_json::Value;
use tokio::time::Instant;

use super::apply::{self, WriteError};
use super::compare::resource_version;
use super::state::SinkState;
use super::wave::{failed, wrote};
use crate::context::Context;
use crate::sync::drift::announce::{self, Found};
use crate::sync::drift::fight::Verdict;
use crate::sync::drift::policy::Policy;
use crate::sync::drift::state::DriftState;
use crate::sync::model::{Baseline, Candidate, Outcome, Target};
use crate::sync::model::{CopyError, FailureKind};
use crate::sync::rollout::state::RolloutBook;
use crate::sync::world::World;

/// What handling drift reads and changes: the World, the sink's state (a
/// correction is a write), the drift stage's (announcements, fights, an
/// operator's requests), the rollouts' holds (a held copy's drift is
/// reported, not corrected) and the context.
pub(in crate::sync) struct Drifted<'a> {
    pub world: &'a World,
    pub sink: &'a mut SinkState,
    pub drift: &'a mut DriftState,
    pub rollout: &'a RolloutBook,
    pub ctx: &'a Context,
}

impl Drifted<'_> {
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
            .holding(target, resource_version(&cached), Instant::now())
            .is_some()
        {
            return Outcome::Failed(CopyError::new(
                FailureKind::Conflict,
                announce::fight_message(self.drift, target),
            ));
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
        let live_rv = resource_version(&live).map(str::to_owned);
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
            forced_done(
                self.drift,
                target,
                Err(format!("{why}: nothing is written until the hold ends")),
            );
        }
        let mode = match (&hold, policy.mode) {
            (Some(_), DriftMode::Ignore) => DriftMode::Ignore,
            (Some(_), _) => DriftMode::Report,
            (None, mode) => effective_mode(self.drift, target, mode),
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
        let written = replace_live(self.ctx, api, c, &live, &policy).await;
        self.corrected(target, c, live_rv, written).await
    }

    /// Ends a correction: the drift closes (or stays, failed), an operator's
    /// request gets its result, and the write counts like any other.
    pub(super) async fn corrected(
        &mut self,
        target: &Target,
        c: &Candidate,
        live_rv: Option<String>,
        written: Result<Value, WriteError>,
    ) -> Outcome {
        match written {
            Ok(server) => {
                announce::drift_corrected(self.drift, self.ctx, target).await;
                forced_done(self.drift, target, Ok(()));
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
                forced_done(self.drift, target, Err(message));
                failed(self.sink, self.ctx, target, c, live_rv, e)
            }
        }
    }
}

/// Replaces the live copy with the desired one, keeping what `policy`
/// excludes.
async fn replace_live(
    ctx: &Context,
    api: &Api<DynamicObject>,
    c: &Candidate,
    live: &Value,
    policy: &Policy,
) -> Result<Value, WriteError> {
    apply::replace(ctx, api, &c.desired, live, c.with_status, &policy.exclude).await
}

/// The drift mode in effect: an operator's `fleetbus drift correct` makes
/// it `Correct` for this pass, whatever the rule or annotations say.
pub(super) fn effective_mode(drift: &DriftState, target: &Target, mode: DriftMode) -> DriftMode {
    if drift.forced.contains(target) {
        DriftMode::Correct
    } else {
        mode
    }
}

/// Records the result of a correction an operator asked for.
fn forced_done(drift: &mut DriftState, target: &Target, result: Result<(), String>) {
    if drift.forced.remove(target) {
        drift.forced_results.push((target.clone(), result));
    }
}
