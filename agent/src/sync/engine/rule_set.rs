//! The rules in force: compiled from the local rule objects and the rules
//! peers publish, each rule's author verified by its envelope.

#[cfg(test)]
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use serde_json::Value;

use crate::mark::CopyMark;
use crate::sync::model::Baseline;
use crate::sync::rules::compile::{self as rules, RuleSet};
use crate::sync::world::KindState;

use super::Engine;

impl Engine {
    /// The rules peers publish (live, original, from a peer that may be a
    /// source), compiled.
    pub(super) fn bus_rules(&self, kind: &KindState) -> RuleSet {
        let objects: Vec<Value> = kind
            .snapshots
            .iter_meta()
            .filter(|(key, env)| {
                key.origin != self.world.fleet.local.name
                    && !env.tombstone
                    && self
                        .world
                        .fleet
                        .peers
                        .get(&key.origin)
                        .is_some_and(|p| p.may_be_source())
            })
            .filter_map(|(key, _)| Some((key, kind.snapshots.get(key)?.object?)))
            .filter(|(_, obj)| crate::sync::model::meta::is_original(obj))
            // The author is the origin the rule was read from, as the
            // sink stamps it on the rule's copy (see `sync::policy`).
            .map(|(key, mut obj)| {
                if let Some(m) = obj.pointer_mut("/metadata").and_then(Value::as_object_mut) {
                    let a = m
                        .entry("annotations")
                        .or_insert_with(|| serde_json::json!({}));
                    if let Some(a) = a.as_object_mut() {
                        a.insert(
                            fleetbus_schemas::well_known::ANNOTATION_ORIGIN_CLUSTER.to_owned(),
                            Value::String(key.origin.clone()),
                        );
                    }
                }
                obj
            })
            .collect();
        let mut set = rules::compile(&objects.iter().collect::<Vec<_>>());
        set.remove(rules::RULE_REPLICATION);
        for r in set.values_mut() {
            r.author_verified = true;
        }
        set
    }

    /// Takes newly compiled rules that differ from the last (or were
    /// compiled under a changed fleet): what depends on them is done again.
    pub(in crate::sync) fn rules_changed(&mut self, rules: RuleSet) {
        self.world.rules = rules;
        self.world.rules_generation = self.world.rules_generation.wrapping_add(1);
        // Which objects are published depends on the rules (and, through
        // them, on the fleet): plan every object again.
        for k in self.world.kinds.values_mut() {
            k.source_full = true;
        }
        // Rules gone, invalid or ready again change what is collected.
        self.sink.collect_due = true;
        // Exclusions and drift modes may have changed: what was found equal
        // is compared again.
        let baselines = std::mem::take(&mut self.sink.baselines);
        self.sink.baselines = baselines
            .into_iter()
            .map(|(t, b)| {
                (
                    t,
                    Baseline {
                        verified: None,
                        ..b
                    },
                )
            })
            .collect();
    }
}

/// Marks each rule whose claimed author (`fleetbus.io/origin-cluster` on its
/// object here) has a live envelope of it on the bus: a claim without one
/// is an annotation someone wrote on a local rule, or a copy whose
/// envelope is not read yet (see `sink::pass::import_refused`).
pub(super) fn verify_authors(rules: &mut RuleSet, kind: &KindState, marker: &CopyMark) {
    let gvk = rules::rule_gvk();
    let api_version = format!("{}/{}", gvk.group, gvk.version);
    for r in rules.values_mut() {
        let Some(author) = &r.author else { continue };
        // A rule object that names an origin but is no copy this agent
        // wrote is a local rule: its annotation claims nothing (`model::mark`).
        let copied_from = kind
            .objects
            .get(&(None, r.name.clone()))
            .and_then(|o| marker.copy_origin(&o).map(str::to_owned));
        if copied_from.as_deref() != Some(author.as_str()) {
            r.author = None;
            r.author_verified = false;
            continue;
        }
        let key = ObjectKey::from_api_version(author, &api_version, &gvk.kind, None, &r.name);
        r.author_verified = kind.snapshots.meta(&key).is_some_and(|e| !e.tombstone);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::model::meta::local_key;
    use crate::sync::model::LocalObjects;
    use serde_json::json;

    #[test]
    pub(super) fn a_rule_author_is_verified_only_by_its_live_envelope_from_that_author() {
        let rule = |name: &str, origin: Option<&str>| {
            let mut obj = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": "ResourceSyncRule",
                "metadata": {"name": name, "uid": "u", "resourceVersion": "1"},
                "spec": {"groupVersionKind": {"version": "v1", "kind": "Secret"}}});
            if let Some(o) = origin {
                obj["metadata"]["annotations"] = json!({"fleetbus.io/origin-cluster": o});
            }
            obj
        };
        use crate::mark::tests::{marked, marker_ref};
        // Copies this agent wrote carry its mark; `forged` only the annotation.
        let copy = marked(rule("copied", Some("hub")));
        let forged = rule("forged", Some("hub"));
        let withdrawn = marked(rule("withdrawn", Some("hub")));
        let own = rule("own", None);
        let mut objects = LocalObjects::default();
        for o in [&copy, &forged, &withdrawn, &own] {
            objects.insert_packed(local_key(o).unwrap(), crate::sync::model::Packed::new(o));
        }
        let env = |name: &str, tombstone: bool| {
            let original = rule(name, None);
            let key = ObjectKey::from_object("hub", &original).unwrap();
            let now = chrono::Utc::now();
            let e = if tombstone {
                Envelope::tombstone(
                    "hub",
                    None,
                    "u",
                    "1",
                    now,
                    fleetbus_schemas::envelope::TombstoneReason::Deleted,
                )
            } else {
                Envelope::snapshot("hub", None, original, now).unwrap()
            };
            (key, e)
        };
        let kind = KindState::for_test(
            objects,
            [
                env("copied", false),
                env("withdrawn", true),
                env("forged", false),
            ]
            .into_iter()
            .collect(),
        );
        let mut set = rules::compile(&[&copy, &forged, &withdrawn, &own]);
        verify_authors(&mut set, &kind, marker_ref());
        assert_eq!(set["copied"].author.as_deref(), Some("hub"));
        assert!(set["copied"].author_verified);
        // The annotation alone claims nothing, even when hub has a rule of
        // that name: it is a local rule.
        assert_eq!(set["forged"].author, None);
        assert!(!set["forged"].author_verified);
        assert!(!set["withdrawn"].author_verified);
        assert_eq!(set["own"].author, None);
        assert_eq!(set["own"].author("c2"), "c2");
    }
}
