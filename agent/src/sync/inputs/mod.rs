//! What sync is told: the local watch and the bus consumer of every kind,
//! and the status consumer ([`watches`]), each a subject tree followed on
//! the bus the same way ([`follow`]); the events they send are
//! `model::Input`.

mod follow;
pub(super) mod watches;
