//! The rollout command (`<p>.cmd.<self>.rollout`, PROTOCOL §6.9): an
//! operator's pause, resume, abort or rollback of this origin's rollouts of
//! one rule, applied by the engine between passes (`serve` admits them),
//! through the same decision as a pass; the reply goes once every changed
//! record is stored.

use fleetbus_schemas::rollout::{RolloutReply, RolloutRequest};
use fleetbus_schemas::subject::split_api_version;
use fleetbus_schemas::ObjectRef;

use super::decide::decide_with;
use super::origin::{put_decision, rollouts_due};
use super::state::RolloutBook;
use crate::context::Context;
use crate::sync::returns::returned::{returned_reports, rules_read};
use crate::sync::returns::state::StatusBook;
use crate::sync::world::World;

/// Whether `want` names the source object `have`: by kind, namespace and
/// name (a rule has one kind); by group too when `want` says one.
fn names(want: &ObjectRef, have: &ObjectRef) -> bool {
    (want.api_version.is_empty()
        || split_api_version(&want.api_version).0 == split_api_version(&have.api_version).0)
        && want.kind == have.kind
        && want.namespace == have.namespace
        && want.name == have.name
}

/// Applies one rollout request to this origin's records of its rule
/// (see the module docs).
pub(in crate::sync) async fn rollout_request(
    world: &World,
    book: &mut RolloutBook,
    returns: &StatusBook,
    ctx: &Context,
    payload: &[u8],
) -> RolloutReply {
    let me = world.fleet.local.name.clone();
    let req = match RolloutRequest::decode(payload) {
        Ok(r) => r,
        Err(e) => return RolloutReply::refused(&me, format!("cannot read the request: {e}")),
    };
    let Some(rule) = world.rules.get(&req.rule) else {
        return RolloutReply::refused(&me, format!("no rule {:?} on cluster {me}", req.rule));
    };
    if rule.spec.rollout.is_none() {
        return RolloutReply::refused(&me, format!("rule {:?} has no spec.rollout", req.rule));
    }
    if !book.caught_up || !returns.caught_up || !rules_read(world) {
        return RolloutReply::refused(&me, "not ready: still reading the bus; retry shortly");
    }
    let now = chrono::Utc::now();
    let reports = returned_reports(world, returns);
    let due: Vec<_> = rollouts_due(world, book, &reports)
        .into_iter()
        .filter(|d| d.key.rule == req.rule && d.input.current.is_some())
        .filter(|d| {
            req.object
                .as_ref()
                .is_none_or(|o| names(o, &d.input.source))
        })
        .collect();
    let mut reply = RolloutReply {
        cluster: me.clone(),
        matched: u64::try_from(due.len()).unwrap_or(u64::MAX),
        ..RolloutReply::default()
    };
    let mut refusals = Vec::new();
    for d in due {
        let prev = book.record(&d.key).cloned();
        match decide_with(prev.as_ref(), req.action, &d.spec, &d.input, now) {
            Err(e) => refusals.push(format!("{}: {e}", d.input.source)),
            Ok(decision) if decision.changed => {
                if let Err(e) = put_decision(book, ctx, &d.key, &decision.record).await {
                    refusals.push(format!("{}: not stored: {e}", d.input.source));
                    continue;
                }
                book.records.insert(d.key, decision.record);
                reply.changed.push(ObjectRef {
                    uid: None,
                    ..d.input.source
                });
            }
            Ok(_) => {}
        }
    }
    if !refusals.is_empty() {
        reply.error = Some(refusals.join("; "));
    }
    reply
}
