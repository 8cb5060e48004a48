//! The sink's part of status return: after each pass, the status and
//! readiness of every copy held here for a rule with `statusReturn` is
//! published on `<p>.status.<self>.…` (naming the source object) when it
//! differs from what was published last; a copy that went away gets `null`
//! once. Driven by the copies' watch events, never by polling.

use std::collections::BTreeMap;
use std::future::IntoFuture;
use std::time::Duration;

use fleetbus_schemas::crd::StatusReturn;
use fleetbus_schemas::envelope::check_size;
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::{check_subject_len, StatusKey};
use fleetbus_schemas::{well_known, ObjectRef};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::returned::rules_read;
use super::state::StatusBook;
use crate::context::Context;
use crate::sync::health;
use crate::sync::model::meta::annotation;
use crate::sync::sink::bundle;
use crate::sync::sink::state::SinkState;
use crate::sync::world::World;

/// Whether two reports say the same (when and from which version of the
/// copy aside): only then is nothing published.
fn same_report(a: &ReportedStatus, b: &ReportedStatus) -> bool {
    a.status == b.status
        && a.ready == b.ready
        && a.health == b.health
        && a.source_hash == b.source_hash
        && a.unfit == b.unfit
        && a.rule == b.rule
        && a.origin == b.origin
        && a.source == b.source
        && a.copy_name == b.copy_name
        && a.copy_namespace == b.copy_namespace
}

/// The report this cluster stands by for each subject: one per copy it
/// holds (written by sync from that source, live now) for a rule that
/// returns status.
fn wanted_reports(
    world: &World,
    sink: &SinkState,
    book: &StatusBook,
    ctx: &Context,
) -> BTreeMap<StatusKey, ReportedStatus> {
    let local = &world.fleet.local.name;
    let now = chrono::Utc::now();
    let mut out = BTreeMap::new();
    // Without a rule that returns status, no copy is looked at: a pass
    // must not cost a walk over every copy (docs/design/memory.md).
    let returning = world.rules.values().any(|r| !r.spec.unwrap && r.reports());
    let held = sink.held.iter().filter(|_| returning);
    for (target, pair) in held {
        let (rule_name, key) = &**pair;
        let Some(rule) = world.rules.get(rule_name) else {
            continue;
        };
        // A Bundle's manifests are reported once per Bundle, below.
        if rule.spec.unwrap || !rule.reports() {
            continue;
        }
        let Some(live) = world
            .kinds
            .get(&target.gvk())
            .and_then(|k| k.objects.get(&target.local_key()))
        else {
            continue;
        };
        // A local object in the way (a conflict), or one that merely
        // names the origin, is no copy of ours: its status is not sent.
        let origin = ctx.mark.copy_origin(&live);
        if origin != Some(key.origin.as_str()) {
            continue;
        }
        let uid = world
            .kinds
            .get(&rule.source)
            .and_then(|k| k.snapshots.meta(key))
            .map(|e| e.uid.clone());
        let api_version = if key.group.is_empty() {
            key.version.clone()
        } else {
            format!("{}/{}", key.group, key.version)
        };
        // A rule that reports for health alone returns no status body.
        let status = match rule.spec.status_return {
            StatusReturn::None => json!({}),
            _ => live.get("status").cloned().unwrap_or_else(|| json!({})),
        };
        let health = health::judge(rule.health.as_ref(), &live, now);
        let report = ReportedStatus {
            cluster: local.clone(),
            rule: rule_name.clone(),
            origin: key.origin.clone(),
            source: ObjectRef {
                uid,
                ..ObjectRef::new(&api_version, &key.kind, key.namespace.as_deref(), &key.name)
            },
            copy_name: target.name.clone(),
            copy_namespace: target.namespace.clone(),
            copy_resource_version: live
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            observed_at: now,
            status,
            ready: Some(health.is_current()),
            health: Some(health),
            // Which version the health is about (a rollout's origin
            // admits the next cluster on it).
            source_hash: annotation(&live, well_known::ANNOTATION_SOURCE_HASH).map(str::to_owned),
            unfit: None,
        };
        out.insert(report.subject_key(), report);
    }
    bundle_reports(world, sink, book, now, &mut out);
    // A copy held here says more than "cannot hold" (and cannot be both).
    for r in crate::sync::placement::fitness::unfit_reports(world, sink, now) {
        out.entry(r.subject_key()).or_insert(r);
    }
    out
}

/// Every Bundle unwrapped here, whatever statusReturn says: per manifest
/// applied/error/ready (see `sink::bundle`), added to `out`.
fn bundle_reports(
    world: &World,
    sink: &SinkState,
    book: &StatusBook,
    now: chrono::DateTime<chrono::Utc>,
    out: &mut BTreeMap<StatusKey, ReportedStatus>,
) {
    let local = &world.fleet.local.name;
    for (key, rule_name, status, ready) in crate::sync::sink::bundle_read::reports(world, sink) {
        let uid = world
            .rules
            .get(&rule_name)
            .and_then(|rule| world.kinds.get(&rule.source))
            .and_then(|k| k.snapshots.meta(&key))
            .map(|e| e.uid.clone());
        let report = ReportedStatus {
            cluster: local.clone(),
            rule: rule_name,
            origin: key.origin.clone(),
            source: ObjectRef {
                uid,
                ..ObjectRef::new(
                    fleetbus_schemas::well_known::API_VERSION,
                    &key.kind,
                    key.namespace.as_deref(),
                    &key.name,
                )
            },
            copy_name: key.name.clone(),
            copy_namespace: key.namespace.clone(),
            // No copy of the Bundle: its report is made of its manifests'.
            copy_resource_version: String::new(),
            observed_at: now,
            status,
            ready: Some(ready),
            // Per manifest in the BundleReport (`ready`: kstatus Current).
            health: None,
            source_hash: None,
            unfit: None,
        };
        let subject = report.subject_key();
        // A manifest kind not listed yet (a restart): keep the last
        // report rather than say "not applied" of what may be applied.
        if crate::sync::sink::bundle_read::waiting(sink, &key) {
            if let Some(last) = book.reports.get(&subject) {
                out.insert(subject, last.clone());
            }
            continue;
        }
        out.insert(subject, report);
    }
}

/// Whether a report this cluster published may still be true though no
/// copy stands behind it now: its rule cannot say yet (kinds being read,
/// or a problem), so publishing `null` could be wrong.
fn undecided(world: &World, published: &ReportedStatus) -> bool {
    // While the policy is closed, nothing is judged fit or unfit.
    if published.unfit.is_some() && world.policy.is_closed() {
        return true;
    }
    world
        .rules
        .get(&published.rule)
        .is_some_and(|r| r.reports() && (world.rule_problem(r).is_some() || !world.rule_ready(r)))
}

/// Publishes what changed since the last reports (see the module docs).
/// Returns when to try again, when a report was not published.
pub(in crate::sync) async fn report_pass(
    world: &World,
    sink: &SinkState,
    book: &mut StatusBook,
    ctx: &Context,
) -> Option<Instant> {
    // Before our own last reports are read back, everything would look
    // new; before the rules are read, every report would look orphaned.
    if !book.caught_up || !rules_read(world) {
        return None;
    }
    let local = world.fleet.local.name.clone();
    let wanted = wanted_reports(world, sink, book, ctx);
    let mut publish: Vec<ReportedStatus> = wanted
        .iter()
        .filter(|(k, r)| !book.reports.get(*k).is_some_and(|p| same_report(p, r)))
        .map(|(_, r)| r.clone())
        .collect();
    for (k, p) in &book.reports {
        // A copy gone, or a cluster able to hold what it said it could not.
        if p.cluster == local
            && (!p.status.is_null() || p.unfit.is_some())
            && !wanted.contains_key(k)
            && !undecided(world, p)
        {
            publish.push(ReportedStatus {
                status: Value::Null,
                ready: None,
                health: None,
                source_hash: None,
                unfit: None,
                observed_at: chrono::Utc::now(),
                ..p.clone()
            });
        }
    }
    publish_reports(world, book, ctx, publish).await
}

/// Publishes reports, all sent before any acknowledgement is awaited
/// (a joining cluster reports thousands of new copies in one pass; one
/// round trip each would hold the pass for seconds), then the
/// acknowledgements together; each acknowledged report is remembered as
/// published so the next pass does not send it again before the consumer
/// reads it back. Returns when to try again, when one was not published.
async fn publish_reports(
    world: &World,
    book: &mut StatusBook,
    ctx: &Context,
    reports: Vec<ReportedStatus>,
) -> Option<Instant> {
    let mut retry = None;
    let mut sent = Vec::with_capacity(reports.len());
    for r in reports {
        let key = r.subject_key();
        let subject = key.to_subject(ctx.layout.prefix());
        if check_subject_len(&subject).is_err() {
            ctx.metrics.sync_rejected("too_large");
            continue;
        }
        let Some(bytes) = fitting_report(world, ctx, &r, &subject) else {
            // Remembered as published: not tried again until it changes.
            book.reports.insert(key, r);
            continue;
        };
        match ctx.js.publish(subject.clone(), bytes.into()).await {
            Ok(ack) => sent.push((key, subject, r, ack)),
            Err(error) => retry = Some(not_published(&subject, &error.to_string())),
        }
    }
    let (sent, acks): (Vec<_>, Vec<_>) = sent
        .into_iter()
        .map(|(key, subject, r, ack)| ((key, subject, r), ack.into_future()))
        .unzip();
    let acked = futures::future::join_all(acks).await;
    for ((key, subject, r), result) in sent.into_iter().zip(acked) {
        match result {
            Ok(_) => {
                tracing::debug!(%subject, gone = r.status.is_null(), "status reported");
                book.reports.insert(key, r);
            }
            Err(error) => retry = Some(not_published(&subject, &error.to_string())),
        }
    }
    retry
}

/// Logs a status report the bus did not take; returns when to try again.
fn not_published(subject: &str, error: &str) -> Instant {
    tracing::warn!(%subject, %error, "status report not published; retrying");
    Instant::now() + Duration::from_secs(2)
}

/// The encoded report, cut (a Bundle's, see [`bundle::truncated_report`])
/// when above the bus's message size; `None` (counted `too_large`) when
/// it does not fit even so, or does not encode: retrying would not help.
fn fitting_report(
    world: &World,
    ctx: &Context,
    r: &ReportedStatus,
    subject: &str,
) -> Option<Vec<u8>> {
    let max = ctx.max_payload();
    // Signed by this cluster in the secure mode (PROTOCOL §6.1): the
    // origin believes only reports its sinks signed.
    let trust = ctx.cfg.trust.as_deref();
    let encode = |r: &ReportedStatus| {
        let signed = r
            .encode()
            .map_err(|e| e.to_string())
            .and_then(|b| crate::trust::sign_json_as(trust, b));
        match signed {
            Ok(b) => Some(b),
            Err(e) => {
                tracing::warn!(%subject, error = %e, "could not encode a status report");
                None
            }
        }
    };
    let bytes = encode(r)?;
    let Err(too_large) = check_size(bytes.len(), max) else {
        return Some(bytes);
    };
    let is_bundle = world.rules.get(&r.rule).is_some_and(|x| x.spec.unwrap);
    let cut = is_bundle
        .then(|| bundle::truncated_report(&r.status))
        .flatten()
        .and_then(|status| {
            encode(&ReportedStatus {
                status,
                ..r.clone()
            })
        })
        .filter(|b| check_size(b.len(), max).is_ok());
    if cut.is_some() {
        tracing::warn!(%subject, error = %too_large, "Bundle report too large; published without its ready manifests");
    } else {
        tracing::warn!(%subject, error = %too_large, "status report too large; not published");
        ctx.metrics.sync_rejected("too_large");
    }
    cut
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::health::{Health, HealthStatus};

    #[test]
    fn only_content_makes_a_report_new() {
        let a = ReportedStatus {
            cluster: "west".into(),
            rule: "r".into(),
            origin: "east".into(),
            source: ObjectRef::new("v1", "ConfigMap", Some("a"), "c"),
            copy_name: "c".into(),
            copy_namespace: Some("a".into()),
            copy_resource_version: "1".into(),
            observed_at: chrono::Utc::now(),
            status: json!({"x": 1}),
            ready: Some(true),
            health: Some(Health::new(HealthStatus::Current, "ok")),
            source_hash: Some("a".repeat(64)),
            unfit: None,
        };
        let mut b = a.clone();
        b.copy_resource_version = "2".into();
        b.observed_at = chrono::Utc::now() + chrono::Duration::seconds(5);
        assert!(same_report(&a, &b), "a new version with the same status");
        b.status = json!({"x": 2});
        assert!(!same_report(&a, &b));
        let mut c = a.clone();
        c.ready = Some(false);
        assert!(!same_report(&a, &c));
        let mut d = a.clone();
        d.health = Some(Health::new(HealthStatus::Current, "Replicas: 3"));
        assert!(!same_report(&a, &d), "a new health message is news");
        let mut e = a.clone();
        e.source_hash = Some("b".repeat(64));
        assert!(!same_report(&a, &e), "a copy of another version is news");
    }
}
