//! Progressive rollouts (`spec.rollout`), with real agents and
//! devclusters driven by kubectl as users do: five clusters, a canary group,
//! `maxUnavailable: 1`, `minReadySeconds`; the Deployment controller played
//! with `kubectl patch --subresource=status`. A cluster gets a new version
//! only once the one before runs it healthily for minReadySeconds; an origin
//! killed mid-rollout continues where it was; a copy that never becomes
//! healthy pauses the rollout with the reason in its record.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::sync::*;
use fleetbus_testsupport::{wait_for, Member, NatsServer};
use serde_json::{json, Value};

/// minReadySeconds of the rule.
const MIN_READY: Duration = Duration::from_secs(2);

/// The README tour's example rule (`deploy/examples/hub-rollout.yaml`):
/// minReadySeconds 2, progressDeadlineSeconds 12, a canary group.
fn rule() -> String {
    std::fs::read_to_string(
        fleetbus_testsupport::repo_root().join("deploy/examples/hub-rollout.yaml"),
    )
    .unwrap()
}

fn deployment(image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: web}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{containers: [{{name: web, image: "{image}"}}]}}
"#
    )
}

fn deployments() -> kube::api::ApiResource {
    resource("apps", "v1", "Deployment", "deployments")
}

/// The image of `m`'s copy, None without a copy.
async fn image(m: &Member) -> Option<String> {
    let o = get_dynamic(m, &deployments(), Some("web"), "web")
        .await
        .ok()??;
    o.data
        .pointer("/spec/template/spec/containers/0/image")
        .and_then(Value::as_str)
        .map(str::to_owned)
}

/// The image each sink runs ("-" without a copy).
async fn images(sinks: &[&Member]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for m in sinks {
        out.insert(m.name.clone(), image(m).await.unwrap_or_else(|| "-".into()));
    }
    out
}

/// Plays the Deployment controller on `m`: its copy rolled out.
async fn healthy(m: &Member) {
    let o = get_dynamic(m, &deployments(), Some("web"), "web")
        .await
        .unwrap()
        .expect("a copy");
    let generation = o.metadata.generation.unwrap_or(1);
    let status = json!({"status": {"observedGeneration": generation, "replicas": 1,
        "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
        "conditions": [{"type": "Available", "status": "True"}]}})
    .to_string();
    patch_status(m, &status);
}

/// `kubectl patch --subresource=status` of `m`'s copy with `status` (JSON).
fn patch_status(m: &Member, status: &str) {
    kubectl(
        m,
        &[
            "-n",
            "web",
            "patch",
            "deployment",
            "web",
            "--subresource=status",
            "--type=merge",
            "-p",
            status,
        ],
    );
}

/// hub's rollout record of web/web, as on the bus.
async fn record(nats: &NatsServer) -> Option<Value> {
    let js = async_nats::jetstream::new(async_nats::connect(nats.url()).await.ok()?);
    let stream = js.get_stream("FLEETBUS_ROLLOUTS").await.ok()?;
    let msg = stream
        .get_last_raw_message_by_subject(
            "fleetbus.rollout.hub.web-rollout.apps.v1.Deployment.web.web",
        )
        .await
        .ok()?;
    serde_json::from_slice(&msg.payload).ok()
}

async fn wait_record<P>(nats: &NatsServer, what: &str, pred: P) -> Value
where
    P: Fn(&Value) -> bool,
{
    wait_for(what, CONVERGE, || async {
        match record(nats).await {
            Some(r) if pred(&r) => Ok(r),
            other => Err(format!("{other:?}")),
        }
    })
    .await
}

const CONVERGE: Duration = Duration::from_secs(40);

/// Waits until exactly the clusters of `want` run `image` (the others
/// something else), and returns when that was seen.
async fn wait_images(sinks: &[&Member], want: &[&str], image: &str) -> Instant {
    wait_for(&format!("{want:?} on {image}"), CONVERGE, || async {
        let now = images(sinks).await;
        let on: Vec<&str> = now
            .iter()
            .filter(|(_, i)| i.as_str() == image)
            .map(|(c, _)| c.as_str())
            .collect();
        if on == want {
            Ok(Instant::now())
        } else {
            Err(format!("{now:?}"))
        }
    })
    .await
}

/// Rolls `image` out one cluster at a time in `order`, playing the
/// controller on each as it gets the version, and checks that the next one
/// waits for minReadySeconds after the last became healthy and that no
/// other cluster gets it early.
async fn roll(sinks: &[&Member], order: &[&str], image: &str) {
    let mut done: Vec<&str> = Vec::new();
    let mut healthy_at: Option<Instant> = None;
    for next in order {
        let mut want = done.clone();
        want.push(next);
        want.sort();
        let seen = wait_images(sinks, &want, image).await;
        if let Some(t) = healthy_at {
            assert!(
                seen.duration_since(t) >= MIN_READY - Duration::from_millis(200),
                "{next} got {image} {:?} after the last was healthy",
                seen.duration_since(t)
            );
        }
        let m = sinks.iter().find(|m| m.name == *next).unwrap();
        healthy(m).await;
        healthy_at = Some(Instant::now());
        done.push(next);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_version_reaches_one_cluster_at_a_time_canary_first() {
    let nats = NatsServer::start().unwrap();
    let mut m = fleet(&nats, &["hub", "c1", "c2", "c3", "c4"]).await;
    for x in &m {
        create_ns(x, "web").await;
    }
    kubectl(
        &m[3],
        &["label", "clusters.fleetbus.io", "c3", "tier=canary"],
    );
    apply_yaml(&m[0], &deployment("web:v1"));
    apply_yaml(&m[0], &rule());
    let order = ["c3", "c1", "c2", "c4"];
    {
        let sinks: Vec<&Member> = m[1..].iter().collect();
        // The first version too: canary first, then the rest by name.
        roll(&sinks, &order, "web:v1").await;
        let r = wait_record(&nats, "v1 complete", |r| r["phase"] == "Complete").await;
        assert_eq!(r["revision"], 1, "{r}");

        // A new version: c3, then c1.
        kubectl(
            &m[0],
            &["-n", "web", "set", "image", "deployment/web", "web=web:v2"],
        );
        roll(&sinks, &order[..2], "web:v2").await;
        let r = wait_record(&nats, "c2 admitted", |r| {
            r["admitted"].to_string().contains("c2")
        })
        .await;
        assert_eq!(r["revision"], 2, "{r}");
    }

    // The origin dies with c2 admitted; c2 gets healthy meanwhile. Nothing
    // more is admitted while it is away, and nothing is lost.
    m[0].agent.kill9();
    let sinks: Vec<&Member> = m[1..].iter().collect();
    wait_images(&sinks, &["c1", "c2", "c3"], "web:v2").await;
    healthy(sinks[1]).await;
    let away = Instant::now();
    while away.elapsed() < MIN_READY * 2 + Duration::from_secs(2) {
        let now = images(&sinks).await;
        assert_eq!(now["c4"], "web:v1", "admitted with no origin: {now:?}");
        assert_eq!(now.values().filter(|i| *i == "-").count(), 0, "{now:?}");
        // Sampling a window in which nothing may happen: there is no
        // condition to wait for, only a pace for looking again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    drop(sinks);
    m[0].agent.spawn().unwrap();
    let sinks: Vec<&Member> = m[1..].iter().collect();
    // It continues where it was: c4, the last, after minReadySeconds.
    wait_images(&sinks, &["c1", "c2", "c3", "c4"], "web:v2").await;
    let r = wait_record(&nats, "c4 admitted", |r| {
        r["admitted"].to_string().contains("c4")
    })
    .await;
    assert_eq!(r["revision"], 2, "no new revision after the restart: {r}");
    healthy(sinks[3]).await;
    wait_record(&nats, "v2 complete", |r| r["phase"] == "Complete").await;

    // A copy that never becomes healthy pauses the rollout, saying why.
    kubectl(
        &m[0],
        &["-n", "web", "set", "image", "deployment/web", "web=web:v3"],
    );
    wait_images(&sinks, &["c3"], "web:v3").await;
    let r = wait_record(&nats, "paused by the failed canary", |r| {
        r["phase"] == "Paused"
    })
    .await;
    assert_eq!(r["pausedBy"], "failure", "{r}");
    assert_eq!(r["reason"], "Failed", "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("c3: not healthy within 12s"),
        "{r}"
    );
    assert_eq!(
        images(&sinks)
            .await
            .values()
            .filter(|i| *i == "web:v2")
            .count(),
        3
    );

    // Shown where operators look: the rule's status on the origin, describe.
    wait_rule(&m[0], "web-rollout", "RolloutPaused", |r| {
        let summary = r.status.as_ref().and_then(|s| s.rollouts.first());
        match (rule_condition(r, "RolloutPaused"), summary) {
            (Some(c), Some(s))
                if c.status == "True"
                    && c.message.contains("Deployment web/web")
                    && c.message.contains("c3: not healthy within 12s")
                    && s.phase == "Paused"
                    && s.revision == 3 =>
            {
                Ok(())
            }
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let (code, out, err) = common::fleetbus_cli(&nats, &["rules", "describe", "web-rollout"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("Rollouts:\n  Deployment web/web from hub: Paused (revision 3, step 1/2)")
            && out.contains("failed: c3: not healthy within 12s"),
        "{out}"
    );

    // Fixed and resumed by the operator: the next cluster takes v3.
    healthy(sinks[2]).await;
    let (code, out, err) =
        common::fleetbus_cli(&nats, &["rules", "rollout", "resume", "web-rollout"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("hub: changed apps/v1/Deployment/web/web"),
        "{out}"
    );
    wait_images(&sinks, &["c1", "c3"], "web:v3").await;
    // Paused by the operator: c1 healthy, nothing more is admitted.
    let (code, out, err) = common::fleetbus_cli(
        &nats,
        &[
            "rules",
            "rollout",
            "pause",
            "web-rollout",
            "--object",
            "Deployment/web/web",
        ],
    )
    .await;
    assert_eq!(code, Some(0), "{out}{err}");
    healthy(sinks[0]).await;
    let r = wait_record(&nats, "paused by the operator", |r| {
        r["pausedBy"] == "operator"
    })
    .await;
    assert_eq!(r["reason"], "Paused", "{r}");
    let held = Instant::now();
    while held.elapsed() < MIN_READY + Duration::from_secs(2) {
        assert_eq!(image(sinks[1]).await.as_deref(), Some("web:v2"));
        // Sampling a window in which nothing may happen: there is no
        // condition to wait for, only a pace for looking again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Rolled back: every cluster on v2 again, the source ahead.
    let (code, out, err) =
        common::fleetbus_cli(&nats, &["rules", "rollout", "rollback", "web-rollout"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    wait_images(&sinks, &["c1", "c2", "c3", "c4"], "web:v2").await;
    let r = wait_record(&nats, "rolled back", |r| r["phase"] == "RolledBack").await;
    assert!(
        r["message"].as_str().unwrap().contains("roll forward"),
        "{r}"
    );

    // Aborted: the canary keeps the version it took, nobody else gets it,
    // even once the canary is healthy; a newer version starts over. First
    // the controller rolls c1 and c3 back (their copies changed: not
    // Current until then, and they would count as unavailable).
    healthy(sinks[0]).await;
    healthy(sinks[2]).await;
    kubectl(
        &m[0],
        &["-n", "web", "set", "image", "deployment/web", "web=web:v4"],
    );
    wait_images(&sinks, &["c3"], "web:v4").await;
    let (code, out, err) =
        common::fleetbus_cli(&nats, &["rules", "rollout", "abort", "web-rollout"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    let r = wait_record(&nats, "aborted", |r| r["phase"] == "Aborted").await;
    assert_eq!(r["revision"], 4, "{r}");
    healthy(sinks[2]).await;
    let aborted = Instant::now();
    while aborted.elapsed() < MIN_READY + Duration::from_secs(2) {
        let now = images(&sinks).await;
        assert_eq!(now["c3"], "web:v4", "{now:?}");
        for c in ["c1", "c2", "c4"] {
            assert_eq!(now[c], "web:v2", "admitted after the abort: {now:?}");
        }
        // Sampling a window in which nothing may happen: there is no
        // condition to wait for, only a pace for looking again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    kubectl(
        &m[0],
        &["-n", "web", "set", "image", "deployment/web", "web=web:v5"],
    );
    wait_images(&sinks, &["c3"], "web:v5").await;
    let r = wait_record(&nats, "v5 progressing", |r| r["phase"] == "Progressing").await;
    assert_eq!(r["revision"], 5, "{r}");

    // Garbage, unknown rules and objects: refused, named, nothing changed.
    let pause_object =
        |o: &'static str| vec!["rules", "rollout", "pause", "web-rollout", "--object", o];
    for (args, want) in [
        (vec!["rules", "rollout", "explode", "web-rollout"], 2),
        (pause_object("a/b/c/d"), 2),
        (vec!["rules", "rollout", "pause", "nope"], 1),
        (pause_object("Deployment/web/nope"), 1),
    ] {
        let (code, out, err) = common::fleetbus_cli(&nats, &args).await;
        assert_eq!(code, Some(want), "{args:?}: {out}{err}");
    }
    // An agent asked directly about a rule it does not have says so.
    let client = async_nats::connect(nats.url()).await.unwrap();
    let req = br#"{"schema":"fleetbus.io/rollout-request/v1","rule":"nope","action":"Abort","object":null}"#;
    let reply = client
        .request("fleetbus.cmd.hub.rollout", req.as_slice().into())
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(
        reply["error"]
            .as_str()
            .unwrap()
            .contains("no rule \"nope\""),
        "{reply}"
    );
    let reply = client
        .request("fleetbus.cmd.hub.rollout", "{]".into())
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&reply.payload).unwrap();
    assert!(
        reply["error"].as_str().unwrap().contains("cannot read"),
        "{reply}"
    );
    // None of them stopped, aborted or rolled back v5's rollout.
    let r = record(&nats).await.unwrap();
    assert_eq!(r["revision"], 5, "{r}");
    assert!(r["pausedBy"] != "operator", "{r}");
    assert!(
        !["Aborted", "RolledBack"].contains(&r["phase"].as_str().unwrap()),
        "{r}"
    );
}

/// A rule's own CEL health decides when the next cluster is admitted: a
/// copy with one ready replica and no `Available` condition is InProgress to
/// kstatus, Current to this expression.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cel_health_expression_decides_the_rollout() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["hub", "c1", "c2"]).await;
    for x in &m {
        create_ns(x, "web").await;
    }
    let rule = rule().replace(
        "  rollout:\n",
        "  health:\n    current: \"object.?status.?readyReplicas.orValue(0) >= 1\"\n  rollout:\n",
    );
    assert!(rule.contains("readyReplicas"), "{rule}");
    apply_yaml(&m[0], &deployment("web:v1"));
    apply_yaml(&m[0], &rule);
    let sinks: Vec<&Member> = m[1..].iter().collect();
    wait_images(&sinks, &["c1"], "web:v1").await;
    // kstatus would call this copy InProgress (no Available condition): the
    // rollout waits as long as the expression says no.
    let patch = |ready: i64| json!({"status": {"readyReplicas": ready}}).to_string();
    let status = |m: &Member, ready: i64| patch_status(m, &patch(ready));
    status(sinks[0], 0);
    let held = Instant::now();
    while held.elapsed() < MIN_READY * 2 {
        assert_eq!(
            image(sinks[1]).await,
            None,
            "admitted before c1 was healthy"
        );
        // Sampling a window in which nothing may happen: there is no
        // condition to wait for, only a pace for looking again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    status(sinks[0], 1);
    wait_images(&sinks, &["c1", "c2"], "web:v1").await;
    status(sinks[1], 1);
    wait_record(&nats, "complete", |r| r["phase"] == "Complete").await;
}
