//! The sync engine: one task that owns every piece of sync state and turns
//! events into passes.
//!
//! Inputs (see [`Input`]) are drained in batches; after each batch
//! one pass runs: rules are recompiled if they changed, kinds are started or
//! stopped, the source side publishes what changed among our originals
//! ([`super::source::publish`]; only the objects events touched, all of them after a
//! re-list, a bus re-read, a rule or fleet change), the sink side computes the
//! desired copies that changed and makes the local copies equal to them
//! ([`super::sink`]; only the pairs and targets events touched, all of them
//! after a re-list, a bus re-read, a rule, fleet or Namespace change, and
//! every 5 minutes), and rule status is written where it changed
//! ([`super::status`]). Passes compare states, not events, so a missed or
//! replayed event cannot leave a wrong copy behind for longer than the next
//! full pass.
//!
//! One task owns the state, so there are no locks; the plain creates and
//! replaces of a pass run concurrently while the engine waits for them
//! (`sink::wave`), the rare paths (drift, dry runs) one at a time.

mod commands;
mod fold;
mod kinds;
mod rule_set;
mod run;

pub use run::run;

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::drift::state::DriftState;
use super::model::Input;
use super::policy_watch::PolicyState;
use super::returns::state::ReturnsState;
use super::rules::compile as rules;
use super::sink::state::SinkState;
use super::source::state::SourceState;
use super::status::StatusState;
use super::world::World;
use crate::context::Context;
use crate::registry::FleetView;

/// The engine's handles on the world outside: the agent's context (API
/// clients, bus, metrics), the engine's own input channel (for the tasks it
/// starts) and its cancellation.
pub struct Io {
    pub ctx: Arc<Context>,
    pub tx: mpsc::Sender<Input>,
    pub cancel: CancellationToken,
}

/// What the inputs left for the engine's own steps (rules, kinds) to do.
#[derive(Default)]
pub struct Pending {
    /// A rule object changed: compile the rules again.
    pub rules_dirty: bool,
    /// The fleet view changed since the rules were last compiled (what
    /// depends on rules is done again even if they compile the same).
    pub fleet_moved: bool,
    /// A CRD changed while some kind was unresolved: ask discovery again.
    pub rediscover: bool,
    /// When to ask discovery again while some kind is unresolved.
    pub rediscover_at: Option<Instant>,
}

/// The state of sync on this cluster: the World every stage reads, each
/// stage's own state, and the IO handles.
pub struct Engine {
    pub(super) io: Io,
    pub(super) world: World,
    pub(super) pending: Pending,
    /// What the source side keeps between passes (`source::state`).
    pub(super) source: SourceState,
    pub(super) sink: SinkState,
    pub(super) drift: DriftState,
    pub(super) returns: ReturnsState,
    pub(super) status: StatusState,
    /// Rollout records, fetched versions, the sink's holds per (rule,
    /// object) and the origin's clocks (`rollout`).
    pub(super) rollout: super::rollout::state::RolloutBook,
    pub(super) policy: PolicyState,
    /// Placement records, and the origin's wake-up (`placement`).
    pub(super) placement: super::placement::state::PlacementBook,
}

impl Engine {
    /// A new engine; nothing runs until [`Engine::pass`].
    pub fn new(
        ctx: Arc<Context>,
        tx: mpsc::Sender<Input>,
        cancel: CancellationToken,
        fleet: Arc<FleetView>,
    ) -> Self {
        let drift = DriftState::new(ctx.cfg.drift_fight, ctx.cfg.drift_coalesce_window);
        Engine {
            io: Io { ctx, tx, cancel },
            world: World {
                fleet,
                rules: rules::compile(&[]),
                rules_generation: 0,
                kinds: HashMap::new(),
                unresolved: HashMap::new(),
                policy: super::policy::Policy::default(),
                health: Arc::default(),
            },
            pending: Pending {
                rules_dirty: true,
                ..Pending::default()
            },
            source: SourceState::default(),
            sink: SinkState::default(),
            drift,
            returns: ReturnsState::default(),
            status: StatusState::default(),
            rollout: Default::default(),
            policy: PolicyState::default(),
            placement: Default::default(),
        }
    }
}
