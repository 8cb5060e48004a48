//! What each ClusterProfile should say (pure): one per fleet member, this
//! cluster included, from the Cluster objects (live state, version,
//! metadata, the peer's reader Secret) and the fleet view (who left).

use std::collections::BTreeMap;

use fleetbus_schemas::crd::{Cluster, ClusterState, ClusterType};
use fleetbus_schemas::multicluster::{
    AccessProvider, ClientCluster, ClusterProfileStatus, NamedExtension, Property, Version,
    CONDITION_CONTROL_PLANE_HEALTHY, CONDITION_JOINED, EXEC_EXTENSION, PROPERTY_CLUSTER_ID,
    PROPERTY_CLUSTER_SET,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::registry::FleetView;

/// The cluster manager's name: `spec.clusterManager.name` and the
/// `x-k8s.io/cluster-manager` label of every profile fleetbus writes.
pub const MANAGER: &str = "fleetbus";

/// The access provider fleetbus publishes (a consumer's credential provider
/// of this name runs `fleetbus credentials exec`).
pub const PROVIDER: &str = "fleetbus";

/// The value of a property that is longer than the CRD allows is cut to this.
const MAX_VALUE: usize = 1024;

/// A condition as fleetbus decides it; the times are the writer's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// `ControlPlaneHealthy` or `Joined`.
    pub type_: &'static str,
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human-readable detail.
    pub message: String,
}

/// What one profile should say.
#[derive(Debug, Clone, PartialEq)]
pub struct Desired {
    /// The profile's name and `spec.displayName`: the cluster's name.
    pub name: String,
    /// Its conditions.
    pub conditions: Vec<Judged>,
    /// `status.version.kubernetes`.
    pub kubernetes: Option<String>,
    /// `status.properties`, name to value.
    pub properties: BTreeMap<String, String>,
    /// `status.accessProviders`.
    pub access: Vec<AccessProvider>,
}

/// What the inputs of [`desired`] besides the Cluster objects are.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    /// The fleet's name (the ClusterSet).
    pub fleet: &'a str,
    /// The agent's namespace, where peers' reader Secrets are.
    pub namespace: &'a str,
    /// This cluster's own ClusterProperties (name to value), mirrored into
    /// its profile.
    pub local_properties: &'a BTreeMap<String, String>,
    /// This cluster is leaving the fleet (shutting down with leave on).
    pub leaving: bool,
    /// Each peer's API server and CA (base64 PEM), from the kubeconfig it
    /// published (the Secret its Cluster object's `authInfo` names).
    pub endpoints: &'a BTreeMap<String, (String, Option<String>)>,
}

/// The profiles the fleet calls for: one per Cluster object (Local and
/// Peer) whose peer the fleet view still knows. A Cluster object whose peer
/// is forgotten gives none, so its profile is deleted.
pub fn desired(
    clusters: &[std::sync::Arc<Cluster>],
    view: &FleetView,
    inp: Inputs<'_>,
) -> Vec<Desired> {
    clusters
        .iter()
        .filter_map(|c| {
            let name = c.metadata.name.as_deref()?;
            let status = c.status.as_ref()?;
            let local = status.type_ == Some(ClusterType::Local);
            if !local && !view.peers.contains_key(name) {
                return None;
            }
            let state = if local && inp.leaving {
                Some(ClusterState::Left)
            } else {
                status.state
            };
            let member = state != Some(ClusterState::Left);
            let mut properties = BTreeMap::new();
            if local {
                properties.extend(
                    inp.local_properties
                        .iter()
                        .map(|(k, v)| (k.clone(), v.clone())),
                );
            }
            properties.insert(PROPERTY_CLUSTER_ID.to_owned(), name.to_owned());
            if member {
                properties.insert(PROPERTY_CLUSTER_SET.to_owned(), inp.fleet.to_owned());
            } else {
                properties.remove(PROPERTY_CLUSTER_SET);
            }
            properties.insert(
                "fleetbus.io/cluster-id".to_owned(),
                c.spec.cluster_id.clone(),
            );
            let md = status.metadata.as_ref();
            let facts = [
                (
                    "fleetbus.io/region",
                    md.and_then(|m| m.locality.as_ref()?.region.clone()),
                ),
                ("fleetbus.io/provider", md.and_then(|m| m.provider.clone())),
                (
                    "fleetbus.io/distribution",
                    md.and_then(|m| m.distribution.clone()),
                ),
            ];
            for (k, v) in facts {
                if let Some(v) = v.filter(|v| !v.is_empty()) {
                    properties.insert(k.to_owned(), v);
                }
            }
            properties.retain(|k, v| !k.is_empty() && !v.is_empty());
            for v in properties.values_mut() {
                if v.len() > MAX_VALUE {
                    let cut = (0..=MAX_VALUE)
                        .rev()
                        .find(|i| v.is_char_boundary(*i))
                        .unwrap_or(0);
                    v.truncate(cut);
                }
            }
            Some(Desired {
                name: name.to_owned(),
                conditions: judge(state, status.message.as_deref()),
                kubernetes: md.and_then(|m| m.kubernetes_version.clone()),
                properties,
                access: if member {
                    access(c, name, inp)
                } else {
                    Vec::new()
                },
            })
        })
        .collect()
}

/// `ControlPlaneHealthy` and `Joined` from the Cluster's state.
pub fn judge(state: Option<ClusterState>, message: Option<&str>) -> Vec<Judged> {
    let message = message.unwrap_or_default().to_owned();
    let (health, health_reason, joined, joined_reason) = match state {
        Some(ClusterState::Ready) => ("True", "ApiServerReachable", "True", "Member"),
        Some(ClusterState::ApiUnreachable) => ("False", "ApiUnreachable", "True", "Member"),
        Some(ClusterState::Disconnected) => ("Unknown", "Disconnected", "True", "Member"),
        Some(ClusterState::Disabled) => ("Unknown", "Disabled", "True", "Member"),
        Some(ClusterState::Conflict) => ("Unknown", "NameConflict", "True", "Member"),
        Some(ClusterState::Left) => ("Unknown", "Left", "False", "Left"),
        None => ("Unknown", "NotObserved", "True", "Member"),
    };
    vec![
        Judged {
            type_: CONDITION_CONTROL_PLANE_HEALTHY,
            status: health,
            reason: health_reason,
            message: message.clone(),
        },
        Judged {
            type_: CONDITION_JOINED,
            status: joined,
            reason: joined_reason,
            message: if joined == "True" {
                String::new()
            } else {
                "the cluster left the fleet".to_owned()
            },
        },
    ]
}

/// How a consumer reaches a peer: its API server and CA as its published
/// kubeconfig says, and the exec plugin's config (the reader Secret this
/// cluster keeps for it). None without a published kubeconfig.
fn access(c: &Cluster, name: &str, inp: Inputs<'_>) -> Vec<AccessProvider> {
    let (Some(auth), Some((server, ca))) = (&c.spec.auth_info, inp.endpoints.get(name)) else {
        return Vec::new();
    };
    let secret_namespace = if auth.secret_ref.namespace.is_empty() {
        inp.namespace
    } else {
        &auth.secret_ref.namespace
    };
    vec![AccessProvider {
        name: PROVIDER.to_owned(),
        cluster: Some(ClientCluster {
            server: server.clone(),
            certificate_authority_data: ca.clone().filter(|ca| !ca.is_empty()),
            extensions: vec![NamedExtension {
                name: EXEC_EXTENSION.to_owned(),
                extension: serde_json::json!({
                    "clusterName": name,
                    "secretNamespace": secret_namespace,
                    "secretName": auth.secret_ref.name,
                }),
            }],
            ..ClientCluster::default()
        }),
    }]
}

/// The status to write: `desired` over what the profile holds now,
/// keeping each condition's `lastTransitionTime` while its status stays and
/// each property's `lastObservedTime` while its value stays.
pub fn status(
    d: &Desired,
    current: Option<&ClusterProfileStatus>,
    now: &Time,
) -> ClusterProfileStatus {
    let conditions = d
        .conditions
        .iter()
        .map(|j| {
            let old = current.and_then(|s| s.conditions.iter().find(|c| c.type_ == j.type_));
            let since = old
                .filter(|c| c.status == j.status)
                .map_or_else(|| now.clone(), |c| c.last_transition_time.clone());
            Condition {
                type_: j.type_.to_owned(),
                status: j.status.to_owned(),
                reason: j.reason.to_owned(),
                message: j.message.clone(),
                last_transition_time: since,
                observed_generation: None,
            }
        })
        .collect();
    let properties = d
        .properties
        .iter()
        .map(|(name, value)| {
            let seen = current
                .and_then(|s| {
                    s.properties
                        .iter()
                        .find(|p| &p.name == name && &p.value == value)
                })
                .and_then(|p| p.last_observed_time.clone())
                .unwrap_or_else(|| now.clone());
            Property {
                name: name.clone(),
                value: value.clone(),
                last_observed_time: Some(seen),
            }
        })
        .collect();
    ClusterProfileStatus {
        conditions,
        version: Some(Version {
            kubernetes: d.kubernetes.clone(),
        }),
        properties,
        access_providers: d.access.clone(),
        credential_providers: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::crd::{AuthInfo, ClusterSpec, ClusterStatus, NamespacedName};
    use std::sync::Arc;

    fn cluster(name: &str, ty: ClusterType, state: ClusterState) -> Arc<Cluster> {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                cluster_id: format!("uid-{name}"),
                ..ClusterSpec::default()
            },
        );
        c.status = Some(ClusterStatus {
            type_: Some(ty),
            state: Some(state),
            ..ClusterStatus::default()
        });
        Arc::new(c)
    }

    fn view(peers: &[&str]) -> FleetView {
        let mut v = FleetView::new("a");
        for p in peers {
            v.peers.insert(
                (*p).to_owned(),
                crate::registry::PeerView {
                    fitness: false,
                    unserved_kinds: Vec::new(),
                    name: (*p).to_owned(),
                    labels: BTreeMap::new(),
                    features: Vec::new(),
                    left: false,
                    disabled: false,
                    name_conflict: false,
                    record: serde_json::Value::Null,
                    sealing_key: None,
                    taints: Vec::new(),
                },
            );
        }
        v
    }

    static NO_ENDPOINTS: BTreeMap<String, (String, Option<String>)> = BTreeMap::new();

    fn inputs(props: &BTreeMap<String, String>) -> Inputs<'_> {
        Inputs {
            fleet: "f",
            namespace: "fleetbus-system",
            local_properties: props,
            leaving: false,
            endpoints: &NO_ENDPOINTS,
        }
    }

    fn conditions(d: &Desired) -> Vec<(&str, &str)> {
        d.conditions.iter().map(|c| (c.type_, c.status)).collect()
    }

    #[test]
    fn one_profile_per_member_with_conditions_from_its_state() {
        let props = BTreeMap::from([("zone.example.com".to_owned(), "eu".to_owned())]);
        let clusters = [
            cluster("a", ClusterType::Local, ClusterState::Ready),
            cluster("b", ClusterType::Peer, ClusterState::Disconnected),
            cluster("c", ClusterType::Peer, ClusterState::ApiUnreachable),
            cluster("d", ClusterType::Peer, ClusterState::Left),
            cluster("gone", ClusterType::Peer, ClusterState::Ready),
        ];
        let d = desired(&clusters, &view(&["b", "c", "d"]), inputs(&props));
        let names: Vec<_> = d.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["a", "b", "c", "d"], "a forgotten peer has none");
        assert_eq!(
            conditions(&d[0]),
            [("ControlPlaneHealthy", "True"), ("Joined", "True")]
        );
        assert_eq!(
            conditions(&d[1]),
            [("ControlPlaneHealthy", "Unknown"), ("Joined", "True")]
        );
        assert_eq!(
            conditions(&d[2]),
            [("ControlPlaneHealthy", "False"), ("Joined", "True")]
        );
        assert_eq!(
            conditions(&d[3]),
            [("ControlPlaneHealthy", "Unknown"), ("Joined", "False")]
        );
        // Identity properties; the ClusterSet's only while a member; this
        // cluster's own ClusterProperties mirrored into its profile alone.
        assert_eq!(
            d[0].properties
                .get("cluster.clusterset.k8s.io")
                .map(String::as_str),
            Some("a")
        );
        assert_eq!(
            d[0].properties.get("clusterset.k8s.io").map(String::as_str),
            Some("f")
        );
        assert_eq!(
            d[0].properties.get("zone.example.com").map(String::as_str),
            Some("eu")
        );
        assert!(!d[1].properties.contains_key("zone.example.com"));
        assert!(!d[3].properties.contains_key("clusterset.k8s.io"));
        // Leaving: this cluster's own profile says so.
        let leaving = Inputs {
            leaving: true,
            ..inputs(&props)
        };
        let d = desired(&clusters, &view(&["b"]), leaving);
        assert_eq!(
            conditions(&d[0]),
            [("ControlPlaneHealthy", "Unknown"), ("Joined", "False")]
        );
    }

    #[test]
    fn a_peer_with_a_published_kubeconfig_has_an_exec_access_provider() {
        let mut c = (*cluster("b", ClusterType::Peer, ClusterState::Ready)).clone();
        let d = desired(
            &[Arc::new(c.clone())],
            &view(&["b"]),
            inputs(&BTreeMap::new()),
        );
        assert!(d[0].access.is_empty(), "no kubeconfig, no access provider");
        c.spec.auth_info = Some(AuthInfo {
            secret_ref: NamespacedName {
                name: "b-kubeconfig".into(),
                namespace: "fleetbus-system".into(),
            },
        });
        let endpoints = BTreeMap::from([(
            "b".to_owned(),
            ("https://b:6443".to_owned(), Some("Q0E=".to_owned())),
        )]);
        let none = BTreeMap::new();
        let d = desired(
            &[Arc::new(c)],
            &view(&["b"]),
            Inputs {
                endpoints: &endpoints,
                ..inputs(&none)
            },
        );
        let cluster = d[0].access[0].cluster.as_ref().unwrap();
        assert_eq!(d[0].access[0].name, PROVIDER);
        assert_eq!(cluster.server, "https://b:6443");
        assert_eq!(cluster.extensions[0].name, EXEC_EXTENSION);
        assert_eq!(
            cluster.extensions[0].extension["secretName"],
            "b-kubeconfig"
        );
        assert_eq!(cluster.extensions[0].extension["clusterName"], "b");
    }

    #[test]
    fn times_stay_while_values_do() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
        let clusters = [cluster("a", ClusterType::Local, ClusterState::Ready)];
        let d = desired(&clusters, &view(&[]), inputs(&BTreeMap::new())).remove(0);
        let first = status(&d, None, &t0);
        let again = status(&d, Some(&first), &t1);
        assert_eq!(first, again, "nothing changed: the times are kept");
        let down = desired(
            &[cluster(
                "a",
                ClusterType::Local,
                ClusterState::ApiUnreachable,
            )],
            &view(&[]),
            inputs(&BTreeMap::new()),
        )
        .remove(0);
        let changed = status(&down, Some(&first), &t1);
        assert_eq!(changed.conditions[0].last_transition_time, t1);
        assert_eq!(
            changed.conditions[1].last_transition_time, t0,
            "Joined did not change"
        );
        assert_eq!(changed.properties[0].last_observed_time, Some(t0));
    }
}
