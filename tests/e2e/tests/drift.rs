//! Drift end to end: a user changes a copy on the sink cluster with
//! kubectl; the agent reports it on `fleetbus.drift.>` and corrects it (or
//! not, by policy). Real nats-server, devclusters and agent processes.
//!
//! The drift events are read by a PLAIN async-nats subscriber and parsed with
//! serde_json into `Value`s, never with the schemas crate's types: a client
//! that knows nothing of fleetbus can read them.
//!
//! Every test syncs the Deployment `a/web` (apps/v1) from c1 to c2 with a
//! rule created on c1. "Nothing happened" is only ever asserted after a later
//! change's event arrived first (events of one cluster arrive in order).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_testsupport::{cargo_bin, wait_for, NatsServer};
use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject};
use kube::ResourceExt;
use serde_json::{json, Value};

/// The desired image of `a/web`, and what users change it to.
const DESIRED: &str = "nginx:1";
const CHANGED: &str = "nginx:2";
const IMAGE: &str = "/spec/template/spec/containers/0/image";
/// The drift KV bucket and the key of `a/web` on c2.
const DRIFT_BUCKET: &str = "fleetbus-drift";
const WEB_KEY: &str = "c2.apps.Deployment.a.web";

fn deployments() -> ApiResource {
    resource("apps", "v1", "Deployment", "deployments")
}

/// A rule named `web` on c1 for the Deployments of namespace `a`, with `drift`
/// as the rule's drift policy (YAML flow map, `{}` for the default).
/// Deployments of `a`, with this `drift` policy.
fn rule_yaml(drift: Value) -> String {
    RuleBuilder::new("web")
        .kind("apps", "v1", "Deployment")
        .namespaces(&["a"])
        .spec("drift", drift)
        .yaml()
}

fn deployment_yaml(ns: &str, name: &str, image: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {ns}
spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
        - name: web
          image: {image}
"#
    )
}

/// The image of the first container.
fn image(o: &DynamicObject) -> Value {
    o.data
        .pointer("/spec/template/spec/containers/0/image")
        .cloned()
        .unwrap_or(Value::Null)
}

fn image_is(want: &'static str) -> impl Fn(&DynamicObject) -> Result<(), String> {
    move |o| match image(o) {
        v if v == want => Ok(()),
        other => Err(format!("image {other}, want {want}")),
    }
}

fn replicas(o: &DynamicObject) -> Value {
    o.data
        .pointer("/spec/replicas")
        .cloned()
        .unwrap_or(Value::Null)
}

/// A fleet c1, c2 with namespace `a`, the rule (`drift` policy) on c1 and the
/// Deployments `names` in `a` on c1, each arrived on c2 as a copy with the
/// desired image. The drift subscription is open before anything is synced.
struct Setup {
    nats: NatsServer,
    m: Vec<Member>,
    drift: async_nats::Subscriber,
}

impl Setup {
    async fn start(drift: Value, names: &[&str]) -> Setup {
        let nats = NatsServer::start().unwrap();
        let m = fleet(&nats, &["c1", "c2"]).await;
        let sub = subscribe_drift(&nats).await;
        for x in &m {
            create_ns(x, "a").await;
        }
        apply_yaml(&m[0], &rule_yaml(drift));
        wait_rule_copy(&m[1], "web", "c1").await;
        for n in names {
            apply_yaml(&m[0], &deployment_yaml("a", n, DESIRED));
        }
        for n in names {
            wait_copy(
                &m[1],
                &deployments(),
                Some("a"),
                n,
                "c1",
                "web",
                image_is(DESIRED),
            )
            .await;
        }
        Setup {
            nats,
            m,
            drift: sub,
        }
    }

    fn c2(&self) -> &Member {
        &self.m[1]
    }

    /// `kubectl set image deployment/<name> web=<image> -n a` on c2.
    fn set_image(&self, name: &str, image: &str) {
        kubectl(
            self.c2(),
            &[
                "set",
                "image",
                &format!("deployment/{name}"),
                &format!("web={image}"),
                "-n",
                "a",
            ],
        );
    }

    async fn wait_web(&self, what: &'static str) -> DynamicObject {
        wait_copy(
            self.c2(),
            &deployments(),
            Some("a"),
            "web",
            "c1",
            "web",
            image_is(what),
        )
        .await
    }

    async fn web_now(&self) -> DynamicObject {
        get_dynamic(self.c2(), &deployments(), Some("a"), "web")
            .await
            .unwrap()
            .expect("a/web on c2")
    }

    /// The next drift event; panics after [`SYNC`].
    async fn next(&mut self, what: &str) -> (String, Value) {
        next_drift(&mut self.drift, what).await
    }

    /// `fleetbus.cmd.c2.correct` for `a/web`, as a plain NATS request.
    async fn correct_web(&self) -> Value {
        let client = async_nats::connect(self.nats.url()).await.unwrap();
        let req = json!({"schema": "fleetbus.io/correct-request/v1", "name": "web"});
        let reply = tokio::time::timeout(
            SYNC,
            client.request("fleetbus.cmd.c2.correct", req.to_string().into()),
        )
        .await
        .expect("correct reply in time")
        .expect("correct reply");
        serde_json::from_slice(&reply.payload).expect("reply is JSON")
    }
}

/// The next drift message (subject, JSON); panics after [`SYNC`].
async fn next_drift(sub: &mut async_nats::Subscriber, what: &str) -> (String, Value) {
    match tokio::time::timeout(SYNC, sub.next()).await {
        Ok(Some(msg)) => {
            let v: Value = serde_json::from_slice(&msg.payload).unwrap_or_else(|e| {
                panic!(
                    "drift message is not JSON ({e}): {}",
                    String::from_utf8_lossy(&msg.payload)
                )
            });
            (msg.subject.to_string(), v)
        }
        Ok(None) => panic!("drift subscription ended waiting for {what}"),
        Err(_) => panic!("no drift event ({what}) within {SYNC:?}"),
    }
}

/// Asserts a drift event of `a/web` on c2 in `phase` with `action`.
fn assert_event(subject: &str, ev: &Value, phase: &str, type_: &str, action: &str) {
    assert_eq!(subject, "fleetbus.drift.c2.apps.Deployment.a.web", "{ev:#}");
    assert_eq!(ev["phase"], phase, "{ev:#}");
    assert_eq!(ev["type"], type_, "{ev:#}");
    assert_eq!(ev["action"], action, "{ev:#}");
    assert_eq!(ev["cluster"], "c2", "{ev:#}");
    assert_eq!(ev["rule"], "web", "{ev:#}");
    assert_eq!(ev["origin"], "c1", "{ev:#}");
    assert_eq!(ev["object"]["kind"], "Deployment", "{ev:#}");
    assert_eq!(ev["object"]["namespace"], "a", "{ev:#}");
    assert_eq!(ev["object"]["name"], "web", "{ev:#}");
}

/// The change at `path` in a drift event.
fn change<'a>(ev: &'a Value, path: &str) -> &'a Value {
    ev["changes"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["path"] == path))
        .unwrap_or_else(|| panic!("no change at {path}: {ev:#}"))
}

/// Asserts the event is the Detected drift of `kubectl set image` on `a/web`.
fn assert_image_drift(subject: &str, ev: &Value, action: &str, live: &str) {
    assert_event(subject, ev, "Detected", "Modified", action);
    let c = change(ev, IMAGE);
    assert_eq!(c["desired"], DESIRED, "{ev:#}");
    assert_eq!(c["live"], live, "{ev:#}");
}

/// The sum of `fleetbus_drifts_total` series of `m` with `phase`.
fn drifts_total(m: &Member, phase: &str) -> f64 {
    sum_where(m, "fleetbus_drifts_total", &format!("phase=\"{phase}\""))
}

/// The sum of the series of the metric `name` of `m` whose line has `label`.
fn sum_where(m: &Member, name: &str, label: &str) -> f64 {
    let text = m.metrics().unwrap();
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(['{', ' ']))
                && l.contains(label)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// `apps/deployments` of c2's `/debug/writes`.
async fn deployment_writes(m: &Member) -> u64 {
    writes(m).await["apps/deployments"].as_u64().unwrap_or(0)
}

/// 1. `kubectl set image` on the copy: Detected, then Corrected, with the
/// change, who made it and the action; the copy is back; metrics counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_image_is_detected_and_corrected() {
    let mut s = Setup::start(json!({}), &["web"]).await;
    let before = drifts_total(s.c2(), "Detected");
    // The copy's first version was one sync lag observed (the Grafana panel's
    // series); the correction below writes the same version again: no lag.
    let lags = "fleetbus_sync_lag_seconds_count{rule=\"web\"}";
    // The agent counts the lag once its write is answered, which may be just
    // after the setup's watch saw the copy.
    wait_for("c2 counted the copy's sync lag once", SYNC, || async {
        match s.c2().metric(lags).ok() {
            Some(1.0) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    s.set_image("web", CHANGED);

    let (subject, ev) = s.next("Detected").await;
    assert_image_drift(&subject, &ev, "Correct", CHANGED);
    // kubectl 1.33 sends `--field-manager` kubectl-set for `set image`.
    assert_eq!(ev["changedBy"]["manager"], "kubectl-set", "{ev:#}");
    assert_eq!(ev["changedBy"]["operation"], "Update", "{ev:#}");
    assert!(ev["detectedAt"].is_string(), "{ev:#}");
    let (subject, done) = s.next("Corrected").await;
    assert_event(&subject, &done, "Corrected", "Modified", "Correct");
    assert_eq!(done["changes"], ev["changes"], "{done:#}");
    assert_ne!(done["id"], ev["id"], "{done:#}");

    s.wait_web(DESIRED).await;
    let after = drifts_total(s.c2(), "Detected");
    assert_eq!(after, before + 1.0, "{}", s.c2().metrics().unwrap());
    assert!(drifts_total(s.c2(), "Corrected") >= 1.0);
    assert_eq!(
        s.c2().metric(lags).ok(),
        Some(1.0),
        "a correction is no lag"
    );
}

/// 2. An excluded path (`/spec/replicas`) may differ: `kubectl scale` is no
/// drift, the replicas stay, and the agent writes nothing for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn excluded_path_is_not_drift() {
    let mut s = Setup::start(
        json!({"exclusions": [{"paths": ["/spec/replicas"]}]}),
        &["web"],
    )
    .await;
    let w0 = deployment_writes(s.c2()).await;
    kubectl(
        s.c2(),
        &["scale", "deployment/web", "--replicas=5", "-n", "a"],
    );
    assert_eq!(replicas(&s.web_now().await), json!(5));
    // A later, non-excluded change: its event is the first one.
    s.set_image("web", CHANGED);
    let (subject, ev) = s.next("the image drift").await;
    assert_image_drift(&subject, &ev, "Correct", CHANGED);
    assert!(
        ev["changes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["path"] != "/spec/replicas"),
        "{ev:#}"
    );
    let (_, done) = s.next("Corrected").await;
    assert_eq!(done["phase"], "Corrected", "{done:#}");
    let web = s.wait_web(DESIRED).await;
    // The correction kept the excluded value.
    assert_eq!(replicas(&web), json!(5));
    // The user's two writes and the agent's one correction; none for the scale.
    assert_eq!(
        deployment_writes(s.c2()).await,
        w0 + 3,
        "{}",
        writes(s.c2()).await
    );
}

/// 3. Report mode: the drift is reported and stays until an operator asks
/// for a correction: a plain NATS request, then the `fleetbus` CLI.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn report_mode_keeps_the_drift_until_corrected_on_demand() {
    let mut s = Setup::start(json!({"mode": "Report"}), &["web"]).await;
    s.set_image("web", CHANGED);
    let (subject, ev) = s.next("Detected").await;
    assert_image_drift(&subject, &ev, "Report", CHANGED);
    assert_eq!(image(&s.web_now().await), CHANGED);

    let reply = s.correct_web().await;
    assert_eq!(reply["schema"], "fleetbus.io/correct-reply/v1", "{reply:#}");
    assert_eq!(reply["cluster"], "c2", "{reply:#}");
    assert_eq!(reply["error"], Value::Null, "{reply:#}");
    assert_eq!(reply["failed"], json!([]), "{reply:#}");
    let corrected = reply["corrected"].as_array().expect("corrected list");
    assert_eq!(corrected.len(), 1, "{reply:#}");
    assert_eq!(corrected[0]["kind"], "Deployment", "{reply:#}");
    assert_eq!(corrected[0]["namespace"], "a", "{reply:#}");
    assert_eq!(corrected[0]["name"], "web", "{reply:#}");
    let (subject, done) = s.next("Corrected").await;
    assert_event(&subject, &done, "Corrected", "Modified", "Correct");
    // The correction is written before the reply.
    assert_eq!(image(&s.web_now().await), DESIRED);

    // Again, corrected through the operator CLI (`fleetbus drift correct`).
    s.set_image("web", "nginx:3");
    let (subject, ev) = s.next("Detected again").await;
    assert_image_drift(&subject, &ev, "Report", "nginx:3");
    assert_eq!(image(&s.web_now().await), "nginx:3");
    let out = tokio::process::Command::new(cargo_bin("fleetbus"))
        .args([
            "drift",
            "correct",
            "--cluster",
            "c2",
            "--name",
            "web",
            "-o",
            "json",
        ])
        .env("FLEETBUS_NATS_URL", s.nats.url())
        .env_remove("FLEETBUS_SUBJECT_PREFIX")
        .output()
        .await
        .expect("run fleetbus");
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "fleetbus drift correct printed no JSON ({e}): {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert!(out.status.success(), "{cli:#}");
    assert_eq!(cli["corrected"][0]["name"], "web", "{cli:#}");
    let (subject, done) = s.next("Corrected by the CLI").await;
    assert_event(&subject, &done, "Corrected", "Modified", "Correct");
    assert_eq!(image(&s.web_now().await), DESIRED);

    // Nothing drifted any more: a second request corrects nothing.
    let again = s.correct_web().await;
    assert_eq!(again["corrected"], json!([]), "{again:#}");
    assert_eq!(again["failed"], json!([]), "{again:#}");
}

/// 4. `fleetbus.io/correction-paused=true` on the copy: a change is reported
/// (action Report) and stays. The annotation itself is an instruction, not
/// drift (before the fix in `drift.rs` setting it was reported as a change
/// of `/metadata/annotations/fleetbus.io~1correction-paused`). Removing it
/// is a change of the copy: that reconcile sees mode Correct, announces the
/// still-drifted image again (`Detected`, action Correct) and corrects it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_annotation_behaves_like_report() {
    let mut s = Setup::start(json!({}), &["web"]).await;
    let paused = "fleetbus.io/correction-paused";
    kubectl(
        s.c2(),
        &[
            "annotate",
            "deployment/web",
            &format!("{paused}=true"),
            "-n",
            "a",
        ],
    );
    s.set_image("web", CHANGED);
    // The first event is the image's: annotating was no drift.
    let (subject, ev) = s.next("Detected (paused)").await;
    assert_image_drift(&subject, &ev, "Report", CHANGED);
    assert!(
        ev["changes"].as_array().unwrap().len() == 1,
        "only the image changed: {ev:#}"
    );
    let web = s.web_now().await;
    assert_eq!(image(&web), CHANGED);
    assert_eq!(
        web.annotations().get(paused).map(String::as_str),
        Some("true"),
        "the pause stays on the copy"
    );

    kubectl(
        s.c2(),
        &[
            "annotate",
            "deployment/web",
            &format!("{paused}-"),
            "-n",
            "a",
        ],
    );
    // Removing it is a new version of the still-drifted copy: it is
    // announced again, now with action Correct, and corrected.
    let (subject, again) = s.next("Detected after the pause ended").await;
    assert_image_drift(&subject, &again, "Correct", CHANGED);
    assert_ne!(again["id"], ev["id"], "{again:#}");
    let (subject, done) = s.next("Corrected after the pause ended").await;
    assert_event(&subject, &done, "Corrected", "Modified", "Correct");
    let web = s.wait_web(DESIRED).await;
    assert!(!web.annotations().contains_key(paused));
}

/// 5. `fleetbus.io/drift-ignore=*` on the copy: a change gives no event and
/// stays (proved by a later drift of another copy arriving first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_ignore_copy_is_left_alone() {
    let mut s = Setup::start(json!({}), &["web", "probe"]).await;
    kubectl(
        s.c2(),
        &[
            "annotate",
            "deployment/web",
            "fleetbus.io/drift-ignore=*",
            "-n",
            "a",
        ],
    );
    s.set_image("web", CHANGED);
    s.set_image("probe", CHANGED);
    let (subject, ev) = s.next("the probe's drift").await;
    assert_eq!(
        subject, "fleetbus.drift.c2.apps.Deployment.a.probe",
        "{ev:#}"
    );
    assert_eq!(ev["phase"], "Detected", "{ev:#}");
    let (subject, _) = s.next("the probe's correction").await;
    assert_eq!(subject, "fleetbus.drift.c2.apps.Deployment.a.probe");
    wait_copy(
        s.c2(),
        &deployments(),
        Some("a"),
        "probe",
        "c1",
        "web",
        image_is(DESIRED),
    )
    .await;
    assert_eq!(image(&s.web_now().await), CHANGED);
}

/// 5b. `fleetbus.io/drift-ignore=/spec/replicas` on the copy (the list
/// form) in Correct mode: the annotation is no drift and stays (before the
/// fix in `drift.rs` the correction removed it), and the listed path may
/// differ.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_ignore_paths_on_the_copy_stay() {
    let mut s = Setup::start(json!({}), &["web"]).await;
    let ignore = "fleetbus.io/drift-ignore";
    kubectl(
        s.c2(),
        &[
            "annotate",
            "deployment/web",
            &format!("{ignore}=/spec/replicas"),
            "-n",
            "a",
        ],
    );
    kubectl(
        s.c2(),
        &["scale", "deployment/web", "--replicas=4", "-n", "a"],
    );
    s.set_image("web", CHANGED);
    let (subject, ev) = s.next("the image drift").await;
    assert_image_drift(&subject, &ev, "Correct", CHANGED);
    assert_eq!(ev["changes"].as_array().unwrap().len(), 1, "{ev:#}");
    let (_, done) = s.next("Corrected").await;
    assert_eq!(done["phase"], "Corrected", "{done:#}");
    let web = s.wait_web(DESIRED).await;
    assert_eq!(replicas(&web), json!(4));
    assert_eq!(
        web.annotations().get(ignore).map(String::as_str),
        Some("/spec/replicas")
    );
}

/// 6. Deleting the copy is drift of type Deleted; it is recreated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_copy_is_drift_and_recreated() {
    let mut s = Setup::start(json!({}), &["web"]).await;
    let uid = s.web_now().await.metadata.uid.clone().unwrap();
    kubectl_delete(s.c2(), "deployment", Some("a"), "web");
    let (subject, ev) = s.next("Detected (Deleted)").await;
    assert_event(&subject, &ev, "Detected", "Deleted", "Correct");
    assert_eq!(ev["changes"], json!([]), "{ev:#}");
    let (subject, done) = s.next("Corrected").await;
    assert_event(&subject, &done, "Corrected", "Deleted", "Correct");
    let web = s.wait_web(DESIRED).await;
    assert_ne!(web.metadata.uid.unwrap(), uid, "a new object");
}

/// 7. Restarting the agent after convergence (and after a corrected drift)
/// reports nothing and writes nothing: its first look at each copy compares
/// with a dry run, not a write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_restart_is_silent() {
    let mut s = Setup::start(json!({}), &["web", "probe"]).await;
    s.set_image("web", CHANGED);
    s.next("Detected").await;
    s.next("Corrected").await;
    s.wait_web(DESIRED).await;
    // Converged: both copies in sync per the rule's status on c2.
    wait_rule(s.c2(), "web", "Ready with two copies", |r| {
        ready_is("True", "Synced")(r)?;
        match r.status.as_ref().map(|st| st.objects_synced) {
            Some(2) => Ok(()),
            other => Err(format!("objectsSynced {other:?}")),
        }
    })
    .await;
    // The origin's status changes (as a controller's would): status is not
    // synced, so it is not even published (PROTOCOL §4), and c2 writes
    // nothing now, nor after its restart.
    let c1 = &s.m[0];
    kubectl(
        c1,
        &[
            "patch",
            "deployment/web",
            "-n",
            "a",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"observedGeneration":1,"replicas":1}}"#,
        ],
    );
    let in_sync = s.c2().metric("fleetbus_sync_objects").unwrap();
    let w0 = writes(s.c2()).await;

    s.m[1].agent.restart().unwrap();
    wait_readyz(s.c2(), 200, CONVERGE).await;
    // The first pass is done when the copies are counted in sync again (the
    // gauge starts at 0 in the new process).
    wait_for("c2 sync_objects back after the restart", SYNC, || async {
        match s.c2().metric("fleetbus_sync_objects") {
            Ok(n) if n == in_sync => Ok(()),
            other => Err(format!("{other:?}, want {in_sync}")),
        }
    })
    .await;
    let w1 = writes(s.c2()).await;
    assert_eq!(
        w1["apps/deployments"], w0["apps/deployments"],
        "{w0} -> {w1}"
    );
    // No copy written at all, the rule's copy included (its status is the
    // agent's own report and may be rewritten, so /debug/writes of
    // resourcesyncrules cannot tell; `fleetbus_sync_writes_total` is never
    // counted yet): the new process logged no "wrote copy".
    let log = s.c2().agent.log();
    let since = log
        .rsplit("agent restarted")
        .next()
        .expect("a restart marker");
    assert!(!since.contains("wrote copy"), "{since}");
    // A later drift's event is the first since the restart.
    s.set_image("probe", CHANGED);
    let (subject, ev) = s.next("the probe's drift").await;
    assert_eq!(
        subject, "fleetbus.drift.c2.apps.Deployment.a.probe",
        "{ev:#}"
    );
    assert_eq!(ev["phase"], "Detected", "{ev:#}");
}

/// 8. An original Deployment in namespace `b` (the rule matches `a` only) is
/// not watched for drift.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_scope_namespace_is_not_watched() {
    let mut s = Setup::start(json!({}), &["web"]).await;
    create_ns(s.c2(), "b").await;
    apply_yaml(s.c2(), &deployment_yaml("b", "other", DESIRED));
    kubectl(
        s.c2(),
        &[
            "set",
            "image",
            "deployment/other",
            &format!("web={CHANGED}"),
            "-n",
            "b",
        ],
    );
    s.set_image("web", CHANGED);
    let (subject, ev) = s.next("the copy's drift").await;
    assert_image_drift(&subject, &ev, "Correct", CHANGED);
    let other = get_dynamic(s.c2(), &deployments(), Some("b"), "other")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(image(&other), CHANGED);
    check_unmanaged(&other).unwrap();
}

/// The drift KV bucket, as the agent will create it (found if it exists).
async fn drift_kv(nats: &NatsServer) -> async_nats::jetstream::kv::Store {
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = async_nats::jetstream::new(client);
    match js.get_key_value(DRIFT_BUCKET).await {
        Ok(kv) => kv,
        Err(_) => js
            .create_key_value(async_nats::jetstream::kv::Config {
                bucket: DRIFT_BUCKET.into(),
                history: 1,
                ..Default::default()
            })
            .await
            .expect("create the drift bucket"),
    }
}

/// 9. A reported drift is in the KV bucket `fleetbus-drift` under
/// `<cluster>.<group>.<kind>.<ns>.<name>` with the last event as value; the
/// key is gone once corrected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_state_in_kv() {
    let mut s = Setup::start(json!({"mode": "Report"}), &["web"]).await;
    let kv = drift_kv(&s.nats).await;
    s.set_image("web", CHANGED);
    let (_, ev) = s.next("Detected").await;
    assert_eq!(ev["action"], "Report", "{ev:#}");
    let kv = &kv;
    let stored = wait_for("the drift in KV", SYNC, || async move {
        match kv.get(WEB_KEY).await {
            Ok(Some(bytes)) => serde_json::from_slice::<Value>(&bytes).map_err(|e| e.to_string()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(stored, ev, "the value is the last event");

    let reply = s.correct_web().await;
    assert_eq!(reply["corrected"].as_array().unwrap().len(), 1, "{reply:#}");
    let (_, done) = s.next("Corrected").await;
    assert_eq!(done["phase"], "Corrected", "{done:#}");
    wait_for("the drift gone from KV", SYNC, || async move {
        match kv.get(WEB_KEY).await {
            Ok(None) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// A drift larger than the server's `max_payload` (a copy edited with
/// 1.1 MB of values) is still announced, recorded and listed: its large values
/// are replaced by a marker with their size and hash, its paths kept. It
/// once was dropped whole ("max payload size exceeded"), and every view
/// said nothing was drifted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_too_large_for_the_bus_is_announced_cut_and_listed() {
    let mut s = Setup::start(json!({"mode": "Report"}), &["web"]).await;
    let kv = drift_kv(&s.nats).await;
    // Two values of 550 KB: an event of 1.1 MB, over the server's 1 MiB.
    let big = "x".repeat(550_000);
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "web", "image": DESIRED, "env": [
            {"name": "BIG", "value": big}, {"name": "HUGE", "value": big}
        ]}
    ]}}}});
    dynamic(s.c2(), &deployments(), Some("a"))
        .patch(
            "web",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .expect("1.1 MB of env values on the copy");
    let (_, ev) = s.next("Detected, cut to fit").await;
    let changes = ev["changes"].as_array().expect("changes");
    let cut = changes
        .iter()
        .find(|c| c["live"]["fleetbus.io/truncated"]["bytes"].as_u64() > Some(1_100_000))
        .unwrap_or_else(|| {
            let paths: Vec<_> = changes.iter().map(|c| &c["path"]).collect();
            panic!("no change carries the cut value's marker; paths {paths:?}")
        });
    assert!(
        cut["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("/spec/template/spec/containers/0")),
        "the path is kept: {cut}"
    );
    assert_eq!(
        cut["live"]["fleetbus.io/truncated"]["sha256"]
            .as_str()
            .map(str::len),
        Some(64),
        "{cut}"
    );
    // Recorded: the drift bucket has it, and the operator's views list it.
    let kv = &kv;
    wait_for("the large drift in KV", SYNC, || async move {
        match kv.get(WEB_KEY).await {
            Ok(Some(_)) => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let listed = fleetbus_json(&s.nats, &["ls", "--cluster", "c2"]).await;
    let rows = listed.as_array().expect("ls -o json is a list");
    assert!(
        rows.iter()
            .any(|r| r["object"]["name"] == "web" && r["phase"] == "Detected"),
        "drift ls lists the copy: {listed:#}"
    );
    assert!(
        s.c2()
            .metric("fleetbus_drift_events_truncated_total")
            .unwrap_or(0.0)
            >= 1.0,
        "the cut is counted"
    );
}

/// Runs `fleetbus drift <args> -o json` against the test's NATS; its JSON.
async fn fleetbus_json(nats: &NatsServer, args: &[&str]) -> Value {
    let out = tokio::process::Command::new(cargo_bin("fleetbus"))
        .arg("drift")
        .args(args)
        .args(["-o", "json"])
        .env("FLEETBUS_NATS_URL", nats.url())
        .env_remove("FLEETBUS_SUBJECT_PREFIX")
        .output()
        .await
        .expect("run fleetbus");
    assert!(
        out.status.success(),
        "fleetbus drift {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "fleetbus drift {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// 10. The operator's view with real agents: `fleetbus drift ls` shows the
/// drifted copy in Report mode and nothing once it is corrected; `fleetbus
/// drift history` shows its events in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drift_cli_lists_and_replays_with_real_agents() {
    let mut s = Setup::start(json!({"mode": "Report"}), &["web"]).await;
    s.set_image("web", CHANGED);
    let (_, ev) = s.next("Detected").await;
    assert_eq!(ev["action"], "Report", "{ev:#}");
    let listed = fleetbus_json(&s.nats, &["ls", "--cluster", "c2"]).await;
    let rows = listed.as_array().expect("ls -o json is a list");
    let web: Vec<&Value> = rows
        .iter()
        .filter(|r| r["object"]["name"] == "web" && r["object"]["kind"] == "Deployment")
        .collect();
    assert_eq!(web.len(), 1, "{listed:#}");
    assert_eq!(web[0]["phase"], "Detected", "{listed:#}");
    assert_eq!(web[0]["rule"], "web", "{listed:#}");

    let reply = s.correct_web().await;
    assert_eq!(reply["corrected"][0]["name"], "web", "{reply:#}");
    s.next("Corrected").await;
    let listed = fleetbus_json(&s.nats, &["ls", "--cluster", "c2"]).await;
    assert!(
        !listed
            .as_array()
            .expect("list")
            .iter()
            .any(|r| r["object"]["name"] == "web"),
        "still listed after the correction: {listed:#}"
    );

    let history = fleetbus_json(&s.nats, &["history", "Deployment/a/web", "--cluster", "c2"]).await;
    let phases: Vec<&str> = history
        .as_array()
        .expect("history -o json is a list")
        .iter()
        .filter_map(|e| e["phase"].as_str())
        .collect();
    assert_eq!(phases, vec!["Detected", "Corrected"], "{history:#}");
}

/// 11. `fleetbus.io/correction-paused` on the RULE (here its replicated copy
/// on c2) pauses every copy the rule made there: a change is reported
/// (action Report) and stays; the annotation on the rule is itself no drift
/// of the rule's copy and survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_rule_reports_every_copy() {
    let mut s = Setup::start(json!({}), &["web"]).await;
    kubectl(
        s.c2(),
        &[
            "annotate",
            "resourcesyncrule/web",
            "fleetbus.io/correction-paused=true",
        ],
    );
    s.set_image("web", CHANGED);
    let (subject, ev) = s.next("Detected under a paused rule").await;
    assert_eq!(
        ev["object"]["kind"], "Deployment",
        "first event is for the rule: {ev:#}"
    );
    assert_image_drift(&subject, &ev, "Report", CHANGED);
    assert_eq!(
        image(&s.web_now().await),
        CHANGED,
        "a paused rule corrected its copy"
    );
    let rule = rule(s.c2(), "web").await.unwrap().expect("rule copy");
    assert!(
        rule.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("fleetbus.io/correction-paused")),
        "the pause on the rule copy was reverted: {:?}",
        rule.metadata.annotations
    );
}
