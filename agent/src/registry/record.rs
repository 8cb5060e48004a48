//! Registry records and keys: the schemas crate's types, plus the agent's view of them (and the published form of local ClusterFeatures).

use std::sync::Arc;

use fleetbus_schemas::crd::ClusterFeature;
use kube::ResourceExt;

pub use fleetbus_schemas::registry::{
    BeatRecord, ClusterRecord, FeatureRecord, KubeconfigRecord, MemberSet, MemberState, RegistryKey,
};

/// The registry key of a cluster record.
pub fn cluster_key(name: &str, cluster_id: &str) -> String {
    RegistryKey::cluster(name, cluster_id).to_key()
}

/// The beats bucket key of a cluster's beat.
pub fn beat_key(name: &str, cluster_id: &str) -> String {
    RegistryKey::beat(name, cluster_id).to_key()
}

/// The registry key of a kubeconfig record.
pub fn kubeconfig_key(name: &str, cluster_id: &str) -> String {
    RegistryKey::kubeconfig(name, cluster_id).to_key()
}

/// The run a record or beat belongs to: its sender's `startedAt` in
/// milliseconds. Compared only for equality, never against our clock.
pub fn run_stamp(started_at: &chrono::DateTime<chrono::Utc>) -> i64 {
    started_at.timestamp_millis()
}

/// Whether two records of one cluster say the same apart from which put
/// they are (`heartbeatAt`, `seq`).
pub fn same_content(a: &ClusterRecord, b: &ClusterRecord) -> bool {
    let mut b = b.clone();
    b.heartbeat_at = a.heartbeat_at;
    b.seq = a.seq;
    *a == b
}

/// The published form of the local ClusterFeatures: name (falling back to the
/// object name when `featureName` is empty) and labels, sorted and deduplicated.
pub fn feature_records(features: &[Arc<ClusterFeature>]) -> Vec<FeatureRecord> {
    let mut out: Vec<FeatureRecord> = features
        .iter()
        .map(|f| FeatureRecord {
            feature_name: if f.spec.feature_name.is_empty() {
                f.name_any()
            } else {
                f.spec.feature_name.clone()
            },
            labels: f.labels().clone(),
        })
        .collect();
    out.sort_by(|a, b| a.feature_name.cmp(&b.feature_name));
    out.dedup_by(|a, b| a.feature_name == b.feature_name);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::crd::ClusterFeatureSpec;

    fn feature(object: &str, feature_name: &str, label: &str) -> Arc<ClusterFeature> {
        let mut f = ClusterFeature::new(
            object,
            ClusterFeatureSpec {
                feature_name: feature_name.to_owned(),
            },
        );
        f.labels_mut().insert("tier".into(), label.into());
        Arc::new(f)
    }

    #[test]
    fn feature_records_fall_back_to_the_object_name_sorted_and_deduplicated() {
        let records = feature_records(&[
            feature("zeta", "", "a"),
            feature("obj-1", "gpu", "first"),
            feature("obj-2", "gpu", "second"),
            feature("alpha", "", "b"),
        ]);
        let names: Vec<_> = records.iter().map(|r| r.feature_name.as_str()).collect();
        assert_eq!(names, ["alpha", "gpu", "zeta"]);
        // Of two objects with one feature name, the first listed is kept.
        assert_eq!(records[1].labels["tier"], "first");
        assert!(feature_records(&[]).is_empty());
    }
}
