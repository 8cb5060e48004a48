//! The cluster registry: a KV bucket where each agent announces its cluster and heartbeats.
//!
//! Each agent writes only its own keys, `cluster.<self>.<selfID>` and
//! `kubeconfig.<self>.<selfID>`, and its beat `beat.<self>.<selfID>` in the
//! beats bucket. Leaving = a final put with state `Left`; a crash = beats stop
//! and the server expires the beat key (its TTL).

mod beat;
mod forgotten;
mod key;
pub mod members;
mod protocol;
mod record;
mod record_members;
mod revoked;
mod state;
mod taints;
mod validate;

pub use beat::{
    beat_interval, beat_ttl, beats_bucket, BeatRecord, ALL_BEAT_KEYS, BEATS_BUCKET_SUFFIX,
    BEAT_MARKER_TTL, BEAT_RECORD_SCHEMA, TARGET_BEATS_PER_SECOND,
};
pub use forgotten::{
    forgotten_key, parse_forgotten_key, ForgottenRecord, FORGOTTEN_KEY_KIND,
    FORGOTTEN_RECORD_SCHEMA,
};
pub use key::{
    cluster_keys_for_name, registry_bucket, RegistryKey, RegistryKeyError, ALL_CLUSTER_KEYS,
    ALL_KUBECONFIG_KEYS, REGISTRY_BUCKET_SUFFIX,
};
pub use members::{MemberSet, MembersDigest, MEMBER_NAMES_MAX};
pub use protocol::{Skew, PROTOCOL_BEFORE_VERSIONS, PROTOCOL_VERSION};
pub use record::kind_id;
pub use record::{
    ApiHealth, ClusterRecord, FeatureRecord, KubeconfigRecord, MemberState, CLUSTER_RECORD_SCHEMA,
    DEFAULT_HEARTBEAT_INTERVAL_SECONDS, KUBECONFIG_RECORD_SCHEMA, MAX_UNSERVED_KINDS,
    MISSED_HEARTBEATS_BEFORE_DISCONNECTED,
};
pub use revoked::{
    parse_revoked_key, revoked_key, InvalidRevoked, RevokedRecord, MAX_REVOKED_SERIALS,
    REVOKED_KEY_KIND, REVOKED_RECORD_SCHEMA, ROOT_KEY_ID,
};
pub use state::{peer_state, PeerFacts};
pub use taints::{
    parse_taint, parse_taints_key, taints_key, InvalidTaints, TaintsRecord, TimedTaint,
    CORDONED_TAINT_KEY, MAX_TAINTS, TAINTS_KEY_KIND,
};
pub use validate::{
    validate_labels, InvalidRecord, MAX_FEATURES, MAX_LABELS, MAX_MEMBERS, MAX_TEXT_LEN,
};
