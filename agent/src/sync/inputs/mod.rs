//! What sync is told: the local watch and the bus consumer of every kind,
//! the status consumer ([`watches`]), the rollout consumer and version
//! reads ([`rollouts`]), each a subject tree followed on
//! the bus the same way ([`follow`]); the events they send are
//! `model::Input`.

pub(crate) mod follow;
pub(super) mod placements;
pub(super) mod rollouts;
pub(super) mod watches;
