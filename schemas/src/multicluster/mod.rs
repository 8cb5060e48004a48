//! SIG Multicluster's standard kinds as published upstream, field by field:
//! `ClusterProfile` (KEP-4322, kubernetes-sigs/cluster-inventory-api v0.1.2,
//! `multicluster.x-k8s.io/v1alpha1`) and `ClusterProperty` (KEP-2149, the
//! About API, `about.k8s.io`, v1beta1 stored, v1alpha1 also served). Their
//! CRDs are not fleetbus's: platform teams install them from upstream, and
//! other cluster managers share them, so they are not in `crd::all_crds`.
//! Multi-cluster Services (KEP-1645, kubernetes-sigs/mcs-api v0.5.0):
//! `ServiceExport` and `ServiceImport` (v1beta1 stored, v1alpha1 served),
//! and the record an exporting cluster publishes (`exported`).

mod cluster_profile;
mod cluster_property;
mod exported;
mod services;

pub use cluster_profile::{
    AccessProvider, ClientCluster, ClusterManager, ClusterProfile, ClusterProfileSpec,
    ClusterProfileStatus, NamedExtension, Property, Version, CLUSTER_MANAGER_LABEL,
    CLUSTER_SET_LABEL, CONDITION_CONTROL_PLANE_HEALTHY, CONDITION_JOINED, EXEC_EXTENSION,
};
pub use cluster_property::{
    ClusterProperty, ClusterPropertySpec, CLUSTER_PROPERTY_GROUP, CLUSTER_PROPERTY_PLURAL,
    CLUSTER_PROPERTY_VERSIONS, PROPERTY_CLUSTER_ID, PROPERTY_CLUSTER_SET,
};
pub use exported::{
    all_exports, ExportKey, ExportRecord, ExportRecordError, ExportedEndpoint, ExportedSlice,
    ImportType, EXPORT_RECORD_SCHEMA, MAX_ENDPOINT_ADDRESSES, MAX_EXPORT_ENDPOINTS,
    MAX_EXPORT_PORTS, MAX_EXPORT_SLICES, SVC,
};
pub use services::{
    ClientIpConfig, ClusterStatus, ServiceExport, ServiceExportSpec, ServiceExportStatus,
    ServiceImport, ServiceImportSpec, ServiceImportStatus, ServicePort, SessionAffinityConfig,
    CONDITION_CONFLICT, CONDITION_READY, CONDITION_VALID, LABEL_MANAGED_BY, LABEL_SERVICE_NAME,
    LABEL_SOURCE_CLUSTER, MANAGED_BY, MCS_GROUP, MCS_VERSIONS, REASON_INVALID_SERVICE_TYPE,
    REASON_NO_SERVICE,
};

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use kube_core::CustomResourceExt;
    use serde_json::Value;

    /// Every field path a schema declares (`.spec.clusterManager.name`, `[]`
    /// for list items), stopping at free-form objects.
    fn paths(schema: &Value, at: &str, out: &mut BTreeSet<String>) {
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                let p = format!("{at}.{k}");
                out.insert(p.clone());
                paths(v, &p, out);
            }
        }
        if let Some(items) = schema.get("items") {
            paths(items, &format!("{at}[]"), out);
        }
    }

    /// The upstream CRD pinned beside the project (`../shared/reference/crds`).
    fn upstream(file: &str) -> Value {
        let dir = std::env::var("FLEETBUS_UPSTREAM_CRDS").unwrap_or_else(|_| {
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../shared/reference/crds").to_owned()
        });
        let text = std::fs::read_to_string(format!("{dir}/{file}"))
            .unwrap_or_else(|e| panic!("the upstream CRD {dir}/{file}: {e}"));
        crate::yaml::from_str(&text).unwrap()
    }

    fn served_paths(crd: &Value, version: &str) -> BTreeSet<String> {
        let v = crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == version)
            .unwrap();
        let mut out = BTreeSet::new();
        paths(&v["schema"]["openAPIV3Schema"], "", &mut out);
        // Every object has these; the kube derive leaves them to the server.
        for root in [".apiVersion", ".kind", ".metadata"] {
            out.remove(root);
        }
        out
    }

    #[test]
    fn the_types_follow_the_published_apis_field_by_field() {
        let ours = serde_json::to_value(super::ClusterProfile::crd()).unwrap();
        let theirs = upstream("multicluster.x-k8s.io_clusterprofiles.yaml");
        assert_eq!(
            served_paths(&ours, "v1alpha1"),
            served_paths(&theirs, "v1alpha1")
        );
        let ours = serde_json::to_value(super::ClusterProperty::crd()).unwrap();
        let theirs = upstream("about.k8s.io_clusterproperties.yaml");
        // The status is empty upstream and absent here: nothing is written to it.
        let mut want = served_paths(&theirs, "v1beta1");
        want.remove(".status");
        assert_eq!(served_paths(&ours, "v1beta1"), want);
        assert_eq!(
            served_paths(&theirs, "v1alpha1"),
            served_paths(&theirs, "v1beta1")
        );
        for (ours, file) in [
            (
                serde_json::to_value(super::ServiceExport::crd()).unwrap(),
                "multicluster.x-k8s.io_serviceexports.yaml",
            ),
            (
                serde_json::to_value(super::ServiceImport::crd()).unwrap(),
                "multicluster.x-k8s.io_serviceimports.yaml",
            ),
        ] {
            let theirs = upstream(file);
            assert_eq!(
                served_paths(&ours, "v1beta1"),
                served_paths(&theirs, "v1beta1"),
                "{file}"
            );
            assert_eq!(
                served_paths(&theirs, "v1alpha1"),
                served_paths(&theirs, "v1beta1"),
                "{file}"
            );
        }
    }
}
