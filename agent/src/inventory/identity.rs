//! This cluster's identity as the About API says it (KEP-2149):
//! `cluster.clusterset.k8s.io` (its name in the fleet, claimed once and
//! never overwritten) and `clusterset.k8s.io` (the fleet's name, present
//! exactly while a member). Written in the version the cluster serves.

use std::collections::BTreeMap;

use fleetbus_schemas::multicluster::{
    CLUSTER_PROPERTY_GROUP, CLUSTER_PROPERTY_VERSIONS, PROPERTY_CLUSTER_ID, PROPERTY_CLUSTER_SET,
};
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use kube::core::GroupVersionKind;
use kube::Api;

use fleetbus_schemas::well_known;

/// The CRD's name, for messages and the missing-CRD metric.
pub const CRD: &str = "clusterproperties.about.k8s.io";

/// Why the identity could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum IdentityPropertyError {
    /// The cluster already has another name in its ClusterSet.
    #[error(
        "ClusterProperty {PROPERTY_CLUSTER_ID} says this cluster is {found:?} in its ClusterSet, but --cluster-name is {ours:?}: start the agent with --cluster-name {found}, or delete the ClusterProperty if the cluster really changes its name"
    )]
    Conflict {
        /// The property's value.
        found: String,
        /// `--cluster-name`.
        ours: String,
    },
    /// The API server refused or failed a request.
    #[error("failed to {action} ClusterProperty {name}")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// Which property.
        name: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
}

impl IdentityPropertyError {
    /// Whether trying again later can help.
    pub fn is_transient(&self) -> bool {
        match self {
            IdentityPropertyError::Conflict { .. } => false,
            IdentityPropertyError::Kube { source, .. } => crate::kube::client::is_transient(source),
        }
    }
}

/// The ClusterProperty resource in the first version the cluster serves
/// (v1beta1, the storage version, else v1alpha1); None when none is.
pub async fn served(client: &kube::Client) -> Result<Option<ApiResource>, kube::Error> {
    for version in CLUSTER_PROPERTY_VERSIONS {
        let gvk = GroupVersionKind::gvk(CLUSTER_PROPERTY_GROUP, version, "ClusterProperty");
        match kube::discovery::pinned_kind(client, &gvk).await {
            Ok((ar, _)) => return Ok(Some(ar)),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(None)
}

fn api(client: &kube::Client, ar: &ApiResource) -> Api<DynamicObject> {
    Api::all_with(client.clone(), ar)
}

fn value(o: &DynamicObject) -> Option<&str> {
    o.data.get("spec")?.get("value")?.as_str()
}

/// Claims `cluster.clusterset.k8s.io` for `name`: an existing one must say
/// `name`; a missing one is written.
pub async fn claim(
    client: &kube::Client,
    ar: &ApiResource,
    name: &str,
) -> Result<(), IdentityPropertyError> {
    let api = api(client, ar);
    let err = |action| {
        move |source| IdentityPropertyError::Kube {
            action,
            name: PROPERTY_CLUSTER_ID.to_owned(),
            source,
        }
    };
    match api
        .get_opt(PROPERTY_CLUSTER_ID)
        .await
        .map_err(err("read"))?
    {
        Some(o) if value(&o) == Some(name) => Ok(()),
        Some(o) => Err(IdentityPropertyError::Conflict {
            found: value(&o).unwrap_or_default().to_owned(),
            ours: name.to_owned(),
        }),
        None => {
            let o = property(ar, PROPERTY_CLUSTER_ID, name);
            match api.create(&PostParams::default(), &o).await {
                Ok(_) => {
                    tracing::info!(
                        property = PROPERTY_CLUSTER_ID,
                        value = name,
                        "claimed this cluster's name in its ClusterSet"
                    );
                    Ok(())
                }
                // Written meanwhile (another start of ours): checked again next time.
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(err("create")(e)),
            }
        }
    }
}

/// Sets `clusterset.k8s.io` to `fleet` (a member), or deletes it (None: left).
pub async fn set_cluster_set(
    client: &kube::Client,
    ar: &ApiResource,
    fleet: Option<&str>,
) -> Result<bool, IdentityPropertyError> {
    let api = api(client, ar);
    let err = |action| {
        move |source| IdentityPropertyError::Kube {
            action,
            name: PROPERTY_CLUSTER_SET.to_owned(),
            source,
        }
    };
    let current = api
        .get_opt(PROPERTY_CLUSTER_SET)
        .await
        .map_err(err("read"))?;
    match (fleet, current) {
        (Some(f), Some(o)) if value(&o) == Some(f) => Ok(false),
        (Some(f), Some(_)) => {
            let patch = serde_json::json!({"spec": {"value": f}});
            api.patch(
                PROPERTY_CLUSTER_SET,
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(err("patch"))?;
            Ok(true)
        }
        (Some(f), None) => {
            api.create(
                &PostParams::default(),
                &property(ar, PROPERTY_CLUSTER_SET, f),
            )
            .await
            .map_err(err("create"))?;
            Ok(true)
        }
        (None, Some(_)) => match api
            .delete(PROPERTY_CLUSTER_SET, &DeleteParams::default())
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(err("delete")(e)),
        },
        (None, None) => Ok(false),
    }
}

/// Every ClusterProperty of this cluster, name to value.
pub async fn list(
    client: &kube::Client,
    ar: &ApiResource,
) -> Result<BTreeMap<String, String>, IdentityPropertyError> {
    let list = api(client, ar)
        .list(&ListParams::default())
        .await
        .map_err(|source| IdentityPropertyError::Kube {
            action: "list",
            name: "*".to_owned(),
            source,
        })?;
    Ok(list
        .items
        .iter()
        .filter_map(|o| Some((o.metadata.name.clone()?, value(o)?.to_owned())))
        .collect())
}

fn property(ar: &ApiResource, name: &str, value: &str) -> DynamicObject {
    let mut o = DynamicObject::new(name, ar);
    o.data = serde_json::json!({"spec": {"value": value}});
    o.metadata.labels = Some(
        [(
            well_known::LABEL_MANAGED_BY.to_owned(),
            well_known::MANAGED_BY_AGENT.to_owned(),
        )]
        .into(),
    );
    o
}
