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

use super::record::ClusterRecord;

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

    /// Whether `record` announces this set: by its digest when it carries
    /// one, by its names when it does not (an agent before digests).
    pub fn agrees_with(&self, record: &ClusterRecord) -> bool {
        match &record.members_digest {
            Some(d) => *d == self.digest,
            None => {
                let theirs: BTreeSet<&str> = record.members.iter().map(String::as_str).collect();
                theirs.len() == self.names.len()
                    && self.names.iter().all(|n| theirs.contains(n.as_str()))
            }
        }
    }
}

impl ClusterRecord {
    /// Announces `set`: its digest, and its names while they are at most
    /// [`MEMBER_NAMES_MAX`].
    pub fn set_members(&mut self, set: &MemberSet) {
        self.members = if set.names.len() <= MEMBER_NAMES_MAX {
            set.names.clone()
        } else {
            Vec::new()
        };
        self.members_digest = Some(set.digest.clone());
    }

    /// How many members the record announces (the digest's count, or the
    /// distinct names of a record without a digest).
    pub fn member_count(&self) -> usize {
        match &self.members_digest {
            Some(d) => usize::try_from(d.count).unwrap_or(usize::MAX),
            None => self.members.iter().collect::<BTreeSet<_>>().len(),
        }
    }

    /// Whether the record names its members (a small fleet, or an agent before digests).
    pub fn names_members(&self) -> bool {
        self.members_digest.is_none() || !self.members.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ClusterRecord {
        ClusterRecord::decode(
            br#"{"schema":"fleetbus.io/cluster/v1","name":"a","clusterID":"x","state":"Active",
            "agentVersion":"","startedAt":"2026-11-22T04:00:00.000Z",
            "heartbeatAt":"2026-11-22T04:00:00.000Z","heartbeatIntervalSeconds":2,"seq":1,
            "members":["b","a"]}"#,
        )
        .unwrap()
    }

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

    #[test]
    fn a_record_names_its_members_only_in_a_small_fleet_and_always_digests_them() {
        let mut r = record();
        let small = MemberSet::new((0..MEMBER_NAMES_MAX).map(|i| format!("m{i}")));
        r.set_members(&small);
        assert_eq!(r.members.len(), MEMBER_NAMES_MAX);
        assert!(small.agrees_with(&r) && r.names_members());
        let large = MemberSet::new((0..=MEMBER_NAMES_MAX).map(|i| format!("m{i}")));
        r.set_members(&large);
        assert!(r.members.is_empty() && !r.names_members());
        assert_eq!(r.member_count(), MEMBER_NAMES_MAX + 1);
        assert!(large.agrees_with(&r));
        assert!(!small.agrees_with(&r));
        // On the wire and back.
        let back = ClusterRecord::decode(&r.encode().unwrap()).unwrap();
        assert_eq!(back, r);
        assert!(String::from_utf8(r.encode().unwrap())
            .unwrap()
            .contains("\"membersDigest\":{\"count\":101,"));
    }

    #[test]
    fn a_record_without_a_digest_is_compared_by_its_names() {
        // An agent before digests (PROTOCOL §7): names only.
        let r = record();
        assert!(r.members_digest.is_none() && r.names_members());
        assert_eq!(r.member_count(), 2);
        assert!(MemberSet::new(["a", "b"]).agrees_with(&r));
        assert!(!MemberSet::new(["a"]).agrees_with(&r));
        assert!(!MemberSet::new(["a", "b", "c"]).agrees_with(&r));
        let mut dup = r.clone();
        dup.members = vec!["b".into(), "a".into(), "a".into()];
        assert!(MemberSet::new(["a", "b"]).agrees_with(&dup));
        dup.members.clear();
        assert!(!MemberSet::new(["a"]).agrees_with(&dup));
    }
}
