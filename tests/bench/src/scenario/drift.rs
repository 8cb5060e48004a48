//! Scenario 3: a patch on a copy (what `kubectl patch` sends) on c2 → the JSON
//! drift event on `fleetbus.drift.c2.>` (plain NATS subscriber) → the copy
//! corrected (seen by a watch on c2). The rule's drift mode is the default, Correct.

use std::time::{Duration, Instant};

use futures::StreamExt;

use crate::load;
use crate::mesh::{BenchMember, Fleet, SETUP};
use crate::objects;
use crate::scenario::Ctx;
use crate::stats::{ms, Samples};
use crate::table::Table;

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let n = ctx.pick(3, 200);
    let fleet = Fleet::start(2, false).await?;
    let c2 = &fleet.sinks()[0];
    let sink = c2.recorder().await?;
    load::create_many(&fleet.origin().configmaps(), "d", 0..n, 16).await?;
    sink.wait_count(n + 1, SETUP).await?;

    let nats = async_nats::connect(fleet.bus.url()).await?;
    let mut drift = nats.subscribe("fleetbus.drift.c2.>").await?;
    nats.flush().await?;

    let copies = c2.configmaps();
    let (mut detected, mut corrected) = (Samples::new(), Samples::new());
    for i in 0..n {
        let name = format!("d-{i}");
        let before = Instant::now();
        objects::set_mark(&copies, &name, "drifted").await?;
        let ack = Instant::now();
        let event_at = next_detected(&mut drift, &name, SETUP).await?;
        detected.push(event_at.saturating_duration_since(ack));
        let fixed = sink.wait_back(&name, "drifted", "0", before, SETUP).await?;
        corrected.push(fixed.saturating_duration_since(ack));
    }

    let mut t = Table::latency("3. Drift: patch on a copy (c2) → event on the bus → corrected");
    t.latency_row(
        "patch acknowledged → Detected event on fleetbus.drift.c2.>",
        &detected,
        ctx.floor,
        "p99 ≤ 50 ms",
    );
    t.latency_row(
        "patch acknowledged → corrected copy seen by a watch on c2",
        &corrected,
        ctx.floor,
        "p99 ≤ 100 ms",
    );
    t.samples = detected.len().min(corrected.len());
    let p99 = |s: &Samples, goal: u64| {
        s.percentile(99.0)
            .is_some_and(|p| p <= Duration::from_millis(goal))
    };
    let detected_v = t.goal(
        "drift event p99 ≤ 50 ms",
        format!("{} ms", ms(detected.percentile(99.0))),
        p99(&detected, 50),
    );
    let corrected_v = t.goal(
        "drift corrected p99 ≤ 100 ms",
        format!("{} ms", ms(corrected.percentile(99.0))),
        p99(&corrected, 100),
    );
    t.note(format!(
        "goal event p99 ≤ 50 ms: {detected_v} ({} ms); goal corrected p99 ≤ 100 ms: {corrected_v} ({} ms)",
        ms(detected.percentile(99.0)),
        ms(corrected.percentile(99.0)),
    ));
    Ok(vec![t])
}

/// Reads drift events until a `Detected` one for `name`; returns when it arrived.
async fn next_detected(
    sub: &mut async_nats::Subscriber,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<Instant> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let msg = tokio::time::timeout_at(deadline, sub.next())
            .await
            .map_err(|_| anyhow::anyhow!("no Detected drift event for {name} within {timeout:?}"))?
            .ok_or_else(|| anyhow::anyhow!("drift subscription ended"))?;
        let at = Instant::now();
        let v: serde_json::Value = serde_json::from_slice(&msg.payload)?;
        if v["phase"] == "Detected" && v["object"]["name"] == name {
            return Ok(at);
        }
    }
}
