//! The last envelope of every object of one kind on the bus (every origin),
//! with an index of its `Deleted` tombstones by origin and uid.
//!
//! Collection asks, for each copy nothing wants any more, whether its origin
//! published a `Deleted` tombstone for the copy's source uid (then the copy
//! goes whatever its orphan policy). Answered by a walk over every envelope,
//! that made each delete cost a look at every object (issue 20); the index
//! answers it with a lookup. Reads go through `Deref` to the map; every
//! write goes through `insert`/`remove`, which keep the index.

use std::collections::{BTreeMap, HashMap};
use std::ops::Deref;

use fleetbus_schemas::envelope::{Envelope, TombstoneReason};
use fleetbus_schemas::subject::ObjectKey;

/// See the module docs.
#[derive(Debug, Default)]
pub struct Snapshots {
    by_key: BTreeMap<ObjectKey, Envelope>,
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
    /// Sets the envelope at `key`; returns the one it replaces.
    pub fn insert(&mut self, key: ObjectKey, env: Envelope) -> Option<Envelope> {
        if is_deleted(&env) {
            *self
                .deleted
                .entry(key.origin.clone())
                .or_default()
                .entry(env.uid.clone())
                .or_default() += 1;
        }
        let origin = key.origin.clone();
        let old = self.by_key.insert(key, env);
        if let Some(o) = &old {
            self.unindex(&origin, o);
        }
        old
    }

    /// Forgets the envelope at `key`; returns it.
    pub fn remove(&mut self, key: &ObjectKey) -> Option<Envelope> {
        let old = self.by_key.remove(key)?;
        self.unindex(&key.origin, &old);
        Some(old)
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
}

impl Deref for Snapshots {
    type Target = BTreeMap<ObjectKey, Envelope>;

    fn deref(&self) -> &Self::Target {
        &self.by_key
    }
}

impl<'a> IntoIterator for &'a Snapshots {
    type Item = (&'a ObjectKey, &'a Envelope);
    type IntoIter = std::collections::btree_map::Iter<'a, ObjectKey, Envelope>;

    fn into_iter(self) -> Self::IntoIter {
        self.by_key.iter()
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
        s.iter()
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
}
