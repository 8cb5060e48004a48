//! Temporary: the stages' functions that preview and rollout still call as engine
//! methods, forwarding to the functions over narrow state. Goes once
//! preview calls those functions itself.

use std::collections::BTreeMap;

use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::ObjectKey;

use crate::sync::policy_watch;
use crate::sync::returns::returned;

use super::Engine;

impl Engine {
    /// See [`policy_watch::policy_known`].
    pub(in crate::sync) fn policy_known(&self) -> bool {
        policy_watch::policy_known(&self.world)
    }

    /// See [`returned::rules_read`].
    pub(in crate::sync) fn rules_read(&self) -> bool {
        returned::rules_read(&self.world)
    }

    /// See [`returned::returned_reports`].
    pub(in crate::sync) fn returned_reports(&self) -> BTreeMap<ObjectKey, Vec<ReportedStatus>> {
        returned::returned_reports(&self.world, &self.returns.book)
    }
}
