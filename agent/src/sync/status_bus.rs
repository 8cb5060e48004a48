//! Each rule's status on this cluster, published on the bus for the
//! operator's views (`fleetbus status`, `rules ls|describe`, the dashboard):
//! one [`RuleStatusRecord`] per rule at `status.<self>.<clusterID>.<rule>` in
//! the `<prefix>-rulestatus` bucket (docs/PROTOCOL.md §5.3).
//!
//! A record is put whenever `status` writes the rule's status to the API
//! server (so it inherits that file's coalescing: at most one write per rule
//! per second while only counts change), once more per rule after the agent
//! starts (the API status may be unchanged, but the bucket may be new or
//! emptied), and its key is deleted when the rule is gone.
//!
//! The engine holds a [`StatusBus`]; `status` calls it. Publishing never holds up sync: the engine only leaves the newest record
//! of each key in a map a worker task drains; a failure is logged, counted
//! (`rule_status_publish_failures`) and retried after a pause unless a newer
//! record for the key arrived meanwhile.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv};
use chrono::{DateTime, Utc};
use fleetbus_schemas::crd::ResourceSyncRuleStatus;
use fleetbus_schemas::rule_status::{
    cut_message, ProblemKind, RuleCellState, RuleProblem, RuleStatusKey, RuleStatusRecord,
    MAX_PROBLEMS,
};
use fleetbus_schemas::well_known::condition;
use futures::StreamExt;
use tokio::sync::Notify;

use super::model::RuleReport;
use crate::context::Context;
use crate::metrics::Metrics;

/// The Conflict condition's type (`status::CONFLICT`, not imported: this file
/// is a leaf the engine holds, and `status` imports the engine; a test there
/// checks the two agree).
const CONFLICT: &str = "Conflict";

/// Pause after a failed put or delete before trying the batch's failures again.
/// A fixed delay is right here: the worker waits for no condition it could
/// observe (NATS recovering), only paces its retries; a newer value for a key
/// replaces the failed one meanwhile, so nothing queues up behind the pause.
const RETRY_AFTER: Duration = Duration::from_secs(2);

/// Per key, the bytes to put, or `None` to delete it.
type Pending = BTreeMap<String, Option<Vec<u8>>>;

/// What the engine keeps of publishing rule status.
#[derive(Default)]
pub struct StatusBus {
    queue: Arc<Queue>,
    /// Rules this process has published a record for (their keys exist, as
    /// far as this agent knows).
    published: BTreeSet<String>,
    /// Per rule, the placement counts of the record last put: they are not
    /// in the rule's status on the API server, so their change alone puts
    /// the record again ([`StatusBus::behind`]).
    placed: BTreeMap<String, Option<(u64, u64)>>,
    worker: Option<tokio::task::AbortHandle>,
}

impl Drop for StatusBus {
    fn drop(&mut self) {
        if let Some(w) = &self.worker {
            w.abort();
        }
    }
}

#[derive(Default)]
struct Queue {
    pending: Mutex<Pending>,
    wake: Notify,
    /// The rules that exist, as of the last status pass: the worker's sweep
    /// of keys left from before this start deletes those of other rules.
    rules: Mutex<BTreeSet<String>>,
}

impl Queue {
    /// Leaves `op` for `key` unless a newer one is there already (`newer`
    /// false: a retry must not overwrite what arrived since).
    fn offer(&self, key: String, op: Option<Vec<u8>>, newer: bool) {
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if newer {
            pending.insert(key, op);
        } else {
            pending.entry(key).or_insert(op);
        }
        drop(pending);
        // A permit is stored when the worker is busy: no wake-up is lost.
        self.wake.notify_one();
    }

    fn take(&self) -> Pending {
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn rules(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        self.rules.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Our own keys in the bucket whose rule is not in `rules`: records of rules
/// deleted while this agent was down (`published` only knows what this
/// process put, so `retain` alone left them for ever). Keys already deleted
/// (a delete marker is a message too) are not returned.
async fn leftovers(
    store: &kv::Store,
    own: &RuleStatusKey,
    rules: impl Fn(&str) -> bool,
) -> Result<Vec<String>, String> {
    let prefix = own.to_key();
    let prefix = prefix.trim_end_matches(|c| c != '.');
    let filter = format!("{}{prefix}*", store.prefix);
    let mut subjects = store
        .stream
        .info_with_subjects(&filter)
        .await
        .map_err(|e| e.to_string())?;
    let mut stale = Vec::new();
    while let Some(entry) = subjects.next().await {
        let (subject, _) = entry.map_err(|e| e.to_string())?;
        let Some(key) = subject.strip_prefix(store.prefix.as_str()) else {
            continue;
        };
        let Ok(parsed) = RuleStatusKey::parse(key) else {
            continue;
        };
        if parsed.cluster != own.cluster || parsed.cluster_id != own.cluster_id {
            continue;
        }
        if rules(&parsed.rule) {
            continue;
        }
        // `get` reads a deleted or purged key as absent.
        if store.get(key).await.map_err(|e| e.to_string())?.is_some() {
            stale.push(key.to_owned());
        }
    }
    Ok(stale)
}

/// The worker: drains the queue into the bucket, opening it by name (the
/// layout task creates it) and again after any failure (it may have been
/// deleted and recreated).
async fn drain(
    queue: Arc<Queue>,
    js: jetstream::Context,
    bucket: String,
    own: RuleStatusKey,
    metrics: Arc<Metrics>,
) {
    let mut store: Option<kv::Store> = None;
    let mut swept = false;
    loop {
        queue.wake.notified().await;
        if !swept {
            // Once per start, at the first offer: the engine offers only
            // after a status pass, once the rules have been read.
            let found = match &store {
                Some(s) => Ok(s.clone()),
                None => js.get_key_value(&bucket).await.map_err(|e| e.to_string()),
            };
            let found = match found {
                Ok(s) => {
                    store = Some(s.clone());
                    leftovers(&s, &own, |rule| queue.rules().contains(rule)).await
                }
                Err(e) => Err(e),
            };
            match found {
                Ok(stale) => {
                    swept = true;
                    for key in stale {
                        tracing::info!(%key, "deleting the status record of a rule deleted meanwhile");
                        queue.offer(key, None, false);
                    }
                }
                // Tried again at the next wake; the batch below fails too
                // and pauses.
                Err(error) => tracing::warn!(%bucket, %error, "could not list rule status keys"),
            }
        }
        let mut failed = false;
        for (key, op) in queue.take() {
            let result = match &store {
                Some(s) => Ok(s.clone()),
                None => js.get_key_value(&bucket).await.map_err(|e| e.to_string()),
            };
            let result = match result {
                Ok(s) => {
                    store = Some(s.clone());
                    match &op {
                        Some(bytes) => s
                            .put(&key, bytes.clone().into())
                            .await
                            .map(drop)
                            .map_err(|e| e.to_string()),
                        None => s.delete(&key).await.map_err(|e| e.to_string()),
                    }
                }
                Err(e) => Err(e),
            };
            if let Err(error) = result {
                let op_name = if op.is_some() { "put" } else { "delete" };
                tracing::warn!(%bucket, %key, op = op_name, %error, "could not publish rule status");
                metrics.rule_status_publish_failure(op_name);
                store = None;
                failed = true;
                queue.offer(key, op, false);
            }
        }
        if failed {
            tokio::time::sleep(RETRY_AFTER).await;
        }
    }
}

/// The one word for a rule's status as this agent wrote it: a pure function
/// of the status, so the bus says what `kubectl get resourcesyncrules` says.
pub fn cell_state(status: &ResourceSyncRuleStatus) -> RuleCellState {
    let find = |t: &str| status.conditions.iter().find(|c| c.type_ == t);
    let conflict = find(CONFLICT).is_some_and(|c| c.status == "True");
    match find(condition::READY).map(|c| (c.status.as_str(), c.reason.as_str())) {
        Some((_, "Invalid")) => RuleCellState::Invalid,
        Some((_, "Suspended")) => RuleCellState::Suspended,
        Some((_, "NotSelected")) => RuleCellState::NotSelected,
        Some((_, "SyncErrors")) => RuleCellState::Error,
        Some(("True", _)) if conflict => RuleCellState::Conflict,
        Some(("True", _)) => RuleCellState::Synced,
        // No Ready condition yet, or not ready for another reason (Waiting).
        _ => RuleCellState::Waiting,
    }
}

/// The objects with a problem, errors and conflicts first, at most
/// [`MAX_PROBLEMS`]; and how many there are in all.
fn problems(report: &RuleReport) -> (Vec<RuleProblem>, u64) {
    let withheld: Vec<(String, String)> = report
        .withheld
        .iter()
        .map(|(k, w)| (k.clone(), w.why().to_owned()))
        .collect();
    let refused: Vec<(String, String)> = report
        .refused
        .iter()
        .map(|(k, r)| (k.clone(), r.to_string()))
        .collect();
    let groups = [
        (ProblemKind::Error, report.errors.iter().collect::<Vec<_>>()),
        (ProblemKind::Conflict, report.conflicts.iter().collect()),
        (ProblemKind::Kept, report.kept.iter().collect()),
        (
            ProblemKind::Skipped,
            withheld.iter().map(|(k, v)| (k, v)).collect(),
        ),
        (
            ProblemKind::Refused,
            refused.iter().map(|(k, v)| (k, v)).collect(),
        ),
    ];
    let total = groups.iter().map(|(_, g)| g.len() as u64).sum();
    let list = groups
        .iter()
        .flat_map(|(kind, g)| g.iter().map(move |(o, m)| (*kind, *o, *m)))
        .take(MAX_PROBLEMS)
        .map(|(kind, object, message)| RuleProblem {
            kind,
            object: cut_message(object),
            message: cut_message(message),
        })
        .collect();
    (list, total)
}

fn chrono_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond().try_into().ok()?)
}

/// The record for `rule` as `cluster` (`id`) wrote its `status` at `now`.
pub fn record(
    key: RuleStatusKey,
    status: &ResourceSyncRuleStatus,
    report: &RuleReport,
    now: DateTime<Utc>,
) -> RuleStatusRecord {
    let ready = status
        .conditions
        .iter()
        .find(|c| c.type_ == condition::READY);
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let copies = |n: Option<i64>| n.map(count);
    let (problems, problems_total) = problems(report);
    RuleStatusRecord {
        cluster: key.cluster,
        cluster_id: key.cluster_id,
        rule: key.rule,
        observed_generation: status.observed_generation,
        state: cell_state(status),
        reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
        message: cut_message(ready.map_or("", |c| c.message.as_str())),
        sink: report.selected,
        source: report.source,
        objects_synced: count(status.objects_synced),
        conflicts: count(status.conflicts),
        errors: count(status.errors),
        skipped: count(status.skipped),
        refused: report.refused.len() as u64,
        ready_copies: copies(status.ready_copies),
        reported_copies: copies(status.reported_copies),
        placed_here: report.placed_here.map(|(here, _)| here),
        placed_elsewhere: report.placed_here.map(|(_, elsewhere)| elsewhere),
        problems,
        problems_total,
        last_sync_time: status.last_sync_time.as_ref().and_then(chrono_time),
        updated_at: now,
    }
}

impl StatusBus {
    fn key(ctx: &Context, rule: &str) -> RuleStatusKey {
        RuleStatusKey {
            cluster: ctx.cfg.cluster_name.clone(),
            cluster_id: ctx.cluster_id.clone(),
            rule: rule.to_owned(),
        }
    }

    fn offer(&mut self, ctx: &Context, key: String, op: Option<Vec<u8>>) {
        if self.worker.is_none() {
            let task = tokio::spawn(drain(
                self.queue.clone(),
                ctx.js.clone(),
                ctx.layout.rule_status_bucket().bucket,
                Self::key(ctx, ""),
                ctx.metrics.clone(),
            ));
            self.worker = Some(task.abort_handle());
        }
        self.queue.offer(key, op, true);
    }

    /// Whether this process has not published `rule`'s record yet.
    pub fn unpublished(&self, rule: &str) -> bool {
        !self.published.contains(rule)
    }

    /// Whether the bus lacks what `report` says of `rule` although its
    /// status on the API server is current: never published since this
    /// start, or the placement counts (bus only) changed.
    pub fn behind(&self, rule: &str, report: &RuleReport) -> bool {
        self.unpublished(rule) || self.placed.get(rule) != Some(&report.placed_here)
    }

    /// Leaves `rule`'s record, as of the `status` just written, for the worker.
    pub fn put(
        &mut self,
        ctx: &Context,
        rule: &str,
        status: &ResourceSyncRuleStatus,
        report: &RuleReport,
    ) {
        let key = Self::key(ctx, rule);
        let text = key.to_key();
        match record(key, status, report, Utc::now()).encode() {
            Ok(bytes) => {
                // Signed by this cluster in the secure mode (PROTOCOL §5.3).
                let bytes = crate::trust::sign_or_keep(ctx.cfg.trust.as_deref(), bytes);
                self.published.insert(rule.to_owned());
                self.placed.insert(rule.to_owned(), report.placed_here);
                self.offer(ctx, text, Some(bytes));
            }
            Err(e) => tracing::warn!(%rule, error = %e, "could not encode rule status"),
        }
    }

    /// Deletes the records of the rules that are gone (not in `rules`), and
    /// tells the worker's sweep which rules exist.
    pub fn retain(&mut self, ctx: &Context, rules: BTreeSet<String>) {
        let gone: Vec<String> = self
            .published
            .iter()
            .filter(|name| !rules.contains(*name))
            .cloned()
            .collect();
        for rule in gone {
            self.published.remove(&rule);
            self.placed.remove(&rule);
            let key = Self::key(ctx, &rule).to_key();
            self.offer(ctx, key, None);
        }
        *self.queue.rules() = rules;
    }
}
