//! The state of a member cluster, in the one vocabulary every reader uses
//! (the agents' Cluster objects, `fleetbus clusters ls`, `fleetbus status`,
//! the dashboard): Ready, ApiUnreachable, Disconnected, Left, Disabled, Conflict.
//!
//! Pure: each reader gathers the facts its own way (an agent from local
//! receive times and its Cluster object, the CLI from the bus alone) and this
//! function turns them into the word.

use crate::crd::ClusterState;

/// Everything the state of a peer depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerFacts {
    /// The peer's latest record says it left.
    pub left: bool,
    /// A heartbeat arrived within the peer timeout.
    pub alive: bool,
    /// The local Cluster object carries `fleetbus.io/cluster-disabled`.
    pub disabled: bool,
    /// Another clusterID claims the same name.
    pub name_conflict: bool,
    /// The peer's record says its own API server does not answer.
    pub api_unreachable: bool,
}

/// The state a peer's Cluster object should show. Administrative and identity
/// facts outrank liveness: a disabled peer stays Disabled whether or not it is
/// alive, and a conflicting name stays a Conflict until resolved.
pub fn peer_state(f: PeerFacts) -> ClusterState {
    if f.disabled {
        ClusterState::Disabled
    } else if f.name_conflict {
        ClusterState::Conflict
    } else if f.left {
        ClusterState::Left
    } else if !f.alive {
        ClusterState::Disconnected
    } else if f.api_unreachable {
        // Only a live record can vouch for this; a silent peer is Disconnected.
        ClusterState::ApiUnreachable
    } else {
        ClusterState::Ready
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_state_precedence() {
        let base = PeerFacts {
            left: false,
            alive: true,
            disabled: false,
            name_conflict: false,
            api_unreachable: false,
        };
        assert_eq!(peer_state(base), ClusterState::Ready);
        assert_eq!(
            peer_state(PeerFacts {
                api_unreachable: true,
                ..base
            }),
            ClusterState::ApiUnreachable
        );
        assert_eq!(
            peer_state(PeerFacts {
                alive: false,
                ..base
            }),
            ClusterState::Disconnected
        );
        assert_eq!(
            peer_state(PeerFacts { left: true, ..base }),
            ClusterState::Left
        );
        assert_eq!(
            peer_state(PeerFacts {
                left: true,
                alive: false,
                ..base
            }),
            ClusterState::Left,
            "a peer that left is not merely disconnected"
        );
        assert_eq!(
            peer_state(PeerFacts {
                name_conflict: true,
                left: true,
                ..base
            }),
            ClusterState::Conflict
        );
        assert_eq!(
            peer_state(PeerFacts {
                disabled: true,
                name_conflict: true,
                alive: false,
                ..base
            }),
            ClusterState::Disabled
        );
    }
}
