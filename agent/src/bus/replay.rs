//! The signed command requests an agent took, remembered while they are
//! fresh, so the same request sent again is refused (pure).
//!
//! A root-signed request (PROTOCOL §6.7) is bound to one subject and fresh
//! for `REQUEST_MAX_AGE` (5 minutes) either side of its `requestedAt`; within that
//! window anyone who saw it on the bus could send it again (a captured
//! `drift correct` replayed after the operator paused correction, a label
//! set back after the operator changed it). Each agent remembers the
//! signature of every request it took until the request would be stale
//! anyway, and refuses it the second time. Only requests that verified are
//! remembered, and a verb admits a bounded rate of them (`bus::rate`), so
//! the memory is bounded by rate × window without a cap of its own.

use std::collections::{BTreeSet, HashSet};

use chrono::{DateTime, Utc};
use fleetbus_schemas::trust::{RequestAuthError, VerifiedRequest};

/// The requests one verb took that could still be fresh.
#[derive(Debug, Default)]
pub struct SeenRequests {
    /// Their signatures.
    signatures: HashSet<String>,
    /// The same, by when each stops being fresh: the order they are forgotten in.
    by_expiry: BTreeSet<(DateTime<Utc>, String)>,
}

impl SeenRequests {
    /// Takes `request` at `now`: refused if it was taken before; else
    /// remembered until it is stale. Forgets what went stale first.
    pub fn take(
        &mut self,
        request: VerifiedRequest,
        now: DateTime<Utc>,
    ) -> Result<(), RequestAuthError> {
        while let Some(first) = self.by_expiry.first() {
            if first.0 > now {
                break;
            }
            if let Some((_, sig)) = self.by_expiry.pop_first() {
                self.signatures.remove(&sig);
            }
        }
        if self.signatures.contains(&request.signature) {
            return Err(RequestAuthError::Replayed);
        }
        // Stale at `fresh_until` on our clock too (the freshness check takes
        // either side), so it need not be kept past it.
        self.by_expiry
            .insert((request.fresh_until(), request.signature.clone()));
        self.signatures.insert(request.signature);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fleetbus_schemas::trust::REQUEST_MAX_AGE;

    fn request(sig: &str, at: DateTime<Utc>) -> VerifiedRequest {
        VerifiedRequest {
            requested_at: at,
            signature: sig.to_owned(),
        }
    }

    #[test]
    fn a_request_is_taken_once_while_fresh_and_forgotten_once_stale() {
        let t0 = Utc::now();
        let mut seen = SeenRequests::default();
        seen.take(request("a", t0), t0).unwrap();
        seen.take(request("b", t0), t0).unwrap();
        assert_eq!(
            seen.take(request("a", t0), t0 + chrono::Duration::minutes(4)),
            Err(RequestAuthError::Replayed)
        );
        assert_eq!(seen.signatures.len(), 2);
        // Stale for the verifier from then on: forgotten, memory bounded.
        let later = t0 + REQUEST_MAX_AGE + chrono::Duration::seconds(1);
        seen.take(request("c", later), later).unwrap();
        assert_eq!((seen.signatures.len(), seen.by_expiry.len()), (1, 1));
    }

    #[test]
    fn a_request_signed_ahead_of_our_clock_is_kept_until_it_is_stale_for_us() {
        let now = Utc::now();
        let ahead = now + chrono::Duration::minutes(4);
        let mut seen = SeenRequests::default();
        seen.take(request("a", ahead), now).unwrap();
        let almost = ahead + REQUEST_MAX_AGE - chrono::Duration::seconds(1);
        assert_eq!(
            seen.take(request("a", ahead), almost),
            Err(RequestAuthError::Replayed)
        );
    }
}
