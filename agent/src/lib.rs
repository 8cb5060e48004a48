//! The fleetbus agent: one per cluster, leaderless, meeting its peers on NATS JetStream.
//!
//! Start at [`run`]: it prepares the local cluster (CRDs, namespace,
//! identity), connects to NATS and ensures the JetStream layout (streams and the
//! registry bucket, see `streams`), then runs the registry tasks until shutdown:
//! the heartbeat publisher, the registry watcher, the reconciler of Cluster
//! objects (see `registry`) and the Node watch that keeps the published
//! metadata current (`nodes`). Flags are in [`Args`], checked into [`Config`].

mod bootstrap;
mod bus;
mod cli;
mod config;
mod context;
mod copy_mark;
pub mod credentials;
mod health;
mod identity;
mod inventory;
mod kube;
mod kubeconfig;
mod log_gate;
mod mark;
mod metadata;
mod metrics;
mod nodes;
mod registry;
mod run;
mod services;
pub mod sync;
mod trust;

pub use cli::{usage_error, Args};
pub use config::{Config, ConfigError, NatsAuth};
pub use metadata::{detect, Detected};
pub use metrics::{Metrics, RuleObjects};
pub use registry::{is_disabled, sync_allowed};
pub use run::{run, RunError};
pub use trust::{Identity, TrustLoadError};

/// Renders an error with its chain of causes: "failed to X: because Y: because Z".
pub fn report(error: &dyn std::error::Error) -> String {
    let mut out = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        out.push_str(": ");
        out.push_str(&e.to_string());
        source = e.source();
    }
    out
}
