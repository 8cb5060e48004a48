//! The export side: for each ServiceExport in this cluster, publish what
//! its Service and EndpointSlices say (`plan::export_of`) on
//! `<p>.svc.<self>.<ns>.<name>`, at most once per [`MIN_INTERVAL`] per
//! Service (endpoint churn is batched), and say on the ServiceExport
//! whether it is valid, exported, and in conflict with another cluster's.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use fleetbus_schemas::multicluster::{
    ExportKey, ExportRecord, ServiceExportStatus, CONDITION_CONFLICT, CONDITION_READY,
    CONDITION_VALID,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::time::{Duration, Instant};

use super::mirror::Mirror;
use super::plan::{self, Body, Name};
use super::render::LABEL_KUBE_SERVICE_NAME;
use crate::context::Context;
use crate::kube::conditions::{merge, Desired};

/// The least time between two records of one Service: a Service whose
/// endpoints change 10 times a second costs two records a second.
pub const MIN_INTERVAL: Duration = Duration::from_millis(500);

/// How each cluster is reached (exporters gone count in no conflict).
pub type ReachOf<'a> = dyn Fn(&str) -> plan::Reach + Sync + 'a;

/// What the export side keeps between passes.
#[derive(Default)]
pub struct Exporter {
    /// When each Service's record was last published.
    last: BTreeMap<Name, Instant>,
}

/// What one pass reads.
pub struct Local<'a> {
    /// The ServiceExports.
    pub exports: &'a Mirror<DynamicObject>,
    /// The Services.
    pub services: &'a Mirror<Service>,
    /// The EndpointSlices (not ours).
    pub slices: &'a Mirror<EndpointSlice>,
}

/// The EndpointSlices of each Service, by its name label.
fn slices_by_service(slices: &Mirror<EndpointSlice>) -> BTreeMap<Name, Vec<&EndpointSlice>> {
    let mut out: BTreeMap<Name, Vec<&EndpointSlice>> = BTreeMap::new();
    for ((ns, _), s) in &slices.map {
        if let Some(svc) = s.labels().get(LABEL_KUBE_SERVICE_NAME) {
            out.entry((ns.clone(), svc.clone())).or_default().push(s);
        }
    }
    out
}

fn created(o: &DynamicObject) -> DateTime<Utc> {
    o.metadata
        .creation_timestamp
        .as_ref()
        .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0))
        .unwrap_or_else(Utc::now)
}

/// The record to publish for one Service now, if any: a new one when what
/// it exports differs from this cluster's last record, a withdrawal when it
/// exports nothing any more. Revisions grow (at least to now in ms, so a
/// restarted agent never goes back).
pub fn next_record(
    own: Option<&ExportRecord>,
    wanted: Option<(DateTime<Utc>, Body)>,
    now_ms: u64,
) -> Option<ExportRecord> {
    let revision = own.map_or(0, |r| r.revision.saturating_add(1)).max(now_ms);
    match wanted {
        Some((exported_at, b)) => {
            let rec = ExportRecord {
                exported_at,
                withdrawn: false,
                type_: b.type_,
                ports: b.ports,
                session_affinity: b.session_affinity,
                slices: b.slices,
                truncated: b.truncated,
                revision,
            };
            let same = own.is_some_and(|o| {
                ExportRecord {
                    revision,
                    ..o.clone()
                } == rec
            });
            (!same).then_some(rec)
        }
        None => match own {
            Some(o) if !o.withdrawn => Some(ExportRecord {
                withdrawn: true,
                slices: Vec::new(),
                revision,
                ..o.clone()
            }),
            _ => None,
        },
    }
}

/// One pass over the `dirty` Services; those paced out stay dirty, and the
/// time the next may go is returned.
pub async fn pass(
    ctx: &Context,
    ar: &ApiResource,
    st: &mut Exporter,
    local: &Local<'_>,
    (records, reach): (&mut BTreeMap<ExportKey, ExportRecord>, &ReachOf<'_>),
    dirty: &mut BTreeSet<Name>,
) -> Option<Instant> {
    let me = &ctx.cfg.cluster_name;
    let by_service = slices_by_service(local.slices);
    let now = Instant::now();
    let mut wake: Option<Instant> = None;
    let mut again = BTreeSet::new();
    for name in std::mem::take(dirty) {
        let key = ExportKey {
            cluster: me.clone(),
            namespace: name.0.clone(),
            name: name.1.clone(),
        };
        let export = local
            .exports
            .map
            .get(&name)
            .filter(|o| o.metadata.deletion_timestamp.is_none());
        let body = export.map(|e| {
            let slices = by_service.get(&name).map(Vec::as_slice).unwrap_or_default();
            plan::export_of(local.services.map.get(&name), slices).and_then(|b| {
                // What importers would refuse is not published: said here.
                let probe = next_record(None, Some((created(e), b.clone())), 1);
                match probe.map(|r| r.validate()) {
                    Some(Err(why)) => Err(plan::Invalid {
                        reason: "Unexportable",
                        message: format!("the endpoints cannot be exported: {why}"),
                    }),
                    _ => Ok(b),
                }
            })
        });
        let wanted = match (&export, &body) {
            (Some(e), Some(Ok(b))) => Some((created(e), b.clone())),
            _ => None,
        };
        let now_ms = u64::try_from(Utc::now().timestamp_millis()).unwrap_or_default();
        if let Some(rec) = next_record(records.get(&key), wanted, now_ms) {
            if let Some(at) = st
                .last
                .get(&name)
                .map(|t| *t + MIN_INTERVAL)
                .filter(|t| *t > now)
            {
                again.insert(name);
                wake = Some(wake.map_or(at, |w| w.min(at)));
                continue;
            }
            match publish(ctx, &key, &rec).await {
                Ok(()) => {
                    ctx.metrics.mcs_event("published");
                    st.last.insert(name.clone(), now);
                    records.insert(key.clone(), rec);
                }
                Err(e) => {
                    tracing::warn!(service = %format!("{}/{}", name.0, name.1), error = %e, "could not publish a Service export; retrying");
                    again.insert(name.clone());
                    let at = now + Duration::from_secs(1);
                    wake = Some(wake.map_or(at, |w| w.min(at)));
                    continue;
                }
            }
        }
        if let (Some(e), Some(b)) = (export, body) {
            // Exporters that left or are disabled no longer count.
            let conflicts = plan::conflicts(
                records
                    .iter()
                    .filter(|(k, _)| k.namespace == name.0 && k.name == name.1)
                    .filter(|(k, _)| reach(&k.cluster) != plan::Reach::Gone)
                    .map(|(k, r)| (k.cluster.as_str(), r)),
            );
            let truncated = b.as_ref().map_or(0, |b| b.truncated);
            let desired = conditions(b.as_ref().err(), conflicts.get(me.as_str()), truncated);
            if let Err(e) = write_status(ctx, ar, e, &desired).await {
                tracing::debug!(error = %e, "could not write a ServiceExport's status; retrying");
                again.insert(name);
            }
        }
    }
    *dirty = again;
    wake
}

/// Valid, Ready and Conflict for one export; `truncated` endpoints were
/// left out by the bound.
fn conditions(
    invalid: Option<&plan::Invalid>,
    conflict: Option<&String>,
    truncated: usize,
) -> Vec<Desired> {
    let mut out = vec![match invalid {
        Some(i) => Desired {
            type_: CONDITION_VALID,
            status: false,
            reason: i.reason,
            message: i.message.clone(),
        },
        None => Desired {
            type_: CONDITION_VALID,
            status: true,
            reason: "Valid",
            message: "the Service can be exported".to_owned(),
        },
    }];
    out.push(Desired {
        type_: CONDITION_READY,
        status: invalid.is_none(),
        reason: if invalid.is_none() {
            "Exported"
        } else {
            "Invalid"
        },
        message: if invalid.is_none() && truncated > 0 {
            format!(
                "exported to the ClusterSet; {truncated} endpoints beyond the {} a Service may export are left out",
                fleetbus_schemas::multicluster::MAX_EXPORT_ENDPOINTS
            )
        } else if invalid.is_none() {
            "exported to the ClusterSet".to_owned()
        } else {
            "not exported: the export is not valid".to_owned()
        },
    });
    out.push(match conflict {
        Some(why) => Desired {
            type_: CONDITION_CONFLICT,
            status: true,
            reason: if why.contains("type ") {
                "TypeConflict"
            } else {
                "PortConflict"
            },
            message: why.clone(),
        },
        None => Desired {
            type_: CONDITION_CONFLICT,
            status: false,
            reason: "NoConflicts",
            message: "no other cluster's export of this Service conflicts".to_owned(),
        },
    });
    out
}

/// Writes the conditions when they differ from the object's.
async fn write_status(
    ctx: &Context,
    ar: &ApiResource,
    export: &DynamicObject,
    desired: &[Desired],
) -> Result<(), kube::Error> {
    let existing: ServiceExportStatus = export
        .data
        .get("status")
        .and_then(|s| serde_json::from_value(s.clone()).ok())
        .unwrap_or_default();
    let merged = merge(&existing.conditions, desired, export.metadata.generation);
    if merged == existing.conditions {
        return Ok(());
    }
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.client.clone(),
        &export.namespace().unwrap_or_default(),
        ar,
    );
    api.patch_status(
        &export.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({ "status": { "conditions": merged } })),
    )
    .await?;
    ctx.metrics.kube_write("ServiceExport");
    Ok(())
}

/// Publishes one record (signed in the secure mode), awaited.
async fn publish(ctx: &Context, key: &ExportKey, rec: &ExportRecord) -> Result<(), String> {
    let bytes = rec.encode().map_err(|e| e.to_string())?;
    let max = ctx.js.client().server_info().max_payload;
    let bytes = crate::trust::sign_or_keep(ctx.cfg.trust.as_deref(), bytes);
    if bytes.len() > max {
        return Err(format!(
            "the record is {} bytes, above the server's max_payload {max}",
            bytes.len()
        ));
    }
    ctx.js
        .publish(key.to_subject(ctx.layout.prefix()), bytes.into())
        .await
        .map_err(|e| e.to_string())?
        .await
        .map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use fleetbus_schemas::multicluster::ImportType;

    fn body(n: usize) -> Body {
        Body {
            type_: ImportType::ClusterSetIP,
            ports: vec![],
            session_affinity: None,
            slices: vec![fleetbus_schemas::multicluster::ExportedSlice {
                address_type: "IPv4".into(),
                ports: vec![],
                endpoints: (0..n)
                    .map(|i| fleetbus_schemas::multicluster::ExportedEndpoint {
                        addresses: vec![format!("10.0.0.{i}")],
                        ready: true,
                        serving: None,
                        terminating: None,
                        hostname: None,
                        zone: None,
                    })
                    .collect(),
            }],
            truncated: 0,
        }
    }

    #[test]
    fn a_record_is_published_when_what_is_exported_changes_and_withdrawn_once() {
        let at: DateTime<Utc> = "2026-01-01T00:00:00Z".parse().unwrap();
        let first = next_record(None, Some((at, body(1))), 1_000).unwrap();
        assert_eq!(first.revision, 1_000);
        assert!(!first.withdrawn);
        // The same again: nothing.
        assert!(next_record(Some(&first), Some((at, body(1))), 2_000).is_none());
        // Endpoints changed: a later revision, even if the clock went back.
        let second = next_record(Some(&first), Some((at, body(2))), 10).unwrap();
        assert_eq!(second.revision, 1_001);
        // Gone: one withdrawal, then nothing.
        let gone = next_record(Some(&second), None, 3_000).unwrap();
        assert!(gone.withdrawn && gone.slices.is_empty());
        assert!(next_record(Some(&gone), None, 4_000).is_none());
        assert!(next_record(None, None, 4_000).is_none());
    }

    #[test]
    fn conditions_say_why_an_export_is_invalid_or_in_conflict() {
        let invalid = plan::Invalid {
            reason: "NoService",
            message: "none".into(),
        };
        let c = conditions(Some(&invalid), None, 0);
        assert_eq!((c[0].status, c[0].reason), (false, "NoService"));
        assert_eq!((c[1].status, c[1].reason), (false, "Invalid"));
        let why = "type Headless (the oldest export, in a, is ClusterSetIP)".to_owned();
        let c = conditions(None, Some(&why), 0);
        assert_eq!((c[2].status, c[2].reason), (true, "TypeConflict"));
        assert!(c[2].message.contains("in a"));
        let c = conditions(None, None, 7);
        assert!(c[1].message.contains("7 endpoints"), "{}", c[1].message);
    }
}
