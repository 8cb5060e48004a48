//! The cluster registry: a KV bucket where each agent announces its cluster and heartbeats.
//!
//! Each agent writes only its own keys, `cluster.<self>.<selfID>` and
//! `kubeconfig.<self>.<selfID>`. Leaving = a final put with state `Left`;
//! a crash = heartbeats stop (readers compare `heartbeatAt` with the interval).

mod key;
mod record;
mod state;
mod validate;

pub use key::{
    cluster_keys_for_name, registry_bucket, RegistryKey, RegistryKeyError, ALL_CLUSTER_KEYS,
    ALL_KUBECONFIG_KEYS, REGISTRY_BUCKET_SUFFIX,
};
pub use record::{
    ApiHealth, ClusterRecord, FeatureRecord, KubeconfigRecord, MemberState, CLUSTER_RECORD_SCHEMA,
    DEFAULT_HEARTBEAT_INTERVAL_SECONDS, KUBECONFIG_RECORD_SCHEMA,
    MISSED_HEARTBEATS_BEFORE_DISCONNECTED,
};
pub use state::{peer_state, PeerFacts};
pub use validate::{
    validate_labels, InvalidRecord, MAX_FEATURES, MAX_LABELS, MAX_MEMBERS, MAX_TEXT_LEN,
};
