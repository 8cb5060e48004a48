//! What a cluster says on the bus of a Service it exports (PROTOCOL §6.11):
//! one record per exported Service on `<p>.svc.<cluster>.<namespace>.<name>`,
//! last value per subject, written only by that cluster (its own subtree;
//! signed in the secure mode). The record carries the Service's type and
//! ports and every endpoint of its EndpointSlices, so an importing cluster
//! needs nothing else; a withdrawn export is a record with `withdrawn` set
//! (kept, so that a cluster that was away learns it too).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::services::ServicePort;
use crate::codec::{decode_json, encode_json, DecodeError, EncodeError};
use crate::k8s_names::is_dns1123_label;
use crate::subject::{decode_token, encode_token, Prefix, SubjectError, TokenError};
use crate::time::rfc3339_ms;

/// `schema` of an [`ExportRecord`].
pub const EXPORT_RECORD_SCHEMA: &str = "fleetbus.io/service-export/v1";
/// Category token: `<p>.svc.<cluster>.<namespace>.<name>`.
pub const SVC: &str = "svc";
/// Most endpoints one record carries: what one Service may cost every
/// importing cluster (an exporter with more publishes the first ones, by
/// slice and address order, and says so on its ServiceExport).
pub const MAX_EXPORT_ENDPOINTS: usize = 1_000;
/// Most ports of one Service (kube-apiserver has no limit; 100 is generous).
pub const MAX_EXPORT_PORTS: usize = 100;
/// Most addresses of one endpoint (EndpointSlice allows 100).
pub const MAX_ENDPOINT_ADDRESSES: usize = 100;
/// Most slices of one record: each becomes an EndpointSlice in every
/// importing cluster (the EndpointSlice controller puts up to 100
/// endpoints in one, so 1,000 endpoints take at least 10).
pub const MAX_EXPORT_SLICES: usize = 100;

/// Identity of one exported Service.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ExportKey {
    /// The exporting cluster (the only writer).
    pub cluster: String,
    /// The Service's namespace.
    pub namespace: String,
    /// The Service's name.
    pub name: String,
}

impl ExportKey {
    /// `<p>.svc.<cluster>.<namespace>.<name>` (each an escaped token).
    pub fn to_subject(&self, prefix: &Prefix) -> String {
        format!(
            "{prefix}.{SVC}.{}.{}.{}",
            encode_token(&self.cluster),
            encode_token(&self.namespace),
            encode_token(&self.name)
        )
    }

    /// Whether every part is a DNS label, as a cluster, a namespace and a
    /// Service name are: importers build object names from them, and a
    /// subject token may carry anything.
    pub fn is_valid(&self) -> bool {
        [&self.cluster, &self.namespace, &self.name]
            .iter()
            .all(|p| is_dns1123_label(p))
    }

    /// Inverse of [`ExportKey::to_subject`].
    pub fn parse_subject(prefix: &Prefix, subject: &str) -> Result<Self, SubjectError> {
        let head = format!("{prefix}.{SVC}.");
        let rest = subject
            .strip_prefix(&head)
            .ok_or_else(|| SubjectError::WrongPrefix {
                subject: subject.to_owned(),
                expected: head.clone(),
            })?;
        let parts: Vec<&str> = rest.split('.').collect();
        let [c, ns, n] = parts[..] else {
            return Err(SubjectError::TokenCount {
                subject: subject.to_owned(),
                expected: 3,
                found: parts.len(),
            });
        };
        let tok =
            |field: &'static str| move |source: TokenError| SubjectError::Token { field, source };
        Ok(Self {
            cluster: decode_token(c).map_err(tok("cluster"))?,
            namespace: decode_token(ns).map_err(tok("namespace"))?,
            name: decode_token(n).map_err(tok("name"))?,
        })
    }
}

/// `<p>.svc.>`: every export record (the SERVICES stream's subjects).
pub fn all_exports(prefix: &Prefix) -> String {
    format!("{prefix}.{SVC}.>")
}

/// `ClusterSetIP` or `Headless`, as the exported Service is (a Service with
/// `clusterIP: None` is headless).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ImportType {
    /// One virtual IP in each importing cluster.
    ClusterSetIP,
    /// DNS answers with the endpoints' addresses.
    Headless,
}

impl ImportType {
    /// The ServiceImport's `spec.type`.
    pub fn as_str(self) -> &'static str {
        match self {
            ImportType::ClusterSetIP => "ClusterSetIP",
            ImportType::Headless => "Headless",
        }
    }
}

/// One endpoint, as an EndpointSlice says it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedEndpoint {
    /// Its addresses.
    pub addresses: Vec<String>,
    /// `conditions.ready` (absent counts as ready, as EndpointSlice says).
    pub ready: bool,
    /// `conditions.serving`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<bool>,
    /// `conditions.terminating`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating: Option<bool>,
    /// Its hostname (headless services' DNS names).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Its zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
}

/// The endpoints of one EndpointSlice of the exported Service.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportedSlice {
    /// `IPv4`, `IPv6` or `FQDN`.
    pub address_type: String,
    /// The slice's ports (the target ports, as the slice says them).
    #[serde(default)]
    pub ports: Vec<ServicePort>,
    /// Its endpoints.
    #[serde(default)]
    pub endpoints: Vec<ExportedEndpoint>,
}

/// The value at `<p>.svc.<cluster>.<namespace>.<name>`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ExportRecord {
    /// When the ServiceExport was created: the oldest export of a name wins
    /// a conflict (KEP-1645).
    #[serde(with = "rfc3339_ms")]
    pub exported_at: DateTime<Utc>,
    /// The export is gone (or its Service, or is no longer valid): importers
    /// withdraw this cluster's endpoints.
    #[serde(default)]
    pub withdrawn: bool,
    /// The import type.
    #[serde(rename = "type")]
    pub type_: ImportType,
    /// The Service's ports.
    #[serde(default)]
    pub ports: Vec<ServicePort>,
    /// `ClientIP` or `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity: Option<String>,
    /// The endpoints, slice by slice.
    #[serde(default)]
    pub slices: Vec<ExportedSlice>,
    /// Endpoints left out by [`MAX_EXPORT_ENDPOINTS`].
    #[serde(default, skip_serializing_if = "is_zero")]
    pub truncated: usize,
    /// Counts this cluster's changes of the record: a reader keeps the
    /// highest it has seen (a replayed older record is refused).
    pub revision: u64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Why a record is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportRecordError {
    /// Too many endpoints, ports or addresses.
    #[error("too large: {0}")]
    TooLarge(&'static str),
    /// A port number out of range.
    #[error("port {0} out of range")]
    BadPort(i32),
    /// An address type other than IPv4, IPv6 or FQDN.
    #[error("address type {0:?} is not IPv4, IPv6 or FQDN")]
    BadAddressType(String),
    /// A hostname that is no DNS label.
    #[error("hostname {0:?} is no DNS label")]
    BadHostname(String),
    /// An address that is not of its slice's type, or one no Service may
    /// route to (loopback, link-local, unspecified, multicast).
    #[error("address {0:?} is not a routable address of its slice's type")]
    BadAddress(String),
    /// A port name that is no IANA service name, a protocol other than
    /// TCP, UDP or SCTP, or a session affinity other than ClientIP or None.
    #[error("{0}")]
    BadField(String),
    /// A slice without endpoints.
    #[error("a slice without endpoints")]
    EmptySlice,
}

/// Whether `s` is a Kubernetes port name (an IANA service name: at most 15
/// lowercase letters, digits and '-', a letter among them, no '--', not at
/// either end).
fn is_port_name(s: &str) -> bool {
    s.len() <= 15
        && crate::k8s_names::is_dns1123_label(s)
        && !s.contains("--")
        && s.bytes().any(|b| b.is_ascii_lowercase())
}

/// An endpoint address kube-apiserver accepts for `address_type`, and not
/// one that would point a Service at the importing cluster itself.
fn is_endpoint_address(address_type: &str, a: &str) -> bool {
    use std::net::IpAddr;
    let routable = |ip: IpAddr| match ip {
        IpAddr::V4(v) => {
            !(v.is_loopback()
                || v.is_link_local()
                || v.is_unspecified()
                || v.is_multicast()
                || v.is_broadcast())
        }
        IpAddr::V6(v) => {
            !(v.is_loopback()
                || v.is_unspecified()
                || v.is_multicast()
                || (v.segments()[0] & 0xffc0) == 0xfe80)
        }
    };
    match address_type {
        "IPv4" => a
            .parse::<std::net::Ipv4Addr>()
            .is_ok_and(|v| routable(IpAddr::V4(v))),
        "IPv6" => a
            .parse::<std::net::Ipv6Addr>()
            .is_ok_and(|v| routable(IpAddr::V6(v))),
        "FQDN" => crate::k8s_names::is_dns1123_subdomain(a),
        _ => false,
    }
}

fn check_port(p: &ServicePort) -> Result<(), ExportRecordError> {
    if !(1..=65535).contains(&p.port) {
        return Err(ExportRecordError::BadPort(p.port));
    }
    if let Some(n) = p
        .name
        .as_deref()
        .filter(|n| !n.is_empty() && !is_port_name(n))
    {
        return Err(ExportRecordError::BadField(format!(
            "port name {n:?} is no IANA service name"
        )));
    }
    if let Some(proto) = p
        .protocol
        .as_deref()
        .filter(|p| !matches!(*p, "TCP" | "UDP" | "SCTP"))
    {
        return Err(ExportRecordError::BadField(format!(
            "protocol {proto:?} is not TCP, UDP or SCTP"
        )));
    }
    if let Some(a) = p
        .app_protocol
        .as_deref()
        .filter(|a| !crate::k8s_names::is_qualified_name(a))
    {
        return Err(ExportRecordError::BadField(format!(
            "appProtocol {a:?} is no qualified name"
        )));
    }
    Ok(())
}

impl ExportRecord {
    /// JSON with `"schema": "fleetbus.io/service-export/v1"` first.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_json(EXPORT_RECORD_SCHEMA, self)
    }

    /// Decodes a record (see [`ExportRecord::validate`]).
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_json(EXPORT_RECORD_SCHEMA, bytes)
    }

    /// Every endpoint counted against [`MAX_EXPORT_ENDPOINTS`].
    pub fn endpoint_count(&self) -> usize {
        self.slices.iter().map(|s| s.endpoints.len()).sum()
    }

    /// Bounded and well-formed as kube-apiserver would have it: what an
    /// importer writes comes from here, and a record it would refuse must
    /// not reach the importer's API server (retried for ever).
    pub fn validate(&self) -> Result<(), ExportRecordError> {
        if self.endpoint_count() > MAX_EXPORT_ENDPOINTS {
            return Err(ExportRecordError::TooLarge("endpoints"));
        }
        if self.slices.len() > MAX_EXPORT_SLICES {
            return Err(ExportRecordError::TooLarge("slices"));
        }
        let slice_ports = self.slices.iter().flat_map(|s| &s.ports);
        if self.ports.len() > MAX_EXPORT_PORTS
            || self.slices.iter().any(|s| s.ports.len() > MAX_EXPORT_PORTS)
        {
            return Err(ExportRecordError::TooLarge("ports"));
        }
        for p in self.ports.iter().chain(slice_ports) {
            check_port(p)?;
        }
        if let Some(a) = self
            .session_affinity
            .as_deref()
            .filter(|a| !matches!(*a, "ClientIP" | "None"))
        {
            return Err(ExportRecordError::BadField(format!(
                "sessionAffinity {a:?} is not ClientIP or None"
            )));
        }
        for s in &self.slices {
            if !matches!(s.address_type.as_str(), "IPv4" | "IPv6" | "FQDN") {
                return Err(ExportRecordError::BadAddressType(s.address_type.clone()));
            }
            if s.endpoints.is_empty() {
                return Err(ExportRecordError::EmptySlice);
            }
            for e in &s.endpoints {
                if e.addresses.is_empty() || e.addresses.len() > MAX_ENDPOINT_ADDRESSES {
                    return Err(ExportRecordError::TooLarge("addresses of one endpoint"));
                }
                if let Some(a) = e
                    .addresses
                    .iter()
                    .find(|a| !is_endpoint_address(&s.address_type, a))
                {
                    return Err(ExportRecordError::BadAddress(a.clone()));
                }
                if let Some(h) = e.hostname.as_deref().filter(|h| !is_dns1123_label(h)) {
                    return Err(ExportRecordError::BadHostname(h.to_owned()));
                }
                if let Some(z) = e
                    .zone
                    .as_deref()
                    .filter(|z| !crate::k8s_names::is_label_value(z))
                {
                    return Err(ExportRecordError::BadField(format!(
                        "zone {z:?} is no label value"
                    )));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn record() -> ExportRecord {
        ExportRecord {
            exported_at: "2026-01-01T00:00:00Z".parse().unwrap(),
            withdrawn: false,
            type_: ImportType::ClusterSetIP,
            ports: vec![ServicePort {
                name: Some("http".into()),
                port: 80,
                protocol: Some("TCP".into()),
                app_protocol: None,
            }],
            session_affinity: None,
            slices: vec![ExportedSlice {
                address_type: "IPv4".into(),
                ports: vec![],
                endpoints: vec![ExportedEndpoint {
                    addresses: vec!["10.0.0.1".into()],
                    ready: true,
                    serving: None,
                    terminating: None,
                    hostname: None,
                    zone: None,
                }],
            }],
            truncated: 0,
            revision: 1,
        }
    }

    #[test]
    fn keys_round_trip_through_subjects_and_refuse_other_shapes() {
        let p = Prefix::default();
        let k = ExportKey {
            cluster: "east".into(),
            namespace: "shop".into(),
            name: "cart".into(),
        };
        assert_eq!(k.to_subject(&p), "fleetbus.svc.east.shop.cart");
        assert_eq!(ExportKey::parse_subject(&p, &k.to_subject(&p)).unwrap(), k);
        assert!(ExportKey::parse_subject(&p, "fleetbus.svc.east.shop").is_err());
        assert!(ExportKey::parse_subject(&p, "fleetbus.svc.east.shop.cart.x").is_err());
        assert!(ExportKey::parse_subject(&p, "fleetbus.obj.east.shop.cart").is_err());
        assert!(k.is_valid());
        let odd = ExportKey {
            name: format!("x{}", "é".repeat(30)),
            ..k
        };
        assert!(!odd.is_valid());
    }

    #[test]
    fn records_round_trip_and_bad_ones_are_refused() {
        let r = record();
        let back = ExportRecord::decode(&r.encode().unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(back.validate().is_ok());
        let mut bad = r.clone();
        bad.ports[0].port = 70_000;
        assert_eq!(bad.validate(), Err(ExportRecordError::BadPort(70_000)));
        let mut bad = r.clone();
        bad.slices[0].address_type = "Bogus".into();
        assert!(matches!(
            bad.validate(),
            Err(ExportRecordError::BadAddressType(_))
        ));
        let mut bad = r.clone();
        bad.slices[0].endpoints[0].addresses.clear();
        assert!(bad.validate().is_err());
        let mut big = r.clone();
        big.slices[0].endpoints =
            vec![big.slices[0].endpoints[0].clone(); MAX_EXPORT_ENDPOINTS + 1];
        assert_eq!(
            big.validate(),
            Err(ExportRecordError::TooLarge("endpoints"))
        );
        let mut bad = r.clone();
        bad.slices[0].endpoints[0].hostname = Some("Not A Label".into());
        assert!(bad.validate().is_err());
        // What kube-apiserver would refuse, or what points at the importer.
        for addr in [
            "127.0.0.1",
            "169.254.1.1",
            "0.0.0.0",
            "::1",
            "not-an-ip",
            "10.0.0.300",
        ] {
            let mut bad = r.clone();
            bad.slices[0].endpoints[0].addresses = vec![addr.into()];
            assert!(
                matches!(bad.validate(), Err(ExportRecordError::BadAddress(_))),
                "{addr}"
            );
        }
        let mut bad = r.clone();
        bad.ports[0].name = Some("Bad_Name".into());
        assert!(matches!(
            bad.validate(),
            Err(ExportRecordError::BadField(_))
        ));
        let mut bad = r.clone();
        bad.ports[0].protocol = Some("HTTP".into());
        assert!(bad.validate().is_err());
        let mut bad = r.clone();
        bad.session_affinity = Some("Sticky".into());
        assert!(bad.validate().is_err());
        // Many empty slices would cost every importer an object each.
        let mut bad = r.clone();
        bad.slices[0].endpoints.clear();
        assert_eq!(bad.validate(), Err(ExportRecordError::EmptySlice));
        let mut bad = r;
        bad.slices = vec![bad.slices[0].clone(); MAX_EXPORT_SLICES + 1];
        assert_eq!(bad.validate(), Err(ExportRecordError::TooLarge("slices")));
        assert!(ExportRecord::decode(b"{\"schema\":\"fleetbus.io/service-export/v9\"}").is_err());
    }
}
