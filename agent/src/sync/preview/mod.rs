//! `<p>.cmd.<self>.preview`: what a candidate ResourceSyncRule (or the current
//! rule with a changed source object) would create, update and delete on this
//! cluster (`fleetbus rules preview`, PROTOCOL §6.8). Read-only over the
//! engine: the candidate is compiled as every rule is (`rules::compile`), its
//! copies computed by the sink's own `compute_candidate`, ordered against the
//! other rules' by `conflicts::order`, decided by `wave::decide`, and what it
//! no longer wants judged by `collect`'s verdict, so the preview cannot drift
//! from what a pass does. The only requests to the API server are dry runs
//! (`dryRun=All`): the diff of an update is the live copy against what the
//! server makes of the write.
//!
//! Served by the agent's request server with its own rate bucket, from a
//! snapshot the engine's loop hands out (`engine::commands::SyncView`), in
//! a task of its own: the loop is not held while a preview computes. A
//! request refused (malformed, invalid rule, rate) gets a reply with
//! `error`, and nothing else happens.
//!
//! - [`sink`]: the computation.
//! - [`diff`]: per-object changes, redacted as drift events are.
//! - [`reads`]: what a preview reads itself for a kind this sink does not
//!   follow yet: its envelopes on the bus, the local objects of a target
//!   kind not watched here.
//! - [`source`]: `preview-source`, the origin's side: the envelopes it would
//!   publish for a candidate that are not on the bus yet, which the CLI
//!   hands to each sink's preview (`sources`).
//! - [`request`]: what both share: whether this agent answers yet, the
//!   candidate compiled from the request.

mod diff;
mod reads;
mod request;
mod sink;
mod source;
pub(in crate::sync) mod worker;

pub(in crate::sync) use source::preview_source;

use std::collections::BTreeMap;

use fleetbus_schemas::placement::{PlacementKey, PlacementRecord};
use fleetbus_schemas::preview::{PreviewReply, PreviewRequest};

use crate::context::Context;
use crate::sync::sink::state::SinkState;
use crate::sync::world::World;

/// The reply to a preview request's bytes (see the module docs).
pub(in crate::sync) async fn preview(
    world: &World,
    (sink, placement): (&SinkState, &BTreeMap<PlacementKey, PlacementRecord>),
    ctx: &Context,
    bytes: &[u8],
) -> PreviewReply {
    let local = &world.fleet.local.name;
    let req = match PreviewRequest::decode(bytes) {
        Ok(req) => req,
        Err(e) => {
            return PreviewReply::refused(
                local,
                format!("cannot read the request: {}", crate::report(&e)),
            )
        }
    };
    tracing::info!(rule = ?req.rule_name, candidate = req.rule.is_some(), source = req.source.is_some(), "preview requested");
    let preview = sink::Preview {
        world,
        sink,
        placement,
        ctx,
        pace: sink::Pace::new(),
    };
    match preview.preview_rule(&req).await {
        Ok(reply) => reply,
        Err(e) => PreviewReply::refused(local, e),
    }
}
