//! Kubernetes Events (core/v1) about the agent's objects: Cluster objects,
//! rules, copies. Repeated Events are aggregated as kube's own recorder does
//! (client-go's `EventCorrelator`): an Event with the same involved object,
//! type, reason and message as one recorded before is not created again; the
//! existing one gets its `count` raised and its `lastTimestamp` moved, so a
//! storm of drift costs one Event object, not one per occurrence.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use fleetbus_schemas::well_known;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use kube::Api;

/// Whether an Event reports something normal or something to look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventType {
    /// A normal transition (peer Ready, Left).
    Normal,
    /// Something an operator should look at (Disconnected, conflicts).
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Where Events about cluster-scoped objects must go: kube-apiserver's Event
/// validation only accepts "default" (or "kube-system") for an
/// `involvedObject` without a namespace; client-go and kube-runtime do the same.
pub const CLUSTER_SCOPED_EVENT_NAMESPACE: &str = "default";

/// Events remembered for aggregation, as client-go's `maxLruCacheEntries`:
/// the least recently used is forgotten first (its next occurrence creates a
/// new Event, which is what kube does too).
const CACHE_ENTRIES: usize = 4096;

/// What makes two Events the same one (client-go's `getEventKey` without the
/// source host, which is always this agent).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct EventKey {
    namespace: String,
    object: (String, String, String, String, String),
    type_: EventType,
    reason: String,
    message: String,
}

impl EventKey {
    fn new(
        namespace: &str,
        o: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
    ) -> Self {
        let s = |v: &Option<String>| v.clone().unwrap_or_default();
        EventKey {
            namespace: namespace.to_owned(),
            object: (
                s(&o.api_version),
                s(&o.kind),
                s(&o.namespace),
                s(&o.name),
                s(&o.uid),
            ),
            type_,
            reason: reason.to_owned(),
            message: message.to_owned(),
        }
    }
}

/// An Event recorded before: its name and count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// `metadata.name` of the Event object.
    pub name: String,
    /// Its `count`.
    pub count: i32,
    used: u64,
}

/// The Events recorded recently, by key: decides whether an occurrence
/// creates an Event or raises an existing one's count. Pure; bounded.
#[derive(Debug, Default)]
pub struct Correlator {
    seen: HashMap<EventKey, Recorded>,
    clock: u64,
}

impl Correlator {
    /// The Event to update for `key`, if one was recorded (None: create).
    pub fn recorded(&mut self, key: &EventKey) -> Option<Recorded> {
        self.clock += 1;
        let clock = self.clock;
        self.seen.get_mut(key).map(|r| {
            r.used = clock;
            r.clone()
        })
    }

    /// Remembers that the Event `name` of `key` now has `count`.
    pub fn record(&mut self, key: EventKey, name: String, count: i32) {
        self.clock += 1;
        if self.seen.len() >= CACHE_ENTRIES && !self.seen.contains_key(&key) {
            let oldest = self
                .seen
                .iter()
                .min_by_key(|(_, r)| r.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.seen.remove(&k);
            }
        }
        let used = self.clock;
        self.seen.insert(key, Recorded { name, count, used });
    }

    /// Forgets `key` (its Event is gone: expired or deleted).
    pub fn forget(&mut self, key: &EventKey) {
        self.seen.remove(key);
    }
}

/// Records Events; `involvedObject` names the object (e.g. a Cluster).
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    instance: String,
    // A std Mutex: held only to read or update the map, never across an await.
    correlator: Arc<Mutex<Correlator>>,
}

impl Recorder {
    /// A recorder; `instance` names this agent (`reportingInstance`).
    pub fn new(client: kube::Client, instance: &str) -> Self {
        Recorder {
            client,
            instance: instance.to_owned(),
            correlator: Arc::default(),
        }
    }

    fn correlator(&self) -> std::sync::MutexGuard<'_, Correlator> {
        // A panic while holding the lock leaves a map that is still usable.
        self.correlator
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Publishes one occurrence of an Event about `object`. Failures are
    /// logged, not returned: an Event lost must not stop reconciliation.
    pub async fn publish(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        self.publish_counted(object, type_, reason, message, 1)
            .await;
    }

    /// Publishes `count` occurrences of an Event about `object` at once (a
    /// coalesced drift storm): a new Event with that count, or the count of
    /// the same Event recorded before raised by it.
    pub async fn publish_counted(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
        count: i32,
    ) {
        let obj_name = object.name.clone().unwrap_or_default();
        let namespace = object
            .namespace
            .clone()
            .unwrap_or_else(|| CLUSTER_SCOPED_EVENT_NAMESPACE.to_owned());
        let key = EventKey::new(&namespace, object, type_, reason, message);
        let api = Api::<Event>::namespaced(self.client.clone(), &namespace);
        let count = count.max(1);
        let earlier = self.correlator().recorded(&key);
        if let Some(earlier) = earlier {
            let total = earlier.count.saturating_add(count);
            let patch = serde_json::json!({
                "count": total,
                "lastTimestamp": Time(Timestamp::now()),
            });
            match api
                .patch(
                    &earlier.name,
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await
            {
                Ok(_) => {
                    self.correlator().record(key, earlier.name, total);
                    tracing::debug!(object = %obj_name, reason, count = total, "event repeated");
                    return;
                }
                // Expired (kube keeps Events an hour) or deleted: a new one.
                Err(kube::Error::Api(e)) if e.code == 404 => self.correlator().forget(&key),
                Err(error) => {
                    tracing::warn!(%error, object = %obj_name, reason, "failed to update event");
                    return;
                }
            }
        }
        let event = self.event(object, &namespace, type_, reason, message, count);
        let name = event.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &event).await {
            Ok(_) => {
                self.correlator().record(key, name, count);
                tracing::info!(object = %obj_name, reason, message, "event");
            }
            Err(error) => {
                tracing::warn!(%error, object = %obj_name, reason, "failed to record event");
            }
        }
    }

    fn event(
        &self,
        object: &ObjectReference,
        namespace: &str,
        type_: EventType,
        reason: &str,
        message: &str,
        count: i32,
    ) -> Event {
        let now = Timestamp::now();
        let obj_name = object.name.clone().unwrap_or_default();
        Event {
            metadata: ObjectMeta {
                // Unique per call, like client-go's `<name>.<unix nanos hex>`.
                name: Some(format!("{}.{:x}", obj_name, now.as_nanosecond())),
                namespace: Some(namespace.to_owned()),
                ..ObjectMeta::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            type_: Some(type_.as_str().to_owned()),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(count),
            source: Some(EventSource {
                component: Some(well_known::EVENT_SOURCE_COMPONENT.to_owned()),
                host: None,
            }),
            reporting_component: Some(well_known::EVENT_REPORTING_COMPONENT.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            action: Some(reason.to_owned()),
            ..Event::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str, message: &str) -> EventKey {
        let o = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("ConfigMap".into()),
            namespace: Some("a".into()),
            name: Some(name.into()),
            ..ObjectReference::default()
        };
        EventKey::new("a", &o, EventType::Warning, "DriftDetected", message)
    }

    #[test]
    fn the_same_event_again_updates_the_recorded_one() {
        let mut c = Correlator::default();
        let k = key("x", "changed by kubectl-edit: /data/a");
        assert_eq!(c.recorded(&k), None, "first occurrence: create");
        c.record(k.clone(), "x.1".into(), 1);
        let again = c.recorded(&k).unwrap();
        assert_eq!((again.name.as_str(), again.count), ("x.1", 1));
        c.record(k.clone(), again.name, 4);
        assert_eq!(c.recorded(&k).unwrap().count, 4);
        // Another message, object or reason is another Event.
        assert_eq!(
            c.recorded(&key("x", "changed by hpa: /spec/replicas")),
            None
        );
        assert_eq!(
            c.recorded(&key("y", "changed by kubectl-edit: /data/a")),
            None
        );
        c.forget(&k);
        assert_eq!(c.recorded(&k), None, "gone from the server: create again");
    }

    #[test]
    fn the_least_recently_used_is_forgotten_at_the_bound() {
        let mut c = Correlator::default();
        for i in 0..CACHE_ENTRIES {
            c.record(key(&i.to_string(), "m"), format!("e{i}"), 1);
        }
        // Touch the first, so the second is now the least recently used.
        assert!(c.recorded(&key("0", "m")).is_some());
        c.record(key("new", "m"), "n".into(), 1);
        assert_eq!(c.seen.len(), CACHE_ENTRIES);
        assert!(c.recorded(&key("0", "m")).is_some());
        assert!(c.recorded(&key("1", "m")).is_none());
        assert!(c.recorded(&key("new", "m")).is_some());
    }
}
