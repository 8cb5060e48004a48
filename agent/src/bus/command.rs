//! The one request server every verb of the agent uses (`<p>.cmd.<self>.<verb>`,
//! PROTOCOL §6.3–§6.7): subscribe (retried until it works), admit each request
//! by the verb's own rate, check the fleet root's signature where the verb
//! changes state or shows what the cluster holds, hand it to the verb's
//! handler, sign the reply and send it. A subscription that ends (the client
//! was closed and made again, the server dropped it) is made again: a verb
//! must never stop answering while the agent runs.
//!
//! Written once so that the six verbs cannot differ in how they refuse, sign
//! or come back; what each verb does is its handler.

use std::future::Future;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::command_sub::{admit, authorize, signed_reply};
use super::rate::{RateLimit, TokenBucket};
use super::replay::SeenRequests;
use crate::metrics::Metrics;
use crate::trust::Identity;

/// One verb: its name (in metrics and refusals), its subject, whether the
/// fleet root must sign its requests in the secure mode, and its rate.
#[derive(Debug, Clone)]
pub struct Verb {
    pub name: &'static str,
    pub subject: String,
    pub signed: Signed,
    pub rate: RateLimit,
}

/// Whether a verb's requests need the fleet root's signature (secure mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signed {
    /// It changes state or shows what the cluster holds.
    Required,
    /// Anyone on the bus may ask (`progress`: counts only).
    NotRequired,
}

/// Why a request was not handed to its handler: the verb's reply says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Over the verb's rate; the requester may ask again after this long.
    Rate { why: String, retry_after_ms: u64 },
    /// Not signed by the fleet root (or stale) in the secure mode.
    Unauthorized(String),
}

impl Refused {
    /// The refusal as a reply's `error` and `retryAfterMs`.
    pub fn into_parts(self) -> (String, Option<u64>) {
        match self {
            Refused::Rate {
                why,
                retry_after_ms,
            } => (why, Some(retry_after_ms)),
            Refused::Unauthorized(why) => (why, None),
        }
    }
}

/// A request as it arrived.
#[derive(Debug, Clone)]
pub struct Incoming {
    pub payload: Bytes,
    /// The requester's inbox; `None` when nobody waits for an answer.
    pub reply: Option<async_nats::Subject>,
}

/// Where requests come from and replies go: NATS, or a test's stand-in.
pub trait Transport: Send + Sync {
    type Sub: Stream<Item = Incoming> + Unpin + Send;
    /// Subscribes to `subject`, retrying until it works; `None` once
    /// `cancel` fires.
    fn subscribe(
        &self,
        subject: &str,
        cancel: &CancellationToken,
    ) -> impl Future<Output = Option<Self::Sub>> + Send;
    /// Sends a reply (failures are the transport's to log).
    fn reply(&self, to: async_nats::Subject, bytes: Vec<u8>) -> impl Future<Output = ()> + Send;
}

impl Transport for async_nats::Client {
    type Sub = futures::stream::Map<async_nats::Subscriber, fn(async_nats::Message) -> Incoming>;

    async fn subscribe(&self, subject: &str, cancel: &CancellationToken) -> Option<Self::Sub> {
        let sub = super::command_sub::subscribe(self, subject, cancel).await?;
        let to_incoming: fn(async_nats::Message) -> Incoming = |m| Incoming {
            payload: m.payload,
            reply: m.reply,
        };
        Some(sub.map(to_incoming))
    }

    async fn reply(&self, to: async_nats::Subject, bytes: Vec<u8>) {
        if let Err(e) = self.publish(to, bytes.into()).await {
            tracing::warn!(error = %e, "could not reply to a request");
        }
    }
}

/// What every verb shares: metrics, and this cluster's keys in the secure mode.
#[derive(Clone, Copy)]
pub struct Common<'a> {
    pub metrics: &'a Metrics,
    pub trust: Option<&'a Identity>,
}

/// Serves `verb` until `cancel`: each admitted, authorized request goes to
/// `handle`, each refused one to `refuse`; both return the encoded reply
/// (an encoding error is logged and nothing is sent).
pub async fn serve<T, H, F, R>(
    transport: &T,
    common: Common<'_>,
    verb: &Verb,
    mut handle: H,
    refuse: R,
    cancel: &CancellationToken,
) where
    T: Transport,
    H: FnMut(Bytes) -> F,
    F: Future<Output = Result<Vec<u8>, String>>,
    R: Fn(Refused) -> Result<Vec<u8>, String>,
{
    let mut rate = TokenBucket::new(verb.name, verb.rate, Instant::now());
    let mut seen = SeenRequests::default();
    loop {
        let Some(mut sub) = transport.subscribe(&verb.subject, cancel).await else {
            return;
        };
        loop {
            let msg = tokio::select! {
                _ = cancel.cancelled() => return,
                msg = sub.next() => match msg {
                    Some(msg) => msg,
                    None => break,
                },
            };
            let reply = match check(common, verb, (&mut rate, &mut seen), &msg.payload) {
                Err(refused) => refuse(refused),
                Ok(()) => tokio::select! {
                    _ = cancel.cancelled() => return,
                    reply = handle(msg.payload) => reply,
                },
            };
            let Some(to) = msg.reply else { continue };
            match reply {
                Ok(bytes) => transport.reply(to, signed_reply(common.trust, bytes)).await,
                Err(e) => tracing::warn!(verb = verb.name, error = %e, "could not encode a reply"),
            }
        }
        tracing::warn!(verb = verb.name, subject = %verb.subject, "request subscription ended; subscribing again");
        // Not in a tight loop should the transport end every subscription at once.
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(RESUBSCRIBE_PAUSE) => {}
        }
    }
}

/// The pause before subscribing again after a subscription ended.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(100);

/// Admits a request by rate, then (where the verb needs it) by signature;
/// both refusals are counted where `admit` and `authorize` count them.
fn check(
    common: Common<'_>,
    verb: &Verb,
    (rate, seen): (&mut TokenBucket, &mut SeenRequests),
    payload: &[u8],
) -> Result<(), Refused> {
    admit(rate, common.metrics).map_err(|r| Refused::Rate {
        why: r.to_string(),
        retry_after_ms: r.retry_after_ms(),
    })?;
    if verb.signed == Signed::Required {
        authorize(
            common.trust,
            common.metrics,
            verb.name,
            &verb.subject,
            payload,
            seen,
        )
        .map_err(Refused::Unauthorized)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    /// A transport whose every subscription delivers a fixed list of
    /// requests and then ends, as a closed subscription does.
    #[derive(Default)]
    struct Fake {
        subscribed: Mutex<Vec<String>>,
        batches: Mutex<VecDeque<Vec<Incoming>>>,
        replies: Mutex<Vec<(String, Vec<u8>)>>,
        /// Cancelled once every batch was delivered and ended.
        done: CancellationToken,
    }

    impl Transport for Arc<Fake> {
        type Sub = futures::stream::Iter<std::vec::IntoIter<Incoming>>;

        async fn subscribe(&self, subject: &str, cancel: &CancellationToken) -> Option<Self::Sub> {
            if cancel.is_cancelled() {
                return None;
            }
            self.subscribed.lock().unwrap().push(subject.to_owned());
            let next = self.batches.lock().unwrap().pop_front();
            match next {
                Some(batch) => Some(futures::stream::iter(batch)),
                None => {
                    self.done.cancel();
                    Some(futures::stream::iter(Vec::new()))
                }
            }
        }

        async fn reply(&self, to: async_nats::Subject, bytes: Vec<u8>) {
            self.replies.lock().unwrap().push((to.to_string(), bytes));
        }
    }

    fn req(body: &str, to: &str) -> Incoming {
        Incoming {
            payload: Bytes::from(body.to_owned()),
            reply: Some(to.into()),
        }
    }

    fn verb(name: &'static str, per_second: f64, burst: u32) -> Verb {
        Verb {
            name,
            subject: format!("p.cmd.c1.{name}"),
            signed: Signed::Required,
            rate: RateLimit { per_second, burst },
        }
    }

    async fn run(fake: &Arc<Fake>, verb: &Verb) {
        let metrics = Metrics::new();
        let common = Common {
            metrics: &metrics,
            trust: None,
        };
        let cancel = fake.done.clone();
        let handle = |p: Bytes| async move {
            Ok(format!("ok {}", String::from_utf8_lossy(&p)).into_bytes())
        };
        let refuse = |r: Refused| Ok(format!("refused {r:?}").into_bytes());
        tokio::time::timeout(
            Duration::from_secs(10),
            serve(fake, common, verb, handle, refuse, &cancel),
        )
        .await
        .expect("serve returns once cancelled");
    }

    /// Every verb of the agent: each one's subscription closed twice is made
    /// again, and requests on the new one are answered.
    #[tokio::test]
    async fn every_verb_subscribes_again_when_its_subscription_ends() {
        for name in [
            "label",
            "progress",
            "rollout",
            "correct",
            "preview",
            "preview-source",
        ] {
            let fake = Arc::new(Fake::default());
            fake.batches.lock().unwrap().extend([
                vec![req("a", "inbox.1")],
                vec![],
                vec![req("b", "inbox.2")],
            ]);
            run(&fake, &verb(name, 100.0, 10)).await;
            let subs = fake.subscribed.lock().unwrap().clone();
            assert_eq!(
                subs.len(),
                4,
                "{name}: three ended subscriptions and the last one: {subs:?}"
            );
            assert!(
                subs.iter().all(|s| s == &format!("p.cmd.c1.{name}")),
                "{subs:?}"
            );
            let replies = fake.replies.lock().unwrap().clone();
            let text: Vec<(String, String)> = replies
                .into_iter()
                .map(|(to, b)| (to, String::from_utf8(b).unwrap()))
                .collect();
            assert_eq!(
                text,
                vec![
                    ("inbox.1".to_owned(), "ok a".to_owned()),
                    ("inbox.2".to_owned(), "ok b".to_owned())
                ],
                "{name}"
            );
        }
    }

    #[tokio::test]
    async fn a_request_over_the_rate_is_refused_with_when_to_ask_again_and_none_without_an_inbox_is_answered(
    ) {
        let fake = Arc::new(Fake::default());
        let silent = Incoming {
            payload: Bytes::from_static(b"x"),
            reply: None,
        };
        fake.batches
            .lock()
            .unwrap()
            .push_back(vec![req("1", "i.1"), silent, req("3", "i.3")]);
        // A burst of two: the first and the unanswered one take the tokens.
        run(&fake, &verb("label", 0.001, 2)).await;
        let replies = fake.replies.lock().unwrap().clone();
        assert_eq!(
            replies.len(),
            2,
            "the request without an inbox gets no reply"
        );
        assert_eq!(String::from_utf8_lossy(&replies[0].1), "ok 1");
        let refused = String::from_utf8_lossy(&replies[1].1).into_owned();
        assert!(refused.starts_with("refused Rate"), "{refused}");
        assert!(refused.contains("retry_after_ms"), "{refused}");
    }
}
