//! What rollouts keep between passes: the records read from the bus, the
//! versions fetched from the version store, the sink's holds, and the
//! origin's clocks. A leaf, so the engine owns it without importing the passes.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::rollout::RolloutRecord;
use fleetbus_schemas::subject::{ObjectKey, RolloutKey, VersionKey};
use tokio::time::Instant;

/// The rollout book (see the module docs).
#[derive(Debug, Default)]
pub struct RolloutBook {
    /// The last valid record of every rollout on the bus, every origin.
    pub records: BTreeMap<RolloutKey, RolloutRecord>,
    /// The records of a consumer restart in progress.
    pub(super) resnap: Option<BTreeMap<RolloutKey, RolloutRecord>>,
    /// Every last record has been read at least once: before that a sink
    /// cannot tell "no record" from "not read yet", nor an origin where it was.
    pub caught_up: bool,
    /// Versions read from the store, for the copies whose record gives them
    /// another version than the newest on `obj.`.
    pub versions: HashMap<VersionKey, Envelope>,
    /// Versions being fetched, and those whose fetch failed, with when to try again.
    pub fetching: BTreeMap<VersionKey, Option<Instant>>,
    /// The sink's holds: by rule, the source objects whose copies wait
    /// (no record yet, not admitted, a version being fetched), with why.
    pub holds: BTreeMap<String, BTreeMap<ObjectKey, String>>,
    /// Origin: since when each (cluster, object, version) has been seen
    /// `Current` (our clock; not persisted: after a restart minReadySeconds
    /// counts again).
    pub current_since: HashMap<(String, ObjectKey, String), DateTime<Utc>>,
    /// Origin: versions known to be in the store.
    pub stored: BTreeSet<VersionKey>,
    /// Origin: when a decision's clock ends, or a failed put is retried.
    pub wake: Option<Instant>,
}

impl RolloutBook {
    /// The hold of `rule`'s copies of `key` here, if any.
    pub fn hold(&self, rule: &str, key: &ObjectKey) -> Option<&str> {
        self.holds.get(rule)?.get(key).map(String::as_str)
    }

    /// Sets or clears the hold of (`rule`, `key`); whether it changed.
    pub fn set_hold(&mut self, rule: &str, key: &ObjectKey, why: Option<String>) -> bool {
        match why {
            Some(why) => {
                let held = self.holds.entry(rule.to_owned()).or_default();
                held.insert(key.clone(), why.clone()) != Some(why)
            }
            None => {
                let Some(held) = self.holds.get_mut(rule) else {
                    return false;
                };
                let was = held.remove(key).is_some();
                if held.is_empty() {
                    self.holds.remove(rule);
                }
                was
            }
        }
    }

    /// The record of `key` as last read (a restart's re-read included once done).
    pub fn record(&self, key: &RolloutKey) -> Option<&RolloutRecord> {
        self.records.get(key)
    }

    /// Forgets cached versions no record names any more.
    pub fn prune_versions(&mut self) {
        let named: BTreeSet<(ObjectKey, &str)> = self
            .records
            .iter()
            .flat_map(|(k, r)| {
                let obj = k.object();
                r.stable
                    .iter()
                    .chain(r.admitted.keys())
                    .map(move |h| (obj.clone(), h.as_str()))
            })
            .collect();
        self.versions
            .retain(|v, _| named.contains(&(v.object.clone(), v.hash.as_str())));
    }
}
