//! The requests the engine answers in its own loop: `correct`, `preview`
//! and `preview-source`.

use std::sync::Arc;

use fleetbus_schemas::command::CorrectRequest;

use crate::context::Context;

use super::Engine;

/// The commands the engine answers in its own loop, `correct`, `preview`
/// and `preview-source`: their subjects, each verb's own rate bucket (a flood of
/// previews, each of which may cost dry runs, starves no correction), and
/// how to reply.
pub(super) struct Commands {
    ctx: Arc<Context>,
    pub(super) client: async_nats::Client,
    pub(super) correct_subject: String,
    pub(super) preview_subject: String,
    pub(super) preview_source_subject: String,
    correct_rate: crate::bus::rate::TokenBucket,
    preview_rate: crate::bus::rate::TokenBucket,
    /// Its own bucket: one preview asks each origin for a page or more.
    preview_source_rate: crate::bus::rate::TokenBucket,
}

impl Commands {
    pub(super) fn new(ctx: &Arc<Context>) -> Commands {
        let name = &ctx.cfg.cluster_name;
        let prefix = ctx.layout.prefix();
        let (now, rate) = (std::time::Instant::now(), ctx.cfg.command_rate);
        Commands {
            ctx: ctx.clone(),
            client: ctx.js.client(),
            correct_subject: fleetbus_schemas::subject::CommandKey::correct(name)
                .to_subject(prefix),
            preview_subject: fleetbus_schemas::subject::CommandKey::preview(name)
                .to_subject(prefix),
            preview_source_subject: fleetbus_schemas::subject::CommandKey::preview_source(name)
                .to_subject(prefix),
            correct_rate: crate::bus::rate::TokenBucket::new("correct", rate, now),
            preview_rate: crate::bus::rate::TokenBucket::new("preview", rate, now),
            preview_source_rate: crate::bus::rate::TokenBucket::new("preview-source", rate, now),
        }
    }

    /// Checks `msg`'s signature in the secure mode (PROTOCOL §6.7).
    pub(super) fn authorize(
        &self,
        verb: &'static str,
        subject: &str,
        msg: &async_nats::Message,
    ) -> Result<(), String> {
        crate::bus::command_sub::authorize(
            self.ctx.cfg.trust.as_deref(),
            &self.ctx.metrics,
            verb,
            subject,
            &msg.payload,
        )
    }

    pub(super) async fn correct(&mut self, engine: &mut Engine, msg: async_nats::Message) {
        let admitted = crate::bus::command_sub::admit(&mut self.correct_rate, &self.ctx.metrics);
        let reply = match admitted.map(|()| {
            self.authorize("correct", &self.correct_subject, &msg)
                .and_then(|()| parse_correct(&msg.payload))
        }) {
            Err(refused) => engine.refuse_for_rate(&refused),
            Ok(Ok(req)) => engine.correct(&req).await,
            Ok(Err(e)) => engine.refuse(&e),
        };
        let trust = self.ctx.cfg.trust.as_deref();
        respond(&self.client, trust, msg.reply, reply.encode(), "correct").await;
    }

    pub(super) async fn preview(&mut self, engine: &mut Engine, msg: async_nats::Message) {
        let admitted = crate::bus::command_sub::admit(&mut self.preview_rate, &self.ctx.metrics);
        // A preview writes nothing, but it costs dry runs and shows what
        // the cluster holds: the fleet root's word is asked for as for the
        // verbs that change state.
        let mut reply =
            match admitted.map(|()| self.authorize("preview", &self.preview_subject, &msg)) {
                Ok(Ok(())) => engine.preview(&msg.payload).await,
                Ok(Err(refused)) => engine.refuse_preview(refused),
                Err(refused) => engine.refuse_preview_for_rate(&refused),
            };
        let trust = self.ctx.cfg.trust.as_deref();
        let bytes = reply.fit(engine.io.ctx.max_payload());
        respond(&self.client, trust, msg.reply, bytes, "preview").await;
    }

    /// `preview-source` (`preview::source`): authorized as `preview` is (it
    /// shows the objects a rule would publish), answered in pages that fit.
    pub(super) async fn preview_source(&mut self, engine: &Engine, msg: async_nats::Message) {
        let bucket = &mut self.preview_source_rate;
        let admitted = crate::bus::command_sub::admit(bucket, &self.ctx.metrics);
        let verb = fleetbus_schemas::subject::PREVIEW_SOURCE_VERB;
        let subject = &self.preview_source_subject;
        let reply = match admitted.map(|()| self.authorize(verb, subject, &msg)) {
            Ok(Ok(())) => engine.preview_source(&msg.payload).await,
            Ok(Err(refused)) => engine.refuse_preview_source(refused, None),
            Err(r) => engine.refuse_preview_source(r.to_string(), Some(r.retry_after_ms())),
        };
        let trust = self.ctx.cfg.trust.as_deref();
        respond(&self.client, trust, msg.reply, reply.encode(), verb).await;
    }
}

/// Sends a command's encoded reply to `to` (logged when it cannot be).
pub(super) async fn respond<E: std::fmt::Display>(
    client: &async_nats::Client,
    trust: Option<&crate::trust::Identity>,
    to: Option<async_nats::Subject>,
    bytes: Result<Vec<u8>, E>,
    verb: &str,
) {
    let bytes = match bytes {
        Ok(b) => crate::bus::command_sub::signed_reply(trust, b),
        Err(e) => {
            tracing::warn!(error = %e, verb, "could not encode a command reply");
            return;
        }
    };
    if let Some(to) = to {
        if let Err(e) = client.publish(to, bytes.into()).await {
            tracing::warn!(error = %e, verb, "could not reply to a command");
        }
    }
}

pub(super) async fn next_command(
    sub: &mut Option<async_nats::Subscriber>,
) -> Option<async_nats::Message> {
    use futures::StreamExt;
    match sub {
        Some(s) => s.next().await,
        None => std::future::pending().await,
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
    pub(super) fn requests_parse_or_say_why_not() {
        let req =
            parse_correct(br#"{"schema":"fleetbus.io/correct-request/v1","rule":"r","name":null}"#)
                .unwrap();
        assert_eq!(req.rule.as_deref(), Some("r"));
        assert_eq!(req.name, None);
        assert!(parse_correct(b"not json").is_err());
        assert!(parse_correct(br#"{"schema":"fleetbus.io/correct-request/v9"}"#).is_err());
        assert!(parse_correct(br#"{"schema":"fleetbus.io/correct-request/v1","kind":5}"#).is_err());
    }
}
