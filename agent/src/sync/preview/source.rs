//! `<p>.cmd.<self>.preview-source` (PROTOCOL §6.8): the origin's side of a
//! preview. Origins publish only what some current rule selects, so the
//! objects a candidate newly selects are on no sink; the CLI asks every
//! origin for them and hands them to each sink's preview.
//!
//! The answer is what this origin's publisher would publish once the
//! candidate is applied, as far as the bus does not hold it already: the
//! same selection (`source::publish::plan_object` under the current rules of
//! the kind with the candidate in its name's place: source match,
//! `sourceClusterSelector`, `clusterFeatureMatch`, this cluster's SyncPolicy
//! exports, withheld kinds of Secret), the same envelopes
//! (`source::publish::envelope`: signed in the secure mode, sealed to the
//! clusters its rules place it on), kept to the objects the candidate
//! selects and the policy lets this cluster export for the candidate's
//! author. Paged by namespace and name, each page within the server's
//! `max_payload`.
//!
//! A kind no rule has this agent watch is read with one LIST (paged by the
//! API server), the only API request this makes; nothing is written.

use fleetbus_schemas::envelope::{check_size, Envelope};
use fleetbus_schemas::preview::{
    PageToken, PreviewProblem, PreviewRequest, PreviewSourceReply, PreviewSourceRequest,
    SourceEnvelope,
};
use fleetbus_schemas::subject::{check_subject_len, ObjectKey};
use fleetbus_schemas::ObjectRef;
use serde_json::Value;

use super::reads::{list_once, READS_BUDGET};
use super::request::{answers_previews, candidate, source_ref};
use crate::context::Context;
use crate::sync::inputs::watches::{decode, Opener};
use crate::sync::model::meta::describe_gvk;
use crate::sync::policy::Refusal;
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching;
use crate::sync::source::publish::{
    self, effective, plan_object, subject_of, Exports, Publish, PublishError,
};
use crate::sync::source::published::HashMemo;
use crate::sync::source::sealing::SealView;
use crate::sync::world::World;
use tokio::time::Instant;

/// The author a new rule's sources are given for when the request names
/// none: no cluster's name (those are DNS labels), so a SyncPolicy that
/// exports to named authors only gives nothing for it.
const UNKNOWN_AUTHOR: &str = "(author not given)";

/// What a reply's frame (schema, cluster, token, a refusal) may take
/// beside its envelopes.
const FRAME: usize = 2048;

/// One object the candidate selects, planned as the publisher plans it.
type Planned = (ObjectKey, Publish);

fn page_of(k: &ObjectKey) -> PageToken {
    PageToken {
        namespace: k.namespace.clone(),
        name: k.name.clone(),
    }
}

/// The reply to a preview-source request's bytes (see the module docs).
pub(in crate::sync) async fn preview_source(
    world: &World,
    ctx: &Context,
    bytes: &[u8],
) -> PreviewSourceReply {
    let local = &world.fleet.local.name;
    let req = match PreviewSourceRequest::decode(bytes) {
        Ok(req) => req,
        Err(e) => {
            let why = format!("cannot read the request: {}", crate::report(&e));
            return PreviewSourceReply::refused(local, why);
        }
    };
    // The token's length only: it is not validated yet.
    let after = req.after.as_ref().map(String::len);
    tracing::info!(after_bytes = ?after, "preview-source requested");
    let origin = Origin { world, ctx };
    match origin.source_page(&req).await {
        Ok(reply) => reply,
        Err(e) => PreviewSourceReply::refused(local, e),
    }
}

/// What a preview-source request reads: the World and the context (the
/// bus layout, sealing keys, the API client for a kind not watched here).
/// It changes neither.
struct Origin<'a> {
    world: &'a World,
    ctx: &'a Context,
}

impl Origin<'_> {
    async fn source_page(&self, req: &PreviewSourceRequest) -> Result<PreviewSourceReply, String> {
        let (name, after) = req.validate().map_err(|e| e.to_string())?;
        answers_previews(self.world)?;
        let as_preview = PreviewRequest {
            rule: Some(req.rule.clone()),
            author: req.author.clone(),
            ..PreviewRequest::default()
        };
        let mut rule = candidate(self.world, &as_preview, &name)?;
        // A new rule whose author the request does not say: this cluster's
        // SyncPolicy decides as for another cluster's rule. Taken as this
        // cluster's own (the sinks' default), every origin would give what
        // its policy exports to nobody else: more than applying the rule on
        // any one cluster publishes, and objects its policy keeps in.
        if req.author.is_none() && self.world.rules.get(&name).is_none_or(|r| r.builtin) {
            rule.author = Some(UNKNOWN_AUTHOR.to_owned());
        }
        let mut reply = PreviewSourceReply {
            cluster: self.world.fleet.local.name.clone(),
            ..PreviewSourceReply::default()
        };
        let planned = self.planned_for(&rule, after.as_ref()).await?;
        let budget = self.ctx.max_payload().saturating_sub(FRAME);
        fill_page(&mut reply, planned, budget, |k, p| self.wire_bytes(k, p));
        Ok(reply)
    }

    /// What the publisher would publish for the objects `rule` selects here
    /// (after `after`), by namespace and name, where the bus does not hold
    /// it as it is.
    async fn planned_for(
        &self,
        rule: &CompiledRule,
        after: Option<&PageToken>,
    ) -> Result<Vec<Planned>, String> {
        let local = &self.world.fleet.local;
        // The kind's other rules count: they decide with it what is sealed to
        // whom and whether status goes along.
        let mut rules: Vec<&CompiledRule> = self
            .world
            .rules
            .values()
            .filter(|r| r.source == rule.source && r.name != rule.name)
            .collect();
        rules.push(rule);
        let rules = effective(local, &rules);
        if !rules.iter().any(|r| r.name == rule.name) {
            // This cluster is no source of it (sourceClusterSelector,
            // clusterFeatureMatch): nothing to publish.
            return Ok(Vec::new());
        }
        let seal = self.ctx.sealing.as_ref().map(|keys| SealView {
            local: &local.name,
            own: &keys.public,
            peers: &self.world.fleet.peers,
        });
        let exports = Exports {
            policy: &self.world.policy,
            local: &local.name,
            seal: seal.as_ref(),
        };
        let author = rule.author(&local.name);
        let selects = |obj: &Value| -> Result<(), Option<Refusal>> {
            matching::matching_rules(&rule.spec, obj).ok_or(None)?;
            // What the policy would not export for this rule is not given,
            // even where another rule publishes it.
            let what = subject_of(obj);
            self.world
                .policy
                .export(&local.name, author, &what)
                .map_err(Some)
        };
        let followed = self.world.kinds.get(&rule.source).filter(|k| k.ready());
        let listed;
        let (objects, snapshots): (Box<dyn Iterator<Item = Value> + '_>, _) = match followed {
            Some(kind) => (
                Box::new(kind.objects.values()),
                kind.source.then_some(&kind.snapshots),
            ),
            None => {
                listed = list_once(self.ctx, &rule.source, Instant::now() + READS_BUDGET)
                    .await?
                    .objects;
                (Box::new(listed.into_iter()), None)
            }
        };
        let mut memo = HashMemo::default();
        let mut out = Vec::new();
        for obj in objects {
            if selects(&obj).is_err() {
                continue;
            }
            let Some(key) = ObjectKey::from_object(&local.name, &obj) else {
                continue;
            };
            if after.is_some_and(|a| page_of(&key) <= *a) {
                continue;
            }
            let current = snapshots
                .and_then(|s| s.meta(&key))
                .filter(|e| !e.tombstone);
            let mut one = Vec::new();
            plan_object(
                &exports,
                &rules,
                &key,
                Some(&obj),
                current,
                &mut memo,
                &mut one,
            );
            out.extend(
                one.into_iter()
                    .filter(|(_, p)| matches!(p, Publish::Snapshot(_) | Publish::Sealed(..))),
            );
        }
        out.sort_by_key(|(k, _)| page_of(k));
        Ok(out)
    }

    /// The envelope of `publish` at `key` as the publisher would send it,
    /// or why it would not be sent.
    fn wire_bytes(&self, key: &ObjectKey, publish: Publish) -> Result<SourceEnvelope, String> {
        let subject = key.to_subject(self.ctx.layout.prefix());
        if check_subject_len(&subject).is_err() {
            return Err("the object's subject is longer than NATS allows".to_owned());
        }
        let (env, wire): (Envelope, Option<Envelope>) =
            publish::envelope(self.world, self.ctx, key, publish).map_err(|e| match e {
                PublishError::Object(e) | PublishError::Bus(e) => e,
            })?;
        let bytes = wire
            .as_ref()
            .unwrap_or(&env)
            .encode()
            .map_err(|e| e.to_string())?;
        check_size(bytes.len(), self.ctx.max_payload()).map_err(|e| e.to_string())?;
        Ok(SourceEnvelope::new(subject, &bytes))
    }
}

/// The envelopes of a preview request's `sources` that hold, by key:
/// each checked as one from the bus is (`inputs::watches::decode`: the
/// subject's key against the envelope, in the secure mode the signature
/// of the cluster the subject names, opened if sealed to us), and of the
/// candidate's kind, not a tombstone. Those refused are named in
/// `reply.errors` and counted as the bus path counts them
/// (`fleetbus_sync_rejected_total{reason}`, and in the secure mode
/// `fleetbus_rejected_messages_total`); one sealed to others is not ours
/// to read, as on the bus, and is left out without an error.
pub(super) fn given_sources(
    ctx: &Context,
    rule: &CompiledRule,
    sources: &[SourceEnvelope],
    reply: &mut fleetbus_schemas::preview::PreviewReply,
) -> std::collections::BTreeMap<ObjectKey, Envelope> {
    let opener = Opener::of(ctx);
    let prefix = ctx.layout.prefix();
    let mut out = std::collections::BTreeMap::new();
    for source in sources {
        let object = ObjectKey::parse_subject(prefix, &source.subject)
            .map(|k| source_ref(&k))
            .unwrap_or_else(|_| {
                let shown: String = source.subject.chars().take(200).collect();
                ObjectRef::new("", "(unreadable subject)", None, &shown)
            });
        let checked = source
            .bytes()
            .ok_or("malformed")
            .and_then(|bytes| decode(&opener, Some(ctx), prefix, &source.subject, &bytes));
        let why = match checked {
            Ok((_, env)) if env.tombstone => "a tombstone is no source object".to_owned(),
            Ok((key, _))
                if key.group != rule.source.group
                    || key.version != rule.source.version
                    || key.kind != rule.source.kind =>
            {
                format!("not of the rule's kind {}", describe_gvk(&rule.source))
            }
            Ok((key, env)) => {
                out.insert(key, env);
                continue;
            }
            Err(reason) => {
                ctx.metrics.sync_rejected(reason);
                if reason == "not_a_recipient" {
                    continue;
                }
                reason.to_owned()
            }
        };
        reply.errors.push(PreviewProblem {
            object,
            message: format!("refused the source envelope given for it: {why}"),
        });
    }
    out
}

/// Fills `reply` with the envelopes of `planned` (in order; `wire` makes
/// each, or says why it cannot be given) until the next would take it past
/// `budget` bytes; `next` is then the last object dealt with. An envelope
/// larger than a whole page, or one `wire` refuses, is `skipped`.
fn fill_page<T>(
    reply: &mut PreviewSourceReply,
    planned: Vec<(ObjectKey, T)>,
    budget: usize,
    mut wire: impl FnMut(&ObjectKey, T) -> Result<SourceEnvelope, String>,
) {
    let mut used = 0;
    // The last object dealt with: the next page starts after it.
    let mut last: Option<PageToken> = None;
    for (key, publish) in planned {
        let skipped = match wire(&key, publish) {
            Err(why) => why,
            Ok(e) if e.encoded_len() > budget => {
                "its envelope does not fit in a reply on this bus".to_owned()
            }
            Ok(e) if used + e.encoded_len() > budget => {
                reply.next = last.map(|t| t.encode());
                return;
            }
            Ok(e) => {
                used += e.encoded_len();
                reply.envelopes.push(e);
                last = Some(page_of(&key));
                continue;
            }
        };
        // A skipped object costs its entry in the reply, as encoded: a page
        // of them is bounded like a page of envelopes.
        let problem = PreviewProblem {
            object: source_ref(&key),
            message: skipped,
        };
        let cost = serde_json::to_vec(&problem).map_or(usize::MAX, |b| b.len() + 1);
        if used.saturating_add(cost) > budget && last.is_some() {
            reply.next = last.map(|t| t.encode());
            return;
        }
        used = used.saturating_add(cost);
        reply.skipped.push(problem);
        last = Some(page_of(&key));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::from_api_version("c1", "v1", "Secret", Some("a"), name)
    }

    /// `n` objects `s00`, `s01`, …, each planned as an envelope of `size` bytes.
    fn planned(n: usize, size: usize) -> Vec<(ObjectKey, usize)> {
        (0..n).map(|i| (key(&format!("s{i:02}")), size)).collect()
    }

    fn wire(k: &ObjectKey, size: usize) -> Result<SourceEnvelope, String> {
        if size == 0 {
            return Err("cannot be published".to_owned());
        }
        Ok(SourceEnvelope::new(k.name.clone(), &vec![0; size]))
    }

    /// Every page of `all` from the start, as a client following `next` gets them.
    fn pages(all: &[(ObjectKey, usize)], budget: usize) -> Vec<PreviewSourceReply> {
        let mut out = Vec::new();
        let mut after: Option<PageToken> = None;
        loop {
            let rest = all
                .iter()
                .filter(|(k, _)| after.as_ref().is_none_or(|a| page_of(k) > *a))
                .cloned()
                .collect();
            let mut reply = PreviewSourceReply::default();
            fill_page(&mut reply, rest, budget, wire);
            let next = reply.next.clone();
            out.push(reply);
            match next {
                Some(t) => after = Some(PageToken::parse(&t).unwrap_or_else(|e| panic!("{e}"))),
                None => return out,
            }
        }
    }

    #[test]
    fn pages_hold_what_fits_and_following_next_gives_every_object_once() {
        // 300 bytes base64 to 400, plus a name and the frame: 3 per 1,300 bytes.
        let all = planned(10, 300);
        let got = pages(&all, 1300);
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(got.iter().all(|p| p.envelopes.len() <= 3));
        let names: Vec<String> = got
            .iter()
            .flat_map(|p| p.envelopes.iter().map(|e| e.subject.clone()))
            .collect();
        let want: Vec<String> = all.iter().map(|(k, _)| k.name.clone()).collect();
        assert_eq!(names, want);
        assert_eq!(got.last().and_then(|p| p.next.clone()), None);
        // All in one when they fit.
        assert_eq!(pages(&all, 1 << 20).len(), 1);
    }

    #[test]
    fn what_cannot_be_given_is_skipped_and_named_not_lost_nor_looped_on() {
        let mut all = planned(4, 300);
        all[1].1 = 0; // refused by `wire`
        all[2].1 = 5000; // larger than a page
        let got = pages(&all, 1300);
        let skipped: Vec<(&str, &str)> = got
            .iter()
            .flat_map(|p| p.skipped.iter())
            .map(|p| (p.object.name.as_str(), p.message.as_str()))
            .collect();
        assert_eq!(
            skipped,
            [
                ("s01", "cannot be published"),
                ("s02", "its envelope does not fit in a reply on this bus")
            ]
        );
        let given: usize = got.iter().map(|p| p.envelopes.len()).sum();
        assert_eq!(given, 2);
        // Only skipped objects: one page, nothing to follow.
        let mut reply = PreviewSourceReply::default();
        fill_page(&mut reply, vec![(key("big"), 5000)], 1300, wire);
        assert_eq!((reply.skipped.len(), reply.next), (1, None));
    }
}
