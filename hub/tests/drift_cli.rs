//! `fleetbus drift ls|history|watch|correct`: the real binary against a real nats-server
//! holding the drift stream and bucket an agent creates, with events published as an
//! agent publishes them and a test responder standing in for an agent's command handler.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream::{self, kv, stream};
use chrono::Utc;
use fleetbus_schemas::command::{CorrectFailure, CorrectReply, CorrectRequest};
use fleetbus_schemas::crd::DriftMode;
use fleetbus_schemas::drift::{
    drift_event_id, ChangedBy, DriftChange, DriftEvent, DriftPhase, DriftType,
};
use fleetbus_schemas::jetstream::Layout;
use fleetbus_schemas::ObjectRef;
use fleetbus_testsupport::{wait_for, NatsServer};
use futures::StreamExt;
use tokio::io::{AsyncBufReadExt, BufReader};

const DEADLINE: Duration = Duration::from_secs(20);

fn fleetbus(nats: &NatsServer, args: &[&str]) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetbus"));
    cmd.args(args)
        .env("FLEETBUS_NATS_URL", nats.url())
        .env_remove("FLEETBUS_SUBJECT_PREFIX")
        .env_remove("FLEETBUS_CLUSTER")
        .env_remove("FLEETBUS_OUTPUT")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

async fn run(nats: &NatsServer, args: &[&str]) -> Output {
    fleetbus(nats, args).output().await.unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        stdout(out),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The DRIFT stream and the drift bucket as the agent creates them (from the schemas Layout).
async fn bus(nats: &NatsServer) -> (async_nats::Client, jetstream::Context, kv::Store) {
    let client = async_nats::connect(nats.url()).await.unwrap();
    let js = jetstream::new(client.clone());
    let layout = Layout::default();
    let s = layout.drift_stream();
    js.create_stream(stream::Config {
        name: s.name,
        subjects: s.subjects,
        max_messages_per_subject: s.max_msgs_per_subject,
        max_bytes: s.max_bytes,
        max_age: s.max_age.unwrap_or_default(),
        duplicate_window: s.duplicate_window,
        deny_delete: s.deny_delete,
        ..stream::Config::default()
    })
    .await
    .unwrap();
    let b = layout.drift_bucket();
    let store = js
        .create_key_value(kv::Config {
            bucket: b.bucket,
            history: b.history,
            ..kv::Config::default()
        })
        .await
        .unwrap();
    (client, js, store)
}

fn event(cluster: &str, object: ObjectRef, rule: &str, phase: DriftPhase, rv: &str) -> DriftEvent {
    DriftEvent {
        id: drift_event_id(cluster, "uid-1", rv, phase),
        cluster: cluster.into(),
        rule: rule.into(),
        origin: "c1".into(),
        object: ObjectRef {
            uid: Some("uid-1".into()),
            resource_version: Some(rv.into()),
            ..object
        },
        phase,
        type_: DriftType::Modified,
        detected_at: fleetbus_schemas::time::truncate_to_ms(
            Utc::now() - chrono::TimeDelta::minutes(5),
        ),
        changes: vec![DriftChange {
            path: "/spec/template/spec/containers/0/image".into(),
            desired: "nginx:1.27".into(),
            live: "nginx:evil".into(),
        }],
        changed_by: Some(ChangedBy {
            manager: "kubectl-set".into(),
            operation: "Update".into(),
            time: None,
        }),
        action: DriftMode::Report,
        error: None,
        count: 1,
        resume_at: None,
    }
}

fn web() -> ObjectRef {
    ObjectRef::new("apps/v1", "Deployment", Some("team-a"), "web")
}

/// Publishes like the agent: on the event's subject, acked by the stream.
async fn publish(js: &jetstream::Context, e: &DriftEvent) {
    let subject = e
        .subject_key()
        .to_subject(&Layout::default().prefix().clone());
    js.publish(subject, e.encode().unwrap().into())
        .await
        .unwrap()
        .await
        .unwrap();
}

/// Records the current drift like the agent: put while open, delete when it ended.
async fn record(store: &kv::Store, e: &DriftEvent) {
    let key = e.subject_key().to_kv_key();
    if e.phase.is_open() {
        store.put(key, e.encode().unwrap().into()).await.unwrap();
    } else {
        store.delete(key).await.unwrap();
    }
}

#[tokio::test]
async fn ls_shows_current_drift_as_table_and_json() {
    let nats = NatsServer::start().unwrap();
    let (_c, js, store) = bus(&nats).await;
    let on_c2 = event("c2", web(), "web", DriftPhase::Detected, "10");
    let mut on_c1 = event(
        "c1",
        ObjectRef::new("v1", "ConfigMap", None, "cluster-wide"),
        "cfg",
        DriftPhase::CorrectionFailed,
        "11",
    );
    on_c1.error = Some("admission denied".into());
    // Drifted then corrected on c3: no longer current.
    let gone = event("c3", web(), "web", DriftPhase::Detected, "12");
    for e in [&on_c2, &on_c1, &gone] {
        publish(&js, e).await;
        record(&store, e).await;
    }
    let corrected = event("c3", web(), "web", DriftPhase::Corrected, "13");
    publish(&js, &corrected).await;
    record(&store, &corrected).await;

    let out = run(&nats, &["drift", "ls"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let s = stdout(&out);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 3, "{}", text(&out));
    let header: Vec<&str> = lines[0].split_whitespace().collect();
    assert_eq!(
        header,
        [
            "CLUSTER",
            "RULE",
            "KIND",
            "NAMESPACE",
            "NAME",
            "PHASE",
            "ACTION",
            "CHANGED-BY",
            "AGE"
        ]
    );
    let c1: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        c1,
        [
            "c1",
            "cfg",
            "ConfigMap",
            "-",
            "cluster-wide",
            "CorrectionFailed",
            "Report",
            "kubectl-set",
            "5m"
        ]
    );
    let c2: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(
        c2,
        [
            "c2",
            "web",
            "Deployment",
            "team-a",
            "web",
            "Detected",
            "Report",
            "kubectl-set",
            "5m"
        ]
    );

    let out = run(&nats, &["drift", "ls", "--cluster", "c2"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let s = stdout(&out);
    assert_eq!(s.lines().count(), 2, "{s}");
    assert!(s.lines().nth(1).unwrap().starts_with("c2 "), "{s}");

    let out = run(&nats, &["drift", "ls", "--rule", "cfg", "-o", "json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json.len(), 1, "{}", text(&out));
    let back = DriftEvent::decode(&serde_json::to_vec(&json[0]).unwrap()).unwrap();
    assert_eq!(back, on_c1);

    let out = run(&nats, &["drift", "ls", "-o", "json"]).await;
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = json.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(ids, [on_c1.id.as_str(), on_c2.id.as_str()]);
}

#[tokio::test]
async fn ls_on_a_fleet_without_drift_prints_the_header_only() {
    // An empty bucket, as agents leave it when nothing is drifted.
    let nats = NatsServer::start().unwrap();
    let _bus = bus(&nats).await;
    let out = run(&nats, &["drift", "ls"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(stdout(&out).lines().count(), 1, "{}", text(&out));
    assert!(stdout(&out).starts_with("CLUSTER"), "{}", text(&out));
    let out = run(&nats, &["drift", "ls", "-o", "json"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert!(json.is_empty());
}

/// A prefix no agent uses is not an empty fleet: every command that reads the bus says
/// which stream or bucket is missing for which prefix, in one line, and exits 1.
#[tokio::test]
async fn reading_a_prefix_without_its_stream_or_bucket_fails_naming_it() {
    let nats = NatsServer::start().unwrap();
    let _bus = bus(&nats).await;
    for (args, missing) in [
        (&["drift", "ls"][..], "no bucket wrong-drift"),
        (&["drift", "ls", "-o", "json"], "no bucket wrong-drift"),
        (&["drift", "watch"], "no stream WRONG_DRIFT"),
        (
            &["drift", "history", "Deployment/team-a/web"],
            "no stream WRONG_DRIFT",
        ),
        (&["clusters", "ls"], "no bucket wrong-registry"),
        (&["clusters", "progress"], "no bucket wrong-registry"),
        (&["clusters", "describe", "c1"], "no bucket wrong-registry"),
        (&["rules", "ls"], "no bucket wrong-registry"),
        (&["rules", "describe", "r"], "no bucket wrong-registry"),
    ] {
        let args = [args, &["--subject-prefix", "wrong"]].concat();
        let out = run(&nats, &args).await;
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {}", text(&out));
        assert!(
            stderr.starts_with(&format!(
                "fleetbus: error: {missing} for subject prefix \"wrong\""
            )),
            "{args:?}: {}",
            text(&out)
        );
        assert!(stdout(&out).is_empty(), "{args:?}: {}", text(&out));
    }
}

/// With a registry but no rule status bucket (agents that predate it, or none yet),
/// the views say so and how to fix it; `status` exits 2 (cannot read the bus).
#[tokio::test]
async fn views_without_rule_status_name_the_cause() {
    let nats = NatsServer::start().unwrap();
    let (_client, js, _) = bus(&nats).await;
    js.create_key_value(kv::Config {
        bucket: "fleetbus-registry".into(),
        ..kv::Config::default()
    })
    .await
    .unwrap();
    for (args, code) in [
        (&["rules", "ls"][..], 1),
        (&["status"], 2),
        (&["status", "-o", "json"], 2),
    ] {
        let out = run(&nats, args).await;
        assert_eq!(out.status.code(), Some(code), "{args:?}: {}", text(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(
                "no agent has written rule status on this NATS (no bucket fleetbus-rulestatus"
            ) && stderr.contains("is a fleetbus agent"),
            "{args:?}: {}",
            text(&out)
        );
        assert!(stdout(&out).is_empty(), "{args:?}: {}", text(&out));
    }
    let out = run(&nats, &["status", "--nats-url", "nats://127.0.0.1:1"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// A cluster name that cannot exist (`*`, empty, a subject wildcard) is a usage error:
/// nothing is sent. A later valid request is the barrier: the first one the bus sees.
#[tokio::test]
async fn cluster_names_that_cannot_exist_are_refused() {
    let nats = NatsServer::start().unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let mut every = client.subscribe("fleetbus.cmd.>").await.unwrap();
    let ok = CorrectReply {
        cluster: "b".into(),
        ..CorrectReply::default()
    };
    let _seen = responder(&client, "b", ok).await;
    for args in [
        &["drift", "correct", "--cluster", "*"][..],
        &["drift", "correct", "--cluster", ""],
        &["drift", "correct", "--cluster", "b.>"],
        &["drift", "correct", "--cluster", "B"],
        &[
            "drift",
            "history",
            "Deployment/team-a/web",
            "--cluster",
            "*",
        ],
        &["drift", "ls", "--cluster", "*"],
        &["drift", "watch", "--cluster", "b.>"],
        &["clusters", "label", "*", "env=prod"],
        &["clusters", "progress", "b", "c.*"],
    ] {
        let out = run(&nats, args).await;
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("is not a DNS-1123 label"),
            "{args:?}: {}",
            text(&out)
        );
    }
    let out = run(&nats, &["drift", "correct", "--cluster", "b"]).await;
    assert!(out.status.success(), "{}", text(&out));
    let first = tokio::time::timeout(DEADLINE, every.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.subject.as_str(), "fleetbus.cmd.b.correct");
}

#[tokio::test]
async fn history_prints_every_event_of_the_object_in_order() {
    let nats = NatsServer::start().unwrap();
    let (_c, js, _store) = bus(&nats).await;
    let detected = event("c2", web(), "web", DriftPhase::Detected, "20");
    let other = event(
        "c2",
        ObjectRef::new("apps/v1", "Deployment", Some("team-a"), "api"),
        "web",
        DriftPhase::Detected,
        "21",
    );
    let on_c3 = event("c3", web(), "web", DriftPhase::Detected, "22");
    let corrected = event("c2", web(), "web", DriftPhase::Corrected, "23");
    for e in [&detected, &other, &on_c3, &corrected] {
        publish(&js, e).await;
    }

    let out = run(
        &nats,
        &[
            "drift",
            "history",
            "Deployment/team-a/web",
            "--cluster",
            "c2",
        ],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let s = stdout(&out);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 2, "{s}");
    assert!(lines[0].contains(" c2 Detected Modified Deployment team-a/web rule=web action=Report by=kubectl-set changes=/spec/template/spec/containers/0/image"), "{s}");
    assert!(lines[1].contains(" c2 Corrected "), "{s}");

    let out = run(
        &nats,
        &["drift", "history", "Deployment/team-a/web", "-o", "json"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    let json: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let ids: Vec<&str> = json.iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            detected.id.as_str(),
            on_c3.id.as_str(),
            corrected.id.as_str()
        ]
    );

    // An object without events: nothing, and the command returns.
    let out = run(&nats, &["drift", "history", "Deployment/team-a/nothing"]).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(stdout(&out), "");

    let out = run(&nats, &["drift", "history", "web"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not KIND/NAMESPACE/NAME or KIND/NAME"),
        "{}",
        text(&out)
    );
}

#[tokio::test]
async fn watch_prints_a_line_per_new_event_and_exits_0_on_ctrl_c() {
    let nats = NatsServer::start().unwrap();
    let (_c, js, _store) = bus(&nats).await;
    // Stored before the watch starts: not shown (new events only).
    let old = event(
        "c2",
        ObjectRef::new("v1", "ConfigMap", Some("team-a"), "old"),
        "web",
        DriftPhase::Detected,
        "1",
    );
    publish(&js, &old).await;

    let mut child = fleetbus(&nats, &["drift", "watch", "--cluster", "c2"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let reader = {
        let lines = lines.clone();
        let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = out.next_line().await {
                lines.lock().unwrap().push(line);
            }
        })
    };
    // The watch subscribes some time after it starts; publish until it shows an event.
    let mut rv = 100;
    wait_for("watch to print a new event", DEADLINE, || {
        rv += 1;
        let e = event("c2", web(), "web", DriftPhase::Detected, &rv.to_string());
        let (js, lines) = (js.clone(), lines.clone());
        async move {
            // wait_for retries every ~100ms, each attempt with a newer event.
            publish(&js, &e).await;
            let seen = lines.lock().unwrap().clone();
            if seen.iter().any(|l| l.contains("Deployment team-a/web")) {
                Ok(())
            } else {
                Err(format!("{seen:?}"))
            }
        }
    })
    .await;
    // Another cluster's event, then one of c2: only c2's is printed (in stream order).
    let c1 = event(
        "c1",
        ObjectRef::new("v1", "ConfigMap", Some("team-a"), "from-c1"),
        "web",
        DriftPhase::Detected,
        "200",
    );
    publish(&js, &c1).await;
    let mut fixed = event("c2", web(), "web", DriftPhase::CorrectionFailed, "201");
    fixed.error = Some("webhook said no".into());
    publish(&js, &fixed).await;
    wait_for(
        "watch to print the CorrectionFailed event",
        DEADLINE,
        || {
            let lines = lines.clone();
            async move {
                let seen = lines.lock().unwrap().clone();
                if seen.iter().any(|l| {
                    l.contains(" c2 CorrectionFailed Modified Deployment team-a/web")
                        && l.ends_with("error=\"webhook said no\"")
                }) {
                    Ok(())
                } else {
                    Err(format!("{seen:?}"))
                }
            }
        },
    )
    .await;
    let seen = lines.lock().unwrap().clone();
    assert!(
        !seen
            .iter()
            .any(|l| l.contains("old") || l.contains("from-c1")),
        "{seen:?}"
    );

    // Ctrl-C: a normal end.
    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "watch ended with {status}");
    reader.await.unwrap();
}

/// A stand-in for an agent's command handler on `fleetbus.cmd.<cluster>.correct`: records
/// each request and answers with `reply`.
async fn responder(
    client: &async_nats::Client,
    cluster: &str,
    reply: CorrectReply,
) -> Arc<Mutex<Vec<CorrectRequest>>> {
    let mut sub = client
        .subscribe(format!("fleetbus.cmd.{cluster}.correct"))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (client, record) = (client.clone(), seen.clone());
    tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            let answer = match CorrectRequest::decode(&msg.payload) {
                Ok(req) => {
                    record.lock().unwrap().push(req);
                    reply.clone()
                }
                Err(e) => CorrectReply::refused(&reply.cluster, e.to_string()),
            };
            client
                .publish(msg.reply.unwrap(), answer.encode().unwrap().into())
                .await
                .unwrap();
        }
    });
    seen
}

#[tokio::test]
async fn correct_sends_the_request_and_prints_the_reply() {
    let nats = NatsServer::start().unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let ok = CorrectReply {
        cluster: "c2".into(),
        corrected: vec![web()],
        ..CorrectReply::default()
    };
    let seen = responder(&client, "c2", ok.clone()).await;

    let args = [
        "drift",
        "correct",
        "--cluster",
        "c2",
        "--rule",
        "web",
        "--kind",
        "Deployment",
        "--namespace",
        "team-a",
        "--name",
        "web",
    ];
    let out = run(&nats, &args).await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        stdout(&out),
        "corrected apps/v1/Deployment/team-a/web\ncluster c2: 1 corrected, 0 failed\n"
    );
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![CorrectRequest {
            rule: Some("web".into()),
            kind: Some("Deployment".into()),
            namespace: Some("team-a".into()),
            name: Some("web".into()),
        }]
    );

    // No filters: every drifted copy; JSON output is the protocol's reply.
    let out = run(
        &nats,
        &["drift", "correct", "--cluster", "c2", "-o", "json"],
    )
    .await;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(CorrectReply::decode(&out.stdout).unwrap(), ok);
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        &CorrectRequest::default()
    );

    // Some copies failed: printed, and a non-zero exit for scripts.
    let failing = CorrectReply {
        cluster: "c4".into(),
        corrected: vec![],
        failed: vec![CorrectFailure {
            object: web(),
            error: "admission denied".into(),
        }],
        error: None,
        retry_after_ms: None,
    };
    let _f = responder(&client, "c4", failing).await;
    let out = run(&nats, &["drift", "correct", "--cluster", "c4"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        stdout(&out).contains("failed    apps/v1/Deployment/team-a/web: admission denied"),
        "{}",
        text(&out)
    );

    // Refused as a whole: a one-line error.
    let _r = responder(
        &client,
        "c5",
        CorrectReply::refused("c5", "unsupported request"),
    )
    .await;
    let out = run(&nats, &["drift", "correct", "--cluster", "c5"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "fleetbus: error: cluster c5 refused the request: unsupported request"
    );
}

#[tokio::test]
async fn correct_fails_clearly_without_an_agent_or_a_reply() {
    let nats = NatsServer::start().unwrap();
    let out = run(&nats, &["drift", "correct", "--cluster", "c9"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "fleetbus: error: no agent answers for cluster c9 (is it running and connected?)"
    );

    // Subscribed but silent (a hung agent): the timeout.
    let client = async_nats::connect(nats.url()).await.unwrap();
    let _sub = client.subscribe("fleetbus.cmd.c3.correct").await.unwrap();
    client.flush().await.unwrap();
    let started = std::time::Instant::now();
    let out = run(
        &nats,
        &["drift", "correct", "--cluster", "c3", "--timeout", "300ms"],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        "fleetbus: error: no reply from cluster c3 within 300ms"
    );
    assert!(started.elapsed() < Duration::from_secs(10));

    // Garbage arguments are usage errors (clap, exit 2).
    let out = run(&nats, &["drift", "correct", "--timeout", "soon"]).await;
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));

    // No NATS at all; the password in the URL is not repeated.
    drop(nats);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_fleetbus"))
        .args(["drift", "ls", "--nats-url", "nats://c1:hunter2@127.0.0.1:1"])
        .output()
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("fleetbus: error: cannot connect to NATS at nats://c1:***@127.0.0.1:1"),
        "{}",
        text(&out)
    );
    assert!(!stderr.contains("hunter2"), "{}", text(&out));
}

#[tokio::test]
async fn watch_all_replays_stored_events_as_json_lines() {
    let nats = NatsServer::start().unwrap();
    let (_c, js, _store) = bus(&nats).await;
    let stored = event("c2", web(), "web", DriftPhase::Detected, "7");
    publish(&js, &stored).await;

    let mut child = fleetbus(&nats, &["drift", "watch", "--all", "-o", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(DEADLINE, out.next_line())
        .await
        .expect("no line from watch --all")
        .unwrap()
        .unwrap();
    // One compact JSON object per line: the protocol's event, unchanged.
    assert_eq!(DriftEvent::decode(first.as_bytes()).unwrap(), stored);
    // Then it follows: a later event arrives as the next line.
    let later = event("c2", web(), "web", DriftPhase::Resolved, "8");
    publish(&js, &later).await;
    let second = tokio::time::timeout(DEADLINE, out.next_line())
        .await
        .expect("no second line from watch --all")
        .unwrap()
        .unwrap();
    assert_eq!(DriftEvent::decode(second.as_bytes()).unwrap(), later);
    child.kill().await.unwrap();
}
