//! `valuesFrom`: the data of ConfigMaps on this sink, which a rule's
//! templates read as `.Values` (an endpoint, a region's image registry: values
//! each cluster owns). Read from the local watch of ConfigMaps, started while
//! some rule has `valuesFrom` (one watch of the kind, not one per ConfigMap:
//! the kind watch is what every other kind uses, and its cost, every ConfigMap
//! of the cluster kept packed, is paid only by clusters that use values).
//! A change of a referenced ConfigMap changes [`values_digest`],
//! which is part of the plan's inputs: every pair is computed again.

use std::hash::{Hash, Hasher};

use serde_json::{Map, Value};

use crate::sync::rules::compile::CompiledRule;
use crate::sync::world::{config_map_gvk, World};

/// The `(namespace, name)` of a `valuesFrom` entry, its namespace
/// defaulting to the agent's own (`own`).
fn values_key(own: &str, r: &fleetbus_schemas::crd::ConfigMapRef) -> (Option<String>, String) {
    let ns = r.namespace.clone().unwrap_or_else(|| own.to_owned());
    (Some(ns), r.name.clone())
}

/// `.Values` for `rule` here: the `data` of its ConfigMaps merged in
/// order, later ones winning; or why there are none (a ConfigMap that is
/// not optional is missing, or not read yet). `own`: the agent's
/// namespace, where an entry without one is looked up.
pub(in crate::sync) fn rule_values(
    world: &World,
    own: &str,
    rule: &CompiledRule,
) -> Result<Value, String> {
    let mut merged = Map::new();
    if rule.spec.values_from.is_empty() {
        return Ok(Value::Object(merged));
    }
    let kind = world
        .kinds
        .get(&config_map_gvk())
        .filter(|k| k.ready())
        .ok_or("valuesFrom: this cluster's ConfigMaps are not read yet")?;
    for entry in &rule.spec.values_from {
        let key = values_key(own, &entry.config_map_ref);
        match kind.objects.get(&key) {
            Some(cm) => {
                if let Some(data) = cm.get("data").and_then(Value::as_object) {
                    merged.extend(data.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            None if entry.optional => {}
            None => {
                return Err(format!(
                    "valuesFrom ConfigMap {}/{} not found on this cluster",
                    key.0.unwrap_or_default(),
                    key.1
                ))
            }
        }
    }
    Ok(Value::Object(merged))
}

/// A digest of every ConfigMap some rule reads values from (its
/// resourceVersion, or its absence): when it changes, pairs computed
/// from older values are stale. `own`: as for [`rule_values`].
pub(in crate::sync) fn values_digest(world: &World, own: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let kind = world.kinds.get(&config_map_gvk());
    for rule in world.rules.values() {
        for entry in &rule.spec.values_from {
            let key = values_key(own, &entry.config_map_ref);
            key.hash(&mut h);
            let rv = kind.and_then(|k| k.objects.get(&key)).and_then(|cm| {
                cm.pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            });
            rv.hash(&mut h);
        }
    }
    kind.is_some_and(|k| k.ready()).hash(&mut h);
    h.finish()
}
