//! The import side's IO: writes what `plan::imports` decided as the objects
//! `render` makes, and deletes what this agent imported before and no
//! longer should. It writes only objects it owns (their mark verifies) or
//! creates anew: an object of the same name that is not ours is reported,
//! never overwritten nor deleted. Unchanged objects (same content hash) are
//! not written.

use std::collections::{BTreeMap, BTreeSet};

use fleetbus_schemas::multicluster::{LABEL_MANAGED_BY, LABEL_SERVICE_NAME, MANAGED_BY};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions,
};
use kube::core::GroupVersionKind;
use kube::Api;
use serde_json::Value;
use tokio::time::{Duration, Instant};

use super::plan::{DesiredImport, Name};
use super::render::{self, Object, ANNOTATION_HASH};
use crate::context::Context;
use crate::mark::Ownership;

/// The field manager of what imports write.
const MANAGER: &str = "fleetbus-mcs";
/// How often what this agent owns is listed again (a cache is kept
/// between): an imported object deleted or replaced by someone else is
/// written again within this.
pub const RESYNC: Duration = Duration::from_secs(60);

/// One "could not write" line per object a minute.
static WRITE_FAILED: crate::log_gate::LogGate =
    crate::log_gate::LogGate::new(Duration::from_secs(60));

/// One owned object: which, its uid and what it was written from.
#[derive(Debug, Clone)]
struct Owned {
    uid: String,
    /// Its resourceVersion: an update replaces exactly what we read.
    rv: String,
    hash: String,
    /// The derived Service's ClusterIP.
    cluster_ip: Option<String>,
    /// The ServiceImport's status as written.
    status: Option<Value>,
}

/// (kind, namespace, name).
type Id = (&'static str, String, String);

/// What writing one object came to.
enum Ensured {
    /// It is ours and says what it should.
    Ours(Owned),
    /// An object of that name that fleetbus did not write: left alone.
    Foreign,
    /// Not written; `transient`: worth trying again soon (else only once
    /// what is written changes: the API server refused this content).
    Failed { transient: bool },
}

/// What the import side keeps between passes.
#[derive(Default)]
pub struct Importer {
    owned: BTreeMap<Id, Owned>,
    listed_at: Option<Instant>,
    /// Names of objects not ours already reported.
    foreign: BTreeSet<Id>,
    /// Content the API server refused for good, by object: not sent again
    /// until it changes.
    refused: BTreeMap<Id, String>,
}

fn resource(kind: &'static str, import_ar: &ApiResource) -> ApiResource {
    match kind {
        "Service" => ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Service")),
        "EndpointSlice" => ApiResource::from_gvk(&GroupVersionKind::gvk(
            "discovery.k8s.io",
            "v1",
            "EndpointSlice",
        )),
        _ => import_ar.clone(),
    }
}

fn owned_of(ctx: &Context, o: &DynamicObject) -> Option<Owned> {
    let v = serde_json::to_value(o).ok()?;
    match ctx.mark.judge_object(&v) {
        Ownership::Copy { origin, .. } if origin == ctx.cfg.cluster_name => {}
        _ => return None,
    }
    Some(Owned {
        uid: o.metadata.uid.clone()?,
        rv: o.metadata.resource_version.clone().unwrap_or_default(),
        hash: o
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_HASH))
            .cloned()
            .unwrap_or_default(),
        cluster_ip: v
            .pointer("/spec/clusterIP")
            .and_then(Value::as_str)
            .filter(|ip| !ip.is_empty() && *ip != "None")
            .map(str::to_owned),
        status: v.get("status").cloned(),
    })
}

/// Whether trying again soon may help.
fn retry(e: &Ensured) -> bool {
    matches!(e, Ensured::Failed { transient: true })
}

fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(MANAGER.to_owned()),
        ..PostParams::default()
    }
}

impl Importer {
    /// Lists what this agent imported (its mark verifies), when due: an
    /// object deleted or replaced behind its back is written again then.
    async fn list_owned(
        &mut self,
        ctx: &Context,
        import_ar: &ApiResource,
    ) -> Result<(), kube::Error> {
        if self.listed_at.is_some_and(|t| t.elapsed() < RESYNC) {
            return Ok(());
        }
        let mut owned = BTreeMap::new();
        let lists: [(&'static str, String); 3] = [
            (
                "ServiceImport",
                fleetbus_schemas::well_known::LABEL_MANAGED.to_owned(),
            ),
            ("Service", LABEL_SERVICE_NAME.to_owned()),
            ("EndpointSlice", format!("{LABEL_MANAGED_BY}={MANAGED_BY}")),
        ];
        for (kind, selector) in lists {
            let api: Api<DynamicObject> =
                Api::all_with(ctx.client.clone(), &resource(kind, import_ar));
            let list = api.list(&ListParams::default().labels(&selector)).await?;
            for o in &list.items {
                if let (Some(ns), Some(name), Some(own)) = (
                    o.metadata.namespace.clone(),
                    o.metadata.name.clone(),
                    owned_of(ctx, o),
                ) {
                    owned.insert((kind, ns, name), own);
                }
            }
        }
        self.owned = owned;
        self.listed_at = Some(Instant::now());
        Ok(())
    }

    /// Writes `o` unless it is unchanged: created when it is not known to
    /// be ours, replaced (a PUT at the resourceVersion read, so a field the
    /// import no longer has goes) when it is; an object of that name that
    /// is not ours is left alone.
    async fn ensure(&mut self, ctx: &Context, import_ar: &ApiResource, o: &Object) -> Ensured {
        let id: Id = (o.kind, o.namespace.clone(), o.name.clone());
        if let Some(own) = self.owned.get(&id).filter(|own| own.hash == o.hash) {
            return Ensured::Ours(own.clone());
        }
        if self.refused.get(&id) == Some(&o.hash) {
            return Ensured::Failed { transient: false };
        }
        let api: Api<DynamicObject> = Api::namespaced_with(
            ctx.client.clone(),
            &o.namespace,
            &resource(o.kind, import_ar),
        );
        let mut obj: DynamicObject = match serde_json::from_value(o.body.clone()) {
            Ok(obj) => obj,
            Err(e) => {
                tracing::warn!(kind = o.kind, name = %o.name, error = %e, "an imported object does not encode");
                return Ensured::Failed { transient: false };
            }
        };
        let mut rv = self.owned.get(&id).map(|own| own.rv.clone());
        let mut tries = 0;
        let written = loop {
            tries += 1;
            let r = match &rv {
                Some(rv) => {
                    obj.metadata.resource_version = Some(rv.clone());
                    api.replace(&o.name, &post_params(), &obj).await
                }
                None => {
                    obj.metadata.resource_version = None;
                    api.create(&post_params(), &obj).await
                }
            };
            match r {
                // There already (written before the last list, or changed
                // since we read it; or gone): read it, and go on only if
                // it is ours.
                Err(kube::Error::Api(s)) if (s.code == 409 || s.code == 404) && tries < 3 => {
                    match api.get_opt(&o.name).await {
                        Ok(Some(live)) => match owned_of(ctx, &live) {
                            Some(own) => rv = Some(own.rv),
                            None => {
                                self.owned.remove(&id);
                                if self.foreign.insert(id.clone()) {
                                    ctx.metrics.mcs_event("foreign");
                                    tracing::warn!(kind = o.kind, object = %format!("{}/{}", o.namespace, o.name), "not importing over an object of the same name that fleetbus did not write; delete or rename it");
                                }
                                return Ensured::Foreign;
                            }
                        },
                        Ok(None) => rv = None,
                        Err(e) => break Err(e),
                    }
                }
                r => break r,
            }
        };
        match written {
            Ok(live) => {
                ctx.metrics.kube_write(o.kind);
                self.foreign.remove(&id);
                self.refused.remove(&id);
                match owned_of(ctx, &live) {
                    Some(own) => {
                        self.owned.insert(id, own.clone());
                        Ensured::Ours(own)
                    }
                    None => Ensured::Failed { transient: true },
                }
            }
            Err(e) => {
                let transient = crate::kube::client::is_transient(&e);
                ctx.metrics.mcs_event(if transient {
                    "write_failed"
                } else {
                    "write_refused"
                });
                if !transient {
                    self.refused.insert(id.clone(), o.hash.clone());
                }
                if let Some(held_back) = WRITE_FAILED.admit(&format!("{}/{}/{}", id.0, id.1, id.2))
                {
                    tracing::warn!(kind = o.kind, object = %format!("{}/{}", o.namespace, o.name), error = %e, transient, held_back, "could not write an imported object");
                }
                Ensured::Failed { transient }
            }
        }
    }

    /// Deletes an owned object, if its uid is still the one we wrote.
    async fn remove(&mut self, ctx: &Context, import_ar: &ApiResource, id: &Id) -> bool {
        let Some(own) = self.owned.get(id) else {
            return true;
        };
        let api: Api<DynamicObject> =
            Api::namespaced_with(ctx.client.clone(), &id.1, &resource(id.0, import_ar));
        let dp = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(own.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&id.2, &dp).await {
            Ok(_) => {
                ctx.metrics.kube_write(id.0);
                self.owned.remove(id);
                true
            }
            // Gone already, or another object of that name now (not ours).
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                self.owned.remove(id);
                true
            }
            Err(e) => {
                tracing::warn!(kind = id.0, object = %format!("{}/{}", id.1, id.2), error = %e, "could not delete an imported object");
                false
            }
        }
    }

    /// Makes the imports what `desired` says; false when something failed
    /// that may work if tried again soon.
    pub async fn pass(
        &mut self,
        ctx: &Context,
        import_ar: &ApiResource,
        desired: &BTreeMap<Name, DesiredImport>,
    ) -> bool {
        if let Err(e) = self.list_owned(ctx, import_ar).await {
            tracing::warn!(error = %e, "could not list the imported objects; retrying");
            return false;
        }
        let me = ctx.cfg.cluster_name.clone();
        let version = import_ar.version.clone();
        let mut wanted: BTreeSet<Id> = BTreeSet::new();
        let mut ok = true;
        for ((ns, name), d) in desired {
            let at = (ns.as_str(), name.as_str());
            let derived = render::derived_service(&ctx.mark, &me, at, d);
            // The IP as last allocated: the import is written first, so an
            // import someone else owns stops the rest (no derived Service,
            // no slices for DNS to find under its name).
            let ip_of = |importer: &Importer, svc: &Option<Object>| -> Vec<String> {
                svc.as_ref()
                    .and_then(|s| {
                        importer
                            .owned
                            .get(&("Service", s.namespace.clone(), s.name.clone()))
                    })
                    .and_then(|own| own.cluster_ip.clone())
                    .into_iter()
                    .collect()
            };
            let mut ips = ip_of(self, &derived);
            let id: Id = ("ServiceImport", ns.clone(), name.clone());
            let import = render::service_import(&ctx.mark, &me, &version, at, d, &ips);
            let mut done = self.ensure(ctx, import_ar, &import).await;
            if matches!(done, Ensured::Foreign) {
                continue;
            }
            ok &= !retry(&done);
            wanted.insert(id.clone());
            if let Some(svc) = &derived {
                wanted.insert(("Service", svc.namespace.clone(), svc.name.clone()));
                let e = self.ensure(ctx, import_ar, svc).await;
                ok &= !retry(&e);
                let now = ip_of(self, &derived);
                if now != ips {
                    ips = now;
                    let import = render::service_import(&ctx.mark, &me, &version, at, d, &ips);
                    done = self.ensure(ctx, import_ar, &import).await;
                    ok &= !retry(&done);
                }
            }
            if let Ensured::Ours(own) = &done {
                let status = render::import_status(d);
                let clusters = status.pointer("/status/clusters").cloned();
                if own.status.as_ref().and_then(|s| s.get("clusters")).cloned() != clusters
                    && !self.write_status(ctx, import_ar, &id, &status).await
                {
                    ok = false;
                }
            }
            for s in &d.slices {
                let slice = render::endpoint_slice(&ctx.mark, &me, at, d.type_, s);
                wanted.insert(("EndpointSlice", slice.namespace.clone(), slice.name.clone()));
                let e = self.ensure(ctx, import_ar, &slice).await;
                ok &= !retry(&e);
            }
        }
        let stale: Vec<Id> = self
            .owned
            .keys()
            .filter(|id| !wanted.contains(*id))
            .cloned()
            .collect();
        for id in stale {
            ok &= self.remove(ctx, import_ar, &id).await;
        }
        self.refused.retain(|id, _| wanted.contains(id));
        self.foreign
            .retain(|id| wanted.contains(id) || id.0 == "ServiceImport");
        ok
    }

    async fn write_status(
        &mut self,
        ctx: &Context,
        import_ar: &ApiResource,
        id: &Id,
        status: &Value,
    ) -> bool {
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), &id.1, import_ar);
        match api
            .patch_status(&id.2, &PatchParams::default(), &Patch::Merge(status))
            .await
        {
            Ok(_) => {
                ctx.metrics.kube_write("ServiceImport");
                if let Some(own) = self.owned.get_mut(id) {
                    own.status = status.get("status").cloned();
                }
                true
            }
            Err(e) => {
                tracing::warn!(object = %format!("{}/{}", id.1, id.2), error = %e, "could not write a ServiceImport's status");
                false
            }
        }
    }
}
