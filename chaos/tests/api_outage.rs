//! The regression test of the `api-down` stall (docs/RELIABILITY.md,
//! Findings): an agent whose own API server is unreachable while its sources
//! keep changing must converge soon after the API server is back.
//!
//! Before the fix, every change that reached the sink during the outage was
//! tried at once and failed, so the copy's backoff doubled with each one:
//! twelve changes left it waiting minutes after the heal, and nothing the
//! agent then saw (its watch resumed without a re-list) counted as new input.
//! Now the agent stops acting on the kind whose watch lost its connection,
//! starts the watch again on a new connection, lists again, and writes what
//! it missed.
#![allow(clippy::expect_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use fleetbus_chaos::fleet::{Fleet, NS};
use fleetbus_chaos::proxy::Fault;
use fleetbus_testsupport::try_wait_for;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};

/// Changes the origin makes while the sink's API server is down: with the
/// old doubling per failure, 2^11 s (capped at 5 min) of backoff.
const CHANGES: u32 = 12;
/// The origin's pace during the outage (a workload's rhythm, not a wait).
const PACE: Duration = Duration::from_millis(400);
/// How soon after the heal the copy must be right: the watch's restart
/// delay (at most 10 s) plus a list and a write, with room for a loaded
/// machine; far below the minutes the old backoff waited.
const AFTER_HEAL: Duration = Duration::from_secs(30);
const SETUP: Duration = Duration::from_secs(60);

fn configmap(seq: u32) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some("outage".into()),
            namespace: Some(NS.into()),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("seq".to_owned(), seq.to_string())])),
        ..ConfigMap::default()
    }
}

async fn holds(api: &Api<ConfigMap>, seq: u32) -> Result<(), String> {
    match api.get_opt("outage").await {
        Ok(Some(cm)) => {
            let got = cm.data.and_then(|d| d.get("seq").cloned());
            if got.as_deref() == Some(seq.to_string().as_str()) {
                Ok(())
            } else {
                Err(format!("holds seq {got:?}, want {seq}"))
            }
        }
        Ok(None) => Err("no copy".into()),
        Err(e) => Err(e.to_string()),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sink_whose_api_server_was_down_converges_soon_after_it_is_back() {
    let fleet = Fleet::start(&["c1", "c2"]).await.expect("start the fleet");
    let (source, sink) = (&fleet.nodes[0], &fleet.nodes[1]);
    let origin = Api::<ConfigMap>::namespaced(source.member.client.clone(), NS);
    let copies = Api::<ConfigMap>::namespaced(sink.member.client.clone(), NS);
    origin
        .create(&PostParams::default(), &configmap(0))
        .await
        .expect("create the source");
    try_wait_for("the first copy", SETUP, || holds(&copies, 0))
        .await
        .expect("copied before the outage");
    eprintln!("copied; cutting the sink's API server");

    sink.api.set(Fault::Cut);
    sink.member
        .cluster
        .pause()
        .expect("SIGSTOP the sink's API server");
    try_wait_for("the sink agent's /readyz 503", SETUP, || async {
        match sink.member.readyz() {
            Ok((503, _)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await
    .expect("the agent notices its API server is gone");
    eprintln!("sink unready; changing the source");
    for seq in 1..=CHANGES {
        origin
            .replace("outage", &PostParams::default(), &configmap(seq))
            .await
            .expect("change the source");
        tokio::time::sleep(PACE).await;
    }
    sink.member.cluster.resume().expect("SIGCONT");
    sink.api.set(Fault::Pass);
    eprintln!("healed");

    let healed = try_wait_for("the last change copied after the heal", AFTER_HEAL, || {
        holds(&copies, CHANGES)
    })
    .await;
    assert!(
        healed.is_ok(),
        "{healed:?}\nsink agent log (tail):\n{}",
        tail(&sink.member.agent.log())
    );
}

fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
