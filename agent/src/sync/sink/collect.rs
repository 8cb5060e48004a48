//! The sink's garbage collection: copies nothing wants any more are deleted
//! or orphaned per their orphan policy (a `Deleted` tombstone always
//! deletes). A scan of every local object runs only when something could
//! have become collectable (`SinkState::collect_due`, or the wanted set shrank).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use fleetbus_schemas::crd::OrphanPolicy;
use fleetbus_schemas::well_known;
use serde_json::Value;
use tokio::time::Instant;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::ApiResource;
use kube::core::GroupVersionKind;

use super::apply;
use super::keep::{self, Cascade, CheckError, KeptCopy, Why};
use super::state::SinkState;
use crate::context::Context;
use crate::kube::events::EventType;
use crate::mark::Ownership;
use crate::sync::model::backoff::{Backoff, Input};
use crate::sync::model::meta::{annotation, is_terminating};
use crate::sync::model::{RuleReport, Target};
use crate::sync::world::{KindState, World};

/// The reason of the Events about a copy kept instead of deleted.
pub const REASON_KEPT: &str = "CopyKept";

/// One copy to collect: where, made by which rule, the live object, and
/// whether its policy says delete (else orphan).
struct Collect<'a> {
    target: &'a Target,
    rule: &'a str,
    obj: &'a Value,
    delete: bool,
}

/// Whether a kept copy at `t` is still to be reported: the same object is
/// still here (nobody deleted it), or its kind is not listed now (unknown:
/// kept until it is).
fn still_kept(kinds: &HashMap<GroupVersionKind, KindState>, t: &Target, uid: &str) -> bool {
    match kinds.get(&t.gvk()) {
        Some(k) if k.listed => k
            .objects
            .get(&t.local_key())
            .is_some_and(|o| o.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid)),
        _ => true,
    }
}

/// What becomes of a copy nothing wants any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::sync) enum Verdict {
    /// Deleted.
    Delete,
    /// Left in place, no longer managed.
    Orphan,
    /// Kept for now, and looked at again next pass.
    Keep,
}

/// What is known of the rule a copy names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::sync) enum RuleOf {
    /// Valid and fully read: its orphan policy applies.
    Ready(OrphanPolicy),
    /// Invalid, suspended, or not fully read yet.
    NotReady,
    /// Not among the rules; gone only if `all_read` (every rule, here and
    /// on the bus, has been read).
    Missing {
        /// Every rule has been read.
        all_read: bool,
    },
}

/// What becomes of the copy `obj` that nothing wants: kept for now while its
/// rule is invalid or not fully read, or its origin's identity is in doubt
/// (`origin_in_doubt`); deleted when the origin deleted the object
/// (`deleted_at_origin`, asked last: it scans the bus state); else per the
/// rule's orphan policy, or the copy's own annotation once the rule is gone.
fn verdict(
    obj: &Value,
    rule: RuleOf,
    origin_in_doubt: bool,
    deleted_at_origin: impl FnOnce() -> bool,
) -> Verdict {
    let policy = match rule {
        RuleOf::NotReady | RuleOf::Missing { all_read: false } => return Verdict::Keep,
        RuleOf::Ready(policy) => Some(policy),
        RuleOf::Missing { all_read: true } => None,
    };
    if origin_in_doubt {
        return Verdict::Keep;
    }
    if deleted_at_origin() {
        return Verdict::Delete;
    }
    let policy =
        policy.unwrap_or_else(
            || match annotation(obj, well_known::ANNOTATION_ORPHAN_POLICY) {
                Some("Orphan") => OrphanPolicy::Orphan,
                _ => OrphanPolicy::Delete,
            },
        );
    match policy {
        OrphanPolicy::Delete => Verdict::Delete,
        OrphanPolicy::Orphan => Verdict::Orphan,
    }
}

/// Deletes or orphans the copies nothing wants any more, among every
/// local object (`scope` None: something that concerns every copy
/// changed, see `SinkState::collect_due`) or only the objects at `scope`'s
/// targets (those no longer wanted, foreign copies that appeared, those
/// kept or failing before): a pass that collects one copy must not scan
/// every object. A copy whose delete or orphan failed backs off like a
/// failed write and is an error of its rule in `reports` until it is
/// collected. Returns the copies to look at again next pass (kept for
/// now: rule not ready, origin in doubt; or not collected: an error).
pub(in crate::sync) async fn collect(
    world: &World,
    sink: &mut SinkState,
    ctx: &Context,
    wanted: &(dyn Fn(&Target) -> bool + Sync),
    scope: Option<&BTreeSet<Target>>,
    reports: &mut BTreeMap<String, RuleReport>,
) -> BTreeSet<Target> {
    let mut doomed: Vec<(Target, Value, bool)> = Vec::new();
    let mut again = BTreeSet::new();
    let listed = |g: &GroupVersionKind| world.kinds.get(g).filter(|k| k.listed);
    // Parsed one at a time (see `LocalObjects`): a full scan (`scope`
    // None) is the rare one.
    let objects: Box<dyn Iterator<Item = Value> + '_> = match scope {
        None => Box::new(
            world
                .kinds
                .values()
                .filter(|k| k.listed)
                .flat_map(|k| k.objects.values()),
        ),
        Some(targets) => Box::new(
            targets
                .iter()
                .filter_map(move |t| listed(&t.gvk())?.objects.get(&t.local_key())),
        ),
    };
    for obj in objects {
        let obj = &obj;
        // Only a copy this agent wrote is collected: an object that
        // merely names an origin is someone's own (`model::mark`).
        let origin = match ctx.mark.judge_object(obj) {
            Ownership::Copy { origin, .. } => origin,
            Ownership::Original => continue,
            Ownership::LookAlike { .. } => {
                ctx.metrics.sync_look_alikes.inc();
                continue;
            }
        };
        if origin == world.fleet.local.name {
            continue;
        }
        let Some(target) = Target::of(obj) else {
            continue;
        };
        // Being deleted already (by us, or by someone): nothing to do.
        if wanted(&target) || is_terminating(obj) {
            continue;
        }
        match collect_verdict(world, obj, origin) {
            Verdict::Delete => doomed.push((target, obj.clone(), true)),
            Verdict::Orphan => doomed.push((target, obj.clone(), false)),
            Verdict::Keep => {
                again.insert(target);
            }
        }
    }
    let now = Instant::now();
    // Discovered once per scan, when a Namespace copy is to be deleted.
    let mut served = None;
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
        let error = match super::failures::waiting(sink, &target, &input, now) {
            Some(error) => Some(error),
            None => {
                let to_do = Collect {
                    target: &target,
                    rule: &rule,
                    obj: &obj,
                    delete,
                };
                collect_one(world, sink, ctx, to_do, input, &mut served).await
            }
        };
        if let Some(error) = error {
            // Looked at again next pass (tried when its backoff is over).
            again.insert(target.clone());
            if let Some(r) = reports.get_mut(&rule) {
                r.errors.insert(target.to_string(), error);
            }
        }
    }
    again
}

/// Deletes or orphans one copy; the error if that failed (the copy then
/// backs off). A copy whose deletion would take objects fleetbus does
/// not manage with it (`keep`) is orphaned instead, and that is
/// reported.
async fn collect_one(
    world: &World,
    sink: &mut SinkState,
    ctx: &Context,
    c: Collect<'_>,
    input: Input,
    served: &mut Option<Vec<ApiResource>>,
) -> Option<String> {
    let Collect {
        target,
        rule,
        obj,
        delete,
    } = c;
    let Some(kind) = world.kinds.get(&target.gvk()) else {
        return Some(format!(
            "kind {} is not watched",
            crate::sync::model::meta::describe_gvk(&target.gvk())
        ));
    };
    let ar = kind.ar.clone();
    let api = apply::api(&ctx.copy_writer, &ar, target.namespace.as_deref());
    let kept = match delete {
        true => match would_take(ctx, target, obj, served).await {
            Ok(found) if found.is_empty() => None,
            Ok(found) => Some(Why::Unmanaged(found)),
            Err(e) if e.is_transient() => {
                return Some(check_failed(sink, target, input, crate::report(&e)));
            }
            Err(e) => Some(Why::Unchecked(crate::report(&e))),
        },
        false => None,
    };
    let result = if delete && kept.is_none() {
        apply::delete(ctx, &api, obj).await
    } else {
        apply::orphan(ctx, &api, obj).await
    };
    match result {
        Ok(()) => {
            tracing::info!(copy = %target, delete = delete && kept.is_none(), "collected copy");
            sink.baselines.remove(target);
            sink.retries.remove(target);
            if let Some(why) = kept {
                let copy = keep::CopyRef {
                    shown: &target.to_string(),
                    resource: &keep::resource_name(&ar),
                    namespace: target.namespace.as_deref(),
                    name: &target.name,
                };
                let message = keep::kept_message(&copy, &why);
                report_kept(world, sink, ctx, target, obj, message).await;
            }
            None
        }
        Err(e) => Some(
            super::failures::copy_failed(sink, ctx, target, rule, input, "collect", &e).message,
        ),
    }
}

/// A transient failure to find out what deleting the copy at `target`
/// would take with it: not deleted yet, checked again after a backoff
/// step. Returns the message for the rule status.
fn check_failed(sink: &mut SinkState, target: &Target, input: Input, message: String) -> String {
    tracing::warn!(copy = %target, error = %message, "could not check what deleting the copy would delete; not deleted yet");
    let now = Instant::now();
    let next = Backoff::failed(
        sink.retries.get(target),
        input,
        now,
        rand::random::<f64>(),
        crate::sync::model::CopyError::transient(message.clone()),
    );
    sink.retries.insert(target.clone(), next);
    message
}

/// What deleting the copy at `target` would take with it that fleetbus
/// does not manage (empty for a kind whose deletion does not cascade).
/// `served`: the namespaced resources, discovered on first need.
pub(in crate::sync) async fn would_take(
    ctx: &Context,
    target: &Target,
    obj: &Value,
    served: &mut Option<Vec<ApiResource>>,
) -> Result<Vec<String>, CheckError> {
    let client = &ctx.client;
    let found = match Cascade::of(&target.gvk()) {
        None => return Ok(Vec::new()),
        Some(Cascade::Namespace) => {
            let resources = match served.take() {
                Some(r) => r,
                None => keep::namespaced_resources(client).await?,
            };
            let started = Instant::now();
            let found = keep::namespace_contents(client, &ctx.mark, &resources, &target.name).await;
            tracing::debug!(namespace = %target.name, resources = resources.len(), elapsed_ms = started.elapsed().as_millis(), "listed what deleting the namespace would delete");
            *served = Some(resources);
            found?
        }
        Some(Cascade::Crd) => keep::crd_instances(client, &ctx.mark, obj).await?,
    };
    Ok(keep::unmanaged(&found))
}

/// Reports a copy kept instead of deleted: a Warning Event on it and on
/// its rule, the log, and its rule's status while it stays unmanaged.
async fn report_kept(
    world: &World,
    sink: &mut SinkState,
    ctx: &Context,
    target: &Target,
    obj: &Value,
    message: String,
) {
    tracing::warn!(copy = %target, %message, "copy kept: deleting it would delete what fleetbus does not manage");
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str).map(str::to_owned);
    let copy_ref = ObjectReference {
        api_version: Some(target.api_version.clone()),
        kind: Some(target.kind.clone()),
        name: Some(target.name.clone()),
        namespace: target.namespace.clone(),
        uid: s("/metadata/uid"),
        ..ObjectReference::default()
    };
    let recorder = &ctx.recorder;
    recorder
        .publish(&copy_ref, EventType::Warning, REASON_KEPT, &message)
        .await;
    let rule = annotation(obj, well_known::ANNOTATION_RULE)
        .unwrap_or_default()
        .to_owned();
    if world.rules.get(&rule).is_some_and(|r| !r.builtin) {
        let rule_ref = crate::sync::model::meta::rule_ref(&rule);
        recorder
            .publish(&rule_ref, EventType::Warning, REASON_KEPT, &message)
            .await;
    }
    ctx.metrics.sync_rejected("copy_kept");
    let uid = s("/metadata/uid").unwrap_or_default();
    sink.kept
        .insert(target.clone(), KeptCopy { rule, uid, message });
}

/// Copies kept (see `report_kept`) that are still there, each under its
/// rule in `reports` (its status says so until the object is gone).
pub(in crate::sync) fn note_kept(
    world: &World,
    sink: &mut SinkState,
    reports: &mut BTreeMap<String, RuleReport>,
) {
    let kinds = &world.kinds;
    sink.kept.retain(|t, k| still_kept(kinds, t, &k.uid));
    for (target, k) in &sink.kept {
        if let Some(r) = reports.get_mut(&k.rule) {
            r.kept.insert(target.to_string(), k.message.clone());
        }
    }
}

/// What becomes of the copy `obj` from `origin` that nothing wants
/// (see [`verdict`]).
fn collect_verdict(world: &World, obj: &Value, origin: &str) -> Verdict {
    let rule_name = annotation(obj, well_known::ANNOTATION_RULE).unwrap_or_default();
    let rule = world.rules.get(rule_name);
    // The built-in rule replicating rules is not asked by the policy.
    let asked = rule.is_none_or(|r| !r.builtin);
    let rule = match rule {
        // No valid policy known (closed): every copy is refused, and none
        // is deleted or orphaned for it, as under a suspended rule; the
        // copy is judged again once the policy is fixed or deleted.
        _ if asked && world.policy.is_closed() => RuleOf::NotReady,
        // Suspended: nothing is deleted or orphaned, source deletes included.
        Some(r) if r.spec.suspend => RuleOf::NotReady,
        Some(r) if world.rule_problem(r).is_some() || !world.rule_ready(r) => RuleOf::NotReady,
        Some(r) => RuleOf::Ready(r.spec.orphan_policy),
        None => RuleOf::Missing {
            all_read: world
                .kinds
                .get(&crate::sync::rules::compile::rule_gvk())
                .is_some_and(|k| k.ready()),
        },
    };
    verdict_under(world, obj, origin, rule)
}

/// What becomes of the copy `obj` from `origin` that nothing wants, its
/// rule being `rule` (the preview passes a candidate rule's).
pub(in crate::sync) fn verdict_under(
    world: &World,
    obj: &Value,
    origin: &str,
    rule: RuleOf,
) -> Verdict {
    let in_doubt = world
        .fleet
        .peers
        .get(origin)
        .is_some_and(|p| p.name_conflict);
    verdict(obj, rule, in_doubt, || {
        let uid = annotation(obj, well_known::ANNOTATION_ORIGIN_UID).unwrap_or_default();
        deleted_at_origin(world, origin, uid)
    })
}

/// Whether the origin published a `Deleted` tombstone for this uid.
fn deleted_at_origin(world: &World, origin: &str, uid: &str) -> bool {
    world
        .kinds
        .values()
        .any(|k| k.snapshots.deleted(origin, uid))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn copy(orphan_policy: Option<&str>) -> Value {
        let mut a = serde_json::Map::new();
        if let Some(p) = orphan_policy {
            a.insert(well_known::ANNOTATION_ORPHAN_POLICY.to_owned(), json!(p));
        }
        json!({"metadata": {"annotations": a}})
    }

    #[test]
    fn a_copy_is_kept_while_its_rule_or_origin_is_in_doubt() {
        let obj = copy(None);
        for rule in [RuleOf::NotReady, RuleOf::Missing { all_read: false }] {
            assert_eq!(verdict(&obj, rule, false, || true), Verdict::Keep);
        }
        let ready = RuleOf::Ready(OrphanPolicy::Delete);
        assert_eq!(verdict(&obj, ready, true, || true), Verdict::Keep);
    }

    #[test]
    fn deleted_at_the_origin_is_deleted_here_whatever_the_policy() {
        let obj = copy(Some("Orphan"));
        let orphan = RuleOf::Ready(OrphanPolicy::Orphan);
        assert_eq!(verdict(&obj, orphan, false, || true), Verdict::Delete);
        let gone = RuleOf::Missing { all_read: true };
        assert_eq!(verdict(&obj, gone, false, || true), Verdict::Delete);
    }

    #[test]
    fn the_rules_policy_decides_and_the_copys_once_the_rule_is_gone() {
        let orphan_note = copy(Some("Orphan"));
        assert_eq!(
            verdict(
                &orphan_note,
                RuleOf::Ready(OrphanPolicy::Delete),
                false,
                || false
            ),
            Verdict::Delete
        );
        assert_eq!(
            verdict(
                &copy(None),
                RuleOf::Ready(OrphanPolicy::Orphan),
                false,
                || false
            ),
            Verdict::Orphan
        );
        let gone = RuleOf::Missing { all_read: true };
        assert_eq!(
            verdict(&orphan_note, gone, false, || false),
            Verdict::Orphan
        );
        assert_eq!(verdict(&copy(None), gone, false, || false), Verdict::Delete);
        assert_eq!(
            verdict(&copy(Some("orphan")), gone, false, || false),
            Verdict::Delete
        );
    }

    #[test]
    fn the_bus_is_not_scanned_for_a_copy_kept_anyway() {
        let scanned = std::cell::Cell::new(false);
        let ask = || {
            scanned.set(true);
            true
        };
        assert_eq!(
            verdict(&copy(None), RuleOf::NotReady, false, ask),
            Verdict::Keep
        );
        assert!(!scanned.get());
    }
}
