//! Placement and failover (`spec.placement`), with real agents, devclusters
//! and the `fleetbus` CLI driven as users do: a hub and three sinks, a rule
//! placing each ConfigMap on 2 of them. A NoExecute taint moves a copy off
//! its cluster after `afterSeconds` (a rule that tolerates it stays); a
//! chosen cluster whose agent and API
//! server are killed is replaced; when it returns (`failback: Never`) its
//! stale copy is collected and the new choice stays.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::fleetbus_cli;
use common::rules::{stream, RuleBuilder};
use common::sync::*;
use fleetbus_testsupport::{wait_for, Member};
use serde_json::{json, Value};

const CONVERGE: Duration = Duration::from_secs(60);

/// The ConfigMaps of namespace `ns` (by object key) for the `role=sink`
/// clusters.
fn sink_rule(name: &str, ns: &str) -> RuleBuilder {
    RuleBuilder::new(name)
        .object_namespace(ns)
        .sinks(&[("role", "sink")])
}

/// A copy leaves a cluster unreachable or tainted for `after_seconds`, and
/// comes back as `failback` says.
fn failover(after_seconds: u64, failback: &str) -> Value {
    json!({"afterSeconds": after_seconds, "failback": failback, "purge": "Graciously"})
}

/// `placed`: each ConfigMap of `web` on 2 of the sinks, with [`failover`].
fn placed(after_seconds: u64, failback: &str) -> String {
    sink_rule("placed", "web")
        .spec(
            "placement",
            json!({"clusters": 2, "failover": failover(after_seconds, failback)}),
        )
        .yaml()
}

/// Every ConfigMap of `ops` on all three sinks, tolerating `drain:NoExecute`.
fn tolerant_rule() -> String {
    sink_rule("tolerant", "ops")
        .spec(
            "placement",
            json!({
                "clusters": 3,
                "tolerations": [{"key": "drain", "operator": "Exists", "effect": "NoExecute"}],
                "failover": failover(3, "Never"),
            }),
        )
        .yaml()
}

/// Waits until the hub has an Event `reason` on rule `placed` whose
/// message contains every one of `needles`.
async fn wait_rule_event(hub: &Member, reason: &str, needles: &[&str]) {
    let what = format!("a {reason} Event on rule placed saying {needles:?}");
    wait_for(&what, CONVERGE, || async {
        let events = events_with_reason(hub, reason).await?;
        let messages: Vec<String> = events
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("placed"))
            .filter_map(|e| e.message)
            .collect();
        messages
            .iter()
            .any(|m| needles.iter().all(|n| m.contains(n)))
            .then_some(())
            .ok_or_else(|| format!("{messages:?}"))
    })
    .await;
}

/// A hub and three sinks (c1, c2, c3 labelled `role=sink`), namespace
/// `web` everywhere.
async fn hub_and_sinks(nats: &fleetbus_testsupport::NatsServer) -> Vec<Member> {
    let m = fleet(nats, &["hub", "c1", "c2", "c3"]).await;
    for x in &m {
        create_ns(x, "web").await;
    }
    for x in &m[1..] {
        kubectl(x, &["label", "clusters.fleetbus.io", &x.name, "role=sink"]);
    }
    m
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
    let mut m = hub_and_sinks(&nats).await;
    apply_yaml(&m[0], &placed(3, "Never"));
    create_cm(&m[0], "web", "app");
    let first = {
        let sinks: Vec<&Member> = m[1..].iter().collect();
        wait_two(&sinks, "2 of 3 sinks hold web/app", |_| true).await
    };
    // Each sink's rule status says whether the decision chose it (what the
    // dashboard's grid marks): 1 of 1 on the holders, 0 of 1 on the other.
    wait_for(
        "each sink's placedHere in its rule status",
        CONVERGE,
        || {
            let nats = nats.url();
            let first = first.clone();
            async move {
                let js = async_nats::jetstream::new(
                    async_nats::connect(nats).await.map_err(|e| e.to_string())?,
                );
                let kv = js
                    .get_key_value("fleetbus-rulestatus")
                    .await
                    .map_err(|e| e.to_string())?;
                let mut said = BTreeSet::new();
                let mut keys = kv.keys().await.map_err(|e| e.to_string())?;
                while let Some(Ok(key)) = futures::StreamExt::next(&mut keys).await {
                    let Some(v) = kv.get(&key).await.map_err(|e| e.to_string())? else {
                        continue;
                    };
                    let r: serde_json::Value =
                        serde_json::from_slice(&v).map_err(|e| e.to_string())?;
                    if r["rule"] == "placed" && r["sink"] == true {
                        said.insert((
                            r["cluster"].as_str().unwrap_or_default().to_owned(),
                            r["placedHere"].as_u64(),
                            r["placedElsewhere"].as_u64(),
                        ));
                    }
                }
                let want: BTreeSet<_> = ["c1", "c2", "c3"]
                    .iter()
                    .map(|c| {
                        let here = u64::from(first.contains(*c));
                        ((*c).to_owned(), Some(here), Some(1 - here))
                    })
                    .collect();
                (said == want).then_some(()).ok_or(format!("{said:?}"))
            }
        },
    )
    .await;
    // Beside it, a rule on all three that tolerates the taint below.
    for x in &m {
        create_ns(x, "ops").await;
    }
    apply_yaml(&m[0], &tolerant_rule());
    create_cm(&m[0], "ops", "tools");
    for x in &m[1..] {
        wait_copy(
            x,
            &config_maps(),
            Some("ops"),
            "tools",
            "hub",
            "tolerant",
            |_| Ok(()),
        )
        .await;
    }

    // `rules describe` says where, and why.
    let (code, out, err) = fleetbus_cli(&nats, &["rules", "describe", "placed"]).await;
    assert_eq!(code, Some(0), "{err}");
    for c in &first {
        assert!(out.contains(c.as_str()), "{out}");
    }
    assert!(out.contains("Placement"), "{out}");
    // And an Event on the rule where kubectl describe shows it.
    let chosen: Vec<&str> = first.iter().map(String::as_str).collect();
    let on = format!("ConfigMap web/app on {}", chosen.join(", "));
    wait_rule_event(&m[0], "Placed", &["placed 1 unit(s)", &on]).await;

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
    // The rule that tolerates it kept its copy there: decided in the same
    // pass that moved the other (the same window ended).
    let t = m.iter().find(|x| x.name == tainted).unwrap();
    let kept = get_dynamic(t, &config_maps(), Some("ops"), "tools")
        .await
        .unwrap();
    check_copy(&kept.expect("the tolerated copy"), "hub", "tolerant").unwrap();
    let (code, out, err) = fleetbus_cli(&nats, &["rules", "describe", "tolerant"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(tainted.as_str()), "{out}");
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
    let replaced = format!("ConfigMap web/app: {dead} replaced by");
    wait_rule_event(&m[0], "PlacementFailover", &[&replaced]).await;
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

/// `prefer: [{capacity: cpu}]` reads what each agent publishes from its
/// Nodes' `status.allocatable`: the sink whose Nodes grow to 64 cores is
/// chosen for a one-cluster placement; its `Cluster` object shows the sum.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_with_the_most_allocatable_cpu_is_preferred() {
    let nats = fleetbus_testsupport::NatsServer::start().unwrap();
    let m = hub_and_sinks(&nats).await;
    // c2's Nodes grow as a kubelet reports it: the status subresource.
    let nodes = kubectl(&m[2], &["get", "nodes", "-o", "name"]);
    for node in nodes.split_whitespace() {
        kubectl(
            &m[2],
            &[
                "patch",
                node,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"allocatable":{"cpu":"64","memory":"256Gi"}}}"#,
            ],
        );
    }
    let count = nodes.split_whitespace().count() as u64;
    let want = (64_000 * count).to_string();
    wait_for(
        "c2's allocatable CPU on its Cluster object at the hub",
        CONVERGE,
        || async {
            let shown = kubectl(
                &m[0],
                &[
                    "get",
                    "clusters.fleetbus.io",
                    "c2",
                    "-o",
                    "jsonpath={.status.metadata.allocatable.cpuMillis}",
                ],
            );
            if shown.trim() == want {
                Ok(())
            } else {
                Err(format!("cpuMillis {shown:?}, want {want}"))
            }
        },
    )
    .await;
    apply_yaml(
        &m[0],
        &sink_rule("biggest", "web")
            .spec(
                "placement",
                json!({"clusters": 1, "prefer": [{"weight": 100, "capacity": "cpu"}]}),
            )
            .yaml(),
    );
    for i in 0..5 {
        create_cm(&m[0], "web", &format!("app{i}"));
    }
    // Every object lands on c2 alone (without the capacity score the
    // stable hash spreads five objects over the three sinks).
    wait_for("every object on c2 only", CONVERGE, || async {
        let mut seen = Vec::new();
        for x in &m[1..] {
            for i in 0..5 {
                let name = format!("app{i}");
                if let Ok(Some(o)) = get_dynamic(x, &config_maps(), Some("web"), &name).await {
                    if check_copy(&o, "hub", "biggest").is_ok() {
                        seen.push(format!("{}/{name}", x.name));
                    }
                }
            }
        }
        if seen == ["c2/app0", "c2/app1", "c2/app2", "c2/app3", "c2/app4"] {
            Ok(())
        } else {
            Err(format!("copies {seen:?}"))
        }
    })
    .await;
}

fn deployments() -> kube::api::ApiResource {
    resource("apps", "v1", "Deployment", "deployments")
}

/// Each sink's copy of web/api: its `spec.replicas` and resourceVersion.
async fn shares(sinks: &[&Member]) -> Vec<(String, i64, String)> {
    shards(sinks)
        .await
        .into_iter()
        .map(|(c, n, rv, _)| (c, n, rv))
        .collect()
}

/// [`shares`] with each copy's `shard` label, which the rule's template
/// writes from `.Placement` ("index-of-count").
async fn shards(sinks: &[&Member]) -> Vec<(String, i64, String, String)> {
    let mut out = Vec::new();
    for x in sinks {
        if let Ok(Some(o)) = get_dynamic(x, &deployments(), Some("web"), "api").await {
            if check_copy(&o, "hub", "weighted").is_ok() {
                let n = o.data["spec"]["replicas"].as_i64().unwrap_or(-1);
                let rv = o.metadata.resource_version.clone().unwrap_or_default();
                let shard = labels_of(&o).get("shard").cloned().unwrap_or_default();
                out.push((x.name.clone(), n, rv, shard));
            }
        }
    }
    out
}

/// `replicas: {divide: Weighted}` over three sinks scored 50/30/20 gives
/// 5/3/2 of 10 replicas; restarting every agent changes no decision and
/// writes no copy (Steady); a sink that dies is replaced by nobody (all three
/// were chosen) and the two left share the 10 again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_divide_by_weight_survive_a_restart_and_re_sum_after_a_failover() {
    let nats = fleetbus_testsupport::NatsServer::start().unwrap();
    let mut m = fleet(&nats, &["hub", "c1", "c2", "c3"]).await;
    for x in &m {
        create_ns(x, "web").await;
    }
    for (x, tier) in m[1..].iter().zip(["gold", "silver", "bronze"]) {
        kubectl(
            x,
            &[
                "label",
                "clusters.fleetbus.io",
                &x.name,
                "role=sink",
                &format!("tier={tier}"),
            ],
        );
    }
    apply_yaml(
        &m[0],
        &sink_rule("weighted", "web")
            .kind("apps", "v1", "Deployment")
            .mutations(json!({"overrides": [{
                "type": "replace",
                "path": "/metadata/labels/shard",
                "value": "{{ .Placement.index }}-of-{{ .Placement.count }}",
            }]}))
            .spec(
                "placement",
                json!({
                    "clusters": 3,
                    "prefer": [
                        {"weight": 50, "clusterSelector": {"matchLabels": {"tier": "gold"}}},
                        {"weight": 30, "clusterSelector": {"matchLabels": {"tier": "silver"}}},
                        {"weight": 20, "clusterSelector": {"matchLabels": {"tier": "bronze"}}},
                    ],
                    "failover": failover(3, "Never"),
                    "replicas": {"path": "/spec/replicas", "divide": "Weighted"},
                }),
            )
            .yaml(),
    );
    apply_yaml(
        &m[0],
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {name: api, namespace: web, labels: {app: api}}
spec:
  replicas: 10
  selector: {matchLabels: {app: api}}
  template:
    metadata: {labels: {app: api}}
    spec: {containers: [{name: api, image: registry.example/api:1}]}
"#,
    );
    let sinks: Vec<&Member> = m[1..].iter().collect();
    let first = wait_for("5/3/2 replicas on gold/silver/bronze", CONVERGE, || async {
        let got = shares(&sinks).await;
        let counts: Vec<(&str, i64)> = got.iter().map(|(c, n, _)| (c.as_str(), *n)).collect();
        if counts == [("c1", 5), ("c2", 3), ("c3", 2)] {
            Ok(got)
        } else {
            Err(format!("shares {counts:?}"))
        }
    })
    .await;
    // Templates read `.Placement`: each copy knows its place among the chosen.
    let labelled: Vec<(String, String)> = shards(&sinks)
        .await
        .into_iter()
        .map(|(c, _, _, shard)| (c, shard))
        .collect();
    assert_eq!(
        labelled,
        [("c1", "0-of-3"), ("c2", "1-of-3"), ("c3", "2-of-3")]
            .map(|(c, s)| (c.to_owned(), s.to_owned())),
    );
    drop(sinks);

    // Every agent restarts; once each says its sync is settled, no copy was
    // written again and the shares are the same.
    for x in m.iter_mut() {
        x.agent.restart().unwrap();
    }
    for x in &m {
        wait_settled(x, CONVERGE).await;
    }
    let sinks: Vec<&Member> = m[1..].iter().collect();
    assert_eq!(
        shares(&sinks).await,
        first,
        "a restart rewrote a copy or moved a share"
    );
    drop(sinks);
    let r = common::sync::rule(&m[0], "weighted")
        .await
        .unwrap()
        .unwrap();
    let satisfied = rule_condition(&r, "PlacementDegraded").map(|c| c.status.clone());
    assert_eq!(satisfied.as_deref(), Some("False"), "{}", rule_summary(&r));

    // c3 dies: the two left share all 10 (by their weights 50/30).
    let dead = m.iter().position(|x| x.name == "c3").unwrap();
    m[dead].agent.kill9();
    m[dead].cluster.kill9();
    let living: Vec<&Member> = m[1..3].iter().collect();
    wait_for(
        "the two living sinks share 10 replicas",
        CONVERGE,
        || async {
            let got = shards(&living).await;
            let counts: Vec<(&str, i64)> =
                got.iter().map(|(c, n, _, _)| (c.as_str(), *n)).collect();
            let labels: Vec<&str> = got.iter().map(|(_, _, _, s)| s.as_str()).collect();
            if counts.len() == 2
                && counts.iter().map(|(_, n)| n).sum::<i64>() == 10
                && counts[0].1 > counts[1].1
                && labels == ["0-of-2", "1-of-2"]
            {
                Ok(())
            } else {
                Err(format!("shares {counts:?}, shards {labels:?}"))
            }
        },
    )
    .await;
    // Three asked, two left: placed best-effort, and the rule says so.
    wait_rule(
        &m[0],
        "weighted",
        "PlacementDegraded True",
        |r| match rule_condition(r, "PlacementDegraded") {
            Some(c)
                if c.status == "True"
                    && c.reason == "BestEffort"
                    && c.message.contains("web/api") =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        },
    )
    .await;
}

/// The holders of `web/<name>` among `sinks`, for the rule `placed`.
async fn holders_of(sinks: &[&Member], name: &str) -> BTreeSet<String> {
    holders_by(sinks, name, "placed").await
}

/// Creates ConfigMap `ns/name` on `m` (one key).
fn create_cm(m: &Member, ns: &str, name: &str) {
    apply_yaml(
        m,
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{v: \"1\"}}\n"),
    );
}

/// The sinks holding rule `rule`'s copy of web/`name`.
async fn holders_by(sinks: &[&Member], name: &str, rule: &str) -> BTreeSet<String> {
    holders_in(sinks, &config_maps(), ("web", name), rule).await
}

/// The sinks holding rule `rule`'s copy of `ns/name`, of the kind `ar`.
async fn holders_in(
    sinks: &[&Member],
    ar: &kube::api::ApiResource,
    (ns, name): (&str, &str),
    rule: &str,
) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for m in sinks {
        if let Ok(Some(o)) = get_dynamic(m, ar, Some(ns), name).await {
            if check_copy(&o, "hub", rule).is_ok() {
                out.insert(m.name.clone());
            }
        }
    }
    out
}

/// `fleetbus clusters cordon` (a NoSchedule taint): objects created after it
/// are placed elsewhere; the copy the cordoned cluster already holds stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cordoned_cluster_gets_no_new_placements_and_keeps_what_it_holds() {
    let nats = fleetbus_testsupport::NatsServer::start().unwrap();
    let m = hub_and_sinks(&nats).await;
    apply_yaml(&m[0], &placed(3, "Never"));
    create_cm(&m[0], "web", "app");
    let sinks: Vec<&Member> = m[1..].iter().collect();
    let first = wait_two(&sinks, "2 of 3 sinks hold web/app", |_| true).await;
    let cordoned = first.iter().next().unwrap().clone();
    let (code, out, err) = fleetbus_cli(&nats, &["clusters", "cordon", &cordoned]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    // Shown on the Cluster object at the hub before anything is created.
    wait_for(
        "the cordon on the hub's Cluster object",
        CONVERGE,
        || async {
            let shown = kubectl(
                &m[0],
                &[
                    "get",
                    "clusters.fleetbus.io",
                    &cordoned,
                    "-o",
                    "jsonpath={.status.taints}",
                ],
            );
            if shown.contains("fleetbus.io/cordoned") {
                Ok(())
            } else {
                Err(format!("taints {shown:?}"))
            }
        },
    )
    .await;
    for i in 0..4 {
        create_cm(&m[0], "web", &format!("new{i}"));
    }
    wait_for(
        "every new object on the 2 uncordoned sinks",
        CONVERGE,
        || async {
            for i in 0..4 {
                let h = holders_of(&sinks, &format!("new{i}")).await;
                if h.len() != 2 || h.contains(&cordoned) {
                    return Err(format!("new{i} on {h:?}"));
                }
            }
            Ok(())
        },
    )
    .await;
    // NoSchedule moves nothing: the copy it held is still there, still chosen.
    assert_eq!(
        holders_of(&sinks, "app").await,
        first,
        "a NoSchedule taint moved a copy"
    );
}

/// `failback: Immediate`: a chosen cluster that dies is replaced, and once it
/// is back and Ready the choice returns to it and the replacement's copy goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failback_immediate_moves_the_copy_back_when_the_cluster_returns() {
    let nats = fleetbus_testsupport::NatsServer::start().unwrap();
    let mut m = hub_and_sinks(&nats).await;
    apply_yaml(&m[0], &placed(3, "Immediate"));
    create_cm(&m[0], "web", "app");
    let first = {
        let sinks: Vec<&Member> = m[1..].iter().collect();
        wait_two(&sinks, "2 of 3 sinks hold web/app", |_| true).await
    };
    let dead = first.iter().next().unwrap().clone();
    let i = m.iter().position(|x| x.name == dead).unwrap();
    m[i].agent.kill9();
    m[i].cluster.kill9();
    {
        let living: Vec<&Member> = m[1..].iter().filter(|x| x.name != dead).collect();
        wait_for("a replacement copy", CONVERGE, || async {
            let h = holders(&living).await;
            if h.len() == 2 {
                Ok(())
            } else {
                Err(format!("holders among the living {h:?}"))
            }
        })
        .await;
    }
    m[i].cluster.restart().unwrap();
    m[i].agent.spawn().unwrap();
    let sinks: Vec<&Member> = m[1..].iter().collect();
    let back = wait_two(
        &sinks,
        "the copy back on the returned cluster, the replacement's gone",
        |h| *h == first,
    )
    .await;
    assert!(back.contains(&dead));
}

/// Five sinks in three regions: `clusters: 2` with a region spread puts each
/// of 20 objects on 2 clusters in 2 regions, spread over the five (no
/// cluster holds more than twice its share); a second rule preferring the
/// gold cluster puts every one of its objects there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_objects_spread_over_five_clusters_in_regions_and_gold_is_preferred() {
    let nats = fleetbus_testsupport::NatsServer::start().unwrap();
    let names = ["hub", "c1", "c2", "c3", "c4", "c5"];
    let m = fleet(&nats, &names).await;
    let region = |c: &str| match c {
        "c1" | "c2" => "eu",
        "c3" | "c4" => "us",
        _ => "ap",
    };
    for x in &m {
        create_ns(x, "web").await;
        create_ns(x, "gold").await;
    }
    for x in &m[1..] {
        let mut labels = vec![
            "role=sink".to_owned(),
            format!("topology.fleetbus.io/region={}", region(&x.name)),
        ];
        if x.name == "c5" {
            labels.push("tier=gold".into());
        }
        let mut args = vec!["label", "clusters.fleetbus.io", x.name.as_str()];
        args.extend(labels.iter().map(String::as_str));
        kubectl(x, &args);
    }
    let spread = json!({
        "clusters": 2,
        "spread": [{"topologyKey": "topology.fleetbus.io/region", "maxSkew": 1}],
    });
    let mut gilded = spread.clone();
    gilded["prefer"] =
        json!([{"weight": 50, "clusterSelector": {"matchLabels": {"tier": "gold"}}}]);
    apply_yaml(
        &m[0],
        &sink_rule("spread", "web").spec("placement", spread).yaml(),
    );
    apply_yaml(
        &m[0],
        &sink_rule("gilded", "gold").spec("placement", gilded).yaml(),
    );
    for i in 0..20 {
        create_cm(&m[0], "web", &format!("o{i}"));
    }
    for i in 0..4 {
        create_cm(&m[0], "gold", &format!("g{i}"));
    }
    let sinks: Vec<&Member> = m[1..].iter().collect();
    let per_object = |ns: &'static str, rule: &'static str, prefix: &'static str, n: usize| {
        let sinks = &sinks;
        async move {
            let mut out: Vec<BTreeSet<String>> = Vec::with_capacity(n);
            for i in 0..n {
                let name = format!("{prefix}{i}");
                out.push(holders_in(sinks, &config_maps(), (ns, &name), rule).await);
            }
            out
        }
    };
    let placed = wait_for(
        "20 objects on 2 clusters in 2 regions each",
        CONVERGE,
        || async {
            let held = per_object("web", "spread", "o", 20).await;
            for (i, h) in held.iter().enumerate() {
                let regions: BTreeSet<&str> = h.iter().map(|c| region(c)).collect();
                if h.len() != 2 || regions.len() != 2 {
                    return Err(format!("o{i} on {h:?}"));
                }
            }
            Ok(held)
        },
    )
    .await;
    let mut load: std::collections::BTreeMap<&str, usize> =
        names[1..].iter().map(|n| (*n, 0)).collect();
    for h in &placed {
        for c in h {
            *load.get_mut(c.as_str()).unwrap() += 1;
        }
    }
    eprintln!("distribution of 40 copies over 5 clusters: {load:?}");
    // 40 copies over 5 clusters: a share of 8.
    assert!(load.values().all(|n| *n <= 16), "{load:?}");
    assert!(load.values().filter(|n| **n > 0).count() >= 4, "{load:?}");
    wait_for(
        "every gold object on c5 and in 2 regions",
        CONVERGE,
        || async {
            let held = per_object("gold", "gilded", "g", 4).await;
            for (i, h) in held.iter().enumerate() {
                let regions: BTreeSet<&str> = h.iter().map(|c| region(c)).collect();
                if h.len() != 2 || !h.contains("c5") || regions.len() != 2 {
                    return Err(format!("g{i} on {h:?}"));
                }
            }
            Ok(())
        },
    )
    .await;
}

/// What each sink's preview reply says it deletes (names), and how many
/// objects it says are placed on other clusters.
fn preview_says(out: &str) -> Vec<(String, BTreeSet<String>, u64)> {
    let v: serde_json::Value = serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let mut said: Vec<(String, BTreeSet<String>, u64)> = v["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["cluster"].as_str().is_some_and(|c| c.starts_with('c')))
        .map(|r| {
            assert_eq!(r["creates"], serde_json::json!([]), "{r:#}");
            let deletes = r["deletes"].as_array().unwrap().iter();
            let names = deletes
                .map(|d| d["object"]["name"].as_str().unwrap().to_owned())
                .collect();
            let elsewhere = r["placedElsewhere"].as_u64().unwrap_or(0);
            (r["cluster"].as_str().unwrap().to_owned(), names, elsewhere)
        })
        .collect();
    said.sort();
    said
}

/// Turning placement on for a rule that copies 3 ConfigMaps to all three
/// sinks: `rules preview` says, on each sink, which copies go (each object
/// leaves exactly one sink) and how many are placed elsewhere; applied, the
/// copies go exactly where it said. Previewed again unchanged, nothing goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn preview_shows_which_copies_turning_placement_on_removes() {
    let nats = fleetbus_testsupport::NatsServer::start().unwrap();
    let m = hub_and_sinks(&nats).await;
    let spread = sink_rule("spread", "web");
    apply_yaml(&m[0], &spread.yaml());
    let names = ["one", "two", "three"];
    for n in names {
        let cm = format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {n}, namespace: web}}\ndata: {{v: \"1\"}}\n");
        apply_yaml(&m[0], &cm);
    }
    let sinks: Vec<&Member> = m[1..].iter().collect();
    for n in names {
        wait_for(&format!("{n} on every sink"), CONVERGE, || async {
            let h = holders_by(&sinks, n, "spread").await;
            (h.len() == 3).then_some(()).ok_or(format!("{h:?}"))
        })
        .await;
    }
    let placed = spread
        .clone()
        .spec("placement", json!({"clusters": 2}))
        .yaml();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("spread.yaml");
    std::fs::write(&file, &placed).unwrap();
    let args = [
        "rules",
        "preview",
        "-f",
        file.to_str().unwrap(),
        "-o",
        "json",
    ];
    // Exit 1 as `kubectl diff`: changes to come.
    let (code, out, err) = fleetbus_cli(&nats, &args).await;
    assert_eq!(code, Some(1), "{out}{err}");
    let said = preview_says(&out);
    let gone: Vec<&String> = said.iter().flat_map(|(_, d, _)| d).collect();
    assert_eq!(gone.len(), 3, "each object leaves one sink: {said:?}");
    for n in names {
        assert_eq!(
            gone.iter().filter(|g| g.as_str() == n).count(),
            1,
            "{said:?}"
        );
    }
    let elsewhere: u64 = said.iter().map(|(_, _, e)| e).sum();
    assert_eq!(elsewhere, 3, "{said:?}");

    apply_yaml(&m[0], &placed);
    for (cluster, deleted, _) in &said {
        for n in names {
            let want = !deleted.contains(n);
            let what = format!("{n} on {cluster}: {want}");
            wait_for(&what, CONVERGE, || async {
                let has = holders_by(&sinks, n, "spread").await.contains(cluster);
                (has == want)
                    .then_some(())
                    .ok_or(format!("holders of {n}: {has}"))
            })
            .await;
        }
    }
    let (code, out, err) = fleetbus_cli(&nats, &args).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let again = preview_says(&out);
    assert!(again.iter().all(|(_, d, _)| d.is_empty()), "{again:?}");
    assert_eq!(again.iter().map(|(_, _, e)| e).sum::<u64>(), 3, "{again:?}");

    // The same placement over one cluster fewer: the record on the bus was
    // decided over all three sinks, so it no longer answers; the copies of
    // the cluster left out (one holding at least two) move, each to the
    // sink that had none.
    let (left_out, not_held, _) = said.iter().min_by_key(|(_, d, _)| d.len()).unwrap();
    for x in &m[1..] {
        if &x.name != left_out {
            kubectl(x, &["label", "clusters.fleetbus.io", &x.name, "keep=yes"]);
        }
    }
    let narrower = spread
        .sinks(&[("role", "sink"), ("keep", "yes")])
        .spec("placement", json!({"clusters": 2}))
        .yaml();
    assert_ne!(narrower, placed);
    std::fs::write(&file, &narrower).unwrap();
    let moved: BTreeSet<String> = names
        .into_iter()
        .filter(|n| !not_held.contains(*n))
        .map(str::to_owned)
        .collect();
    let mut want = std::collections::BTreeMap::new();
    want.insert(left_out.clone(), (BTreeSet::new(), moved.clone()));
    for (cluster, deleted, _) in said.iter().filter(|(c, _, _)| c != left_out) {
        let gets = moved.iter().filter(|n| deleted.contains(*n)).cloned();
        want.insert(cluster.clone(), (gets.collect(), BTreeSet::new()));
    }
    wait_for(
        "a preview that moves the left-out copies",
        CONVERGE,
        || async {
            let (_, out, err) = fleetbus_cli(&nats, &args).await;
            let got = preview_changes(&out);
            (got == want).then_some(()).ok_or(format!("{got:?}{err}"))
        },
    )
    .await;
}

/// What each sink's preview reply says it creates and deletes (names).
fn preview_changes(
    out: &str,
) -> std::collections::BTreeMap<String, (BTreeSet<String>, BTreeSet<String>)> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(out) else {
        return Default::default();
    };
    let names = |r: &serde_json::Value, field: &str| -> BTreeSet<String> {
        let all = r[field].as_array().into_iter().flatten();
        all.filter_map(|d| Some(d["object"]["name"].as_str()?.to_owned()))
            .collect()
    };
    v["clusters"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r["cluster"].as_str()?, r)))
        .filter(|(c, _)| c.starts_with('c'))
        .map(|(c, r)| (c.to_owned(), (names(r, "creates"), names(r, "deletes"))))
        .collect()
}

/// Fitness: a sink whose SyncPolicy refuses the copies is not chosen, and
/// one chosen before its policy changed is replaced at once (long before
/// `afterSeconds`: nothing failed); `rules describe` says why. A rule whose
/// `dependsOn` has placement lands where its dependency is, not on a
/// cluster where it would wait for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_sink_is_not_chosen_and_a_dependent_follows_its_dependency() {
    let nats = fleetbus_testsupport::NatsServer::start().unwrap();
    let m = hub_and_sinks(&nats).await;
    let sinks: Vec<&Member> = m[1..].iter().collect();
    // A failover window far longer than the test: only fitness can move copies.
    apply_yaml(&m[0], &placed(3600, "Never"));
    let names: Vec<String> = (0..6).map(|i| format!("o{i}")).collect();
    for n in &names {
        create_cm(&m[0], "web", n);
    }
    let every_on_two = |avoid: Option<String>| {
        let (sinks, names) = (&sinks, &names);
        move || {
            let avoid = avoid.clone();
            async move {
                let mut on = Vec::new();
                for n in names {
                    let h = holders_of(sinks, n).await;
                    if h.len() != 2 || avoid.as_ref().is_some_and(|a| h.contains(a)) {
                        return Err(format!("{n} on {h:?}"));
                    }
                    on.push(h);
                }
                Ok(on)
            }
        }
    };
    let before = wait_for("every object on 2 sinks", CONVERGE, every_on_two(None)).await;
    // The sink chosen most often refuses the namespace from now on.
    let refuser = ["c1", "c2", "c3"]
        .into_iter()
        .max_by_key(|c| before.iter().filter(|h| h.contains(*c)).count())
        .unwrap()
        .to_owned();
    let r = m.iter().find(|x| x.name == refuser).unwrap();
    apply_policy(
        r,
        r#"apiVersion: fleetbus.io/v1alpha1
kind: SyncPolicy
metadata: {name: default}
spec:
  import:
    rules:
      - {action: Deny, kinds: [{kind: ConfigMap}], namespaces: [web]}
    otherwise: Allow
"#,
        "True",
    )
    .await;
    wait_for(
        "every object on the 2 sinks that accept it",
        CONVERGE,
        every_on_two(Some(refuser.clone())),
    )
    .await;
    let (code, out, err) = fleetbus_cli(&nats, &["rules", "describe", "placed"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("cannot hold the copy") && out.contains("SyncPolicy"),
        "describe names the refusal:\n{out}"
    );

    // dependsOn: `app` waits for `config` on each sink; `config` places its
    // one object on one cluster, so every `app` object must go there.
    for x in &m {
        create_ns(x, "deps").await;
        create_ns(x, "apps").await;
    }
    apply_yaml(
        &m[0],
        &stream(&[
            sink_rule("config", "deps").spec("placement", json!({"clusters": 1})),
            sink_rule("app", "apps")
                .spec("dependsOn", json!(["config"]))
                .spec("placement", json!({"clusters": 1})),
        ]),
    );
    create_cm(&m[0], "deps", "settings");
    for i in 0..5 {
        create_cm(&m[0], "apps", &format!("a{i}"));
    }
    let at = |ns: &'static str, name: String, rule: &'static str| {
        let sinks = &sinks;
        async move { holders_in(sinks, &config_maps(), (ns, &name), rule).await }
    };
    let home = wait_for(
        "config's object and every app object on one sink",
        CONVERGE,
        || async {
            let config = at("deps", "settings".into(), "config").await;
            if config.len() != 1 {
                return Err(format!("config on {config:?}"));
            }
            for i in 0..5 {
                let app = at("apps", format!("a{i}"), "app").await;
                if app != config {
                    return Err(format!("a{i} on {app:?}, config on {config:?}"));
                }
            }
            Ok(config)
        },
    )
    .await;
    let (code, out, err) = fleetbus_cli(&nats, &["rules", "describe", "app"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("dependsOn: rule config places nothing here"),
        "describe says why the others were passed over (config on {home:?}):\n{out}"
    );

    // A sink that does not serve the kind (no CRD there) is not chosen.
    let bare = "c2";
    for x in m.iter().filter(|x| x.name != bare) {
        install_crd(x, "Widget", "widgets").await;
    }
    apply_yaml(
        &m[0],
        &sink_rule("widgets", "web")
            .kind("example.com", "v1", "Widget")
            .spec("placement", json!({"clusters": 2}))
            .yaml(),
    );
    for i in 0..4 {
        apply_yaml(
            &m[0],
            &format!("apiVersion: example.com/v1\nkind: Widget\nmetadata: {{name: w{i}, namespace: web}}\nspec: {{size: {i}}}\n"),
        );
    }
    let widgets = resource("example.com", "v1", "Widget", "widgets");
    wait_for(
        "every Widget on the 2 sinks that serve it",
        CONVERGE,
        || async {
            for i in 0..4 {
                let on = holders_in(&sinks, &widgets, ("web", &format!("w{i}")), "widgets").await;
                if on.len() != 2 || on.contains(bare) {
                    return Err(format!("w{i} on {on:?}"));
                }
            }
            Ok(())
        },
    )
    .await;
    let (code, out, err) = fleetbus_cli(&nats, &["rules", "describe", "widgets"]).await;
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("does not serve example.com/v1/Widget"),
        "describe says why {bare} was passed over:\n{out}"
    );
}

/// Turning placement on (2 of 3) for a rule whose 10 objects are on all
/// three sinks removes 10 copies in steps, never all at once: a plain NATS
/// subscriber sees each release in the origin's records (`lastRelease`),
/// and no 5 s holds more than a quarter of the rule's units (3), while the
/// releases go on step after step until the sinks hold two copies each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turning_placement_on_removes_copies_in_steps() {
    let nats = fleetbus_testsupport::NatsServer::start().unwrap();
    let m = hub_and_sinks(&nats).await;
    let sinks: Vec<&Member> = m[1..].iter().collect();
    let everywhere = sink_rule("placed", "web");
    apply_yaml(&m[0], &everywhere.yaml());
    let names: Vec<String> = (0..10).map(|i| format!("s{i}")).collect();
    for n in &names {
        create_cm(&m[0], "web", n);
    }
    let copies = || async {
        let mut n = 0;
        for name in &names {
            n += holders_of(&sinks, name).await.len();
        }
        n
    };
    wait_for("30 copies", CONVERGE, || async {
        let n = copies().await;
        (n == 30).then_some(()).ok_or(format!("{n} copies"))
    })
    .await;
    let client = async_nats::connect(nats.url()).await.unwrap();
    let mut records = client.subscribe("fleetbus.placement.hub.>").await.unwrap();
    apply_yaml(
        &m[0],
        &everywhere.spec("placement", json!({"clusters": 2})).yaml(),
    );
    // Each release is a record whose lastRelease moved.
    let mut last: std::collections::BTreeMap<String, String> = Default::default();
    let mut releases: Vec<chrono::DateTime<chrono::Utc>> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    while releases.len() < 10 {
        let msg = tokio::time::timeout_at(deadline, futures::StreamExt::next(&mut records))
            .await
            .unwrap_or_else(|_| panic!("only {} releases seen: {releases:?}", releases.len()))
            .unwrap();
        let rec = fleetbus_schemas::placement::PlacementRecord::decode(&msg.payload).unwrap();
        let Some(at) = rec.last_release else { continue };
        if last.insert(msg.subject.to_string(), at.to_rfc3339()) != Some(at.to_rfc3339()) {
            releases.push(at);
        }
    }
    releases.sort();
    for (i, t) in releases.iter().enumerate() {
        let within = releases[i..]
            .iter()
            .take_while(|u| **u - *t < chrono::Duration::seconds(5))
            .count();
        assert!(
            within <= 3,
            "{within} releases within 5 s of {t}: {releases:?}"
        );
    }
    wait_for("two copies of each object", CONVERGE, || async {
        let n = copies().await;
        (n == 20).then_some(()).ok_or(format!("{n} copies"))
    })
    .await;
}
