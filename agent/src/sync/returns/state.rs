//! What the origin's return pass keeps between passes ([`super::returned`],
//! [`super::per_cluster`]): the book of reports that concern this cluster
//! and what was written from them. A leaf, so the engine owns it without
//! importing the pass.

use std::collections::{BTreeMap, HashMap, HashSet};

use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::{ObjectKey, StatusKey};
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::sync::model::LocalKey;

/// What the returns stage keeps: the status book, and when a report that
/// failed on the bus is tried again.
#[derive(Debug, Default)]
pub struct ReturnsState {
    /// Status reports read from the bus, and what the origin did with them.
    pub book: StatusBook,
    /// A status report failed on the bus: when the report pass tries again.
    pub wake: Option<tokio::time::Instant>,
}

/// The reports that concern this cluster, and what the origin did with them.
#[derive(Debug, Default)]
pub struct StatusBook {
    /// Last report per subject: published by this cluster, or about its objects.
    pub reports: BTreeMap<StatusKey, ReportedStatus>,
    pub(super) resnap: Option<BTreeMap<StatusKey, ReportedStatus>>,
    /// Every last report has been read at least once.
    pub caught_up: bool,
    /// `Singleton`: the status fleetbus applied to each source object last
    /// (`null`: applied before this process started, read from `managedFields`).
    pub(super) applied: BTreeMap<ObjectKey, Value>,
    /// Kinds whose listed objects were searched for status fleetbus applied
    /// before this process started.
    pub(super) adopted_kinds: HashSet<GroupVersionKind>,
    /// Each source kind's resource and whether it has a `/status` subresource
    /// (from discovery: the kind may no longer be watched when fleetbus's status
    /// fields are to be cleared).
    pub(super) status_subresource: HashMap<GroupVersionKind, (kube::api::ApiResource, bool)>,
    /// `PerCluster`: the ReportedStates written last, by place, each with the
    /// `resourceVersion` the live object had when it was written: while the
    /// watched object still has it, our write's event has not come back yet.
    pub(super) written: BTreeMap<LocalKey, Written>,
}

impl StatusBook {
    /// Forgets what discovery said about source kinds: a CRD event may have
    /// added or removed a kind or its `/status` subresource.
    pub(in crate::sync) fn forget_discovery(&mut self) {
        self.status_subresource.clear();
    }
}

/// A ReportedState this agent wrote, and the live object's `resourceVersion` at the
/// time (None: it did not exist).
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    pub(super) want: Value,
    pub(super) live_rv: Option<String>,
}

pub(super) fn resource_version(v: Option<&Value>) -> Option<String> {
    v.and_then(|v| v.pointer("/metadata/resourceVersion"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

impl Written {
    /// Whether `want` was written and the watch shows `live` as it was before that
    /// write: our event is still to come, so writing again would only race it. Any
    /// newer live object (ours, or someone else's edit) is compared for itself.
    pub(super) fn pending(&self, want: &Value, live: Option<&Value>) -> bool {
        self.want == *want && self.live_rv.is_some() && self.live_rv == resource_version(live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_is_forgotten_on_crd_events() {
        let gvk = GroupVersionKind::gvk("example.com", "v1", "Gadget");
        let ar = kube::api::ApiResource::from_gvk(&gvk);
        let mut book = StatusBook::default();
        book.status_subresource.insert(gvk.clone(), (ar, false));
        book.forget_discovery();
        assert!(!book.status_subresource.contains_key(&gvk));
    }
}
