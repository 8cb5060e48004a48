//! What multi-cluster Services decide, purely: what this cluster exports of
//! one Service ([`export_of`]), which exports conflict ([`conflicts`]), and
//! what it imports from every exporter ([`imports`]). The task does the IO.

use std::collections::{BTreeMap, BTreeSet};

use fleetbus_schemas::multicluster::{
    ExportKey, ExportRecord, ExportedEndpoint, ExportedSlice, ImportType, ServicePort,
    MAX_EXPORT_ENDPOINTS, REASON_INVALID_SERVICE_TYPE, REASON_NO_SERVICE,
};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::sync::policy::{Policy, Subject};

/// A Service by namespace and name.
pub type Name = (String, String);

/// What a Service exports, before the record's bookkeeping (time, revision).
#[derive(Debug, Clone, PartialEq)]
pub struct Body {
    /// ClusterSetIP or Headless.
    pub type_: ImportType,
    /// The Service's ports.
    pub ports: Vec<ServicePort>,
    /// `ClientIP` or `None`.
    pub session_affinity: Option<String>,
    /// Every endpoint, slice by slice.
    pub slices: Vec<ExportedSlice>,
    /// Endpoints left out by the bound.
    pub truncated: usize,
}

/// Why an export is not valid: `Valid=False` with this reason and message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    /// `NoService` or `InvalidServiceType`.
    pub reason: &'static str,
    /// For the condition.
    pub message: String,
}

/// What an export of `service` publishes, from the EndpointSlices labelled
/// with its name (the EndpointSlice controller's). Slices and addresses are
/// taken in name order, so the same endpoints give the same record.
pub fn export_of(service: Option<&Service>, slices: &[&EndpointSlice]) -> Result<Body, Invalid> {
    let Some(service) = service else {
        return Err(Invalid {
            reason: REASON_NO_SERVICE,
            message: "no Service of this name in this namespace".to_owned(),
        });
    };
    let spec = service.spec.clone().unwrap_or_default();
    if spec.type_.as_deref() == Some("ExternalName") {
        return Err(Invalid {
            reason: REASON_INVALID_SERVICE_TYPE,
            message: "an ExternalName Service cannot be exported".to_owned(),
        });
    }
    let type_ = if spec.cluster_ip.as_deref() == Some("None") {
        ImportType::Headless
    } else {
        ImportType::ClusterSetIP
    };
    let ports = spec
        .ports
        .unwrap_or_default()
        .into_iter()
        .map(|p| ServicePort {
            app_protocol: p.app_protocol,
            name: p.name,
            port: p.port,
            protocol: Some(p.protocol.unwrap_or_else(|| "TCP".to_owned())),
        })
        .collect();
    let mut sorted: Vec<&&EndpointSlice> = slices.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut left = MAX_EXPORT_ENDPOINTS;
    let mut truncated = 0;
    let mut out = Vec::new();
    for s in sorted {
        if !matches!(s.address_type.as_str(), "IPv4" | "IPv6" | "FQDN") {
            continue;
        }
        let mut endpoints: Vec<ExportedEndpoint> = s
            .endpoints
            .iter()
            .filter(|e| !e.addresses.is_empty())
            .map(|e| {
                let c = e.conditions.clone().unwrap_or_default();
                let mut addresses = e.addresses.clone();
                addresses.truncate(fleetbus_schemas::multicluster::MAX_ENDPOINT_ADDRESSES);
                ExportedEndpoint {
                    addresses,
                    // EndpointSlice: an unset `ready` is ready.
                    ready: c.ready.unwrap_or(true),
                    serving: c.serving,
                    terminating: c.terminating,
                    hostname: e.hostname.clone(),
                    zone: e.zone.clone(),
                }
            })
            .collect();
        endpoints.sort_by(|a, b| a.addresses.cmp(&b.addresses));
        if endpoints.len() > left {
            truncated += endpoints.len() - left;
            endpoints.truncate(left);
        }
        left -= endpoints.len();
        if endpoints.is_empty() {
            // Nothing to route to (scaled to zero, or past the bound): an
            // empty slice would cost every importer an object for nothing.
            continue;
        }
        let ports = s
            .ports
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|p| {
                Some(ServicePort {
                    app_protocol: p.app_protocol,
                    name: p.name,
                    port: p.port?,
                    protocol: Some(p.protocol.unwrap_or_else(|| "TCP".to_owned())),
                })
            })
            .collect();
        out.push(ExportedSlice {
            address_type: s.address_type.clone(),
            ports,
            endpoints,
        });
    }
    Ok(Body {
        type_,
        ports,
        session_affinity: spec.session_affinity.filter(|a| a == "ClientIP"),
        slices: out,
        truncated,
    })
}

/// The live exports of one Service name, oldest first (by `exportedAt`,
/// then cluster name): the first one decides what conflicts.
fn oldest_first<'a>(
    exports: impl Iterator<Item = (&'a str, &'a ExportRecord)>,
) -> Vec<(&'a str, &'a ExportRecord)> {
    let mut v: Vec<_> = exports.filter(|(_, r)| !r.withdrawn).collect();
    v.sort_by(|a, b| (a.1.exported_at, a.0).cmp(&(b.1.exported_at, b.0)));
    v
}

fn port_text(p: &ServicePort) -> String {
    format!("{}/{}", p.port, p.protocol.as_deref().unwrap_or("TCP"))
}

/// What each exporter of one Service name disagrees on with the oldest
/// export (KEP-1645: the oldest wins): its type, or a port of the same name
/// with another number or protocol. Exporters that agree are absent. Every
/// exporter of a conflicted name gets a message (the oldest's names the
/// others), as every ServiceExport of it says `Conflict=True`.
pub fn conflicts<'a>(
    exports: impl Iterator<Item = (&'a str, &'a ExportRecord)>,
) -> BTreeMap<String, String> {
    let live = oldest_first(exports);
    let Some(((oldest, first), rest)) = live.split_first().map(|(f, r)| (*f, r)) else {
        return BTreeMap::new();
    };
    let mut out = BTreeMap::new();
    for (cluster, r) in rest {
        let mut why = Vec::new();
        if r.type_ != first.type_ {
            why.push(format!(
                "type {} (the oldest export, in {oldest}, is {})",
                r.type_.as_str(),
                first.type_.as_str()
            ));
        }
        for p in &r.ports {
            let theirs = first.ports.iter().find(|q| q.name == p.name);
            if let Some(q) = theirs.filter(|q| q.port != p.port || q.protocol != p.protocol) {
                why.push(format!(
                    "port {:?} is {} (in {oldest}: {})",
                    p.name.as_deref().unwrap_or(""),
                    port_text(p),
                    port_text(q)
                ));
            }
        }
        if !why.is_empty() {
            out.insert((*cluster).to_owned(), why.join("; "));
        }
    }
    if !out.is_empty() {
        let names: Vec<&str> = out.keys().map(String::as_str).collect();
        out.insert(
            oldest.to_owned(),
            format!(
                "the export in {} conflicts with this one, the oldest, which wins",
                names.join(", ")
            ),
        );
    }
    out
}

/// The ports of an import: the oldest export's, then each other export's
/// ports that clash with none so far (neither by name nor by number and
/// protocol), as long as the list stays one Kubernetes accepts for a
/// Service (every port named when there are several). A port that would
/// break it is left out, and [`conflicts`] says so where it is a conflict.
fn merge_ports<'a>(mut exports: impl Iterator<Item = &'a [ServicePort]>) -> Vec<ServicePort> {
    let mut ports: Vec<ServicePort> = exports.next().map(<[_]>::to_vec).unwrap_or_default();
    let named = |p: &ServicePort| p.name.as_deref().is_some_and(|n| !n.is_empty());
    for theirs in exports {
        for p in theirs {
            let clash = ports
                .iter()
                .any(|q| q.name == p.name || (q.port == p.port && q.protocol == p.protocol));
            if clash || !named(p) || !ports.iter().all(named) {
                continue;
            }
            ports.push(p.clone());
        }
    }
    ports
}

/// How an importer sees an exporting cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    /// Live: its endpoints as it says them.
    Ready,
    /// Unreachable (Disconnected): its endpoints are kept, not ready, until
    /// it is back or has left.
    Unreachable,
    /// Left, forgotten, disabled or with its name in conflict: nothing of
    /// it is imported.
    Gone,
}

/// One imported EndpointSlice: one per exported slice of each exporter.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredSlice {
    /// The exporting cluster.
    pub cluster: String,
    /// The slice's place in the exporter's record.
    pub index: usize,
    /// The slice as exported, `ready` turned off for an unreachable exporter.
    pub slice: ExportedSlice,
}

/// One ServiceImport and its EndpointSlices.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredImport {
    /// The oldest export's type.
    pub type_: ImportType,
    /// The union of the exports' ports (a clash by name: the oldest's).
    pub ports: Vec<ServicePort>,
    /// The oldest export's session affinity.
    pub session_affinity: Option<String>,
    /// Every exporting cluster imported from.
    pub clusters: Vec<String>,
    /// The EndpointSlices.
    pub slices: Vec<DesiredSlice>,
}

/// An export not imported here, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// Which.
    pub key: ExportKey,
    /// Why, for logs and the metric's reason.
    pub reason: &'static str,
    /// In words.
    pub why: String,
}

/// What the importer reads to decide.
pub struct ImportInputs<'a> {
    /// This cluster's name.
    pub local: &'a str,
    /// Every cluster's last record, by key.
    pub records: &'a BTreeMap<ExportKey, ExportRecord>,
    /// How each exporter is reached.
    pub reach: &'a dyn Fn(&str) -> Reach,
    /// The namespaces this cluster has (namespace sameness).
    pub namespaces: &'a BTreeSet<String>,
    /// This cluster's SyncPolicy in force.
    pub policy: &'a Policy,
}

/// What no member may advertise endpoints for, whatever the policy: the
/// API server's Service, and `kube-system` (the cluster's own DNS and
/// controllers).
fn forbidden(ns: &str, name: &str) -> bool {
    (ns == "default" && name == "kubernetes") || ns == "kube-system"
}

/// What this cluster imports: a ServiceImport per exported name in a
/// namespace it has, with the endpoints of every exporter its SyncPolicy
/// lets in (imported as `EndpointSlice.discovery.k8s.io` from the exporter,
/// the rule author of the policy's words), and what it refused.
pub fn imports(i: &ImportInputs<'_>) -> (BTreeMap<Name, DesiredImport>, Vec<Refused>) {
    let mut by_name: BTreeMap<Name, Vec<(&str, &ExportRecord)>> = BTreeMap::new();
    let mut refused = Vec::new();
    for (key, r) in i.records {
        if r.withdrawn || (i.reach)(&key.cluster) == Reach::Gone {
            continue;
        }
        let refuse = |reason: &'static str, why: String| Refused {
            key: key.clone(),
            reason,
            why,
        };
        if forbidden(&key.namespace, &key.name) {
            refused.push(refuse(
                "forbidden",
                "neither default/kubernetes nor kube-system's Services are ever imported"
                    .to_owned(),
            ));
            continue;
        }
        if !i.namespaces.contains(&key.namespace) {
            continue;
        }
        let what = Subject {
            group: "discovery.k8s.io",
            kind: "EndpointSlice",
            namespace: Some(&key.namespace),
        };
        if let Err(refusal) = i.policy.import(&key.cluster, &what) {
            refused.push(refuse("policy", refusal.to_string()));
            continue;
        }
        by_name
            .entry((key.namespace.clone(), key.name.clone()))
            .or_default()
            .push((key.cluster.as_str(), r));
    }
    let mut out = BTreeMap::new();
    for (name, exports) in by_name {
        let live = oldest_first(exports.into_iter());
        let Some((_, first)) = live.first() else {
            continue;
        };
        let ports = merge_ports(live.iter().map(|(_, r)| r.ports.as_slice()));
        let mut slices = Vec::new();
        for (cluster, r) in &live {
            let reachable = (i.reach)(cluster) == Reach::Ready;
            for (index, s) in r.slices.iter().enumerate() {
                let mut slice = s.clone();
                if !reachable {
                    for e in &mut slice.endpoints {
                        e.ready = false;
                    }
                }
                slices.push(DesiredSlice {
                    cluster: (*cluster).to_owned(),
                    index,
                    slice,
                });
            }
        }
        out.insert(
            name,
            DesiredImport {
                type_: first.type_,
                ports,
                session_affinity: first.session_affinity.clone(),
                clusters: live.iter().map(|(c, _)| (*c).to_owned()).collect(),
                slices,
            },
        );
    }
    let _ = i.local;
    (out, refused)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort as KPort, ServiceSpec};
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort};
    use serde_json::json;

    fn service(cluster_ip: Option<&str>, type_: Option<&str>) -> Service {
        Service {
            spec: Some(ServiceSpec {
                cluster_ip: cluster_ip.map(str::to_owned),
                type_: type_.map(str::to_owned),
                ports: Some(vec![KPort {
                    name: Some("http".into()),
                    port: 80,
                    ..KPort::default()
                }]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    fn slice(name: &str, addrs: &[(&str, Option<bool>)]) -> EndpointSlice {
        EndpointSlice {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: addrs
                .iter()
                .map(|(a, ready)| Endpoint {
                    addresses: vec![(*a).into()],
                    conditions: Some(EndpointConditions {
                        ready: *ready,
                        ..EndpointConditions::default()
                    }),
                    ..Endpoint::default()
                })
                .collect(),
            ports: Some(vec![EndpointPort {
                name: Some("http".into()),
                port: Some(8080),
                ..EndpointPort::default()
            }]),
        }
    }

    fn record(at: &str, type_: ImportType, port: i32, addrs: &[&str]) -> ExportRecord {
        ExportRecord {
            exported_at: at.parse().unwrap(),
            withdrawn: false,
            type_,
            ports: vec![ServicePort {
                name: Some("http".into()),
                port,
                protocol: Some("TCP".into()),
                app_protocol: None,
            }],
            session_affinity: None,
            slices: vec![ExportedSlice {
                address_type: "IPv4".into(),
                ports: vec![],
                endpoints: addrs
                    .iter()
                    .map(|a| ExportedEndpoint {
                        addresses: vec![(*a).into()],
                        ready: true,
                        serving: None,
                        terminating: None,
                        hostname: None,
                        zone: None,
                    })
                    .collect(),
            }],
            truncated: 0,
            revision: 1,
        }
    }

    fn key(cluster: &str, ns: &str, name: &str) -> ExportKey {
        ExportKey {
            cluster: cluster.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn an_export_carries_type_ports_and_every_endpoint_in_a_stable_order() {
        let s1 = slice("b", &[("10.0.0.2", None), ("10.0.0.1", Some(false))]);
        let s2 = slice("a", &[("10.0.0.3", Some(true))]);
        let body = export_of(Some(&service(Some("10.96.0.5"), None)), &[&s1, &s2]).unwrap();
        assert_eq!(body.type_, ImportType::ClusterSetIP);
        assert_eq!(body.ports[0].port, 80);
        assert_eq!(body.ports[0].protocol.as_deref(), Some("TCP"));
        // Slices by name, addresses sorted; an unset `ready` is ready.
        assert_eq!(body.slices[0].endpoints[0].addresses, ["10.0.0.3"]);
        let second: Vec<(String, bool)> = body.slices[1]
            .endpoints
            .iter()
            .map(|e| (e.addresses[0].clone(), e.ready))
            .collect();
        assert_eq!(
            second,
            [
                ("10.0.0.1".to_owned(), false),
                ("10.0.0.2".to_owned(), true)
            ]
        );
        assert_eq!(body.slices[0].ports[0].port, 8080);
        // Headless, and the two invalid exports.
        let headless = export_of(Some(&service(Some("None"), None)), &[]).unwrap();
        assert_eq!(headless.type_, ImportType::Headless);
        assert_eq!(export_of(None, &[]).unwrap_err().reason, "NoService");
        assert_eq!(
            export_of(Some(&service(None, Some("ExternalName"))), &[])
                .unwrap_err()
                .reason,
            "InvalidServiceType"
        );
    }

    #[test]
    fn one_service_costs_at_most_the_endpoint_bound() {
        let addrs: Vec<String> = (0..(MAX_EXPORT_ENDPOINTS + 7))
            .map(|i| format!("10.1.{}.{}", i / 250, i % 250))
            .collect();
        let pairs: Vec<(&str, Option<bool>)> = addrs.iter().map(|a| (a.as_str(), None)).collect();
        let s = slice("a", &pairs);
        let body = export_of(Some(&service(None, None)), &[&s]).unwrap();
        assert_eq!(body.slices[0].endpoints.len(), MAX_EXPORT_ENDPOINTS);
        assert_eq!(body.truncated, 7);
    }

    #[test]
    fn the_oldest_export_wins_and_every_exporter_of_a_conflicted_name_is_told() {
        let a = record(
            "2026-01-01T00:00:00Z",
            ImportType::ClusterSetIP,
            80,
            &["1.1.1.1"],
        );
        let b = record(
            "2026-01-02T00:00:00Z",
            ImportType::Headless,
            81,
            &["2.2.2.2"],
        );
        let c = record(
            "2026-01-03T00:00:00Z",
            ImportType::ClusterSetIP,
            80,
            &["3.3.3.3"],
        );
        let got = conflicts([("a", &a), ("b", &b), ("c", &c)].into_iter());
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got["b"].contains("type Headless"), "{}", got["b"]);
        assert!(got["b"].contains("81/TCP (in a: 80/TCP)"), "{}", got["b"]);
        assert!(got["a"].contains("in b"), "{}", got["a"]);
        assert!(!got.contains_key("c"));
        // Agreeing exports, or one alone: no conflict; a withdrawn one does not count.
        assert!(conflicts([("a", &a), ("c", &c)].into_iter()).is_empty());
        let mut gone = b.clone();
        gone.withdrawn = true;
        assert!(conflicts([("a", &a), ("b", &gone)].into_iter()).is_empty());
    }

    #[test]
    fn merged_ports_are_ones_kubernetes_accepts() {
        let port = |name: Option<&str>, n: i32| ServicePort {
            name: name.map(str::to_owned),
            port: n,
            protocol: Some("TCP".into()),
            app_protocol: None,
        };
        // The oldest's unnamed port alone: nothing may join it.
        let got = merge_ports(
            [vec![port(None, 80)], vec![port(Some("http"), 8080)]]
                .iter()
                .map(Vec::as_slice),
        );
        assert_eq!(got, [port(None, 80)]);
        // The same number under another name: not twice.
        let got = merge_ports(
            [
                vec![port(Some("http"), 80)],
                vec![port(Some("web"), 80), port(Some("admin"), 9090)],
            ]
            .iter()
            .map(Vec::as_slice),
        );
        assert_eq!(got, [port(Some("http"), 80), port(Some("admin"), 9090)]);
    }

    #[test]
    fn imports_follow_namespaces_policy_reach_and_refuse_the_api_server() {
        let mut records = BTreeMap::new();
        records.insert(
            key("a", "shop", "cart"),
            record(
                "2026-01-01T00:00:00Z",
                ImportType::ClusterSetIP,
                80,
                &["1.1.1.1"],
            ),
        );
        records.insert(
            key("b", "shop", "cart"),
            record(
                "2026-01-02T00:00:00Z",
                ImportType::ClusterSetIP,
                80,
                &["2.2.2.2"],
            ),
        );
        records.insert(
            key("b", "default", "kubernetes"),
            record(
                "2026-01-02T00:00:00Z",
                ImportType::ClusterSetIP,
                443,
                &["6.6.6.6"],
            ),
        );
        records.insert(
            key("a", "nowhere", "x"),
            record(
                "2026-01-02T00:00:00Z",
                ImportType::ClusterSetIP,
                80,
                &["7.7.7.7"],
            ),
        );
        let mut gone = record(
            "2026-01-02T00:00:00Z",
            ImportType::ClusterSetIP,
            80,
            &["9.9.9.9"],
        );
        gone.withdrawn = true;
        records.insert(key("c", "shop", "cart"), gone);
        let namespaces: BTreeSet<String> = ["shop", "default"].map(String::from).into();
        let policy = Policy::default();
        let reach = |c: &str| {
            if c == "b" {
                Reach::Unreachable
            } else {
                Reach::Ready
            }
        };
        let (got, refused) = imports(&ImportInputs {
            local: "z",
            records: &records,
            reach: &reach,
            namespaces: &namespaces,
            policy: &policy,
        });
        assert_eq!(got.len(), 1, "{got:?}");
        let cart = &got[&("shop".to_owned(), "cart".to_owned())];
        assert_eq!(cart.clusters, ["a", "b"]);
        let ready: Vec<(&str, bool)> = cart
            .slices
            .iter()
            .map(|s| (s.cluster.as_str(), s.slice.endpoints[0].ready))
            .collect();
        // b is unreachable: its endpoints stay, not ready.
        assert_eq!(ready, [("a", true), ("b", false)]);
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].reason, "forbidden");
        // b gone: only a's endpoints.
        let reach = |c: &str| if c == "b" { Reach::Gone } else { Reach::Ready };
        let (got, _) = imports(&ImportInputs {
            local: "z",
            records: &records,
            reach: &reach,
            namespaces: &namespaces,
            policy: &policy,
        });
        assert_eq!(got[&("shop".to_owned(), "cart".to_owned())].clusters, ["a"]);
        // A policy that lets EndpointSlices into `shop` only from a.
        let p = crate::sync::policy::in_force(
            &Policy::default(),
            Some(&json!({
                "apiVersion": "fleetbus.io/v1alpha1", "kind": "SyncPolicy",
                "metadata": {"name": "default", "generation": 1},
                "spec": {"import": {"otherwise": "Deny", "rules": [
                    {"action": "Allow", "kinds": [{"group": "discovery.k8s.io", "kind": "EndpointSlice"}],
                     "namespaces": ["shop"], "authors": ["a"]}
                ]}}
            })),
        );
        assert!(p.origin.invalid().is_none(), "{:?}", p.origin);
        let reach = |_: &str| Reach::Ready;
        let (got, refused) = imports(&ImportInputs {
            local: "z",
            records: &records,
            reach: &reach,
            namespaces: &namespaces,
            policy: &p,
        });
        assert_eq!(got[&("shop".to_owned(), "cart".to_owned())].clusters, ["a"]);
        assert!(
            refused
                .iter()
                .any(|r| r.key.cluster == "b" && r.reason == "policy"),
            "{refused:?}"
        );
    }
}
