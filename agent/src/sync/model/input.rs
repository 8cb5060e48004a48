//! What the engine is told: the events of the local watches, the bus
//! consumers and the status consumer ([`Input`]), each stream presented as a
//! [`Feed`] (a re-list or restart is `Reset`, the full state, then
//! `CaughtUp`/`Listed`, so the engine replaces what it had).

use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::reported::ReportedStatus;
use fleetbus_schemas::rollout::RolloutRecord;
use fleetbus_schemas::subject::{ObjectKey, RolloutKey, StatusKey, VersionKey};
use kube::core::GroupVersionKind;
use serde_json::Value;

use super::meta::{compact_managed_fields, has_annotation, local_key};
use super::{LocalKey, Packed, PackedEnvelope, Target};

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
    /// From the rollout consumer (`<p>.rollout.>`, PROTOCOL §6.9).
    Rollout(RolloutEvent),
    /// From the placement consumer (`<p>.placement.>`, PROTOCOL §6.10).
    Placement(PlacementEvent),
    /// A version read from the version store for a copy held back, or why
    /// it could not be (retried later).
    Version(VersionKey, Result<Box<Envelope>, String>),
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
    Upsert(Seen),
    /// An object is gone.
    Remove(Seen),
    /// The (re-)list is complete.
    Listed,
    /// The API server refuses the watch (403, 401, 404); it retries on its
    /// own with backoff, and the kind's rules report the refusal meanwhile.
    Error(String),
}

/// A local object as its watch saw it, packed by the watch before it is
/// queued for the engine, with what the engine reads of it on receipt.
///
/// Why packed there: a list delivers objects faster than passes drain the
/// engine's queue, which then holds thousands of them; parsed, the queue of
/// a sink at 10,000 copies held ~23 MB of them at its peak (heaptrack, issue
/// 20, "Compact state"), packed ~300 bytes each. The engine keeps `object`
/// as it is (`LocalObjects::insert_packed`): no parse on receipt.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The object, its managedFields compacted (`meta::compact_managed_fields`).
    pub object: Packed,
    /// Its namespace and name (`meta::local_key`); None without a name.
    pub key: Option<LocalKey>,
    /// Its place, if it names one (`Target::of`).
    pub target: Option<Target>,
    /// Whether it carries the origin-cluster annotation (a copy, or one
    /// pretending to be).
    pub annotated_copy: bool,
    /// Its subject as the local cluster publishes it (`ObjectKey::from_object`).
    pub source: Option<ObjectKey>,
}

impl Seen {
    /// `obj` as seen by the watch of the cluster named `cluster`.
    pub fn new(cluster: &str, mut obj: Value) -> Self {
        compact_managed_fields(&mut obj);
        Seen {
            key: local_key(&obj),
            target: Target::of(&obj),
            annotated_copy: has_annotation(
                &obj,
                fleetbus_schemas::well_known::ANNOTATION_ORIGIN_CLUSTER,
            ),
            source: ObjectKey::from_object(cluster, &obj),
            object: Packed::new(&obj),
        }
    }
}

/// What the bus consumer of a kind saw: each envelope's object packed by
/// the consumer before it is queued (see [`Seen`] for why).
pub type BusEvent = Feed<ObjectKey, PackedEnvelope>;

/// What the status consumer saw.
pub type StatusEvent = Feed<StatusKey, ReportedStatus>;

/// What the rollout consumer saw.
pub type RolloutEvent = Feed<RolloutKey, RolloutRecord>;

/// What the placement consumer saw.
pub type PlacementEvent =
    Feed<fleetbus_schemas::placement::PlacementKey, fleetbus_schemas::placement::PlacementRecord>;

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

impl<K, V> Feed<K, V> {
    /// The same event with its value turned by `f`.
    pub fn map<W>(self, f: impl FnOnce(V) -> W) -> Feed<K, W> {
        match self {
            Feed::Reset => Feed::Reset,
            Feed::Item(k, v) => Feed::Item(k, Box::new(f(*v))),
            Feed::Unreadable(k) => Feed::Unreadable(k),
            Feed::CaughtUp => Feed::CaughtUp,
        }
    }
}

/// The last value of every key of a followed stream of records (rollout,
/// placement), with the re-read a consumer restart brings: replaced only
/// once the restart has delivered every last value, so that no record is
/// missing in between.
#[derive(Debug)]
pub struct Followed<K, V> {
    /// The last valid value of every key.
    pub records: std::collections::BTreeMap<K, V>,
    /// The values of a consumer restart in progress.
    pub resnap: Option<std::collections::BTreeMap<K, V>>,
    /// Every last value has been read at least once: before that a reader
    /// cannot tell "no record" from "not read yet".
    pub caught_up: bool,
}

impl<K, V> Default for Followed<K, V> {
    fn default() -> Self {
        Followed {
            records: std::collections::BTreeMap::new(),
            resnap: None,
            caught_up: false,
        }
    }
}

/// What one fold changed.
#[derive(Debug, PartialEq, Eq)]
pub enum Folded<K> {
    /// Nothing a reader acts on.
    Nothing,
    /// The value of this key.
    Key(K),
    /// Every value may have changed (a re-read swapped in, or the first catch-up).
    Everything,
}

impl<K: Ord + Clone, V: Clone> Followed<K, V> {
    /// Folds one event of the consumer in.
    pub fn fold(&mut self, ev: Feed<K, V>) -> Folded<K> {
        match ev {
            Feed::Reset => {
                self.resnap = Some(Default::default());
                Folded::Nothing
            }
            Feed::Item(key, v) => {
                let map = self.resnap.as_mut().unwrap_or(&mut self.records);
                map.insert(key.clone(), *v);
                Folded::Key(key)
            }
            Feed::Unreadable(key) => {
                // Skipped and counted by the consumer; what was read before
                // stays (garbage on a subject changes nothing), as a sink
                // keeps its copy on any message it cannot read.
                if let (Some(resnap), Some(old)) = (&mut self.resnap, self.records.get(&key)) {
                    resnap.insert(key, old.clone());
                }
                Folded::Nothing
            }
            Feed::CaughtUp => {
                let mut out = Folded::Nothing;
                if let Some(r) = self.resnap.take() {
                    self.records = r;
                    out = Folded::Everything;
                }
                if !self.caught_up {
                    out = Folded::Everything;
                }
                self.caught_up = true;
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A 1 KiB ConfigMap copy as a watch lists it (the bench's object).
    fn listed() -> Value {
        let mut obj = super::super::packed::tests::configmap();
        obj["metadata"]["annotations"] = json!({"fleetbus.io/origin-cluster": "c1"});
        obj["metadata"]["managedFields"] = json!([{
            "manager": "fleetbus", "operation": "Apply", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:data": {"f:pad": {}, "f:v": {}}}}]);
        obj
    }

    #[test]
    fn seen_is_queued_packed_with_what_the_engine_reads() {
        let obj = listed();
        let seen = Seen::new("c2", obj.clone());
        // Packed: a few hundred bytes queued, not a ~4 KiB parsed tree.
        assert!(
            seen.object.packed_len() > 0 && seen.object.packed_len() < 400,
            "{:?}",
            seen.object
        );
        let mut compacted = obj.clone();
        compact_managed_fields(&mut compacted);
        assert_ne!(compacted, obj, "the fixture has fieldsV1 to drop");
        assert_eq!(seen.object.value().unwrap(), compacted);
        assert_eq!(seen.key, local_key(&obj));
        assert_eq!(seen.target, Target::of(&obj));
        assert_eq!(seen.source, ObjectKey::from_object("c2", &obj));
        assert!(seen.annotated_copy);
        // An original, cluster-scoped, and an object without a name.
        let original = Seen::new(
            "c2",
            json!({"apiVersion": "v1", "kind": "Namespace",
                                              "metadata": {"name": "bench"}}),
        );
        assert_eq!(original.key, Some((None, "bench".to_owned())));
        assert!(!original.annotated_copy && original.target.is_some());
        let nameless = Seen::new("c2", json!({"apiVersion": "v1", "kind": "ConfigMap"}));
        assert_eq!(
            (nameless.key, nameless.target, nameless.source),
            (None, None, None)
        );
    }

    #[test]
    fn a_feed_maps_only_its_items() {
        let item: Feed<u8, u8> = Feed::Item(1, Box::new(2));
        assert!(matches!(item.map(u16::from), Feed::Item(1, v) if *v == 2u16));
        assert!(matches!(Feed::<u8, u8>::Reset.map(u16::from), Feed::Reset));
        assert!(matches!(
            Feed::<u8, u8>::Unreadable(3).map(u16::from),
            Feed::Unreadable(3)
        ));
        assert!(matches!(
            Feed::<u8, u8>::CaughtUp.map(u16::from),
            Feed::CaughtUp
        ));
    }
}
