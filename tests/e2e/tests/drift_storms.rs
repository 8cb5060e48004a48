//! Drift storms end to end: another writer
//! fighting fleetbus over a copy, a burst of edits to one copy, and the size
//! limits of the drift stream. Real nats-server, devclusters and agents.
//!
//! Drift events are read by a plain NATS subscriber as JSON `Value`s (a
//! client that knows nothing of fleetbus); the other writers are kube
//! clients with their own field managers, as a controller or a script is.
//!
//! Every test syncs the ConfigMap `a/cfg` (`data.v` = "ours") from c1 to c2
//! with a rule `cfg` created on c1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_schemas::jetstream::Layout;
use fleetbus_testsupport::{wait_for, NatsServer};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event};
use kube::api::{ListParams, Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};
use tokio::task::JoinHandle;

fn rule() -> String {
    RuleBuilder::new("cfg").namespaces(&["a"]).yaml()
}

/// The drift subject of `a/<name>` on c2.
fn subject(name: &str) -> String {
    format!("fleetbus.drift.c2.core.ConfigMap.a.{name}")
}

fn configmaps() -> kube::api::ApiResource {
    resource("", "v1", "ConfigMap", "configmaps")
}

fn configmap_yaml(name: &str, v: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: a\ndata:\n  v: {v}\n"
    )
}

/// c1 and c2 with namespace `a`, the rule on c1 and `a/cfg` copied to c2;
/// the drift subscription is open before anything drifts.
struct Setup {
    nats: NatsServer,
    m: Vec<Member>,
    drift: async_nats::Subscriber,
}

impl Setup {
    /// The fleet, with `c2_flags` for c2's agent.
    async fn start(c2_flags: &[&str]) -> Setup {
        let nats = NatsServer::start().unwrap();
        let m = vec![
            Member::start(&nats, "c1", "c1", &[]).await,
            Member::start(&nats, "c2", "c2", c2_flags).await,
        ];
        wait_mesh(&[&m[0], &m[1]], &["c1", "c2"]).await;
        let drift = subscribe_drift(&nats).await;
        for x in &m {
            create_ns(x, "a").await;
        }
        apply_yaml(&m[0], &rule());
        wait_rule_copy(&m[1], "cfg", "c1").await;
        apply_yaml(&m[0], &configmap_yaml("cfg", "ours"));
        let s = Setup { nats, m, drift };
        s.wait_v("cfg", "ours").await;
        s
    }

    fn c2(&self) -> &Member {
        &self.m[1]
    }

    async fn wait_v(&self, name: &str, want: &'static str) {
        wait_copy(
            self.c2(),
            &configmaps(),
            Some("a"),
            name,
            "c1",
            "cfg",
            data_is(json!({ "v": want })),
        )
        .await;
    }

    /// `data.v` of c2's `a/cfg` now.
    async fn v_now(&self) -> Value {
        let o = get_dynamic(self.c2(), &configmaps(), Some("a"), "cfg")
            .await
            .unwrap()
            .expect("a/cfg on c2");
        data(&o)["v"].clone()
    }

    /// Reads drift events of `a/cfg` until `done` says the ones read so far
    /// are enough; panics after `within` with what it read.
    async fn read_until(
        &mut self,
        within: Duration,
        what: &str,
        done: impl Fn(&[Value]) -> bool,
    ) -> Vec<Value> {
        let want = subject("cfg");
        let mut seen: Vec<Value> = Vec::new();
        let deadline = tokio::time::Instant::now() + within;
        while !done(&seen) {
            match tokio::time::timeout_at(deadline, self.drift.next()).await {
                Ok(Some(msg)) if msg.subject.as_str() == want => {
                    seen.push(serde_json::from_slice(&msg.payload).expect("drift JSON"));
                }
                Ok(Some(_)) => {}
                Ok(None) => panic!("drift subscription ended waiting for {what}"),
                Err(_) => panic!(
                    "waited {within:?} for {what}; read {}: {seen:#?}",
                    seen.len()
                ),
            }
        }
        seen
    }
}

/// A kube client of c2 with its own field manager, merge-patching `data.v`
/// of `a/cfg`, as a controller or a script would.
fn writer(m: &Member) -> Api<ConfigMap> {
    Api::namespaced(m.client.clone(), "a")
}

async fn set_v(api: &Api<ConfigMap>, manager: &str, v: &str) {
    api.patch(
        "cfg",
        &PatchParams {
            field_manager: Some(manager.to_owned()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({ "data": { "v": v } })),
    )
    .await
    .unwrap_or_else(|e| panic!("{manager}: patch a/cfg: {e}"));
}

/// A controller fighting over `a/cfg`: re-applies "theirs" as field manager
/// "fighter" every 100 ms, for `max` or until `stop`; returns how many times.
fn fight(api: Api<ConfigMap>, max: Duration, stop: Arc<AtomicBool>) -> JoinHandle<u32> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        let end = tokio::time::Instant::now() + max;
        let mut n = 0u32;
        while tokio::time::Instant::now() < end && !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            set_v(&api, "fighter", "theirs").await;
            n += 1;
        }
        n
    })
}

/// Writes of ConfigMaps on c2 (the devcluster counts state-changing writes).
async fn configmap_writes(m: &Member) -> u64 {
    writes(m).await["core/configmaps"].as_u64().unwrap_or(0)
}

/// The sum of `count` (1 when absent, as older agents sent) of `phase`.
fn total(events: &[Value], phase: &str) -> u64 {
    events
        .iter()
        .filter(|e| e["phase"] == phase)
        .map(|e| e["count"].as_u64().unwrap_or(1))
        .sum()
}

/// The Events about c2's `a/cfg`.
async fn cfg_events(m: &Member) -> Result<Vec<Event>, String> {
    Api::<Event>::namespaced(m.client.clone(), "a")
        .list(&ListParams::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| e.involved_object.name.as_deref() == Some("cfg"))
                .collect()
        })
        .map_err(|e| e.to_string())
}

/// 1. A writer re-applying its own value every 100 ms for 12 s: after a few
/// corrections the agent stops, publishes a `Fight` naming the writer and
/// the field, and leaves the copy alone (writes bounded); once the writer
/// has stopped, `fleetbus drift correct` restores the copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fighting_writer_is_reported_and_left_alone() {
    let mut s = Setup::start(&[]).await;
    let w0 = configmap_writes(s.c2()).await;
    let fighter = fight(writer(s.c2()), Duration::from_secs(12), Arc::default());

    let events = s
        .read_until(Duration::from_secs(12), "a Fight event", |seen| {
            seen.iter().any(|e| e["phase"] == "Fight")
        })
        .await;
    let fight = events.last().unwrap();
    assert_eq!(fight["changedBy"]["manager"], "fighter", "{fight:#}");
    assert_eq!(fight["action"], "Report", "{fight:#}");
    assert!(fight["resumeAt"].is_string(), "{fight:#}");
    assert!(fight["count"].as_u64().unwrap() >= 2, "{fight:#}");
    let change = &fight["changes"][0];
    assert_eq!(
        (&change["path"], &change["desired"], &change["live"]),
        (&json!("/data/v"), &json!("ours"), &json!("theirs")),
        "{fight:#}"
    );
    // The drifts before it add up: each Detected was corrected.
    assert!(total(&events, "Detected") >= 2, "{events:#?}");

    let patches = fighter.await.unwrap();
    // Correction stopped: the writer's value stays. A copy synced after the
    // writer stopped is the barrier that the agent has had its passes.
    apply_yaml(&s.m[0], &configmap_yaml("later", "x"));
    s.wait_v("later", "x").await;
    assert_eq!(s.v_now().await, json!("theirs"));
    let wrote = configmap_writes(s.c2()).await - w0;
    eprintln!(
        "fight: {patches} re-applies, {wrote} ConfigMap writes, {} drift events until the Fight",
        events.len()
    );
    // Before the fix: two writes per re-apply (~240). Now: the corrections
    // before the fight, the writer's changes back, the later copy.
    assert!(
        wrote <= 30,
        "{wrote} ConfigMap writes for {patches} re-applies; agent log:\n{}",
        s.c2().agent.log()
    );
    // The fight is in the drift state and the rule's status.
    wait_rule(s.c2(), "cfg", "the fight in the rule status", |r| {
        let text = format!("{:?}", r.status);
        text.contains("fighter").then_some(()).ok_or(text)
    })
    .await;

    // The writer has stopped: an operator asks, and the copy is corrected.
    let (code, out, err) = fleetbus_cli(
        &s.nats,
        &["drift", "correct", "--cluster", "c2", "--name", "cfg"],
    )
    .await;
    assert_eq!(code, Some(0), "{out}{err}");
    s.wait_v("cfg", "ours").await;
    let after = s
        .read_until(SYNC, "the Corrected event", |seen| {
            seen.iter().any(|e| e["phase"] == "Corrected")
        })
        .await;
    assert_eq!(after.last().unwrap()["phase"], "Corrected", "{after:#?}");
}

/// 1b. The fight ends by itself: once the writer has stopped, the agent
/// corrects the copy after the backoff (2 s here), without an operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fight_ends_when_the_writer_stops() {
    let mut s = Setup::start(&["--drift-fight-backoff", "2s"]).await;
    let stop = Arc::new(AtomicBool::new(false));
    let fighter = fight(writer(s.c2()), Duration::from_secs(20), stop.clone());
    let events = s
        .read_until(SYNC, "a Fight event", |seen| {
            seen.iter().any(|e| e["phase"] == "Fight")
        })
        .await;
    assert_eq!(
        events.last().unwrap()["changedBy"]["manager"],
        "fighter",
        "{events:#?}"
    );
    stop.store(true, Ordering::Relaxed);
    fighter.await.unwrap();
    s.wait_v("cfg", "ours").await;
    let after = s
        .read_until(SYNC, "the Corrected event after the backoff", |seen| {
            seen.last().is_some_and(|e| e["phase"] == "Corrected")
        })
        .await;
    assert!(
        after.iter().all(|e| e["changedBy"]["manager"] == "fighter"),
        "{after:#?}"
    );
}

/// 2. 500 edits of one copy 20 ms apart by one writer: a handful of drift
/// events whose counts add up, and a handful of Kubernetes Events with
/// counts, instead of a thousand of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storm_of_edits_is_coalesced() {
    let mut s = Setup::start(&[]).await;
    let api = writer(s.c2());
    let storm = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        for i in 0..500 {
            tick.tick().await;
            set_v(&api, "stormer", &format!("storm-{i}")).await;
        }
    });
    storm.await.unwrap();
    s.wait_v("cfg", "ours").await;
    // One more edit, by another writer, once the storm is over: its
    // correction is announced after everything the storm left held.
    set_v(&writer(s.c2()), "finisher", "last").await;
    let events = s
        .read_until(SYNC, "the correction of the last edit", |seen| {
            seen.iter()
                .any(|e| e["phase"] == "Corrected" && e["changedBy"]["manager"] == "finisher")
        })
        .await;
    // The counts add up: every drift detected has ended (corrected, or
    // undone by the next edit), except those detected again at a newer
    // version after a failed correction (the next edit came first).
    let closed = total(&events, "Corrected") + total(&events, "Resolved");
    let failed = total(&events, "CorrectionFailed");
    let detected = total(&events, "Detected");
    assert!(
        closed <= detected && detected <= closed + failed,
        "detected {detected}, closed {closed}, failed {failed}: {events:#?}"
    );
    assert!(
        events.len() <= 40,
        "{} drift events for {detected} drifts",
        events.len()
    );
    // Coalesced: more drifts than events. Under load the agent may see few
    // drifts (a correction refused with a conflict backs off, and the edits
    // meanwhile make no new drift: a CI run saw 4, each its own event), and
    // then nothing needed coalescing.
    let detected_events = events.iter().filter(|e| e["phase"] == "Detected").count();
    assert!(
        detected <= 10 || u64::try_from(detected_events).unwrap_or(u64::MAX) < detected,
        "{detected} drifts in {detected_events} Detected events: {events:#?}"
    );
    assert!(events.iter().all(|e| e["phase"] != "Fight"), "{events:#?}");
    // At most one drift per edit: the 500 and the last one.
    assert!((2..=501).contains(&detected), "{detected}");

    // The Kubernetes Events are aggregated: few objects, counts that add up
    // to what the drift events say.
    let evs = wait_for(
        "the DriftDetected Events to count every drift",
        SYNC,
        || async {
            let evs = cfg_events(s.c2()).await?;
            let counted: i64 = evs
                .iter()
                .filter(|e| e.reason.as_deref() == Some("DriftDetected"))
                .map(|e| i64::from(e.count.unwrap_or(1)))
                .sum();
            (counted == detected as i64)
                .then_some(evs.clone())
                .ok_or_else(|| format!("{counted} of {detected}: {evs:#?}"))
        },
    )
    .await;
    eprintln!(
        "storm: 500 edits, {} drift events for {detected} drifts, {} Event objects",
        events.len(),
        evs.len()
    );
    assert!(evs.len() <= 8, "{} Events: {evs:#?}", evs.len());
    assert!(evs.iter().any(|e| e.count > Some(1)), "{evs:#?}");
}

/// 3. The drift stream has a byte limit and a per-subject limit, and a
/// stream created before they existed gets them when an agent starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drift_stream_is_bounded() {
    let nats = NatsServer::start().unwrap();
    let js = jetstream::new(async_nats::connect(nats.url()).await.unwrap());
    let spec = Layout::default().drift_stream();
    // FLEETBUS_DRIFT as agents before the limits created it.
    js.create_stream(stream::Config {
        name: spec.name.clone(),
        description: Some(spec.description.clone()),
        subjects: spec.subjects.clone(),
        max_messages_per_subject: -1,
        max_age: spec.max_age.unwrap(),
        duplicate_window: spec.duplicate_window,
        deny_delete: true,
        ..stream::Config::default()
    })
    .await
    .unwrap();

    let mut a = Member::start(&nats, "a", "a", &[]).await;
    a.wait_ready().await;
    let mut info = js.get_stream(&spec.name).await.unwrap();
    let config = &info.info().await.unwrap().config;
    assert_eq!(
        (config.max_bytes, config.max_messages_per_subject),
        (256 * 1024 * 1024, 1_000),
        "{config:#?}\n{}",
        a.agent.log()
    );
    assert_eq!(config.max_age, Duration::from_secs(7 * 24 * 3600));
    // What else was there is kept, and the agent is running.
    assert!(config.deny_delete);
    assert!(a.agent.is_running(), "{}", a.agent.log());
}
