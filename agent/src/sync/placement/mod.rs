//! Placement and failover without a scheduler (`spec.placement`, PROTOCOL
//! §6.10): the origin of each source object decides on which of the
//! matched clusters its copies live and says so in a placement record on
//! the bus; sinks copy only where a record they read chooses them.
//!
//! - `announce`: the Events on the rule a changed decision gives (pure).
//! - `decide`: the origin's decision, pure.
//! - `fitness`: which clusters cannot hold a unit's copy, said by the
//!   sink (its SyncPolicy) or read by the origin (where dependencies are placed).
//! - `origin`: the origin's pass: gather the candidates, decide, put what changed.
//! - `sink`: what a sink does with one source object by its record (pure).
//! - `state`: what placement keeps between passes (a leaf).
//! - `summary`: a rule's placements on its origin's status (pure).

pub(in crate::sync) mod announce;
pub(in crate::sync) mod decide;
pub(in crate::sync) mod fitness;
pub(in crate::sync) mod origin;
pub(in crate::sync) mod sink;
pub(in crate::sync) mod state;
pub(in crate::sync) mod summary;
