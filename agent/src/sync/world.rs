//! What every stage reads and none changes: the fleet view, the compiled
//! rules, the kinds sync knows (their local objects and bus envelopes) and
//! the SyncPolicy in force. The engine folds inputs into it between passes
//! (`engine::fold`); stages get `&World`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

#[cfg(test)]
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;
use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::model::meta::origin_cluster;
use super::model::{LocalObjects, Snapshots};
use super::policy::Policy;
use super::rules::compile::{CompiledRule, RuleSet};
use super::rules::matching::{self, qualifies};
use crate::registry::FleetView;
use crate::registry::PeerView;

/// What every stage reads. Cloned for a read-only request answered off
/// the engine's loop (a preview): the objects are shared packed bytes, so a
/// clone copies maps of pointers, not objects.
#[derive(Clone)]
pub struct World {
    /// The fleet as the registry last saw it.
    pub fleet: Arc<FleetView>,
    /// The rules, compiled.
    pub rules: RuleSet,
    /// Counts rule recompilations (what the sink's plan depends on).
    pub rules_generation: u64,
    /// Every kind sync watches, by group, version and kind.
    pub kinds: HashMap<GroupVersionKind, KindState>,
    /// Kinds discovery does not serve (yet), with why.
    pub unresolved: HashMap<GroupVersionKind, Unresolved>,
    /// This cluster's SyncPolicy in force (`policy`, `policy_watch`).
    pub policy: Policy,
    /// Every peer's health and since when (placement's failover reads it;
    /// nothing else does, so a peer going down replans no copy).
    pub health: Arc<crate::registry::FleetHealth>,
}

/// A kind discovery did not resolve, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct Unresolved {
    /// The API server answered that it does not serve the kind (its group
    /// version is unknown, or has no such kind): not a failure to ask.
    /// Only this is said to peers (`unservedKinds`): a timeout must not
    /// move placements away.
    pub not_served: bool,
    /// For people.
    pub why: String,
}

impl World {
    /// Whether everything a rule needs has been read (its kinds, namespaces).
    pub fn rule_ready(&self, rule: &CompiledRule) -> bool {
        let kind_ready = |g| self.kinds.get(g).is_some_and(|k| k.ready());
        kind_ready(&rule.source)
            && rule
                .targets
                .iter()
                .all(|t| self.kinds.get(t).is_some_and(|k| k.listed))
            && self.kinds.get(&namespace_gvk()).is_some_and(|k| k.listed)
    }

    /// Why a rule cannot work right now, if it cannot: its spec, or a kind
    /// discovery does not serve, or a kind the agent may not watch.
    pub fn rule_problem(&self, rule: &CompiledRule) -> Option<String> {
        if let Some(p) = &rule.problem {
            return Some(p.clone());
        }
        if let Some(p) = self.version_clash(rule) {
            return Some(p);
        }
        for g in std::iter::once(&rule.source).chain(rule.targets.iter()) {
            if let Some(why) = self.unresolved.get(g) {
                return Some(why.why.clone());
            }
            // A failing watch is reported while it fails, also after an
            // earlier list succeeded (rights revoked): a re-list clears it.
            if let Some(e) = self.kinds.get(g).and_then(|k| k.watch_error.as_ref()) {
                return Some(format!(
                    "cannot watch {}: {e}",
                    crate::sync::model::meta::describe_gvk(g)
                ));
            }
        }
        None
    }

    /// Another rule already syncs the same kind at another version: one
    /// version per kind, else each version's copies would look unwanted in
    /// the other version's watch (the rule first by name keeps it).
    pub fn version_clash(&self, rule: &CompiledRule) -> Option<String> {
        self.rules
            .values()
            .filter(|o| o.name < rule.name && o.problem.is_none())
            .find(|o| {
                o.source.group == rule.source.group
                    && o.source.kind == rule.source.kind
                    && o.source.version != rule.source.version
            })
            .map(|o| {
                format!(
                    "rule {} already syncs {} at version {}: one version per kind",
                    o.name, rule.source.kind, o.source.version
                )
            })
    }

    /// Whether this cluster is a sink of `rule` (its `clusterSelector`).
    pub fn selects_us(&self, rule: &CompiledRule) -> bool {
        matching::selector_matches(
            rule.spec.cluster_selector.as_ref(),
            &self.fleet.local.labels,
        )
        .unwrap_or(false)
    }

    /// The peers `rule` takes from, by name.
    pub fn sources(&self, rule: &CompiledRule) -> BTreeMap<&str, &PeerView> {
        self.fleet
            .peers
            .values()
            .filter(|p| p.may_be_source() && qualifies(rule, &p.labels, &p.features))
            .map(|p| (p.name.as_str(), p))
            .collect()
    }
}

/// What sync knows of one kind.
#[derive(Clone)]
pub struct KindState {
    /// Resource name and URL shape.
    pub ar: ApiResource,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Every local object of the kind, as the watch last listed or saw it
    /// (packed: parsed again where read).
    pub objects: LocalObjects,
    /// The objects of a re-list in progress (replace `objects` when done).
    pub(in crate::sync) relist: Option<LocalObjects>,
    /// The local list has completed at least once.
    pub listed: bool,
    /// Why the local watch last failed, until it lists again.
    pub watch_error: Option<String>,
    /// Whether this kind is a rule's source (and so consumed from the bus).
    pub source: bool,
    /// The last envelope of every object of this kind on the bus, every origin.
    pub snapshots: Snapshots,
    /// The envelopes of a consumer restart in progress.
    pub(in crate::sync) resnap: Option<Snapshots>,
    /// The bus consumer has delivered every last value at least once.
    pub caught_up: bool,
    /// Our objects whose local or bus state changed since the source side
    /// last planned them (see `source::publish`): the next source pass plans only
    /// these, unless `source_full`.
    pub source_dirty: BTreeSet<ObjectKey>,
    /// The next source pass plans every object: the kind is new, re-listed
    /// or re-read from the bus, the rules or the fleet changed, or a publish
    /// failed.
    pub source_full: bool,
    /// Cancels this kind's tasks (watch, consumer).
    pub(in crate::sync) stop: CancellationToken,
    /// Cancels `stop` when the kind is dropped.
    /// Shared by a clone (a preview's view of the World): the kind's tasks
    /// stop when the engine and every such view have dropped it.
    pub(in crate::sync) _guard: Arc<DropGuard>,
}

impl KindState {
    /// Whether copies made by sync, or live envelopes we published, remain.
    pub fn has_leftovers(&self, local: &str) -> bool {
        self.snapshots
            .iter_meta()
            .any(|(k, e)| k.origin == local && !e.tombstone)
            || self
                .objects
                .values()
                .any(|o| origin_cluster(&o).is_some_and(|origin| origin != local))
    }

    /// Whether everything sync needs of this kind has been read.
    pub fn ready(&self) -> bool {
        self.listed && (!self.source || self.caught_up)
    }
}

/// The kinds every agent watches: rules (replicated by the built-in rule),
/// Namespaces (a copy waits for its namespace) and CRDs (a rule for a kind
/// not served yet starts working when its CRD is established).
pub fn namespace_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "Namespace")
}

/// The ConfigMap kind (watched while a rule has `valuesFrom`: `sink::values`).
pub fn config_map_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "ConfigMap")
}

/// The CustomResourceDefinition kind.
pub fn crd_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition")
}

#[cfg(test)]
impl KindState {
    /// A listed, caught-up source kind holding `objects` and `snapshots`,
    /// with no tasks behind it: for unit tests of the pure passes.
    pub fn for_test(objects: LocalObjects, snapshots: BTreeMap<ObjectKey, Envelope>) -> KindState {
        let stop = CancellationToken::new();
        KindState {
            ar: ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Secret")),
            namespaced: true,
            objects,
            relist: None,
            listed: true,
            watch_error: None,
            source: true,
            snapshots: snapshots.into_iter().collect(),
            resnap: None,
            caught_up: true,
            source_dirty: BTreeSet::new(),
            source_full: true,
            _guard: Arc::new(stop.clone().drop_guard()),
            stop,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::model::meta::local_key;
    use crate::sync::model::Target;
    use serde_json::{json, Value};

    #[test]
    fn target_of_a_namespaced_object() {
        let obj = json!({"apiVersion": "apps/v1", "kind": "Deployment",
                         "metadata": {"namespace": "web", "name": "front"}});
        let t = Target::of(&obj).unwrap();
        assert_eq!(
            t,
            Target::from(crate::sync::model::Place {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                namespace: Some("web".into()),
                name: "front".into(),
            })
        );
        assert_eq!(t.gvk(), GroupVersionKind::gvk("apps", "v1", "Deployment"));
        assert_eq!(t.local_key(), (Some("web".to_owned()), "front".to_owned()));
        assert_eq!(t.to_string(), "Deployment web/front");
    }

    #[test]
    fn target_of_a_cluster_scoped_or_core_object() {
        // An empty namespace is what some clients send for cluster-scoped objects.
        for meta in [
            json!({"name": "n1"}),
            json!({"name": "n1", "namespace": ""}),
        ] {
            let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": meta});
            let t = Target::of(&obj).unwrap();
            assert_eq!(t.namespace, None);
            assert_eq!(t.gvk(), GroupVersionKind::gvk("", "v1", "Namespace"));
            assert_eq!(t.local_key(), (None, "n1".to_owned()));
            assert_eq!(t.to_string(), "Namespace n1");
        }
    }

    #[test]
    fn target_of_an_object_without_a_place_is_none() {
        for obj in [
            json!({"kind": "Secret", "metadata": {"name": "s"}}),
            json!({"apiVersion": "v1", "metadata": {"name": "s"}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": ""}}),
            json!({"apiVersion": "v1", "kind": "Secret"}),
            json!({"apiVersion": 1, "kind": "Secret", "metadata": {"name": "s"}}),
        ] {
            assert_eq!(Target::of(&obj), None, "{obj}");
        }
    }

    fn secret(name: &str, annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"namespace": "apps", "name": name, "uid": format!("u-{name}"),
                            "resourceVersion": "1", "annotations": annotations}})
    }

    fn kind_with(objects: &[Value], snapshots: &[(&str, Envelope)]) -> KindState {
        KindState::for_test(
            objects
                .iter()
                .filter_map(|o| Some((local_key(o)?, o.clone())))
                .collect(),
            snapshots
                .iter()
                .filter_map(|(origin, e)| {
                    let key = ObjectKey::from_object(origin, e.object.as_ref()?)?;
                    Some((key, e.clone()))
                })
                .collect(),
        )
    }

    fn snapshot(origin: &str, obj: &Value) -> Envelope {
        Envelope::snapshot(origin, None, obj.clone(), chrono::Utc::now()).unwrap()
    }

    #[test]
    fn leftovers_are_copies_from_others_and_our_live_envelopes() {
        let original = secret("o", json!({}));
        let copy = secret(
            "c",
            json!({ fleetbus_schemas::well_known::ANNOTATION_ORIGIN_CLUSTER: "c2" }),
        );
        // Nothing: an original, and a peer's envelope.
        assert!(!kind_with(
            std::slice::from_ref(&original),
            &[("c2", snapshot("c2", &original))]
        )
        .has_leftovers("c1"));
        // A copy made from c2's object.
        assert!(kind_with(&[copy], &[]).has_leftovers("c1"));
        // Our own live envelope on the bus (to be tombstoned).
        assert!(kind_with(&[], &[("c1", snapshot("c1", &original))]).has_leftovers("c1"));
        // Our tombstone is not a leftover.
        let mut gone = snapshot("c1", &original);
        gone.tombstone = true;
        assert!(!kind_with(&[], &[("c1", gone)]).has_leftovers("c1"));
    }

    #[test]
    fn a_kind_is_ready_once_listed_and_if_a_source_caught_up() {
        let mut k = kind_with(&[], &[]);
        assert!(k.ready());
        k.caught_up = false;
        assert!(!k.ready(), "a source kind waits for the bus");
        k.source = false;
        assert!(k.ready(), "a sink-only kind does not");
        k.listed = false;
        assert!(!k.ready());
    }
}
