//! The rollout command's subscription (`<p>.cmd.<self>.rollout`): requests
//! over the verb's own rate are refused at once, the rest handed to the
//! engine (`command`), which replies through [`respond`]. Apart from the
//! engine, so the engine can start it without importing what it serves.

use std::sync::Arc;

use fleetbus_schemas::rollout::RolloutReply;
use fleetbus_schemas::subject::{CommandKey, ROLLOUT_VERB};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::bus::rate::TokenBucket;
use crate::context::Context;

/// An admitted request: its payload and where to reply.
pub(in crate::sync) struct Request {
    /// The request's bytes.
    pub payload: Vec<u8>,
    /// The requester's inbox.
    pub reply: Option<async_nats::Subject>,
}

/// Subscribes to this cluster's rollout command subject (retrying until it
/// works), refuses what is over the verb's rate at once, and hands the rest
/// to the engine through `tx`, until `cancel`.
pub(in crate::sync) async fn serve(
    ctx: Arc<Context>,
    tx: mpsc::Sender<Request>,
    cancel: CancellationToken,
) {
    use futures::StreamExt;
    let client = ctx.js.client();
    let subject = CommandKey {
        cluster: ctx.cfg.cluster_name.clone(),
        verb: ROLLOUT_VERB.to_owned(),
    }
    .to_subject(ctx.layout.prefix());
    let Some(mut sub) = crate::bus::command_sub::subscribe(&client, &subject, &cancel).await else {
        return;
    };
    let mut rate = TokenBucket::new(
        ROLLOUT_VERB_STATIC,
        ctx.cfg.command_rate,
        std::time::Instant::now(),
    );
    loop {
        let msg = tokio::select! {
            _ = cancel.cancelled() => return,
            m = sub.next() => match m { Some(m) => m, None => return },
        };
        if let Err(refused) = crate::bus::command_sub::admit(&mut rate, &ctx.metrics) {
            let reply = RolloutReply {
                retry_after_ms: Some(refused.retry_after_ms()),
                ..RolloutReply::refused(&ctx.cfg.cluster_name, refused.to_string())
            };
            respond(&ctx, msg.reply, &reply).await;
            continue;
        }
        // Pause, abort and rollback change what the fleet runs: in the
        // secure mode only the fleet root's signed word is taken (§6.7).
        let trust = ctx.cfg.trust.as_deref();
        if let Err(why) = crate::bus::command_sub::authorize(
            trust,
            &ctx.metrics,
            ROLLOUT_VERB_STATIC,
            &subject,
            &msg.payload,
        ) {
            let reply = RolloutReply::refused(&ctx.cfg.cluster_name, why);
            respond(&ctx, msg.reply, &reply).await;
            continue;
        }
        let req = Request {
            payload: msg.payload.to_vec(),
            reply: msg.reply,
        };
        if tx.send(req).await.is_err() {
            return;
        }
    }
}

/// The verb as the rate bucket and its metric name it.
const ROLLOUT_VERB_STATIC: &str = "rollout";

/// Sends `reply` to `to`, if the requester asked for one.
pub(in crate::sync) async fn respond(
    ctx: &Context,
    to: Option<async_nats::Subject>,
    reply: &RolloutReply,
) {
    let Some(to) = to else { return };
    match reply.encode() {
        Ok(bytes) => {
            let bytes = crate::bus::command_sub::signed_reply(ctx.cfg.trust.as_deref(), bytes);
            if let Err(e) = ctx.js.client().publish(to, bytes.into()).await {
                tracing::warn!(error = %e, "could not reply to a rollout command");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not encode a rollout reply"),
    }
}
