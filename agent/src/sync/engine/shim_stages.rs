//! Temporary: the stages' functions that preview still calls as
//! engine methods, forwarding to the functions over narrow state. Goes once
//! those callers call the functions themselves.

use crate::sync::policy_watch;

use super::Engine;

impl Engine {
    /// See [`policy_watch::policy_known`].
    pub(in crate::sync) fn policy_known(&self) -> bool {
        policy_watch::policy_known(&self.world)
    }
}
