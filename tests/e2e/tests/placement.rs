//! Placement and failover (`spec.placement`), with real agents, devclusters
//! and the `fleetbus` CLI driven as users do: a hub and three sinks, a rule
//! placing each ConfigMap on 2 of them. A NoExecute taint moves a copy off
//! its cluster after `afterSeconds`; a chosen cluster whose agent and API
//! server are killed is replaced; when it returns (`failback: Never`) its
//! stale copy is collected and the new choice stays.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::fleetbus_cli;
use common::sync::*;
use fleetbus_testsupport::{wait_for, Member};

const CONVERGE: Duration = Duration::from_secs(60);

fn rule() -> &'static str {
    r#"apiVersion: fleetbus.io/v1alpha1
kind: ResourceSyncRule
metadata: {name: placed}
spec:
  groupVersionKind: {group: "", version: v1, kind: ConfigMap}
  rules: [{match: [{objectKey: {namespace: web}}]}]
  clusterSelector: {matchLabels: {role: sink}}
  placement:
    clusters: 2
    failover: {afterSeconds: 3, failback: Never, purge: Graciously}
"#
}

fn config_maps() -> kube::api::ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

/// The sinks holding a copy of web/app.
async fn holders(sinks: &[&Member]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for m in sinks {
        if let Ok(Some(o)) = get_dynamic(m, &config_maps(), Some("web"), "app").await {
            if check_copy(&o, "hub", "placed").is_ok() {
                out.insert(m.name.clone());
            }
        }
    }
    out
}

/// Waits until exactly two sinks hold the copy, `pred` holds of them, and
/// no other copy remains; returns them.
async fn wait_two<P>(sinks: &[&Member], what: &str, pred: P) -> BTreeSet<String>
where
    P: Fn(&BTreeSet<String>) -> bool,
{
    wait_for(what, CONVERGE, || async {
        let h = holders(sinks).await;
        if h.len() == 2 && pred(&h) {
            Ok(h)
        } else {
            Err(format!("holders {h:?}"))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_of_three_hold_a_copy_a_taint_moves_it_and_a_dead_cluster_is_replaced() {
    let nats = fleetbus_testsupport::NatsServer::start().unwrap();
    let mut m = fleet(&nats, &["hub", "c1", "c2", "c3"]).await;
    for x in &m {
        create_ns(x, "web").await;
    }
    for x in &m[1..] {
        kubectl(x, &["label", "clusters.fleetbus.io", &x.name, "role=sink"]);
    }
    apply_yaml(&m[0], rule());
    apply_yaml(
        &m[0],
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: app, namespace: web}\ndata: {v: \"1\"}\n",
    );
    let first = {
        let sinks: Vec<&Member> = m[1..].iter().collect();
        wait_two(&sinks, "2 of 3 sinks hold web/app", |_| true).await
    };

    // `rules describe` says where, and why.
    let (code, out, err) = fleetbus_cli(&nats, &["rules", "describe", "placed"]).await;
    assert_eq!(code, Some(0), "{err}");
    for c in &first {
        assert!(out.contains(c.as_str()), "{out}");
    }
    assert!(out.contains("Placement"), "{out}");

    // A taint nobody tolerates moves the copy off after afterSeconds.
    let tainted = first.iter().next().unwrap().clone();
    let (code, out, err) =
        fleetbus_cli(&nats, &["clusters", "taint", &tainted, "drain:NoExecute"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("drain:NoExecute"), "{out}");
    let moved = {
        let sinks: Vec<&Member> = m[1..].iter().collect();
        wait_two(&sinks, "the copy off the tainted cluster", |h| {
            !h.contains(&tainted)
        })
        .await
    };
    // Shown on the Cluster object everywhere.
    let shown = kubectl(
        &m[0],
        &[
            "get",
            "clusters.fleetbus.io",
            &tainted,
            "-o",
            "jsonpath={.status.taints}",
        ],
    );
    assert!(shown.contains("NoExecute"), "{shown}");
    let (code, _, err) = fleetbus_cli(
        &nats,
        &["clusters", "taint", &tainted, "drain:NoExecute", "--remove"],
    )
    .await;
    assert_eq!(code, Some(0), "{err}");
    // Bad input: a garbage taint, an unknown cluster.
    let (code, _, err) = fleetbus_cli(&nats, &["clusters", "taint", &tainted, "drain:Often"]).await;
    assert_eq!(code, Some(2), "{err}");
    let (code, _, err) = fleetbus_cli(&nats, &["clusters", "cordon", "nosuch"]).await;
    assert_eq!(code, Some(1), "{err}");

    // A chosen cluster dies, its agent and its API server: its copy is
    // replaced on the third.
    let dead = moved.iter().next().unwrap().clone();
    let i = m.iter().position(|x| x.name == dead).unwrap();
    m[i].agent.kill9();
    m[i].cluster.kill9();
    let after_failover = {
        let sinks: Vec<&Member> = m[1..].iter().filter(|x| x.name != dead).collect();
        wait_for("a replacement copy", CONVERGE, || async {
            let h = holders(&sinks).await;
            if h.len() == 2 {
                Ok(h)
            } else {
                Err(format!("holders among the living {h:?}"))
            }
        })
        .await
    };
    assert!(!after_failover.contains(&dead));
    // Its API server returns before its agent: the cluster could not hear
    // the decision, so its copy is still there.
    m[i].cluster.restart().unwrap();
    let kept = get_dynamic(&m[i], &config_maps(), Some("web"), "app")
        .await
        .unwrap();
    assert!(
        kept.is_some(),
        "a copy deleted on a cluster that could not hear"
    );

    // It returns: failback Never keeps the new choice, its stale copy goes.
    m[i].agent.spawn().unwrap();
    let sinks: Vec<&Member> = m[1..].iter().collect();
    let end = wait_two(&sinks, "the returned cluster's stale copy collected", |h| {
        !h.contains(&dead)
    })
    .await;
    assert_eq!(end, after_failover, "the new choice stays");
}
