//! What the engine is told: the events of the local watches, the bus
//! consumers and the status consumer ([`Input`]), each stream presented as a
//! [`Feed`] (a re-list or restart is `Reset`, the full state, then
//! `CaughtUp`/`Listed`, so the engine replaces what it had).

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::subject::{ObjectKey, StatusKey};
use kube::core::GroupVersionKind;
use serde_json::Value;

/// An event for the engine.
#[derive(Debug)]
pub enum Input {
    /// From the local watch of a kind.
    Local(GroupVersionKind, LocalEvent),
    /// From the bus consumer of a kind.
    Bus(GroupVersionKind, BusEvent),
    /// An acknowledged publish failed: the object must be published again.
    /// The envelope the bus held before, if any, and the one published
    /// (without its object), which the bus may hold all the same: only the
    /// acknowledgement may have been lost (see [`believed_after_failure`]).
    PublishFailed(
        GroupVersionKind,
        ObjectKey,
        Option<Box<Envelope>>,
        Box<Envelope>,
    ),
    /// The server dropped a publish as a duplicate of an earlier message id:
    /// the subject still holds what it held (someone else's message, if it
    /// differed from ours). The envelope the bus held before, if any.
    PublishDuplicate(GroupVersionKind, ObjectKey, Option<Box<Envelope>>),
    /// From the status consumer (`<p>.status.>`).
    Status(StatusEvent),
}

/// What to believe the bus holds for our object after the publish of
/// `sent` got no acknowledgement, `before` being what it held before. The
/// message may be stored all the same (only its ack was lost): a snapshot is
/// then believed with no content hash, so that the next plan publishes
/// ours again whatever it is: the object again if it is here, a tombstone
/// for `sent`'s uid if it is gone. Believing `before` there lost deletes:
/// when `before` was a tombstone (the object deleted and created again), a
/// delete that followed found no live envelope to withdraw, while the bus
/// held `sent` (found by the chaos `redelivery` scenario). A failed tombstone
/// believes `before` again: its live envelope, withdrawn again next pass.
pub fn believed_after_failure(before: Option<Box<Envelope>>, sent: Envelope) -> Option<Envelope> {
    if sent.tombstone {
        return before.map(|b| *b);
    }
    let mut maybe = sent;
    maybe.content_hash.clear();
    Some(maybe)
}

/// What the local watch saw.
#[derive(Debug)]
pub enum LocalEvent {
    /// A (re-)list starts: forget what the watch said before once `Listed` comes.
    Reset,
    /// An object exists in this version.
    Upsert(Value),
    /// An object is gone.
    Remove(Value),
    /// The (re-)list is complete.
    Listed,
    /// The API server refuses the watch (403, 401, 404); it retries on its
    /// own with backoff, and the kind's rules report the refusal meanwhile.
    Error(String),
}

/// What the bus consumer of a kind saw.
pub type BusEvent = Feed<ObjectKey, Envelope>;

/// What the status consumer saw.
pub type StatusEvent = Feed<StatusKey, ReportedStatus>;

/// What a followed stream delivers to the engine.
#[derive(Debug)]
pub enum Feed<K, V> {
    /// The consumer (re)starts: the last value of every subject follows.
    Reset,
    /// One decoded message, and the key its subject names.
    Item(K, Box<V>),
    /// A message that was skipped (unreadable, or not what its subject
    /// says) is now the last value of this key's subject.
    Unreadable(K),
    /// Every last value has been delivered; live updates follow.
    CaughtUp,
}
