//! Until the preview is functions over narrow state too, it reaches the
//! sink's functions through these thin forwarders (the engine's World,
//! sink state and context passed on); remove them with its conversion.

use fleetbus_schemas::crd::SyncRule;
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use kube::api::ApiResource;
use serde_json::Value;

use crate::sync::model::{Candidate, RuleReport, Target};
use crate::sync::rules::compile::CompiledRule;
use crate::sync::sink::bundle::BundlePass;
use crate::sync::sink::collect::{self, RuleOf, Verdict};
use crate::sync::sink::keep::CheckError;
use crate::sync::sink::pass::Compute;
use crate::sync::sink::plan::Computed;
use crate::sync::sink::wave::{self, View};

use super::Engine;

impl Engine {
    /// [`collect::verdict_under`] over this engine's World.
    pub(in crate::sync) fn verdict_under(
        &self,
        obj: &Value,
        origin: &str,
        rule: RuleOf,
    ) -> Verdict {
        collect::verdict_under(&self.world, obj, origin, rule)
    }

    /// [`collect::would_take`] with this engine's context.
    pub(in crate::sync) async fn would_take(
        &self,
        target: &Target,
        obj: &Value,
        served: &mut Option<Vec<ApiResource>>,
    ) -> Result<Vec<String>, CheckError> {
        collect::would_take(&self.io.ctx, target, obj, served).await
    }
}

impl Engine {
    /// [`Compute::compute_candidate`] over this engine's World and context.
    pub(in crate::sync) fn compute_candidate(
        &self,
        rule: &CompiledRule,
        key: &ObjectKey,
        env: &Envelope,
        obj: &Value,
        origin_record: &Value,
        entries: &[&SyncRule],
    ) -> Computed {
        self.compute()
            .compute_candidate(rule, key, env, obj, origin_record, entries)
    }

    /// [`Compute::unwrapped`] over this engine's World and context.
    pub(in crate::sync) fn unwrapped(
        &self,
        rule: &CompiledRule,
        report: &mut RuleReport,
        bundles: &mut BundlePass,
    ) -> Vec<(Target, Candidate)> {
        self.compute().unwrapped(rule, report, bundles)
    }

    /// [`wave::live`] in this engine's World.
    pub(in crate::sync) fn live(&self, target: &Target) -> Option<Value> {
        wave::live(&self.world, target)
    }

    /// [`wave::view`] over this engine's World and sink state.
    pub(in crate::sync) fn view<'a>(
        &'a self,
        target: &Target,
        live: Option<&'a Value>,
        rule: Option<&'a CompiledRule>,
        hold: Option<&'a str>,
    ) -> View<'a> {
        let marker = &self.io.ctx.mark;
        wave::view(&self.world, &self.sink, marker, target, live, rule, hold)
    }

    fn compute(&self) -> Compute<'_> {
        Compute {
            world: &self.world,
            ctx: &self.io.ctx,
        }
    }
}
