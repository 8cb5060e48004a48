//! Drift: a copy changed on this cluster while its desired state did not.
//! Which policy holds for a copy and what changed ([`policy`], pure), whether
//! another writer fights over it ([`fight`], pure), announcing each phase on
//! the bus, the KV bucket and as an Event ([`announce`], coalesced by
//! [`coalesce`]), the open drifts between passes ([`state`]), and the
//! operator's `fleetbus drift correct` ([`command`]). Found on the sink's
//! serial path (`sink::serial`).

pub(super) mod announce;
pub(super) mod coalesce;
pub(super) mod command;
pub(super) mod fight;
pub(super) mod policy;
pub(super) mod state;
