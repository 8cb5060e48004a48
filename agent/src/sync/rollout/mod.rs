//! Progressive rollouts (`spec.rollout`, PROTOCOL §6.9): the origin decides,
//! per (rule, source object), which version each selected cluster runs, and
//! says so in a rollout record on the bus; sinks run what the record gives
//! them and hold the rest.
//!
//! - `decide`: the origin's decision, pure (the rules of PROTOCOL §6.9), and
//!   the operator's commands on one record.
//! - `command`: the operator's pause, resume, abort and rollback.
//! - `origin`: the origin's pass: decide, store the version, put the record.
//! - `sink`: the version a sink runs (pure `choose`), the hold of a copy
//!   whose version is not decided or not read yet, the version reads.
//! - `state`: what rollouts keep between passes (a leaf).

pub(in crate::sync) mod command;
pub(in crate::sync) mod decide;
pub(in crate::sync) mod origin;
pub(in crate::sync) mod sink;
pub(in crate::sync) mod state;
