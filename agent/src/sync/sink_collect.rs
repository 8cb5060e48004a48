//! The sink's garbage collection: copies nothing wants any more are deleted
//! or orphaned per their orphan policy (a `Deleted` tombstone always
//! deletes). A scan of every local object runs only when something could
//! have become collectable (`Engine::collect_due`, or the wanted set shrank).

use std::collections::BTreeSet;

use fleetbus_schemas::crd::OrphanPolicy;
use fleetbus_schemas::envelope::{Envelope, TombstoneReason};
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::well_known;
use serde_json::Value;
use tokio::time::Instant;

use super::apply;
use super::engine::{Engine, Retry, Target};
use super::sink::annotation;

impl Engine {
    /// Deletes or orphans the copies nothing wants any more. Runs only when
    /// something could have become collectable (`Engine::collect_due`, or
    /// the wanted set shrank): else every pass would scan every object.
    pub(super) async fn collect(&mut self, wanted: &BTreeSet<Target>) {
        let mut doomed: Vec<(Target, Value, bool)> = Vec::new();
        // Copies kept for now (rule not ready, origin in doubt) or not
        // collected (an error) are looked at again next pass.
        let mut again = false;
        for kind in self.kinds.values() {
            if !kind.listed {
                continue;
            }
            for obj in kind.objects.values() {
                let Some(origin) = annotation(obj, well_known::ANNOTATION_ORIGIN_CLUSTER) else {
                    continue;
                };
                if origin == self.fleet.local.name {
                    continue;
                }
                let Some(target) = Target::of(obj) else {
                    continue;
                };
                if wanted.contains(&target) {
                    continue;
                }
                match self.collect_verdict(obj, origin) {
                    Some(delete) => doomed.push((target, obj.clone(), delete)),
                    None => again = true,
                }
            }
        }
        for (target, obj, delete) in doomed {
            let gvk = target.gvk();
            let Some(kind) = self.kinds.get(&gvk) else {
                again = true;
                continue;
            };
            let api = apply::api(&self.ctx.client, &kind.ar, target.namespace.as_deref());
            let result = if delete {
                apply::delete(&self.ctx, &api, &obj).await
            } else {
                apply::orphan(&self.ctx, &api, &obj).await
            };
            match result {
                Ok(()) => {
                    tracing::info!(copy = %target, delete, "collected copy");
                    self.baselines.remove(&target);
                }
                Err(e) => {
                    again = true;
                    tracing::warn!(copy = %target, error = %crate::report(&e), "could not collect copy");
                    if e.is_transient() {
                        let next = Retry::after(
                            self.retries.get(&target),
                            Instant::now(),
                            crate::report(&e),
                        );
                        self.retries.insert(target.clone(), next);
                    }
                }
            }
        }
        self.collect_due = again;
    }

    /// For a copy nothing wants: `Some(true)` delete, `Some(false)` orphan,
    /// `None` keep for now (its rule is invalid or not fully read, or its
    /// origin's identity is in doubt).
    fn collect_verdict(&self, obj: &Value, origin: &str) -> Option<bool> {
        let rule_name = annotation(obj, well_known::ANNOTATION_RULE).unwrap_or_default();
        let rule = self.rules.get(rule_name);
        match rule {
            Some(rule) => {
                if self.rule_problem(rule).is_some() || !self.rule_ready(rule) {
                    return None;
                }
            }
            // "The rule is gone" is known only once every rule, here and on
            // the bus, has been read.
            None => {
                if !self
                    .kinds
                    .get(&super::rules::rule_gvk())
                    .is_some_and(|k| k.ready())
                {
                    return None;
                }
            }
        }
        if self
            .fleet
            .peers
            .get(origin)
            .is_some_and(|p| p.name_conflict)
        {
            return None;
        }
        let uid = annotation(obj, well_known::ANNOTATION_ORIGIN_UID).unwrap_or_default();
        if self.deleted_at_origin(origin, uid) {
            return Some(true);
        }
        let policy = match rule {
            Some(r) => r.spec.orphan_policy,
            None => match annotation(obj, well_known::ANNOTATION_ORPHAN_POLICY) {
                Some("Orphan") => OrphanPolicy::Orphan,
                _ => OrphanPolicy::Delete,
            },
        };
        Some(policy == OrphanPolicy::Delete)
    }

    /// Whether the origin published a `Deleted` tombstone for this uid.
    fn deleted_at_origin(&self, origin: &str, uid: &str) -> bool {
        self.kinds.values().any(|k| {
            k.snapshots.iter().any(|(key, e): (&ObjectKey, &Envelope)| {
                key.origin == origin
                    && e.uid == uid
                    && e.tombstone
                    && e.tombstone_reason.unwrap_or(TombstoneReason::Deleted)
                        == TombstoneReason::Deleted
            })
        })
    }
}
