//! Which kinds sync watches: the kinds the rules need, resolved by
//! discovery, each with its local watch and (for a source kind) its bus
//! consumer; a kind no rule needs stays until what it left is cleaned up.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use tokio::time::Instant;

use crate::sync::inputs::watches;
use crate::sync::model::{LocalObjects, Snapshots};
use crate::sync::policy::policy_gvk;
use crate::sync::rules::compile::{self as rules};
use crate::sync::world::{config_map_gvk, crd_gvk, namespace_gvk, KindState};

use super::Engine;

impl Engine {
    /// The kinds the current rules need, and whether each is a source.
    pub(super) fn needed_kinds(&self) -> HashMap<GroupVersionKind, bool> {
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
        for g in crate::sync::sink::bundle_read::kinds(&self.world) {
            need.entry(g).or_default();
        }
        need
    }

    /// Starts the tasks of kinds newly needed and stops those no longer needed.
    pub(super) async fn ensure_kinds(&mut self) {
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
                    tracing::info!(kind = %crate::sync::model::meta::describe_gvk(&gvk), %why, "kind not available yet");
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

    pub(super) fn start_kind(
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
                _guard: std::sync::Arc::new(stop.clone().drop_guard()),
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

    pub(super) fn start_consumer(&self, gvk: &GroupVersionKind) {
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
}
