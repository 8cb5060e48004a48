//! The loop: inputs folded in batches, then one pass calling the stages in
//! order; the engine sleeps until the earliest wake-up any stage asked for.

use std::sync::Arc;

use fleetbus_schemas::progress::SyncProgress;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::sync::inputs::watches;
use crate::sync::model::Input;
use crate::sync::placement;
use crate::sync::policy_watch;
use crate::sync::returns::{report, returned};
use crate::sync::rollout;
use crate::sync::rules::compile::{self as rules};
use crate::sync::source::publish;
use crate::sync::status;
use crate::sync::world::World;

use super::commands;
use super::rule_set::verify_authors;
use super::Engine;

impl Engine {
    /// The counts after a pass, for `fleetbus clusters progress` (see `progress`).
    pub(super) fn measure(&self, now: chrono::DateTime<chrono::Utc>) -> SyncProgress {
        let count = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
        let reports = self.status.reports.values();
        SyncProgress {
            cluster: self.io.ctx.cfg.cluster_name.clone(),
            started: self.world.fleet.synced,
            kinds: count(self.world.kinds.len()),
            kinds_ready: count(self.world.kinds.values().filter(|k| k.ready()).count()),
            envelopes: count(self.world.kinds.values().map(|k| k.snapshots.count()).sum()),
            copies_wanted: count(self.sink.held.len()),
            copies_in_sync: reports
                .clone()
                .map(|r| u64::try_from(r.synced).unwrap_or(0))
                .sum(),
            errors: count(reports.clone().map(|r| r.errors.len()).sum()),
            conflicts: count(reports.map(|r| r.conflicts.len()).sum()),
            updated_at: now,
            error: None,
            retry_after_ms: None,
        }
    }

    /// When the engine wants to run a pass even without input.
    pub fn wake_at(&self) -> Option<Instant> {
        // Each stage says when it wants a pass; the engine takes the earliest.
        let rollout = crate::sync::rollout::sink::fetch_wake(&self.rollout);
        [
            self.pending.rediscover_at,
            self.source.wake,
            self.sink.wake_at(),
            self.drift.wake_at(),
            self.returns.wake,
            self.status.due,
            rollout,
            self.rollout.wake,
            self.placement.wake,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The source side (`source::publish`), unless publishing is held: the
    /// kinds' dirty sets go to the pass, and what it published comes back
    /// into the World (our own envelopes; objects to plan again). Returns
    /// when the source side wants the next pass.
    async fn source_step(&mut self) -> Option<Instant> {
        if let Some(hold) = publish::held(&mut self.source) {
            return Some(hold);
        }
        let work: Vec<publish::Work> = self
            .world
            .kinds
            .iter_mut()
            .filter(|(_, k)| k.source && k.ready())
            .map(|(gvk, k)| publish::Work {
                gvk: gvk.clone(),
                full: std::mem::take(&mut k.source_full),
                dirty: std::mem::take(&mut k.source_dirty),
            })
            .collect();
        let (world, ctx, tx) = (&self.world, &self.io.ctx, &self.io.tx);
        let done = publish::source_pass(world, &mut self.source, ctx, tx, work).await;
        for (gvk, key, env) in done.envelopes {
            if let Some(kind) = self.world.kinds.get_mut(&gvk) {
                kind.snapshots.insert(key, env);
            }
        }
        for (gvk, key) in done.again {
            if let Some(kind) = self.world.kinds.get_mut(&gvk) {
                kind.source_dirty.insert(key);
            }
        }
        done.wake
    }

    /// One pass over everything (see the module docs).
    pub async fn pass(&mut self) {
        let started = Instant::now();
        // Timers are set again by whatever still needs them in this pass; a
        // due timer left standing would wake the loop at once, forever.
        self.drift.wake = None;
        self.source.wake = None;
        self.returns.wake = None;
        if self.pending.rules_dirty {
            if let Some(kind) = self.world.kinds.get(&rules::rule_gvk()) {
                let objects: Vec<Value> = kind.objects.values().collect();
                let objects: Vec<&Value> = objects.iter().collect();
                let mut rules = rules::compile(&objects);
                verify_authors(&mut rules, kind, &self.io.ctx.mark);
                // Rules are mesh-wide: a rule a peer publishes counts here even
                // while its local copy is missing (deleted by someone, not yet
                // written), so its copies are neither collected nor its
                // objects tombstoned in the moment before the copy is back.
                for (name, rule) in self.bus_rules(kind) {
                    rules.entry(name).or_insert(rule);
                }
                self.pending.rules_dirty = false;
                // A rule object's status written (by us: its counts change
                // with every copy) or replicated again compiles to the same
                // rules: nothing below concerns it, and a full plan of every
                // object per status write would make every change cost a
                // pass over every object (docs/design/memory.md).
                let fleet_moved = std::mem::take(&mut self.pending.fleet_moved);
                if rules != self.world.rules || fleet_moved {
                    self.rules_changed(rules);
                }
            }
        }
        let read = policy_watch::policy_pass(&self.world, &mut self.policy, &self.io.ctx).await;
        if let Some(read) = read {
            self.world.policy = read.policy;
            if read.replan {
                // What is published and written depends on the policy like on
                // the rules: plan every object and copy again.
                self.rules_changed(self.world.rules.clone());
                self.sink.dirty.full = true;
            }
        }
        let rules_read = self
            .world
            .kinds
            .get(&rules::rule_gvk())
            .is_some_and(|k| k.ready());
        if !self.world.fleet.synced || !policy_watch::policy_known(&self.world) || !rules_read {
            // Who may be a source (ourselves included) is unknown until the
            // registry has been read: publishing or collecting now could
            // act on an empty fleet. What the policy allows is unknown until
            // it has been read, and who authored each rule until the rules
            // on the bus have been (`verify_authors`): publishing, writing
            // or collecting now could act on a default the cluster replaced,
            // or take a copied rule for a local one.
            self.ensure_kinds().await;
            return;
        }
        self.io.ctx.metrics.sync_passes.inc();
        self.source.wake = self.source_step().await;
        self.ensure_kinds().await;
        let passed = crate::sync::sink::pass::sink_pass(
            &self.world,
            &mut self.sink,
            &mut self.drift,
            (&mut self.rollout, &self.placement),
            &self.source,
            &self.io.ctx,
            &self.io.tx,
        )
        .await;
        self.drift.wake = passed.wake;
        self.status.reports = passed.reports;
        // The stages after the sink's: each gets the World, its own state,
        // what it reads of another's, and the context; the engine keeps what
        // each returns (its wake-up; the readiness the rules' status shows).
        let (world, ctx) = (&self.world, &*self.io.ctx);
        let reports = &self.status.reports;
        policy_watch::count_refusals(world, reports, &mut self.policy, ctx).await;
        let book = &mut self.returns.book;
        self.returns.wake = report::report_pass(world, &self.sink, book, ctx).await;
        if let Some(r) = returned::return_pass(world, &mut self.returns.book, ctx).await {
            self.status.set_readiness(&r.per_rule, r.unhealthy);
        }
        let returns = &self.returns.book;
        self.rollout.wake =
            rollout::origin::rollout_pass(world, &mut self.rollout, returns, ctx).await;
        self.placement.wake =
            placement::origin::placement_pass(world, &mut self.placement, returns, ctx).await;
        let (last_sync, books) = (&self.sink.last_sync, (&self.rollout, &self.placement));
        self.status.due = status::status_pass(world, &mut self.status, last_sync, books, ctx).await;
        // A retry due when the pass began was decided in it (tried, or backed
        // off again with a later time). One that fell due while the pass ran
        // was not: it stays, and its due time wakes the next pass at once.
        // Dropping it too lost the retry until some other input touched the
        // copy (a pass straddling the due time, under load).
        self.sink.retries.retain(|_, r| r.at > started);
        // Bookkeeping of objects and rules that are gone.
        let rules = &self.world.rules;
        self.sink
            .last_sync
            .retain(|name, _| rules.contains_key(name));
        let kinds = &self.world.kinds;
        self.source.unpublishable.retain(|(key, _)| {
            kinds.values().any(|k| {
                k.objects
                    .contains_key(&(key.namespace.clone(), key.name.clone()))
            })
        });
    }
}

/// Runs sync until `cancel`.
#[tracing::instrument(name = "sync", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(
    reg: Arc<crate::registry::Registry>,
    cancel: CancellationToken,
) -> Result<(), crate::sync::SyncError> {
    let (tx, mut rx) = mpsc::channel::<Input>(4096);
    let mut fleet = reg.fleet();
    let initial = fleet.borrow_and_update().clone();
    let mut engine = Engine::new(reg.ctx.clone(), tx, cancel.child_token(), initial);
    // `fleetbus drift correct`, `rules preview` (and its `preview-source`)
    // and `rules rollout`: each verb's own server, answered here.
    let (handoff_tx, mut handoffs) = mpsc::channel(16);
    commands::spawn(&reg.ctx, &handoff_tx, &cancel)?;
    // Status reports: ours (read back before publishing more) and those
    // about our objects. Stops with the engine's token.
    tokio::spawn(watches::status_consumer(
        reg.ctx.clone(),
        engine.io.tx.clone(),
        engine.io.cancel.clone(),
    ));
    // Rollout records: what this sink may run, what this origin decided.
    tokio::spawn(crate::sync::inputs::rollouts::rollout_consumer(
        reg.ctx.clone(),
        engine.io.tx.clone(),
        engine.io.cancel.clone(),
    ));
    // Placement records: where copies live, what this origin decided.
    tokio::spawn(crate::sync::inputs::placements::placement_consumer(
        reg.ctx.clone(),
        engine.io.tx.clone(),
        engine.io.cancel.clone(),
    ));
    let mut health = reg.health();
    engine.world.health = health.borrow_and_update().clone();
    let progress = crate::sync::progress::Progress::new(&reg.ctx.cfg.cluster_name);
    let serving = crate::sync::progress::serve(
        reg.ctx.clone(),
        progress.subscribe(),
        engine.sink.in_flight.clone(),
        cancel.clone(),
    );
    tokio::spawn(serving);
    engine.pass().await;
    progress.record(engine.measure(chrono::Utc::now()));
    let mut unserved = Vec::new();
    say_unserved(&reg, &engine.world, &mut unserved);
    loop {
        let wake = engine.wake_at();
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            Some(h) = handoffs.recv() => {
                let pass = h.pass_after();
                engine.answer(h).await;
                if !pass {
                    continue;
                }
            }
            input = rx.recv() => {
                let Some(input) = input else { return Ok(()) };
                engine.handle(input);
                // Drain what else is queued: one pass per batch, not per event.
                while let Ok(more) = rx.try_recv() {
                    engine.handle(more);
                }
            }
            changed = fleet.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                engine.world.fleet = fleet.borrow_and_update().clone();
                // Which peers' rules count depends on the fleet.
                engine.pending.rules_dirty = true;
                engine.pending.fleet_moved = true;
            }
            changed = health.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
                // Read by placement's origin pass alone: no replan.
                engine.world.health = health.borrow_and_update().clone();
            }
            _ = sleep_until_opt(wake) => {}
        }
        let writes = reg.ctx.metrics.writes_made();
        engine.pass().await;
        progress.record(engine.measure(chrono::Utc::now()));
        say_unserved(&reg, &engine.world, &mut unserved);
        // Settled: this pass changed nothing on the API server, and nothing
        // is queued or waiting to be written (see `Metrics::sync_settled`).
        let settled =
            reg.ctx.metrics.writes_made() == writes && engine.status.due.is_none() && rx.is_empty();
        reg.ctx.metrics.sync_settled.set(i64::from(settled));
    }
}

/// Puts the kinds the rules name that discovery does not serve here into
/// this cluster's record, when they changed (`said` is what was put last):
/// placement's origins read it there (`placement::fitness`).
fn say_unserved(reg: &crate::registry::Registry, world: &World, said: &mut Vec<String>) {
    let now = unserved_kinds(world);
    if now != *said {
        reg.update_local_info(|i| i.unserved_kinds.clone_from(&now));
        *said = now;
    }
}

/// The kinds of [`say_unserved`]: those a rule with placement writes that
/// the API server said it does not serve (a failure to ask is not said:
/// it would move placements away), sorted, at most `MAX_UNSERVED_KINDS`,
/// none longer than a record allows (a name that long is not said; the
/// copies then fail there and say so).
fn unserved_kinds(world: &World) -> Vec<String> {
    let placed: std::collections::HashSet<&kube::core::GroupVersionKind> = world
        .rules
        .values()
        .filter(|r| !r.builtin && r.spec.placement.is_some())
        .flat_map(|r| r.targets.iter())
        .collect();
    unserved_of(world.unresolved.iter(), &placed)
}

fn unserved_of<'a>(
    unresolved: impl Iterator<
        Item = (
            &'a kube::core::GroupVersionKind,
            &'a crate::sync::world::Unresolved,
        ),
    >,
    placed: &std::collections::HashSet<&kube::core::GroupVersionKind>,
) -> Vec<String> {
    use fleetbus_schemas::registry::{kind_id, MAX_TEXT_LEN, MAX_UNSERVED_KINDS};
    let mut out: Vec<String> = unresolved
        .filter(|(g, u)| u.not_served && placed.contains(g))
        .map(|(g, _)| kind_id(&g.group, &g.version, &g.kind))
        .filter(|k| k.len() <= MAX_TEXT_LEN)
        .collect();
    out.sort();
    out.truncate(MAX_UNSERVED_KINDS);
    out
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use kube::core::GroupVersionKind;

    use crate::sync::world::Unresolved;

    /// Only kinds the API server said it does not serve, that a placement
    /// rule writes, and that fit a record are said to peers: a discovery
    /// timeout must not move placements, and one long name must not make
    /// the whole record invalid.
    #[test]
    fn only_kinds_said_not_served_for_placement_rules_are_published() {
        let gvk = |g: &str, k: &str| GroupVersionKind::gvk(g, "v1", k);
        let no = |why: &str| Unresolved {
            not_served: true,
            why: why.into(),
        };
        let long = "g".repeat(253);
        let unresolved: HashMap<GroupVersionKind, Unresolved> = HashMap::from([
            (gvk("example.com", "Widget"), no("404")),
            (gvk("", "Gadget"), no("missing kind")),
            (
                gvk("example.com", "Timeout"),
                Unresolved {
                    not_served: false,
                    why: "deadline".into(),
                },
            ),
            (gvk("example.com", "Unplaced"), no("404")),
            (gvk(&long, &"K".repeat(40)), no("404")),
        ]);
        let placed_kinds = [
            gvk("example.com", "Widget"),
            gvk("", "Gadget"),
            gvk("example.com", "Timeout"),
            gvk(&long, &"K".repeat(40)),
        ];
        let placed: std::collections::HashSet<&GroupVersionKind> = placed_kinds.iter().collect();
        assert_eq!(
            super::unserved_of(unresolved.iter(), &placed),
            vec!["example.com/v1/Widget".to_owned(), "v1/Gadget".to_owned()]
        );
    }
}
