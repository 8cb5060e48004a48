//! Temporary: the stages' functions that preview and status still call as
//! engine methods, forwarding to the functions over narrow state. Goes once
//! those callers call the functions themselves.

use crate::sync::policy_watch;

use super::Engine;

impl Engine {
    /// See [`policy_watch::policy_known`].
    pub(in crate::sync) fn policy_known(&self) -> bool {
        policy_watch::policy_known(&self.world)
    }

    /// See [`crate::sync::rollout::origin::rollout_summaries`].
    pub(in crate::sync) fn rollout_summaries(
        &self,
        rule: &str,
        report: &mut crate::sync::model::RuleReport,
    ) {
        let local = &self.world.fleet.local.name;
        crate::sync::rollout::origin::rollout_summaries(&self.rollout, local, rule, report)
    }
}
