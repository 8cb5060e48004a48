//! The full-mesh baseline of scenario 7, implemented in the harness: every
//! cluster's "agent" watches every peer's API server directly (as
//! cluster-registry does) and copies the peer's ConfigMaps of [`NS`] into its
//! own cluster. N(N−1) watches, no bus.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, ResourceExt};

use crate::mesh::Member;
use crate::objects::NS;

/// Label on a baseline copy (naming its origin); origins are watched without it.
const COPY_OF: &str = "bench-copy-of";

/// The running baseline; its watch tasks stop on drop.
pub struct FullMesh {
    /// Per cluster, the client its "agent" writes copies with.
    writers: Vec<Api<ConfigMap>>,
    tasks: tokio::task::JoinSet<()>,
}

impl FullMesh {
    /// One writer client per cluster, each with its connection open (a list),
    /// so that the connections the watches add can be counted apart.
    pub async fn writers(nodes: &[Member]) -> anyhow::Result<FullMesh> {
        let mut writers = Vec::new();
        for own in nodes {
            let api: Api<ConfigMap> = Api::namespaced(own.cluster.client().await?, NS);
            api.list(&ListParams::default().limit(1)).await?;
            writers.push(api);
        }
        Ok(FullMesh {
            writers,
            tasks: tokio::task::JoinSet::new(),
        })
    }

    /// For every ordered pair (cluster, peer): a watch on the peer's API server
    /// with its own client (its own connections), writing copies into the cluster.
    pub async fn watch(&mut self, nodes: &[Member]) -> anyhow::Result<()> {
        for (own_api, i) in self.writers.iter().zip(0..) {
            for (j, peer) in nodes.iter().enumerate() {
                if i == j {
                    continue;
                }
                let peer_api: Api<ConfigMap> = Api::namespaced(peer.cluster.client().await?, NS);
                let (own_api, from) = (own_api.clone(), peer.name.clone());
                self.tasks.spawn(async move {
                    let cfg = watcher::Config::default().labels(&format!("!{COPY_OF}"));
                    let mut objs = watcher(peer_api, cfg)
                        .default_backoff()
                        .applied_objects()
                        .boxed();
                    while let Some(o) = objs.next().await {
                        match o {
                            Ok(o) => {
                                if let Err(e) = copy(&own_api, &from, &o).await {
                                    eprintln!(
                                        "bench full-mesh: copy {} from {from}: {e}",
                                        o.name_any()
                                    );
                                }
                            }
                            Err(e) => eprintln!("bench full-mesh: watch {from}: {e}"),
                        }
                    }
                });
            }
        }
        Ok(())
    }
}

/// Creates (or, when it exists, patches) the copy of `o` in `own`.
async fn copy(own: &Api<ConfigMap>, from: &str, o: &ConfigMap) -> Result<(), kube::Error> {
    let mut labels = o.labels().clone();
    labels.insert(COPY_OF.into(), from.into());
    let c = ConfigMap {
        metadata: ObjectMeta {
            name: Some(o.name_any()),
            namespace: Some(NS.into()),
            labels: Some(labels),
            ..Default::default()
        },
        data: o.data.clone(),
        ..Default::default()
    };
    match own.create(&PostParams::default(), &c).await {
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let patch = serde_json::json!({"data": c.data});
            own.patch(
                &c.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map(|_| ())
        }
        r => r.map(|_| ()),
    }
}

impl Drop for FullMesh {
    fn drop(&mut self) {
        self.tasks.abort_all();
    }
}
