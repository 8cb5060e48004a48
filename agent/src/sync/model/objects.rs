//! Every local object of one kind as the watch last listed or saw it, each
//! kept [`Packed`] (docs/design/memory.md: the parsed trees were most of
//! the agent's memory). A read parses the object again: reads are what one
//! change touches (its copy, its source object), and a full plan or
//! collection scan, which reads every object, is rare (see the sink's plan).

use serde_json::Value;

use super::{LocalKey, Packed};

/// See the module docs. A persistent B-tree, as `Snapshots`: a clone (a
/// preview's snapshot of the World) shares every node and costs nothing.
#[derive(Debug, Default, Clone)]
pub struct LocalObjects(imbl::OrdMap<LocalKey, Packed>);

/// `p` parsed; an object that does not unpack (a bug: it was packed here
/// from a parsed object) is logged and read as absent.
fn unpacked(key: &LocalKey, p: &Packed) -> Option<Value> {
    match p.value() {
        Ok(v) => Some(v),
        Err(e) => {
            tracing::error!(namespace = ?key.0, name = %key.1, error = %e, "local object unreadable");
            None
        }
    }
}

impl LocalObjects {
    /// Sets the object at `key`, already packed (by the watch, see `Seen`).
    pub fn insert_packed(&mut self, key: LocalKey, obj: Packed) {
        self.0.insert(key, obj);
    }

    /// Forgets the object at `key`; whether there was one.
    pub fn remove(&mut self, key: &LocalKey) -> bool {
        self.0.remove(key).is_some()
    }

    /// The object at `key`, parsed.
    pub fn get(&self, key: &LocalKey) -> Option<Value> {
        self.0.get(key).and_then(|p| unpacked(key, p))
    }

    /// Whether an object is at `key` (nothing parsed).
    pub fn contains_key(&self, key: &LocalKey) -> bool {
        self.0.contains_key(key)
    }

    /// Every object with its key, parsed one at a time as the walk reaches it.
    pub fn iter(&self) -> impl Iterator<Item = (&LocalKey, Value)> + '_ {
        self.0
            .iter()
            .filter_map(|(k, p)| unpacked(k, p).map(|v| (k, v)))
    }

    /// Every object, parsed one at a time.
    pub fn values(&self) -> impl Iterator<Item = Value> + '_ {
        self.iter().map(|(_, v)| v)
    }

    /// The packed bytes held.
    #[cfg(test)]
    pub fn packed_bytes(&self) -> usize {
        self.0.values().map(Packed::packed_len).sum()
    }
}

impl FromIterator<(LocalKey, Value)> for LocalObjects {
    fn from_iter<I: IntoIterator<Item = (LocalKey, Value)>>(iter: I) -> Self {
        LocalObjects(
            iter.into_iter()
                .map(|(k, v)| (k, Packed::new(&v)))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_reads_and_forgets() {
        let key = |n: &str| (Some("ns".to_owned()), n.to_owned());
        let a = json!({"metadata": {"name": "a"}, "data": {"pad": "x".repeat(900)}});
        let mut o: LocalObjects = [(key("a"), a.clone())].into_iter().collect();
        o.insert_packed(key("b"), Packed::new(&json!({"metadata": {"name": "b"}})));
        assert_eq!(o.get(&key("a")), Some(a.clone()));
        assert!(o.contains_key(&key("b")) && !o.contains_key(&key("c")));
        assert_eq!(o.values().count(), 2);
        assert!(o.packed_bytes() < 400, "{}", o.packed_bytes());
        assert!(o.remove(&key("b")) && !o.remove(&key("b")));
        assert_eq!(o.iter().collect::<Vec<_>>(), vec![(&key("a"), a)]);
    }

    #[test]
    fn an_unreadable_object_reads_as_absent() {
        let key = (None, "x".to_owned());
        let o = LocalObjects(imbl::OrdMap::unit(key.clone(), Packed::from_bytes(&[0xc1])));
        assert_eq!(o.get(&key), None);
        assert_eq!(o.values().count(), 0);
        assert!(o.contains_key(&key));
    }
}
