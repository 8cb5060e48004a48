//! A failed operation on a copy (write, delete, orphan): the copy backs off
//! on its own (`backoff`), the failure is logged and counted once per
//! backoff step (not once per pass), its rule's status counts it with the
//! message, and when it is news an Event on the rule names the copy and the
//! error.

use k8s_openapi::api::core::v1::ObjectReference;
use tokio::time::Instant;

use super::apply::WriteError;
use super::backoff::{Backoff, Input};
use super::engine::{Engine, Target};
use crate::kube::events::EventType;

/// The reason of the Event announcing a failing copy.
pub const REASON: &str = "SyncFailed";

impl Engine {
    /// The error to report while the copy at `target` waits for its next
    /// try (its backoff holds for `input` at `now`); None: try now.
    pub(super) fn waiting(&self, target: &Target, input: &Input, now: Instant) -> Option<String> {
        self.retries
            .get(target)
            .filter(|b| b.holds(input, now))
            .map(|b| b.error.clone())
    }

    /// Records a failed `op` (`write` or `collect`) on the copy at `target`,
    /// made by `rule` from `input`: the next try waits a backoff step, the
    /// failure is logged and counted, and queued as an Event if it is news.
    /// Returns the message for the rule status.
    pub(super) fn copy_failed(
        &mut self,
        target: &Target,
        rule: &str,
        input: Input,
        op: &'static str,
        e: &WriteError,
    ) -> String {
        let message = crate::report(e);
        let now = Instant::now();
        let prev = self.retries.get(target);
        let news = Backoff::is_news(prev, &message);
        let next = Backoff::failed(prev, input, now, rand::random::<f64>(), message.clone());
        tracing::warn!(
            copy = %target,
            rule,
            op,
            error = %message,
            transient = e.is_transient(),
            attempts = next.attempts,
            retry_in = ?next.at.saturating_duration_since(now),
            "copy not written; backing off"
        );
        self.ctx.metrics.sync_write_failed(op);
        self.retries.insert(target.clone(), next);
        // Built-in rules (named in parentheses) have no object to hold Events.
        if news && !rule.is_empty() && !rule.starts_with('(') {
            self.failure_events
                .push((rule.to_owned(), format!("{target}: {message}")));
        }
        message
    }

    /// Publishes the Events of this pass's new failures on their rules.
    pub(super) async fn announce_failures(&mut self) {
        for (rule, message) in std::mem::take(&mut self.failure_events) {
            let rule_ref = ObjectReference {
                api_version: Some(fleetbus_schemas::well_known::API_VERSION.to_owned()),
                kind: Some("ResourceSyncRule".to_owned()),
                name: Some(rule),
                ..ObjectReference::default()
            };
            self.ctx
                .recorder
                .publish(&rule_ref, EventType::Warning, REASON, &message)
                .await;
        }
    }
}
