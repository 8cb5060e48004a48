//! `fleetbus notify`'s delivery against a real HTTP receiver started by the test:
//! delivery in each format, retries after 500 and 429 (with `Retry-After`), a dead
//! letter after the last attempt, a storm of 500 drift events in two messages, the
//! bridge as a process under its own NATS user across a restart, the records it
//! says turned (rollouts, placements, policy refusals, cluster health) with a
//! target filtered by cluster labels, and its chart.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use fleetbus_hub::notify::{
    load_targets, Coalescer, Delivered, Delivery, Notification, NotifyMetrics, RetryPolicy, Target,
};
use fleetbus_schemas::drift::{DriftEvent, DriftPhase};
use serde_json::{json, Value};
use tokio::time::Instant;

/// What the receiver got, and the statuses it answers with (then 200s).
#[derive(Default)]
struct Receiver {
    got: Vec<(Instant, Value)>,
    script: Vec<(u16, Option<&'static str>)>,
}

/// A webhook receiver on a random port; returns its URL.
async fn receiver(state: Arc<Mutex<Receiver>>) -> String {
    let app = axum::Router::new().route(
        "/hook/{token}",
        axum::routing::post(
            move |axum::extract::Path(token): axum::extract::Path<String>,
                  axum::Json(mut body): axum::Json<Value>| {
                let state = state.clone();
                async move {
                    let mut r = state.lock().unwrap();
                    // Which URL it was posted to (the targets of a test differ by it).
                    if let Some(o) = body.as_object_mut() {
                        o.insert("_to".into(), Value::String(token));
                    }
                    r.got.push((Instant::now(), body));
                    let (code, retry_after) = if r.script.is_empty() {
                        (200, None)
                    } else {
                        r.script.remove(0)
                    };
                    let mut headers = HeaderMap::new();
                    if let Some(after) = retry_after {
                        headers.insert("retry-after", after.parse().unwrap());
                    }
                    (StatusCode::from_u16(code).unwrap(), headers, "")
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/hook/secret-token")
}

/// Targets of every format posting to `url`, read the way the bridge reads them.
fn targets(dir: &tempfile::TempDir, url: &str) -> Vec<Target> {
    std::fs::write(dir.path().join("url"), url).unwrap();
    let mut yaml = String::from("targets:\n");
    for f in ["slack", "teams", "json"] {
        yaml += &format!("- name: {f}\n  format: {f}\n  urlFile: url\n");
    }
    std::fs::write(dir.path().join("targets.yaml"), yaml).unwrap();
    load_targets(&dir.path().join("targets.yaml")).unwrap()
}

/// A drift event of `name` on cluster b, decoded from its wire form.
fn drift(name: &str, phase: DriftPhase) -> DriftEvent {
    let wire = serde_json::json!({
        "schema": "fleetbus.io/drift/v1", "id": name, "cluster": "b", "rule": "web", "origin": "a",
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": name},
        "phase": phase.as_str(), "type": "Modified", "detectedAt": "2023-11-14T22:13:20.000Z",
        "action": "Report",
    });
    DriftEvent::decode(wire.to_string().as_bytes()).unwrap()
}

/// A receiver answering `script` first, the targets posting to it, and a delivery
/// with short backoffs.
struct Setup {
    state: Arc<Mutex<Receiver>>,
    targets: Vec<Target>,
    metrics: Arc<NotifyMetrics>,
    delivery: Delivery,
    _dir: tempfile::TempDir,
}

async fn setup(script: Vec<(u16, Option<&'static str>)>) -> Setup {
    let state = Arc::new(Mutex::new(Receiver {
        script,
        ..Receiver::default()
    }));
    let url = receiver(state.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let targets = targets(&dir, &url);
    let metrics = Arc::new(NotifyMetrics::default());
    let delivery = Delivery::new(fast(), metrics.clone()).unwrap();
    Setup {
        state,
        targets,
        metrics,
        delivery,
        _dir: dir,
    }
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        first_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(100),
    }
}

#[tokio::test]
async fn each_format_is_delivered_and_500_and_429_are_retried() {
    let Setup {
        state,
        targets,
        metrics,
        delivery,
        ..
    } = setup(vec![(500, None), (429, Some("1"))]).await;
    let n = Notification::from_drift(&drift("site", DriftPhase::Fight));

    let started = Instant::now();
    assert_eq!(delivery.deliver(&targets[0], &n).await, Delivered::Yes);
    {
        let r = state.lock().unwrap();
        assert_eq!(r.got.len(), 3, "500, 429, then taken");
        // The 429's Retry-After (1 s) was waited for, not the 20 ms backoff.
        assert!(r.got[2].0 - r.got[1].0 >= Duration::from_secs(1));
        assert!(r.got[2].0 - started < Duration::from_secs(5));
        assert!(r.got[2].1["text"]
            .as_str()
            .unwrap()
            .contains("drift Fight on b"));
    }
    assert_eq!(delivery.deliver(&targets[1], &n).await, Delivered::Yes);
    assert_eq!(delivery.deliver(&targets[2], &n).await, Delivered::Yes);
    let r = state.lock().unwrap();
    assert_eq!(r.got[3].1["@type"], "MessageCard");
    assert_eq!(r.got[4].1["rule"], "web");
    assert_eq!(r.got[4].1["severity"], "critical");
    assert_eq!(metrics.sent(&targets[0]), 1);
    assert_eq!(metrics.dead_letters(&targets[0]), 0);
}

#[tokio::test]
async fn the_last_failed_attempt_and_a_refusal_are_dead_letters() {
    let Setup {
        state,
        targets,
        metrics,
        delivery,
        ..
    } = setup(vec![(503, None), (503, None), (503, None), (404, None)]).await;
    let n = Notification::from_drift(&drift("site", DriftPhase::CorrectionFailed));
    assert_eq!(
        delivery.deliver(&targets[2], &n).await,
        Delivered::DeadLetter
    );
    assert_eq!(state.lock().unwrap().got.len(), 3);
    // A 404 is not retried.
    assert_eq!(
        delivery.deliver(&targets[2], &n).await,
        Delivered::DeadLetter
    );
    assert_eq!(state.lock().unwrap().got.len(), 4);
    assert_eq!(metrics.dead_letters(&targets[2]), 2);
    let mut registry = prometheus_client::registry::Registry::with_prefix("fleetbus");
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    assert!(
        text.contains("fleetbus_notify_dead_letters_total{target=\"json\"} 2"),
        "{text}"
    );

    // Nothing listens: no answer is retried, then a dead letter.
    drop(state);
    let gone = tempfile::tempdir().unwrap();
    let targets = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/hook/x", l.local_addr().unwrap());
        drop(l);
        self::targets(&gone, &url)
    };
    assert_eq!(
        delivery.deliver(&targets[0], &n).await,
        Delivered::DeadLetter
    );
}

#[tokio::test]
async fn a_storm_of_500_drift_events_is_two_messages() {
    let state = Arc::new(Mutex::new(Receiver::default()));
    let url = receiver(state.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let targets = targets(&dir, &url);
    let delivery = Delivery::new(fast(), Arc::new(NotifyMetrics::default())).unwrap();
    let mut coalescer = Coalescer::new(Duration::from_millis(300));
    for i in 0..500 {
        let n = Notification::from_drift(&drift(&format!("cm{i}"), DriftPhase::Detected));
        if let Some((n, ())) = coalescer.add(n, (), Instant::now()) {
            delivery.deliver(&targets[2], &n).await;
        }
    }
    let due = coalescer.next_due().unwrap();
    tokio::time::sleep_until(due).await;
    for (n, _) in coalescer.due(Instant::now()) {
        delivery.deliver(&targets[2], &n).await;
    }
    let r = state.lock().unwrap();
    let counts: Vec<u64> = r
        .got
        .iter()
        .map(|(_, b)| b["count"].as_u64().unwrap())
        .collect();
    assert_eq!(counts, [1, 499]);
}

/// A `fleetbus notify` process, killed (SIGKILL, as a crash) on drop.
struct Bridge(std::process::Child);

impl Bridge {
    fn start(nats_url: &str, dir: &std::path::Path) -> Self {
        Self::start_with(nats_url, dir, &[])
    }

    fn start_with(nats_url: &str, dir: &std::path::Path, extra: &[&str]) -> Self {
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_fleetbus"))
            // A short ack wait: an event the killed bridge had pulled but not
            // acknowledged comes back within the test's deadlines.
            .args([
                "notify",
                "--nats-url",
                nats_url,
                "--window",
                "1s",
                "--ack-wait",
                "5s",
            ])
            .arg("--targets")
            .arg(dir.join("targets.yaml"))
            .args(["--metrics-listen", "127.0.0.1:0"])
            .args(extra)
            .env("FLEETBUS_MESH_DIR", dir.join("no-mesh"))
            .spawn()
            .unwrap();
        Bridge(child)
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the receiver got so far, as (object, count) of the JSON target.
fn got(state: &Arc<Mutex<Receiver>>) -> Vec<(String, u64)> {
    let r = state.lock().unwrap();
    r.got
        .iter()
        .filter(|(_, b)| b.get("object").is_some())
        .map(|(_, b)| {
            (
                b["object"].as_str().unwrap().to_owned(),
                b["count"].as_u64().unwrap(),
            )
        })
        .collect()
}

async fn publish(js: &async_nats::jetstream::Context, name: &str, phase: DriftPhase) {
    let payload = drift(name, phase).encode().unwrap();
    // On the subject an agent would use: the bridge reads the cluster from it.
    let subject = fleetbus_schemas::subject::DriftKey {
        cluster: "b".into(),
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: name.into(),
    }
    .to_subject(&"fleetbus".parse().unwrap());
    js.publish(subject, payload.into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// The bridge as users run it: a process following a real nats-server through its
/// durable consumer, posting to a real receiver; killed and started again, it
/// sends what was published while it was down, and a storm is two messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_follows_drift_and_conflicts_across_a_restart() {
    let prefix: fleetbus_schemas::subject::Prefix = "fleetbus".parse().unwrap();
    // The bridge runs as a user with exactly the permissions the fleet gives it.
    let (nats, js) = bridge_server().await;
    let spec = fleetbus_schemas::jetstream::Layout::new(prefix.clone(), 1).drift_stream();
    let conflicts = fleetbus_schemas::jetstream::Layout::new(prefix.clone(), 1).conflicts_stream();
    for (name, subject) in [
        (&spec.name, fleetbus_schemas::subject::all_drift(&prefix)),
        (
            &conflicts.name,
            fleetbus_schemas::subject::all_conflicts(&prefix),
        ),
    ] {
        js.create_stream(async_nats::jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![subject],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let state = Arc::new(Mutex::new(Receiver::default()));
    let url = receiver(state.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("url"), &url).unwrap();
    std::fs::write(
        dir.path().join("targets.yaml"),
        "targets:\n- name: all\n  format: json\n  urlFile: url\n",
    )
    .unwrap();

    let bridge = Bridge::start(&nats.url(), dir.path());
    let stream_name = spec.name.clone();
    // The bridge's durable consumer, as the server reports it.
    let consumer = || {
        let js = js.clone();
        let stream_name = stream_name.clone();
        async move {
            let stream = js
                .get_stream(&stream_name)
                .await
                .map_err(|e| e.to_string())?;
            stream
                .consumer_info("fleetbus-notify")
                .await
                .map_err(|e| e.to_string())
        }
    };
    fleetbus_testsupport::wait_for(
        "the bridge's durable consumer",
        Duration::from_secs(30),
        || async { consumer().await.map(|_| ()) },
    )
    .await;
    publish(&js, "one", DriftPhase::Fight).await;
    for i in 0..100 {
        publish(&js, &format!("storm{i}"), DriftPhase::Detected).await;
    }
    fleetbus_testsupport::wait_for(
        "the first message and the storm's",
        Duration::from_secs(30),
        || {
            let seen = got(&state);
            async move {
                if seen.len() >= 3 {
                    Ok(())
                } else {
                    Err(format!("{seen:?}"))
                }
            }
        },
    )
    .await;
    let seen = got(&state);
    assert_eq!(seen[0], ("ConfigMap apps/one".to_owned(), 1));
    assert_eq!(seen[1], ("ConfigMap apps/storm0".to_owned(), 1));
    assert_eq!(seen[2], ("ConfigMap apps/storm1".to_owned(), 99));

    // Everything delivered was acknowledged: killing the bridge now loses nothing
    // in flight, so nothing may come twice.
    fleetbus_testsupport::wait_for(
        "every event acknowledged",
        Duration::from_secs(30),
        || async {
            let info = consumer().await?;
            if info.num_ack_pending == 0 && info.num_pending == 0 {
                Ok(())
            } else {
                Err(format!(
                    "{} unacknowledged, {} pending",
                    info.num_ack_pending, info.num_pending
                ))
            }
        },
    )
    .await;
    // Down: what is published meanwhile waits in the stream for the consumer.
    drop(bridge);
    publish(&js, "while-down", DriftPhase::CorrectionFailed).await;
    let _bridge = Bridge::start(&nats.url(), dir.path());
    fleetbus_testsupport::wait_for(
        "the event published while down",
        Duration::from_secs(30),
        || {
            let seen = got(&state);
            async move {
                if seen.iter().any(|(o, _)| o == "ConfigMap apps/while-down") {
                    Ok(())
                } else {
                    Err(format!("{seen:?}"))
                }
            }
        },
    )
    .await;
    // An event on b's subject that names another cluster is not sent: a
    // member may not speak as another (checked with or without the root).
    let mut masked: Value =
        serde_json::from_slice(&drift("masked", DriftPhase::Fight).encode().unwrap()).unwrap();
    masked["cluster"] = json!("x");
    let subject = fleetbus_schemas::subject::DriftKey {
        cluster: "b".into(),
        group: String::new(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: "masked".into(),
    }
    .to_subject(&prefix);
    js.publish(subject, masked.to_string().into())
        .await
        .unwrap()
        .await
        .unwrap();
    // Conflicts come the same way.
    let conflict = serde_json::json!({
        "schema": "fleetbus.io/conflict/v1", "id": "c1", "cluster": "b", "rule": "web",
        "origin": "a", "object": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": "taken"},
        "reason": "OtherOrigin", "winner": "c", "detectedAt": "2023-11-14T22:13:20.000Z",
        "message": "c's copy wins",
    });
    js.publish(
        "fleetbus.conflict.b.core.v1.ConfigMap.apps.taken",
        conflict.to_string().into(),
    )
    .await
    .unwrap()
    .await
    .unwrap();
    fleetbus_testsupport::wait_for("the conflict", Duration::from_secs(30), || {
        let seen = got(&state);
        async move {
            if seen.len() >= 5 {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        }
    })
    .await;
    {
        let r = state.lock().unwrap();
        let last = &r.got.last().unwrap().1;
        assert_eq!(
            (last["kind"].as_str(), last["phase"].as_str()),
            (Some("conflict"), Some("OtherOrigin"))
        );
    }
    // Nothing acknowledged was sent again, nor the masked event.
    let seen = got(&state);
    assert_eq!(seen.len(), 5, "{seen:?}");
    assert!(!seen.iter().any(|(o, _)| o.contains("masked")), "{seen:?}");

    // The bridge's user can do nothing else: not delete the stream, not publish.
    let notify = async_nats::ConnectOptions::new()
        .custom_inbox_prefix(fleetbus_schemas::permissions::NOTIFY_INBOX_PREFIX)
        .connect(nats.url())
        .await
        .unwrap();
    let mut notify_js = async_nats::jetstream::new(notify.clone());
    notify_js.set_timeout(Duration::from_secs(2));
    assert!(notify_js.delete_stream(&spec.name).await.is_err());
    assert!(notify_js
        .publish("fleetbus.drift.b.forged", "{}".into())
        .await
        .unwrap()
        .await
        .is_err());
    assert!(js.get_stream(&spec.name).await.is_ok());
}

/// A nats-server whose client without credentials is the bridge's user with
/// exactly the permissions the fleet gives it, and an admin JetStream client.
async fn bridge_server() -> (
    fleetbus_testsupport::NatsServer,
    async_nats::jetstream::Context,
) {
    let prefix: fleetbus_schemas::subject::Prefix = "fleetbus".parse().unwrap();
    let p = fleetbus_schemas::permissions::notify_permissions(&prefix, "fleetbus-notify").unwrap();
    let conf = format!(
        "no_auth_user: notify\n\
         accounts {{ FLEET {{ jetstream: enabled, users: [\n\
           {{ user: admin, password: admin }}\n\
           {{ user: notify, password: notify, permissions: {{ publish: {{ allow: {} }}, subscribe: {{ allow: {} }} }} }}\n\
         ] }} }}\n",
        serde_json::json!(p.publish_allow),
        serde_json::json!(p.subscribe_allow)
    );
    let nats = fleetbus_testsupport::NatsServer::start_with_config(&conf).unwrap();
    let client = async_nats::ConnectOptions::with_user_and_password("admin".into(), "admin".into())
        .connect(nats.url())
        .await
        .unwrap();
    (nats, async_nats::jetstream::new(client))
}

/// What the receiver got at URL token `to`, as (kind, cluster, phase).
fn got_at(state: &Arc<Mutex<Receiver>>, to: &str) -> Vec<(String, String, String)> {
    let r = state.lock().unwrap();
    r.got
        .iter()
        .filter(|(_, b)| b["_to"] == to)
        .map(|(_, b)| {
            let s = |k: &str| b[k].as_str().unwrap_or_default().to_owned();
            (s("kind"), s("cluster"), s("phase"))
        })
        .collect()
}

/// A registry record of `name` (labels `labels`), alive for an hour.
fn cluster_record(name: &str, labels: Value, state: &str, api: Value, seq: u64) -> Vec<u8> {
    let alive_until = chrono::Utc::now() + chrono::Duration::hours(1);
    serde_json::to_vec(&serde_json::json!({
        "schema": "fleetbus.io/cluster/v1", "name": name, "clusterID": format!("id-{name}"),
        "state": state, "agentVersion": "0.1.0", "startedAt": "2026-12-01T00:00:00Z",
        // In the future: alive whenever the bridge reads it, however slow the machine.
        "heartbeatAt": alive_until.to_rfc3339(), "heartbeatIntervalSeconds": 10, "seq": seq,
        "members": [], "labels": labels, "api": api,
    }))
    .unwrap()
}

/// The bridge follows what is put again and again and says what turned: a
/// rollout paused then failing, a placement degraded, a SyncPolicy refusing, a
/// cluster joining, its API server unreachable, leaving. A target with a
/// `clusterSelector` gets only what happened on clusters whose labels match.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_says_when_rollouts_placements_policies_and_clusters_turn() {
    use fleetbus_schemas::subject::Prefix;
    let prefix: Prefix = "fleetbus".parse().unwrap();
    let (nats, js) = bridge_server().await;
    let layout = fleetbus_schemas::jetstream::Layout::new(prefix.clone(), 1);
    for (name, subject) in [
        (
            layout.drift_stream().name,
            fleetbus_schemas::subject::all_drift(&prefix),
        ),
        (
            layout.conflicts_stream().name,
            fleetbus_schemas::subject::all_conflicts(&prefix),
        ),
        (
            layout.rollouts_stream().name,
            fleetbus_schemas::subject::all_rollouts(&prefix),
        ),
    ] {
        js.create_stream(async_nats::jetstream::stream::Config {
            name,
            subjects: vec![subject],
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let bucket = |name: String| {
        let js = js.clone();
        async move {
            js.create_key_value(async_nats::jetstream::kv::Config {
                bucket: name,
                ..Default::default()
            })
            .await
            .unwrap()
        }
    };
    let registry = bucket(layout.registry_bucket().bucket).await;
    bucket(layout.beats_bucket().bucket).await;
    let statuses = bucket(layout.rule_status_bucket().bucket).await;

    let state = Arc::new(Mutex::new(Receiver::default()));
    let url = receiver(state.clone()).await;
    let base = url.trim_end_matches("secret-token");
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("all"), format!("{base}all")).unwrap();
    std::fs::write(dir.path().join("prod"), format!("{base}prod")).unwrap();
    std::fs::write(
        dir.path().join("targets.yaml"),
        "targets:\n- name: all\n  format: json\n  urlFile: all\n\
         - name: prod\n  format: json\n  urlFile: prod\n  clusterSelector: {matchLabels: {env: prod}}\n  \
           template: \"{severity} {kind} {cluster} {phase}\"\n",
    )
    .unwrap();
    // The placements stream is not there when the bridge starts (a fleet
    // whose agents made none yet): it follows the rest and takes it up later.
    let _bridge = Bridge::start_with(&nats.url(), dir.path(), &["--fleet-interval", "500ms"]);

    // Health starts from the bridge's first read of the registry: probes put
    // one after another until one is said to have joined.
    let deadline = Instant::now() + Duration::from_secs(60);
    for i in 0.. {
        assert!(
            Instant::now() < deadline,
            "no probe was said to join: {:?}",
            got_at(&state, "all")
        );
        let name = format!("probe{i}");
        registry
            .put(
                format!("cluster.{name}.id-{name}"),
                cluster_record(&name, json!({}), "Active", json!({"reachable": true}), 1).into(),
            )
            .await
            .unwrap();
        let joined = fleetbus_testsupport::try_wait_for(
            "a probe said to join",
            Duration::from_secs(3),
            || {
                let seen = got_at(&state, "all");
                async move {
                    seen.iter()
                        .any(|(k, _, p)| k == "cluster" && p == "Ready")
                        .then_some(())
                        .ok_or_else(|| format!("{seen:?}"))
                }
            },
        )
        .await;
        if joined.is_ok() {
            break;
        }
    }
    let put_b = |state: &'static str, api: Value, seq: u64| {
        let registry = registry.clone();
        async move {
            registry
                .put(
                    "cluster.b.id-b",
                    cluster_record("b", json!({"env": "prod"}), state, api, seq).into(),
                )
                .await
                .unwrap();
        }
    };
    let wait_said = |to: &'static str, want: (&'static str, &'static str, &'static str)| {
        let state = state.clone();
        async move {
            fleetbus_testsupport::wait_for(
                &format!("{want:?} at {to}"),
                Duration::from_secs(30),
                || {
                    let seen = got_at(&state, to);
                    async move {
                        let want = (want.0.to_owned(), want.1.to_owned(), want.2.to_owned());
                        if seen.contains(&want) {
                            Ok(())
                        } else {
                            Err(format!("{seen:?}"))
                        }
                    }
                },
            )
            .await;
        }
    };
    put_b("Active", json!({"reachable": true}), 1).await;
    wait_said("prod", ("cluster", "b", "Ready")).await;
    put_b(
        "Active",
        json!({"reachable": false, "message": "GET /readyz: connection refused"}),
        2,
    )
    .await;
    wait_said("prod", ("cluster", "b", "ApiUnreachable")).await;

    // A rollout of b's: paused, put again paused (no news), then failing on c.
    let rollout = fleetbus_schemas::subject::RolloutKey {
        origin: "b".into(),
        rule: "web".into(),
        group: String::new(),
        version: "v1".into(),
        kind: "ConfigMap".into(),
        namespace: Some("apps".into()),
        name: "cfg".into(),
    }
    .to_subject(&prefix);
    let record = |failed: Value| {
        serde_json::json!({
            "schema": "fleetbus.io/rollout/v1", "origin": "b", "rule": "web",
            "source": {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "apps", "name": "cfg"},
            "revision": 2, "stable": "1".repeat(64), "target": "2".repeat(64), "phase": "Paused",
            "pausedBy": "failure", "failed": failed, "updatedAt": "2026-12-03T00:00:00.000Z",
        })
        .to_string()
    };
    for r in [
        record(json!({})),
        record(json!({})),
        record(json!({"c": "CrashLoopBackOff"})),
    ] {
        js.publish(rollout.clone(), r.into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    wait_said("prod", ("rollout", "b", "Failed")).await;
    // b's SyncPolicy refusing objects of a rule.
    let status = serde_json::json!({
        "schema": "fleetbus.io/rulestatus/v1", "cluster": "b", "clusterID": "id-b", "rule": "web",
        "state": "Synced", "sink": true, "source": false, "refused": 2,
        "updatedAt": "2026-12-03T00:00:00.000Z",
    });
    statuses
        .put("status.b.id-b.web", status.to_string().into())
        .await
        .unwrap();
    wait_said("prod", ("policy", "b", "PolicyRefused")).await;
    // The placements stream, made now: taken up; a degraded placement of b's.
    js.create_stream(async_nats::jetstream::stream::Config {
        name: layout.placements_stream().name,
        subjects: vec![fleetbus_schemas::placement::all_placements(&prefix)],
        ..Default::default()
    })
    .await
    .unwrap();
    let placement = fleetbus_schemas::placement::PlacementKey {
        origin: "b".into(),
        unit: fleetbus_schemas::placement::PlacementUnit::Group("g1".into()),
    }
    .to_subject(&prefix);
    let degraded = serde_json::json!({
        "schema": "fleetbus.io/placement/v1", "rule": "web", "revision": 1,
        "chosen": [{"cluster": "b", "score": 1.0, "reason": "only one"}],
        "degraded": "2 clusters wanted, 1 matches", "decidedAt": "2026-12-03T00:00:00.000Z",
    });
    fleetbus_testsupport::wait_for("the placement said", Duration::from_secs(30), || {
        // Published until the bridge's consumer on the new stream takes it
        // (it opens it at its next read of the fleet, from new messages on).
        let js = js.clone();
        let (placement, degraded, state) = (placement.clone(), degraded.clone(), state.clone());
        async move {
            if got_at(&state, "prod")
                .iter()
                .any(|(k, _, _)| k == "placement")
            {
                return Ok(());
            }
            js.publish(placement, degraded.to_string().into())
                .await
                .map_err(|e| e.to_string())?;
            Err("not yet".to_owned())
        }
    })
    .await;
    put_b("Left", json!({"reachable": true}), 3).await;
    wait_said("prod", ("cluster", "b", "Left")).await;

    // Each turn said once; the probes (no env label) only to the target without a selector.
    let prod = got_at(&state, "prod");
    let phases = |kind: &str| -> Vec<&str> {
        prod.iter()
            .filter(|(k, _, _)| k == kind)
            .map(|(_, _, p)| p.as_str())
            .collect()
    };
    // Paused put twice is said once; the failure after it is news.
    assert_eq!(phases("rollout"), ["Paused", "Failed"], "{prod:?}");
    assert_eq!(phases("placement"), ["PlacementDegraded"], "{prod:?}");
    assert_eq!(
        phases("cluster"),
        ["Ready", "ApiUnreachable", "Left"],
        "{prod:?}"
    );
    assert!(prod.iter().all(|(_, c, _)| c == "b"), "{prod:?}");
    let all = got_at(&state, "all");
    assert!(
        all.iter().any(|(_, c, _)| c.starts_with("probe")),
        "{all:?}"
    );
    for said in &prod {
        assert!(
            all.contains(said),
            "{said:?} not at the target without a selector: {all:?}"
        );
    }
}

/// The chart renders the bridge only when enabled, with a command line the CLI's own
/// flags accept, its targets from a Secret, and no Kubernetes rights.
#[test]
fn the_chart_runs_the_bridge_only_when_enabled() {
    let home = tempfile::tempdir().unwrap();
    let chart = fleetbus_testsupport::repo_root().join("deploy/helm/fleetbus-agent");
    let template = |set: &[&str]| {
        let out = std::process::Command::new(fleetbus_testsupport::helm_bin())
            .args(["template", "fb"])
            .arg(&chart)
            .args(["--set", "clusterName=a"])
            .args(set)
            .env("HELM_CONFIG_HOME", home.path().join("config"))
            .env("HELM_CACHE_HOME", home.path().join("cache"))
            .env("HELM_DATA_HOME", home.path().join("data"))
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, off, err) = template(&[]);
    assert!(ok, "{err}");
    assert!(!off.contains("fleetbus-notify"), "{off}");
    let (ok, _, err) = template(&["--set", "notify.enabled=true"]);
    assert!(
        !ok && err.contains("notify.targetsSecret is required"),
        "{err}"
    );

    let (ok, on, err) = template(&[
        "--set",
        "notify.enabled=true",
        "--set",
        "notify.targetsSecret=hooks",
        "--set",
        "notify.credsSecret=notify-creds",
        "--set",
        "trust.secret=fleetbus-cluster-trust",
    ]);
    assert!(ok, "{err}");
    let docs: Vec<Value> = on
        .split("\n---\n")
        .filter_map(|d| fleetbus_schemas::yaml::from_str::<Value>(d).ok())
        .collect();
    let bridge = docs
        .iter()
        .find(|d| d["metadata"]["name"] == "fb-fleetbus-agent-notify")
        .unwrap_or_else(|| panic!("no notify Deployment in:\n{on}"));
    let pod = &bridge["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    let c = &pod["containers"][0];
    assert_eq!(c["command"], serde_json::json!(["fleetbus", "notify"]));
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    let env: Vec<(String, String)> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_owned(),
                e["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(
        get("FLEETBUS_NOTIFY_TARGETS").as_deref(),
        Some("/etc/fleetbus-notify/targets/targets.yaml")
    );
    assert_eq!(
        get("FLEETBUS_NATS_CREDS").as_deref(),
        Some("/etc/fleetbus-notify/nats/nats.creds")
    );
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "hooks");
    // With the secure mode, the fleet root (only it, not the cluster's key)
    // in the directory the bridge reads root.pub from.
    assert_eq!(
        get("FLEETBUS_MESH_DIR").as_deref(),
        Some("/etc/fleetbus-notify/fleet")
    );
    let root = pod["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "fleet-root")
        .unwrap_or_else(|| panic!("no fleet-root volume: {pod}"));
    assert_eq!(
        root["secret"]["items"],
        serde_json::json!([{"key": "fleet-root.pub", "path": "root.pub"}])
    );
    // What the chart sets, the CLI's own flags accept: run with exactly that
    // environment, it gets as far as reading the targets the Secret would mount.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_fleetbus"))
        .arg("notify")
        .env_clear()
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot read /etc/fleetbus-notify/targets/targets.yaml"),
        "{stderr}"
    );
}
