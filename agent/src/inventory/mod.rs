//! SIG Multicluster's inventory and identity: a `ClusterProfile` per fleet
//! member in the agent's namespace, and this cluster's `ClusterProperty`s.
//! [`writer`] is the task; [`profile`] decides what each profile says and
//! [`pace`] when it is written (both pure); [`identity`] reads and writes
//! the ClusterProperties. Files import their siblings, never this table.

pub mod identity;
mod pace;
mod profile;
mod writer;

pub use identity::IdentityPropertyError;
pub use writer::run;
