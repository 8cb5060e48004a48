//! The cluster registry: publishing this cluster, watching the fleet, keeping Cluster objects current.
//!
//! Three tasks share one [`Registry`]: the [`publisher`] re-puts this cluster's
//! record every heartbeat, the [`watcher`] folds the bucket into the `Membership`,
//! and the [`reconciler`] turns both into the Local and Peer Cluster objects
//! ([`local`], [`peers`]) and the [`FleetView`] sync follows. Beside them, the
//! API probe ([`api_health`]) keeps the local API server's health current for
//! the record and `/readyz`. Files import their siblings, never this table.

mod api_health;
mod error;
pub mod label_cmd;
mod liveness;
mod local;
mod membership;
mod peer_failures;
mod peer_secret;
mod peer_spec;
mod peers;
pub mod publisher;
mod reconciler;
pub mod record;
mod shared;
mod status;
pub mod view;
pub mod watcher;

pub use api_health::run as run_api_probe;
pub use error::RegistryError;
pub use local::preload as preload_local;
pub use reconciler::run as run_reconciler;
pub use shared::Registry;
pub use view::{is_disabled, sync_allowed, FleetHealth, FleetView, PeerView};
