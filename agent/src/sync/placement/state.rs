//! What placement keeps between passes: the records read from the bus and
//! the sink's holds. A leaf, so the engine owns it without importing the passes.

use std::collections::BTreeMap;

use fleetbus_schemas::placement::{PlacementKey, PlacementRecord};
use tokio::time::Instant;

use crate::sync::model::Followed;

/// What a sink's placement decision says of this cluster's copy: its place
/// among the chosen clusters (by name, from 0), how many are chosen, and
/// its replica share when placement divides replicas. Templates read it as
/// `.Placement` (`index`, `count`, `share`); a change computes the copy again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Here {
    /// Among the chosen clusters, sorted by name, from 0.
    pub index: usize,
    /// How many clusters are chosen.
    pub count: usize,
    /// The replica share, when divided.
    pub share: Option<i64>,
}

impl Here {
    /// What a placement rule's copy is computed with while placement has
    /// said nothing of it here (held: the records not read yet, no
    /// decision yet, released and kept; or judged for fitness before any
    /// choice). Such a copy is never written, so the values only keep the
    /// computation from failing: a failed one would leave the copy
    /// unwanted, and collected. `.Placement` cannot name a copy (rule
    /// validation), so the stand-in never moves one.
    pub const STAND_IN: Here = Here {
        index: 0,
        count: 1,
        share: None,
    };

    /// What templates read as `.Placement` (`share` null when not divided).
    pub fn to_json(self) -> serde_json::Value {
        serde_json::json!({"index": self.index, "count": self.count, "share": self.share})
    }
}

/// The placement book (see the module docs).
#[derive(Debug, Default)]
pub struct PlacementBook {
    /// Every decision on the bus, every origin; until `caught_up` a sink
    /// cannot tell "not chosen" from "not read yet", nor an origin what it decided.
    pub read: Followed<PlacementKey, PlacementRecord>,
    /// Origin: when a failover window ends or a failed put is tried again.
    pub wake: Option<Instant>,
    /// Origin: whether each rule had placement at the last pass (absent:
    /// not seen yet), and when placement was turned on for a rule this
    /// agent saw without it (`origin::grace`).
    pub rules: BTreeMap<String, bool>,
    /// See `rules`.
    pub turned_on: BTreeMap<String, Instant>,
    /// When (by the wall clock, ms) placement was last turned on for a rule
    /// this agent saw without it, while it stays on: its records from
    /// before (placement on, off, on again: the stream keeps them) are
    /// not its decisions now.
    pub turned_on_at: BTreeMap<String, chrono::DateTime<chrono::Utc>>,
}

impl PlacementBook {
    /// The record of `key` as last read.
    pub fn record(&self, key: &PlacementKey) -> Option<&PlacementRecord> {
        self.read.records.get(key)
    }

    /// Every record has been read once.
    pub fn caught_up(&self) -> bool {
        self.read.caught_up
    }
}
