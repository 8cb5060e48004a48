//! A failed operation on a copy (write, delete, orphan): the copy backs off
//! on its own (`backoff`), the failure is logged and counted once per
//! backoff step (not once per pass), its rule's status counts it with the
//! message, and when it is news an Event on the rule names the copy and the
//! error (one Event per rule and pass, naming the first few copies).

use std::collections::BTreeMap;

use tokio::time::Instant;

use super::apply::WriteError;
use super::state::SinkState;
use crate::context::Context;
use crate::kube::events::EventType;
use crate::sync::model::backoff::{Backoff, Input};
use crate::sync::model::{CopyError, Target};
use crate::sync::rules::compile::RuleOrigin;

/// The reason of the Event announcing a failing copy.
pub const REASON: &str = "SyncFailed";

/// The error to report while the copy at `target` waits for its next
/// try (its backoff holds for `input` at `now`); None: try now.
pub(in crate::sync) fn waiting(
    sink: &SinkState,
    target: &Target,
    input: &Input,
    now: Instant,
) -> Option<String> {
    sink.retries
        .get(target)
        .filter(|b| b.holds(input, now))
        .map(|b| b.error.message.clone())
}

/// Ends the wait of the failing copies `asked` picks (rule, target): an
/// operator's `fleetbus drift correct` is the change a refusal that only a
/// change fixes waits for (RBAC, a quota or a webhook fixed meanwhile).
/// Returns how many.
pub(in crate::sync) fn retry_now(
    sink: &mut SinkState,
    now: Instant,
    asked: impl Fn(&str, &Target) -> bool,
) -> usize {
    let mut n = 0;
    for (target, backoff) in sink.retries.iter_mut() {
        let rule = sink.held.get(target).map_or("", |pair| pair.0.as_str());
        if asked(rule, target) && backoff.at > now {
            backoff.at = now;
            n += 1;
        }
    }
    n
}

/// Records a failed `op` (`write` or `collect`) on the copy at `target`,
/// made by `rule` from `input`: the next try waits a backoff step, the
/// failure is logged and counted, and queued as an Event if it is news.
/// Returns the typed error (its message is the rule status's).
pub(in crate::sync) fn copy_failed(
    sink: &mut SinkState,
    ctx: &Context,
    target: &Target,
    rule: &str,
    input: Input,
    op: &'static str,
    e: &WriteError,
) -> CopyError {
    let error = e.copy_error();
    let message = error.message.clone();
    let now = Instant::now();
    let prev = sink.retries.get(target);
    let news = Backoff::is_news(prev, &error);
    let next = Backoff::failed(prev, input, now, rand::random::<f64>(), error.clone());
    tracing::warn!(
        copy = %target,
        rule,
        op,
        error = %message,
        kind = ?error.kind,
        attempts = next.attempts,
        retry_in = ?next.at.saturating_duration_since(now),
        "copy not written; backing off"
    );
    ctx.metrics.sync_write_failed(op);
    sink.retries.insert(target.clone(), next);
    // Built-in rules have no object to hold Events.
    if news && !rule.is_empty() && RuleOrigin::of(rule).has_object() {
        sink.failure_events
            .push((rule.to_owned(), format!("{target}: {message}")));
    }
    error
}

/// Publishes this pass's new failures as Events: one per rule, naming
/// the first few copies (an API server away can fail every copy at
/// once; that is one Event per rule, not one per copy).
pub(in crate::sync) async fn announce_failures(sink: &mut SinkState, ctx: &Context) {
    for (rule, message) in by_rule(std::mem::take(&mut sink.failure_events)) {
        let rule_ref = crate::sync::model::meta::rule_ref(&rule);
        ctx.recorder
            .publish(&rule_ref, EventType::Warning, REASON, &message)
            .await;
    }
}

/// At most this many copies are named in one Event.
const NAMED: usize = 5;

/// (rule, message) pairs as one message per rule: the first [`NAMED`]
/// joined by `; `, then how many more.
fn by_rule(failures: Vec<(String, String)>) -> BTreeMap<String, String> {
    let mut grouped: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (rule, message) in failures {
        grouped.entry(rule).or_default().push(message);
    }
    grouped
        .into_iter()
        .map(|(rule, messages)| {
            let mut text = messages
                .iter()
                .take(NAMED)
                .cloned()
                .collect::<Vec<_>>()
                .join("; ");
            if messages.len() > NAMED {
                text.push_str(&format!("; and {} more", messages.len() - NAMED));
            }
            (rule, text)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_operators_request_ends_the_wait_of_the_copies_it_names_only() {
        use crate::sync::model::backoff::PERMANENT_WAIT;
        use crate::sync::model::{CopyError, FailureKind, Place};
        let target = |name: &str| {
            Target::from(Place {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                namespace: Some("a".into()),
                name: name.into(),
            })
        };
        let now = Instant::now();
        let mut sink = SinkState::default();
        for name in ["x", "y"] {
            let input = Input {
                desired: None,
                live_rv: None,
            };
            let e = CopyError::new(FailureKind::Forbidden, "forbidden");
            sink.retries
                .insert(target(name), Backoff::failed(None, input, now, 0.0, e));
        }
        let n = retry_now(&mut sink, now, |_, t| t.name == "x");
        assert_eq!(n, 1);
        assert_eq!(sink.retries[&target("x")].at, now, "tried in this pass");
        assert_eq!(
            sink.retries[&target("y")].at,
            now + PERMANENT_WAIT,
            "still waits"
        );
    }

    #[test]
    fn one_message_per_rule_naming_the_first_few_copies() {
        let mut failures: Vec<(String, String)> = (0..7)
            .map(|i| ("a".to_owned(), format!("ConfigMap x/c{i}: refused")))
            .collect();
        failures.push(("b".to_owned(), "Role q r: forbidden".to_owned()));
        let got = by_rule(failures);
        assert_eq!(got.len(), 2);
        assert_eq!(
            got["a"],
            "ConfigMap x/c0: refused; ConfigMap x/c1: refused; ConfigMap x/c2: refused; \
             ConfigMap x/c3: refused; ConfigMap x/c4: refused; and 2 more"
        );
        assert_eq!(got["b"], "Role q r: forbidden");
    }
}
