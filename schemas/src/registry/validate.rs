//! Full validation of registry records against what Kubernetes accepts, so no record can block a reader.
//!
//! Every value a reader copies into a Kubernetes object (the peer Cluster's
//! name, labels, spec and status, its kubeconfig Secret, condition messages)
//! is checked here with the API server's own rules (`k8s_names`), and every
//! list is bounded. A record that passes is one the API server takes; one that
//! fails is skipped and counted like any other garbage, never retried.

use std::collections::BTreeMap;

use crate::k8s_names::{is_dns1123_label, is_label_value, is_qualified_name};

use super::record::{ClusterRecord, KubeconfigRecord};

/// Most labels a record (or one of its features) may carry. Kubernetes has
/// no count limit, but a peer object must stay far below the API server's
/// request size limit, and no real cluster needs more.
pub const MAX_LABELS: usize = 256;
/// Most features a record may list (each becomes an entry of `status.features`).
pub const MAX_FEATURES: usize = 256;
/// Most members a record may list (a fleet larger than this cannot form:
/// every reader would reject every record). Readers that render member lists
/// into condition messages cut those messages to Kubernetes' 32768 bytes.
pub const MAX_MEMBERS: usize = 5000;
/// Most API endpoints a record may list.
pub const MAX_ENDPOINTS: usize = 16;
/// Longest free-text value (versions, provider, region, clusterID, ...).
pub const MAX_TEXT_LEN: usize = 256;
/// Longest free-text value that may hold a PEM bundle or a kubeconfig.
pub const MAX_BLOB_LEN: usize = 512 * 1024;
/// Longest entry of a list of free-text values (kubelet versions, zones).
pub const MAX_LIST_LEN: usize = 256;

/// Why a record that decoded is still not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidRecord {
    /// The cluster name is not a DNS-1123 label (it names a Cluster object and a Secret).
    #[error("name {0:?} is not a DNS-1123 label")]
    Name(String),
    /// A label key is not a qualified name.
    #[error("label key {0:?} is not a valid Kubernetes label key")]
    LabelKey(String),
    /// A label value is not a valid label value.
    #[error("value of label {key:?} is not a valid Kubernetes label value")]
    LabelValue {
        /// The label's key.
        key: String,
    },
    /// A list is longer than this protocol allows.
    #[error("{field} has {len} entries, more than the {max} allowed")]
    TooMany {
        /// Which list (JSON path).
        field: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A text field is empty where it must not be, too long, or holds control characters.
    #[error("{field} is empty, longer than {max} bytes or holds control characters")]
    Text {
        /// Which field (JSON path).
        field: &'static str,
        /// The length limit.
        max: usize,
    },
    /// A member name is not a DNS-1123 label.
    #[error("member {0:?} is not a DNS-1123 label")]
    Member(String),
    /// `membersDigest.sha256` is not 64 lowercase hex digits.
    #[error("membersDigest.sha256 is not 64 lowercase hex digits")]
    MembersDigest,
}

impl InvalidRecord {
    /// Never: the same record fails the same way on every attempt.
    pub fn is_transient(&self) -> bool {
        false
    }
}

fn text(field: &'static str, s: &str, max: usize, may_be_empty: bool) -> Result<(), InvalidRecord> {
    let ok = (may_be_empty || !s.is_empty())
        && s.len() <= max
        && !s.chars().any(|c| c.is_control() && c != '\n');
    if ok {
        Ok(())
    } else {
        Err(InvalidRecord::Text { field, max })
    }
}

fn count(field: &'static str, len: usize, max: usize) -> Result<(), InvalidRecord> {
    if len > max {
        Err(InvalidRecord::TooMany { field, len, max })
    } else {
        Ok(())
    }
}

/// Labels as Kubernetes validates `metadata.labels`.
pub fn validate_labels(
    field: &'static str,
    labels: &BTreeMap<String, String>,
) -> Result<(), InvalidRecord> {
    count(field, labels.len(), MAX_LABELS)?;
    for (k, v) in labels {
        if !is_qualified_name(k) {
            return Err(InvalidRecord::LabelKey(k.clone()));
        }
        if !is_label_value(v) {
            return Err(InvalidRecord::LabelValue { key: k.clone() });
        }
    }
    Ok(())
}

fn name(s: &str) -> Result<(), InvalidRecord> {
    if is_dns1123_label(s) {
        Ok(())
    } else {
        Err(InvalidRecord::Name(s.to_owned()))
    }
}

fn list(field: &'static str, items: &[String]) -> Result<(), InvalidRecord> {
    count(field, items.len(), MAX_LIST_LEN)?;
    items
        .iter()
        .try_for_each(|s| text(field, s, MAX_TEXT_LEN, false))
}

fn opt(field: &'static str, s: Option<&String>) -> Result<(), InvalidRecord> {
    s.map_or(Ok(()), |s| text(field, s, MAX_TEXT_LEN, false))
}

impl ClusterRecord {
    /// Checks every field a reader writes into Kubernetes against the API
    /// server's rules and this protocol's bounds. Pure; the first problem wins.
    pub fn validate(&self) -> Result<(), InvalidRecord> {
        name(&self.name)?;
        text("clusterID", &self.cluster_id, MAX_TEXT_LEN, false)?;
        validate_labels("labels", &self.labels)?;
        count(
            "kubernetesApiEndpoints",
            self.kubernetes_api_endpoints.len(),
            MAX_ENDPOINTS,
        )?;
        for e in &self.kubernetes_api_endpoints {
            text(
                "kubernetesApiEndpoints[].clientNetwork",
                &e.client_network,
                MAX_TEXT_LEN,
                true,
            )?;
            text(
                "kubernetesApiEndpoints[].serverAddress",
                &e.server_address,
                MAX_TEXT_LEN,
                false,
            )?;
            text(
                "kubernetesApiEndpoints[].caBundle",
                &e.ca_bundle,
                MAX_BLOB_LEN,
                true,
            )?;
        }
        let m = &self.metadata;
        opt("metadata.provider", m.provider.as_ref())?;
        opt("metadata.distribution", m.distribution.as_ref())?;
        opt("metadata.kubernetesVersion", m.kubernetes_version.as_ref())?;
        list("metadata.kubeletVersions", &m.kubelet_versions)?;
        list("metadata.kubeProxyVersions", &m.kube_proxy_versions)?;
        if let Some(l) = &m.locality {
            opt("metadata.locality.region", l.region.as_ref())?;
            list("metadata.locality.regions", &l.regions)?;
            list("metadata.locality.zones", &l.zones)?;
        }
        count("features", self.features.len(), MAX_FEATURES)?;
        for f in &self.features {
            text(
                "features[].featureName",
                &f.feature_name,
                MAX_TEXT_LEN,
                false,
            )?;
            validate_labels("features[].labels", &f.labels)?;
        }
        text("agentVersion", &self.agent_version, MAX_TEXT_LEN, true)?;
        count(
            "unservedKinds",
            self.unserved_kinds.len(),
            super::record::MAX_UNSERVED_KINDS,
        )?;
        for k in &self.unserved_kinds {
            text("unservedKinds[]", k, MAX_TEXT_LEN, false)?;
        }
        count("members", self.members.len(), MAX_MEMBERS)?;
        if let Some(bad) = self.members.iter().find(|m| !is_dns1123_label(m)) {
            return Err(InvalidRecord::Member(bad.clone()));
        }
        if let Some(d) = &self.members_digest {
            count("membersDigest.count", d.count as usize, MAX_MEMBERS)?;
            if !d.is_well_formed() {
                return Err(InvalidRecord::MembersDigest);
            }
        }
        text("api.message", &self.api.message, MAX_TEXT_LEN * 4, true)?;
        Ok(())
    }
}

impl KubeconfigRecord {
    /// Checks the name (it names a Secret `<name>-kubeconfig`), the clusterID
    /// and the size of the kubeconfig (a Secret holds at most 1 MiB).
    pub fn validate(&self) -> Result<(), InvalidRecord> {
        name(&self.name)?;
        text("clusterID", &self.cluster_id, MAX_TEXT_LEN, false)?;
        // Sealed (§5.2): the text is in `sealed`, `kubeconfig` is empty.
        text(
            "kubeconfig",
            &self.kubeconfig,
            MAX_BLOB_LEN,
            self.sealed.is_some(),
        )?;
        match &self.sealed {
            Some(h) if h.ciphertext.len() > MAX_BLOB_LEN * 2 => Err(InvalidRecord::Text {
                field: "sealed.ciphertext",
                max: MAX_BLOB_LEN * 2,
            }),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{ApiHealth, FeatureRecord, MemberState};

    fn good() -> ClusterRecord {
        let t = chrono::DateTime::from_timestamp_millis(0).unwrap_or_default();
        ClusterRecord {
            fitness: false,
            unserved_kinds: Vec::new(),
            certificate: None,
            name: "east".into(),
            cluster_id: "6f1c2d3e-8a9b-4c5d-9e0f-112233445566".into(),
            state: MemberState::Active,
            labels: BTreeMap::from([("env".into(), "prod".into())]),
            kubernetes_api_endpoints: vec![],
            metadata: Default::default(),
            features: vec![],
            agent_version: "0.1.0".into(),
            protocol: crate::registry::PROTOCOL_VERSION,
            started_at: t,
            heartbeat_at: t,
            heartbeat_interval_seconds: 1,
            seq: 1,
            members: vec!["east".into()],
            members_digest: None,
            api: ApiHealth::default(),
            beats: false,
        }
    }

    #[test]
    fn a_normal_record_is_valid() {
        assert_eq!(good().validate(), Ok(()));
    }

    #[test]
    fn label_values_kubernetes_refuses_are_invalid() {
        let mut r = good();
        r.labels
            .insert("env".into(), "not a valid label value!".into());
        assert_eq!(
            r.validate(),
            Err(InvalidRecord::LabelValue { key: "env".into() })
        );
        let mut r = good();
        r.labels.insert("bad key!".into(), "x".into());
        assert!(matches!(r.validate(), Err(InvalidRecord::LabelKey(_))));
        let mut r = good();
        r.labels.insert("v".into(), "a".repeat(64));
        assert!(matches!(
            r.validate(),
            Err(InvalidRecord::LabelValue { .. })
        ));
    }

    #[test]
    fn a_forged_members_digest_is_invalid() {
        let mut r = good();
        r.set_members(&crate::registry::MemberSet::new(["east", "west"]));
        assert_eq!(r.validate(), Ok(()));
        for bad in ["", "zz", &"A".repeat(64), &"0".repeat(63), &"0".repeat(65)] {
            let mut r = r.clone();
            if let Some(d) = r.members_digest.as_mut() {
                d.sha256 = bad.to_owned();
            }
            assert_eq!(r.validate(), Err(InvalidRecord::MembersDigest), "{bad:?}");
        }
        if let Some(d) = r.members_digest.as_mut() {
            d.count = u32::MAX;
        }
        assert!(matches!(
            r.validate(),
            Err(InvalidRecord::TooMany {
                field: "membersDigest.count",
                ..
            })
        ));
    }

    #[test]
    fn huge_lists_are_invalid() {
        let mut r = good();
        r.labels = (0..=MAX_LABELS)
            .map(|i| (format!("l{i}"), "v".into()))
            .collect();
        assert!(matches!(
            r.validate(),
            Err(InvalidRecord::TooMany {
                field: "labels",
                ..
            })
        ));
        let mut r = good();
        r.members = (0..=MAX_MEMBERS).map(|i| format!("m{i}")).collect();
        assert!(matches!(r.validate(), Err(InvalidRecord::TooMany { .. })));
        let mut r = good();
        r.features = (0..=MAX_FEATURES)
            .map(|i| FeatureRecord {
                feature_name: format!("f{i}"),
                labels: BTreeMap::new(),
            })
            .collect();
        assert!(matches!(r.validate(), Err(InvalidRecord::TooMany { .. })));
    }

    #[test]
    fn names_valid_on_the_bus_but_not_in_kubernetes_are_invalid() {
        for bad in ["East", "a_b", "", "-a", &"a".repeat(64)] {
            let mut r = good();
            r.name = bad.into();
            assert!(matches!(r.validate(), Err(InvalidRecord::Name(_))), "{bad}");
        }
        let mut r = good();
        r.members.push("Not_A_Name".into());
        assert!(matches!(r.validate(), Err(InvalidRecord::Member(_))));
    }

    #[test]
    fn text_fields_are_bounded() {
        let mut r = good();
        r.agent_version = "v".repeat(MAX_TEXT_LEN + 1);
        assert!(matches!(r.validate(), Err(InvalidRecord::Text { .. })));
        let mut r = good();
        r.cluster_id = String::new();
        assert!(matches!(r.validate(), Err(InvalidRecord::Text { .. })));
        let mut r = good();
        r.metadata.provider = Some("a\u{0}b".into());
        assert!(matches!(r.validate(), Err(InvalidRecord::Text { .. })));
        let mut r = good();
        r.features.push(FeatureRecord {
            feature_name: "istio".into(),
            labels: BTreeMap::from([("x".into(), "bad value".into())]),
        });
        assert!(matches!(
            r.validate(),
            Err(InvalidRecord::LabelValue { .. })
        ));
    }
}
