//! Objects kube-apiserver's own controllers create at start, beyond the system
//! namespaces (`seed.rs`): the `default/kubernetes` Service with its Endpoints and
//! EndpointSlice pointing at this server, the bootstrap RBAC roles and bindings
//! (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy`), and one APIService per
//! served built-in group-version (kube-aggregator's autoregistration, `Local`).
//!
//! Like `seed`, only what is missing is created, so a restart with `--data-dir`
//! keeps UIDs and user edits.

use crate::status::ApiError;
use crate::store::{ObjKey, Store, Tx};
use serde_json::{json, Value};
use std::net::SocketAddr;

/// The ClusterIP kube gives `default/kubernetes`: the first address of the
/// service CIDR (10.96.0.0/12 in kind and kubeadm).
pub const KUBERNETES_CLUSTER_IP: &str = "10.96.0.1";

/// Creates what is missing of the bootstrap objects. `addr` is the server's
/// listening address (what the `kubernetes` Endpoints point at).
pub fn bootstrap(store: &Store, addr: SocketAddr) -> Result<(), ApiError> {
    let defs = store.read(|i| i.registry.all());
    store.write(false, |tx| {
        for (key, obj, owned) in kubernetes_service(addr) {
            reconcile(tx, &key, obj, owned);
        }
        for (key, obj) in rbac().into_iter().chain(api_services(&defs)) {
            ensure(tx, &key, obj);
        }
        Ok(())
    })
}

/// Stores `obj` at `key` unless something is there, with the metadata a create
/// would have given it.
fn ensure(tx: &mut Tx<'_>, key: &ObjKey, mut obj: Value) {
    if tx.get(key).is_some() {
        return;
    }
    let m = crate::meta::meta_mut(&mut obj);
    m.insert("uid".into(), json!(uuid::Uuid::new_v4().to_string()));
    m.insert("creationTimestamp".into(), json!(tx.now));
    tx.put(key, obj);
}

/// Like [`ensure`], and an existing object gets the `owned` top-level fields
/// reset: kube's endpoint reconciler keeps `default/kubernetes` pointing at the
/// running server (a restart with `--data-dir` may listen on another port).
fn reconcile(tx: &mut Tx<'_>, key: &ObjKey, obj: Value, owned: &[&str]) {
    let Some(old) = tx.get(key).cloned() else {
        ensure(tx, key, obj);
        return;
    };
    let mut new = old.clone();
    if let Some(o) = new.as_object_mut() {
        for f in owned {
            if let Some(v) = obj.get(*f) {
                o.insert((*f).to_string(), v.clone());
            }
        }
    }
    if new != old {
        tx.put(key, new);
    }
}

type Owned = &'static [&'static str];

fn kubernetes_service(addr: SocketAddr) -> Vec<(ObjKey, Value, Owned)> {
    // An unspecified listen address (0.0.0.0) is reached through loopback.
    let ip = if addr.ip().is_unspecified() {
        "127.0.0.1".to_string()
    } else {
        addr.ip().to_string()
    };
    let family = if addr.is_ipv6() { "IPv6" } else { "IPv4" };
    let port = addr.port();
    vec![
        (
            ObjKey::new("", "services", "default", "kubernetes"),
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"component": "apiserver", "provider": "kubernetes"}},
                "spec": {
                    "type": "ClusterIP",
                    "clusterIP": KUBERNETES_CLUSTER_IP,
                    "clusterIPs": [KUBERNETES_CLUSTER_IP],
                    "ipFamilies": ["IPv4"],
                    "ipFamilyPolicy": "SingleStack",
                    "internalTrafficPolicy": "Cluster",
                    "sessionAffinity": "None",
                    "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": port}],
                },
                "status": {"loadBalancer": {}},
            }),
            &["spec"],
        ),
        (
            ObjKey::new("", "endpoints", "default", "kubernetes"),
            json!({
                "apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"endpointslice.kubernetes.io/skip-mirror": "true"}},
                "subsets": [{
                    "addresses": [{"ip": ip}],
                    "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
                }],
            }),
            &["subsets"],
        ),
        (
            ObjKey::new(
                "discovery.k8s.io",
                "endpointslices",
                "default",
                "kubernetes",
            ),
            json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "namespace": "default",
                    "labels": {"kubernetes.io/service-name": "kubernetes"}},
                "addressType": family,
                "endpoints": [{"addresses": [ip], "conditions": {"ready": true}}],
                "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
            }),
            &["addressType", "endpoints", "ports"],
        ),
    ]
}

const AUTOUPDATE: &str = "rbac.authorization.kubernetes.io/autoupdate";

fn cluster_role(name: &str, labels: Value, body: Value) -> (ObjKey, Value) {
    let mut labels = labels;
    labels["kubernetes.io/bootstrapping"] = json!("rbac-defaults");
    let mut obj = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels, "annotations": {AUTOUPDATE: "true"}},
    });
    if let (Some(o), Some(b)) = (obj.as_object_mut(), body.as_object()) {
        o.extend(b.clone());
    }
    (
        ObjKey::new("rbac.authorization.k8s.io", "clusterroles", "", name),
        obj,
    )
}

fn binding(name: &str, groups: &[&str]) -> (ObjKey, Value) {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    (
        ObjKey::new("rbac.authorization.k8s.io", "clusterrolebindings", "", name),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": name,
                "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                "annotations": {AUTOUPDATE: "true"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": subjects,
        }),
    )
}

/// An aggregated role: kube's clusterrole-aggregation controller fills `rules`
/// from the roles carrying `aggregate-to-<to>`; nothing here runs it, so the
/// rules stay empty (the devcluster does not authorize anyway).
fn aggregated(name: &str, labels: Value) -> (ObjKey, Value) {
    cluster_role(
        name,
        labels,
        json!({
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {format!("rbac.authorization.k8s.io/aggregate-to-{name}"): "true"}}
            ]},
            "rules": [],
        }),
    )
}

fn rbac() -> Vec<(ObjKey, Value)> {
    let get = json!(["get"]);
    vec![
        cluster_role(
            "cluster-admin",
            json!({}),
            json!({"rules": [
                {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]},
                {"nonResourceURLs": ["*"], "verbs": ["*"]},
            ]}),
        ),
        aggregated("admin", json!({})),
        aggregated(
            "edit",
            json!({"rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        ),
        aggregated(
            "view",
            json!({"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
        ),
        cluster_role(
            "system:discovery",
            json!({}),
            json!({"rules": [{"nonResourceURLs": [
                "/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                "/openapi/*", "/readyz", "/version", "/version/"], "verbs": get}]}),
        ),
        cluster_role(
            "system:basic-user",
            json!({}),
            json!({"rules": [
                {"apiGroups": ["authorization.k8s.io"],
                 "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                 "verbs": ["create"]},
                {"apiGroups": ["authentication.k8s.io"], "resources": ["selfsubjectreviews"],
                 "verbs": ["create"]},
            ]}),
        ),
        cluster_role(
            "system:public-info-viewer",
            json!({}),
            json!({"rules": [{"nonResourceURLs": [
                "/healthz", "/livez", "/readyz", "/version", "/version/"], "verbs": get}]}),
        ),
        binding("cluster-admin", &["system:masters"]),
        binding("system:discovery", &["system:authenticated"]),
        binding("system:basic-user", &["system:authenticated"]),
        binding(
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}

/// kube's group priorities (`pkg/controlplane/apiserver/.../apiVersionPriorities`);
/// unknown groups get kube's default for CRD groups.
fn group_priority(group: &str) -> (i64, i64) {
    match group {
        "" => (18000, 1),
        "apiextensions.k8s.io" => (16700, 15),
        "apps" => (17800, 15),
        "authentication.k8s.io" => (17700, 15),
        "authorization.k8s.io" => (17600, 15),
        "batch" => (17400, 15),
        "certificates.k8s.io" => (17300, 15),
        "networking.k8s.io" => (17200, 15),
        "policy" => (17100, 15),
        "rbac.authorization.k8s.io" => (17000, 15),
        "coordination.k8s.io" => (16500, 15),
        "discovery.k8s.io" => (16200, 15),
        "events.k8s.io" => (17750, 15),
        "apiregistration.k8s.io" => (18000, 15),
        _ => (1000, 100),
    }
}

/// One `Local` APIService per served built-in group-version: `v1.` for the core
/// group, `v1.apps` and so on (`<version>.<group>`).
fn api_services(defs: &[crate::resources::ResourceDef]) -> Vec<(ObjKey, Value)> {
    let mut gvs: Vec<(String, String)> = defs
        .iter()
        .filter(|d| !d.custom)
        .map(|d| (d.group.clone(), d.version.clone()))
        .collect();
    gvs.sort();
    gvs.dedup();
    gvs.into_iter()
        .map(|(group, version)| {
            let name = format!("{version}.{group}");
            let (group_min, version_prio) = group_priority(&group);
            let obj = json!({
                "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
                "metadata": {"name": name,
                    "labels": {"kube-aggregator.kubernetes.io/automanaged": "onstart"}},
                "spec": {"group": group, "version": version,
                    "groupPriorityMinimum": group_min, "versionPriority": version_prio},
                "status": {"conditions": [{"type": "Available", "status": "True",
                    "reason": "Local", "message": "Local APIServices are always available"}]},
            });
            (
                ObjKey::new("apiregistration.k8s.io", "apiservices", "", &name),
                obj,
            )
        })
        .collect()
}

/// The `componentstatuses` list kube answers from probing its components; here
/// every component is the server itself, so all are healthy.
pub fn component_statuses() -> Vec<Value> {
    ["controller-manager", "scheduler", "etcd-0"]
        .iter()
        .map(|name| {
            json!({
                "apiVersion": "v1", "kind": "ComponentStatus",
                "metadata": {"name": name},
                "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_objects_are_created_once() {
        let s = Store::open(None, 100).unwrap();
        let addr: SocketAddr = "127.0.0.1:6443".parse().unwrap();
        bootstrap(&s, addr).unwrap();
        let rv = s.current_rv();
        bootstrap(&s, addr).unwrap();
        assert_eq!(s.current_rv(), rv, "a second run creates nothing");
        let get = |k: ObjKey| s.read(|i| i.objects.get(&k).cloned()).unwrap();
        let ep = get(ObjKey::new("", "endpoints", "default", "kubernetes"));
        assert_eq!(ep["subsets"][0]["addresses"][0]["ip"], "127.0.0.1");
        assert_eq!(ep["subsets"][0]["ports"][0]["port"], 6443);
        // Restarted on another port: the Endpoints follow.
        bootstrap(&s, "127.0.0.1:7000".parse().unwrap()).unwrap();
        let ep = get(ObjKey::new("", "endpoints", "default", "kubernetes"));
        assert_eq!(ep["subsets"][0]["ports"][0]["port"], 7000);
        let admin = get(ObjKey::new(
            "rbac.authorization.k8s.io",
            "clusterroles",
            "",
            "cluster-admin",
        ));
        assert_eq!(admin["rules"][0]["verbs"], json!(["*"]));
        assert!(admin["metadata"]["uid"].is_string());
        let core = get(ObjKey::new(
            "apiregistration.k8s.io",
            "apiservices",
            "",
            "v1.",
        ));
        assert_eq!(core["status"]["conditions"][0]["reason"], "Local");
        assert!(crate::resources::builtins()
            .iter()
            .any(|d| d.plural == "apiservices"));
        let apps = get(ObjKey::new(
            "apiregistration.k8s.io",
            "apiservices",
            "",
            "v1.apps",
        ));
        assert_eq!(apps["spec"]["group"], "apps");
    }
}
