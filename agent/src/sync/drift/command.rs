//! `<p>.cmd.<self>.correct`: an operator's manual correction
//! (`fleetbus drift correct`). The request (`fleetbus_schemas::command`)
//! selects drifted copies (by rule, kind, namespace, name; absent = any); the
//! engine corrects them in one pass whatever the drift mode or pause
//! annotations, and replies with what it did. A copy the agent stopped
//! correcting because another writer fights over it (`fight`) is corrected
//! too, and counting starts afresh. A request that cannot be read gets a
//! reply with `error`, and nothing else happens; so does one over the verb's
//! rate limit (`crate::bus::rate`), which costs no pass.

use fleetbus_schemas::command::{CorrectFailure, CorrectReply, CorrectRequest};
use fleetbus_schemas::ObjectRef;

use crate::sync::engine::Engine;
use crate::sync::model::Target;

fn object(t: &Target) -> ObjectRef {
    ObjectRef::new(&t.api_version, &t.kind, t.namespace.as_deref(), &t.name)
}

impl Engine {
    /// Corrects the drifted copies `req` selects, now; returns the reply.
    pub async fn correct(&mut self, req: &CorrectRequest) -> CorrectReply {
        let chosen: Vec<Target> = self
            .drift
            .open
            .iter()
            .filter(|(t, d)| req.matches(&d.event.rule, &object(t)))
            .map(|(t, _)| t.clone())
            .collect();
        tracing::info!(count = chosen.len(), ?req, "correction requested");
        self.drift.forced = chosen.into_iter().collect();
        self.drift.forced_results.clear();
        self.pass().await;
        // A copy the pass did not reach (its rule is not ready, say) failed.
        let leftover: Vec<Target> = self.drift.forced.drain().collect();
        let mut reply = CorrectReply {
            cluster: self.world.fleet.local.name.clone(),
            ..CorrectReply::default()
        };
        for (t, r) in self.drift.forced_results.drain(..) {
            match r {
                Ok(()) => reply.corrected.push(object(&t)),
                Err(error) => reply.failed.push(CorrectFailure {
                    object: object(&t),
                    error,
                }),
            }
        }
        for t in leftover {
            reply.failed.push(CorrectFailure {
                object: object(&t),
                error: "not corrected in this pass (its rule or kind is not ready)".to_owned(),
            });
        }
        reply
    }
}
