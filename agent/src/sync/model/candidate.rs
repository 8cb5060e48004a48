//! A copy some source wants at a target.

use std::sync::Arc;

use fleetbus_schemas::crd::UpdatePolicy;
use fleetbus_schemas::subject::ObjectKey;

use super::Packed;
use crate::sync::digest::Digest;

/// One source object that wants to be written at a target.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The rule that maps it there.
    pub rule: String,
    /// Its key on the bus, shared by the clones of the candidate a pass
    /// makes (docs/design/memory.md: six strings a clone).
    pub key: Arc<ObjectKey>,
    /// Its `metadata.creationTimestamp` on the origin (RFC 3339, sorts by time).
    pub created: String,
    /// The copy to write (shared with the candidate memo), packed: parsed
    /// again only to be written or compared in a first look.
    pub desired: Packed,
    /// `desired`'s digest without the source hash (see `digest`).
    pub digest: Digest,
    /// Whether the copy carries `.status`.
    pub with_status: bool,
    /// The rule's update policy.
    pub update: UpdatePolicy,
    /// The rule creates missing namespaces.
    pub create_namespace: bool,
    /// When the origin published the version this copy is made from (its
    /// envelope's `time`, the origin's clock): the start of the sync lag.
    pub published: chrono::DateTime<chrono::Utc>,
}
