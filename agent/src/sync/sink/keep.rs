//! Ownership before deletion: whether deleting a copy would take objects
//! fleetbus does not manage with it, which then keeps the copy (handed over,
//! reported) instead of deleting it (see `collect`).
//!
//! Kubernetes cascades a delete without asking the victims in two cases: a
//! Namespace takes everything in it, a CustomResourceDefinition every
//! instance of its kind. Those are checked here, for every kind discovery
//! serves. A dependent through `ownerReferences` is not checked: it names
//! the copy's uid (which exists only on this cluster) and so asked itself to
//! go with it; it is a Deployment copy's ReplicaSets and Pods, which must go
//! (an Orphan propagation would leave them running with nothing to own them).

use std::collections::BTreeSet;

use kube::api::{Api, ApiResource, DynamicObject, ListParams, ObjectMeta};
use kube::core::GroupVersionKind;
use kube::discovery::{verbs, Discovery, Scope};
use serde_json::Value;

use crate::mark::CopyMark;

/// A copy kept instead of deleted, reported while it is still there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptCopy {
    /// The rule that made it.
    pub rule: String,
    /// Its uid: the object kept, not a later one of the same name.
    pub uid: String,
    /// Why, and how to finish by hand.
    pub message: String,
}

/// A kind whose deletion takes other objects with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cascade {
    /// A Namespace: everything in it.
    Namespace,
    /// A CustomResourceDefinition: every object of its kind.
    Crd,
}

impl Cascade {
    /// Whether deleting an object of kind `gvk` cascades, and how.
    pub fn of(gvk: &GroupVersionKind) -> Option<Cascade> {
        match (gvk.group.as_str(), gvk.kind.as_str()) {
            ("", "Namespace") => Some(Cascade::Namespace),
            ("apiextensions.k8s.io", "CustomResourceDefinition") => Some(Cascade::Crd),
            _ => None,
        }
    }
}

/// One object that would go with the copy, as a list saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dependent {
    /// Its resource as kubectl names it: `configmaps`, `gizmos.example.com`.
    pub resource: String,
    /// Its namespace (None: cluster-scoped).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid.
    pub uid: String,
    /// The uids its ownerReferences name.
    pub owners: Vec<String>,
    /// It is a copy this cluster's agent wrote (its mark verifies).
    pub copy: bool,
}

impl Dependent {
    /// `meta` of kind `ar`: a copy only if this cluster's agent marked it
    /// (`model::mark`): a look-alike in a copied namespace is a local object,
    /// and keeps the namespace.
    fn of(ar: &ApiResource, meta: &ObjectMeta, marker: &CopyMark) -> Dependent {
        let whole = serde_json::json!({
            "apiVersion": ar.api_version,
            "kind": ar.kind,
            "metadata": meta,
        });
        Dependent {
            resource: resource_name(ar),
            namespace: meta.namespace.clone(),
            name: meta.name.clone().unwrap_or_default(),
            uid: meta.uid.clone().unwrap_or_default(),
            owners: meta
                .owner_references
                .iter()
                .flatten()
                .map(|o| o.uid.clone())
                .collect(),
            copy: marker.copy_origin(&whole).is_some(),
        }
    }

    /// `resource ns/name`, as a message names it.
    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.resource, self.name),
            None => format!("{} {}", self.resource, self.name),
        }
    }
}

/// Why the check could not be made (the copy is then not deleted).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    /// Discovery of the served kinds failed.
    #[error("failed to discover the kinds the API server serves")]
    Discovery(#[source] kube::Error),
    /// Listing one resource failed (e.g. forbidden to the agent).
    #[error("failed to list {resource}")]
    List {
        /// The resource.
        resource: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// The CRD copy names no group, plural or served version.
    #[error("the CustomResourceDefinition names no group, plural or served version")]
    Crd,
}

impl CheckError {
    /// Whether trying again later can help (else the copy is kept for good).
    pub fn is_transient(&self) -> bool {
        match self {
            CheckError::Discovery(e) | CheckError::List { source: e, .. } => {
                crate::kube::client::is_transient(e)
            }
            CheckError::Crd => false,
        }
    }
}

/// What Kubernetes itself puts in every namespace (kube-controller-manager's
/// root CA publisher and ServiceAccount controller): it goes with the
/// namespace and is made again in a new one, so nobody loses it.
fn made_by_kubernetes(d: &Dependent) -> bool {
    matches!(
        (d.resource.as_str(), d.name.as_str()),
        ("configmaps", "kube-root-ca.crt") | ("serviceaccounts", "default")
    )
}

/// Records about objects, not objects anyone owns (Events, fleetbus's own
/// about its copies included): never counted.
fn is_record(ar: &ApiResource) -> bool {
    ar.plural == "events" && (ar.group.is_empty() || ar.group == "events.k8s.io")
}

/// The objects among `found` fleetbus does not manage and Kubernetes did not
/// make by itself, as `resource ns/name`, sorted. An object owned through
/// ownerReferences (at any depth) by a copy is the copy's own (a copied
/// Deployment's ReplicaSets and their Pods) and does not count either.
pub fn unmanaged(found: &[Dependent]) -> Vec<String> {
    let mut owned: BTreeSet<&str> = found
        .iter()
        .filter(|d| d.copy)
        .map(|d| d.uid.as_str())
        .collect();
    // Owners before dependents is not guaranteed by any list order: grow the
    // set until it stops growing (each round adds at least one object).
    loop {
        let before = owned.len();
        for d in found {
            if !owned.contains(d.uid.as_str())
                && d.owners.iter().any(|o| owned.contains(o.as_str()))
            {
                owned.insert(d.uid.as_str());
            }
        }
        if owned.len() == before {
            break;
        }
    }
    let mut out: Vec<String> = found
        .iter()
        .filter(|d| !owned.contains(d.uid.as_str()) && !made_by_kubernetes(d))
        .map(Dependent::describe)
        .collect();
    out.sort();
    out
}

/// The copy a message is about.
#[derive(Debug, Clone, Copy)]
pub struct CopyRef<'a> {
    /// As the log and status show it (`Namespace ab`).
    pub shown: &'a str,
    /// Its resource as kubectl names it (`namespaces`).
    pub resource: &'a str,
    /// Its namespace, if namespaced.
    pub namespace: Option<&'a str>,
    /// Its name.
    pub name: &'a str,
}

/// What an operator reads when a copy is kept: what would have gone with
/// it, that fleetbus let it go, and the command that finishes by hand.
pub fn kept_message(copy: &CopyRef<'_>, why: &Why) -> String {
    let what = match why {
        Why::Unmanaged(found) => {
            const NAMED: usize = 5;
            let mut named: Vec<String> = found.iter().take(NAMED).cloned().collect();
            if found.len() > NAMED {
                named.push(format!("and {} more", found.len() - NAMED));
            }
            format!(
                "deleting it would delete {} object(s) fleetbus does not manage ({})",
                found.len(),
                named.join(", ")
            )
        }
        Why::Unchecked(e) => format!(
            "fleetbus could not check what deleting it would delete ({e}), and deletes nothing it cannot check"
        ),
    };
    let mut cmd = format!("kubectl delete {} {}", copy.resource, copy.name);
    if let Some(ns) = copy.namespace {
        cmd.push_str(&format!(" -n {ns}"));
    }
    format!(
        "{} kept instead of deleted: {what}; it is no longer managed by fleetbus. To delete it anyway: {cmd}",
        copy.shown
    )
}

/// Why a copy is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// These objects fleetbus does not manage would go with it.
    Unmanaged(Vec<String>),
    /// The check failed for good (the error, reported).
    Unchecked(String),
}

/// Every namespaced resource discovery serves that a namespace deletion
/// removes (listable and deletable; Events aside), each once at its most
/// stable version (kube's namespace controller asks for the server's
/// preferred resources likewise).
pub async fn namespaced_resources(client: &kube::Client) -> Result<Vec<ApiResource>, CheckError> {
    let discovery = Discovery::new(client.clone())
        .run()
        .await
        .map_err(CheckError::Discovery)?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.resources_by_stability() {
            let deletable = caps.supports_operation(verbs::DELETE)
                || caps.supports_operation(verbs::DELETE_COLLECTION);
            if caps.scope == Scope::Namespaced
                && caps.supports_operation(verbs::LIST)
                && deletable
                && !is_record(&ar)
            {
                out.push(ar);
            }
        }
    }
    Ok(out)
}

/// Everything in namespace `ns` of the `resources` (see [`namespaced_resources`]).
pub async fn namespace_contents(
    client: &kube::Client,
    marker: &CopyMark,
    resources: &[ApiResource],
    ns: &str,
) -> Result<Vec<Dependent>, CheckError> {
    let mut out = Vec::new();
    for ar in resources {
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar);
        list_into(&api, ar, marker, &mut out).await?;
    }
    Ok(out)
}

/// Every object, in every namespace, of the kind the CRD `crd` defines.
pub async fn crd_instances(
    client: &kube::Client,
    marker: &CopyMark,
    crd: &Value,
) -> Result<Vec<Dependent>, CheckError> {
    let ar = crd_resource(crd).ok_or(CheckError::Crd)?;
    let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
    let mut out = Vec::new();
    match list_into(&api, &ar, marker, &mut out).await {
        // Not served (yet, or no more): there is no object of the kind.
        Err(CheckError::List {
            source: kube::Error::Api(s),
            ..
        }) if s.code == 404 => Ok(Vec::new()),
        other => other.map(|()| out),
    }
}

/// The resource a CRD defines, at its storage version (else its first served one).
fn crd_resource(crd: &Value) -> Option<ApiResource> {
    let s = |p: &str| {
        crd.pointer(p)
            .and_then(Value::as_str)
            .filter(|v| !v.is_empty())
    };
    let group = s("/spec/group")?;
    let plural = s("/spec/names/plural")?;
    let kind = s("/spec/names/kind")?;
    let versions = crd.pointer("/spec/versions").and_then(Value::as_array)?;
    let flag = |v: &Value, f: &str| v.get(f).and_then(Value::as_bool).unwrap_or(false);
    let version = versions
        .iter()
        .find(|v| flag(v, "storage") && flag(v, "served"))
        .or_else(|| versions.iter().find(|v| flag(v, "served")))
        .and_then(|v| v.get("name"))
        .and_then(Value::as_str)?;
    Some(ApiResource {
        group: group.to_owned(),
        version: version.to_owned(),
        api_version: format!("{group}/{version}"),
        kind: kind.to_owned(),
        plural: plural.to_owned(),
    })
}

/// `plural[.group]`, as kubectl names a resource.
pub fn resource_name(ar: &ApiResource) -> String {
    if ar.group.is_empty() {
        ar.plural.clone()
    } else {
        format!("{}.{}", ar.plural, ar.group)
    }
}

/// Appends every object `api` lists (metadata only, paged) to `out`.
async fn list_into(
    api: &Api<DynamicObject>,
    ar: &ApiResource,
    marker: &CopyMark,
    out: &mut Vec<Dependent>,
) -> Result<(), CheckError> {
    let resource = &resource_name(ar);
    let mut lp = ListParams::default().limit(500);
    loop {
        let page = api
            .list_metadata(&lp)
            .await
            .map_err(|source| CheckError::List {
                resource: resource.to_owned(),
                source,
            })?;
        out.extend(
            page.items
                .iter()
                .map(|o| Dependent::of(ar, &o.metadata, marker)),
        );
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn dep(resource: &str, name: &str, uid: &str, owners: &[&str], copy: bool) -> Dependent {
        Dependent {
            resource: resource.to_owned(),
            namespace: Some("ab".to_owned()),
            name: name.to_owned(),
            uid: uid.to_owned(),
            owners: owners.iter().map(|o| (*o).to_owned()).collect(),
            copy,
        }
    }

    #[test]
    fn only_what_nobody_manages_counts() {
        let found = vec![
            dep("configmaps", "kube-root-ca.crt", "1", &[], false),
            dep("serviceaccounts", "default", "2", &[], false),
            dep("configmaps", "shared", "3", &[], true),
            // A copied Deployment's ReplicaSet and Pod, listed dependents first.
            dep("pods", "web-1", "6", &["5"], false),
            dep("replicasets.apps", "web", "5", &["4"], false),
            dep("deployments.apps", "web", "4", &[], true),
        ];
        assert!(unmanaged(&found).is_empty());
        let mut with_local = found.clone();
        with_local.push(dep("configmaps", "both", "7", &[], false));
        with_local.push(dep("secrets", "mine", "8", &["99"], false));
        // A ServiceAccount named otherwise, or a ConfigMap named "default", is someone's.
        with_local.push(dep("configmaps", "default", "9", &[], false));
        assert_eq!(
            unmanaged(&with_local),
            vec![
                "configmaps ab/both",
                "configmaps ab/default",
                "secrets ab/mine"
            ]
        );
    }

    #[test]
    fn cascading_kinds_are_namespaces_and_crds() {
        let t = |group: &str, kind: &str| Cascade::of(&GroupVersionKind::gvk(group, "v1", kind));
        assert_eq!(t("", "Namespace"), Some(Cascade::Namespace));
        assert_eq!(
            t("apiextensions.k8s.io", "CustomResourceDefinition"),
            Some(Cascade::Crd)
        );
        assert_eq!(t("", "ConfigMap"), None);
        assert_eq!(t("example.com", "Namespace"), None);
    }

    #[test]
    fn a_crd_is_listed_at_its_storage_version() {
        let crd = json!({"spec": {"group": "example.com", "names": {"plural": "gizmos", "kind": "Gizmo"},
            "versions": [{"name": "v1beta1", "served": true, "storage": false},
                         {"name": "v1", "served": true, "storage": true}]}});
        let ar = crd_resource(&crd).unwrap();
        assert_eq!(
            (ar.api_version.as_str(), ar.plural.as_str()),
            ("example.com/v1", "gizmos")
        );
        assert_eq!(resource_name(&ar), "gizmos.example.com");
        assert!(crd_resource(&json!({"spec": {"group": "example.com"}})).is_none());
    }

    #[test]
    fn the_message_says_why_and_how_to_finish() {
        let t = CopyRef {
            shown: "Namespace ab",
            resource: "namespaces",
            namespace: None,
            name: "ab",
        };
        let m = kept_message(&t, &Why::Unmanaged(vec!["configmaps ab/both".into()]));
        assert!(m.contains("configmaps ab/both"), "{m}");
        assert!(m.ends_with("kubectl delete namespaces ab"), "{m}");
        let seven: Vec<String> = (0..7).map(|i| format!("configmaps ab/c{i}")).collect();
        let m = kept_message(&t, &Why::Unmanaged(seven));
        assert!(m.contains("7 object(s)") && m.contains("and 2 more"), "{m}");
    }
}
