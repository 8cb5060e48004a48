//! Until the preview and `drift correct` are functions over narrow state
//! too, they reach the sink's functions through these thin forwarders.

use kube::api::ApiResource;
use serde_json::Value;

use crate::sync::model::Target;
use crate::sync::sink::collect::{self, RuleOf, Verdict};
use crate::sync::sink::keep::CheckError;

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
