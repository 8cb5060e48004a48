//! Writing many objects: creating them in bulk, and updating them as fast as
//! the API server acknowledges for a fixed time.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::objects;

/// One acknowledged update: `data.v` of `name` set to `mark`, acknowledged at `ack`.
#[derive(Debug, Clone)]
pub struct Write {
    pub name: String,
    pub mark: String,
    pub ack: Instant,
}

/// Creates `<prefix>-<i>` for `i` in `range` (mark "0"), `concurrency` at a time.
pub async fn create_many(
    api: &Api<ConfigMap>,
    prefix: &str,
    range: std::ops::Range<usize>,
    concurrency: usize,
) -> anyhow::Result<()> {
    futures::stream::iter(range.map(|i| {
        let api = api.clone();
        let name = format!("{prefix}-{i}");
        async move { objects::create(&api, &name, "0").await }
    }))
    .buffer_unordered(concurrency)
    .try_collect::<Vec<()>>()
    .await?;
    Ok(())
}

/// Updates `names` round robin (mark = a global sequence number, from 1) with
/// `concurrency` writers until `duration` has passed. Returns every
/// acknowledged write; a failed write ends the run with its error.
pub async fn update_for(
    api: &Api<ConfigMap>,
    names: Arc<Vec<String>>,
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<Vec<Write>> {
    let seq = Arc::new(AtomicU64::new(1));
    let end = Instant::now() + duration;
    let mut workers = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (api, names, seq) = (api.clone(), names.clone(), seq.clone());
        workers.spawn(async move {
            let mut done = Vec::new();
            while Instant::now() < end {
                let n = seq.fetch_add(1, Ordering::Relaxed);
                let Some(name) = names.get((n as usize) % names.len().max(1)) else {
                    break;
                };
                let mark = n.to_string();
                objects::set_mark(&api, name, &mark).await?;
                done.push(Write {
                    name: name.clone(),
                    mark,
                    ack: Instant::now(),
                });
            }
            anyhow::Ok(done)
        });
    }
    let mut all = Vec::new();
    while let Some(r) = workers.join_next().await {
        all.extend(r??);
    }
    all.sort_by_key(|w| w.ack);
    Ok(all)
}
