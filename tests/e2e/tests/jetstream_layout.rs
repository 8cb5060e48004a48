//! The JetStream layout end to end: agents create the streams and the registry
//! bucket of `fleetbus_schemas::jetstream::Layout`, agree with each other, and
//! refuse a stream that exists with another configuration.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::process::ExitStatus;
use std::time::Duration;

use async_nats::jetstream::{self, stream};
use fleetbus_schemas::jetstream::{Discard, Layout, Storage, StreamSpec};
use fleetbus_testsupport::{
    free_socket_addr, wait_for_blocking, Agent, AgentCommand, DevCluster, DevClusterOpts, Member,
    NatsServer,
};

const CONVERGE: Duration = Duration::from_secs(30);

/// The agent of cluster `name` on `nats`, with the agent's default timings.
fn agent(nats: &NatsServer, name: &str) -> AgentCommand {
    AgentCommand::new(name).nats_url(nats.url())
}

/// A devcluster `name` with its agent, not running yet.
async fn prepare_member(nats: &NatsServer, name: &str) -> Member {
    Member::prepare(DevClusterOpts::new(name), agent(nats, name))
        .await
        .expect("start devcluster")
}

async fn start_member(nats: &NatsServer, name: &str) -> Member {
    let mut m = prepare_member(nats, name).await;
    m.agent.spawn().expect("start agent");
    m
}

async fn wait_ready(m: &mut Member) {
    common::wait_readyz_at("agent", &m.metrics_addr, 200, CONVERGE).await;
    assert!(m.agent.is_running(), "agent died:\n{}", m.agent.log());
}

async fn js(nats: &NatsServer) -> jetstream::Context {
    jetstream::new(async_nats::connect(nats.url()).await.unwrap())
}

/// Compares what the server holds with the schemas spec directly (not through
/// the agent's conversion, which is what is under test).
fn assert_matches_spec(spec: &StreamSpec, found: &stream::Config) {
    let name = &spec.name;
    assert_eq!(found.subjects, spec.subjects, "{name}");
    assert_eq!(
        found.max_messages_per_subject, spec.max_msgs_per_subject,
        "{name}"
    );
    assert_eq!(found.max_bytes, spec.max_bytes, "{name}");
    assert_eq!(found.max_age, spec.max_age.unwrap_or_default(), "{name}");
    assert_eq!(found.duplicate_window, spec.duplicate_window, "{name}");
    assert_eq!(found.allow_rollup, spec.allow_rollup, "{name}");
    assert_eq!(found.allow_direct, spec.allow_direct, "{name}");
    assert_eq!(found.deny_delete, spec.deny_delete, "{name}");
    assert_eq!(found.deny_purge, spec.deny_purge, "{name}");
    assert_eq!(found.num_replicas, spec.replicas, "{name}");
    assert_eq!(
        found.description.as_deref(),
        Some(spec.description.as_str()),
        "{name}"
    );
    let storage = match spec.storage {
        Storage::File => stream::StorageType::File,
        Storage::Memory => stream::StorageType::Memory,
    };
    assert_eq!(found.storage, storage, "{name}");
    let discard = match spec.discard {
        Discard::Old => stream::DiscardPolicy::Old,
        Discard::New => stream::DiscardPolicy::New,
    };
    assert_eq!(found.discard, discard, "{name}");
}

/// The one `error:` line the agent prints on stderr before exiting 1. Not
/// necessarily the last line of the log: the NATS client may still log its
/// connection closing after it.
fn error_line(log: &str) -> &str {
    let errors: Vec<&str> = log.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{log}");
    errors[0]
}

async fn wait_exit(agent: &mut Agent) -> ExitStatus {
    tokio::task::block_in_place(|| {
        wait_for_blocking("the agent to exit", CONVERGE, || {
            agent
                .exit_status()
                .ok_or_else(|| "still running".to_owned())
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_create_the_layout_and_agree_on_it() {
    let nats = NatsServer::start().unwrap();
    // Two agents started at the same moment race to create the same streams
    // (both devclusters are up first, so the agents start back to back).
    let mut a = prepare_member(&nats, "a").await;
    let mut b = prepare_member(&nats, "b").await;
    a.agent.spawn().unwrap();
    b.agent.spawn().unwrap();
    wait_ready(&mut a).await;
    wait_ready(&mut b).await;

    let js = js(&nats).await;
    let layout = Layout::default();
    let names: Vec<String> = layout.streams().iter().map(|s| s.name.clone()).collect();
    assert_eq!(
        names,
        [
            "FLEETBUS_OBJECTS",
            "FLEETBUS_DRIFT",
            "FLEETBUS_STATUS",
            "FLEETBUS_CONFLICTS",
            "FLEETBUS_ROLLOUTS",
            "FLEETBUS_VERSIONS",
            "FLEETBUS_PLACEMENTS",
            "FLEETBUS_SERVICES"
        ]
    );
    for spec in layout.streams() {
        let found = js.get_stream(&spec.name).await.unwrap();
        assert_matches_spec(&spec, &found.cached_info().config);
    }
    for bucket in [layout.registry_bucket(), layout.drift_bucket()] {
        let kv = js.get_key_value(&bucket.bucket).await.unwrap();
        let status = kv.status().await.unwrap();
        assert_eq!(status.history(), bucket.history, "{}", bucket.bucket);
        assert_eq!(status.info.config.num_replicas, bucket.replicas);
        assert_eq!(status.max_age(), bucket.max_age.unwrap_or_default());
    }

    // A third agent, later, finds everything in place and accepts it.
    let mut c = start_member(&nats, "c").await;
    wait_ready(&mut c).await;
    for m in [&mut a, &mut b, &mut c] {
        assert!(m.agent.is_running(), "{}", m.agent.log());
        let log = m.agent.log();
        assert!(!log.contains("different configuration"), "{log}");
    }
    // Nothing was changed by the later agents.
    for spec in layout.streams() {
        let found = js.get_stream(&spec.name).await.unwrap();
        assert_matches_spec(&spec, &found.cached_info().config);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_from_before_a_stream_existed_gets_it_on_agent_start() {
    let nats = NatsServer::start().unwrap();
    let js = js(&nats).await;
    let mut a = start_member(&nats, "a").await;
    wait_ready(&mut a).await;
    // A deployment made by an agent that predates FLEETBUS_CONFLICTS: every other stream
    // is there, that one is not.
    let conflicts = Layout::default().conflicts_stream();
    js.delete_stream(&conflicts.name).await.unwrap();
    assert!(js.get_stream(&conflicts.name).await.is_err());
    // The next agent start creates it, and accepts the rest as it is.
    let mut b = start_member(&nats, "b").await;
    wait_ready(&mut b).await;
    let found = fleetbus_testsupport::wait_for("FLEETBUS_CONFLICTS to exist", CONVERGE, || {
        let js = js.clone();
        let name = conflicts.name.clone();
        async move { js.get_stream(&name).await.map_err(|e| e.to_string()) }
    })
    .await;
    assert_matches_spec(&conflicts, &found.cached_info().config);
    let log = b.agent.log();
    assert!(!log.contains("different configuration"), "{log}");
    assert!(a.agent.is_running() && b.agent.is_running(), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_with_another_config_stops_start_up() {
    let nats = NatsServer::start().unwrap();
    let js = js(&nats).await;
    let drift = Layout::default().drift_stream();
    // Someone created DRIFT by hand, keeping events for one hour only.
    js.create_stream(stream::Config {
        name: drift.name.clone(),
        subjects: drift.subjects.clone(),
        max_age: Duration::from_secs(3600),
        max_messages_per_subject: -1,
        ..stream::Config::default()
    })
    .await
    .unwrap();

    let mut m = start_member(&nats, "a").await;
    let status = wait_exit(&mut m.agent).await;
    let log = m.agent.log();
    assert_eq!(status.code(), Some(1), "{log}");
    let last = error_line(&log);
    assert!(last.contains("FLEETBUS_DRIFT"), "{log}");
    assert!(last.contains("max_age (expected 7days, found 1h)"), "{log}");
    // The agent reported, it did not "fix" the stream.
    let found = js.get_stream(&drift.name).await.unwrap();
    assert_eq!(
        found.cached_info().config.max_age,
        Duration::from_secs(3600)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_beyond_a_single_server_are_refused() {
    let nats = NatsServer::start().unwrap();
    let cluster = DevCluster::start(DevClusterOpts::new("r3")).unwrap();
    // The flag is read from the environment like every other one.
    let cmd = agent(&nats, "r3")
        .kubeconfig(cluster.kubeconfig())
        .metrics_addr(free_socket_addr());
    let mut agent = Agent::start_with_env(cmd.argv(), [("FLEETBUS_REPLICAS", "3")]).unwrap();
    let status = wait_exit(&mut agent).await;
    let log = agent.log();
    assert_eq!(status.code(), Some(1), "{log}");
    let last = error_line(&log);
    assert!(last.contains("3 replicas"), "{log}");
}
