//! Rule-driven sync: objects flow from the clusters a ResourceSyncRule takes
//! them from to the clusters it applies on, over the bus, without loops,
//! losses or a leader.
//!
//! The path of one object (see ARCHITECTURE.md for the picture):
//! 1. [`inputs`]: the local watch of its kind sees the original change.
//! 2. [`source`]: the object matches a rule this cluster is a source of, so
//!    its envelope is published on `<p>.obj.<self>.<g>.<v>.<kind>.<ns>.<name>`.
//! 3. [`inputs`]: on every other cluster, the bus consumer of the kind
//!    delivers it.
//! 4. [`sink`]: each rule that applies there and takes from this origin
//!    ([`rules`]: matching, templates) maps it to a desired copy (`mutate`);
//!    `conflicts` picks one winner per target.
//! 5. `sink::wave` decides, without writing, whether the copy is equal, a
//!    plain create or replace (run together), or takes the serial path
//!    (`sink::serial`, told why); `sink::apply` creates or replaces it unless
//!    it already equals the desired state (`sink::compare`); a copy whose
//!    write, delete or orphan fails backs off on its own
//!    ([`model::backoff`], `sink::failures`); a copy changed by someone else
//!    is [`drift`]; [`status`] reports per rule, and [`returns`] carries the
//!    copies' status back to the origin.
//!
//! [`engine`] owns the state and runs the passes; [`model`] holds the types
//! every stage shares and reads object metadata. Each stage folder's
//! `mod.rs` is its table of contents.

mod digest;
mod drift;
mod engine;
mod health;
pub(crate) mod inputs;
pub(crate) mod model;
mod placement;
pub(crate) mod policy;
mod policy_watch;
mod preview;
mod progress;
mod returns;
mod rollout;
mod rules;
mod sink;
mod source;
mod status;
mod status_bus;
mod withheld;
mod world;

pub use engine::run;

/// Why the sync task stopped for good. Everything else sync meets (a bad
/// rule, a refused object, NATS down) is reported and retried inside it.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// The engine's input channel closed: every event source is gone.
    #[error("sync stopped: its event sources are gone")]
    Closed,
    /// The previews' thread could not be started (out of threads or
    /// memory).
    #[error("cannot start the previews' thread: {0}")]
    Thread(#[from] std::io::Error),
}

impl SyncError {
    /// Whether restarting the agent could help.
    pub fn is_transient(&self) -> bool {
        true
    }
}
