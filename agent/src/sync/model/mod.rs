//! The data every sync stage shares, and nothing else: where a copy lives
//! ([`Target`]), what a source wants there ([`Candidate`]) and what became
//! of it ([`Outcome`], [`Conflict`]), what the sink knows of a copy
//! ([`Baseline`]) and of a failing one ([`backoff`]), what a pass found per
//! rule ([`RuleReport`]), how a remembered object is kept ([`Packed`]),
//! what the engine is told ([`Input`]), and how an object's metadata is
//! read ([`meta`]).
//!
//! A leaf: nothing here knows the engine, the API server or the bus, so
//! every decision over these types can be tested without either.

pub mod backoff;
mod baseline;
mod candidate;
mod input;
pub mod meta;
mod objects;
mod outcome;
mod packed;
mod report;
mod snapshots;
mod target;

pub use baseline::Baseline;
pub use candidate::Candidate;
pub use input::{
    believed_after_failure, BusEvent, Feed, Folded, Followed, Input, LocalEvent, PlacementEvent,
    RolloutEvent, Seen, StatusEvent,
};
pub use objects::LocalObjects;
pub use outcome::{Conflict, CopyError, FailureKind, Outcome};
pub use packed::{Packed, Unpack};
pub use report::RuleReport;
pub use snapshots::{PackedEnvelope, Snapshots};
#[cfg(test)]
pub use target::Place;
pub use target::{LocalKey, Target};
