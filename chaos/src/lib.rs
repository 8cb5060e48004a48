//! Fault injection for fleetbus meshes.
//!
//! [`proxy`] is a TCP proxy the runner puts between an agent and NATS or its
//! API server, to cut, stall, half-open, delay, throttle or corrupt the
//! traffic of every connection at once. [`oracle`] keeps what the origins
//! acknowledged and what the sinks' watches saw, and names every copy that is
//! missing, stale, extra, went back to an older version or was deleted while
//! its source lived. [`fleet`] starts the real processes (`tests/support`)
//! with the proxies in front of every agent, [`scenario`] runs the
//! scenarios of the runner (`fleetbus-chaos`), [`report`] writes their table.

pub mod fleet;
pub mod oracle;
pub mod proxy;
pub mod report;
pub mod scenario;
pub mod workload;
