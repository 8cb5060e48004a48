//! Scenario 2: one 1 KiB ConfigMap at a time, created on c1; latency from just
//! before the create on c1 to the copy seen by a watch on c2 — the span the
//! floor (scenario 1) times, so the ratio compares like with like.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::mesh::{BenchMember, Fleet, SETUP};
use crate::objects;
use crate::recorder::Recorder;
use crate::scenario::Ctx;
use crate::stats::{ms, Samples};
use crate::table::Table;

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let n = ctx.pick(5, 500);
    let fleet = Fleet::start_on(ctx.topology, 2, false).await?;
    let sink = fleet.sinks()[0].recorder().await?;
    let origin = fleet.origin().configmaps();
    let lat = one_at_a_time(&origin, &sink, "p", n).await?;
    let mut t = Table::latency("2. Propagation of one 1 KiB ConfigMap at a time (c1 → c2)");
    t.latency_row(
        "before the c1 create → copy seen by a watch on c2",
        &lat,
        ctx.floor,
        "p50 ≤ 3× floor, p99 ≤ 25 ms",
    );
    t.samples = lat.len();
    t.summarize("2. propagation: c1 create → copy on c2", &lat, Vec::new());
    let p50_ok = match (lat.p50(), ctx.floor) {
        (Some(p), Some(f)) => p <= f * 3,
        _ => false,
    };
    let p99_ok = lat
        .percentile(99.0)
        .is_some_and(|p| p <= Duration::from_millis(25));
    let ratio = match (lat.p50(), ctx.floor) {
        (Some(p), Some(f)) if !f.is_zero() => format!("{:.2}×", p.as_secs_f64() / f.as_secs_f64()),
        _ => "-".to_owned(),
    };
    let p50_v = t.goal(
        "propagation p50 ≤ 3× floor",
        format!(
            "{} ms = {ratio} the floor's {} ms",
            ms(lat.p50()),
            ms(ctx.floor)
        ),
        p50_ok,
    );
    let p99_v = t.goal(
        "propagation p99 ≤ 25 ms",
        format!("{} ms", ms(lat.percentile(99.0))),
        p99_ok,
    );
    t.note(format!(
        "goal p50 ≤ 3× floor: {p50_v} (p50 {} ms, floor p50 {} ms); goal p99 ≤ 25 ms: {p99_v} (p99 {} ms)",
        ms(lat.p50()),
        ms(ctx.floor),
        ms(lat.percentile(99.0)),
    ));
    t.note("Objects are created one after another; the next is written only after the previous copy was seen.");
    Ok(vec![t])
}

/// Creates `<prefix>-<i>` (mark "1") on c1 for `i` in `0..n`, each once the
/// previous copy was seen by `sink`; the latency of each from just before
/// its create to its copy seen.
pub async fn one_at_a_time(
    origin: &Api<ConfigMap>,
    sink: &Recorder,
    prefix: &str,
    n: usize,
) -> anyhow::Result<Samples> {
    Ok(one_at_a_time_split(origin, sink, prefix, n).await?.whole)
}

/// One object at a time, each sample split where the origin's API server
/// acknowledged the create: what the origin's devcluster took, and what came
/// after it (the agents, NATS and the sink's devcluster).
pub struct Split {
    /// Before the create → copy seen on the sink.
    pub whole: Samples,
    /// Before the create → the origin acknowledged it.
    pub origin_ack: Samples,
    /// The origin's acknowledgement → copy seen on the sink.
    pub after_ack: Samples,
}

/// [`one_at_a_time`], with each sample split at the origin's acknowledgement.
pub async fn one_at_a_time_split(
    origin: &Api<ConfigMap>,
    sink: &Recorder,
    prefix: &str,
    n: usize,
) -> anyhow::Result<Split> {
    let mut out = Split {
        whole: Samples::new(),
        origin_ack: Samples::new(),
        after_ack: Samples::new(),
    };
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let start = Instant::now();
        objects::create(origin, &name, "1").await?;
        let acked = Instant::now();
        let seen = sink.wait_seen(&name, "1", SETUP).await?;
        out.whole.push(seen.saturating_duration_since(start));
        out.origin_ack.push(acked.saturating_duration_since(start));
        out.after_ack.push(seen.saturating_duration_since(acked));
    }
    Ok(out)
}
