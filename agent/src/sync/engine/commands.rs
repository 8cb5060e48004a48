//! The requests the engine answers: `correct` (an operator's correction, run
//! by the next pass), `preview` and `preview-source` (what a rule would do
//! here, or publish from here), and `rollout` (pause, resume, abort, roll
//! back). Each verb is served by the agent's one request server
//! (`bus::command`) in a task of its own, with its own rate bucket (a flood
//! of previews, each of which may cost dry runs, starves no correction);
//! admitted and authorized requests are handed to the engine's loop
//! ([`Handoff`]). `correct` and `rollout` change state and are answered
//! there, between passes; the read-only previews are answered from a
//! [`SyncView`] the loop hands out (a snapshot that copies no object), on
//! the previews' own thread (`preview::worker`), never holding the loop.

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use fleetbus_schemas::command::{CorrectReply, CorrectRequest};
use fleetbus_schemas::placement::{PlacementKey, PlacementRecord};
use fleetbus_schemas::preview::{PreviewReply, PreviewSourceReply};
use fleetbus_schemas::rollout::RolloutReply;
use fleetbus_schemas::subject::{CommandKey, PREVIEW_SOURCE_VERB, ROLLOUT_VERB};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::bus::command::{self, Common, Refused, Signed, Verb};
use crate::context::Context;
use crate::sync::drift::command as correction;
use crate::sync::preview::worker::{Job, Worker};
use crate::sync::sink::state::SinkState;
use crate::sync::world::World;
use crate::sync::{preview, rollout};

use super::Engine;

/// The verbs the engine answers itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EngineVerb {
    Correct,
    Preview,
    PreviewSource,
    Rollout,
}

impl EngineVerb {
    const ALL: [EngineVerb; 4] = [
        EngineVerb::Correct,
        EngineVerb::Preview,
        EngineVerb::PreviewSource,
        EngineVerb::Rollout,
    ];

    /// The verb in subjects, metrics and refusals.
    fn name(self) -> &'static str {
        match self {
            EngineVerb::Correct => "correct",
            EngineVerb::Preview => "preview",
            EngineVerb::PreviewSource => PREVIEW_SOURCE_VERB,
            EngineVerb::Rollout => ROLLOUT_VERB,
        }
    }

    /// Whether the verb only reads: answered from a [`SyncView`] on the
    /// previews' thread, never by the loop.
    fn read_only(self) -> bool {
        matches!(self, EngineVerb::Preview | EngineVerb::PreviewSource)
    }

    /// Whether a pass follows the answer: a rollout request changes what the
    /// rollout stage decides; a correction runs its own pass; previews
    /// change nothing.
    pub(super) fn pass_after(self) -> bool {
        self == EngineVerb::Rollout
    }
}

/// What a request server hands to the engine's loop.
pub(super) enum Handoff {
    /// A request that changes state, answered by the loop; where its
    /// encoded reply goes.
    Answer {
        verb: EngineVerb,
        payload: Bytes,
        reply: oneshot::Sender<Result<Vec<u8>, String>>,
    },
    /// A read-only request's ask for a snapshot (see [`SyncView`]).
    View(oneshot::Sender<Arc<SyncView>>),
}

impl Handoff {
    /// Whether a pass follows (see [`EngineVerb::pass_after`]).
    pub(super) fn pass_after(&self) -> bool {
        matches!(self, Handoff::Answer { verb, .. } if verb.pass_after())
    }
}

/// Starts one request server per engine verb, handing what they admit to
/// `tx`; the read-only verbs compute on the previews' thread (`worker`).
pub(super) fn spawn(
    ctx: &Arc<Context>,
    tx: &mpsc::Sender<Handoff>,
    cancel: &CancellationToken,
) -> std::io::Result<()> {
    let worker = Worker::start()?;
    for verb in EngineVerb::ALL {
        let server = serve(
            ctx.clone(),
            verb,
            tx.clone(),
            worker.clone(),
            cancel.clone(),
        );
        tokio::spawn(server);
    }
    Ok(())
}

async fn serve(
    ctx: Arc<Context>,
    verb: EngineVerb,
    tx: mpsc::Sender<Handoff>,
    worker: Worker,
    cancel: CancellationToken,
) {
    let cluster = ctx.cfg.cluster_name.clone();
    let spec = Verb {
        name: verb.name(),
        subject: CommandKey {
            cluster: cluster.clone(),
            verb: verb.name().to_owned(),
        }
        .to_subject(ctx.layout.prefix()),
        // Every engine verb changes state or shows what the cluster holds
        // (a preview shows objects and costs dry runs): the fleet root's
        // word is asked for in the secure mode.
        signed: Signed::Required,
        rate: ctx.cfg.command_rate,
    };
    let common = Common {
        metrics: &ctx.metrics,
        trust: ctx.cfg.trust.as_deref(),
    };
    let refuse = |r: Refused| refusal(verb, &cluster, r);
    let handle = |payload: Bytes| {
        let (tx, cluster, worker, ctx) = (tx.clone(), cluster.clone(), worker.clone(), ctx.clone());
        async move {
            let stopped = || {
                refusal(
                    verb,
                    &cluster,
                    Refused::Unauthorized("sync is stopping; ask again".to_owned()),
                )
            };
            let (reply, answer) = oneshot::channel();
            if verb.read_only() {
                let (give, view) = oneshot::channel();
                if tx.send(Handoff::View(give)).await.is_err() {
                    return stopped();
                }
                let Ok(view) = view.await else {
                    return stopped();
                };
                let job = read_only(verb, view, ctx.clone(), payload, reply);
                if let Err(busy) = worker.submit(job) {
                    ctx.metrics.command_rejected(verb.name(), "busy");
                    let why = busy.to_string();
                    let retry_after_ms = BUSY_RETRY_MS;
                    return refusal(
                        verb,
                        &cluster,
                        Refused::Rate {
                            why,
                            retry_after_ms,
                        },
                    );
                }
            } else {
                let handoff = Handoff::Answer {
                    verb,
                    payload,
                    reply,
                };
                if tx.send(handoff).await.is_err() {
                    return stopped();
                }
            }
            answer.await.unwrap_or_else(|_| stopped())
        }
    };
    command::serve(&ctx.js.client(), common, &spec, handle, refuse, &cancel).await;
}

/// When a preview refused because the previews' thread is busy may be
/// asked again: about what one preview of a large rule takes.
const BUSY_RETRY_MS: u64 = 1_000;

/// The previews' thread's job for a read-only request: the reply computed
/// from `view`, sent to `reply`.
fn read_only(
    verb: EngineVerb,
    view: Arc<SyncView>,
    ctx: Arc<Context>,
    payload: Bytes,
    reply: oneshot::Sender<Result<Vec<u8>, String>>,
) -> Job {
    Box::new(move || {
        Box::pin(async move {
            let encoded = match verb {
                EngineVerb::PreviewSource => preview::preview_source(&view.world, &ctx, &payload)
                    .await
                    .encode(),
                _ => {
                    let read = (&view.sink, &view.placement);
                    preview::preview(&view.world, read, &ctx, &payload)
                        .await
                        .fit(ctx.max_payload())
                }
            };
            // The requester may have given up: nothing to do then.
            let _ = reply.send(encoded.map_err(|e| e.to_string()));
        })
    })
}

/// The encoded reply refusing a request of `verb`.
fn refusal(verb: EngineVerb, cluster: &str, refused: Refused) -> Result<Vec<u8>, String> {
    let (why, retry_after_ms) = refused.into_parts();
    match verb {
        EngineVerb::Correct => CorrectReply {
            retry_after_ms,
            ..CorrectReply::refused(cluster, why)
        }
        .encode()
        .map_err(|e| e.to_string()),
        EngineVerb::Preview => PreviewReply {
            retry_after_ms,
            ..PreviewReply::refused(cluster, why)
        }
        .encode()
        .map_err(|e| e.to_string()),
        EngineVerb::PreviewSource => PreviewSourceReply {
            retry_after_ms,
            ..PreviewSourceReply::refused(cluster, why)
        }
        .encode()
        .map_err(|e| e.to_string()),
        EngineVerb::Rollout => RolloutReply {
            retry_after_ms,
            ..RolloutReply::refused(cluster, why)
        }
        .encode()
        .map_err(|e| e.to_string()),
    }
}

/// What the read-only verbs read: the World, the sink's holds, failing
/// copies and baselines, and the placement records, as they were between
/// two passes. Taken by the loop when a read-only request arrives, not
/// published after every pass (a fleet nobody previews pays nothing for
/// it); taking it costs no copy of the objects: the World's objects and
/// envelopes and the sink's baselines are persistent maps whose clones
/// share every node (`model::Snapshots`), so the loop spends microseconds
/// on it whatever the number of objects (a deep copy of 3,000 took
/// milliseconds per preview, BENCHMARKS 2c). The engine writes on; the
/// view keeps what it read.
pub(in crate::sync) struct SyncView {
    pub world: World,
    pub sink: SinkState,
    pub placement: BTreeMap<PlacementKey, PlacementRecord>,
}

impl Engine {
    /// A snapshot for the read-only verbs (see [`SyncView`]).
    fn view(&self) -> Arc<SyncView> {
        Arc::new(SyncView {
            world: self.world.clone(),
            sink: self.sink.for_preview(),
            placement: self.placement.read.records.clone(),
        })
    }

    /// Answers one handed-off request; its reply goes back to its server.
    pub(super) async fn answer(&mut self, h: Handoff) {
        let (verb, payload, reply) = match h {
            Handoff::View(give) => {
                // The asker may have given up: nothing to do then.
                let _ = give.send(self.view());
                return;
            }
            Handoff::Answer {
                verb,
                payload,
                reply,
            } => (verb, payload, reply),
        };
        let encoded = match verb {
            EngineVerb::Rollout => {
                let (book, returns) = (&mut self.rollout, &self.returns.book);
                let (world, ctx) = (&self.world, &self.io.ctx);
                rollout::command::rollout_request(world, book, returns, ctx, &payload)
                    .await
                    .encode()
            }
            // Correct (the read-only verbs never come here).
            _ => match parse_correct(&payload) {
                Ok(req) => self.correct(&req).await,
                Err(e) => CorrectReply::refused(&self.world.fleet.local.name, e),
            }
            .encode(),
        };
        // The requester may have given up: nothing to do then.
        let _ = reply.send(encoded.map_err(|e| e.to_string()));
    }

    /// Corrects the drifted copies `req` selects, now: drift marks them, a
    /// whole pass (which only the engine can run) corrects them, and drift
    /// builds the reply from what the pass did.
    async fn correct(&mut self, req: &CorrectRequest) -> CorrectReply {
        correction::select(&mut self.drift, req);
        // The failing copies it names are tried in this pass too, whatever
        // their wait (a refusal waits for a change: this is one).
        let now = tokio::time::Instant::now();
        let asked = |rule: &str, t: &_| correction::asks_for(req, rule, t);
        let retried = crate::sync::sink::failures::retry_now(&mut self.sink, now, asked);
        tracing::info!(retried, "failing copies tried again on request");
        self.pass().await;
        correction::reply(&self.world.fleet.local.name, &mut self.drift)
    }
}

/// Reads a request; the error is the reply's `error`.
pub(super) fn parse_correct(bytes: &[u8]) -> Result<CorrectRequest, String> {
    CorrectRequest::decode(bytes).map_err(|e| format!("cannot read the request: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_or_say_why_not() {
        let req =
            parse_correct(br#"{"schema":"fleetbus.io/correct-request/v1","rule":"r","name":null}"#)
                .unwrap();
        assert_eq!(req.rule.as_deref(), Some("r"));
        assert_eq!(req.name, None);
        assert!(parse_correct(b"not json").is_err());
        assert!(parse_correct(br#"{"schema":"fleetbus.io/correct-request/v9"}"#).is_err());
        assert!(parse_correct(br#"{"schema":"fleetbus.io/correct-request/v1","kind":5}"#).is_err());
    }

    #[test]
    fn every_engine_verb_refuses_in_its_own_reply_shape_with_when_to_ask_again() {
        let rate = || Refused::Rate {
            why: "too many".into(),
            retry_after_ms: 250,
        };
        let c: CorrectReply =
            serde_json::from_slice(&refusal(EngineVerb::Correct, "c1", rate()).unwrap()).unwrap();
        assert_eq!(
            (c.retry_after_ms, c.error.as_deref()),
            (Some(250), Some("too many"))
        );
        let p: PreviewReply =
            serde_json::from_slice(&refusal(EngineVerb::Preview, "c1", rate()).unwrap()).unwrap();
        assert_eq!(p.retry_after_ms, Some(250));
        let s: PreviewSourceReply =
            serde_json::from_slice(&refusal(EngineVerb::PreviewSource, "c1", rate()).unwrap())
                .unwrap();
        assert_eq!(s.retry_after_ms, Some(250));
        let r: RolloutReply = serde_json::from_slice(
            &refusal(
                EngineVerb::Rollout,
                "c1",
                Refused::Unauthorized("unsigned".into()),
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(r.retry_after_ms, None);
    }
}
