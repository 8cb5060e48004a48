//! The members a record announces (PROTOCOL §5.1): a digest of the set always,
//! the names only while the fleet is small.
//!
//! ClustersSynced compares the member set a peer announces with ours. With
//! the names in every record, a join made every one of N agents put a record
//! of N names, delivered to N agents: N³ bytes per join, and the reader parsed
//! N records of N names. The digest (count and SHA-256 of the sorted names)
//! is enough to decide "same set or not"; the names only say *which* members
//! differ, worth their bytes in a small fleet (where older agents, which
//! compare names, also live) and not in a large one.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// A record lists its members by name only while they are at most this many
/// (and always carries their digest). 100 names are ~1 KiB.
pub const MEMBER_NAMES_MAX: usize = 100;

/// `membersDigest`: how many members and the SHA-256 (lowercase hex) of their
/// names, sorted and deduplicated, each followed by `\n`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembersDigest {
    /// Number of distinct members.
    pub count: u32,
    /// SHA-256 of the sorted names, each followed by `\n`, in lowercase hex.
    pub sha256: String,
}

impl MembersDigest {
    /// Whether `sha256` is 64 lowercase hex digits (what a writer produces).
    pub fn is_well_formed(&self) -> bool {
        self.sha256.len() == 64
            && self
                .sha256
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    }
}

/// A member set as this agent compares it with peers' records: the sorted,
/// deduplicated names and their digest, computed once per reconcile pass
/// (not once per peer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSet {
    names: Vec<String>,
    digest: MembersDigest,
}

impl MemberSet {
    /// The set of `names` (order and duplicates ignored).
    pub fn new<I, S>(names: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let names: Vec<String> = names
            .into_iter()
            .map(Into::into)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let mut h = Sha256::new();
        for n in &names {
            h.update(n.as_bytes());
            h.update(b"\n");
        }
        let sha256 = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
        let digest = MembersDigest {
            count: u32::try_from(names.len()).unwrap_or(u32::MAX),
            sha256,
        };
        MemberSet { names, digest }
    }

    /// Sorted, deduplicated names.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// The digest of the set.
    pub fn digest(&self) -> &MembersDigest {
        &self.digest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_ignores_order_and_duplicates_and_tells_sets_apart() {
        let a = MemberSet::new(["b", "a", "b"]);
        assert_eq!(a, MemberSet::new(["a", "b"]));
        assert_eq!(a.digest().count, 2);
        assert!(a.digest().is_well_formed());
        // "a\nb\n": the separator keeps ["ab"] and ["a","b"] apart.
        assert_ne!(a.digest(), MemberSet::new(["ab"]).digest());
        assert_ne!(a.digest(), MemberSet::new(["a", "b", "c"]).digest());
        // A fixed value: writers of any version must hash the same way.
        // (`printf 'a\nb\n' | sha256sum`)
        assert_eq!(
            a.digest().sha256,
            "911169ddaaf146aff539f58c26c489af3b892dff0fe283c1c264c65ae5aa59a2"
        );
    }
}
