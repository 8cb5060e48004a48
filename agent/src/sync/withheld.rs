//! What is never published, whatever a rule says: credentials that are only
//! valid on (or for) their own cluster, and every object fleetbus writes itself.
//!
//! A ServiceAccount token or a bootstrap token copied elsewhere is a
//! credential for this cluster lying in another one. An object fleetbus
//! writes (a peer's kubeconfig Secret, a Cluster object, a ReportedState, an
//! Event it records, the reader ServiceAccount and its RBAC) is already made
//! by every agent for itself: published, it would arrive on the peers as an
//! original of this cluster (a's `b-kubeconfig` landing on b).
//!
//! An orphaned copy (`fleetbus.io/orphaned-from`) is held back the same way,
//! until someone removes the annotation: it is another cluster's object that a
//! sink stopped managing, and published from here it would come back to the
//! clusters its origin still writes as a second original.
//!
//! [`withheld`] decides; `source::plan` publishes nothing for such an object
//! (and withdraws what was published before), and the rules that select it
//! count it in their status (`skipped`, condition `Skipped`).

use fleetbus_schemas::well_known;
use serde_json::Value;

/// Why an object is never published.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Withheld {
    /// A Secret of type `kubernetes.io/service-account-token`.
    ServiceAccountToken,
    /// A Secret of type `bootstrap.kubernetes.io/token`.
    BootstrapToken,
    /// An object fleetbus writes itself: labelled `fleetbus.io/managed=true`
    /// (peer kubeconfig Secrets, ReportedStates) or
    /// `app.kubernetes.io/managed-by=fleetbus-agent` (the reader
    /// ServiceAccount and RBAC), a peer kubeconfig Secret by its type, a
    /// Cluster object, a ReportedState, or an Event the agent recorded.
    WrittenByFleetbus,
    /// A copy its sink left in place when it stopped managing it
    /// (`fleetbus.io/orphaned-from`): published from here it would travel
    /// back as this cluster's original and fight its origin's copies.
    OrphanedCopy,
}

impl Withheld {
    /// A CamelCase reason, for status conditions and logs.
    pub fn reason(self) -> &'static str {
        match self {
            Self::ServiceAccountToken => "ServiceAccountToken",
            Self::BootstrapToken => "BootstrapToken",
            Self::WrittenByFleetbus => "WrittenByFleetbus",
            Self::OrphanedCopy => "OrphanedCopy",
        }
    }

    /// Why, in words, for status messages.
    pub fn why(self) -> &'static str {
        match self {
            Self::ServiceAccountToken => "a service account token never leaves its cluster",
            Self::BootstrapToken => "a bootstrap token never leaves its cluster",
            Self::WrittenByFleetbus => "fleetbus writes it on every cluster itself",
            Self::OrphanedCopy => {
                "an orphaned copy of another cluster's object (remove the annotation fleetbus.io/orphaned-from to publish it from here)"
            }
        }
    }
}

/// Why `obj` (a complete object: apiVersion, kind, metadata) must never be
/// published, or `None` if a rule may publish it.
pub fn withheld(obj: &Value) -> Option<Withheld> {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str);
    let (api_version, kind) = (s("/apiVersion").unwrap_or(""), s("/kind").unwrap_or(""));
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    if group.is_empty() && kind == "Secret" {
        match s("/type") {
            Some(well_known::SECRET_TYPE_SERVICE_ACCOUNT_TOKEN) => {
                return Some(Withheld::ServiceAccountToken)
            }
            Some(well_known::SECRET_TYPE_BOOTSTRAP_TOKEN) => return Some(Withheld::BootstrapToken),
            Some(
                well_known::SECRET_TYPE_CLUSTER_KUBECONFIG | well_known::SECRET_TYPE_COPY_MARK_KEY,
            ) => return Some(Withheld::WrittenByFleetbus),
            _ => {}
        }
    }
    let written = labelled(
        obj,
        well_known::LABEL_MANAGED,
        well_known::LABEL_MANAGED_VALUE,
    ) || labelled(
        obj,
        well_known::LABEL_MANAGED_BY,
        well_known::MANAGED_BY_AGENT,
    ) || (group == well_known::GROUP && matches!(kind, "Cluster" | "ReportedState"))
        || (kind == "Event" && recorded_by_agent(obj, group));
    if written {
        return Some(Withheld::WrittenByFleetbus);
    }
    let annotated = obj
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(well_known::ANNOTATION_ORPHANED_FROM))
        .is_some();
    annotated.then_some(Withheld::OrphanedCopy)
}

fn labelled(obj: &Value, key: &str, value: &str) -> bool {
    obj.pointer("/metadata/labels")
        .and_then(|l| l.get(key))
        .and_then(Value::as_str)
        == Some(value)
}

/// An Event the agent recorded: core `v1` names its recorder
/// `reportingComponent`/`source`, `events.k8s.io/v1` (the same objects seen
/// through the newer API) `reportingController`/`deprecatedSource`.
fn recorded_by_agent(obj: &Value, group: &str) -> bool {
    let s = |p: &str| obj.pointer(p).and_then(Value::as_str);
    let (reporter, source) = match group {
        "" => ("/reportingComponent", "/source/component"),
        "events.k8s.io" => ("/reportingController", "/deprecatedSource/component"),
        _ => return false,
    };
    s(reporter) == Some(well_known::EVENT_REPORTING_COMPONENT)
        || s(source) == Some(well_known::EVENT_SOURCE_COMPONENT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(type_: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "type": type_,
               "metadata": {"namespace": "kube-system", "name": "s"}, "data": {"token": "eA=="}})
    }

    fn with_label(mut obj: Value, key: &str, value: &str) -> Value {
        obj["metadata"]["labels"] = json!({ key: value });
        obj
    }

    #[test]
    fn credentials_of_the_cluster_are_withheld() {
        assert_eq!(
            withheld(&secret("kubernetes.io/service-account-token")),
            Some(Withheld::ServiceAccountToken)
        );
        assert_eq!(
            withheld(&secret("bootstrap.kubernetes.io/token")),
            Some(Withheld::BootstrapToken)
        );
        // Ordinary Secrets, and the types' names on another kind, are not.
        for t in [
            "Opaque",
            "kubernetes.io/tls",
            "kubernetes.io/dockerconfigjson",
            "",
        ] {
            assert_eq!(withheld(&secret(t)), None, "{t}");
        }
        assert_eq!(
            withheld(&json!({"apiVersion": "v1", "kind": "Secret"})),
            None
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "type": "kubernetes.io/service-account-token", "metadata": {"name": "c"}});
        assert_eq!(withheld(&cm), None);
        let other_group = json!({"apiVersion": "example.com/v1", "kind": "Secret",
                                 "type": "bootstrap.kubernetes.io/token", "metadata": {"name": "c"}});
        assert_eq!(withheld(&other_group), None);
    }

    #[test]
    fn an_orphaned_copy_is_withheld_until_its_annotation_goes() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"namespace": "team", "name": "c",
                                         "annotations": {"example.com/x": "y"}}});
        assert_eq!(withheld(&cm), None);
        cm["metadata"]["annotations"][well_known::ANNOTATION_ORPHANED_FROM] = json!("c1");
        assert_eq!(withheld(&cm), Some(Withheld::OrphanedCopy));
        // Whatever its value: the annotation is the user's switch.
        cm["metadata"]["annotations"][well_known::ANNOTATION_ORPHANED_FROM] = json!("");
        assert_eq!(withheld(&cm), Some(Withheld::OrphanedCopy));
    }

    #[test]
    fn peer_kubeconfig_secrets_are_withheld_by_type_or_label() {
        let peer = with_label(
            secret(well_known::SECRET_TYPE_CLUSTER_KUBECONFIG),
            well_known::LABEL_MANAGED,
            well_known::LABEL_MANAGED_VALUE,
        );
        assert_eq!(withheld(&peer), Some(Withheld::WrittenByFleetbus));
        // Either mark alone is enough.
        assert_eq!(
            withheld(&secret(well_known::SECRET_TYPE_CLUSTER_KUBECONFIG)),
            Some(Withheld::WrittenByFleetbus)
        );
        let labelled_only = with_label(
            secret("Opaque"),
            well_known::LABEL_MANAGED,
            well_known::LABEL_MANAGED_VALUE,
        );
        assert_eq!(withheld(&labelled_only), Some(Withheld::WrittenByFleetbus));
        // Another value of the label is not fleetbus's mark.
        assert_eq!(
            withheld(&with_label(
                secret("Opaque"),
                well_known::LABEL_MANAGED,
                "false"
            )),
            None
        );
    }

    #[test]
    fn what_the_agent_creates_for_itself_is_withheld() {
        let sa = with_label(
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"namespace": "fleetbus-system", "name": "fleetbus-reader"}}),
            well_known::LABEL_MANAGED_BY,
            well_known::MANAGED_BY_AGENT,
        );
        assert_eq!(withheld(&sa), Some(Withheld::WrittenByFleetbus));
        let helm = with_label(sa.clone(), well_known::LABEL_MANAGED_BY, "Helm");
        assert_eq!(withheld(&helm), None);
        for kind in ["Cluster", "ReportedState"] {
            let o = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": kind,
                           "metadata": {"name": "b"}});
            assert_eq!(withheld(&o), Some(Withheld::WrittenByFleetbus), "{kind}");
        }
        // Rules and Bundles are the user's: published.
        for kind in ["ResourceSyncRule", "Bundle", "ClusterFeature"] {
            let o = json!({"apiVersion": "fleetbus.io/v1alpha1", "kind": kind,
                           "metadata": {"name": "r"}});
            assert_eq!(withheld(&o), None, "{kind}");
        }
        // Another group's Cluster kind (e.g. Cluster API) is not ours.
        let capi = json!({"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
                          "metadata": {"namespace": "default", "name": "c"}});
        assert_eq!(withheld(&capi), None);
    }

    #[test]
    fn events_the_agent_recorded_are_withheld_in_either_api() {
        let core = json!({"apiVersion": "v1", "kind": "Event",
                          "metadata": {"namespace": "default", "name": "e"},
                          "reportingComponent": well_known::EVENT_REPORTING_COMPONENT,
                          "source": {"component": well_known::EVENT_SOURCE_COMPONENT}});
        assert_eq!(withheld(&core), Some(Withheld::WrittenByFleetbus));
        let old_style = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
                               "source": {"component": well_known::EVENT_SOURCE_COMPONENT}});
        assert_eq!(withheld(&old_style), Some(Withheld::WrittenByFleetbus));
        let new_api = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
                             "metadata": {"name": "e"},
                             "reportingController": well_known::EVENT_REPORTING_COMPONENT});
        assert_eq!(withheld(&new_api), Some(Withheld::WrittenByFleetbus));
        let others = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
                            "reportingComponent": "kubelet", "source": {"component": "kubelet"}});
        assert_eq!(withheld(&others), None);
    }

    #[test]
    fn reasons_are_camel_case_and_explained() {
        for w in [
            Withheld::ServiceAccountToken,
            Withheld::BootstrapToken,
            Withheld::WrittenByFleetbus,
        ] {
            assert!(w.reason().chars().all(|c| c.is_ascii_alphanumeric()));
            assert!(!w.why().is_empty());
        }
    }
}
