//! The fleet protocol's version, as each agent announces it in its cluster
//! record (`protocol`), and the skew between two agents (PROTOCOL §7.1).

/// The protocol this revision speaks. 1: every agent before the record's
/// `protocol` member (placement, operator taints and the cluster inventory
/// were not part of it); 2: the first that announces it. Raised whenever a
/// revision adds something an N−1 agent must be told of (a stream, a
/// registry key, a record member it should not ignore), never for a member
/// that older readers may ignore.
pub const PROTOCOL_VERSION: u32 = 2;

/// What a record without `protocol` speaks: an agent from before the member.
pub const PROTOCOL_BEFORE_VERSIONS: u32 = 1;

/// serde's default of `protocol`: [`PROTOCOL_BEFORE_VERSIONS`].
pub(crate) fn before_versions() -> u32 {
    PROTOCOL_BEFORE_VERSIONS
}

/// How a peer's protocol stands to ours: N−1, N and N+1 work together (N
/// keeps reading what N−1 writes and writes nothing N−1 refuses; N+1 does
/// the same for N), two or more apart is outside the supported skew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skew {
    /// The same protocol.
    Same,
    /// One behind (N−1): supported, until it is upgraded.
    Previous,
    /// One ahead (N+1): supported, it was written to work with us.
    Next,
    /// Two or more behind: outside the supported skew.
    TooOld,
    /// Two or more ahead: outside the supported skew, and what it expects
    /// of us is unknown here.
    TooNew,
}

impl Skew {
    /// How a peer speaking `theirs` stands to us, speaking `ours`.
    pub fn of(ours: u32, theirs: u32) -> Skew {
        match i64::from(theirs) - i64::from(ours) {
            0 => Skew::Same,
            -1 => Skew::Previous,
            1 => Skew::Next,
            d if d < 0 => Skew::TooOld,
            _ => Skew::TooNew,
        }
    }

    /// Whether the two work together (N−1, N or N+1).
    pub fn supported(self) -> bool {
        !matches!(self, Skew::TooOld | Skew::TooNew)
    }

    /// A label for logs and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Skew::Same => "same",
            Skew::Previous => "previous",
            Skew::Next => "next",
            Skew::TooOld => "too_old",
            Skew::TooNew => "too_new",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_version_either_way_is_supported_two_are_not() {
        assert_eq!(Skew::of(2, 2), Skew::Same);
        assert_eq!(Skew::of(2, 1), Skew::Previous);
        assert_eq!(Skew::of(2, 3), Skew::Next);
        assert_eq!(Skew::of(3, 1), Skew::TooOld);
        assert_eq!(Skew::of(2, 4), Skew::TooNew);
        assert_eq!(Skew::of(1, u32::MAX), Skew::TooNew);
        assert_eq!(Skew::of(u32::MAX, 0), Skew::TooOld);
        for s in [Skew::Same, Skew::Previous, Skew::Next] {
            assert!(s.supported(), "{s:?}");
        }
        assert!(!Skew::TooOld.supported() && !Skew::TooNew.supported());
    }

    #[test]
    fn a_record_without_the_member_speaks_protocol_1() {
        let record = br#"{"schema":"fleetbus.io/cluster/v1","name":"a","clusterID":"u","state":"Active","agentVersion":"0.1.0","startedAt":"2026-01-01T00:00:00.000Z","heartbeatAt":"2026-01-01T00:00:00.000Z","heartbeatIntervalSeconds":10,"seq":1}"#;
        let r = super::super::ClusterRecord::decode(record).expect("an old agent's record");
        assert_eq!(r.protocol, PROTOCOL_BEFORE_VERSIONS);
        let again =
            super::super::ClusterRecord::decode(&r.encode().expect("encode")).expect("decode");
        assert_eq!(again.protocol, PROTOCOL_BEFORE_VERSIONS);
    }
}
