//! NATS subject names: prefix, reversible token escaping, typed keys and wildcard filters.
//!
//! Every token of a subject is one Kubernetes name passed through [`encode_token`]:
//! names of the form `[A-Za-z0-9_-]+` are kept, everything else is written as `=` +
//! unpadded URL-safe base64. `core` stands for the core group, `_` for "no namespace".

mod filter;
mod keys;
mod length;
mod prefix;
mod rollout;
mod token;

pub use filter::{
    all_conflicts, all_drift, all_objects, all_status, commands_for, conflicts_of_cluster,
    drift_of_cluster, owned_subtrees, status_of_cluster, ObjectFilter,
};
pub use keys::{
    api_version, split_api_version, CommandKey, ConflictKey, DriftKey, ObjectKey, StatusKey,
    SubjectError, CMD, CONFLICT, CORRECT_VERB, DRIFT, LABEL_VERB, OBJ, PREVIEW_SOURCE_VERB,
    PREVIEW_VERB, PROGRESS_VERB, STATUS,
};
pub use length::{check_subject_len, SubjectTooLong, MAX_SUBJECT_LEN};
pub use prefix::{InvalidPrefix, Prefix, DEFAULT_PREFIX};
pub use rollout::{all_rollouts, all_versions, RolloutKey, VersionKey, ROLLOUT, ROLLOUT_VERB, VER};
pub use token::{
    decode_group, decode_namespace, decode_token, encode_group, encode_namespace, encode_token,
    is_valid_kv_token, is_valid_subject_token, TokenError, CLUSTER_SCOPED_TOKEN, CORE_GROUP_TOKEN,
    ESCAPE_MARKER,
};
