//! `fleetbus`, the operator CLI. The binary is a thin wrapper: start at
//! [`cli::Cli`] for the commands, then [`mesh`] for the local mesh
//! (`mesh up|down|status`), which runs real `nats-server`,
//! `fleetbus-devcluster` and `fleetbus-agent` processes and records them in
//! [`MeshState`] (`<dir>/mesh.json`); [`drift`] for the fleet's drift
//! (`drift ls|watch|history|correct`), read from and sent over NATS; [`clusters`] for
//! the fleet's clusters (`clusters label|ls`); [`dashboard`] for the live web
//! dashboard (`fleetbus dashboard`), read from the bus too.
//! [`membership`] runs `fleet init`, `join` and `leave` over the fleet's keys
//! in [`trust`].

pub mod cli;
pub mod clusters;
pub mod command;
pub mod dashboard;
pub mod drift;
pub mod fleet;
mod kv;
pub mod membership;
pub mod mesh;
pub mod notify;
pub mod output;
pub mod rules;
pub mod signers;
pub mod status;
pub mod trust;

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod snapshots;

mod names;
mod probe;
mod proc;
mod state;

pub use fleetbus_launch::{Binaries, LocateError};
pub use names::{cluster_names, NameError};
pub use proc::is_alive as process_is_alive;
pub use state::{
    AgentRecord, ClusterRecord, DevclusterRecord, MeshSecurity, MeshState, NatsRecord, ProcRecord,
    StateError,
};
