//! Progressive rollouts (`spec.rollout`, PROTOCOL §6.9): the origin decides,
//! per (rule, source object), which version each selected cluster runs, and
//! says so in a rollout record on the bus; sinks run what the record gives
//! them and hold the rest.
//!
//! - `decide`: the origin's decision, pure (the rules of PROTOCOL §6.9), and
//!   the operator's commands on one record.

#[allow(dead_code)] // wired by the origin's rollout pass (next step)
pub(in crate::sync) mod decide;
