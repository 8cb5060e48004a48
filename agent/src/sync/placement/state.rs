//! What placement keeps between passes: the records read from the bus and
//! the sink's holds. A leaf, so the engine owns it without importing the passes.

use std::collections::BTreeMap;

use fleetbus_schemas::placement::{PlacementKey, PlacementRecord};
use tokio::time::Instant;

/// The placement book (see the module docs).
#[derive(Debug, Default)]
pub struct PlacementBook {
    /// The last valid record of every decision on the bus, every origin.
    pub records: BTreeMap<PlacementKey, PlacementRecord>,
    /// The records of a consumer restart in progress.
    pub(in crate::sync) resnap: Option<BTreeMap<PlacementKey, PlacementRecord>>,
    /// Every last record has been read at least once: before that a sink
    /// cannot tell "not chosen" from "not read yet", nor an origin what it decided.
    pub caught_up: bool,
    /// Origin: when a failover window ends or a failed put is tried again.
    pub wake: Option<Instant>,
}

impl PlacementBook {
    /// The record of `key` as last read.
    pub fn record(&self, key: &PlacementKey) -> Option<&PlacementRecord> {
        self.records.get(key)
    }
}
