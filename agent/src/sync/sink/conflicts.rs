//! Conflicts: who wins a target two sources want, and how a conflict is
//! reported (rule status, a Kubernetes Event on the rule, a JSON event on
//! `<p>.conflict.<self>.…`).
//!
//! The winner is decided from what every sink sees alike (the envelopes on
//! the bus), so every sink picks the same one: the oldest source object
//! (`creationTimestamp`), then the origin cluster's name, then the rule's.

use async_nats::HeaderMap;
use fleetbus_schemas::conflict::{conflict_event_id, ConflictEvent};

use super::state::SinkState;
use crate::context::Context;
use crate::kube::events::EventType;
use crate::sync::model::{Candidate, Conflict};
use crate::sync::rules::compile::RuleOrigin;
use crate::sync::world::World;

/// Sorts candidates for one target, winner first.
pub fn order(cands: &mut [Candidate]) {
    cands.sort_by(|a, b| {
        // An empty creationTimestamp (should not happen) sorts last.
        let key = |c: &Candidate| (c.created.is_empty(), c.created.clone());
        key(a)
            .cmp(&key(b))
            .then_with(|| a.key.origin.cmp(&b.key.origin))
            .then_with(|| a.rule.cmp(&b.rule))
    });
}

/// The id of a conflict event found on cluster `local` (the same for the
/// same conflict).
fn conflict_id(local: &str, c: &Conflict) -> String {
    conflict_event_id(
        local,
        &c.rule,
        &c.origin,
        &c.object_ref(),
        c.reason,
        c.winner.as_deref(),
    )
}

/// Reports the conflicts `found` at the targets a pass decided that
/// were not reported before (each once while it lasts; the bus
/// deduplicates re-reports across restarts by event id); those of the
/// decisions they replace (`gone`) and not found again are forgotten,
/// so a conflict that goes away and comes back is reported again.
pub(in crate::sync) async fn report_conflicts(
    world: &World,
    sink: &mut SinkState,
    ctx: &Context,
    found: Vec<Conflict>,
    gone: &[Conflict],
) {
    let local = &world.fleet.local.name;
    let found: Vec<(String, Conflict)> = found
        .into_iter()
        .map(|c| (conflict_id(local, &c), c))
        .collect();
    let still: std::collections::HashSet<&str> = found.iter().map(|(id, _)| id.as_str()).collect();
    for c in gone {
        let id = conflict_id(local, c);
        if !still.contains(id.as_str()) {
            sink.reported_conflicts.remove(&id);
        }
    }
    for (id, c) in found {
        let object = c.object_ref();
        if !sink.reported_conflicts.insert(id.clone()) {
            continue;
        }
        tracing::warn!(rule = %c.rule, origin = %c.origin, object = %c.target, reason = c.reason.as_str(), "sync conflict");
        if RuleOrigin::of(&c.rule).has_object() {
            let rule_ref = crate::sync::model::meta::rule_ref(&c.rule);
            ctx.recorder
                .publish(&rule_ref, EventType::Warning, "SyncConflict", &c.message)
                .await;
        }
        let event = ConflictEvent {
            id: id.clone(),
            cluster: local.clone(),
            rule: c.rule.clone(),
            origin: c.origin.clone(),
            object,
            reason: c.reason,
            winner: c.winner.clone(),
            detected_at: chrono::Utc::now(),
            message: c.message.clone(),
        };
        match event.encode() {
            Ok(bytes) => {
                // Signed by this cluster in the secure mode (PROTOCOL §6.2).
                let bytes = crate::trust::sign_or_keep(ctx.cfg.trust.as_deref(), bytes);
                let subject = event.subject_key().to_subject(ctx.layout.prefix());
                let mut headers = HeaderMap::new();
                headers.insert("Nats-Msg-Id", id.as_str());
                // Not awaited for its ack: a lost conflict event is
                // re-detected on the next start; the status keeps it.
                if let Err(e) = ctx
                    .js
                    .publish_with_headers(subject, headers, bytes.into())
                    .await
                {
                    tracing::warn!(error = %e, "could not publish a conflict event");
                }
            }
            Err(e) => tracing::warn!(error = %e, "could not encode a conflict event"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sync::model::Target;
    use fleetbus_schemas::conflict::ConflictReason;
    use fleetbus_schemas::crd::UpdatePolicy;
    use fleetbus_schemas::subject::ObjectKey;
    use serde_json::json;

    fn cand(origin: &str, rule: &str, created: &str) -> Candidate {
        Candidate {
            rule: rule.to_owned(),
            key: ObjectKey::from_api_version(origin, "v1", "Secret", Some("apps"), "s").into(),
            created: created.to_owned(),
            desired: json!({}).into(),
            digest: crate::sync::digest::Digest::of_desired(&json!({})),
            with_status: false,
            update: UpdatePolicy::Update,
            create_namespace: false,
            published: chrono::DateTime::default(),
        }
    }

    fn winners_first(mut cands: Vec<Candidate>) -> Vec<(String, String)> {
        order(&mut cands);
        cands
            .into_iter()
            .map(|c| (c.key.origin.clone(), c.rule))
            .collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(o, r)| ((*o).to_owned(), (*r).to_owned()))
            .collect()
    }

    #[test]
    fn the_oldest_source_object_wins_whatever_the_names() {
        let got = winners_first(vec![
            cand("a", "r", "2026-01-02T00:00:00Z"),
            cand("z", "r", "2026-01-01T00:00:00Z"),
            cand("m", "r", "2026-01-01T12:00:00Z"),
        ]);
        assert_eq!(got, pairs(&[("z", "r"), ("m", "r"), ("a", "r")]));
    }

    #[test]
    fn ties_go_to_the_origin_name_then_the_rule_name() {
        let t = "2026-01-01T00:00:00Z";
        let got = winners_first(vec![
            cand("c2", "b", t),
            cand("c2", "a", t),
            cand("c1", "z", t),
        ]);
        assert_eq!(got, pairs(&[("c1", "z"), ("c2", "a"), ("c2", "b")]));
    }

    #[test]
    fn an_empty_creation_timestamp_sorts_last() {
        let got = winners_first(vec![
            cand("a", "r", ""),
            cand("b", "r", "2030-01-01T00:00:00Z"),
        ]);
        assert_eq!(got, pairs(&[("b", "r"), ("a", "r")]));
    }

    #[test]
    fn every_input_order_gives_the_same_winner() {
        // Every sink sees the candidates in its own order; all must agree.
        let all = vec![
            cand("c3", "r", "2026-01-01T00:00:00Z"),
            cand("c1", "r", "2026-01-01T00:00:01Z"),
            cand("c2", "r", "2026-01-01T00:00:00Z"),
            cand("c0", "r", ""),
        ];
        let expected = pairs(&[("c2", "r"), ("c3", "r"), ("c1", "r"), ("c0", "r")]);
        for rotation in 0..all.len() {
            let mut v = all.clone();
            v.rotate_left(rotation);
            assert_eq!(winners_first(v.clone()), expected);
            v.reverse();
            assert_eq!(winners_first(v), expected);
        }
    }

    #[test]
    fn conflict_messages_name_the_target_and_the_origins() {
        let target = Target::from(crate::sync::model::Place {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: Some("apps".into()),
            name: "s".into(),
        });
        let (w, l) = (cand("c1", "r", "1"), cand("c2", "r", "2"));
        let c = Conflict::other_origin(&target, &l, &w);
        assert_eq!((c.origin.as_str(), c.winner.as_deref()), ("c2", Some("c1")));
        assert!(
            c.message.contains("Secret apps/s") && c.message.contains("c1 wins"),
            "{}",
            c.message
        );
        let live = json!({"metadata": {"uid": "u", "resourceVersion": "7"}});
        let c = Conflict::local_object(&target, &l, &live);
        assert_eq!(c.reason, ConflictReason::LocalObject);
        assert_eq!(c.live, Some(("u".to_owned(), "7".to_owned())));
        assert_eq!(c.winner, None);
    }
}
