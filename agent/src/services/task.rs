//! The multi-cluster Services task: one loop that folds this cluster's
//! ServiceExports, Services, EndpointSlices, Namespaces and SyncPolicy
//! (watches) and every cluster's export records (the SERVICES stream) into
//! its state, then runs the export side (`export`) over the Services that
//! changed and the import side (`plan::imports`, `import`) when anything an
//! import depends on did. Inactive, and said once, until the ServiceExport
//! CRD is served.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use fleetbus_schemas::crd::SyncPolicy;
use fleetbus_schemas::multicluster::{ExportKey, ExportRecord, MCS_GROUP, MCS_VERSIONS};
use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject};
use kube::core::GroupVersionKind;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use tokio::sync::mpsc;
use tokio::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use super::export::{self, Exporter};
use super::import::Importer;
use super::mirror::Mirror;
use super::plan::{self, ImportInputs, Name, Reach};
use crate::registry::{FleetHealth, FleetView, Registry};
use crate::sync::inputs::follow::{follow, signed_by, Follow};
use crate::sync::model::Feed;
use crate::sync::policy::{in_force, Policy};

/// The ServiceExport CRD's name, for messages and the missing-CRD metric.
pub const EXPORT_CRD: &str = "serviceexports.multicluster.x-k8s.io";
/// How often a missing CRD is looked for.
const LOOK_AGAIN: Duration = Duration::from_secs(5);
/// The least time between two import passes: a burst of endpoint changes
/// from every exporter is answered by one.
const MIN_IMPORT_PASS: Duration = Duration::from_millis(200);
/// Most live exports held per exporting cluster: what a member making up
/// names can cost every other agent's memory and import passes.
const MAX_EXPORTS_PER_CLUSTER: usize = 10_000;
/// After a failed import pass.
const RETRY: Duration = Duration::from_secs(2);

/// The ServiceExport and ServiceImport resources in the first version the
/// cluster serves (v1beta1, the storage version, else v1alpha1).
async fn served(client: &kube::Client) -> Result<Option<(ApiResource, ApiResource)>, kube::Error> {
    for version in MCS_VERSIONS {
        let gvk = GroupVersionKind::gvk(MCS_GROUP, version, "ServiceExport");
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((export, _)) => {
                let gvk = GroupVersionKind::gvk(MCS_GROUP, version, "ServiceImport");
                let (import, _) = kube::discovery::pinned_kind(client, &gvk).await?;
                return Ok(Some((export, import)));
            }
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

/// Everything the loop folds in.
#[derive(Default)]
struct State {
    exports: Mirror<DynamicObject>,
    services: Mirror<Service>,
    slices: Mirror<EndpointSlice>,
    namespaces: Mirror<Namespace>,
    policies: Mirror<DynamicObject>,
    policy: Policy,
    records: BTreeMap<ExportKey, ExportRecord>,
    /// The highest revision read per key: an older record is a replay.
    highest: BTreeMap<ExportKey, u64>,
    caught_up: bool,
    /// Services whose export must be looked at.
    export_dirty: BTreeSet<Name>,
    import_dirty: bool,
}

impl State {
    /// How many live exports of `cluster` are held.
    fn exports_of(&self, cluster: &str) -> usize {
        let from = ExportKey {
            cluster: cluster.to_owned(),
            namespace: String::new(),
            name: String::new(),
        };
        self.records
            .range(from..)
            .take_while(|(k, _)| k.cluster == cluster)
            .count()
    }

    fn local_listed(&self) -> bool {
        self.exports.listed
            && self.services.listed
            && self.slices.listed
            && self.namespaces.listed
            && self.policies.listed
    }

    /// A bus event: records are kept unless older than what was read.
    fn feed(&mut self, ctx: &crate::context::Context, ev: Feed<ExportKey, ExportRecord>) {
        match ev {
            Feed::Reset => {
                self.records.clear();
                self.caught_up = false;
            }
            Feed::CaughtUp => {
                self.caught_up = true;
                // Every export of ours on the bus is looked at: one whose
                // ServiceExport went while the agent was down is withdrawn.
                let me = &ctx.cfg.cluster_name;
                let ours = self.records.keys().filter(|k| &k.cluster == me);
                self.export_dirty
                    .extend(ours.map(|k| (k.namespace.clone(), k.name.clone())));
                self.export_dirty.extend(self.exports.map.keys().cloned());
            }
            Feed::Item(key, rec) => {
                if self.highest.get(&key).is_some_and(|h| rec.revision < *h) {
                    ctx.metrics.mcs_event("replayed");
                    return;
                }
                if rec.withdrawn {
                    // Nothing to import; the revision is kept, so an older
                    // live record replayed over it is still refused.
                    self.highest.insert(key.clone(), rec.revision);
                    self.records.remove(&key);
                    self.import_dirty = true;
                    return;
                }
                if !self.records.contains_key(&key)
                    && self.exports_of(&key.cluster) >= MAX_EXPORTS_PER_CLUSTER
                {
                    ctx.metrics.mcs_event("over_limit");
                    if let Some(held_back) = REFUSED.admit(&format!("{}/over_limit", key.cluster)) {
                        tracing::warn!(exporter = %key.cluster, limit = MAX_EXPORTS_PER_CLUSTER, held_back, "not importing more Services from this cluster: it exports more than the limit");
                    }
                    return;
                }
                self.highest.insert(key.clone(), rec.revision);
                // Another cluster's export of a name this one exports may
                // change its Conflict condition.
                let name = (key.namespace.clone(), key.name.clone());
                if self.exports.map.contains_key(&name) {
                    self.export_dirty.insert(name);
                }
                self.records.insert(key, *rec);
            }
            Feed::Unreadable(key) => {
                self.records.remove(&key);
            }
        }
        self.import_dirty = true;
    }
}

/// How an exporter is reached, from the registry's view and health.
fn reach(local: &str, fleet: &FleetView, health: &FleetHealth, cluster: &str) -> Reach {
    if cluster == local {
        return Reach::Ready;
    }
    match fleet.peers.get(cluster) {
        None => Reach::Gone,
        Some(p) if p.left || p.disabled || p.name_conflict => Reach::Gone,
        Some(_) => match health.get(cluster).map(|h| h.state) {
            Some("Disconnected") => Reach::Unreachable,
            _ => Reach::Ready,
        },
    }
}

/// Decodes one record on the SERVICES stream; the reason is the metric
/// label when it is skipped.
fn decode(
    prefix: &fleetbus_schemas::subject::Prefix,
    subject: &str,
    payload: &[u8],
) -> Result<(ExportKey, ExportRecord), &'static str> {
    let key = ExportKey::parse_subject(prefix, subject)
        .ok()
        .filter(ExportKey::is_valid)
        .ok_or("svc_bad_subject")?;
    let rec = ExportRecord::decode(payload).map_err(|e| match e {
        fleetbus_schemas::DecodeError::UnsupportedVersion { .. } => "svc_unsupported_version",
        _ => "svc_malformed",
    })?;
    rec.validate().map_err(|_| "svc_malformed")?;
    // A revision from far in the future would make every later record of
    // the key look like a replay.
    let horizon = chrono::Utc::now()
        .timestamp_millis()
        .saturating_add(86_400_000);
    if u64::try_from(horizon).is_ok_and(|h| rec.revision > h) {
        return Err("svc_malformed");
    }
    Ok((key, rec))
}

/// Waits until the MCS API is served (said once while it is not, and in
/// `fleetbus_standard_crd_missing`); None when cancelled first.
async fn wait_served(
    ctx: &crate::context::Context,
    cancel: &CancellationToken,
) -> Option<(ApiResource, ApiResource)> {
    let mut said_missing = false;
    loop {
        let found = served(&ctx.client).await;
        ctx.metrics
            .standard_crd_missing
            .get_or_create(&vec![("crd", EXPORT_CRD)])
            .set(i64::from(!matches!(found, Ok(Some(_)))));
        match found {
            Ok(Some(ars)) => {
                if said_missing {
                    tracing::info!(
                        "the CRD {EXPORT_CRD} is served now: multi-cluster Services are active"
                    );
                }
                return Some(ars);
            }
            Ok(None) if !said_missing => {
                said_missing = true;
                tracing::warn!(
                    crd = EXPORT_CRD,
                    "the MCS API CRDs (ServiceExport, ServiceImport) are not installed: multi-cluster Services are inactive; install them from upstream (see the README, \"Multi-cluster Services\"); looking again every {}s",
                    LOOK_AGAIN.as_secs()
                );
            }
            Ok(None) => {}
            Err(e) => tracing::debug!(error = %e, "could not discover the MCS API"),
        }
        tokio::select! {
            _ = cancel.cancelled() => return None,
            _ = tokio::time::sleep(LOOK_AGAIN) => {}
        }
    }
}

/// Follows every cluster's export records (last per subject, then live
/// ones), checked as every reader checks: the key, the record's bounds, and
/// in the secure mode the signature of the cluster the subject names.
fn follow_records(
    ctx: Arc<crate::context::Context>,
    cancel: CancellationToken,
) -> (
    tokio::task::JoinHandle<()>,
    mpsc::Receiver<Feed<ExportKey, ExportRecord>>,
) {
    let (tx, rx) = mpsc::channel(1024);
    let task = tokio::spawn(async move {
        let f = Follow {
            stream: ctx.layout.services_stream().name,
            filter: fleetbus_schemas::multicluster::all_exports(ctx.layout.prefix()),
            what: "service exports",
            decode: {
                let ctx = ctx.clone();
                Box::new(move |prefix, subject, payload| {
                    let (key, rec) = decode(prefix, subject, payload)?;
                    signed_by(&ctx, &key.cluster, subject, payload)?;
                    Ok((key, rec))
                })
            },
            key_of: |prefix, subject| ExportKey::parse_subject(prefix, subject).ok(),
            input: Box::new(|f| f),
        };
        follow(ctx, f, tx, cancel).await;
    });
    (task, rx)
}

type Watch<K> = BoxStream<'static, Result<watcher::Event<K>, watcher::Error>>;

/// The local watches the task folds in.
struct Watches {
    exports: Watch<DynamicObject>,
    services: Watch<Service>,
    /// Not our own imports (written, not exported), nor a rule's copies:
    /// only this cluster's own endpoints are exported.
    slices: Watch<EndpointSlice>,
    namespaces: Watch<Namespace>,
    /// The SyncPolicy `default`, as a whole object: `policy::in_force`
    /// judges it (a typed read would drop the unknown fields it refuses).
    policies: Watch<DynamicObject>,
}

fn watches(ctx: &crate::context::Context, export_ar: &ApiResource) -> Watches {
    use crate::kube::fresh_watch::watch;
    let (kc, c) = (&ctx.kube_config, || ctx.client.clone());
    let all = watcher::Config::default;
    let export_ar = export_ar.clone();
    let policy_ar = ApiResource::erase::<SyncPolicy>(&());
    let slices = all().labels(&format!(
        "{}!={},{}!=true",
        fleetbus_schemas::multicluster::LABEL_MANAGED_BY,
        fleetbus_schemas::multicluster::MANAGED_BY,
        fleetbus_schemas::well_known::LABEL_MANAGED,
    ));
    let policy = all().fields(&format!(
        "metadata.name={}",
        fleetbus_schemas::crd::SYNC_POLICY_NAME
    ));
    Watches {
        exports: watch(
            "service exports",
            kc,
            c(),
            move |c| Api::all_with(c, &export_ar),
            all(),
        )
        .boxed(),
        services: watch("services (mcs)", kc, c(), Api::<Service>::all, all()).boxed(),
        slices: watch(
            "endpoint slices (mcs)",
            kc,
            c(),
            Api::<EndpointSlice>::all,
            slices,
        )
        .boxed(),
        namespaces: watch("namespaces (mcs)", kc, c(), Api::<Namespace>::all, all()).boxed(),
        policies: watch(
            "sync policy (mcs)",
            kc,
            c(),
            move |c| Api::all_with(c, &policy_ar),
            policy,
        )
        .boxed(),
    }
}

/// What this cluster imports now; refusals are counted and logged.
fn import_plan(
    ctx: &crate::context::Context,
    st: &State,
    view: &FleetView,
    health: &FleetHealth,
) -> BTreeMap<Name, plan::DesiredImport> {
    let me = ctx.cfg.cluster_name.clone();
    let reach = |c: &str| reach(&me, view, health, c);
    // A namespace being deleted takes no new objects.
    let names: BTreeSet<String> = st
        .namespaces
        .map
        .iter()
        .filter(|(_, n)| n.metadata.deletion_timestamp.is_none())
        .map(|((_, name), _)| name.clone())
        .collect();
    let (desired, refused) = plan::imports(&ImportInputs {
        local: &me,
        records: &st.records,
        reach: &reach,
        namespaces: &names,
        policy: &st.policy,
    });
    for r in &refused {
        ctx.metrics.mcs_event(if r.reason == "policy" {
            "refused_policy"
        } else {
            "refused_forbidden"
        });
        if let Some(held_back) = REFUSED.admit(&format!("{}/{}", r.key.cluster, r.reason)) {
            tracing::warn!(exporter = %r.key.cluster, service = %format!("{}/{}", r.key.namespace, r.key.name), why = %r.why, held_back, "not importing a multi-cluster Service");
        }
    }
    desired
}

impl State {
    /// Folds one local watch event in.
    fn local(&mut self, ev: Local) {
        match ev {
            Local::Export(ev) => {
                for o in self.exports.apply(ev) {
                    self.export_dirty
                        .insert((o.namespace().unwrap_or_default(), o.name_any()));
                }
            }
            Local::Service(ev) => {
                for o in self.services.apply(*ev) {
                    self.export_dirty
                        .insert((o.namespace().unwrap_or_default(), o.name_any()));
                }
            }
            Local::Slice(ev) => {
                for o in self.slices.apply(ev) {
                    if let Some(svc) = o.labels().get(super::render::LABEL_KUBE_SERVICE_NAME) {
                        self.export_dirty
                            .insert((o.namespace().unwrap_or_default(), svc.clone()));
                    }
                }
            }
            Local::Namespace(ev) => {
                self.namespaces.apply(ev);
                self.import_dirty = true;
            }
            Local::Policy(ev) => {
                self.policies.apply(ev);
                let obj = self
                    .policies
                    .map
                    .values()
                    .next()
                    .and_then(|o| serde_json::to_value(o).ok());
                self.policy = in_force(&self.policy, obj.as_ref());
                self.import_dirty = true;
            }
        }
    }
}

/// One local watch event.
enum Local {
    Export(watcher::Event<DynamicObject>),
    Service(Box<watcher::Event<Service>>),
    Slice(watcher::Event<EndpointSlice>),
    Namespace(watcher::Event<Namespace>),
    Policy(watcher::Event<DynamicObject>),
}

/// Runs until `cancel`.
#[tracing::instrument(name = "services", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) {
    let ctx = reg.ctx.clone();
    let Some((export_ar, import_ar)) = wait_served(&ctx, &cancel).await else {
        return;
    };
    let (follower, mut bus) = follow_records(ctx.clone(), cancel.clone());
    let mut w = watches(&ctx, &export_ar);
    let mut fleet = reg.fleet();
    let mut health = reg.health();
    let mut st = State::default();
    let mut exporter = Exporter::default();
    let mut importer = Importer::default();
    let mut wake: Option<Instant> = None;
    let mut last_import: Option<Instant> = None;
    let never = || Instant::now() + Duration::from_secs(3600);
    loop {
        // Watch errors are the watcher's to recover from (it lists again).
        tokio::select! {
            _ = cancel.cancelled() => break,
            Some(Ok(ev)) = w.exports.next() => st.local(Local::Export(ev)),
            Some(Ok(ev)) = w.services.next() => st.local(Local::Service(Box::new(ev))),
            Some(Ok(ev)) = w.slices.next() => st.local(Local::Slice(ev)),
            Some(Ok(ev)) = w.namespaces.next() => st.local(Local::Namespace(ev)),
            Some(Ok(ev)) = w.policies.next() => st.local(Local::Policy(ev)),
            Some(ev) = bus.recv() => st.feed(&ctx, ev),
            changed = fleet.changed() => {
                if changed.is_err() { break; }
                st.import_dirty = true;
            }
            changed = health.changed() => {
                if changed.is_err() { break; }
                st.import_dirty = true;
            }
            _ = tokio::time::sleep_until(wake.unwrap_or_else(never)) => {
                wake = None;
                st.import_dirty = true;
            }
        }
        if !st.caught_up || !st.local_listed() {
            continue;
        }
        let view = fleet.borrow().clone();
        let h = health.borrow().clone();
        if !st.export_dirty.is_empty() {
            let local = export::Local {
                exports: &st.exports,
                services: &st.services,
                slices: &st.slices,
            };
            let me = ctx.cfg.cluster_name.clone();
            let reach = |c: &str| reach(&me, &view, &h, c);
            let next = export::pass(
                &ctx,
                &export_ar,
                &mut exporter,
                &local,
                (&mut st.records, &reach),
                &mut st.export_dirty,
            )
            .await;
            // What it published comes back through the bus feed, which
            // marks the imports dirty: nothing to do here.
            wake = min(wake, next);
        }
        if !st.import_dirty || !view.synced {
            continue;
        }
        if let Some(at) = last_import
            .map(|t| t + MIN_IMPORT_PASS)
            .filter(|t| *t > Instant::now())
        {
            wake = min(wake, Some(at));
            continue;
        }
        st.import_dirty = false;
        last_import = Some(Instant::now());
        let desired = import_plan(&ctx, &st, &view, &h);
        if !importer.pass(&ctx, &import_ar, &desired).await {
            st.import_dirty = true;
            wake = min(wake, Some(Instant::now() + RETRY));
        }
        // Nothing watches what imports wrote: a pass every RESYNC lists it
        // again and writes back what someone deleted.
        wake = min(wake, Some(Instant::now() + super::import::RESYNC));
    }
    follower.abort();
}

/// One "not importing" line per exporter and reason a minute.
static REFUSED: crate::log_gate::LogGate = crate::log_gate::LogGate::new(Duration::from_secs(60));

fn min(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ctx_free_record(revision: u64, withdrawn: bool) -> ExportRecord {
        ExportRecord {
            exported_at: "2026-01-01T00:00:00Z".parse().unwrap(),
            withdrawn,
            type_: fleetbus_schemas::multicluster::ImportType::Headless,
            ports: vec![],
            session_affinity: None,
            slices: vec![],
            truncated: 0,
            revision,
        }
    }

    #[test]
    fn live_exports_are_counted_per_cluster() {
        let mut st = State::default();
        for (c, n) in [("a", "x"), ("b", "x"), ("b", "y"), ("c", "x")] {
            st.records.insert(
                ExportKey {
                    cluster: c.into(),
                    namespace: "ns".into(),
                    name: n.into(),
                },
                ctx_free_record(1, false),
            );
        }
        assert_eq!(st.exports_of("b"), 2);
        assert_eq!(st.exports_of("a"), 1);
        assert_eq!(st.exports_of("d"), 0);
    }

    #[test]
    fn garbage_and_records_under_foreign_subjects_are_refused() {
        let p = fleetbus_schemas::subject::Prefix::default();
        assert_eq!(
            decode(&p, "fleetbus.svc.a.b", b"{}").unwrap_err(),
            "svc_bad_subject"
        );
        assert_eq!(
            decode(&p, "fleetbus.svc.a.ns.n", b"nope").unwrap_err(),
            "svc_malformed"
        );
        assert_eq!(
            decode(
                &p,
                "fleetbus.svc.a.ns.n",
                br#"{"schema":"fleetbus.io/service-export/v2"}"#
            )
            .unwrap_err(),
            "svc_unsupported_version"
        );
        let bad = br#"{"schema":"fleetbus.io/service-export/v1","exportedAt":"2026-01-01T00:00:00.000Z","type":"ClusterSetIP","ports":[{"port":0}],"revision":1}"#;
        assert_eq!(
            decode(&p, "fleetbus.svc.a.ns.n", bad).unwrap_err(),
            "svc_malformed"
        );
        let good = br#"{"schema":"fleetbus.io/service-export/v1","exportedAt":"2026-01-01T00:00:00.000Z","type":"Headless","ports":[{"port":80}],"revision":1}"#;
        assert_eq!(
            decode(&p, "fleetbus.svc.a.ns.n", good).unwrap().0.cluster,
            "a"
        );
    }
}
