//! The last envelope of every object of one kind on the bus (every origin),
//! with an index of its `Deleted` tombstones by origin and uid.
//!
//! Collection asks, for each copy nothing wants any more, whether its origin
//! published a `Deleted` tombstone for the copy's source uid (then the copy
//! goes whatever its orphan policy). Answered by a walk over every envelope,
//! that made each delete cost a look at every object (docs/design/memory.md); the index
//! answers it with a lookup. Every write goes through `insert`/`remove`,
//! which keep the index.
//!
//! The object an envelope carries is kept [`Packed`] (docs/design/memory.md:
//! on a sink it was one of the four parsed trees held per copy).
//! [`Snapshots::meta`] and [`Snapshots::iter_meta`] give the envelope
//! without it (uid, versions, hash, tombstone: what most readers ask);
//! [`Snapshots::get`] and [`Snapshots::iter`] parse it again, for the plan
//! of a changed envelope (or a full plan) and the few readers of rules and
//! Bundles.

use std::collections::HashMap;
use std::sync::Arc;

use fleetbus_schemas::envelope::{Envelope, TombstoneReason};
use fleetbus_schemas::subject::ObjectKey;
use serde_json::Value;

use super::Packed;

/// One envelope: everything but the object, and the object packed. The bus
/// consumer makes it before the envelope is queued for the engine (see
/// [`super::Seen`] for why), `Snapshots` keeps it as it is.
#[derive(Debug, Clone)]
pub struct PackedEnvelope {
    meta: Envelope,
    object: Option<Packed>,
}

impl PackedEnvelope {
    /// `env` with its object packed.
    pub fn new(mut env: Envelope) -> Self {
        let object = env.object.take().map(|o| Packed::new(&o));
        PackedEnvelope { meta: env, object }
    }

    /// The envelope's object, parsed again (None if it has none, or, a
    /// bug, if it does not unpack: logged).
    pub fn object(&self, key: &ObjectKey) -> Option<Value> {
        self.object.as_ref().and_then(|p| unpacked(key, p))
    }

    /// The envelope without its object (what freshness checks read).
    pub fn meta(&self) -> &Envelope {
        &self.meta
    }

    /// Drops the object (what the origin keeps of its own envelopes).
    pub fn drop_object(&mut self) {
        self.object = None;
    }

    /// Clears the content hash: a plan then finds the envelope differs
    /// from whatever it compares it with.
    pub fn clear_hash(&mut self) {
        self.meta.content_hash.clear();
    }

    /// The whole envelope; an object that does not unpack (a bug: it was
    /// packed here from a parsed one) is logged and left out.
    fn whole(&self, key: &ObjectKey) -> Envelope {
        let mut env = self.meta.clone();
        env.object = self.object(key);
        env
    }
}

fn unpacked(key: &ObjectKey, p: &Packed) -> Option<Value> {
    match p.value() {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(object = %super::meta::describe_key(key), error = %e, "kept envelope unreadable");
            None
        }
    }
}

/// See the module docs.
#[derive(Debug, Default, Clone)]
pub struct Snapshots {
    /// A persistent B-tree: a clone shares every node and envelope and
    /// costs nothing (a preview reads a snapshot of the World while the
    /// engine goes on changing its own; a deep copy of 3,000 envelopes
    /// took milliseconds of the engine's loop per preview, BENCHMARKS 2c).
    /// A node is copied only when written while a snapshot shares it.
    /// Behind an `Arc`: a `PackedEnvelope` is ~440 bytes (an `Envelope`
    /// without its object, room for a signature and a sealing header), and
    /// a node's slots are a third to a half empty: unboxed, ~0.9 KB a copy
    /// in nodes (heaptrack at 10,000 copies, docs/design/memory.md); behind
    /// a pointer, a slot is the key and the pointer.
    by_key: imbl::OrdMap<ObjectKey, Arc<PackedEnvelope>>,
    /// origin → uid → how many `Deleted` tombstones carry that uid (a uid
    /// names one object, but a forged or replayed message may repeat it
    /// under another subject).
    deleted: HashMap<String, HashMap<String, usize>>,
}

/// Whether `env` is a `Deleted` tombstone (an old one without a reason is).
fn is_deleted(env: &Envelope) -> bool {
    env.tombstone
        && env.tombstone_reason.unwrap_or(TombstoneReason::Deleted) == TombstoneReason::Deleted
}

impl Snapshots {
    /// Sets the envelope at `key`.
    pub fn insert(&mut self, key: ObjectKey, env: Envelope) {
        self.insert_packed(key, PackedEnvelope::new(env));
    }

    /// Sets the envelope at `key`, its object already packed (the bus
    /// consumer's envelope is kept as it came).
    pub fn insert_packed(&mut self, key: ObjectKey, env: impl Into<Arc<PackedEnvelope>>) {
        let env = env.into();
        if is_deleted(&env.meta) {
            *self
                .deleted
                .entry(key.origin.clone())
                .or_default()
                .entry(env.meta.uid.clone())
                .or_default() += 1;
        }
        let origin = key.origin.clone();
        if let Some(o) = self.by_key.insert(key, env) {
            self.unindex(&origin, &o.meta);
        }
    }

    /// Forgets the envelope at `key`; returns it without its object.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Envelope> {
        let old = self.by_key.remove(key)?;
        self.unindex(&key.origin, &old.meta);
        // Copied only if a snapshot still shares it.
        Some(Arc::try_unwrap(old).map_or_else(|shared| shared.meta.clone(), |own| own.meta))
    }

    fn unindex(&mut self, origin: &str, env: &Envelope) {
        if !is_deleted(env) {
            return;
        }
        let Some(uids) = self.deleted.get_mut(origin) else {
            return;
        };
        if let Some(n) = uids.get_mut(&env.uid) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                uids.remove(&env.uid);
            }
        }
        if uids.is_empty() {
            self.deleted.remove(origin);
        }
    }

    /// Whether `origin` published a `Deleted` tombstone for `uid`.
    pub fn deleted(&self, origin: &str, uid: &str) -> bool {
        self.deleted
            .get(origin)
            .is_some_and(|uids| uids.contains_key(uid))
    }

    /// The envelope at `key` without its object (`object` is `None`).
    pub fn meta(&self, key: &ObjectKey) -> Option<&Envelope> {
        self.by_key.get(key).map(|s| &s.meta)
    }

    /// The envelope at `key`, its object parsed again.
    pub fn get(&self, key: &ObjectKey) -> Option<Envelope> {
        self.by_key.get(key).map(|s| s.whole(key))
    }

    /// Every envelope without its object, by key.
    pub fn iter_meta(&self) -> impl Iterator<Item = (&ObjectKey, &Envelope)> + '_ {
        self.by_key.iter().map(|(k, s)| (k, &s.meta))
    }

    /// Every envelope by key, each object parsed as the walk reaches it.
    pub fn iter(&self) -> impl Iterator<Item = (&ObjectKey, Envelope)> + '_ {
        self.by_key.iter().map(|(k, s)| (k, s.whole(k)))
    }

    /// How many envelopes there are.
    pub fn count(&self) -> usize {
        self.by_key.len()
    }
}

impl FromIterator<(ObjectKey, Envelope)> for Snapshots {
    fn from_iter<I: IntoIterator<Item = (ObjectKey, Envelope)>>(iter: I) -> Self {
        let mut s = Snapshots::default();
        for (k, e) in iter {
            s.insert(k, e);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(origin: &str, name: &str) -> ObjectKey {
        ObjectKey {
            origin: origin.to_owned(),
            group: String::new(),
            version: "v1".to_owned(),
            kind: "ConfigMap".to_owned(),
            namespace: Some("ns".to_owned()),
            name: name.to_owned(),
        }
    }

    fn env(uid: &str, tombstone: Option<TombstoneReason>) -> Envelope {
        let mut e = Envelope::tombstone(
            "c",
            None,
            uid,
            "1",
            chrono::DateTime::UNIX_EPOCH,
            TombstoneReason::Deleted,
        );
        e.tombstone = tombstone.is_some();
        e.tombstone_reason = tombstone;
        e
    }

    /// What the index answers must be what a walk over every envelope
    /// answers (the walk it replaces), after any sequence of writes.
    fn walk(s: &Snapshots, origin: &str, uid: &str) -> bool {
        s.iter_meta()
            .any(|(k, e)| k.origin == origin && e.uid == uid && is_deleted(e))
    }

    proptest! {
        #[test]
        fn the_index_answers_what_a_walk_answers(
            ops in proptest::collection::vec(
                (0..2usize, 0..3usize, 0..3usize, 0..4usize, any::<bool>()),
                0..60,
            )
        ) {
            let origins = ["c1", "c2"];
            let names = ["a", "b", "c"];
            let uids = ["u1", "u2", "u3"];
            let mut s = Snapshots::default();
            for (o, n, u, what, remove) in ops {
                let k = key(origins[o], names[n]);
                if remove {
                    s.remove(&k);
                    continue;
                }
                let reason = match what {
                    0 => None,
                    1 => Some(TombstoneReason::Deleted),
                    2 => Some(TombstoneReason::Unpublished),
                    _ => {
                        // An old tombstone without a reason counts as Deleted.
                        let mut e = env(uids[u], None);
                        e.tombstone = true;
                        e.tombstone_reason = None;
                        s.insert(k, e);
                        continue;
                    }
                };
                s.insert(k, env(uids[u], reason));
            }
            for o in origins {
                for u in uids {
                    prop_assert_eq!(s.deleted(o, u), walk(&s, o, u), "{} {}", o, u);
                }
            }
        }
    }

    #[test]
    fn a_deleted_tombstone_is_found_until_it_is_replaced() {
        let mut s = Snapshots::default();
        s.insert(key("c1", "a"), env("u1", Some(TombstoneReason::Deleted)));
        assert!(s.deleted("c1", "u1"));
        assert!(!s.deleted("c2", "u1"));
        s.insert(key("c1", "a"), env("u2", None));
        assert!(!s.deleted("c1", "u1"));
    }

    #[test]
    fn the_object_is_kept_packed_and_given_back_whole() {
        let mut s = Snapshots::default();
        let mut e = env("u1", None);
        e.object =
            Some(serde_json::json!({"metadata": {"name": "a"}, "data": {"pad": "x".repeat(900)}}));
        s.insert(key("c1", "a"), e.clone());
        assert_eq!(s.get(&key("c1", "a")), Some(e.clone()));
        assert_eq!(
            s.iter().map(|(_, e)| e).collect::<Vec<_>>(),
            vec![e.clone()]
        );
        let meta = s.meta(&key("c1", "a")).unwrap();
        assert_eq!((meta.object.as_ref(), meta.uid.as_str()), (None, "u1"));
        assert_eq!(s.remove(&key("c1", "a")).map(|e| e.object), Some(None));
        assert!(s.count() == 0 && s.get(&key("c1", "a")).is_none());
    }

    #[test]
    fn an_envelope_packed_before_it_is_queued_is_kept_as_it_came() {
        let mut e = env("u1", None);
        e.content_hash = "h".to_owned();
        e.object =
            Some(serde_json::json!({"metadata": {"name": "a"}, "data": {"pad": "x".repeat(900)}}));
        let packed = PackedEnvelope::new(e.clone());
        assert_eq!(packed.object(&key("c1", "a")), e.object);
        // Queued: the parsed object is gone, a few hundred bytes are left.
        assert!(packed.meta.object.is_none());
        assert!(packed.object.as_ref().is_some_and(|p| p.packed_len() < 400));
        let mut s = Snapshots::default();
        s.insert_packed(key("c1", "a"), packed.clone());
        assert_eq!(s.get(&key("c1", "a")), Some(e.clone()));
        // What the origin keeps of its own: no object; a hash cleared
        // when the received object is not what it publishes.
        let mut own = packed;
        own.drop_object();
        own.clear_hash();
        s.insert_packed(key("c1", "a"), own);
        let kept = s.get(&key("c1", "a")).unwrap();
        assert_eq!(
            (kept.object, kept.content_hash.as_str(), kept.uid.as_str()),
            (None, "", "u1")
        );
    }

    /// A preview reads a clone while the engine writes on: the clone
    /// shares the original's nodes and envelopes (no copy of thousands of
    /// envelopes in the engine's loop) and keeps what it read.
    #[test]
    fn a_clone_shares_everything_and_keeps_what_it_read() {
        let mut s: Snapshots = (0..1000)
            .map(|i| (key("c1", &format!("o{i}")), env(&format!("u{i}"), None)))
            .collect();
        let view = s.clone();
        assert!(view.by_key.ptr_eq(&s.by_key));
        let shared = |s: &Snapshots, k: &ObjectKey| Arc::ptr_eq(&s.by_key[k], &view.by_key[k]);
        assert!(shared(&s, &key("c1", "o7")));
        s.insert(key("c1", "o7"), env("new", Some(TombstoneReason::Deleted)));
        s.remove(&key("c1", "o8"));
        s.insert(key("c2", "x"), env("x", None));
        assert_eq!(
            view.meta(&key("c1", "o7")).map(|e| e.uid.as_str()),
            Some("u7")
        );
        assert!(view.meta(&key("c1", "o8")).is_some() && view.meta(&key("c2", "x")).is_none());
        assert!(!view.deleted("c1", "new") && s.deleted("c1", "new"));
        assert_eq!((view.count(), s.count()), (1000, 1000));
        // Envelopes the engine did not write are still shared.
        assert!(shared(&s, &key("c1", "o9")) && !shared(&s, &key("c1", "o7")));
    }
}
