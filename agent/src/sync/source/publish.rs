//! The source side: publish this cluster's own originals that some rule lets
//! it be a source of, and tombstones for what stopped being published.
//!
//! The decision compares states: the local objects against the last envelope
//! on the bus under our own name (the kind's consumer delivers our subtree
//! too). So a restart publishes exactly what changed while the agent was
//! down, deletes included, and an unchanged object is never republished.

use std::collections::{BTreeMap, BTreeSet};

use async_nats::HeaderMap;
use fleetbus_schemas::crd::SyncRule;
use fleetbus_schemas::envelope::{check_size, Envelope, TombstoneReason};
use fleetbus_schemas::subject::{check_subject_len, ObjectKey};
use fleetbus_schemas::well_known;
use kube::core::GroupVersionKind;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::published::{self, HashMemo};
use super::sealing::{self, SealView};
use super::state::SourceState;
use crate::context::Context;
use crate::registry::view::LocalView;
use crate::sync::model::meta::{describe_key, has_annotation, is_original};
use crate::sync::model::Input;
use crate::sync::policy::{Policy, Refusal, Subject};
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching::{self, qualifies};
use crate::sync::withheld::{withheld, Withheld};
use crate::sync::world::{KindState, World};

/// Why an object was not published.
#[derive(Debug)]
pub enum PublishError {
    /// The object cannot be published as it is (too large, a subject NATS
    /// refuses): reported on the rule's status until it changes.
    Object(String),
    /// The bus did not take it: retried.
    Bus(String),
}

/// What to publish for one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Publish {
    /// The object's current state.
    Snapshot(Value),
    /// The object's current state, sealed to these clusters (PROTOCOL §4.8).
    Sealed(Value, sealing::Recipients),
    /// The object is gone or no longer published.
    Tombstone {
        /// The object's uid on this cluster.
        uid: String,
        /// The last resourceVersion we know.
        resource_version: String,
        /// Deleted, or only no longer published.
        reason: TombstoneReason,
    },
    /// Nothing: only rules this cluster's policy refuses to publish for
    /// select the object (`sync::policy`); each reports why in its status.
    Refused {
        /// Each rule that selects it, and why it may not.
        refusals: Vec<(String, Refusal)>,
    },
    /// Nothing: rules select the object but it is never published
    /// ([`withheld`]); they report it in their status.
    Withheld {
        /// Why it is never published.
        why: Withheld,
        /// The rules that select it.
        rules: Vec<String>,
    },
}

fn sync_disabled(obj: &Value) -> bool {
    has_annotation(obj, well_known::ANNOTATION_RESOURCE_SYNC_DISABLED)
}

/// The rules of the kind that this cluster is a source of (valid, and its
/// labels and features qualify).
pub(in crate::sync) fn effective<'a>(
    local: &LocalView,
    rules: &[&'a CompiledRule],
) -> Vec<&'a CompiledRule> {
    rules
        .iter()
        .copied()
        .filter(|r| r.is_valid() && qualifies(r, &local.labels, &local.features))
        .collect()
}

/// The group, kind and namespace of `obj`, as a policy sees it.
pub fn subject_of(obj: &Value) -> Subject<'_> {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str);
    let api_version = s("/apiVersion").unwrap_or("");
    Subject {
        group: api_version.rsplit_once('/').map_or("", |(g, _)| g),
        kind: s("/kind").unwrap_or(""),
        namespace: s("/metadata/namespace").filter(|n| !n.is_empty()),
    }
}

/// What this cluster's policy lets it publish: the policy, and this
/// cluster's name (its own rules are not asked).
pub struct Exports<'a> {
    /// The policy in force.
    pub policy: &'a Policy,
    /// This cluster.
    pub local: &'a str,
    /// To whom objects are sealed, when this cluster holds a sealing key.
    pub seal: Option<&'a SealView<'a>>,
}

/// What to publish for our object at `key` (into `out`): `obj` is the local
/// object there (None: there is none), `current` our live envelope on the bus.
pub(in crate::sync) fn plan_object(
    exports: &Exports<'_>,
    rules: &[&CompiledRule],
    key: &ObjectKey,
    obj: Option<&Value>,
    current: Option<&Envelope>,
    memo: &mut HashMemo,
    out: &mut Vec<(ObjectKey, Publish)>,
) {
    let mut withdraw = |reason| {
        if let Some(e) = current {
            out.push((
                key.clone(),
                Publish::Tombstone {
                    uid: e.uid.clone(),
                    resource_version: e.resource_version.clone(),
                    reason,
                },
            ));
        }
    };
    let Some(obj) = obj.filter(|o| is_original(o)) else {
        // Ours on the bus, live, but no longer here: deleted (perhaps while
        // we were down), or replaced by a copy of the same name.
        return withdraw(TombstoneReason::Deleted);
    };
    let matched: Vec<(&CompiledRule, Vec<&SyncRule>)> = if sync_disabled(obj) {
        Vec::new()
    } else {
        rules
            .iter()
            .filter_map(|r| Some((*r, matching::matching_rules(&r.spec, obj)?)))
            .collect()
    };
    if matched.is_empty() {
        return withdraw(TombstoneReason::Unpublished);
    }
    if let Some(why) = withheld(obj) {
        let rules = matched.iter().map(|(r, _)| r.name.clone()).collect();
        // Published by an agent that did not know better: withdrawn as
        // deleted, so that no orphan policy keeps a copy anywhere. An
        // original someone marked orphaned is only no longer published:
        // its copies follow their rules' orphan policy.
        withdraw(match why {
            Withheld::OrphanedCopy => TombstoneReason::Unpublished,
            _ => TombstoneReason::Deleted,
        });
        out.push((key.clone(), Publish::Withheld { why, rules }));
        return;
    }
    // Only the rules the policy lets this cluster publish for: an object
    // none of them selects is not published (withdrawn if it was).
    let what = subject_of(obj);
    let mut refusals = Vec::new();
    let matched: Vec<(&CompiledRule, Vec<&SyncRule>)> = matched
        .into_iter()
        .filter(|(r, _)| {
            let author = r.author(exports.local);
            match exports.policy.export(exports.local, author, &what) {
                Ok(()) => true,
                Err(why) => {
                    refusals.push((r.name.clone(), why));
                    false
                }
            }
        })
        .collect();
    if matched.is_empty() {
        // Refused because no valid policy is known (closed), what is on the
        // bus stays as it was: withdrawing it would make the sinks delete
        // their copies (orphanPolicy) over a typo, which narrows nothing.
        if !exports.policy.is_closed() {
            withdraw(TombstoneReason::Unpublished);
        }
        out.push((key.clone(), Publish::Refused { refusals }));
        return;
    }
    let placing: Vec<&CompiledRule> = matched.iter().map(|(r, _)| *r).collect();
    let seal_to = exports
        .seal
        .filter(|_| sealing::must_seal(obj, &placing))
        .map(|view| sealing::recipients(view, &placing));
    let entries: Vec<Vec<&SyncRule>> = matched.into_iter().map(|(_, e)| e).collect();
    let with_status = published::keeps_status(rules, &entries);
    let (hash, built) = memo.hash(key, obj, with_status);
    let uid = obj.pointer("/metadata/uid").and_then(Value::as_str);
    // A sealed envelope was opened on receipt: its hash is its object's. The
    // recipients are compared too: a new set is a new sealing.
    let same = current.is_some_and(|e| {
        Some(e.uid.as_str()) == uid && e.content_hash == hash && sealing::sealed_to(e) == seal_to
    });
    if !same {
        let obj = built.unwrap_or_else(|| published::published_object(obj, with_status));
        let publish = match seal_to {
            Some(to) => Publish::Sealed(obj, to),
            None => Publish::Snapshot(obj),
        };
        out.push((key.clone(), publish));
    }
}

/// What to publish for one kind: from the local objects, the rules of the
/// kind this cluster is a source of, and the envelopes on the bus. Pure but
/// for `memo`, which spares hashing a version hashed before.
pub fn plan(
    local: &LocalView,
    policy: &Policy,
    seal: Option<&SealView<'_>>,
    rules: &[&CompiledRule],
    kind: &KindState,
    memo: &mut HashMemo,
) -> Vec<(ObjectKey, Publish)> {
    let rules = effective(local, rules);
    let exports = Exports {
        policy,
        local: &local.name,
        seal,
    };
    let mut out = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for obj in kind.objects.values() {
        let obj = &obj;
        if !is_original(obj) {
            continue;
        }
        let Some(key) = ObjectKey::from_object(&local.name, obj) else {
            continue;
        };
        let current = kind.snapshots.meta(&key).filter(|e| !e.tombstone);
        plan_object(&exports, &rules, &key, Some(obj), current, memo, &mut out);
        seen.insert(key);
    }
    memo.retain(|k| seen.contains(k));
    for (key, e) in kind.snapshots.iter_meta() {
        if key.origin == local.name && !e.tombstone && !seen.contains(key) {
            plan_object(&exports, &rules, key, None, Some(e), memo, &mut out);
        }
    }
    out
}

/// [`plan`] for the objects at `keys` only (what changed since the last
/// plan): gives what `plan` gives for them.
pub fn plan_keys(
    local: &LocalView,
    policy: &Policy,
    seal: Option<&SealView<'_>>,
    rules: &[&CompiledRule],
    kind: &KindState,
    memo: &mut HashMemo,
    keys: &std::collections::BTreeSet<ObjectKey>,
) -> Vec<(ObjectKey, Publish)> {
    let rules = effective(local, rules);
    let exports = Exports {
        policy,
        local: &local.name,
        seal,
    };
    let mut out = Vec::new();
    for key in keys.iter().filter(|k| k.origin == local.name) {
        let obj = kind
            .objects
            .get(&(key.namespace.clone(), key.name.clone()))
            // The key of a local object of another kind's name cannot match
            // it: compare what the key was made from.
            .filter(|o| ObjectKey::from_object(&local.name, o).as_ref() == Some(key));
        let current = kind.snapshots.meta(key).filter(|e| !e.tombstone);
        if obj.as_ref().is_none_or(|o| !is_original(o)) {
            memo.forget(key);
        }
        plan_object(&exports, &rules, key, obj.as_ref(), current, memo, &mut out);
    }
    out
}

/// One source kind for the source pass to plan: every object (`full`: the
/// kind is new, re-listed or re-read from the bus, the rules or the fleet
/// changed, or a publish failed), else only the objects at `dirty` (see
/// `KindState::source_full`, `KindState::source_dirty`, which the engine
/// hands over).
pub(in crate::sync) struct Work {
    /// The kind.
    pub gvk: GroupVersionKind,
    /// Plan every object of it.
    pub full: bool,
    /// Our objects whose local or bus state changed since the last plan.
    pub dirty: BTreeSet<ObjectKey>,
}

/// What the source pass leaves for the engine to keep in the World.
#[derive(Default)]
pub(in crate::sync) struct Published {
    /// When the source side wants the next pass (a failed publish is tried
    /// again).
    pub wake: Option<Instant>,
    /// Our envelopes as the bus will hold them once acknowledged, without
    /// their object (only uid, resourceVersion and hash are needed: the
    /// object is the local one), by kind.
    pub envelopes: Vec<(GroupVersionKind, ObjectKey, Envelope)>,
    /// Our objects the bus did not take: planned again next pass, by kind.
    pub again: Vec<(GroupVersionKind, ObjectKey)>,
}

/// When publishing is held until (an acknowledgement failed a moment ago),
/// if it is; a hold that is over is cleared.
pub(in crate::sync) fn held(state: &mut SourceState) -> Option<Instant> {
    let hold = state.hold?;
    if hold > Instant::now() {
        // Keep last pass's source errors; come back when the hold ends.
        return Some(hold);
    }
    state.hold = None;
    None
}

/// Publishes what changed among our originals, for the source kinds in
/// `work` (those fully read). Returns when the source side wants the next
/// pass and what the World is to keep of what was published.
pub(in crate::sync) async fn source_pass(
    world: &World,
    state: &mut SourceState,
    ctx: &Context,
    tx: &mpsc::Sender<Input>,
    work: Vec<Work>,
) -> Published {
    let rules_now = &world.rules;
    state.errors.retain(|r, _| rules_now.contains_key(r));
    state.withheld.retain(|r, _| rules_now.contains_key(r));
    state.refused.retain(|r, _| rules_now.contains_key(r));
    let kinds = &world.kinds;
    state.hashes.retain(|g, _| kinds.contains_key(g));
    let mut pass = Pass {
        world,
        state,
        ctx,
        tx,
        out: Published::default(),
    };
    let mut wake = None;
    for Work { gvk, full, dirty } in work {
        // Only what changed since the last plan, unless something that
        // concerns every object did (see `KindState::source_full`): a
        // pass per watch event must not cost a look at every object.
        if !full && dirty.is_empty() {
            continue;
        }
        let rules: Vec<&CompiledRule> = world.rules.values().filter(|r| r.source == gvk).collect();
        // Errors and withheld objects are found again for what is
        // planned again.
        let again = if full { None } else { Some(&dirty) };
        forget_planned(&mut pass.state.errors, &rules, again);
        forget_planned(&mut pass.state.withheld, &rules, again);
        forget_planned(&mut pass.state.refused, &rules, again);
        let Some(kind) = world.kinds.get(&gvk) else {
            continue;
        };
        let memo = pass.state.hashes.entry(gvk.clone()).or_default();
        let seal = ctx.sealing.as_ref().map(|keys| SealView {
            local: &world.fleet.local.name,
            own: &keys.public,
            peers: &world.fleet.peers,
        });
        let planned = if full {
            plan(
                &world.fleet.local,
                &world.policy,
                seal.as_ref(),
                &rules,
                kind,
                memo,
            )
        } else {
            plan_keys(
                &world.fleet.local,
                &world.policy,
                seal.as_ref(),
                &rules,
                kind,
                memo,
                &dirty,
            )
        };
        let matching_rules: BTreeMap<ObjectKey, Vec<String>> = planned
            .iter()
            .filter_map(|(k, p)| match p {
                Publish::Snapshot(obj) | Publish::Sealed(obj, _) => Some((
                    k.clone(),
                    rules
                        .iter()
                        .filter(|r| matching::matching_rules(&r.spec, obj).is_some())
                        .map(|r| r.name.clone())
                        .collect(),
                )),
                Publish::Tombstone { .. } | Publish::Withheld { .. } | Publish::Refused { .. } => {
                    None
                }
            })
            .collect();
        if let Some(at) = pass.publish_planned(&gvk, planned, &matching_rules).await {
            wake = Some(at);
        }
    }
    let withheld: BTreeSet<&String> = pass
        .state
        .withheld
        .values()
        .flat_map(|m| m.keys())
        .collect();
    ctx.metrics.sync_withheld.set(withheld.len() as i64);
    Published { wake, ..pass.out }
}

/// One source pass: what it reads, its own state, the IO handles, and what
/// it leaves for the World.
struct Pass<'a> {
    world: &'a World,
    state: &'a mut SourceState,
    ctx: &'a Context,
    tx: &'a mpsc::Sender<Input>,
    out: Published,
}

impl Pass<'_> {
    /// Publishes what `plan` decided for `gvk`, and books each result: the
    /// envelope kept, a failed publish tried again (when: returned), an
    /// unpublishable object an error of the rules that select it.
    async fn publish_planned(
        &mut self,
        gvk: &GroupVersionKind,
        planned: Vec<(ObjectKey, Publish)>,
        matching_rules: &BTreeMap<ObjectKey, Vec<String>>,
    ) -> Option<Instant> {
        let mut retry = None;
        for (key, publish) in planned {
            let Some(publish) = book(self.state, &key, publish) else {
                continue;
            };
            match self.publish(gvk, &key, publish).await {
                Ok(mut env) => {
                    self.state.overwritten.remove(&key);
                    // Only uid, resourceVersion and hash of our own
                    // envelopes are needed: the object is the local one.
                    env.object = None;
                    self.out.envelopes.push((gvk.clone(), key, env));
                }
                Err(PublishError::Bus(error)) => {
                    // NATS is away: try again soon (the state comparison
                    // finds the same difference then).
                    tracing::warn!(object = %describe_key(&key), %error, "not published; retrying");
                    self.out.again.push((gvk.clone(), key.clone()));
                    self.ctx.check_layout.notify_one();
                    retry = Some(Instant::now() + std::time::Duration::from_secs(2));
                }
                Err(PublishError::Object(error)) => {
                    tracing::warn!(object = %describe_key(&key), %error, "not published");
                    self.event_unpublishable(gvk, &key, &error).await;
                    for rule in matching_rules.get(&key).into_iter().flatten() {
                        self.state
                            .errors
                            .entry(rule.clone())
                            .or_default()
                            .insert(describe_key(&key), error.clone());
                    }
                }
            }
        }
        retry
    }

    /// A Kubernetes Event on an object that cannot be published (once per
    /// version), so its owner sees why it does not appear elsewhere.
    async fn event_unpublishable(&mut self, gvk: &GroupVersionKind, key: &ObjectKey, error: &str) {
        let Some(obj) = self
            .world
            .kinds
            .get(gvk)
            .and_then(|k| k.objects.get(&(key.namespace.clone(), key.name.clone())))
        else {
            return;
        };
        let s = |p: &str| obj.pointer(p).and_then(Value::as_str).map(str::to_owned);
        let version = (
            key.clone(),
            s("/metadata/resourceVersion").unwrap_or_default(),
        );
        if !self.state.unpublishable.insert(version) {
            return;
        }
        let object = k8s_openapi::api::core::v1::ObjectReference {
            api_version: s("/apiVersion"),
            kind: s("/kind"),
            namespace: s("/metadata/namespace"),
            name: s("/metadata/name"),
            uid: s("/metadata/uid"),
            ..Default::default()
        };
        self.ctx
            .recorder
            .publish(
                &object,
                crate::kube::events::EventType::Warning,
                "NotPublished",
                &format!("not published to the fleet: {error}"),
            )
            .await;
    }

    /// Publishes one envelope without waiting for its acknowledgement (a
    /// task watches it, so thousands can be in flight); returns what the
    /// bus will hold once acknowledged.
    async fn publish(
        &self,
        gvk: &GroupVersionKind,
        key: &ObjectKey,
        what: Publish,
    ) -> Result<Envelope, PublishError> {
        let (world, ctx) = (self.world, self.ctx);
        let (mut env, wire) = envelope(world, ctx, key, what)?;
        let subject = key.to_subject(ctx.layout.prefix());
        if check_subject_len(&subject).is_err() {
            ctx.metrics.sync_rejected("too_large");
            return Err(PublishError::Object(
                "the object's subject is longer than NATS allows".to_owned(),
            ));
        }
        let bytes = wire
            .as_ref()
            .unwrap_or(&env)
            .encode()
            .map_err(|e| PublishError::Object(e.to_string()))?;
        let max = ctx.max_payload();
        if let Err(e) = check_size(bytes.len(), max) {
            ctx.metrics.sync_rejected("too_large");
            return Err(PublishError::Object(e.to_string()));
        }
        let mut headers = HeaderMap::new();
        let after_tombstone = world
            .kinds
            .get(gvk)
            .and_then(|k| k.snapshots.meta(key))
            .is_some_and(|e| e.tombstone);
        let resealed = wire.is_some() && same_version_on_bus(world, gvk, key, &env);
        let overwritten = resealed || self.state.overwritten.contains(key);
        let id = msg_id(&env, after_tombstone, overwritten);
        headers.insert("Nats-Msg-Id", id.as_str());
        let ack = ctx
            .js
            .publish_with_headers(subject, headers, bytes.into())
            .await
            .map_err(|e| PublishError::Bus(e.to_string()))?;
        ctx.metrics
            .sync_published
            .get_or_create(&vec![(
                "type",
                if env.tombstone {
                    "tombstone"
                } else {
                    "snapshot"
                },
            )])
            .inc();
        let tx = self.tx.clone();
        let before = world
            .kinds
            .get(gvk)
            // Our own envelopes are kept without their object anyway.
            .and_then(|k| k.snapshots.meta(key))
            .cloned()
            .map(Box::new);
        let (gvk, key) = (gvk.clone(), key.clone());
        // What was sent, without the object (only uid, version and hash count;
        // for a sealed one, the recipients too, as reading it back gives them).
        env.encryption = wire
            .as_ref()
            .and_then(|w| w.encryption.as_ref())
            .map(|h| h.names_only());
        let object = env.object.take();
        let sent = Box::new(env.clone());
        env.object = object;
        tokio::spawn(async move {
            match ack.await {
                Err(error) => {
                    tracing::warn!(object = %describe_key(&key), %error, "publish not acknowledged; will publish again");
                    let _ = tx.send(Input::PublishFailed(gvk, key, before, sent)).await;
                }
                // Not stored: the subject keeps a message that is not this
                // one (see `Input::PublishDuplicate`).
                Ok(ack) if ack.duplicate => {
                    let _ = tx.send(Input::PublishDuplicate(gvk, key, before)).await;
                }
                Ok(_) => {}
            }
        });
        Ok(env)
    }
}

/// The envelope of `what` at `key`, and its form on the wire when that is
/// not the envelope itself (sealed); signed in secure mode. Shared by
/// `publish` and the preview's `preview-source`, so what a preview is
/// given is what this origin publishes.
pub(in crate::sync) fn envelope(
    world: &World,
    ctx: &Context,
    key: &ObjectKey,
    what: Publish,
) -> Result<(Envelope, Option<Envelope>), PublishError> {
    let now = chrono::Utc::now();
    let origin = &world.fleet.local.name;
    let id = Some(ctx.cluster_id.as_str());
    let mut sealed_to = None;
    let mut env = match what {
        Publish::Snapshot(obj) => Envelope::snapshot(origin, id, obj, now)
            .map_err(|e| PublishError::Object(e.to_string()))?,
        Publish::Sealed(obj, to) => {
            sealed_to = Some(to);
            Envelope::snapshot(origin, id, obj, now)
                .map_err(|e| PublishError::Object(e.to_string()))?
        }
        Publish::Tombstone {
            uid,
            resource_version,
            reason,
        } => Envelope::tombstone(origin, id, &uid, &resource_version, now, reason),
        // `source_pass` does not hand these over; refused all the same.
        Publish::Withheld { why, .. } => return Err(PublishError::Object(why.why().to_owned())),
        Publish::Refused { .. } => {
            return Err(PublishError::Object(
                "this cluster's policy refuses it".to_owned(),
            ))
        }
    };
    let wire = on_the_wire(world, ctx, key, &mut env, sealed_to.as_ref())?;
    Ok((env, wire))
}

/// What goes on the bus for `env`: sealed to `sealed_to` (returned; None
/// when it is published in clear), and in secure mode signed with this
/// cluster's certified key (PROTOCOL §4.9), the sealed form when sealed:
/// its signature covers the ciphertext's hash, checked before opening.
fn on_the_wire(
    world: &World,
    ctx: &Context,
    key: &ObjectKey,
    env: &mut Envelope,
    sealed_to: Option<&sealing::Recipients>,
) -> Result<Option<Envelope>, PublishError> {
    let mut wire = match sealed_to {
        Some(to) => Some(seal(world, ctx, env, to)?),
        None => None,
    };
    if let Some(identity) = &ctx.cfg.trust {
        let signed = wire.as_mut().unwrap_or(env);
        signed.sign(key, identity.signing_key(), &identity.key_id());
    }
    Ok(wire)
}

/// Whether our last envelope at `key` is a snapshot of `env`'s version:
/// sealed again (to another set), `env` needs a new msg id, the plain one
/// was used by the first sealing within the duplicate window.
fn same_version_on_bus(
    world: &World,
    gvk: &GroupVersionKind,
    key: &ObjectKey,
    env: &Envelope,
) -> bool {
    world
        .kinds
        .get(gvk)
        .and_then(|k| k.snapshots.meta(key))
        .is_some_and(|e| {
            !e.tombstone && e.uid == env.uid && e.resource_version == env.resource_version
        })
}

/// `env` sealed to the clusters `to` (those of them with a key now).
fn seal(
    world: &World,
    ctx: &Context,
    env: &Envelope,
    to: &sealing::Recipients,
) -> Result<Envelope, PublishError> {
    let Some(own) = &ctx.sealing else {
        // `plan` asks for sealing only when we hold a key.
        return Err(PublishError::Object(
            "this cluster has no sealing key".to_owned(),
        ));
    };
    let keys = sealing::keys(to, &world.fleet.local.name, &own.public, &world.fleet.peers);
    env.seal(&keys, &mut rand::rng())
        .map_err(|e| PublishError::Object(e.to_string()))
}

/// Forgets the source side's findings (`source_errors`, `source_withheld`:
/// by rule, by object) that planning finds again: every finding of `rules`
/// for a full plan, else those of the objects at the `dirty` keys.
fn forget_planned<V>(
    findings: &mut BTreeMap<String, BTreeMap<String, V>>,
    rules: &[&CompiledRule],
    dirty: Option<&std::collections::BTreeSet<ObjectKey>>,
) {
    match dirty {
        None => {
            for r in rules {
                findings.remove(&r.name);
            }
        }
        Some(keys) => {
            for key in keys {
                let name = describe_key(key);
                for found in findings.values_mut() {
                    found.remove(&name);
                }
            }
        }
    }
}

/// Books what is not to be published (withheld, refused by the policy) in
/// `source` for the rules' status; gives back what is.
fn book(source: &mut SourceState, key: &ObjectKey, publish: Publish) -> Option<Publish> {
    match publish {
        Publish::Refused { refusals } => {
            for (rule, why) in refusals {
                let book = source.refused.entry(rule).or_default();
                book.insert(describe_key(key), why);
            }
            None
        }
        Publish::Withheld { why, rules } => {
            for rule in rules {
                let book = source.withheld.entry(rule).or_default();
                book.insert(describe_key(key), why);
            }
            None
        }
        other => Some(other),
    }
}

/// The `Nats-Msg-Id` (§4.2): the protocol's id, or the republish id when a
/// snapshot comes back after a tombstone of the same version, or when the
/// subject holds a message we did not publish (`overwritten`), snapshot or
/// tombstone: else the server drops it as a duplicate of its first
/// publication and the subject keeps what it has.
fn msg_id(env: &Envelope, after_tombstone: bool, overwritten: bool) -> String {
    if overwritten || (after_tombstone && !env.tombstone) {
        env.republish_msg_id()
    } else {
        env.msg_id()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::model::believed_after_failure;
    use crate::sync::model::meta::local_key;
    use crate::sync::rules::compile as rules;
    use crate::sync::world::KindState;
    use fleetbus_schemas::registry::FeatureRecord;
    use serde_json::json;

    const SELF: &str = "c1";

    fn secret(name: &str, uid: &str, rv: &str, data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"namespace": "apps", "name": name, "uid": uid,
                            "resourceVersion": rv, "labels": {"sync": "yes"}},
               "data": {"k": data}})
    }

    fn with_annotation(mut obj: Value, key: &str, value: &str) -> Value {
        obj["metadata"]["annotations"] = json!({ key: value });
        obj
    }

    fn without_label(mut obj: Value) -> Value {
        obj["metadata"]["labels"] = json!({});
        obj
    }

    /// A rule for Secrets labelled `sync=yes`, plus `extra` spec fields.
    fn rule(extra: Value) -> CompiledRule {
        let mut spec = json!({"groupVersionKind": {"version": "v1", "kind": "Secret"},
                              "rules": [{"match": [{"labels": [{"matchLabels": {"sync": "yes"}}]}]}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        let obj = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
                         "metadata": {"name": "r"}, "spec": spec});
        let set = rules::compile(&[&obj]);
        set["r"].clone()
    }

    fn local() -> LocalView {
        LocalView {
            name: SELF.to_owned(),
            labels: [("role".to_owned(), "source".to_owned())].into(),
            features: vec![FeatureRecord {
                feature_name: "gpu".to_owned(),
                labels: BTreeMap::new(),
            }],
            record: Value::Null,
            taints: Vec::new(),
        }
    }

    fn key_of(origin: &str, obj: &Value) -> ObjectKey {
        ObjectKey::from_object(origin, obj).unwrap()
    }

    /// What `origin` has on the bus for `obj`: its snapshot.
    fn published(origin: &str, obj: &Value) -> (ObjectKey, Envelope) {
        let env = Envelope::snapshot(origin, None, obj.clone(), chrono::Utc::now()).unwrap();
        (key_of(origin, obj), env)
    }

    fn kind(objects: &[&Value], snapshots: Vec<(ObjectKey, Envelope)>) -> KindState {
        let objects: crate::sync::model::LocalObjects = objects
            .iter()
            .map(|o| (local_key(o).unwrap(), (*o).clone()))
            .collect();
        KindState::for_test(objects, snapshots.into_iter().collect())
    }

    /// `plan` of this cluster under the default policy, in clear.
    fn plan_default(
        rules: &[&CompiledRule],
        kind: &KindState,
        memo: &mut HashMemo,
    ) -> Vec<(ObjectKey, Publish)> {
        plan(&local(), &Policy::default(), None, rules, kind, memo)
    }

    fn run(rule: &CompiledRule, kind: &KindState) -> Vec<(ObjectKey, Publish)> {
        plan_default(&[rule], kind, &mut HashMemo::default())
    }

    fn tombstone(uid: &str, rv: &str, reason: TombstoneReason) -> Publish {
        Publish::Tombstone {
            uid: uid.to_owned(),
            resource_version: rv.to_owned(),
            reason,
        }
    }

    /// Our tombstone of `uid` at `rv` (deleted).
    fn deleted(uid: &str, rv: &str) -> Envelope {
        let now = chrono::Utc::now();
        Envelope::tombstone(SELF, None, uid, rv, now, TombstoneReason::Deleted)
    }

    /// A snapshot whose ack was lost may be on the bus: once the object is
    /// deleted, it is withdrawn, even when the bus held a tombstone of an
    /// earlier life of the object before (chaos `redelivery`, seed 1).
    #[test]
    fn a_snapshot_whose_ack_was_lost_is_withdrawn_once_the_object_is_gone() {
        let old = secret("a", "u1", "5", "v1");
        let new = secret("a", "u2", "7", "v1");
        let (key, live_old) = published(SELF, &old);
        let gone = deleted("u1", "6");
        assert!(!live_old.tombstone && gone.tombstone);
        let (_, sent) = published(SELF, &new);
        let believed = believed_after_failure(Some(Box::new(gone)), sent).unwrap();
        let r = rule(json!({}));
        // Deleted since: its tombstone goes out.
        let planned = run(&r, &kind(&[], vec![(key.clone(), believed.clone())]));
        assert_eq!(
            planned,
            vec![(key.clone(), tombstone("u2", "7", TombstoneReason::Deleted))]
        );
        // Still here: published again (the bus may not hold it).
        let planned = run(&r, &kind(&[&new], vec![(key.clone(), believed)]));
        assert_eq!(planned, vec![(key, Publish::Snapshot(new))]);
    }

    #[test]
    fn a_tombstone_whose_ack_was_lost_is_published_again() {
        let s = secret("a", "u1", "5", "v1");
        let (key, live) = published(SELF, &s);
        let sent = deleted("u1", "5");
        let believed = believed_after_failure(Some(Box::new(live)), sent).unwrap();
        let planned = run(&rule(json!({})), &kind(&[], vec![(key.clone(), believed)]));
        assert_eq!(
            planned,
            vec![(key, tombstone("u1", "5", TombstoneReason::Deleted))]
        );
    }

    #[test]
    fn a_new_matching_original_is_published() {
        let s = secret("a", "u1", "5", "v1");
        let planned = run(&rule(json!({})), &kind(&[&s], vec![]));
        assert_eq!(planned, vec![(key_of(SELF, &s), Publish::Snapshot(s))]);
    }

    #[test]
    fn an_unchanged_original_is_not_published_again() {
        let s = secret("a", "u1", "5", "v1");
        let planned = run(&rule(json!({})), &kind(&[&s], vec![published(SELF, &s)]));
        assert_eq!(planned, vec![]);
    }

    #[test]
    fn changed_content_is_published() {
        let old = secret("a", "u1", "5", "v1");
        let new = secret("a", "u1", "6", "v2");
        let planned = run(
            &rule(json!({})),
            &kind(&[&new], vec![published(SELF, &old)]),
        );
        assert_eq!(planned, vec![(key_of(SELF, &new), Publish::Snapshot(new))]);
    }

    #[test]
    fn a_recreated_object_with_the_same_content_is_published() {
        // Same name and content, new uid: the copies must learn the new uid.
        let old = secret("a", "u1", "5", "v1");
        let new = secret("a", "u2", "9", "v1");
        let planned = run(
            &rule(json!({})),
            &kind(&[&new], vec![published(SELF, &old)]),
        );
        assert_eq!(planned, vec![(key_of(SELF, &new), Publish::Snapshot(new))]);
    }

    #[test]
    fn an_object_published_again_after_a_tombstone() {
        let s = secret("a", "u1", "5", "v1");
        let gone = Envelope::tombstone(
            SELF,
            None,
            "u1",
            "5",
            chrono::Utc::now(),
            TombstoneReason::Unpublished,
        );
        let planned = run(
            &rule(json!({})),
            &kind(&[&s], vec![(key_of(SELF, &s), gone)]),
        );
        assert_eq!(planned, vec![(key_of(SELF, &s), Publish::Snapshot(s))]);
    }

    #[test]
    fn an_object_that_stops_matching_is_unpublished() {
        let was = secret("a", "u1", "5", "v1");
        let now = without_label(secret("a", "u1", "6", "v1"));
        let planned = run(
            &rule(json!({})),
            &kind(&[&now], vec![published(SELF, &was)]),
        );
        // The tombstone names the version on the bus (the last one published).
        assert_eq!(
            planned,
            vec![(
                key_of(SELF, &was),
                tombstone("u1", "5", TombstoneReason::Unpublished)
            )]
        );
    }

    #[test]
    fn a_non_matching_object_never_published_gives_nothing() {
        let s = without_label(secret("a", "u1", "5", "v1"));
        assert_eq!(run(&rule(json!({})), &kind(&[&s], vec![])), vec![]);
    }

    #[test]
    fn an_object_deleted_locally_is_tombstoned_as_deleted() {
        let s = secret("a", "u1", "5", "v1");
        let planned = run(&rule(json!({})), &kind(&[], vec![published(SELF, &s)]));
        assert_eq!(
            planned,
            vec![(
                key_of(SELF, &s),
                tombstone("u1", "5", TombstoneReason::Deleted)
            )]
        );
    }

    #[test]
    fn tombstones_and_other_origins_envelopes_are_left_alone() {
        let ours = secret("gone", "u1", "5", "v1");
        let already = Envelope::tombstone(
            SELF,
            None,
            "u1",
            "5",
            chrono::Utc::now(),
            TombstoneReason::Deleted,
        );
        let theirs = secret("theirs", "u9", "3", "v1");
        let planned = run(
            &rule(json!({})),
            &kind(
                &[],
                vec![(key_of(SELF, &ours), already), published("c2", &theirs)],
            ),
        );
        assert_eq!(planned, vec![]);
    }

    #[test]
    fn copies_are_never_published() {
        let copy = with_annotation(
            secret("a", "u1", "5", "v1"),
            well_known::ANNOTATION_ORIGIN_CLUSTER,
            "c2",
        );
        assert_eq!(run(&rule(json!({})), &kind(&[&copy], vec![])), vec![]);
    }

    #[test]
    fn a_sync_disabled_original_is_not_published_and_unpublished_if_it_was() {
        let s = secret("a", "u1", "5", "v1");
        let disabled = with_annotation(
            secret("a", "u1", "6", "v1"),
            well_known::ANNOTATION_RESOURCE_SYNC_DISABLED,
            "true",
        );
        assert_eq!(run(&rule(json!({})), &kind(&[&disabled], vec![])), vec![]);
        assert_eq!(
            run(
                &rule(json!({})),
                &kind(&[&disabled], vec![published(SELF, &s)])
            ),
            vec![(
                key_of(SELF, &s),
                tombstone("u1", "5", TombstoneReason::Unpublished)
            )]
        );
    }

    fn typed(mut obj: Value, type_: &str) -> Value {
        obj["type"] = json!(type_);
        obj
    }

    #[test]
    fn what_never_leaves_the_cluster_is_withheld_and_reported_by_the_rules_selecting_it() {
        let token = typed(
            secret("tok", "u1", "5", "t"),
            "kubernetes.io/service-account-token",
        );
        let withheld = |why| Publish::Withheld {
            why,
            rules: vec!["r".to_owned()],
        };
        assert_eq!(
            run(&rule(json!({})), &kind(&[&token], vec![])),
            vec![(
                key_of(SELF, &token),
                withheld(Withheld::ServiceAccountToken)
            )]
        );
        let peer = typed(
            secret("b-kubeconfig", "u2", "5", "k"),
            well_known::SECRET_TYPE_CLUSTER_KUBECONFIG,
        );
        assert_eq!(
            run(&rule(json!({})), &kind(&[&peer], vec![])),
            vec![(key_of(SELF, &peer), withheld(Withheld::WrittenByFleetbus))]
        );
        // Not selected by any rule: nothing to report.
        let unselected = without_label(token.clone());
        assert_eq!(run(&rule(json!({})), &kind(&[&unselected], vec![])), vec![]);
        // Published by an older agent: withdrawn as deleted, so no orphan
        // policy keeps a copy.
        let plain = secret("tok", "u1", "4", "t");
        assert_eq!(
            run(
                &rule(json!({})),
                &kind(&[&token], vec![published(SELF, &plain)])
            ),
            vec![
                (
                    key_of(SELF, &token),
                    tombstone("u1", "4", TombstoneReason::Deleted)
                ),
                (
                    key_of(SELF, &token),
                    withheld(Withheld::ServiceAccountToken)
                ),
            ]
        );
    }

    /// A copy this cluster's sink orphaned is not published back as this
    /// cluster's original; an original someone marked orphaned is withdrawn
    /// as unpublished, so its copies follow their orphan policy.
    #[test]
    fn an_orphaned_copy_is_not_published_back() {
        let orphaned = with_annotation(
            secret("o", "u1", "5", "v"),
            well_known::ANNOTATION_ORPHANED_FROM,
            "c2",
        );
        let held = Publish::Withheld {
            why: Withheld::OrphanedCopy,
            rules: vec!["r".to_owned()],
        };
        assert_eq!(
            run(&rule(json!({})), &kind(&[&orphaned], vec![])),
            vec![(key_of(SELF, &orphaned), held.clone())]
        );
        let plain = secret("o", "u1", "4", "v");
        assert_eq!(
            run(
                &rule(json!({})),
                &kind(&[&orphaned], vec![published(SELF, &plain)])
            ),
            vec![
                (
                    key_of(SELF, &orphaned),
                    tombstone("u1", "4", TombstoneReason::Unpublished)
                ),
                (key_of(SELF, &orphaned), held),
            ]
        );
    }

    #[test]
    fn a_cluster_outside_the_source_selector_publishes_nothing() {
        let s = secret("a", "u1", "5", "v1");
        let selects_us =
            rule(json!({"sourceClusterSelector": {"matchLabels": {"role": "source"}}}));
        let excludes_us = rule(json!({"sourceClusterSelector": {"matchLabels": {"role": "sink"}}}));
        assert_eq!(run(&selects_us, &kind(&[&s], vec![])).len(), 1);
        assert_eq!(run(&excludes_us, &kind(&[&s], vec![])), vec![]);
        // What we published before we stopped qualifying is withdrawn.
        assert_eq!(
            run(&excludes_us, &kind(&[&s], vec![published(SELF, &s)])),
            vec![(
                key_of(SELF, &s),
                tombstone("u1", "5", TombstoneReason::Unpublished)
            )]
        );
    }

    #[test]
    fn a_cluster_without_the_required_feature_publishes_nothing() {
        let s = secret("a", "u1", "5", "v1");
        let has = rule(json!({"clusterFeatureMatch": [{"featureName": "gpu"}]}));
        let lacks =
            rule(json!({"clusterFeatureMatch": [{"featureName": "gpu"}, {"featureName": "edge"}]}));
        assert_eq!(run(&has, &kind(&[&s], vec![])).len(), 1);
        assert_eq!(run(&lacks, &kind(&[&s], vec![])), vec![]);
    }

    #[test]
    fn a_rule_from_elsewhere_gets_only_what_the_export_policy_allows() {
        let mut s = secret("a", "u1", "5", "v1");
        s["metadata"]["namespace"] = json!("kube-system");
        let mut foreign = rule(json!({}));
        foreign.author = Some("c9".to_owned());
        let on_bus = kind(&[&s], vec![published(SELF, &s)]);
        let policy = Policy::default();
        let plan_with = |rules: &[&CompiledRule], k: &KindState| {
            plan(&local(), &policy, None, rules, k, &mut HashMemo::default())
        };
        // Published before the policy (or by an older agent): withdrawn as
        // unpublished (the sinks' orphanPolicy decides), and the rule is told why.
        let out = plan_with(&[&foreign], &on_bus);
        assert_eq!(
            out[0],
            (
                key_of(SELF, &s),
                tombstone("u1", "5", TombstoneReason::Unpublished)
            )
        );
        let Publish::Refused { refusals } = &out[1].1 else {
            panic!("{out:?}")
        };
        assert_eq!(refusals[0].0, "r");
        assert_eq!(
            refusals[0].1.to_string(),
            "export of Secret in kube-system refused by the built-in default policy (export.rules[0])"
        );
        // Never published: nothing to withdraw, the refusal only.
        let out = plan_with(&[&foreign], &kind(&[&s], vec![]));
        assert!(
            matches!(&out[..], [(_, Publish::Refused { .. })]),
            "{out:?}"
        );
        // This cluster's own rule is not asked; another rule that may have
        // it publishes it (whoever selects it then may copy it).
        let own = rule(json!({}));
        let out = plan_with(&[&own], &kind(&[&s], vec![]));
        assert!(matches!(&out[..], [(_, Publish::Snapshot(_))]), "{out:?}");
        let out = plan_with(&[&foreign, &own], &kind(&[&s], vec![]));
        assert!(matches!(&out[..], [(_, Publish::Snapshot(_))]), "{out:?}");
        // Allowed again by a policy: published again.
        let allow = Policy::parse(&json!({"metadata": {"name": "default"},
            "spec": {"export": {"otherwise": "Allow"}}}))
        .unwrap();
        let out = plan(
            &local(),
            &allow,
            None,
            &[&foreign],
            &kind(&[&s], vec![]),
            &mut HashMemo::default(),
        );
        assert!(matches!(&out[..], [(_, Publish::Snapshot(_))]), "{out:?}");
    }

    #[test]
    fn an_invalid_rule_publishes_nothing_and_no_rule_withdraws() {
        let s = secret("a", "u1", "5", "v1");
        let mut bad = rule(json!({}));
        bad.problem = Some("bad".to_owned());
        assert_eq!(run(&bad, &kind(&[&s], vec![])), vec![]);
        // The rule went: what it published is unpublished, not deleted.
        assert_eq!(
            plan_default(
                &[],
                &kind(&[&s], vec![published(SELF, &s)]),
                &mut HashMemo::default()
            ),
            vec![(
                key_of(SELF, &s),
                tombstone("u1", "5", TombstoneReason::Unpublished)
            )]
        );
    }

    #[test]
    fn a_closed_policy_publishes_nothing_new_for_rules_from_elsewhere_and_withdraws_nothing() {
        let s = secret("a", "u1", "5", "v1");
        let mut foreign = rule(json!({}));
        foreign.author = Some("c9".to_owned());
        let typo = json!({"metadata": {"name": "default"}, "spec": {"exprot": {}}});
        let closed = crate::sync::policy::in_force(&Policy::default(), Some(&typo));
        assert!(closed.is_closed());
        let plan_with = |rules: &[&CompiledRule], k: &KindState| {
            plan(&local(), &closed, None, rules, k, &mut HashMemo::default())
        };
        // Published before: it stays on the bus as it was (no tombstone),
        // and the rule is told why it gets nothing new.
        let mut changed = s.clone();
        changed["metadata"]["resourceVersion"] = json!("6");
        changed["data"] = json!({"k": "bmV3"});
        for now in [&s, &changed] {
            let out = plan_with(&[&foreign], &kind(&[now], vec![published(SELF, &s)]));
            let [(_, Publish::Refused { refusals })] = &out[..] else {
                panic!("{out:?}")
            };
            assert!(
                refusals[0]
                    .1
                    .by
                    .starts_with("the invalid SyncPolicy default"),
                "{refusals:?}"
            );
        }
        // Never published: nothing goes out.
        let out = plan_with(&[&foreign], &kind(&[&s], vec![]));
        assert!(
            matches!(&out[..], [(_, Publish::Refused { .. })]),
            "{out:?}"
        );
        // Deleted here, or no rule selects it any more: withdrawn as ever
        // (that lets nothing out).
        let out = plan_with(&[&foreign], &kind(&[], vec![published(SELF, &s)]));
        assert_eq!(
            out,
            vec![(
                key_of(SELF, &s),
                tombstone("u1", "5", TombstoneReason::Deleted)
            )]
        );
        // This cluster's own rules are not asked: published as ever.
        let own = rule(json!({}));
        let out = plan_with(&[&own], &kind(&[&s], vec![]));
        assert!(matches!(&out[..], [(_, Publish::Snapshot(_))]), "{out:?}");
    }

    fn with_status(mut obj: Value, rv: &str, status: Value) -> Value {
        obj["metadata"]["resourceVersion"] = json!(rv);
        obj["status"] = status;
        obj
    }

    /// What `origin` has on the bus for `obj` published without its status.
    fn published_without_status(origin: &str, obj: &Value) -> (ObjectKey, Envelope) {
        published(origin, &published::published_object(obj, false))
    }

    #[test]
    fn planning_only_changed_keys_gives_what_a_full_plan_gives_for_them() {
        // Every case of the full plan at once: new, unchanged, changed,
        // deleted here, no longer matching, sync-disabled, and a copy that
        // took the place of an original of ours.
        let unchanged = secret("same", "u1", "1", "v1");
        let old = secret("changed", "u2", "1", "v1");
        let changed = secret("changed", "u2", "2", "v2");
        let new = secret("new", "u3", "1", "v1");
        let deleted = secret("deleted", "u4", "1", "v1");
        let was = secret("unmatched", "u5", "1", "v1");
        let unmatched = without_label(secret("unmatched", "u5", "2", "v1"));
        let disabled = with_annotation(
            secret("disabled", "u6", "2", "v1"),
            well_known::ANNOTATION_RESOURCE_SYNC_DISABLED,
            "",
        );
        let was_disabled = secret("disabled", "u6", "1", "v1");
        let replaced = secret("replaced", "u7", "1", "v1");
        let copy = with_annotation(
            secret("replaced", "u8", "1", "v1"),
            well_known::ANNOTATION_ORIGIN_CLUSTER,
            "c2",
        );
        let token = typed(
            secret("token", "u9", "1", "t"),
            "bootstrap.kubernetes.io/token",
        );
        let leaked = typed(
            secret("leaked", "u10", "2", "t"),
            "kubernetes.io/service-account-token",
        );
        let was_leaked = secret("leaked", "u10", "1", "t");
        let k = kind(
            &[
                &unchanged, &changed, &new, &unmatched, &disabled, &copy, &token, &leaked,
            ],
            vec![
                published(SELF, &unchanged),
                published(SELF, &old),
                published(SELF, &deleted),
                published(SELF, &was),
                published(SELF, &was_disabled),
                published(SELF, &replaced),
                published(SELF, &was_leaked),
            ],
        );
        let r = rule(json!({}));
        let full = plan_default(&[&r], &k, &mut HashMemo::default());
        assert_eq!(full.len(), 9, "{full:?}");
        let keys: Vec<ObjectKey> = [
            &unchanged, &changed, &new, &deleted, &unmatched, &disabled, &replaced, &token, &leaked,
        ]
        .iter()
        .map(|o| key_of(SELF, o))
        .collect();
        for key in &keys {
            let one: std::collections::BTreeSet<ObjectKey> = [key.clone()].into();
            let partial = plan_keys(
                &local(),
                &Policy::default(),
                None,
                &[&r],
                &k,
                &mut HashMemo::default(),
                &one,
            );
            let expected: Vec<_> = full.iter().filter(|(k, _)| k == key).cloned().collect();
            assert_eq!(partial, expected, "{}", describe_key(key));
        }
        // All at once, too; and a peer's key is never ours to plan.
        let mut all: std::collections::BTreeSet<ObjectKey> = keys.into_iter().collect();
        all.insert(key_of("c2", &new));
        let mut partial = plan_keys(
            &local(),
            &Policy::default(),
            None,
            &[&r],
            &k,
            &mut HashMemo::default(),
            &all,
        );
        let mut full = full;
        partial.sort_by(|a, b| a.0.cmp(&b.0));
        full.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(partial, full);
    }

    #[test]
    fn status_is_left_out_unless_a_rule_syncs_it() {
        let s = with_status(secret("a", "u1", "5", "v1"), "5", json!({"phase": "Up"}));
        let planned = run(&rule(json!({})), &kind(&[&s], vec![]));
        let Some((_, Publish::Snapshot(obj))) = planned.first() else {
            panic!("{planned:?}");
        };
        assert!(obj.get("status").is_none(), "{obj}");
        assert_eq!(obj["data"], s["data"]);
        let syncs = rule(json!({"rules": [{"mutations": {"syncStatus": true}}]}));
        assert_eq!(
            run(&syncs, &kind(&[&s], vec![])),
            vec![(key_of(SELF, &s), Publish::Snapshot(s.clone()))]
        );
    }

    #[test]
    fn a_status_only_change_publishes_nothing_unless_a_rule_syncs_status() {
        let old = with_status(secret("a", "u1", "5", "v1"), "5", json!({"n": 1}));
        let new = with_status(secret("a", "u1", "6", "v1"), "6", json!({"n": 2}));
        let on_bus = published_without_status(SELF, &old);
        assert_eq!(run(&rule(json!({})), &kind(&[&new], vec![on_bus])), vec![]);
        let syncs = rule(json!({"rules": [{"mutations": {"syncStatus": true}}]}));
        let on_bus = published(SELF, &old);
        assert_eq!(
            run(&syncs, &kind(&[&new], vec![on_bus])),
            vec![(key_of(SELF, &new), Publish::Snapshot(new.clone()))]
        );
    }

    #[test]
    fn a_rule_gaining_sync_status_publishes_the_same_version_again_with_status() {
        let s = with_status(secret("a", "u1", "5", "v1"), "5", json!({"phase": "Up"}));
        let k = kind(&[&s], vec![published_without_status(SELF, &s)]);
        let mut memo = HashMemo::default();
        // The memo holds the version hashed without status...
        assert_eq!(plan_default(&[&rule(json!({}))], &k, &mut memo), vec![]);
        // ...which does not stand for the version with status.
        let syncs = rule(json!({"rules": [{"mutations": {"syncStatus": true}}]}));
        assert_eq!(
            plan_default(&[&syncs], &k, &mut memo),
            vec![(key_of(SELF, &s), Publish::Snapshot(s.clone()))]
        );
    }

    #[test]
    fn a_version_hashed_before_is_not_hashed_again() {
        let s = secret("a", "u1", "5", "v1");
        let k = kind(&[&s], vec![published(SELF, &s)]);
        let mut memo = HashMemo::default();
        assert_eq!(plan_default(&[&rule(json!({}))], &k, &mut memo), vec![]);
        // The same uid and resourceVersion with other content (which the API
        // server never gives) shows the memo answered, not a new hash.
        let odd = secret("a", "u1", "5", "other");
        let k = kind(&[&odd], vec![published(SELF, &s)]);
        assert_eq!(plan_default(&[&rule(json!({}))], &k, &mut memo), vec![]);
        // A deleted object is forgotten.
        plan_default(&[&rule(json!({}))], &kind(&[], vec![]), &mut memo);
        assert!(memo.is_empty());
    }

    #[test]
    fn our_envelopes_without_their_object_are_enough_to_plan() {
        // The engine keeps our own envelopes without the object.
        let s = secret("a", "u1", "5", "v1");
        let (key, mut env) = published(SELF, &s);
        env.object = None;
        assert_eq!(
            run(
                &rule(json!({})),
                &kind(&[&s], vec![(key.clone(), env.clone())])
            ),
            vec![]
        );
        assert_eq!(
            run(&rule(json!({})), &kind(&[], vec![(key.clone(), env)])),
            vec![(key, tombstone("u1", "5", TombstoneReason::Deleted))]
        );
    }

    #[test]
    fn is_original_reads_the_origin_annotation() {
        let s = secret("a", "u1", "5", "v1");
        assert!(is_original(&s));
        assert!(is_original(&with_annotation(s.clone(), "other", "x")));
        assert!(!is_original(&with_annotation(
            s,
            well_known::ANNOTATION_ORIGIN_CLUSTER,
            "c2"
        )));
    }

    #[test]
    fn a_version_published_again_after_its_tombstone_gets_a_new_msg_id() {
        let s = secret("a", "u1", "5", "v1");
        let (_, env) = published(SELF, &s);
        // Plain: the protocol's id, the same for a retry of this version.
        assert_eq!(msg_id(&env, false, false), env.msg_id());
        // After a tombstone of the same version, or over a message we did not
        // publish: not the first publication's id (the server would drop it
        // as a duplicate), stable per envelope.
        let again = msg_id(&env, true, false);
        assert_ne!(again, env.msg_id());
        assert_eq!(again, msg_id(&env, true, false));
        assert_eq!(again, msg_id(&env, false, true));
        // A tombstone keeps its own id after a tombstone, and gets a new one
        // over a message we did not publish (a forged resurrection of an
        // object deleted within the duplicate window).
        let gone = Envelope::tombstone(
            SELF,
            None,
            "u1",
            "5",
            chrono::Utc::now(),
            TombstoneReason::Unpublished,
        );
        assert_eq!(msg_id(&gone, true, false), gone.msg_id());
        let again = msg_id(&gone, true, true);
        assert_ne!(again, gone.msg_id());
        assert!(again.starts_with(&gone.msg_id()), "{again}");
        assert_eq!(again, msg_id(&gone, false, true));
    }

    #[test]
    fn describe_key_names_kind_namespace_and_name() {
        let s = secret("a", "u1", "5", "v1");
        assert_eq!(describe_key(&key_of(SELF, &s)), "Secret apps/a");
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "apps"}});
        assert_eq!(describe_key(&key_of(SELF, &ns)), "Namespace apps");
    }

    /// The members for sealing: c2 (env=prod) and c3 (env=dev), both with keys.
    fn sealing_peers(c3_env: &str) -> BTreeMap<String, crate::registry::view::PeerView> {
        let peer = |name: &str, env: &str| crate::registry::view::PeerView {
            fitness: false,
            unserved_kinds: Vec::new(),
            name: name.into(),
            labels: [("env".to_owned(), env.to_owned())].into(),
            features: vec![],
            left: false,
            disabled: false,
            name_conflict: false,
            taints: Vec::new(),
            record: Value::Null,
            sealing_key: Some(
                fleetbus_schemas::seal::SealingSecretKey::generate(&mut rand::rng()).public_key(),
            ),
        };
        [("c2", "prod"), ("c3", c3_env)]
            .into_iter()
            .map(|(n, e)| (n.to_owned(), peer(n, e)))
            .collect()
    }

    /// What we published for `obj` sealed to `to` (name, key id), as reading
    /// it back gives it.
    fn sealed_on_bus(obj: &Value, to: &sealing::Recipients) -> (ObjectKey, Envelope) {
        let (key, env) = published(SELF, obj);
        let header = fleetbus_schemas::envelope::EncryptionHeader {
            algorithm: fleetbus_schemas::seal::SEAL_ALGORITHM.to_owned(),
            recipients: to
                .iter()
                .map(|(c, id)| fleetbus_schemas::envelope::RecipientKey {
                    cluster: c.clone(),
                    key_id: id.clone(),
                    enc: String::new(),
                    key: String::new(),
                })
                .collect(),
            ..Default::default()
        };
        let env = Envelope {
            object: None,
            encryption: Some(header),
            ..env
        };
        (key, env)
    }

    #[test]
    fn a_secret_is_sealed_to_the_members_its_rules_place_it_on_and_again_when_they_change() {
        use fleetbus_schemas::seal::SealingPublicKey;
        type Peers = BTreeMap<String, crate::registry::view::PeerView>;
        let s = secret("a", "u1", "5", "v1");
        let prod = rule(json!({"clusterSelector": {"matchLabels": {"env": "prod"}}}));
        let own = fleetbus_schemas::seal::SealingSecretKey::generate(&mut rand::rng()).public_key();
        fn view<'a>(own: &'a SealingPublicKey, peers: &'a Peers) -> SealView<'a> {
            SealView {
                local: SELF,
                own,
                peers,
            }
        }
        let set = |names: &[&str], peers: &Peers| -> sealing::Recipients {
            names
                .iter()
                .map(|n| {
                    let key = peers
                        .get(*n)
                        .and_then(|p| p.sealing_key.as_ref())
                        .unwrap_or(&own);
                    ((*n).to_owned(), key.key_id())
                })
                .collect()
        };
        let plan_with = |k: &KindState, v: Option<&SealView<'_>>| {
            plan(
                &local(),
                &Policy::default(),
                v,
                &[&prod],
                k,
                &mut HashMemo::default(),
            )
        };
        let sealed =
            |to: sealing::Recipients| vec![(key_of(SELF, &s), Publish::Sealed(s.clone(), to))];
        let peers = sealing_peers("dev");
        // Nothing on the bus: sealed to c2 (placed, has a key) and ourselves.
        let first = plan_with(&kind(&[&s], vec![]), Some(&view(&own, &peers)));
        assert_eq!(first, sealed(set(&["c1", "c2"], &peers)));
        // Without a sealing key of our own: in clear, as before.
        let clear = plan_with(&kind(&[&s], vec![]), None);
        assert_eq!(
            clear,
            vec![(key_of(SELF, &s), Publish::Snapshot(s.clone()))]
        );
        // Sealed to that set already: nothing to do.
        let on_bus = sealed_on_bus(&s, &set(&["c1", "c2"], &peers));
        let k = kind(&[&s], vec![on_bus.clone()]);
        assert_eq!(plan_with(&k, Some(&view(&own, &peers))), vec![]);
        // A clear envelope of the same version is sealed now.
        let k = kind(&[&s], vec![published(SELF, &s)]);
        assert_eq!(plan_with(&k, Some(&view(&own, &peers))).len(), 1);
        // c3 relabelled into the selector: sealed again, to it as well.
        let mut relabelled = peers.clone();
        if let Some(c3) = relabelled.get_mut("c3") {
            c3.labels.insert("env".into(), "prod".into());
        }
        let k = kind(&[&s], vec![on_bus.clone()]);
        assert_eq!(
            plan_with(&k, Some(&view(&own, &relabelled))),
            sealed(set(&["c1", "c2", "c3"], &relabelled))
        );
        // c2 rotated its key: the same names, sealed again to the new key.
        let rotated = sealing_peers("dev");
        assert_eq!(
            plan_with(&k, Some(&view(&own, &rotated))),
            sealed(set(&["c1", "c2"], &rotated))
        );
    }
}
