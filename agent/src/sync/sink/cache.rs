//! The sink's memo of computed candidates: a pass recomputes the desired
//! copy (matching, templates, mutations) only of objects whose envelope,
//! rule or fleet changed since the pass before; the others cost a lookup.
//!
//! An entry is keyed by rule and source object and holds the envelope
//! version it was computed from (uid, content hash, resourceVersion). The
//! whole memo is dropped when the rules are recompiled (any rule change) or
//! the fleet view changes (templates read cluster records and labels). Entries of objects a pass did not look at are dropped at the
//! end of the pass, so the memo holds at most one entry per (rule, object).

use std::collections::HashMap;
use std::sync::Arc;

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;

use crate::registry::FleetView;
use crate::sync::model::{Candidate, Target};

/// What `candidates` made of one source object under one rule.
#[derive(Debug, Clone, Default)]
pub struct Computed {
    /// The copy and where it goes, or why there is none; None: the rule
    /// does not select the object.
    pub result: Option<Result<(Target, Candidate), String>>,
    /// The object carries an update-policy value fleetbus does not know.
    pub unknown_policy: bool,
}

#[derive(Debug)]
struct Entry {
    /// The envelope version it was computed from.
    version: (String, String, String),
    computed: Computed,
}

fn version_of(env: &Envelope) -> (String, String, String) {
    (
        env.uid.clone(),
        env.content_hash.clone(),
        env.resource_version.clone(),
    )
}

fn same_version(env: &Envelope, v: &(String, String, String)) -> bool {
    env.uid == v.0 && env.content_hash == v.1 && env.resource_version == v.2
}

/// The memo (see the module docs).
#[derive(Debug, Default)]
pub struct CandidateCache {
    /// The fleet view the entries were computed under.
    fleet: Option<Arc<FleetView>>,
    /// The rules generation they were computed under.
    rules_generation: u64,
    /// Entries of the pass before, by rule and object.
    last: HashMap<String, HashMap<ObjectKey, Entry>>,
    /// Entries looked at in this pass.
    this: HashMap<String, HashMap<ObjectKey, Entry>>,
    /// Lookups answered from the memo in this pass (for tests and debug logs).
    pub hits: usize,
}

impl CandidateCache {
    /// Starts a pass under `fleet` and rules generation `rules_generation`:
    /// forgets everything if either changed.
    pub fn begin(&mut self, fleet: &Arc<FleetView>, rules_generation: u64) {
        // The same view, or an equal one (a registry update that changed
        // nothing templates or selectors read).
        let same_fleet = self
            .fleet
            .as_ref()
            .is_some_and(|f| Arc::ptr_eq(f, fleet) || **f == **fleet);
        if !same_fleet || self.rules_generation != rules_generation {
            self.last.clear();
            self.fleet = Some(fleet.clone());
            self.rules_generation = rules_generation;
        }
        self.this.clear();
        self.hits = 0;
    }

    /// What `rule` makes of `env` (at `key`): from the memo if computed from
    /// this very envelope version, else from `compute`.
    pub fn get_or_compute(
        &mut self,
        rule: &str,
        key: &ObjectKey,
        env: &Envelope,
        compute: impl FnOnce() -> Computed,
    ) -> Computed {
        // Moved from last pass's map to this pass's: no key is cloned on a hit.
        let (k, entry) = match self.last.get_mut(rule).and_then(|m| m.remove_entry(key)) {
            Some((k, e)) if same_version(env, &e.version) => {
                self.hits += 1;
                (k, e)
            }
            _ => (
                key.clone(),
                Entry {
                    version: version_of(env),
                    computed: compute(),
                },
            ),
        };
        let out = entry.computed.clone();
        match self.this.get_mut(rule) {
            Some(m) => {
                m.insert(k, entry);
            }
            None => {
                self.this
                    .insert(rule.to_owned(), HashMap::from([(k, entry)]));
            }
        }
        out
    }

    /// Ends a pass: entries not looked at (objects, rules gone) are dropped.
    pub fn finish(&mut self) {
        self.last = std::mem::take(&mut self.this);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::crd::UpdatePolicy;
    use serde_json::{json, Value};

    fn env(rv: &str) -> Envelope {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"namespace": "apps", "name": "c", "uid": "u1",
                                      "resourceVersion": rv},
                         "data": {"rv": rv}});
        Envelope::snapshot("c1", None, obj, chrono::Utc::now()).unwrap()
    }

    fn key() -> ObjectKey {
        ObjectKey::from_api_version("c1", "v1", "ConfigMap", Some("apps"), "c")
    }

    /// A computation that counts its calls and puts `tag` in the copy.
    fn computed(calls: &mut usize, tag: &str) -> Computed {
        *calls += 1;
        let desired = json!({"data": {"tag": tag}});
        Computed {
            result: Some(Ok((
                Target {
                    api_version: "v1".into(),
                    kind: "ConfigMap".into(),
                    namespace: Some("apps".into()),
                    name: "c".into(),
                },
                Candidate {
                    rule: "r".into(),
                    key: key(),
                    created: String::new(),
                    digest: crate::sync::digest::Digest::of_desired(&desired),
                    desired: Arc::new(desired),
                    with_status: false,
                    update: UpdatePolicy::Update,
                    create_namespace: false,
                },
            ))),
            unknown_policy: false,
        }
    }

    fn tag(c: &Computed) -> Value {
        match &c.result {
            Some(Ok((_, cand))) => cand.desired["data"]["tag"].clone(),
            Some(Err(e)) => json!(e),
            None => Value::Null,
        }
    }

    #[test]
    fn unchanged_objects_are_looked_up_and_changes_recompute() {
        let mut cache = CandidateCache::default();
        let fleet = Arc::new(FleetView::new("c2"));
        let mut calls = 0;
        let e1 = env("1");
        cache.begin(&fleet, 1);
        let got = cache.get_or_compute("r", &key(), &e1, || computed(&mut calls, "a"));
        assert_eq!((tag(&got), calls, cache.hits), (json!("a"), 1, 0));
        cache.finish();
        // Same envelope, same fleet and rules: the memo answers.
        cache.begin(&fleet, 1);
        let got = cache.get_or_compute("r", &key(), &e1, || computed(&mut calls, "b"));
        assert_eq!((tag(&got), calls, cache.hits), (json!("a"), 1, 1));
        // Another rule is another entry.
        let got = cache.get_or_compute("r2", &key(), &e1, || computed(&mut calls, "c"));
        assert_eq!((tag(&got), calls), (json!("c"), 2));
        cache.finish();
        // The object changed: recomputed.
        cache.begin(&fleet, 1);
        let got = cache.get_or_compute("r", &key(), &env("2"), || computed(&mut calls, "d"));
        assert_eq!((tag(&got), calls), (json!("d"), 3));
        cache.finish();
        // "r2" was not looked at in that pass: forgotten.
        cache.begin(&fleet, 1);
        let got = cache.get_or_compute("r2", &key(), &e1, || computed(&mut calls, "e"));
        assert_eq!((tag(&got), calls), (json!("e"), 4));
    }

    #[test]
    fn a_fleet_or_rule_change_recomputes_everything() {
        let mut cache = CandidateCache::default();
        let fleet = Arc::new(FleetView::new("c2"));
        let e = env("1");
        let mut calls = 0;
        cache.begin(&fleet, 1);
        cache.get_or_compute("r", &key(), &e, || computed(&mut calls, "a"));
        cache.finish();
        // The fleet changed (templates read cluster records).
        let mut changed = FleetView::new("c2");
        changed.synced = true;
        let changed = Arc::new(changed);
        cache.begin(&changed, 1);
        let got = cache.get_or_compute("r", &key(), &e, || computed(&mut calls, "b"));
        assert_eq!((tag(&got), calls), (json!("b"), 2));
        cache.finish();
        // An equal view in a new Arc: nothing changed.
        let same_content = Arc::new((*changed).clone());
        cache.begin(&same_content, 1);
        let got = cache.get_or_compute("r", &key(), &e, || computed(&mut calls, "c"));
        assert_eq!((tag(&got), calls), (json!("b"), 2));
        cache.finish();
        // The rules were recompiled.
        cache.begin(&same_content, 2);
        let got = cache.get_or_compute("r", &key(), &e, || computed(&mut calls, "d"));
        assert_eq!((tag(&got), calls), (json!("d"), 3));
    }
}
