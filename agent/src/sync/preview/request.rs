//! What a preview and a preview-source request share: whether this agent
//! has read enough to answer, the candidate rule compiled from the request,
//! and how a reply names a source object.

use fleetbus_schemas::preview::PreviewRequest;
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::ObjectRef;

use crate::sync::policy_watch::policy_known;
use crate::sync::rules::compile::{self as rules, CompiledRule};
use crate::sync::world::World;

/// Whether this agent has read what a preview is computed from: the
/// fleet, its rules and its policy.
pub(super) fn answers_previews(world: &World) -> Result<(), String> {
    let rules_read = world
        .kinds
        .get(&rules::rule_gvk())
        .is_some_and(|k| k.ready());
    if !world.fleet.synced || !rules_read || !policy_known(world) {
        return Err("this agent has not read the fleet, its rules and its policy yet: ask again in a moment".to_owned());
    }
    Ok(())
}

/// The candidate, compiled as every rule is; its author is the current
/// rule's (a rule's author is where it was created, which a candidate
/// does not change), or for a new rule the request's `author`. An
/// invalid candidate is an error naming why.
pub(super) fn candidate(
    world: &World,
    req: &PreviewRequest,
    name: &str,
) -> Result<CompiledRule, String> {
    let current = world.rules.get(name).filter(|r| !r.builtin);
    let rule = match &req.rule {
        None => current
            .cloned()
            .ok_or_else(|| format!("no rule {name} on this cluster"))?,
        Some(obj) => {
            let mut rule = rules::compile(&[obj])
                .remove(name)
                .ok_or_else(|| format!("the candidate rule {name} does not compile"))?;
            // A new rule's author is where the operator says it will be
            // created: a stated intent, taken as verified.
            let local = &world.fleet.local.name;
            let told = req.author.clone().filter(|a| a != local);
            rule.author_verified = current.map_or(told.is_some(), |c| c.author_verified);
            rule.author = current.map_or(told, |c| c.author.clone());
            rule
        }
    };
    match &rule.problem {
        Some(p) => Err(format!("invalid rule {name}: {p}")),
        None => Ok(rule),
    }
}

/// A source object by its key, as a reply names it.
pub(super) fn source_ref(k: &ObjectKey) -> ObjectRef {
    let api_version = match k.group.as_str() {
        "" => k.version.clone(),
        g => format!("{g}/{}", k.version),
    };
    ObjectRef::new(&api_version, &k.kind, k.namespace.as_deref(), &k.name)
}
