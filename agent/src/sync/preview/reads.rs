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
//! - A target kind not watched here: one LIST (`Engine::list_once`, which
//!   `preview-source` uses too); a kind this cluster does not serve is an
//!   error on each copy of it, named as a pass names it.

use std::collections::{BTreeMap, HashMap};

use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::{ObjectFilter, ObjectKey};
use futures::StreamExt;
use kube::api::ApiResource;
use kube::core::GroupVersionKind;
use serde_json::Value;

use crate::sync::engine::Engine;
use crate::sync::inputs::watches::{decode, Opener};
use crate::sync::model::meta::describe_gvk;
use crate::sync::model::{LocalKey, Target};

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
/// absent here is one the sink watches (read from `Engine::kinds`).
#[derive(Default)]
pub(super) struct Reads(HashMap<GroupVersionKind, Result<Local, String>>);

impl Reads {
    pub fn get(&self, gvk: &GroupVersionKind) -> Option<&Result<Local, String>> {
        self.0.get(gvk)
    }
}

impl Engine {
    /// Lists once each kind of `targets` this sink has not listed.
    pub(super) async fn read_targets<'a>(
        &self,
        targets: impl Iterator<Item = &'a Target>,
        deadline: tokio::time::Instant,
    ) -> Reads {
        let mut reads = Reads::default();
        for gvk in targets.map(Target::gvk) {
            let watched = self.world.kinds.get(&gvk).is_some_and(|k| k.listed);
            if watched || reads.0.contains_key(&gvk) {
                continue;
            }
            let listed = self.list_once(&gvk, deadline).await.map(Local::of);
            reads.0.insert(gvk, listed);
        }
        reads
    }

    /// The last envelope of every object of `gvk` on the bus that decodes
    /// here, by `deadline` (see the module docs).
    pub(super) async fn read_bus(
        &self,
        gvk: &GroupVersionKind,
        deadline: tokio::time::Instant,
    ) -> Result<BTreeMap<ObjectKey, Envelope>, String> {
        let what = describe_gvk(gvk);
        tokio::time::timeout_at(deadline, self.last_envelopes(gvk))
            .await
            .map_err(|_| {
                format!(
                    "reading the envelopes of {what} on the bus did not finish within the \
                     preview's {:?} for reads",
                    super::READS_BUDGET
                )
            })?
            .map_err(|e| format!("cannot read the envelopes of {what} on the bus: {e}"))
    }

    async fn last_envelopes(
        &self,
        gvk: &GroupVersionKind,
    ) -> Result<BTreeMap<ObjectKey, Envelope>, String> {
        let prefix = self.io.ctx.layout.prefix();
        let stream = self
            .io
            .ctx
            .js
            .get_stream(self.io.ctx.layout.objects_stream().name)
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
        let opener = Opener::of(&self.io.ctx);
        let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
        while let Some(msg) = messages.next().await {
            let msg = msg.map_err(|e| e.to_string())?;
            let at_end = msg.info().map(|i| i.pending == 0).unwrap_or(false);
            let ctx = Some(self.io.ctx.as_ref());
            match decode(&opener, ctx, prefix, &msg.subject, &msg.payload) {
                Ok((key, env)) => {
                    out.insert(key, env);
                }
                Err(reason) => {
                    // As the kind's consumer does: counted, left out.
                    self.io.ctx.metrics.sync_rejected(reason);
                    tracing::warn!(subject = %msg.subject, reason, "preview: skipped a message");
                }
            }
            if at_end {
                return Ok(out);
            }
        }
        Err("the consumer ended".to_owned())
    }
}
