//! What a watch has shown of one kind, by namespace and name: the list a
//! (re)start delivers replaces the whole map once it is complete, so an
//! object deleted while the watch was down is gone, never kept stale.

use std::collections::BTreeMap;

use kube::runtime::watcher::Event;
use kube::ResourceExt;

/// The objects of one kind, by (namespace, name).
pub struct Mirror<K> {
    /// What the last complete list and the events since say.
    pub map: BTreeMap<(String, String), K>,
    /// A list in progress (`Init` .. `InitDone`).
    pending: Option<BTreeMap<(String, String), K>>,
    /// A list has completed at least once.
    pub listed: bool,
}

impl<K> Default for Mirror<K> {
    fn default() -> Self {
        Mirror {
            map: BTreeMap::new(),
            pending: None,
            listed: false,
        }
    }
}

fn key<K: ResourceExt>(o: &K) -> (String, String) {
    (o.namespace().unwrap_or_default(), o.name_any())
}

impl<K: ResourceExt + Clone> Mirror<K> {
    /// Folds one event in; returns the objects it changed (before and after).
    pub fn apply(&mut self, ev: Event<K>) -> Vec<K> {
        match ev {
            Event::Apply(o) => {
                let old = self.map.insert(key(&o), o.clone());
                old.into_iter().chain([o]).collect()
            }
            Event::Delete(o) => self.map.remove(&key(&o)).into_iter().chain([o]).collect(),
            Event::Init => {
                self.pending = Some(BTreeMap::new());
                Vec::new()
            }
            Event::InitApply(o) => {
                self.pending
                    .get_or_insert_with(BTreeMap::new)
                    .insert(key(&o), o);
                Vec::new()
            }
            Event::InitDone => {
                let new = self.pending.take().unwrap_or_default();
                let old = std::mem::replace(&mut self.map, new);
                self.listed = true;
                old.into_values()
                    .chain(self.map.values().cloned())
                    .collect()
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Namespace;

    fn ns(name: &str) -> Namespace {
        Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Namespace::default()
        }
    }

    #[test]
    fn a_relist_replaces_what_the_watch_showed_once_complete() {
        let mut m = Mirror::default();
        assert!(!m.listed);
        m.apply(Event::Init);
        m.apply(Event::InitApply(ns("a")));
        m.apply(Event::InitApply(ns("b")));
        assert!(m.map.is_empty(), "not before the list is complete");
        assert_eq!(m.apply(Event::InitDone).len(), 2);
        assert!(m.listed);
        m.apply(Event::Delete(ns("a")));
        m.apply(Event::Apply(ns("c")));
        // A restart: b went while the watch was down.
        m.apply(Event::Init);
        m.apply(Event::InitApply(ns("c")));
        let changed = m.apply(Event::InitDone);
        assert_eq!(changed.len(), 3);
        let names: Vec<&str> = m.map.keys().map(|(_, n)| n.as_str()).collect();
        assert_eq!(names, ["c"]);
    }
}
