//! Bundles unwrapped on a sink: a rule with `unwrap: true` turns each Bundle
//! envelope into one desired copy per manifest (`spec.manifests[]`), never
//! into a copy of the Bundle; what became of each manifest is kept for the
//! Bundle's report, and reports become `Bundle.status` on the origin.
//!
//! A manifest copy is an ordinary copy: the rule's mutations (templates see
//! `.Object` = the manifest), the usual stamp with `origin-uid` = the
//! Bundle's uid, plus `fleetbus.io/bundle: <ns>/<name>`. So drift detection,
//! conflicts and collection (a manifest removed, the Bundle deleted or no
//! longer selecting this cluster) are the sink's own, unchanged.

use std::collections::{BTreeMap, HashMap};

use fleetbus_schemas::crd::{
    BundleClusterStatus, BundleManifestStatus, BundleReport, BundleSpec, BundleStatus, SyncRule,
};
use fleetbus_schemas::envelope::{content_hash, Envelope};
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::ObjectKey;
use fleetbus_schemas::well_known;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::core::GroupVersionKind;
use serde_json::Value;

use super::bundle_state::{Manifest, Unwrapped};
use super::mutate::{self, CopyInput, MutateError};
use super::state::SinkState;
use crate::context::Context;
use crate::sync::model::meta::{
    annotations, annotations_mut, describe_gvk as describe, describe_key,
};
use crate::sync::model::{Candidate, Outcome, RuleReport, Target};
use crate::sync::rules::compile::CompiledRule;
use crate::sync::rules::matching;
use crate::sync::rules::template::TemplateContext;
use crate::sync::world::World;

/// Why one manifest of a Bundle is not applied.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The manifest is not a JSON object.
    #[error("the manifest is not an object")]
    NotAnObject,
    /// No non-empty string `apiVersion` or `kind`.
    #[error("the manifest has no apiVersion or kind")]
    MissingType,
    /// No non-empty string `metadata.name`.
    #[error("the manifest has no metadata.name")]
    MissingName,
    /// A fleetbus stamp only fleetbus may set (an origin there would hide the
    /// copy from collection).
    #[error("the manifest carries {0}, which only fleetbus sets")]
    Stamped(&'static str),
    /// A fleetbus kind (a rule, a Bundle, ...): whoever may write Bundles on
    /// the source would otherwise make live rules (or Bundles) on the targets.
    #[error("kind {0} is a fleetbus kind, which a Bundle may not carry")]
    FleetbusKind(String),
    /// Another manifest of the Bundle makes the same object.
    #[error("the same object as manifests[{0}]")]
    Duplicate(usize),
    /// The rule's `valuesFrom` cannot be read here.
    #[error("{0}")]
    Values(String),
    /// Discovery does not serve the kind here.
    #[error("kind {kind} is not served here: {why}")]
    NotServed {
        /// The kind.
        kind: String,
        /// What discovery said.
        why: String,
    },
    /// The kind's watch fails (e.g. the agent may not list it).
    #[error("cannot watch {kind}: {error}")]
    CannotWatch {
        /// The kind.
        kind: String,
        /// The watch's error.
        error: String,
    },
    /// The kind is being started (a CRD just applied, say): retried when listed.
    #[error("waiting for kind {0} to be served and listed")]
    Waiting(String),
    /// The rule's mutations or the stamp failed.
    #[error("cannot build the copy")]
    Mutate(#[source] MutateError),
}

impl ManifestError {
    /// Whether the manifest itself is wrong (counted as rejected input), as
    /// opposed to this cluster not being ready for it.
    fn is_invalid(&self) -> bool {
        !matches!(
            self,
            ManifestError::NotServed { .. }
                | ManifestError::CannotWatch { .. }
                | ManifestError::Waiting(_)
        )
    }
}

/// The Bundles of one sink pass, filled by `candidates` and by the outcomes.
#[derive(Debug, Default)]
pub struct BundlePass {
    bundles: BTreeMap<ObjectKey, Unwrapped>,
}

impl BundlePass {
    /// Records what became of the copy at `target` wanted by `key` (a no-op
    /// unless `key` is an unwrapped Bundle).
    pub fn record(&mut self, key: &ObjectKey, target: &Target, outcome: Result<(), String>) {
        let Some(b) = self.bundles.get_mut(key) else {
            return;
        };
        for m in &mut b.manifests {
            if m.target.as_ref() == Some(target) {
                m.status.applied = outcome.is_ok();
                m.status.error = outcome.as_ref().err().cloned();
            }
        }
    }
}

/// The result of one target's outcome, for [`BundlePass::record`].
pub fn outcome_result(outcome: &Outcome) -> Result<(), String> {
    match outcome {
        Outcome::InSync | Outcome::Wrote => Ok(()),
        Outcome::Conflict(c) => Err(c.message.clone()),
        Outcome::Failed(e) => Err(e.message.clone()),
        Outcome::Held(why) => Err(why.clone()),
    }
}

/// Where a kind goes in one pass's writes: Namespaces, CRDs, ServiceAccounts,
/// (Cluster)Roles, (Cluster)RoleBindings, then the rest, webhooks last (helm's
/// install order: what others need first; webhooks, which can refuse other
/// writes, after them).
pub fn install_rank(target: &Target) -> u8 {
    let group = target.gvk().group;
    match (group.as_str(), target.kind.as_str()) {
        ("", "Namespace") => 0,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => 1,
        ("", "ServiceAccount") => 2,
        ("rbac.authorization.k8s.io", "ClusterRole" | "Role") => 3,
        ("rbac.authorization.k8s.io", "ClusterRoleBinding" | "RoleBinding") => 4,
        (
            "admissionregistration.k8s.io",
            "MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration",
        ) => 6,
        _ => 5,
    }
}

/// `kind` of each manifest of a Bundle object (what the sink must watch).
pub fn manifest_kinds(bundle: &Value) -> Vec<GroupVersionKind> {
    let Some(manifests) = bundle.pointer("/spec/manifests").and_then(Value::as_array) else {
        return Vec::new();
    };
    manifests
        .iter()
        .filter_map(|m| {
            let s = |k: &str| m.get(k).and_then(Value::as_str).filter(|v| !v.is_empty());
            let (group, version) = fleetbus_schemas::subject::split_api_version(s("apiVersion")?);
            Some(GroupVersionKind::gvk(group, version, s("kind")?))
        })
        .collect()
}

/// Whether `group` is fleetbus's own (`fleetbus.io` or a subgroup of it):
/// manifests of those kinds are refused.
pub fn is_fleetbus_group(group: &str) -> bool {
    group == well_known::GROUP
        || group
            .strip_suffix(well_known::GROUP)
            .is_some_and(|g| g.ends_with('.'))
}

/// A Bundle version: the hash of its `spec` (not of `status`, which the
/// Bundle's own reports change).
pub fn spec_version(bundle: &Value) -> String {
    content_hash(bundle.get("spec").unwrap_or(&Value::Null))
}

/// What `unwrap` needs of one Bundle envelope.
pub struct BundleSource<'a> {
    /// The unwrap rule.
    pub rule: &'a CompiledRule,
    /// The Bundle's key on the bus.
    pub key: &'a ObjectKey,
    /// Its envelope.
    pub env: &'a Envelope,
    /// The Bundle object.
    pub bundle: &'a Value,
    /// The rule entries matching the Bundle (their mutations apply to each manifest).
    pub entries: &'a [&'a SyncRule],
    /// The origin cluster's record (templates' `.Cluster`).
    pub origin_record: &'a Value,
}

/// The manifest's `apiVersion`, `kind`, `namespace` and `name` as far as it has them.
fn describe_manifest(m: &Value) -> BundleManifestStatus {
    let s = |p: &str| {
        m.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    BundleManifestStatus {
        api_version: s("/apiVersion"),
        kind: s("/kind"),
        namespace: Some(s("/metadata/namespace")).filter(|n| !n.is_empty()),
        name: s("/metadata/name"),
        ..BundleManifestStatus::default()
    }
}

/// The desired copies of one Bundle's manifests (none when its own
/// `clusterSelector` excludes this cluster); each manifest's problem is
/// an error of the rule and of the manifest's entry, and the others go on.
pub(in crate::sync) fn unwrap(
    world: &World,
    ctx: &Context,
    src: &BundleSource<'_>,
    report: &mut RuleReport,
    pass: &mut BundlePass,
) -> Vec<(Target, Candidate)> {
    let mut out = Vec::new();
    let name = describe_key(src.key);
    let mut unwrapped = Unwrapped {
        rule: src.rule.name.clone(),
        error: None,
        manifests: Vec::new(),
        hash: spec_version(src.bundle),
        invalid: 0,
        waiting: false,
    };
    let spec = src.bundle.get("spec").cloned().unwrap_or(Value::Null);
    let spec = match serde_json::from_value::<BundleSpec>(spec) {
        Ok(spec) => spec,
        Err(e) => {
            let message = format!("the Bundle's spec does not parse: {e}");
            report.errors.insert(name, message.clone());
            unwrapped.error = Some(message);
            unwrapped.invalid = 1;
            pass.bundles.insert(src.key.clone(), unwrapped);
            return out;
        }
    };
    match matching::selector_matches(spec.cluster_selector.as_ref(), &world.fleet.local.labels) {
        Ok(true) => {}
        // Not for this cluster: nothing wanted, copies collected.
        Ok(false) => return out,
        Err(e) => {
            let message = format!("spec.clusterSelector: {}", crate::report(&e));
            report.errors.insert(name, message.clone());
            unwrapped.error = Some(message);
            unwrapped.invalid = 1;
            pass.bundles.insert(src.key.clone(), unwrapped);
            return out;
        }
    }
    let bundle_ref = format!(
        "{}/{}",
        src.key.namespace.as_deref().unwrap_or_default(),
        src.key.name
    );
    let created = src
        .bundle
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let mut seen: HashMap<Target, usize> = HashMap::new();
    for (i, manifest) in spec.manifests.iter().enumerate() {
        let mut status = describe_manifest(manifest);
        let built = prepare(world, manifest, src.key.namespace.as_deref())
            .and_then(|m| manifest_copy(world, ctx, src, &m, &bundle_ref))
            .and_then(|desired| match Target::of(&desired) {
                Some(t) => match seen.get(&t) {
                    Some(&j) => Err(ManifestError::Duplicate(j)),
                    None => Ok((t, desired)),
                },
                None => Err(ManifestError::MissingName),
            });
        match built {
            Ok((target, desired)) => {
                seen.insert(target.clone(), i);
                status.namespace = target.namespace.clone();
                status.name = target.name.clone();
                unwrapped.manifests.push(Manifest {
                    status,
                    target: Some(target.clone()),
                });
                out.push((
                    target,
                    Candidate {
                        rule: src.rule.name.clone(),
                        key: src.key.clone().into(),
                        created: created.to_owned(),
                        digest: crate::sync::digest::Digest::of_desired(&desired),
                        desired: crate::sync::model::Packed::new(&desired),
                        with_status: mutate::syncs_status(src.entries),
                        update: src.rule.spec.update_policy,
                        create_namespace: src.rule.spec.create_namespace,
                        published: src.env.time,
                    },
                ));
            }
            Err(e) => {
                let message = crate::report(&e);
                report
                    .errors
                    .insert(format!("{name} manifests[{i}]"), message.clone());
                unwrapped.waiting |= matches!(e, ManifestError::Waiting(_));
                if e.is_invalid() {
                    unwrapped.invalid += 1;
                    tracing::debug!(bundle = %name, manifest = i, error = %message, "invalid manifest");
                }
                status.error = Some(message);
                status.applied = false;
                unwrapped.manifests.push(Manifest {
                    status,
                    target: None,
                });
            }
        }
    }
    pass.bundles.insert(src.key.clone(), unwrapped);
    out
}

/// The manifest checked, with the Bundle's namespace when its kind is
/// namespaced and it names none.
fn prepare(
    world: &World,
    manifest: &Value,
    bundle_ns: Option<&str>,
) -> Result<Value, ManifestError> {
    if !manifest.is_object() {
        return Err(ManifestError::NotAnObject);
    }
    let kinds = manifest_kinds(&serde_json::json!({ "spec": { "manifests": [manifest] } }));
    let Some(gvk) = kinds.first() else {
        return Err(ManifestError::MissingType);
    };
    if is_fleetbus_group(&gvk.group) {
        return Err(ManifestError::FleetbusKind(describe(gvk)));
    }
    let name = manifest
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name.is_empty() {
        return Err(ManifestError::MissingName);
    }
    if let Some(a) = annotations(manifest) {
        let bundle = [well_known::ANNOTATION_BUNDLE];
        for stamp in mutate::STAMP_ANNOTATIONS.into_iter().chain(bundle) {
            if a.contains_key(stamp) {
                return Err(ManifestError::Stamped(stamp));
            }
        }
    }
    let Some(kind) = world.kinds.get(gvk) else {
        return Err(match world.unresolved.get(gvk) {
            Some(why) => ManifestError::NotServed {
                kind: describe(gvk),
                why: why.why.clone(),
            },
            None => ManifestError::Waiting(describe(gvk)),
        });
    };
    if let Some(e) = &kind.watch_error {
        return Err(ManifestError::CannotWatch {
            kind: describe(gvk),
            error: e.clone(),
        });
    }
    // Unlisted, a live copy would look absent (and be created again).
    if !kind.listed {
        return Err(ManifestError::Waiting(describe(gvk)));
    }
    let mut m = manifest.clone();
    let has_ns = m
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    if kind.namespaced && !has_ns {
        if let (Some(ns), Some(meta)) = (
            bundle_ns,
            m.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            meta.insert("namespace".to_owned(), Value::String(ns.to_owned()));
        }
    }
    Ok(m)
}

/// The desired copy of one (prepared) manifest: the rule's mutations, the
/// usual stamp (source hash = the manifest's own, so a change of another
/// manifest is no change of this copy), and the bundle annotation.
fn manifest_copy(
    world: &World,
    ctx: &Context,
    src: &BundleSource<'_>,
    manifest: &Value,
    bundle_ref: &str,
) -> Result<Value, ManifestError> {
    let templates = TemplateContext {
        object: manifest.clone(),
        cluster: src.origin_record.clone(),
        local_cluster: world.fleet.local.record.clone(),
        values: super::values::rule_values(world, &ctx.cfg.namespace, src.rule)
            .map_err(ManifestError::Values)?,
        // Unwrap rules have no placement.
        placement: Value::Null,
    };
    let hash = content_hash(manifest);
    let input = CopyInput {
        rule_name: &src.rule.name,
        spec: &src.rule.spec,
        entries: src.entries,
        source: manifest,
        origin: &src.key.origin,
        origin_uid: &src.env.uid,
        content_hash: &hash,
        templates: &templates,
        marker: &ctx.mark,
    };
    let mut desired = mutate::desired_copy(&input).map_err(ManifestError::Mutate)?;
    // desired_copy made the annotations a map of strings.
    if let Some(a) = annotations_mut(&mut desired) {
        a.insert(
            well_known::ANNOTATION_BUNDLE.to_owned(),
            Value::String(bundle_ref.to_owned()),
        );
    }
    Ok(desired)
}

/// Keeps what a sink pass found of the Bundles; invalid manifests are
/// counted once per Bundle version.
pub(in crate::sync) fn finish_bundles(sink: &mut SinkState, ctx: &Context, pass: BundlePass) {
    for (key, b) in &pass.bundles {
        let version = (key.clone(), b.hash.clone());
        if b.invalid > 0 && !sink.bundles_counted.contains(&version) {
            tracing::warn!(bundle = %describe_key(key), invalid = b.invalid, "Bundle with invalid manifests; the others are applied");
            for _ in 0..b.invalid {
                ctx.metrics.sync_rejected("invalid_manifest");
            }
            sink.bundles_counted.insert(version);
        }
    }
    sink.bundles_counted
        .retain(|(key, hash)| pass.bundles.get(key).is_some_and(|b| &b.hash == hash));
    sink.bundles = pass.bundles;
}

/// Whether a [`BundleReport`] (JSON) says ready: no error of the Bundle, and
/// every manifest applied and ready.
pub fn report_is_ready(report: &Value) -> bool {
    serde_json::from_value::<BundleReport>(report.clone()).is_ok_and(|r| {
        r.error.is_none()
            && r.manifests
                .iter()
                .all(|m| m.applied && m.ready == Some(true))
    })
}

/// A [`BundleReport`] (JSON) cut to fit the bus: only the manifests not
/// applied, in error or not ready, plus a message saying how many were
/// omitted. Readiness is unchanged (every omitted manifest was applied and
/// ready). `None` when it is no Bundle report.
pub fn truncated_report(report: &Value) -> Option<Value> {
    let mut r = serde_json::from_value::<BundleReport>(report.clone()).ok()?;
    let total = r.manifests.len();
    r.manifests
        .retain(|m| !m.applied || m.error.is_some() || m.ready != Some(true));
    r.message = Some(format!(
        "report too large for the bus: {} of {total} manifests (applied and ready) omitted",
        total - r.manifests.len()
    ));
    serde_json::to_value(r).ok()
}

/// Up to this many manifests, a cluster's entry of `Bundle.status` lists
/// every manifest; beyond, only those not applied, failing or not ready.
pub const MANIFESTS_LISTED_IN_FULL: usize = 32;

/// A cluster's [`BundleReport`] as its entry of `Bundle.status`.
fn cluster_status(r: &ReportedStatus) -> BundleClusterStatus {
    let observed_at = Some(time(r.observed_at));
    match serde_json::from_value::<BundleReport>(r.status.clone()) {
        Ok(report) => {
            let applied = report.manifests.iter().filter(|m| m.applied).count();
            let errors = report
                .manifests
                .iter()
                .filter(|m| m.error.is_some())
                .count();
            let ready = report_is_ready(&r.status);
            let total = report.manifests.len();
            let mut manifests = report.manifests;
            let mut message = report.error.or(report.message);
            // Status grows with clusters × manifests and lives in the
            // Bundle itself (object size limit, and the Bundle's envelope):
            // beyond a small Bundle only what needs attention is listed.
            if total > MANIFESTS_LISTED_IN_FULL {
                manifests.retain(|m| !m.applied || m.error.is_some() || m.ready != Some(true));
                let omitted = total - manifests.len();
                if omitted > 0 && message.is_none() {
                    message = Some(format!(
                        "{omitted} of {total} manifests applied and ready (not listed)"
                    ));
                }
            }
            BundleClusterStatus {
                cluster: r.cluster.clone(),
                ready,
                applied: i64::try_from(applied).unwrap_or(i64::MAX),
                errors: i64::try_from(errors).unwrap_or(i64::MAX),
                message,
                observed_at,
                manifests,
            }
        }
        Err(e) => BundleClusterStatus {
            cluster: r.cluster.clone(),
            message: Some(format!("unreadable report: {e}")),
            observed_at,
            ..BundleClusterStatus::default()
        },
    }
}

fn time(t: chrono::DateTime<chrono::Utc>) -> Time {
    let ts = k8s_openapi::jiff::Timestamp::from_second(t.timestamp())
        .unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    Time(ts)
}

/// `Bundle.status` on the origin from the clusters' reports of it: one entry
/// per cluster with a live report (a null report means the cluster no
/// longer unwraps it; of several reports by one cluster the newest counts),
/// `summary` `<ready>/<clusters> ready`, and condition Ready, True when at
/// least one cluster reports and every one applied every manifest and all
/// are ready. Its `lastTransitionTime` is the newest report's time: a writer
/// that keeps an unchanged condition's time (see `kube::conditions::merge`)
/// keeps a steady status steady.
pub fn status_from_reports(reports: &[&ReportedStatus]) -> BundleStatus {
    let mut newest: BTreeMap<&str, &ReportedStatus> = BTreeMap::new();
    for r in reports.iter().filter(|r| !r.status.is_null()) {
        let slot = newest.entry(r.cluster.as_str()).or_insert(r);
        if r.observed_at > slot.observed_at {
            *slot = r;
        }
    }
    let clusters: Vec<BundleClusterStatus> = newest.values().map(|r| cluster_status(r)).collect();
    let ready = clusters.iter().filter(|c| c.ready).count();
    let total = clusters.len();
    let not_ready: Vec<&str> = clusters
        .iter()
        .filter(|c| !c.ready)
        .map(|c| c.cluster.as_str())
        .collect();
    let (status, reason, message) = if total == 0 {
        (
            "False",
            "NoClusters",
            "no cluster applies the Bundle".to_owned(),
        )
    } else if not_ready.is_empty() {
        (
            "True",
            "Ready",
            format!("every manifest is applied and ready on {total} cluster(s)"),
        )
    } else {
        (
            "False",
            "NotReady",
            format!("not ready on {}", not_ready.join(", ")),
        )
    };
    let when = newest
        .values()
        .map(|r| r.observed_at)
        .max()
        .map_or_else(crate::kube::conditions::now_seconds, time);
    BundleStatus {
        conditions: vec![Condition {
            type_: well_known::condition::READY.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: crate::kube::conditions::bounded(&message),
            last_transition_time: when,
            observed_generation: None,
        }],
        summary: Some(format!("{ready}/{total} ready")),
        clusters,
    }
}

#[cfg(test)]
mod tests;
