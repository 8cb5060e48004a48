//! The pass over this cluster's SyncPolicy (`sync::policy` decides,
//! purely): the policy objects arrive through the ordinary local watch of
//! their kind, like rules; a pass reads the one named `default`, works out
//! the policy in force (`policy::in_force`: an invalid one keeps the last
//! valid one, or closes), writes its status (`Valid`), says loudly when it
//! is invalid (a Warning Event, a log line, `fleetbus_sync_policy_invalid`),
//! and hands the policy to the engine, which, when what the policy decides
//! changed, plans every object and copy again, so a change takes effect
//! without a restart and in both directions (what was held is published or
//! written).

use std::collections::BTreeMap;

use fleetbus_schemas::crd::{SyncPolicy, SyncPolicyStatus, SYNC_POLICY_NAME};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

use super::model::RuleReport;
use super::policy::{in_force, policy_gvk, Direction, Origin, Policy, PolicyError};
use super::world::World;
use crate::context::Context;
use crate::kube::conditions::{merge, Desired};
use crate::kube::FIELD_MANAGER;

/// What the policy stage keeps besides the policy in force (in the World).
pub struct PolicyState {
    /// The SyncPolicy objects changed since the last pass read them.
    pub dirty: bool,
    /// The (direction, rule, object) refusals of the last pass, so each is
    /// counted once when it begins (`count_refusals`).
    pub refusals: std::collections::BTreeSet<(Direction, String, String)>,
}

impl Default for PolicyState {
    fn default() -> Self {
        // The first pass reads the policy.
        PolicyState {
            dirty: true,
            refusals: std::collections::BTreeSet::new(),
        }
    }
}

/// At most this many objects are named in one Event.
const NAMED: usize = 5;

/// Condition type on a SyncPolicy: whether the agent applies it.
pub const VALID: &str = "Valid";

/// The `Valid` condition a SyncPolicy object should carry, `origin` being
/// where the policy in force comes from (read from the `default` object in
/// the same pass): an invalid `default` says what is in force instead.
pub fn valid_condition(obj: &Value, origin: &Origin) -> Desired {
    match Policy::parse(obj) {
        Ok(_) => Desired {
            type_: VALID,
            status: true,
            reason: "Applied",
            message: "this cluster's agent applies this policy (a direction left out is the built-in default)".to_owned(),
        },
        Err(PolicyError::Ignored) => Desired {
            type_: VALID,
            status: false,
            reason: "Ignored",
            message: PolicyError::Ignored.to_string(),
        },
        Err(e) => Desired {
            type_: VALID,
            status: false,
            reason: "Invalid",
            message: format!("{e}; {}", origin.in_force()),
        },
    }
}

/// Whether the policy in force is known: its kind listed, or not served
/// (CRDs not installed by this agent: the built-in default applies,
/// which is safe). Nothing is published or written before, so that no
/// object leaves or enters under a default the cluster replaced.
pub(super) fn policy_known(world: &World) -> bool {
    let gvk = policy_gvk();
    world.kinds.get(&gvk).is_some_and(|k| k.listed) || world.unresolved.contains_key(&gvk)
}

/// What a policy pass read: the policy now in force, and whether what it
/// decides changed (then everything is planned again).
pub(super) struct PolicyRead {
    /// The policy in force from now on.
    pub policy: Policy,
    /// What the policy decides changed: plan every object and copy again.
    pub replan: bool,
}

/// Reads the policy again if its objects changed: works out the policy in
/// force, says so if the object is invalid, writes the objects' status, and
/// returns the policy in force (None: nothing was read) for the engine to
/// keep, with whether everything must be planned again.
pub(super) async fn policy_pass(
    world: &World,
    state: &mut PolicyState,
    ctx: &Context,
) -> Option<PolicyRead> {
    if !std::mem::take(&mut state.dirty) {
        return None;
    }
    let kind = world.kinds.get(&policy_gvk())?;
    let objects: Vec<Value> = kind.objects.values().collect();
    let object = objects
        .iter()
        .find(|o| o.pointer("/metadata/name").and_then(Value::as_str) == Some(SYNC_POLICY_NAME));
    let next = in_force(&world.policy, object);
    if next.origin != world.policy.origin {
        policy_origin_changed(ctx, &next.origin).await;
    }
    let replan = !next.decides_as(&world.policy);
    for obj in &objects {
        write_policy_status(ctx, obj, &next.origin).await;
    }
    Some(PolicyRead {
        policy: next,
        replan,
    })
}

/// Says where the policy in force now comes from: a log line, the
/// gauge, and for an invalid object a Warning Event naming what is in
/// force instead.
async fn policy_origin_changed(ctx: &Context, origin: &Origin) {
    let invalid = origin.invalid();
    ctx.metrics
        .sync_policy_invalid
        .set(i64::from(invalid.is_some()));
    let Some(why) = invalid else {
        tracing::info!(?origin, "sync policy changed");
        return;
    };
    let in_force = origin.in_force();
    match origin {
        Origin::Closed { .. } => {
            tracing::error!(%why, %in_force, "SyncPolicy default is invalid")
        }
        _ => tracing::warn!(%why, %in_force, "SyncPolicy default is invalid"),
    }
    event_on_policy(ctx, "InvalidPolicy", &format!("{why}; {in_force}")).await;
}

/// Writes a SyncPolicy's `Valid` condition if it differs; `origin` is where
/// the policy in force comes from.
async fn write_policy_status(ctx: &Context, obj: &Value, origin: &Origin) {
    let Some(name) = obj.pointer("/metadata/name").and_then(Value::as_str) else {
        return;
    };
    let generation = obj.pointer("/metadata/generation").and_then(Value::as_i64);
    // A status that does not parse is replaced, not kept.
    let existing: SyncPolicyStatus = obj
        .get("status")
        .cloned()
        .and_then(|s| serde_json::from_value(s).ok())
        .unwrap_or_default();
    let status = SyncPolicyStatus {
        conditions: merge(
            &existing.conditions,
            &[valid_condition(obj, origin)],
            generation,
        ),
        observed_generation: generation,
    };
    let same = |a: &SyncPolicyStatus, b: &SyncPolicyStatus| {
        a.observed_generation == b.observed_generation
            && a.conditions.len() == b.conditions.len()
            && a.conditions.iter().zip(&b.conditions).all(|(x, y)| {
                (&x.type_, &x.status, &x.reason, &x.message)
                    == (&y.type_, &y.status, &y.reason, &y.message)
            })
    };
    if same(&existing, &status) {
        return;
    }
    let api: Api<SyncPolicy> = Api::all(ctx.client.clone());
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let patch = json!({ "status": status });
    let segment = crate::kube::path::segment(name);
    match api
        .patch_status(&segment, &params, &Patch::Merge(&patch))
        .await
    {
        Ok(_) => ctx.metrics.sync_kube_write("syncpolicy_status"),
        // Deleted since the pass read it.
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => tracing::warn!(policy = %name, error = %e, "could not write policy status"),
    }
}

/// Counts the refusals that began in this pass
/// (`fleetbus_policy_refused_total{direction}`), from the rules' reports
/// (`reports`, the status stage's), and records an Event on each rule that
/// has new ones (the first few named), so `kubectl describe
/// resourcesyncrule` shows when it began.
pub(super) async fn count_refusals(
    world: &World,
    reports: &BTreeMap<String, RuleReport>,
    state: &mut PolicyState,
    ctx: &Context,
) {
    let now: std::collections::BTreeSet<(Direction, String, String)> = reports
        .iter()
        .flat_map(|(rule, r)| {
            r.refused
                .iter()
                .map(move |(obj, why)| (why.direction, rule.clone(), obj.clone()))
        })
        .collect();
    let mut news: BTreeMap<&str, Vec<String>> = Default::default();
    for (direction, rule, object) in now.difference(&state.refusals) {
        ctx.metrics
            .policy_refused
            .get_or_create(&vec![("direction", direction.as_str())])
            .inc();
        let why = reports.get(rule).and_then(|r| r.refused.get(object));
        if let Some(why) = why {
            news.entry(rule)
                .or_default()
                .push(format!("{object}: {why}"));
        }
    }
    for (rule, lines) in news {
        let mut text = lines
            .iter()
            .take(NAMED)
            .cloned()
            .collect::<Vec<_>>()
            .join("; ");
        if lines.len() > NAMED {
            text.push_str(&format!("; and {} more", lines.len() - NAMED));
        }
        tracing::info!(%rule, refused = lines.len(), "refused by this cluster's sync policy");
        if world.rules.get(rule).is_some_and(|r| r.builtin) {
            continue;
        }
        let rule_ref = crate::sync::model::meta::rule_ref(rule);
        ctx.recorder
            .publish(
                &rule_ref,
                crate::kube::events::EventType::Normal,
                "PolicyRefused",
                &text,
            )
            .await;
    }
    state.refusals = now;
}

/// A Warning Event on the SyncPolicy `default`.
async fn event_on_policy(ctx: &Context, reason: &str, message: &str) {
    let object = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(format!(
            "{}/{}",
            fleetbus_schemas::well_known::GROUP,
            fleetbus_schemas::well_known::VERSION
        )),
        kind: Some("SyncPolicy".to_owned()),
        name: Some(SYNC_POLICY_NAME.to_owned()),
        ..Default::default()
    };
    ctx.recorder
        .publish(
            &object,
            crate::kube::events::EventType::Warning,
            reason,
            message,
        )
        .await;
}
