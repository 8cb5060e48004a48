//! How a cluster record announces the members its agent sees (PROTOCOL
//! §5.1, see `members`): written by [`ClusterRecord::set_members`], compared
//! by [`MemberSet::agrees_with`]. Apart from both types' files, so that the
//! record does not depend on the comparison nor the set on the record.

use std::collections::BTreeSet;

use super::members::{MemberSet, MEMBER_NAMES_MAX};
use super::record::ClusterRecord;

impl MemberSet {
    /// Whether `record` announces this set: by its digest when it carries
    /// one, by its names when it does not (an agent before digests).
    pub fn agrees_with(&self, record: &ClusterRecord) -> bool {
        match &record.members_digest {
            Some(d) => d == self.digest(),
            None => {
                let theirs: BTreeSet<&str> = record.members.iter().map(String::as_str).collect();
                theirs.len() == self.names().len()
                    && self.names().iter().all(|n| theirs.contains(n.as_str()))
            }
        }
    }
}

impl ClusterRecord {
    /// Announces `set`: its digest, and its names while they are at most
    /// [`MEMBER_NAMES_MAX`].
    pub fn set_members(&mut self, set: &MemberSet) {
        self.members = if set.names().len() <= MEMBER_NAMES_MAX {
            set.names().to_vec()
        } else {
            Vec::new()
        };
        self.members_digest = Some(set.digest().clone());
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
