//! Kubernetes Events about Cluster objects (core/v1).

use fleetbus_schemas::well_known;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::Api;

/// Whether an Event reports something normal or something to look at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// A normal transition (peer Ready, Left).
    Normal,
    /// Something an operator should look at (Disconnected, conflicts).
    Warning,
}

/// Where Events about cluster-scoped objects must go: kube-apiserver's Event
/// validation only accepts "default" (or "kube-system") for an
/// `involvedObject` without a namespace; client-go and kube-runtime do the same.
pub const CLUSTER_SCOPED_EVENT_NAMESPACE: &str = "default";

/// Records Events; `involvedObject` names the object (e.g. a Cluster).
#[derive(Clone)]
pub struct Recorder {
    client: kube::Client,
    instance: String,
}

impl Recorder {
    /// A recorder; `instance` names this agent (`reportingInstance`).
    pub fn new(client: kube::Client, instance: &str) -> Self {
        Recorder {
            client,
            instance: instance.to_owned(),
        }
    }

    /// Publishes one Event about `object`. Failures are logged, not returned:
    /// an Event lost must not stop reconciliation.
    pub async fn publish(
        &self,
        object: &ObjectReference,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        let now = Timestamp::now();
        let obj_name = object.name.clone().unwrap_or_default();
        let namespace = object
            .namespace
            .clone()
            .unwrap_or_else(|| CLUSTER_SCOPED_EVENT_NAMESPACE.to_owned());
        let event = Event {
            metadata: ObjectMeta {
                // Unique per call, like client-go's `<name>.<unix nanos hex>`.
                name: Some(format!("{}.{:x}", obj_name, now.as_nanosecond())),
                namespace: Some(namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: object.clone(),
            reason: Some(reason.to_owned()),
            message: Some(message.to_owned()),
            type_: Some(
                match type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_owned(),
            ),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            count: Some(1),
            source: Some(EventSource {
                component: Some(well_known::EVENT_SOURCE_COMPONENT.to_owned()),
                host: None,
            }),
            reporting_component: Some(well_known::EVENT_REPORTING_COMPONENT.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            action: Some(reason.to_owned()),
            ..Event::default()
        };
        let api = Api::<Event>::namespaced(self.client.clone(), &namespace);
        if let Err(error) = api.create(&PostParams::default(), &event).await {
            tracing::warn!(%error, object = %obj_name, reason, "failed to record event");
        } else {
            tracing::info!(object = %obj_name, reason, message, "event");
        }
    }
}
