//! The objects an import writes, purely: the ServiceImport, for a
//! `ClusterSetIP` import the derived Service that holds its virtual IP, and
//! one EndpointSlice per exported slice of each exporter.
//!
//! Every one carries the ownership mark copies carry (`mark`): the
//! `fleetbus.io/managed=true` label, `fleetbus.io/origin-cluster` naming
//! this cluster (what imports them, so sync's collector, which never
//! collects a copy of this cluster's own, leaves them to this task) and a
//! `fleetbus.io/copy-mark` only this agent can write. An object that merely
//! looks like one is never overwritten or deleted.
//!
//! The virtual IP: like the mcs-api reference controller, a `ClusterSetIP`
//! import gets a selector-less Service `derived-<hash>` in its namespace;
//! the API server allocates its ClusterIP, which becomes the import's
//! `spec.ips`, and the imported EndpointSlices carry
//! `kubernetes.io/service-name: derived-<hash>`, so kube-proxy routes the
//! virtual IP to every exporter's endpoints (given a network between the
//! clusters: fleetbus does not provide one).

use fleetbus_schemas::multicluster::{
    ImportType, ServicePort, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LABEL_SOURCE_CLUSTER,
    MANAGED_BY, MCS_GROUP,
};
use fleetbus_schemas::well_known::{
    ANNOTATION_COPY_MARK, ANNOTATION_ORIGIN_CLUSTER, LABEL_MANAGED, LABEL_MANAGED_VALUE,
};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use super::plan::{DesiredImport, DesiredSlice};
use crate::mark::{CopyMark, Marked};

/// The annotation naming an import's derived Service (the reference
/// controller's).
pub const ANNOTATION_DERIVED_SERVICE: &str = "multicluster.kubernetes.io/derived-service";
/// What an object was last written from: equal means no write.
pub const ANNOTATION_HASH: &str = "fleetbus.io/mcs-hash";
/// The label Kubernetes' proxies read to tie a slice to its Service.
pub const LABEL_KUBE_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// Hex of the first `n` bytes of SHA-256 over `parts` (length-prefixed).
fn short_hash(parts: &[&str], n: usize) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update((p.len() as u64).to_be_bytes());
        h.update(p.as_bytes());
    }
    h.finalize()[..n]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The derived Service's name for `ns/name`.
pub fn derived_name(ns: &str, name: &str) -> String {
    format!("derived-{}", short_hash(&[ns, name], 5))
}

/// The name of the imported slice `index` of `cluster`'s export of `name`:
/// readable, and unique whatever the names (the hash tells apart `a-b`
/// from `b` and `a` from `b-c`).
pub fn slice_name(ns: &str, name: &str, cluster: &str, index: usize) -> String {
    let i = index.to_string();
    let h = short_hash(&[ns, name, cluster, &i], 4);
    let tail = format!("-{h}-{i}");
    // One DNS label (a dot would make the readable part two): the readable
    // part is cut to fit 63 characters, the hash keeps names apart.
    let readable = format!("{name}-{cluster}");
    // Names are checked DNS labels (ASCII); cut on a character boundary
    // all the same, so no input can make this panic.
    let cut: String = readable
        .chars()
        .take(63usize.saturating_sub(tail.len()))
        .collect();
    format!("{}{tail}", cut.trim_end_matches(['-', '.']))
}

/// One object to write, with what identifies it.
#[derive(Debug, Clone, PartialEq)]
pub struct Object {
    /// `apiVersion`.
    pub api_version: String,
    /// Kind.
    pub kind: &'static str,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// The whole object, hash annotation included.
    pub body: Value,
    /// Its hash.
    pub hash: String,
}

/// Stamps ownership and the content hash on `body` and wraps it.
fn object(
    mark: &CopyMark,
    local: &str,
    (api_version, kind): (&str, &'static str),
    (ns, name): (&str, &str),
    labels: Map<String, Value>,
    mut body: Value,
) -> Object {
    let group = fleetbus_schemas::subject::split_api_version(api_version).0;
    let stamp = mark.mark(&Marked {
        group,
        kind,
        namespace: Some(ns),
        name,
        origin: local,
    });
    let mut labels = labels;
    labels.insert(LABEL_MANAGED.into(), LABEL_MANAGED_VALUE.into());
    let mut meta = json!({
        "name": name,
        "namespace": ns,
        "labels": labels,
        "annotations": {
            ANNOTATION_ORIGIN_CLUSTER: local,
            ANNOTATION_COPY_MARK: stamp,
        },
    });
    // The hash covers everything but itself.
    body["apiVersion"] = api_version.into();
    body["kind"] = kind.into();
    body["metadata"] = meta.clone();
    let hash = short_hash(&[&body.to_string()], 16);
    meta["annotations"][ANNOTATION_HASH] = hash.clone().into();
    body["metadata"] = meta;
    Object {
        api_version: api_version.to_owned(),
        kind,
        namespace: ns.to_owned(),
        name: name.to_owned(),
        body,
        hash,
    }
}

fn port_json(p: &ServicePort) -> Value {
    let mut v = json!({ "port": p.port, "protocol": p.protocol.as_deref().unwrap_or("TCP") });
    if let Some(n) = &p.name {
        v["name"] = n.as_str().into();
    }
    if let Some(a) = &p.app_protocol {
        v["appProtocol"] = a.as_str().into();
    }
    v
}

/// The derived Service of a `ClusterSetIP` import (None for Headless).
pub fn derived_service(
    mark: &CopyMark,
    local: &str,
    (ns, name): (&str, &str),
    d: &DesiredImport,
) -> Option<Object> {
    if d.type_ != ImportType::ClusterSetIP {
        return None;
    }
    let mut labels = Map::new();
    labels.insert(LABEL_SERVICE_NAME.into(), name.into());
    let mut spec = json!({
        "type": "ClusterIP",
        "ports": d.ports.iter().map(port_json).collect::<Vec<_>>(),
    });
    if let Some(a) = &d.session_affinity {
        spec["sessionAffinity"] = a.as_str().into();
    }
    Some(object(
        mark,
        local,
        ("v1", "Service"),
        (ns, &derived_name(ns, name)),
        labels,
        json!({ "spec": spec }),
    ))
}

/// The ServiceImport; `ips` the derived Service's ClusterIP once allocated.
pub fn service_import(
    mark: &CopyMark,
    local: &str,
    version: &str,
    (ns, name): (&str, &str),
    d: &DesiredImport,
    ips: &[String],
) -> Object {
    let mut spec = json!({
        "type": d.type_.as_str(),
        "ports": d.ports.iter().map(port_json).collect::<Vec<_>>(),
    });
    if d.type_ == ImportType::ClusterSetIP && !ips.is_empty() {
        spec["ips"] = json!(ips);
    }
    if let Some(a) = &d.session_affinity {
        spec["sessionAffinity"] = a.as_str().into();
    }
    let mut o = object(
        mark,
        local,
        (&format!("{MCS_GROUP}/{version}"), "ServiceImport"),
        (ns, name),
        Map::new(),
        json!({ "spec": spec }),
    );
    if d.type_ == ImportType::ClusterSetIP {
        o.body["metadata"]["annotations"][ANNOTATION_DERIVED_SERVICE] =
            derived_name(ns, name).into();
    }
    o
}

/// The ServiceImport's status: the exporting clusters.
pub fn import_status(d: &DesiredImport) -> Value {
    json!({
        "status": {
            "clusters": d.clusters.iter().map(|c| json!({ "cluster": c })).collect::<Vec<_>>(),
        }
    })
}

/// One imported EndpointSlice.
pub fn endpoint_slice(
    mark: &CopyMark,
    local: &str,
    (ns, name): (&str, &str),
    type_: ImportType,
    s: &DesiredSlice,
) -> Object {
    let mut labels = Map::new();
    labels.insert(LABEL_SERVICE_NAME.into(), name.into());
    labels.insert(LABEL_SOURCE_CLUSTER.into(), s.cluster.as_str().into());
    labels.insert(LABEL_MANAGED_BY.into(), MANAGED_BY.into());
    if type_ == ImportType::ClusterSetIP {
        labels.insert(
            LABEL_KUBE_SERVICE_NAME.into(),
            derived_name(ns, name).into(),
        );
    }
    let endpoints: Vec<Value> = s
        .slice
        .endpoints
        .iter()
        .map(|e| {
            let mut conditions = json!({ "ready": e.ready });
            if let Some(v) = e.serving {
                conditions["serving"] = v.into();
            }
            if let Some(v) = e.terminating {
                conditions["terminating"] = v.into();
            }
            let mut v = json!({ "addresses": e.addresses, "conditions": conditions });
            if let Some(h) = &e.hostname {
                v["hostname"] = h.as_str().into();
            }
            if let Some(z) = &e.zone {
                v["zone"] = z.as_str().into();
            }
            v
        })
        .collect();
    object(
        mark,
        local,
        ("discovery.k8s.io/v1", "EndpointSlice"),
        (ns, &slice_name(ns, name, &s.cluster, s.index)),
        labels,
        json!({
            "addressType": s.slice.address_type,
            "endpoints": endpoints,
            "ports": s.slice.ports.iter().map(port_json).collect::<Vec<_>>(),
        }),
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::mark::Ownership;
    use fleetbus_schemas::multicluster::{ExportedEndpoint, ExportedSlice};

    fn desired(type_: ImportType) -> DesiredImport {
        DesiredImport {
            type_,
            ports: vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                app_protocol: None,
            }],
            session_affinity: None,
            clusters: vec!["a".into()],
            slices: vec![DesiredSlice {
                cluster: "a".into(),
                index: 0,
                slice: ExportedSlice {
                    address_type: "IPv4".into(),
                    ports: vec![],
                    endpoints: vec![ExportedEndpoint {
                        addresses: vec!["10.0.0.1".into()],
                        ready: false,
                        serving: None,
                        terminating: None,
                        hostname: None,
                        zone: None,
                    }],
                },
            }],
        }
    }

    #[test]
    fn what_an_import_writes_is_marked_as_this_agents_and_labelled_for_dns_and_proxies() {
        let mark = CopyMark::new([7; 32], None);
        let d = desired(ImportType::ClusterSetIP);
        let slice = endpoint_slice(&mark, "z", ("shop", "cart"), d.type_, &d.slices[0]);
        let labels = &slice.body["metadata"]["labels"];
        assert_eq!(labels[LABEL_SERVICE_NAME], "cart");
        assert_eq!(labels[LABEL_SOURCE_CLUSTER], "a");
        assert_eq!(labels[LABEL_MANAGED_BY], MANAGED_BY);
        assert_eq!(
            labels[LABEL_KUBE_SERVICE_NAME],
            derived_name("shop", "cart")
        );
        assert_eq!(slice.body["endpoints"][0]["conditions"]["ready"], false);
        // The ownership check of copies takes it for this agent's.
        assert!(matches!(
            mark.judge_object(&slice.body),
            Ownership::Copy { origin: "z", .. }
        ));
        // Another agent's key does not.
        let other = CopyMark::new([8; 32], None);
        assert!(matches!(
            other.judge_object(&slice.body),
            Ownership::LookAlike { .. }
        ));
        let import = service_import(
            &mark,
            "z",
            "v1beta1",
            ("shop", "cart"),
            &d,
            &["10.96.0.9".into()],
        );
        assert_eq!(import.body["apiVersion"], "multicluster.x-k8s.io/v1beta1");
        assert_eq!(import.body["spec"]["ips"][0], "10.96.0.9");
        assert_eq!(import.body["spec"]["type"], "ClusterSetIP");
        assert!(derived_service(&mark, "z", ("shop", "cart"), &d).is_some());
        // Headless: no virtual IP, no derived Service, no proxy label.
        let h = desired(ImportType::Headless);
        assert!(derived_service(&mark, "z", ("shop", "cart"), &h).is_none());
        let s = endpoint_slice(&mark, "z", ("shop", "cart"), h.type_, &h.slices[0]);
        assert!(s.body["metadata"]["labels"]
            .get(LABEL_KUBE_SERVICE_NAME)
            .is_none());
        // The hash follows content: a changed endpoint is a new hash.
        let mut d2 = d.clone();
        d2.slices[0].slice.endpoints[0].ready = true;
        let s2 = endpoint_slice(&mark, "z", ("shop", "cart"), d2.type_, &d2.slices[0]);
        assert_ne!(s2.hash, slice.hash);
        assert_eq!(
            endpoint_slice(&mark, "z", ("shop", "cart"), d.type_, &d.slices[0]).hash,
            slice.hash
        );
    }

    #[test]
    fn slice_names_of_different_exports_never_collide() {
        assert_ne!(
            slice_name("ns", "a-b", "c", 0),
            slice_name("ns", "a", "b-c", 0)
        );
        assert!(fleetbus_schemas::k8s_names::is_dns1123_label(&slice_name(
            "ns",
            &"x".repeat(63),
            &"y".repeat(63),
            999
        )));
        // Never a panic, whatever the bytes.
        let odd = slice_name("ns", &"é".repeat(40), "c", 0);
        assert!(odd.len() <= 63 * 2);
    }
}
