//! The sink's garbage collection: copies nothing wants any more are deleted
//! or orphaned per their orphan policy (a `Deleted` tombstone always
//! deletes). A scan of every local object runs only when something could
//! have become collectable (`Engine::collect_due`, or the wanted set shrank).

use std::collections::{BTreeMap, BTreeSet};

use fleetbus_schemas::crd::OrphanPolicy;
use fleetbus_schemas::envelope::{Envelope, TombstoneReason};
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::well_known;
use serde_json::Value;
use tokio::time::Instant;

use super::apply;
use super::backoff::Input;
use super::engine::{Engine, RuleReport, Target};
use super::sink::annotation;

impl Engine {
    /// Deletes or orphans the copies nothing wants any more. Runs only when
    /// something could have become collectable (`Engine::collect_due`, or
    /// the wanted set shrank): else every pass would scan every object.
    /// A copy whose delete or orphan failed backs off like a failed write
    /// and is an error of its rule in `reports` until it is collected.
    pub(super) async fn collect(
        &mut self,
        wanted: &BTreeSet<Target>,
        reports: &mut BTreeMap<String, RuleReport>,
    ) {
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
        let now = Instant::now();
        for (target, obj, delete) in doomed {
            let rule = annotation(&obj, well_known::ANNOTATION_RULE)
                .unwrap_or_default()
                .to_owned();
            let input = Input {
                desired: None,
                live_rv: obj
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            };
            let error = match self.waiting(&target, &input, now) {
                Some(error) => Some(error),
                None => self.collect_one(&target, &rule, &obj, delete, input).await,
            };
            if let Some(error) = error {
                // Looked at again next pass (tried when its backoff is over).
                again = true;
                if let Some(r) = reports.get_mut(&rule) {
                    r.errors.insert(target.to_string(), error);
                }
            }
        }
        self.collect_due = again;
    }

    /// Deletes or orphans one copy; the error if that failed (the copy then
    /// backs off).
    async fn collect_one(
        &mut self,
        target: &Target,
        rule: &str,
        obj: &Value,
        delete: bool,
        input: Input,
    ) -> Option<String> {
        let Some(kind) = self.kinds.get(&target.gvk()) else {
            return Some(format!(
                "kind {} is not watched",
                super::watches::describe(&target.gvk())
            ));
        };
        let api = apply::api(&self.ctx.client, &kind.ar, target.namespace.as_deref());
        let result = if delete {
            apply::delete(&self.ctx, &api, obj).await
        } else {
            apply::orphan(&self.ctx, &api, obj).await
        };
        match result {
            Ok(()) => {
                tracing::info!(copy = %target, delete, "collected copy");
                self.baselines.remove(target);
                self.retries.remove(target);
                None
            }
            Err(e) => Some(self.copy_failed(target, rule, input, "collect", &e)),
        }
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
