//! Temporary: the stages' functions that preview still calls as
//! engine methods, forwarding to the functions over narrow state. Goes once
//! those callers call the functions themselves.

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::subject::ObjectKey;

use crate::sync::policy_watch;
use crate::sync::source::publish::{self, Publish, PublishError};

use super::Engine;

impl Engine {
    /// See [`policy_watch::policy_known`].
    pub(in crate::sync) fn policy_known(&self) -> bool {
        policy_watch::policy_known(&self.world)
    }

    /// See [`publish::envelope`].
    pub(in crate::sync) fn envelope(
        &self,
        key: &ObjectKey,
        what: Publish,
    ) -> Result<(Envelope, Option<Envelope>), PublishError> {
        publish::envelope(&self.world, &self.io.ctx, key, what)
    }
}
