//! Scenario 1, the floor: what one change costs without the agent, done by the
//! harness itself in the same run: devcluster write acknowledged, JetStream
//! publish-ack of the envelope, devcluster write on the other side.
//!
//! The floor spans exactly what scenario 2 (propagation) times: from just before
//! the origin write to the copy seen by a watch on the sink. Both include the
//! origin write, so the ratio compares like with like.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use fleetbus_schemas::envelope::Envelope;
use fleetbus_testsupport::NatsServer;

use crate::load;
use crate::mesh::{BenchMember, Member, SETUP};
use crate::objects;
use crate::scenario::Ctx;
use crate::stats::Samples;
use crate::table::Table;

/// The floor table and its p50 (the denominator of every ratio).
pub async fn run(ctx: &Ctx) -> anyhow::Result<(Vec<Table>, Option<Duration>)> {
    let n = ctx.pick(5, 500);
    let nats = NatsServer::start()?;
    let a = Member::bench_cluster("floor-a", false, None).await?;
    let b = Member::bench_cluster("floor-b", false, None).await?;
    let js = jetstream::new(async_nats::connect(nats.url()).await?);
    // Like FLEETBUS_OBJECTS: file storage, last value per subject.
    js.get_or_create_stream(jetstream::stream::Config {
        name: "BENCH_FLOOR".into(),
        subjects: vec!["bench.floor.>".into()],
        max_messages_per_subject: 1,
        storage: jetstream::stream::StorageType::File,
        ..Default::default()
    })
    .await?;
    let sink_watch = b.recorder().await?;
    let (api_a, api_b) = (a.configmaps(), b.configmaps());

    let (mut write_a, mut publish, mut write_b, mut acked, mut floor, mut visible) = (
        Samples::new(),
        Samples::new(),
        Samples::new(),
        Samples::new(),
        Samples::new(),
        Samples::new(),
    );
    for i in 0..n {
        let name = format!("floor-{i}");
        let t0 = Instant::now();
        let created = api_a
            .create(&Default::default(), &objects::configmap(&name, "1"))
            .await?;
        let t1 = Instant::now();
        let env = Envelope::snapshot(
            "floor-a",
            None,
            serde_json::to_value(&created)?,
            chrono::Utc::now(),
        )?;
        js.publish(format!("bench.floor.{name}"), env.encode()?.into())
            .await?
            .await?;
        let t2 = Instant::now();
        objects::create(&api_b, &name, "1").await?;
        let t3 = Instant::now();
        let seen = sink_watch.wait_seen(&name, "1", SETUP).await?;
        write_a.push(t1 - t0);
        publish.push(t2 - t1);
        write_b.push(t3 - t2);
        floor.push(seen.saturating_duration_since(t0));
        acked.push(t3 - t0);
        visible.push(seen.saturating_duration_since(t1));
    }
    let p50 = floor.p50();

    let mut t = Table::latency("1. Floor (harness only, no agent)");
    t.latency_row("devcluster write ack (origin)", &write_a, p50, "");
    t.latency_row("JetStream publish-ack (1 KiB envelope)", &publish, p50, "");
    t.latency_row("devcluster write ack (sink)", &write_b, p50, "");
    t.latency_row(
        "the three above in sequence (sink write acknowledged)",
        &acked,
        p50,
        "",
    );
    t.latency_row(
        "**floor** = before the origin write → sink copy seen by a watch (scenario 2's span)",
        &floor,
        p50,
        "denominator",
    );
    t.latency_row("origin ack → sink copy seen by a watch", &visible, p50, "");
    t.samples = floor.len();

    // The write ceiling of one idle devcluster, for scenario 4's goal.
    let names: Vec<String> = (0..100).map(|i| format!("floor-w-{i}")).collect();
    load::create_many(&api_a, "floor-w", 0..names.len(), 16).await?;
    let secs = ctx.pick(1, 5);
    let writes = load::update_for(&api_a, Arc::new(names), 32, Duration::from_secs(secs)).await?;
    t.note(format!(
        "devcluster write ceiling (merge patches, 32 writers, no agent): {:.0} updates/s over {secs} s",
        writes.len() as f64 / secs as f64
    ));
    t.note("Each sample runs the three steps one after another; the sink watch is the harness's own kube-rs watcher.");
    Ok((vec![t], p50))
}
