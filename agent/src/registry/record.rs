//! Registry records and keys: the schemas crate's types, plus the agent's view of them.

pub use fleetbus_schemas::registry::{
    ClusterRecord, FeatureRecord, KubeconfigRecord, MemberState, RegistryKey,
};

/// The registry key of a cluster record.
pub fn cluster_key(name: &str, cluster_id: &str) -> String {
    RegistryKey::cluster(name, cluster_id).to_key()
}

/// The registry key of a kubeconfig record.
pub fn kubeconfig_key(name: &str, cluster_id: &str) -> String {
    RegistryKey::kubeconfig(name, cluster_id).to_key()
}

/// What distinguishes one heartbeat from the next: the sender's run and
/// sequence number. Compared only for equality, never against our clock.
pub fn heartbeat_stamp(r: &ClusterRecord) -> String {
    format!("{}#{}", r.started_at.timestamp_millis(), r.seq)
}
