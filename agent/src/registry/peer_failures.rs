//! Per-peer error policy: a peer whose writes fail is that peer's problem alone (pure, no IO).
//!
//! Like a controller's error policy (kube-runtime's `error_policy`), each
//! failed peer gets a verdict: a transient error (a conflict, a 429, a 5xx,
//! a broken connection) is retried for that peer alone with exponential
//! backoff; a permanent one (the API server refused the object, e.g. 422
//! Invalid) is reported once and not retried until the peer's record
//! changes, since the same write would be refused again. Either way the
//! other peers and readiness go on.

use std::collections::BTreeMap;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use tokio::time::Instant;

use super::error::RegistryError;
use super::record::{ClusterRecord, KubeconfigRecord};

/// First retry delay of a peer that failed transiently.
const MIN_DELAY: Duration = Duration::from_millis(500);
/// Longest retry delay: the reconciler's own resync period.
const MAX_DELAY: Duration = Duration::from_secs(30);
/// A refused write is tried again after this long even if the peer's record
/// did not change: what refused it (an admission policy, RBAC, a stricter
/// CRD) may have been fixed meanwhile.
const REFUSED_RETRY: Duration = Duration::from_secs(300);
/// Transient failures after which a peer counts as failing on its own.
const SETTLE_ATTEMPTS: u32 = 3;

/// What a peer's writes depend on: its record without the heartbeat fields
/// (which change every beat and never make a refused object acceptable), and
/// its kubeconfig record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    record: ClusterRecord,
    kubeconfig: Option<KubeconfigRecord>,
}

impl Content {
    /// The content of `record` and `kubeconfig` as far as writes are concerned.
    pub fn of(record: &ClusterRecord, kubeconfig: Option<&KubeconfigRecord>) -> Self {
        let mut record = record.clone();
        record.heartbeat_at = record.started_at;
        record.seq = 0;
        Content {
            record,
            kubeconfig: kubeconfig.cloned(),
        }
    }
}

#[derive(Debug)]
enum Failure {
    /// Refused for good: wait for different content (or `REFUSED_RETRY`).
    Rejected {
        content: Box<Content>,
        since: Instant,
    },
    /// Failed transiently: wait until `next_try`.
    Backoff {
        backoff: ExponentialBackoff,
        next_try: Instant,
        attempts: u32,
    },
}

/// Failed peers by name. Owned by the reconciler task alone.
#[derive(Debug, Default)]
pub struct PeerFailures {
    peers: BTreeMap<String, Failure>,
}

/// Whether to write a peer now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Write it.
    Try,
    /// Its current content was refused for good; do not write.
    Rejected,
    /// It failed transiently; try again at this time.
    Wait(Instant),
}

impl PeerFailures {
    /// Whether peer `name` with `content` should be written at `now`.
    pub fn verdict(&self, name: &str, content: &Content, now: Instant) -> Verdict {
        match self.peers.get(name) {
            None => Verdict::Try,
            Some(Failure::Rejected {
                content: refused,
                since,
            }) if **refused == *content && now < *since + REFUSED_RETRY => Verdict::Rejected,
            Some(Failure::Rejected { .. }) => Verdict::Try,
            Some(Failure::Backoff { next_try, .. }) if *next_try > now => Verdict::Wait(*next_try),
            Some(Failure::Backoff { .. }) => Verdict::Try,
        }
    }

    /// The peer's writes succeeded: forget its failures.
    pub fn succeeded(&mut self, name: &str) {
        self.peers.remove(name);
    }

    /// The peer's writes were refused for good at `now`; returns whether this
    /// is news (the first refusal of this content), i.e. whether to report it.
    pub fn rejected(&mut self, name: &str, content: Content, now: Instant) -> bool {
        let news = !matches!(
            self.peers.get(name),
            Some(Failure::Rejected { content: c, .. }) if **c == content
        );
        self.peers.insert(
            name.to_owned(),
            Failure::Rejected {
                content: Box::new(content),
                since: now,
            },
        );
        news
    }

    /// The peer's writes failed transiently at `now`; returns when to retry.
    pub fn transient(&mut self, name: &str, now: Instant) -> Instant {
        let entry = self
            .peers
            .entry(name.to_owned())
            .or_insert_with(|| Failure::Backoff {
                backoff: builder().build(),
                next_try: now,
                attempts: 0,
            });
        if matches!(entry, Failure::Rejected { .. }) {
            *entry = Failure::Backoff {
                backoff: builder().build(),
                next_try: now,
                attempts: 0,
            };
        }
        match entry {
            Failure::Backoff {
                backoff,
                next_try,
                attempts,
            } => {
                *attempts = attempts.saturating_add(1);
                *next_try = now + backoff.next().unwrap_or(MAX_DELAY);
                *next_try
            }
            Failure::Rejected { .. } => now + MAX_DELAY,
        }
    }

    /// Whether a transiently failing peer has failed often enough to count
    /// as failing on its own, rather than as "not written yet": from then on
    /// it no longer holds back the initial readiness (a whole API outage is
    /// the API probe's business, not one peer's).
    pub fn settled(&self, name: &str) -> bool {
        match self.peers.get(name) {
            Some(Failure::Backoff { attempts, .. }) => *attempts >= SETTLE_ATTEMPTS,
            Some(Failure::Rejected { .. }) => true,
            None => false,
        }
    }

    /// How many peers are currently refused or backing off.
    pub fn failing(&self) -> usize {
        self.peers.len()
    }

    /// Forgets peers no longer in the registry (and their `<peer>/<write>` keys).
    pub fn retain(&mut self, names: &[&str]) {
        self.peers.retain(|n, _| {
            let peer = n.split('/').next().unwrap_or(n);
            names.contains(&peer)
        });
    }
}

/// Whether the API server refused a peer's write for good: the object is
/// invalid (400 BadRequest, 413 too large, 422 Invalid, which is also how a
/// ValidatingAdmissionPolicy denies) or forbidden (403: an admission webhook's
/// denial, or RBAC), so the same write fails the same way until the peer's
/// record changes (or, in case a policy was fixed, a few minutes pass).
/// Everything else (conflicts, throttling, 5xx, 404 from a lagging cache,
/// broken connections) may pass soon and is retried with backoff.
pub fn is_refusal(e: &RegistryError) -> bool {
    match e {
        RegistryError::Kube {
            source: kube::Error::Api(s),
            ..
        } => matches!(s.code, 400 | 403 | 413 | 422),
        RegistryError::Encode(_) | RegistryError::Serialise(_) => true,
        RegistryError::Kube { .. }
        | RegistryError::Put { .. }
        | RegistryError::Beat { .. }
        | RegistryError::Watch(_) => false,
    }
}

fn builder() -> ExponentialBuilder {
    ExponentialBuilder::default()
        .with_min_delay(MIN_DELAY)
        .with_max_delay(MAX_DELAY)
        .with_factor(2.0)
        .without_max_times()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::membership::tests::record;

    #[tokio::test(start_paused = true)]
    async fn a_refused_peer_waits_for_a_different_record_not_for_a_heartbeat() {
        let mut f = PeerFailures::default();
        let now = Instant::now();
        let r1 = record("b", "id-b", 1);
        assert_eq!(f.verdict("b", &Content::of(&r1, None), now), Verdict::Try);
        assert!(
            f.rejected("b", Content::of(&r1, None), now),
            "first refusal is news"
        );
        assert!(
            !f.rejected("b", Content::of(&r1, None), now),
            "the same is not"
        );
        assert!(f.settled("b"), "a refused peer never holds readiness back");
        // The next heartbeat carries the same content: still refused.
        let r2 = record("b", "id-b", 2);
        assert_eq!(
            f.verdict("b", &Content::of(&r2, None), now),
            Verdict::Rejected
        );
        // Other peers are unaffected.
        assert_eq!(f.verdict("c", &Content::of(&r2, None), now), Verdict::Try);
        // A changed record is tried again.
        let mut r3 = record("b", "id-b", 3);
        r3.labels.insert("env".into(), "fixed".into());
        assert_eq!(f.verdict("b", &Content::of(&r3, None), now), Verdict::Try);
        // The unchanged record is tried again after a while (a policy may be fixed).
        assert_eq!(
            f.verdict("b", &Content::of(&r2, None), now + REFUSED_RETRY),
            Verdict::Try
        );
        f.succeeded("b");
        assert_eq!(f.failing(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn transient_failures_back_off_per_peer() {
        let mut f = PeerFailures::default();
        let c = Content::of(&record("b", "id-b", 1), None);
        let t0 = Instant::now();
        let first = f.transient("b", t0);
        assert_eq!(first, t0 + MIN_DELAY);
        assert!(
            !f.settled("b"),
            "one failure is not yet the peer's own problem"
        );
        assert_eq!(f.verdict("b", &c, t0), Verdict::Wait(first));
        assert_eq!(f.verdict("b", &c, first), Verdict::Try);
        let second = f.transient("b", first);
        assert!(
            second - first > MIN_DELAY,
            "backs off: {:?}",
            second - first
        );
        f.transient("b", second);
        assert!(f.settled("b"), "after {SETTLE_ATTEMPTS} failures it is");
        for _ in 0..20 {
            let at = f.transient("b", t0);
            assert!(at - t0 <= MAX_DELAY, "capped");
        }
        f.retain(&[]);
        assert_eq!(f.verdict("b", &c, t0), Verdict::Try);
    }

    fn kube_error(code: u16) -> RegistryError {
        let mut s = kube::core::Status::failure("refused", "Invalid");
        s.code = code;
        RegistryError::Kube {
            action: "create Cluster",
            object: "b".into(),
            source: kube::Error::Api(Box::new(s)),
        }
    }

    #[test]
    fn only_an_invalid_object_is_a_refusal_the_rest_is_retried() {
        for code in [400, 403, 413, 422] {
            assert!(is_refusal(&kube_error(code)), "{code}");
        }
        // 404 (a lagging cache), conflicts, throttling and server errors
        // may all pass soon.
        for code in [404, 409, 429, 500, 503] {
            assert!(!is_refusal(&kube_error(code)), "{code}");
        }
    }
}
