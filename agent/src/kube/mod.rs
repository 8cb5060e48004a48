//! Building blocks on the local Kubernetes API, shared by every task: building
//! the client (requests bounded by a deadline), which errors are transient, Events, conditions, object names in
//! request paths, and writes that happen only on change.

pub mod api_probe;
pub mod client;
pub mod conditions;
pub mod deadline;
pub mod events;
pub mod fresh_watch;
pub mod path;
pub mod throttle;

/// The field manager of every write the agent makes (server-side apply and
/// plain writes alike), so `managedFields` tells fleetbus's writes apart.
pub const FIELD_MANAGER: &str = "fleetbus-agent";
