//! One reader of the drift stream per dashboard process, fanned out to every
//! `/api/events` client.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::Context;
use axum::http::StatusCode;
use axum::response::sse::Event;
use fleetbus_schemas::subject::{all_drift, Prefix};
use futures::Stream;
use serde_json::json;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use super::error::ApiError;
use crate::drift::events::EventReader;
use crate::drift::render::event_json;

/// What the reader sends to every client.
#[derive(Debug)]
pub(crate) enum FeedItem {
    /// A drift event: its subject (clients filter on it) and its `drift` data, rendered
    /// once for all clients.
    Drift { subject: String, data: String },
    /// The reader failed: every client sends `event: failed` and ends.
    Failed(String),
}

/// Whether new clients can be served.
enum FeedState {
    /// The first reader is being opened.
    Starting,
    /// The reader's consumer exists: what is published from now on is sent.
    Live,
    /// The last reader failed (a new one is opened after a backoff); clients get this.
    Failed(ApiError),
}

/// The shared reader ([`DriftFeed::run`]) and its clients' channel.
pub(crate) struct DriftFeed {
    items: broadcast::Sender<Arc<FeedItem>>,
    state: watch::Sender<FeedState>,
}

/// Events a client may fall behind by before it is dropped (see [`events`]).
const BACKLOG: usize = 1024;

impl DriftFeed {
    pub(crate) fn new() -> Self {
        Self {
            items: broadcast::Sender::new(BACKLOG),
            state: watch::Sender::new(FeedState::Starting),
        }
    }

    /// A receiver of every item the reader sends from now on, once the reader is live
    /// (waiting at most `wait` for the first one); the error a client gets otherwise.
    pub(crate) async fn subscribe(
        &self,
        wait: Duration,
    ) -> Result<broadcast::Receiver<Arc<FeedItem>>, ApiError> {
        // Subscribed before the state is looked at: whatever a live reader reads after
        // `ready` is sent reaches this client.
        let items = self.items.subscribe();
        let mut state = self.state.subscribe();
        let settled =
            tokio::time::timeout(wait, state.wait_for(|s| !matches!(s, FeedState::Starting))).await;
        let not_yet = || {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the drift stream's reader is not connected yet; retry",
            )
        };
        match settled {
            Ok(Ok(state)) => match &*state {
                FeedState::Live => Ok(items),
                FeedState::Failed(e) => Err(e.clone()),
                FeedState::Starting => Err(not_yet()),
            },
            // Timed out, or the sender is gone (it lives as long as `self`).
            _ => Err(not_yet()),
        }
    }

    /// Reads the drift stream (new events only) until `shutdown`, sending each event to
    /// every client; a failed reader is reopened with backoff.
    pub(crate) async fn run(&self, js: Context, prefix: Prefix, shutdown: CancellationToken) {
        let mut failures: u32 = 0;
        loop {
            let error = tokio::select! {
                () = shutdown.cancelled() => return,
                ended = self.read(&js, &prefix, &mut failures) => ended,
            };
            let delay = super::mirror::backoff(failures);
            failures = failures.saturating_add(1);
            tracing::warn!(error = %error.message, retry_in = ?delay, "the drift stream's reader failed");
            // No receivers is not an error: nobody is watching.
            let _ = (self.items).send(Arc::new(FeedItem::Failed(error.message.clone())));
            self.state.send_replace(FeedState::Failed(error));
            // A backoff, not a wait for a condition: nothing observable says
            // NATS or the stream is back except trying again (250 ms doubling
            // to 4 s, `mirror::backoff`); shutdown still ends it at once.
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// One reader; returns what ended it.
    async fn read(&self, js: &Context, prefix: &Prefix, failures: &mut u32) -> ApiError {
        let mut reader = match EventReader::open(js, prefix, all_drift(prefix), false).await {
            Ok(reader) => reader,
            Err(e) => return e.into(),
        };
        *failures = 0;
        self.state.send_replace(FeedState::Live);
        loop {
            match reader.next().await {
                Ok(Some(read)) => {
                    let Some(event) = read.event else { continue };
                    let data = json!({ "event": event_json(&event), "published": read.published });
                    let item = FeedItem::Drift {
                        subject: read.subject,
                        data: data.to_string(),
                    };
                    let _ = self.items.send(Arc::new(item));
                }
                Ok(None) => {
                    return ApiError::new(
                        StatusCode::BAD_GATEWAY,
                        "the drift stream's consumer ended (the NATS connection closed)",
                    )
                }
                Err(e) => return e.into(),
            }
        }
    }
}

/// One client's server-sent events: `ready`, then `drift` for each item whose subject
/// starts with `only` (all when `None`). A reader failure is sent as `failed` and ends
/// the stream. So does falling more than [`BACKLOG`] events behind: the client is
/// told how many it missed and EventSource reconnects, rather than the client silently
/// missing events or every other client waiting for it.
pub(crate) fn events(
    items: broadcast::Receiver<Arc<FeedItem>>,
    only: Option<String>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let ready = Event::default().event("ready").data("{}");
    let failed = |error: &str| {
        let data = json!({ "error": error });
        Event::default().event("failed").data(data.to_string())
    };
    futures::stream::unfold(Some((items, only, Some(ready))), move |st| async move {
        let (mut items, only, first) = st?;
        if let Some(first) = first {
            return Some((Ok(first), Some((items, only, None))));
        }
        loop {
            let event = match items.recv().await {
                Ok(item) => match &*item {
                    FeedItem::Drift { subject, data } => {
                        if only.as_deref().is_some_and(|p| !subject.starts_with(p)) {
                            continue;
                        }
                        Event::default().event("drift").data(data.as_str())
                    }
                    FeedItem::Failed(error) => return Some((Ok(failed(error)), None)),
                },
                Err(RecvError::Lagged(missed)) => {
                    let error = format!(
                        "this client fell {missed} drift events behind and missed them; \
                             reconnect to follow again"
                    );
                    return Some((Ok(failed(&error)), None));
                }
                Err(RecvError::Closed) => return None,
            };
            return Some((Ok(event), Some((items, only, None))));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    fn drift(subject: &str) -> Arc<FeedItem> {
        Arc::new(FeedItem::Drift {
            subject: subject.into(),
            data: format!("{{\"s\":\"{subject}\"}}"),
        })
    }

    /// Up to `n` events of a stream, each as its debug form (which shows the bytes
    /// sent: `Event` has no getters).
    async fn wire(s: impl Stream<Item = Result<Event, Infallible>>, n: usize) -> Vec<String> {
        let s = std::pin::pin!(s);
        s.take(n)
            .map(|e| match e {
                Ok(e) => format!("{e:?}"),
                Err(never) => match never {},
            })
            .collect()
            .await
    }

    #[tokio::test]
    async fn a_client_sees_ready_then_its_clusters_events_and_a_failure_ends_it() {
        let (tx, rx) = broadcast::channel(8);
        let only = fleetbus_schemas::subject::drift_of_cluster(&"fb".parse().unwrap(), "c2");
        let only = only.trim_end_matches('>').to_owned();
        tx.send(drift("fb.drift.c1.core.ConfigMap.ns.a")).unwrap();
        tx.send(drift("fb.drift.c2.core.ConfigMap.ns.a")).unwrap();
        tx.send(drift("fb.drift.c22.core.ConfigMap.ns.a")).unwrap();
        tx.send(Arc::new(FeedItem::Failed("gone".into()))).unwrap();
        tx.send(drift("fb.drift.c2.core.ConfigMap.ns.b")).unwrap();
        let got = wire(events(rx, Some(only)), 10).await;
        assert_eq!(got.len(), 3, "ready, one drift of c2, failed: {got:?}");
        assert!(got[0].contains("event: ready"), "{got:?}");
        assert!(
            got[1].contains("event: drift") && got[1].contains("fb.drift.c2.core.ConfigMap.ns.a"),
            "{got:?}"
        );
        assert!(
            got[2].contains("event: failed") && got[2].contains("gone"),
            "{got:?}"
        );
    }

    #[tokio::test]
    async fn a_lagging_client_is_told_and_ends() {
        let (tx, rx) = broadcast::channel(2);
        for i in 0..5 {
            tx.send(drift(&format!("fb.drift.c1.core.ConfigMap.ns.{i}")))
                .unwrap();
        }
        let got = wire(events(rx, None), 10).await;
        assert_eq!(got.len(), 2, "ready, then the lag ends it: {got:?}");
        assert!(
            got[1].contains("event: failed") && got[1].contains("fell 3 drift events behind"),
            "{got:?}"
        );
    }
}
