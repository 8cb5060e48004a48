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

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use fleetbus_schemas::command::CorrectRequest;
#[cfg(test)]
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::progress::SyncProgress;
use fleetbus_schemas::subject::ObjectKey;
use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::drift::state::DriftState;
use super::inputs::watches;
use super::model::{BusEvent, Input, LocalEvent, LocalObjects, Snapshots};
use super::policy::policy_gvk;
use super::policy_watch::PolicyState;
use super::returns::state::ReturnsState;
use super::rules::compile::{self as rules, RuleSet};
use super::sink::state::SinkState;
use super::source::state::SourceState;
use super::status::StatusState;
pub use super::world::{config_map_gvk, crd_gvk, namespace_gvk, KindState, World};
use crate::context::Context;
use crate::mark::CopyMark;
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
}

impl Engine {
    /// The counts after a pass, for `fleetbus clusters progress` (see `progress`).
    fn measure(&self, now: chrono::DateTime<chrono::Utc>) -> SyncProgress {
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
        }
    }

    /// Folds one input into the state.
    pub fn handle(&mut self, input: Input) {
        match input {
            Input::Local(gvk, ev) => self.local_event(gvk, ev),
            Input::Bus(gvk, ev) => self.bus_event(gvk, ev),
            Input::Status(ev) => self.status_event(ev),
            Input::Rollout(ev) => self.rollout_event(ev),
            Input::Version(v, got) => self.version_event(v, got),
            Input::PublishFailed(gvk, key, before, sent) => {
                self.io.ctx.metrics.sync_rejected("publish_failed");
                // Believe what makes the next pass publish again whatever
                // the bus holds now (a lost tombstone included).
                if let Some(k) = self.world.kinds.get_mut(&gvk) {
                    k.source_full = true;
                    match super::model::believed_after_failure(before, *sent) {
                        Some(env) => {
                            k.snapshots.insert(key, env);
                        }
                        None => {
                            k.snapshots.remove(&key);
                        }
                    }
                }
                // Not again at once: the next pass would fail the same way
                // (a stream gone, NATS away) and loop. Have the layout
                // checked, and publish again in a second.
                self.source.hold = Some(Instant::now() + Duration::from_secs(1));
                self.io.ctx.check_layout.notify_one();
            }
            Input::PublishDuplicate(gvk, key, before) => {
                // We published because the bus differed from our object, and
                // the server dropped it: its id (origin, uid, version) was
                // used within the duplicate window, typically by our own
                // first publication of this version before someone wrote
                // over it. Believe again what the bus holds and publish at
                // once with a fresh id (`overwritten`).
                self.io.ctx.metrics.sync_rejected("publish_duplicate");
                tracing::info!(object = %super::model::meta::describe_key(&key), "our subject holds a message we did not publish; publishing ours again");
                if let Some(k) = self.world.kinds.get_mut(&gvk) {
                    match before {
                        Some(env) => k.snapshots.insert(key.clone(), *env),
                        None => {
                            k.snapshots.remove(&key);
                        }
                    };
                    k.source_dirty.insert(key.clone());
                }
                self.source.overwritten.insert(key);
            }
        }
    }

    fn local_event(&mut self, gvk: GroupVersionKind, ev: LocalEvent) {
        if gvk == rules::rule_gvk() {
            self.pending.rules_dirty = true;
        }
        if gvk == crd_gvk() && !self.world.unresolved.is_empty() {
            self.pending.rediscover = true;
        }
        if gvk == policy_gvk() {
            self.policy.dirty = true;
        }
        if gvk == crd_gvk() {
            // A CRD added, changed (its status subresource too) or deleted.
            self.returns.book.forget_discovery();
        }
        if gvk == namespace_gvk() || gvk == crd_gvk() {
            // A namespace created, recreated or done terminating, or a CRD's
            // schema changed, can make a refused write succeed: try the
            // failing copies again now (their backoff goes on if they fail).
            let now = Instant::now();
            for r in self.sink.retries.values_mut() {
                r.at = r.at.min(now);
            }
        }
        if gvk == namespace_gvk() {
            // Whether a copy's namespace exists is part of every decision
            // in it: decided again, all (namespaces change rarely).
            self.sink.dirty.full = true;
        }
        let Some(kind) = self.world.kinds.get_mut(&gvk) else {
            return;
        };
        match ev {
            LocalEvent::Reset => kind.relist = Some(LocalObjects::default()),
            LocalEvent::Upsert(seen) => {
                // The watch works again (kube-runtime resumes after most
                // errors without a re-list); during a re-list the view is
                // whole again only once it is `Listed`.
                if kind.relist.is_none() {
                    kind.watch_error = None;
                }
                let Some(key) = seen.key else { return };
                // A copy as its watch saw it after our write is the write's
                // response, byte for byte: kept once (see `Packed::shared_with`).
                let object = match seen
                    .target
                    .as_ref()
                    .and_then(|t| self.sink.baselines.get(t))
                {
                    Some(b) => seen.object.shared_with(&b.server),
                    None => seen.object,
                };
                if let Some(t) = seen.target.map(|t| self.sink.plan.shared(t)) {
                    self.sink.dirty.targets.insert(t.clone());
                    // A copy the last pass did not want may be one to collect.
                    if !self.sink.held.contains_key(&t) && seen.annotated_copy {
                        self.sink.collect.insert(t.clone());
                    }
                    self.drift.seen.insert(t, Instant::now());
                }
                if kind.source {
                    if let Some(k) = seen.source {
                        kind.source_dirty.insert(k);
                    }
                }
                match &mut kind.relist {
                    Some(relist) => {
                        relist.insert_packed(key, object);
                    }
                    None => {
                        kind.objects.insert_packed(key, object);
                    }
                }
            }
            LocalEvent::Remove(seen) => {
                if kind.relist.is_none() {
                    kind.watch_error = None;
                }
                if let Some(t) = seen.target.map(|t| self.sink.plan.shared(t)) {
                    self.sink.dirty.targets.insert(t.clone());
                    self.drift.seen.insert(t, Instant::now());
                }
                if kind.source {
                    if let Some(k) = seen.source {
                        kind.source_dirty.insert(k);
                    }
                }
                if let Some(key) = seen.key {
                    kind.objects.remove(&key);
                    if let Some(relist) = &mut kind.relist {
                        relist.remove(&key);
                    }
                }
            }
            LocalEvent::Listed => {
                // Rules become ready; a re-list may have dropped copies.
                self.sink.collect_due = true;
                // Objects may have gone or changed between the two lists.
                self.sink.dirty.full = true;
                if let Some(relist) = kind.relist.take() {
                    kind.objects = relist;
                }
                // Objects may have gone or changed between the two lists.
                kind.source_full = true;
                kind.listed = true;
                kind.watch_error = None;
                // The API answers again (a watch lists after it started
                // again): copies of this kind that failed meanwhile, maybe
                // for want of that API, are tried now, not after their
                // backoff (up to 5 min after a long outage).
                let now = Instant::now();
                for (t, r) in self.sink.retries.iter_mut() {
                    if t.gvk() == gvk {
                        r.at = r.at.min(now);
                    }
                }
            }
            LocalEvent::Error(e) => {
                tracing::warn!(kind = %super::model::meta::describe_gvk(&gvk), error = %e, "local watch failed; retrying");
                kind.watch_error = Some(e);
            }
        }
    }

    fn bus_event(&mut self, gvk: GroupVersionKind, ev: BusEvent) {
        if gvk == rules::rule_gvk() {
            self.pending.rules_dirty = true;
        }
        let Some(kind) = self.world.kinds.get_mut(&gvk) else {
            return;
        };
        match ev {
            BusEvent::Reset => kind.resnap = Some(Snapshots::default()),
            BusEvent::Item(key, mut env) => {
                self.sink.dirty.keys.insert(key.clone());
                // Secure mode: an older version of a peer's object replayed
                // over a newer one (validly signed, once) is dropped, and
                // what was held is kept (also through a re-read). Our own
                // subtree needs no such check: the plan publishes ours
                // again over anything that differs.
                if self.io.ctx.cfg.trust.is_some() && key.origin != self.world.fleet.local.name {
                    let replayed = kind
                        .snapshots
                        .meta(&key)
                        .is_some_and(|old| crate::trust::is_replay(old, env.meta()));
                    if replayed {
                        let what = super::model::meta::describe_key(&key);
                        self.io
                            .ctx
                            .reject(&key.origin, crate::trust::reason::REPLAY, &what);
                        if let (Some(resnap), Some(held)) =
                            (&mut kind.resnap, kind.snapshots.get(&key))
                        {
                            resnap.insert(key, held);
                        }
                        return;
                    }
                }
                // Kept (a cluster may join later) but never applied: only
                // members are sources. Counted, so a stranger's messages
                // are not dropped silently.
                let fleet = &self.world.fleet;
                if fleet.synced
                    && key.origin != fleet.local.name
                    && !fleet.peers.contains_key(&key.origin)
                {
                    self.io.ctx.metrics.sync_rejected("unknown_origin");
                    tracing::warn!(origin = %key.origin, object = %super::model::meta::describe_key(&key), "envelope from a cluster that is no member; not applied");
                }
                if key.origin == self.io.ctx.cfg.cluster_name {
                    // Our subtree as the bus holds it (our publish read back,
                    // or someone's message on our subject): the hash was
                    // recomputed from the content on receipt (`watches`), so
                    // the next plan compares what was received with what we
                    // publish. What the hash leaves out is compared here; a
                    // difference is believed with no hash, so the plan finds
                    // it differs and publishes ours again.
                    let local = kind.objects.get(&(key.namespace.clone(), key.name.clone()));
                    if let (Some(received), Some(local)) = (env.object(&key), local) {
                        if !super::source::published::same_identity(&received, &local) {
                            env.clear_hash();
                        }
                    }
                    // Only uid, resourceVersion and hash are kept (`source`);
                    // the object is the local one.
                    env.drop_object();
                    kind.source_dirty.insert(key.clone());
                }
                match &mut kind.resnap {
                    Some(resnap) => {
                        resnap.insert_packed(key, env);
                    }
                    None => {
                        kind.snapshots.insert_packed(key, env);
                    }
                }
            }
            BusEvent::Unreadable(key) => {
                self.sink.dirty.keys.insert(key.clone());
                // Someone overwrote the last value of one of our live
                // objects' subjects: a sink (re)starting would find no
                // snapshot and collect its copy. Forget it so the next pass
                // publishes it again (with a fresh msg id: the old one is
                // still in the server's duplicate window).
                if key.origin == self.world.fleet.local.name
                    && kind.snapshots.remove(&key).is_some_and(|e| !e.tombstone)
                {
                    kind.source_dirty.insert(key.clone());
                    self.source.overwritten.insert(key);
                }
            }
            BusEvent::CaughtUp => {
                // Only the end of a read or re-read concerns every object
                // (the consumer says it once per read, see `follow`; one
                // said again changes nothing).
                let reread = kind.resnap.is_some() || !kind.caught_up;
                if let Some(resnap) = kind.resnap.take() {
                    kind.snapshots = resnap;
                }
                if reread {
                    // Rules become ready.
                    self.sink.collect_due = true;
                    // Envelopes may have gone or changed during the re-read.
                    self.sink.dirty.full = true;
                    kind.source_full = true;
                }
                kind.caught_up = true;
            }
        }
    }

    /// The rules peers publish (live, original, from a peer that may be a
    /// source), compiled.
    fn bus_rules(&self, kind: &KindState) -> RuleSet {
        let objects: Vec<Value> = kind
            .snapshots
            .iter_meta()
            .filter(|(key, env)| {
                key.origin != self.world.fleet.local.name
                    && !env.tombstone
                    && self
                        .world
                        .fleet
                        .peers
                        .get(&key.origin)
                        .is_some_and(|p| p.may_be_source())
            })
            .filter_map(|(key, _)| Some((key, kind.snapshots.get(key)?.object?)))
            .filter(|(_, obj)| super::model::meta::is_original(obj))
            // The author is the origin the rule was read from, as the
            // sink stamps it on the rule's copy (see `sync::policy`).
            .map(|(key, mut obj)| {
                if let Some(m) = obj.pointer_mut("/metadata").and_then(Value::as_object_mut) {
                    let a = m
                        .entry("annotations")
                        .or_insert_with(|| serde_json::json!({}));
                    if let Some(a) = a.as_object_mut() {
                        a.insert(
                            fleetbus_schemas::well_known::ANNOTATION_ORIGIN_CLUSTER.to_owned(),
                            Value::String(key.origin.clone()),
                        );
                    }
                }
                obj
            })
            .collect();
        let mut set = rules::compile(&objects.iter().collect::<Vec<_>>());
        set.remove(rules::RULE_REPLICATION);
        for r in set.values_mut() {
            r.author_verified = true;
        }
        set
    }

    /// The kinds the current rules need, and whether each is a source.
    fn needed_kinds(&self) -> HashMap<GroupVersionKind, bool> {
        let mut need: HashMap<GroupVersionKind, bool> = HashMap::new();
        need.insert(rules::rule_gvk(), true);
        need.insert(namespace_gvk(), false);
        need.insert(crd_gvk(), false);
        need.insert(policy_gvk(), false);
        need.insert(rules::reported_state_gvk(), false);
        for rule in self.world.rules.values() {
            if rule.builtin || rule.spec.group_version_kind.kind.is_empty() {
                continue;
            }
            // Kinds of rules with a bad spec are not started; kinds of rules
            // that are only waiting for their kind are (discovery decides).
            if rule.problem.is_some() {
                continue;
            }
            *need.entry(rule.source.clone()).or_default() = true;
            for t in &rule.targets {
                need.entry(t.clone()).or_default();
            }
            if !rule.spec.values_from.is_empty() {
                need.entry(config_map_gvk()).or_default();
            }
        }
        // The kinds of the manifests unwrap rules bring here (a Bundle gone,
        // they stay while copies remain, like any kind: `has_leftovers`).
        for g in self.bundle_kinds() {
            need.entry(g).or_default();
        }
        need
    }

    /// Starts the tasks of kinds newly needed and stops those no longer needed.
    async fn ensure_kinds(&mut self) {
        let need = self.needed_kinds();
        let local = self.world.fleet.local.name.clone();
        // A kind no rule needs any more stays until what it left behind is
        // cleaned up: copies here (collected per orphan policy) and our own
        // envelopes on the bus (tombstoned), both of which need its watch.
        self.world
            .kinds
            .retain(|gvk, k| need.contains_key(gvk) || (k.ready() && k.has_leftovers(&local)));
        self.world
            .unresolved
            .retain(|gvk, _| need.contains_key(gvk));
        let due = self.pending.rediscover
            || self
                .pending
                .rediscover_at
                .is_some_and(|at| at <= Instant::now());
        for (gvk, source) in need {
            if let Some(kind) = self.world.kinds.get_mut(&gvk) {
                if source && !kind.source {
                    kind.source = true;
                    self.start_consumer(&gvk);
                }
                continue;
            }
            if self.world.unresolved.contains_key(&gvk) && !due {
                continue;
            }
            match watches::resolve(&self.io.ctx.client, &gvk).await {
                Ok((ar, namespaced)) => {
                    self.world.unresolved.remove(&gvk);
                    self.start_kind(gvk, ar, namespaced, source);
                }
                Err(why) => {
                    tracing::info!(kind = %super::model::meta::describe_gvk(&gvk), %why, "kind not available yet");
                    self.world.unresolved.insert(gvk, why);
                }
            }
        }
        self.pending.rediscover = false;
        // Discovery can lag the CRD event; look again now and then while
        // some kind is missing.
        // Set once, not pushed back by every pass (a busy cluster would
        // postpone it forever).
        if self.world.unresolved.is_empty() {
            self.pending.rediscover_at = None;
        } else if due || self.pending.rediscover_at.is_none() {
            self.pending.rediscover_at = Some(Instant::now() + Duration::from_secs(5));
        }
    }

    fn start_kind(
        &mut self,
        gvk: GroupVersionKind,
        ar: ApiResource,
        namespaced: bool,
        source: bool,
    ) {
        let stop = self.io.cancel.child_token();
        tokio::spawn(watches::local_watch(
            self.io.ctx.clone(),
            gvk.clone(),
            ar.clone(),
            self.io.tx.clone(),
            stop.clone(),
        ));
        self.world.kinds.insert(
            gvk.clone(),
            KindState {
                ar,
                namespaced,
                objects: LocalObjects::default(),
                relist: None,
                listed: false,
                watch_error: None,
                source: false,
                snapshots: Snapshots::default(),
                resnap: None,
                caught_up: false,
                source_dirty: BTreeSet::new(),
                source_full: true,
                _guard: stop.clone().drop_guard(),
                stop,
            },
        );
        if source {
            if let Some(k) = self.world.kinds.get_mut(&gvk) {
                k.source = true;
            }
            self.start_consumer(&gvk);
        }
    }

    fn start_consumer(&self, gvk: &GroupVersionKind) {
        let Some(kind) = self.world.kinds.get(gvk) else {
            return;
        };
        // The consumer stops with the kind (its DropGuard cancels the token).
        let stop = kind.stop.clone();
        tokio::spawn(watches::bus_consumer(
            self.io.ctx.clone(),
            gvk.clone(),
            self.io.tx.clone(),
            stop,
        ));
    }

    /// When the engine wants to run a pass even without input.
    pub fn wake_at(&self) -> Option<Instant> {
        self.sink
            .retries
            .values()
            .map(|r| r.at)
            .chain(self.pending.rediscover_at)
            .chain(self.drift.wake)
            .chain(self.source.wake)
            .chain(self.returns.wake)
            .chain(self.status.due)
            .chain(self.drift.fights.wake_at())
            .chain(self.drift.coalesce.wake_at())
            .chain(self.sink.wake_at())
            .chain(self.fetch_wake())
            .chain(self.rollout.wake)
            .min()
    }

    /// Takes newly compiled rules that differ from the last (or were
    /// compiled under a changed fleet): what depends on them is done again.
    pub(super) fn rules_changed(&mut self, rules: RuleSet) {
        self.world.rules = rules;
        self.world.rules_generation = self.world.rules_generation.wrapping_add(1);
        // Which objects are published depends on the rules (and, through
        // them, on the fleet): plan every object again.
        for k in self.world.kinds.values_mut() {
            k.source_full = true;
        }
        // Rules gone, invalid or ready again change what is collected.
        self.sink.collect_due = true;
        // Exclusions and drift modes may have changed: what was found equal
        // is compared again.
        for b in self.sink.baselines.values_mut() {
            b.verified = None;
        }
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
                // pass over every object (issue 20).
                let fleet_moved = std::mem::take(&mut self.pending.fleet_moved);
                if rules != self.world.rules || fleet_moved {
                    self.rules_changed(rules);
                }
            }
        }
        self.policy_pass().await;
        let rules_read = self
            .world
            .kinds
            .get(&rules::rule_gvk())
            .is_some_and(|k| k.ready());
        if !self.world.fleet.synced || !self.policy_known() || !rules_read {
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
        self.source.wake = self.source_pass().await;
        self.ensure_kinds().await;
        self.drift.wake = self.sink_pass().await;
        self.count_refusals().await;
        self.returns.wake = self.report_pass().await;
        self.return_pass().await;
        self.rollout_pass().await;
        self.status_pass().await;
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

/// Marks each rule whose claimed author (`fleetbus.io/origin-cluster` on its
/// object here) has a live envelope of it on the bus: a claim without one
/// is an annotation someone wrote on a local rule, or a copy whose
/// envelope is not read yet (see `sink::pass::import_refused`).
fn verify_authors(rules: &mut RuleSet, kind: &KindState, marker: &CopyMark) {
    let gvk = rules::rule_gvk();
    let api_version = format!("{}/{}", gvk.group, gvk.version);
    for r in rules.values_mut() {
        let Some(author) = &r.author else { continue };
        // A rule object that names an origin but is no copy this agent
        // wrote is a local rule: its annotation claims nothing (`model::mark`).
        let copied_from = kind
            .objects
            .get(&(None, r.name.clone()))
            .and_then(|o| marker.copy_origin(&o).map(str::to_owned));
        if copied_from.as_deref() != Some(author.as_str()) {
            r.author = None;
            r.author_verified = false;
            continue;
        }
        let key = ObjectKey::from_api_version(author, &api_version, &gvk.kind, None, &r.name);
        r.author_verified = kind.snapshots.meta(&key).is_some_and(|e| !e.tombstone);
    }
}

/// The namespace and name of an object (the model's, kept here for its readers).
pub use super::model::meta::local_key;

/// Runs sync until `cancel`.
#[tracing::instrument(name = "sync", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(
    reg: Arc<crate::registry::Registry>,
    cancel: CancellationToken,
) -> Result<(), super::SyncError> {
    let (tx, mut rx) = mpsc::channel::<Input>(4096);
    let mut fleet = reg.fleet();
    let initial = fleet.borrow_and_update().clone();
    let mut engine = Engine::new(reg.ctx.clone(), tx, cancel.child_token(), initial);
    let mut cmds = Commands::new(&reg.ctx);
    // Without the subscriptions `fleetbus drift correct` and `rules preview`
    // (and its `preview-source`) find no responder; sync goes on while a failed subscribe is retried.
    let (mut commands, mut previews, mut preview_sources) = (None, None, None);
    let subscribing = {
        let (client, cancel) = (cmds.client.clone(), cancel.clone());
        let (correct, preview) = (cmds.correct_subject.clone(), cmds.preview_subject.clone());
        let source = cmds.preview_source_subject.clone();
        async move {
            let correct = crate::bus::command_sub::subscribe(&client, &correct, &cancel).await;
            let preview = crate::bus::command_sub::subscribe(&client, &preview, &cancel).await;
            let source = crate::bus::command_sub::subscribe(&client, &source, &cancel);
            (correct, preview, source.await)
        }
    };
    tokio::pin!(subscribing);
    let mut subscribed = false;
    // Status reports: ours (read back before publishing more) and those
    // about our objects. Stops with the engine's token.
    tokio::spawn(watches::status_consumer(
        reg.ctx.clone(),
        engine.io.tx.clone(),
        engine.io.cancel.clone(),
    ));
    // Rollout records: what this sink may run, what this origin decided.
    tokio::spawn(super::inputs::rollouts::rollout_consumer(
        reg.ctx.clone(),
        engine.io.tx.clone(),
        engine.io.cancel.clone(),
    ));
    // `fleetbus rules rollout`: admitted by its own rate bucket, applied here.
    let (rollout_tx, mut rollout_rx) = mpsc::channel(16);
    tokio::spawn(super::rollout::serve::serve(
        reg.ctx.clone(),
        rollout_tx,
        cancel.child_token(),
    ));
    let progress = super::progress::Progress::new(&reg.ctx.cfg.cluster_name);
    let serving = super::progress::serve(
        reg.ctx.clone(),
        progress.subscribe(),
        engine.sink.in_flight.clone(),
        cancel.clone(),
    );
    tokio::spawn(serving);
    engine.pass().await;
    progress.record(engine.measure(chrono::Utc::now()));
    loop {
        let wake = engine.wake_at();
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            subs = &mut subscribing, if !subscribed => {
                subscribed = true;
                (commands, previews, preview_sources) = subs;
                continue;
            }
            Some(msg) = next_command(&mut commands) => {
                cmds.correct(&mut engine, msg).await;
                continue;
            }
            Some(msg) = next_command(&mut previews) => {
                // Read-only: no pass follows it.
                cmds.preview(&mut engine, msg).await;
                continue;
            }
            Some(msg) = next_command(&mut preview_sources) => {
                // Read-only too: no pass follows it.
                cmds.preview_source(&engine, msg).await;
                continue;
            }
            Some(req) = rollout_rx.recv() => {
                let reply = engine.rollout_request(&req.payload).await;
                super::rollout::serve::respond(&reg.ctx, req.reply, &reply).await;
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
            _ = sleep_until_opt(wake) => {}
        }
        let writes = reg.ctx.metrics.writes_made();
        engine.pass().await;
        progress.record(engine.measure(chrono::Utc::now()));
        // Settled: this pass changed nothing on the API server, and nothing
        // is queued or waiting to be written (see `Metrics::sync_settled`).
        let settled =
            reg.ctx.metrics.writes_made() == writes && engine.status.due.is_none() && rx.is_empty();
        reg.ctx.metrics.sync_settled.set(i64::from(settled));
    }
}

/// The commands the engine answers in its own loop, `correct`, `preview`
/// and `preview-source`: their subjects, each verb's own rate bucket (a flood of
/// previews, each of which may cost dry runs, starves no correction), and
/// how to reply.
struct Commands {
    ctx: Arc<Context>,
    client: async_nats::Client,
    correct_subject: String,
    preview_subject: String,
    preview_source_subject: String,
    correct_rate: crate::bus::rate::TokenBucket,
    preview_rate: crate::bus::rate::TokenBucket,
    /// Its own bucket: one preview asks each origin for a page or more.
    preview_source_rate: crate::bus::rate::TokenBucket,
}

impl Commands {
    fn new(ctx: &Arc<Context>) -> Commands {
        let name = &ctx.cfg.cluster_name;
        let prefix = ctx.layout.prefix();
        let (now, rate) = (std::time::Instant::now(), ctx.cfg.command_rate);
        Commands {
            ctx: ctx.clone(),
            client: ctx.js.client(),
            correct_subject: fleetbus_schemas::subject::CommandKey::correct(name)
                .to_subject(prefix),
            preview_subject: fleetbus_schemas::subject::CommandKey::preview(name)
                .to_subject(prefix),
            preview_source_subject: fleetbus_schemas::subject::CommandKey::preview_source(name)
                .to_subject(prefix),
            correct_rate: crate::bus::rate::TokenBucket::new("correct", rate, now),
            preview_rate: crate::bus::rate::TokenBucket::new("preview", rate, now),
            preview_source_rate: crate::bus::rate::TokenBucket::new("preview-source", rate, now),
        }
    }

    /// Checks `msg`'s signature in the secure mode (PROTOCOL §6.7).
    fn authorize(
        &self,
        verb: &'static str,
        subject: &str,
        msg: &async_nats::Message,
    ) -> Result<(), String> {
        crate::bus::command_sub::authorize(
            self.ctx.cfg.trust.as_deref(),
            &self.ctx.metrics,
            verb,
            subject,
            &msg.payload,
        )
    }

    async fn correct(&mut self, engine: &mut Engine, msg: async_nats::Message) {
        let admitted = crate::bus::command_sub::admit(&mut self.correct_rate, &self.ctx.metrics);
        let reply = match admitted.map(|()| {
            self.authorize("correct", &self.correct_subject, &msg)
                .and_then(|()| parse_correct(&msg.payload))
        }) {
            Err(refused) => engine.refuse_for_rate(&refused),
            Ok(Ok(req)) => engine.correct(&req).await,
            Ok(Err(e)) => engine.refuse(&e),
        };
        let trust = self.ctx.cfg.trust.as_deref();
        respond(&self.client, trust, msg.reply, reply.encode(), "correct").await;
    }

    async fn preview(&mut self, engine: &mut Engine, msg: async_nats::Message) {
        let admitted = crate::bus::command_sub::admit(&mut self.preview_rate, &self.ctx.metrics);
        // A preview writes nothing, but it costs dry runs and shows what
        // the cluster holds: the fleet root's word is asked for as for the
        // verbs that change state.
        let mut reply =
            match admitted.map(|()| self.authorize("preview", &self.preview_subject, &msg)) {
                Ok(Ok(())) => engine.preview(&msg.payload).await,
                Ok(Err(refused)) => engine.refuse_preview(refused),
                Err(refused) => engine.refuse_preview_for_rate(&refused),
            };
        let trust = self.ctx.cfg.trust.as_deref();
        let bytes = reply.fit(engine.max_payload());
        respond(&self.client, trust, msg.reply, bytes, "preview").await;
    }

    /// `preview-source` (`preview::source`): authorized as `preview` is (it
    /// shows the objects a rule would publish), answered in pages that fit.
    async fn preview_source(&mut self, engine: &Engine, msg: async_nats::Message) {
        let bucket = &mut self.preview_source_rate;
        let admitted = crate::bus::command_sub::admit(bucket, &self.ctx.metrics);
        let verb = fleetbus_schemas::subject::PREVIEW_SOURCE_VERB;
        let subject = &self.preview_source_subject;
        let reply = match admitted.map(|()| self.authorize(verb, subject, &msg)) {
            Ok(Ok(())) => engine.preview_source(&msg.payload).await,
            Ok(Err(refused)) => engine.refuse_preview_source(refused, None),
            Err(r) => engine.refuse_preview_source(r.to_string(), Some(r.retry_after_ms())),
        };
        let trust = self.ctx.cfg.trust.as_deref();
        respond(&self.client, trust, msg.reply, reply.encode(), verb).await;
    }
}

/// Sends a command's encoded reply to `to` (logged when it cannot be).
async fn respond<E: std::fmt::Display>(
    client: &async_nats::Client,
    trust: Option<&crate::trust::Identity>,
    to: Option<async_nats::Subject>,
    bytes: Result<Vec<u8>, E>,
    verb: &str,
) {
    let bytes = match bytes {
        Ok(b) => crate::bus::command_sub::signed_reply(trust, b),
        Err(e) => {
            tracing::warn!(error = %e, verb, "could not encode a command reply");
            return;
        }
    };
    if let Some(to) = to {
        if let Err(e) = client.publish(to, bytes.into()).await {
            tracing::warn!(error = %e, verb, "could not reply to a command");
        }
    }
}

async fn next_command(sub: &mut Option<async_nats::Subscriber>) -> Option<async_nats::Message> {
    use futures::StreamExt;
    match sub {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Reads a request; the error is the reply's `error`.
fn parse_correct(bytes: &[u8]) -> Result<CorrectRequest, String> {
    CorrectRequest::decode(bytes).map_err(|e| format!("cannot read the request: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::model::Target;
    use serde_json::json;

    #[test]
    fn a_rule_author_is_verified_only_by_its_live_envelope_from_that_author() {
        let rule = |name: &str, origin: Option<&str>| {
            let mut obj = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
                "metadata": {"name": name, "uid": "u", "resourceVersion": "1"},
                "spec": {"groupVersionKind": {"version": "v1", "kind": "Secret"}}});
            if let Some(o) = origin {
                obj["metadata"]["annotations"] = json!({"fleetbus.io/origin-cluster": o});
            }
            obj
        };
        use crate::mark::tests::{marked, marker_ref};
        // Copies this agent wrote carry its mark; `forged` only the annotation.
        let copy = marked(rule("copied", Some("hub")));
        let forged = rule("forged", Some("hub"));
        let withdrawn = marked(rule("withdrawn", Some("hub")));
        let own = rule("own", None);
        let mut objects = LocalObjects::default();
        for o in [&copy, &forged, &withdrawn, &own] {
            objects.insert_packed(local_key(o).unwrap(), crate::sync::model::Packed::new(o));
        }
        let env = |name: &str, tombstone: bool| {
            let original = rule(name, None);
            let key = ObjectKey::from_object("hub", &original).unwrap();
            let now = chrono::Utc::now();
            let e = if tombstone {
                Envelope::tombstone(
                    "hub",
                    None,
                    "u",
                    "1",
                    now,
                    fleetbus_schemas::envelope::TombstoneReason::Deleted,
                )
            } else {
                Envelope::snapshot("hub", None, original, now).unwrap()
            };
            (key, e)
        };
        let kind = KindState::for_test(
            objects,
            [
                env("copied", false),
                env("withdrawn", true),
                env("forged", false),
            ]
            .into_iter()
            .collect(),
        );
        let mut set = rules::compile(&[&copy, &forged, &withdrawn, &own]);
        verify_authors(&mut set, &kind, marker_ref());
        assert_eq!(set["copied"].author.as_deref(), Some("hub"));
        assert!(set["copied"].author_verified);
        // The annotation alone claims nothing, even when hub has a rule of
        // that name: it is a local rule.
        assert_eq!(set["forged"].author, None);
        assert!(!set["forged"].author_verified);
        assert!(!set["withdrawn"].author_verified);
        assert_eq!(set["own"].author, None);
        assert_eq!(set["own"].author("c2"), "c2");
    }

    #[test]
    fn target_of_a_namespaced_object() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                         "metadata": {"namespace": "web", "name": "front"}});
        let t = Target::of(&obj).unwrap();
        assert_eq!(
            t,
            Target::from(crate::sync::model::Place {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("web".into()),
                name: "front".into(),
            })
        );
        assert_eq!(t.gvk(), GroupVersionKind::gvk("apps", "v1", "Deployment"));
        assert_eq!(t.local_key(), (Some("web".to_owned()), "front".to_owned()));
        assert_eq!(t.to_string(), "Deployment web/front");
    }

    #[test]
    fn target_of_a_cluster_scoped_or_core_object() {
        // An empty namespace is what some clients send for cluster-scoped objects.
        for meta in [
            json!({"name": "n1"}),
            json!({"name": "n1", "namespace": ""}),
        ] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta});
            let t = Target::of(&obj).unwrap();
            assert_eq!(t.namespace, None);
            assert_eq!(t.gvk(), GroupVersionKind::gvk("", "v1", "Namespace"));
            assert_eq!(t.local_key(), (None, "n1".to_owned()));
            assert_eq!(t.to_string(), "Namespace n1");
        }
    }

    #[test]
    fn target_of_an_object_without_a_place_is_none() {
        for obj in [
            json!({"kind": "Secret", "metadata": {"name": "s"}}),
            json!({"apiVersion": "v1", "metadata": {"name": "s"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": ""}}),
            json!({"apiVersion": "v1", "kind": "Secret"}),
            json!({"apiVersion": 1, "kind": "Secret", "metadata": {"name": "s"}}),
        ] {
            assert_eq!(Target::of(&obj), None, "{obj}");
        }
    }

    fn secret(name: &str, annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"namespace": "apps", "name": name, "uid": format!("u-{name}"),
                            "resourceVersion": "1", "annotations": annotations}})
    }

    fn kind_with(objects: &[Value], snapshots: &[(&str, Envelope)]) -> KindState {
        KindState::for_test(
            objects
                .iter()
                .filter_map(|o| Some((local_key(o)?, o.clone())))
                .collect(),
            snapshots
                .iter()
                .filter_map(|(origin, e)| {
                    let key = ObjectKey::from_object(origin, e.object.as_ref()?)?;
                    Some((key, e.clone()))
                })
                .collect(),
        )
    }

    fn snapshot(origin: &str, obj: &Value) -> Envelope {
        Envelope::snapshot(origin, None, obj.clone(), chrono::Utc::now()).unwrap()
    }

    #[test]
    fn leftovers_are_copies_from_others_and_our_live_envelopes() {
        let original = secret("o", json!({}));
        let copy = secret(
            "c",
            json!({ fleetbus_schemas::well_known::ANNOTATION_ORIGIN_CLUSTER: "c2" }),
        );
        // Nothing: an original, and a peer's envelope.
        assert!(!kind_with(
            std::slice::from_ref(&original),
            &[("c2", snapshot("c2", &original))]
        )
        .has_leftovers("c1"));
        // A copy made from c2's object.
        assert!(kind_with(&[copy], &[]).has_leftovers("c1"));
        // Our own live envelope on the bus (to be tombstoned).
        assert!(kind_with(&[], &[("c1", snapshot("c1", &original))]).has_leftovers("c1"));
        // Our tombstone is not a leftover.
        let mut gone = snapshot("c1", &original);
        gone.tombstone = true;
        assert!(!kind_with(&[], &[("c1", gone)]).has_leftovers("c1"));
    }

    #[test]
    fn a_kind_is_ready_once_listed_and_if_a_source_caught_up() {
        let mut k = kind_with(&[], &[]);
        assert!(k.ready());
        k.caught_up = false;
        assert!(!k.ready(), "a source kind waits for the bus");
        k.source = false;
        assert!(k.ready(), "a sink-only kind does not");
        k.listed = false;
        assert!(!k.ready());
    }

    #[test]
    fn requests_parse_or_say_why_not() {
        let req =
            parse_correct(br#"{"schema":"fleetbus.io/correct-request/v1","rule":"r","name":null}"#)
                .unwrap();
        assert_eq!(req.rule.as_deref(), Some("r"));
        assert_eq!(req.name, None);
        assert!(parse_correct(b"not json").is_err());
        assert!(parse_correct(br#"{"schema":"fleetbus.io/correct-request/v9"}"#).is_err());
        assert!(parse_correct(br#"{"schema":"fleetbus.io/correct-request/v1","kind":5}"#).is_err());
    }
}
