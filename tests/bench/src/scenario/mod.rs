//! The eight first scenarios, then propagation at scale, the registry, placement at 1,000 clusters and multi-cluster Services under endpoint churn. Each starts what it needs, measures, and
//! returns its tables; a failure is reported as an error, never hidden.

use std::time::Duration;

use crate::bus::Topology;

pub mod catchup;
pub mod drift;
pub mod engine_load;
pub mod fleet;
pub mod floor;
pub mod fullmesh;
pub mod idle;
pub mod memory;
pub mod placement;
pub mod propagation;
pub mod propagation_at;
pub mod registry;
pub mod services;
pub mod throughput;
pub mod wire;

/// What every scenario gets: the size of the run and the floor measured in it.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    /// Tiny sizes (CI): seconds, not minutes; the numbers mean nothing.
    pub smoke: bool,
    /// `perf record` the agents where a scenario loads them.
    pub profile: bool,
    /// p50 of the floor (devcluster write + JetStream publish-ack + devcluster write).
    pub floor: Option<Duration>,
    /// The NATS the fleet scenarios ([`ON_TOPOLOGIES`]) run on; the others
    /// always run on one nats-server.
    pub topology: Topology,
}

impl Ctx {
    /// `smoke` in a smoke run, else `full`.
    pub fn pick<T>(&self, smoke: T, full: T) -> T {
        if self.smoke {
            smoke
        } else {
            full
        }
    }
}

/// The scenarios in the order `all` runs them.
pub const ALL: [&str; 15] = [
    "floor",
    "propagation",
    "propagation_at",
    "previewing",
    "pressure",
    "drift",
    "throughput",
    "catchup",
    "memory",
    "fleet",
    "wire",
    "registry",
    "idle",
    "placement",
    "services",
];

/// The fleet scenarios that run on every topology of `--nats` (the cost of
/// replication); the rest run on one nats-server only.
pub const ON_TOPOLOGIES: [&str; 3] = ["propagation", "throughput", "fleet"];

/// The cap an environment variable `name` puts on a scenario's sizes
/// (e.g. `FLEETBUS_BENCH_MAX_OBJECTS=10000`); unset or unreadable: none.
pub fn env_cap(name: &str) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(usize::MAX)
}

/// "met" / "MISSED" for a goal check.
pub fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}
