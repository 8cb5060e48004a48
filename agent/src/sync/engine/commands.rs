//! The requests the engine answers: `correct` (an operator's correction, run
//! by the next pass), `preview` and `preview-source` (what a rule would do
//! here, or publish from here), and `rollout` (pause, resume, abort, roll
//! back). Each verb is served by the agent's one request server
//! (`bus::command`) in a task of its own, with its own rate bucket (a flood
//! of previews, each of which may cost dry runs, starves no correction);
//! admitted and authorized requests are handed to the engine's loop
//! ([`Handoff`]). `correct` and `rollout` change state and are answered
//! there, between passes; the read-only previews are answered from a copy
//! of what they read (the World, the sink's holds, retries and baselines),
//! in a task of their own, never holding the loop.

use std::sync::Arc;

use bytes::Bytes;
use fleetbus_schemas::command::{CorrectReply, CorrectRequest};
use fleetbus_schemas::preview::{PreviewReply, PreviewSourceReply};
use fleetbus_schemas::rollout::RolloutReply;
use fleetbus_schemas::subject::{CommandKey, PREVIEW_SOURCE_VERB, ROLLOUT_VERB};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::bus::command::{self, Common, Refused, Signed, Verb};
use crate::context::Context;
use crate::sync::drift::command as correction;
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

    /// Whether a pass follows the answer: a rollout request changes what the
    /// rollout stage decides; a correction runs its own pass; previews
    /// change nothing.
    pub(super) fn pass_after(self) -> bool {
        self == EngineVerb::Rollout
    }
}

/// A request handed to the engine's loop, and where its encoded reply goes.
pub(super) struct Handoff {
    pub(super) verb: EngineVerb,
    payload: Bytes,
    reply: oneshot::Sender<Result<Vec<u8>, String>>,
}

/// Starts one request server per engine verb, handing what they admit to `tx`.
pub(super) fn spawn(ctx: &Arc<Context>, tx: &mpsc::Sender<Handoff>, cancel: &CancellationToken) {
    for verb in EngineVerb::ALL {
        tokio::spawn(serve(ctx.clone(), verb, tx.clone(), cancel.clone()));
    }
}

async fn serve(
    ctx: Arc<Context>,
    verb: EngineVerb,
    tx: mpsc::Sender<Handoff>,
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
        let (tx, cluster) = (tx.clone(), cluster.clone());
        async move {
            let (reply, answer) = oneshot::channel();
            let stopped = || {
                refusal(
                    verb,
                    &cluster,
                    Refused::Unauthorized("sync is stopping; ask again".to_owned()),
                )
            };
            let handoff = Handoff {
                verb,
                payload,
                reply,
            };
            if tx.send(handoff).await.is_err() {
                return stopped();
            }
            answer.await.unwrap_or_else(|_| stopped())
        }
    };
    command::serve(&ctx.js.client(), common, &spec, handle, refuse, &cancel).await;
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

impl Engine {
    /// Answers one handed-off request; its reply goes back to its server.
    pub(super) async fn answer(&mut self, h: Handoff) {
        let reply = match h.verb {
            EngineVerb::Correct => {
                let reply = match parse_correct(&h.payload) {
                    Ok(req) => self.correct(&req).await,
                    Err(e) => CorrectReply::refused(&self.world.fleet.local.name, e),
                };
                reply.encode().map_err(|e| e.to_string())
            }
            // Read-only: answered from a copy of what they read, in a task
            // of their own, so the loop goes on (a preview of a rule over
            // thousands of objects takes a good part of a second, its
            // reads up to their budget).
            EngineVerb::Preview => {
                let (world, sink) = (self.world.clone(), self.sink.for_preview());
                let placement = self.placement.read.records.clone();
                let ctx = self.io.ctx.clone();
                tokio::spawn(async move {
                    let max = ctx.max_payload();
                    let reply = preview::preview(&world, (&sink, &placement), &ctx, &h.payload)
                        .await
                        .fit(max)
                        .map_err(|e| e.to_string());
                    let _ = h.reply.send(reply);
                });
                return;
            }
            EngineVerb::PreviewSource => {
                let (world, ctx) = (self.world.clone(), self.io.ctx.clone());
                tokio::spawn(async move {
                    let reply = preview::preview_source(&world, &ctx, &h.payload)
                        .await
                        .encode()
                        .map_err(|e| e.to_string());
                    let _ = h.reply.send(reply);
                });
                return;
            }
            EngineVerb::Rollout => {
                let (book, returns) = (&mut self.rollout, &self.returns.book);
                let (world, ctx) = (&self.world, &self.io.ctx);
                rollout::command::rollout_request(world, book, returns, ctx, &h.payload)
                    .await
                    .encode()
                    .map_err(|e| e.to_string())
            }
        };
        // The requester may have given up: nothing to do then.
        let _ = h.reply.send(reply);
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
