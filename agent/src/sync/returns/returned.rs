//! Reported status on the bus (`<p>.status.>`, read by
//! `watches::status_consumer`): filling the book of the reports that concern
//! this cluster (`state::StatusBook`: those it published, those about
//! its own objects), and the origin's `return_pass`, which turns
//! reports into the source object's status (`Singleton`), `ReportedState`
//! objects (`PerCluster`, see [`super::per_cluster`]) and the rule's readiness
//! summary.

use std::collections::BTreeMap;

use fleetbus_schemas::crd::StatusReturn;
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::well_known::FIELD_MANAGER_STATUS;
use kube::api::{Patch, PatchParams};
use kube::core::GroupVersionKind;
use serde_json::{json, Value};

use super::source::{source_key, source_object};
use super::state::StatusBook;
use crate::context::Context;
use crate::sync::model::StatusEvent;
use crate::sync::world::World;

/// Whether fleetbus's status field manager owns fields of `obj`.
fn has_returned_status(obj: &Value) -> bool {
    obj.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|entries| {
            entries
                .iter()
                .any(|e| e.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER_STATUS))
        })
}

/// Folds one event of the status consumer into the book; `local` is this
/// cluster.
pub(in crate::sync) fn status_event(book: &mut StatusBook, local: &str, ev: StatusEvent) {
    match ev {
        StatusEvent::Reset => book.resnap = Some(BTreeMap::new()),
        StatusEvent::Item(key, report) => {
            let map = book.resnap.as_mut().unwrap_or(&mut book.reports);
            // Reports between other clusters are not ours to keep.
            if report.cluster == local || report.origin == local {
                map.insert(key, *report);
            } else {
                map.remove(&key);
            }
        }
        StatusEvent::Unreadable(key) => {
            // Someone overwrote one of our reports: forget it, so the
            // sink side publishes it again. A foreign subject keeps what
            // the origin read before (garbage changes nothing).
            if key.cluster == local {
                book.reports.remove(&key);
                if let Some(r) = book.resnap.as_mut() {
                    r.remove(&key);
                }
            }
        }
        StatusEvent::CaughtUp => {
            if let Some(r) = book.resnap.take() {
                book.reports = r;
            }
            book.caught_up = true;
        }
    }
}

/// The reports about this cluster's objects that count: from a member
/// (not left), with a status, for a rule that returns status, about a source object
/// that still exists here (same uid). Keyed by source object.
pub(in crate::sync) fn returned_reports(
    world: &World,
    book: &StatusBook,
) -> BTreeMap<ObjectKey, Vec<ReportedStatus>> {
    let local = &world.fleet.local.name;
    let mut out: BTreeMap<ObjectKey, Vec<ReportedStatus>> = BTreeMap::new();
    for r in book.reports.values() {
        // A cluster that left (its copies are collected) or whose name
        // two records claim reports nothing we can believe.
        let member = world
            .fleet
            .peers
            .get(&r.cluster)
            .is_some_and(|p| !p.left && !p.name_conflict);
        if &r.origin != local || r.status.is_null() || !member {
            continue;
        }
        let returns = world.rules.get(&r.rule).is_some_and(|rule| rule.reports());
        if !returns || source_object(world, r).is_none() {
            continue;
        }
        out.entry(source_key(r)).or_default().push(r.clone());
    }
    out
}

/// Whether the rules have been read (local list and peers' on the bus).
pub(in crate::sync) fn rules_read(world: &World) -> bool {
    world
        .kinds
        .get(&crate::sync::rules::compile::rule_gvk())
        .is_some_and(|k| k.ready())
}

/// What the return pass found for the rules' status (`status_pass` writes
/// it): per rule, how many reported copies are ready of how many, and
/// those not Current with their health.
pub(in crate::sync) struct Readiness {
    /// Per rule, (ready, reported).
    pub per_rule: BTreeMap<String, (i64, i64)>,
    /// Per rule, the copies not Current, with what their health says.
    pub unhealthy: BTreeMap<String, BTreeMap<String, String>>,
}

/// The origin's part: status of source objects, ReportedStates, and
/// readiness per rule (returned, for the rule reports `status_pass` writes;
/// None: the reports or the rules are not read yet, nothing changes).
pub(in crate::sync) async fn return_pass(
    world: &World,
    book: &mut StatusBook,
    ctx: &Context,
) -> Option<Readiness> {
    // Until the reports and the rules are read, every ReportedState and
    // returned status would look unwanted.
    if !book.caught_up || !rules_read(world) {
        return None;
    }
    let returned = returned_reports(world, book);
    // Readiness summary per rule.
    let mut readiness: BTreeMap<String, (i64, i64)> = BTreeMap::new();
    let mut unhealthy: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    for r in returned.values().flatten() {
        let e = readiness.entry(r.rule.clone()).or_default();
        e.1 += 1;
        if r.ready == Some(true) {
            e.0 += 1;
        } else {
            unhealthy
                .entry(r.rule.clone())
                .or_default()
                .insert(copy_name(r), health_text(r));
        }
    }
    let mode = |rs: &[ReportedStatus]| {
        rs.first()
            .and_then(|r| world.rules.get(&r.rule))
            .map(|rule| rule.spec.status_return)
    };
    // Singleton: exactly one cluster reports → its status; none → the
    // fields fleetbus wrote go (an empty apply); several → left as is.
    let mut singleton: BTreeMap<ObjectKey, Value> = BTreeMap::new();
    let mut per_cluster: Vec<ReportedStatus> = Vec::new();
    for (key, rs) in &returned {
        match mode(rs) {
            Some(StatusReturn::Singleton) if rs.len() == 1 => {
                singleton.insert(key.clone(), rs[0].status.clone());
            }
            Some(StatusReturn::PerCluster) => {
                per_cluster.extend(rs.iter().cloned());
            }
            _ => {}
        }
    }
    // Bundles: the reports of unwrap rules become `Bundle.status`.
    singleton.extend(crate::sync::sink::bundle_read::statuses(world, &returned));
    let several: Vec<ObjectKey> = returned
        .iter()
        .filter(|(_, rs)| rs.len() > 1 && mode(rs) == Some(StatusReturn::Singleton))
        .map(|(k, _)| k.clone())
        .collect();
    adopt_applied(world, book);
    let gone: Vec<ObjectKey> = book
        .applied
        .keys()
        .filter(|k| !singleton.contains_key(*k) && !several.contains(k))
        .cloned()
        .collect();
    for key in gone {
        if apply_source_status(book, ctx, &key, &json!({})).await {
            book.applied.remove(&key);
        }
    }
    for (key, status) in singleton {
        if book.applied.get(&key) == Some(&status) {
            continue;
        }
        if apply_source_status(book, ctx, &key, &status).await {
            book.applied.insert(key, status);
        }
    }
    super::per_cluster::per_cluster_pass(world, book, ctx, &per_cluster).await;
    Some(Readiness {
        per_rule: readiness,
        unhealthy,
    })
}

/// `applied` lives in memory: status fleetbus applied before this process
/// started (a report that went away while it was down) is found through
/// `managedFields` on each kind once it is listed, so it is cleared too.
fn adopt_applied(world: &World, book: &mut StatusBook) {
    let local = &world.fleet.local.name;
    let mut found = Vec::new();
    for (gvk, kind) in &world.kinds {
        if !kind.listed || book.adopted_kinds.contains(gvk) {
            continue;
        }
        found.push((gvk.clone(), None));
        let api_version = fleetbus_schemas::subject::api_version(&gvk.group, &gvk.version);
        for ((ns, name), obj) in kind.objects.iter() {
            if has_returned_status(&obj) {
                let key = ObjectKey::from_api_version(
                    local,
                    &api_version,
                    &gvk.kind,
                    ns.as_deref(),
                    name,
                );
                found.push((gvk.clone(), Some(key)));
            }
        }
    }
    for (gvk, key) in found {
        book.adopted_kinds.insert(gvk);
        if let Some(key) = key {
            book.applied.entry(key).or_insert(Value::Null);
        }
    }
}

/// Server-side applies `status` as the source object's status with
/// fleetbus's status field manager (forced: the copy's controller is the
/// authority on these fields). Through `/status` when the kind has the
/// subresource, else on the object itself. False when it failed (tried
/// again next pass).
async fn apply_source_status(
    book: &mut StatusBook,
    ctx: &Context,
    key: &ObjectKey,
    status: &Value,
) -> bool {
    let gvk = GroupVersionKind::gvk(&key.group, &key.version, &key.kind);
    let (ar, subresource) = match book.status_subresource.get(&gvk) {
        Some(s) => s.clone(),
        None => match kube::discovery::pinned_kind(&ctx.client, &gvk).await {
            Ok((ar, caps)) => {
                let s = caps
                    .subresources
                    .iter()
                    .any(|(ar, _)| ar.plural == "status");
                book.status_subresource.insert(gvk.clone(), (ar.clone(), s));
                (ar, s)
            }
            // The kind itself is gone (its CRD deleted): so are its objects.
            Err(kube::Error::Api(s)) if s.code == 404 => return true,
            Err(kube::Error::Discovery(
                kube::error::DiscoveryError::MissingKind(_)
                | kube::error::DiscoveryError::MissingApiGroup(_),
            )) => return true,
            Err(e) => {
                tracing::warn!(kind = %key.kind, error = %e, "discovery failed; status not returned");
                return false;
            }
        },
    };
    // Written through the discovered resource, not the watch: after its last
    // rule is deleted the kind is no longer watched, but fleetbus's fields
    // must still be cleared.
    let api = crate::sync::sink::apply::api(&ctx.client, &ar, key.namespace.as_deref());
    let mut metadata = json!({"name": key.name});
    if let Some(ns) = &key.namespace {
        metadata["namespace"] = json!(ns);
    }
    let api_version = if key.group.is_empty() {
        key.version.clone()
    } else {
        format!("{}/{}", key.group, key.version)
    };
    let body = json!({"apiVersion": api_version, "kind": key.kind,
                      "metadata": metadata, "status": status});
    let params = PatchParams::apply(FIELD_MANAGER_STATUS).force();
    let name = crate::kube::path::segment(&key.name);
    let result = if subresource {
        api.patch_status(&name, &params, &Patch::Apply(&body)).await
    } else {
        api.patch(&name, &params, &Patch::Apply(&body)).await
    };
    match result {
        Ok(_) => {
            ctx.metrics.sync_kube_write("returned_status");
            true
        }
        // The source is gone: nothing to write on.
        Err(kube::Error::Api(s)) if s.code == 404 => true,
        Err(e) => {
            tracing::warn!(object = %crate::sync::model::meta::describe_key(key), error = %e, "could not write the returned status");
            false
        }
    }
}

/// `cluster: Kind ns/name` of a reported copy, as the rule status names it.
fn copy_name(r: &ReportedStatus) -> String {
    match &r.copy_namespace {
        Some(ns) => format!("{}: {} {ns}/{}", r.cluster, r.source.kind, r.copy_name),
        None => format!("{}: {} {}", r.cluster, r.source.kind, r.copy_name),
    }
}

/// A copy's health for people: `InProgress (Ready: 1/3)`, or "not ready"
/// from an agent that reports no health.
fn health_text(r: &ReportedStatus) -> String {
    match &r.health {
        Some(h) if h.message.is_empty() => h.status.to_string(),
        Some(h) => format!("{} ({})", h.status, h.message),
        None => "not ready".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn returned_status_is_found_by_its_field_manager() {
        let with = |manager: &str| {
            json!({"metadata": {"managedFields": [
            {"manager": "kubectl"}, {"manager": manager, "subresource": "status"}]}})
        };
        assert!(has_returned_status(&with(FIELD_MANAGER_STATUS)));
        assert!(!has_returned_status(&with("kube-controller-manager")));
        assert!(!has_returned_status(&json!({"metadata": {}})));
    }
}
