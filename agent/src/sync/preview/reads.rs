//! What a preview reads itself, for kinds this sink does not follow yet
//! (the first rule for a kind here, PROTOCOL §6.8): the envelopes of the
//! candidate's source kind already on the bus, and the local objects of its
//! target kinds. A pass would have them from its consumer and its watch;
//! the preview reads each once, bounded in time (the engine answers between
//! passes), and writes nothing.
//!
//! - The bus: an ordered consumer of `<p>.obj.*.<g>.<v>.<kind>.>` with the
//!   last message per subject, as `inputs` follows a kind, each message
//!   through the same `decode` (checks, signatures in the secure mode,
//!   opened if sealed to us; what it refuses is counted as there), until
//!   nothing is pending.
//! - A target kind not watched here: one LIST ([`list_once`], which
//!   `preview-source` uses too); a kind this cluster does not serve is an
//!   error on each copy of it, named as a pass names it.

use std::collections::{BTreeMap, HashMap};

use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::{ObjectFilter, ObjectKey};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;
use serde_json::Value;
use tokio::time::Instant;

use crate::context::Context;
use crate::sync::inputs::watches::{decode, Opener};
use crate::sync::model::meta::describe_gvk;
use crate::sync::model::{LocalKey, Target};
use crate::sync::world::World;

/// What every read of one preview (or preview-source page) together may
/// take: discovery, the bus read and the LISTs of kinds this agent does not
/// watch. The engine answers between passes, so this is also what one
/// preview may hold a cluster's sync for; it stays under the CLI's default
/// `--timeout` of 10 s.
pub(super) const READS_BUDGET: std::time::Duration = std::time::Duration::from_secs(8);

/// Every object of a kind, as one LIST gave it.
pub(super) struct Listed {
    pub ar: ApiResource,
    pub namespaced: bool,
    pub objects: Vec<Value>,
}

/// A target kind the preview listed itself, by local key.
pub(super) struct Local {
    pub ar: ApiResource,
    pub namespaced: bool,
    objects: BTreeMap<LocalKey, Value>,
}

impl Local {
    fn of(listed: Listed) -> Local {
        let objects = listed
            .objects
            .into_iter()
            .filter_map(|o| Some((Target::of(&o)?.local_key(), o)))
            .collect();
        Local {
            ar: listed.ar,
            namespaced: listed.namespaced,
            objects,
        }
    }

    /// The live object at `target`.
    pub fn live(&self, target: &Target) -> Option<Value> {
        self.objects.get(&target.local_key()).cloned()
    }
}

/// The target kinds a preview read itself: each listed, or why it could
/// not be (not served here, the list failed or took too long). A kind
/// absent here is one the sink watches (read from the World's `kinds`).
#[derive(Default)]
pub(super) struct Reads(HashMap<GroupVersionKind, Result<Local, String>>);

impl Reads {
    pub fn get(&self, gvk: &GroupVersionKind) -> Option<&Result<Local, String>> {
        self.0.get(gvk)
    }
}

/// Lists once each kind of `targets` this sink has not listed.
pub(super) async fn read_targets<'a>(
    world: &World,
    ctx: &Context,
    targets: impl Iterator<Item = &'a Target>,
    deadline: Instant,
) -> Reads {
    let mut reads = Reads::default();
    for gvk in targets.map(Target::gvk) {
        let watched = world.kinds.get(&gvk).is_some_and(|k| k.listed);
        if watched || reads.0.contains_key(&gvk) {
            continue;
        }
        let listed = list_once(ctx, &gvk, deadline).await.map(Local::of);
        reads.0.insert(gvk, listed);
    }
    reads
}

/// The last envelope of every object of `gvk` on the bus that decodes
/// here, by `deadline` (see the module docs).
pub(super) async fn read_bus(
    ctx: &Context,
    gvk: &GroupVersionKind,
    deadline: Instant,
) -> Result<BTreeMap<ObjectKey, Envelope>, String> {
    let what = describe_gvk(gvk);
    tokio::time::timeout_at(deadline, last_envelopes(ctx, gvk))
        .await
        .map_err(|_| {
            format!(
                "reading the envelopes of {what} on the bus did not finish within the \
                 preview's {:?} for reads",
                READS_BUDGET
            )
        })?
        .map_err(|e| format!("cannot read the envelopes of {what} on the bus: {e}"))
}

async fn last_envelopes(
    ctx: &Context,
    gvk: &GroupVersionKind,
) -> Result<BTreeMap<ObjectKey, Envelope>, String> {
    let prefix = ctx.layout.prefix();
    let stream = ctx
        .js
        .get_stream(ctx.layout.objects_stream().name)
        .await
        .map_err(|e| e.to_string())?;
    let mut consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: ObjectFilter::any()
                .gvk(&gvk.group, &gvk.version, &gvk.kind)
                .to_subject(prefix),
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..OrderedConfig::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let pending = consumer
        .info()
        .await
        .map_err(|e| e.to_string())?
        .num_pending;
    let mut out = BTreeMap::new();
    if pending == 0 {
        return Ok(out);
    }
    let opener = Opener::of(ctx);
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    while let Some(msg) = messages.next().await {
        let msg = msg.map_err(|e| e.to_string())?;
        let at_end = msg.info().map(|i| i.pending == 0).unwrap_or(false);
        match decode(&opener, Some(ctx), prefix, &msg.subject, &msg.payload) {
            Ok((key, env)) => {
                out.insert(key, env);
            }
            Err(reason) => {
                // As the kind's consumer does: counted, left out.
                ctx.metrics.sync_rejected(reason);
                tracing::warn!(subject = %msg.subject, reason, "preview: skipped a message");
            }
        }
        if at_end {
            return Ok(out);
        }
    }
    Err("the consumer ended".to_owned())
}

/// Every object of a kind this agent does not watch: one LIST, paged by
/// the API server, by `deadline` (see [`READS_BUDGET`]); a sink's preview
/// reads a target kind so, `preview-source` a source kind. A kind this
/// cluster does not serve is an error naming it.
pub(super) async fn list_once(
    ctx: &Context,
    gvk: &GroupVersionKind,
    deadline: Instant,
) -> Result<Listed, String> {
    let what = describe_gvk(gvk);
    let listing = async {
        let (ar, namespaced): (ApiResource, bool) =
            crate::sync::inputs::watches::resolve(&ctx.client, gvk)
                .await
                .map_err(|e| e.why)?;
        let api = kube::Api::<DynamicObject>::all_with(ctx.client.clone(), &ar);
        let mut out = Vec::new();
        let mut params = ListParams::default().limit(500);
        loop {
            let page = api
                .list(&params)
                .await
                .map_err(|e| format!("cannot list {what}: {}", crate::report(&e)))?;
            let next = page.metadata.continue_.clone().filter(|c| !c.is_empty());
            for item in page.items {
                let mut obj = serde_json::to_value(item).map_err(|e| e.to_string())?;
                // A list's items carry no apiVersion and kind.
                if let Some(top) = obj.as_object_mut() {
                    top.insert("apiVersion".into(), Value::String(ar.api_version.clone()));
                    top.insert("kind".into(), Value::String(ar.kind.clone()));
                }
                out.push(obj);
            }
            match next {
                Some(token) => params = params.continue_token(&token),
                None => {
                    let objects = out;
                    return Ok(Listed {
                        ar,
                        namespaced,
                        objects,
                    });
                }
            }
        }
    };
    tokio::time::timeout_at(deadline, listing)
        .await
        .map_err(|_| {
            format!("listing {what} did not finish within the preview's {READS_BUDGET:?} for reads")
        })?
}
