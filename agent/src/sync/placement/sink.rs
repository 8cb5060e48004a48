//! The sink's side of placement (PROTOCOL §6.10, "What a sink does"): a
//! copy is made only where a record read from the bus chooses this
//! cluster; a released cluster keeps its copy untouched (held) while the
//! record says so; a cluster the record leaves out has no copy, and its
//! copy is collected like any copy nothing wants (by the ownership mark,
//! never by an annotation alone). Until the records have been read, or
//! while the origin has not decided, the copy is held: never created,
//! updated or deleted on a guess.

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::placement::{PlacementKey, PlacementRecord, PlacementUnit, Role};
use fleetbus_schemas::subject::ObjectKey;

use super::state::{Here, PlacementBook};
use crate::sync::model::{Folded, PlacementEvent};
use crate::sync::rollout::sink::Replan;
use crate::sync::rules::compile::CompiledRule;

/// The decision `rule`'s copies of `key` follow.
pub(in crate::sync) fn unit_key(rule: &CompiledRule, key: &ObjectKey) -> Option<PlacementKey> {
    let p = rule.spec.placement.as_ref()?;
    let unit = match &p.group {
        Some(g) => PlacementUnit::Group(g.clone()),
        None => PlacementUnit::Object {
            rule: rule.name.clone(),
            object: key.clone(),
        },
    };
    Some(PlacementKey {
        origin: key.origin.clone(),
        unit,
    })
}

/// What placement makes of one envelope here.
#[derive(Debug, Default)]
pub(in crate::sync) struct Placed {
    /// The envelope to compute the copy from (None: no copy here).
    pub env: Option<Envelope>,
    /// Why the copy is held, if it is.
    pub hold: Option<String>,
    /// This cluster's place among the chosen (and replica share), if chosen.
    pub here: Option<Here>,
}

/// What this cluster (`local`) does with `rule`'s copy of `key` (pure).
pub(in crate::sync) fn placed(
    book: &PlacementBook,
    local: &str,
    rule: &CompiledRule,
    key: &ObjectKey,
    env: Option<Envelope>,
) -> Placed {
    let live = env.as_ref().is_some_and(|e| !e.tombstone);
    let Some(pk) = unit_key(rule, key).filter(|_| live) else {
        return Placed {
            env,
            ..Placed::default()
        };
    };
    let hold = |why: String| Placed {
        env: env.clone(),
        hold: Some(why),
        here: None,
    };
    if !book.caught_up() {
        return hold("reading the placement decisions".into());
    }
    let Some(rec) = book.record(&pk) else {
        return hold(format!("waiting for {}'s placement decision", key.origin));
    };
    role_placed(rec, local, env)
}

fn role_placed(rec: &PlacementRecord, local: &str, env: Option<Envelope>) -> Placed {
    match rec.role(local) {
        Role::Chosen(share) => Placed {
            env,
            hold: None,
            here: Some(Here {
                // Its place by name, whatever order the record lists them in.
                index: rec.chosen_names().filter(|c| *c < local).count(),
                count: rec.chosen.len(),
                share,
            }),
        },
        Role::Keep(why) => Placed {
            env,
            hold: Some(why),
            here: None,
        },
        Role::Out => Placed::default(),
    }
}

/// Folds one event of the placement consumer into the book; what the sink
/// plans again.
pub(in crate::sync) fn placement_event(book: &mut PlacementBook, ev: PlacementEvent) -> Replan {
    match book.read.fold(ev) {
        Folded::Nothing => Replan::Nothing,
        Folded::Key(key) => match key.unit {
            PlacementUnit::Object { object, .. } => Replan::Object(object),
            // A group's decision concerns objects of several rules.
            PlacementUnit::Group(_) => Replan::Everything,
        },
        Folded::Everything => Replan::Everything,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use chrono::Utc;
    use fleetbus_schemas::placement::{Chosen, Released};

    fn record() -> PlacementRecord {
        let now = Utc::now();
        PlacementRecord {
            rule: "r".into(),
            revision: 1,
            chosen: vec![Chosen {
                cluster: "a".into(),
                score: 0.0,
                replicas: Some(2),
                reason: String::new(),
            }],
            draining: vec![Released {
                cluster: "b".into(),
                since: now,
                reason: "failed".into(),
            }],
            kept: Vec::new(),
            failing: Vec::new(),
            replaced: Vec::new(),
            passed: Vec::new(),
            degraded: None,
            decided_at: now,
            last_release: None,
        }
    }

    fn env() -> Envelope {
        let obj = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "n", "uid": "u", "resourceVersion": "1"}});
        Envelope::snapshot("hub", None, obj, Utc::now()).unwrap()
    }

    #[test]
    fn chosen_copies_released_ones_are_held_and_the_rest_have_none() {
        let rec = record();
        let a = role_placed(&rec, "a", Some(env()));
        assert!(a.env.is_some() && a.hold.is_none());
        assert_eq!(a.here.and_then(|h| h.share), Some(2));
        let b = role_placed(&rec, "b", Some(env()));
        assert!(b.env.is_some(), "a held copy is still computed");
        assert!(b.hold.unwrap().contains("kept until"));
        let c = role_placed(&rec, "c", Some(env()));
        assert!(c.env.is_none() && c.hold.is_none(), "no copy: collected");
    }
}
