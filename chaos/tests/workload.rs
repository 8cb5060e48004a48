//! The workload against a real devcluster: with nothing failing, what the
//! writers recorded as acknowledged is exactly what a list of the origin shows
//! (the oracle's bookkeeping is right before any fault is blamed on fleetbus).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fleetbus_chaos::oracle::Oracle;
use fleetbus_chaos::workload::{list_origin, lock, Writer};
use fleetbus_testsupport::{wait_for, DevCluster, DevClusterOpts};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::PostParams;
use kube::Api;
use tokio_util::sync::CancellationToken;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_are_what_the_origin_holds() {
    let dc = DevCluster::start(DevClusterOpts::new("a")).unwrap();
    let client = dc.client().await.unwrap();
    let mut ns = Namespace::default();
    ns.metadata.name = Some("load".into());
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();

    let oracle = Arc::new(Mutex::new(Oracle::default()));
    let stop = CancellationToken::new();
    let writers: Vec<_> = (0..3)
        .map(|index| {
            let w = Writer {
                origin: "a".into(),
                client: client.clone(),
                namespace: "load".into(),
                index,
                objects: 5,
                pace: Duration::from_millis(2),
            };
            tokio::spawn(w.run(7, oracle.clone(), stop.clone()))
        })
        .collect();
    // Run until the writers acknowledged a few hundred writes between them.
    wait_for(
        "300 acknowledged writes",
        Duration::from_secs(60),
        || async {
            let n = lock(&oracle).acknowledged_writes();
            if n >= 300 {
                Ok(())
            } else {
                Err(format!("{n}"))
            }
        },
    )
    .await;
    stop.cancel();
    let mut failed = 0;
    for w in writers {
        failed += w.await.unwrap().failed;
    }
    assert_eq!(failed, 0, "nothing failed, so nothing is unknown");

    let listed = list_origin(&client, "a", "load").await.unwrap();
    let on_server: std::collections::BTreeMap<_, _> = listed
        .iter()
        .map(|l| (l.source.clone(), (l.uid.clone(), l.seq)))
        .collect();
    let present = lock(&oracle).present();
    assert!(!present.is_empty() && present.len() <= 15, "{present:?}");
    assert_eq!(present, on_server);
}
