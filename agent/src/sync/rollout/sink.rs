//! The sink's side of a rollout (PROTOCOL §6.9, "Which version a sink
//! runs"): the version a record gives this cluster, read from the object
//! stream when it is the newest, else from the version store; a copy whose
//! version is not decided or not here yet is held (never created, updated
//! or deleted by the rule; its drift reported). A tombstone deletes at once.

use std::sync::Arc;

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::rollout::{RolloutPhase, RolloutRecord};
use fleetbus_schemas::subject::{ObjectKey, RolloutKey, VersionKey};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::decide::short;
use super::state::RolloutBook;
use crate::context::Context;
use crate::sync::model::{Feed, Input, RolloutEvent};
use crate::sync::rules::compile::CompiledRule;

/// What a sink does with one source object of a rollout rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::sync) enum Choice {
    /// Whatever the object stream says (the rollout is over for good).
    Follow,
    /// Run this version (a content hash).
    Use(String),
    /// Hold the copy, with why.
    Hold(String),
}

/// The version `me` runs by `rec` (pure).
pub(in crate::sync) fn choose(
    rec: Option<&RolloutRecord>,
    caught_up: bool,
    me: &str,
    origin: &str,
) -> Choice {
    if !caught_up {
        return Choice::Hold("reading the rollout records".into());
    }
    let Some(rec) = rec else {
        return Choice::Hold(format!("waiting for {origin}'s rollout record"));
    };
    if rec.phase == RolloutPhase::Gone {
        return Choice::Follow;
    }
    match rec.version_of(me) {
        Some(v) => Choice::Use(v.to_owned()),
        None => Choice::Hold(format!(
            "not admitted yet by {origin}'s rollout (revision {})",
            rec.revision
        )),
    }
}

/// How the sink takes one envelope of a rollout rule this pass.
#[derive(Debug, Default)]
pub(in crate::sync) struct Taken {
    /// The envelope to compute the copy from.
    pub env: Option<Envelope>,
    /// Why the copy is held, if it is.
    pub hold: Option<String>,
    /// A version to read from the store.
    pub fetch: Option<VersionKey>,
}

/// The envelope `rule` computes its copy of `key` from, and whether the
/// copy is held: the newest (`env`) for rules without a rollout, for
/// tombstones and after the source is gone. `local`: this cluster's name
/// (what the record admits).
pub(in crate::sync) fn rollout_env(
    book: &RolloutBook,
    local: &str,
    rule: &CompiledRule,
    key: &ObjectKey,
    env: Option<Envelope>,
) -> Taken {
    let live = env.as_ref().is_some_and(|e| !e.tombstone);
    if rule.spec.rollout.is_none() || !live {
        return Taken {
            env,
            ..Taken::default()
        };
    }
    let rk = RolloutKey::of(&rule.name, key);
    match choose(book.record(&rk), book.caught_up, local, &key.origin) {
        Choice::Follow => Taken {
            env,
            ..Taken::default()
        },
        Choice::Use(v) if env.as_ref().is_some_and(|e| e.content_hash == v) => Taken {
            env,
            ..Taken::default()
        },
        Choice::Use(v) => {
            let vk = VersionKey {
                object: key.clone(),
                hash: v,
            };
            match book.versions.get(&vk) {
                Some(stored) => Taken {
                    env: Some(stored.clone()),
                    ..Taken::default()
                },
                None => Taken {
                    env,
                    hold: Some(format!("reading version {}", short(&vk.hash))),
                    fetch: Some(vk),
                },
            }
        }
        Choice::Hold(why) => Taken {
            env,
            hold: Some(why),
            fetch: None,
        },
    }
}

/// What a rollout input asks the sink to plan again (the sink's dirty set
/// is the sink's: the engine marks it).
#[derive(Debug, PartialEq, Eq)]
pub(in crate::sync) enum Replan {
    /// Nothing.
    Nothing,
    /// The source object a record is about.
    Object(ObjectKey),
    /// Every object: every hold may end or start.
    Everything,
}

/// Folds one event of the rollout consumer into the book; the objects a
/// record is about are to be planned again.
pub(in crate::sync) fn rollout_event(book: &mut RolloutBook, ev: RolloutEvent) -> Replan {
    match ev {
        Feed::Reset => {
            book.resnap = Some(Default::default());
            Replan::Nothing
        }
        Feed::Item(key, rec) => {
            let object = key.object();
            let map = book.resnap.as_mut().unwrap_or(&mut book.records);
            map.insert(key, *rec);
            Replan::Object(object)
        }
        Feed::Unreadable(key) => {
            // Skipped and counted by the consumer; what was read before
            // stays (garbage on a subject changes nothing), as a sink
            // keeps its copy on any message it cannot read.
            if let (Some(resnap), Some(old)) = (&mut book.resnap, book.records.get(&key)) {
                resnap.insert(key, old.clone());
            }
            Replan::Nothing
        }
        Feed::CaughtUp => {
            let mut replan = Replan::Nothing;
            if let Some(r) = book.resnap.take() {
                book.records = r;
                // Every hold may end or start.
                replan = Replan::Everything;
            }
            if !book.caught_up {
                replan = Replan::Everything;
            }
            book.caught_up = true;
            book.prune_versions();
            replan
        }
    }
}

/// A version read from the store (or why not); returns the source object
/// to plan again.
pub(in crate::sync) fn version_event(
    book: &mut RolloutBook,
    v: VersionKey,
    got: Result<Box<Envelope>, String>,
) -> ObjectKey {
    let object = v.object.clone();
    match got {
        Ok(env) => {
            book.fetching.remove(&v);
            book.versions.insert(v, *env);
        }
        Err(_) => {
            // Logged by the reader; tried again in a while (the origin
            // stores a version before naming it, so this is rare: a
            // store trimmed by its limits, NATS away).
            let again = Instant::now() + std::time::Duration::from_secs(2);
            book.fetching.insert(v, Some(again));
        }
    }
    object
}

/// Starts the reads of the versions `wanted` not being read already, and
/// those whose last read failed once their wait is over; each read's
/// result comes back on `tx` (`Input::Version`).
pub(in crate::sync) fn fetch_versions(
    book: &mut RolloutBook,
    ctx: &Arc<Context>,
    tx: &mpsc::Sender<Input>,
    wanted: Vec<VersionKey>,
) {
    let now = Instant::now();
    for v in wanted {
        match book.fetching.get(&v) {
            Some(None) => continue,
            Some(Some(at)) if *at > now => continue,
            _ => {}
        }
        book.fetching.insert(v.clone(), None);
        tokio::spawn(crate::sync::inputs::rollouts::fetch_version(
            ctx.clone(),
            v,
            tx.clone(),
        ));
    }
}

/// When a failed version read is due again.
pub(in crate::sync) fn fetch_wake(book: &RolloutBook) -> Option<Instant> {
    book.fetching.values().flatten().min().copied()
}

#[cfg(test)]
pub(in crate::sync) mod tests {
    use super::*;
    use fleetbus_schemas::ObjectRef;

    /// hub's record of apps/web under rule web: c1 admitted to b, the rest on a.
    pub(in crate::sync) fn rec() -> RolloutRecord {
        RolloutRecord {
            origin: "hub".into(),
            rule: "web".into(),
            source: ObjectRef::new("apps/v1", "Deployment", Some("apps"), "web"),
            revision: 2,
            stable: Some("a".repeat(64)),
            target: Some("b".repeat(64)),
            phase: RolloutPhase::Progressing,
            admitted: [("b".repeat(64), ["c1".to_owned()].into())].into(),
            admitted_at: Default::default(),
            failed: Default::default(),
            step: 0,
            steps: 1,
            paused_by: None,
            reason: String::new(),
            message: String::new(),
            updated_at: fleetbus_schemas::time::truncate_to_ms(chrono::Utc::now()),
        }
    }

    #[test]
    fn a_sink_runs_what_the_record_gives_it_and_holds_the_rest() {
        let r = rec();
        assert_eq!(
            choose(Some(&r), true, "c1", "hub"),
            Choice::Use("b".repeat(64))
        );
        assert_eq!(
            choose(Some(&r), true, "c2", "hub"),
            Choice::Use("a".repeat(64))
        );
        assert!(matches!(
            choose(Some(&r), false, "c1", "hub"),
            Choice::Hold(_)
        ));
        assert_eq!(
            choose(None, true, "c1", "hub"),
            Choice::Hold("waiting for hub's rollout record".into())
        );
        let new = RolloutRecord {
            stable: None,
            ..rec()
        };
        assert!(
            matches!(choose(Some(&new), true, "c2", "hub"), Choice::Hold(w) if w.contains("not admitted"))
        );
        let gone = RolloutRecord {
            phase: RolloutPhase::Gone,
            target: None,
            admitted: Default::default(),
            ..rec()
        };
        assert_eq!(choose(Some(&gone), true, "c2", "hub"), Choice::Follow);
    }
}
