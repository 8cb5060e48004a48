//! Inputs become changes to the World and to the stages' dirty sets: one
//! input at a time, between passes; nothing here does IO.

use std::time::Duration;

use kube::core::GroupVersionKind;
use tokio::time::Instant;

use crate::sync::model::{BusEvent, Input, LocalEvent, LocalObjects, Snapshots};
use crate::sync::policy::policy_gvk;
use crate::sync::returns::returned;
use crate::sync::rollout::sink::{self as rollout_sink, Replan};
use crate::sync::rules::compile::{self as rules};
use crate::sync::world::{crd_gvk, namespace_gvk};

use super::Engine;

impl Engine {
    /// Folds one input into the state.
    pub fn handle(&mut self, input: Input) {
        match input {
            Input::Local(gvk, ev) => self.local_event(gvk, ev),
            Input::Bus(gvk, ev) => self.bus_event(gvk, ev),
            Input::Status(ev) => {
                let local = &self.world.fleet.local.name;
                returned::status_event(&mut self.returns.book, local, ev)
            }
            Input::Rollout(ev) => match rollout_sink::rollout_event(&mut self.rollout, ev) {
                Replan::Nothing => {}
                Replan::Object(key) => {
                    self.sink.dirty.keys.insert(key);
                }
                Replan::Everything => self.sink.dirty.full = true,
            },
            Input::Placement(ev) => {
                use crate::sync::placement::sink::placement_event;
                match placement_event(&mut self.placement, ev) {
                    Replan::Nothing => {}
                    Replan::Object(key) => {
                        self.sink.dirty.keys.insert(key);
                    }
                    Replan::Everything => self.sink.dirty.full = true,
                }
            }
            Input::Version(v, got) => {
                let key = rollout_sink::version_event(&mut self.rollout, v, got);
                self.sink.dirty.keys.insert(key);
            }
            Input::PublishFailed(gvk, key, before, sent) => {
                self.io.ctx.metrics.sync_rejected("publish_failed");
                // Believe what makes the next pass publish again whatever
                // the bus holds now (a lost tombstone included).
                if let Some(k) = self.world.kinds.get_mut(&gvk) {
                    k.source_full = true;
                    match crate::sync::model::believed_after_failure(before, *sent) {
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
                tracing::info!(object = %crate::sync::model::meta::describe_key(&key), "our subject holds a message we did not publish; publishing ours again");
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

    /// What a local event of kind `gvk` means beyond its objects: rules,
    /// discovery, the policy, and every decision that reads namespaces or
    /// CRDs.
    fn note_kind_changed(&mut self, gvk: &GroupVersionKind) {
        if *gvk == rules::rule_gvk() {
            self.pending.rules_dirty = true;
        }
        if *gvk == crd_gvk() && !self.world.unresolved.is_empty() {
            self.pending.rediscover = true;
        }
        if *gvk == policy_gvk() {
            self.policy.dirty = true;
        }
        if *gvk == crd_gvk() {
            // A CRD added, changed (its status subresource too) or deleted.
            self.returns.book.forget_discovery();
        }
        if *gvk == namespace_gvk() || *gvk == crd_gvk() {
            // A namespace created, recreated or done terminating, or a CRD's
            // schema changed, can make a refused write succeed: try the
            // failing copies again now (their backoff goes on if they fail).
            let now = Instant::now();
            for r in self.sink.retries.values_mut() {
                r.at = r.at.min(now);
            }
        }
        if *gvk == namespace_gvk() {
            // Whether a copy's namespace exists is part of every decision
            // in it: decided again, all (namespaces change rarely).
            self.sink.dirty.full = true;
        }
    }

    pub(super) fn local_event(&mut self, gvk: GroupVersionKind, ev: LocalEvent) {
        self.note_kind_changed(&gvk);
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
                tracing::warn!(kind = %crate::sync::model::meta::describe_gvk(&gvk), error = %e, "local watch failed; retrying");
                kind.watch_error = Some(e);
            }
        }
    }

    pub(super) fn bus_event(&mut self, gvk: GroupVersionKind, ev: BusEvent) {
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
                        let what = crate::sync::model::meta::describe_key(&key);
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
                    tracing::warn!(origin = %key.origin, object = %crate::sync::model::meta::describe_key(&key), "envelope from a cluster that is no member; not applied");
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
                        if !crate::sync::source::published::same_identity(&received, &local) {
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
}
