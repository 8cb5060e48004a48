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

use super::state::DriftState;
use crate::sync::model::Target;

fn object(t: &Target) -> ObjectRef {
    ObjectRef::new(&t.api_version, &t.kind, t.namespace.as_deref(), &t.name)
}

/// Marks the drifted copies `req` selects to be corrected by the next pass,
/// whatever their drift mode; what an earlier correction left is dropped.
pub(in crate::sync) fn select(drift: &mut DriftState, req: &CorrectRequest) {
    let chosen: Vec<Target> = drift
        .open
        .iter()
        .filter(|(t, d)| req.matches(&d.event.rule, &object(t)))
        .map(|(t, _)| t.clone())
        .collect();
    tracing::info!(count = chosen.len(), ?req, "correction requested");
    drift.forced = chosen.into_iter().collect();
    drift.forced_results.clear();
}

/// Whether the copy at `target`, made by `rule`, is one `req` asks for.
pub(in crate::sync) fn asks_for(req: &CorrectRequest, rule: &str, target: &Target) -> bool {
    req.matches(rule, &object(target))
}

/// The reply once the pass ran: what it corrected, what failed and why.
/// Takes the pass's results and what it left marked, so the next pass
/// starts with nothing forced.
pub(in crate::sync) fn reply(local: &str, drift: &mut DriftState) -> CorrectReply {
    // A copy the pass did not reach (its rule is not ready, say) failed.
    let leftover: Vec<Target> = drift.forced.drain().collect();
    let mut reply = CorrectReply {
        cluster: local.to_owned(),
        ..CorrectReply::default()
    };
    for (t, r) in drift.forced_results.drain(..) {
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
