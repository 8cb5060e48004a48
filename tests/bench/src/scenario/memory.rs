//! Scenario 6: resident memory (VmRSS from /proc) of the origin and the sink
//! agent as the number of synced objects grows.

use std::time::Duration;

use crate::load;
use crate::mesh::{BenchMember, Fleet, SETUP};
use crate::procfs;
use crate::scenario::Ctx;
use crate::table::Table;

/// How long syncing one step's objects may take.
const STEP: Duration = Duration::from_secs(600);

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    // Capped like propagation_at's (e.g. 10000: the goal's step, without
    // the long 50,000 one, for profiling).
    let max = super::env_cap(super::propagation_at::MAX_ENV);
    let steps: Vec<usize> = ctx
        .pick(vec![10, 30], vec![1_000, 10_000, 50_000])
        .into_iter()
        .filter(|n| *n <= max)
        .collect();
    let fleet = Fleet::start(2, false).await?;
    let (c1, c2) = (fleet.origin(), &fleet.sinks()[0]);
    let sink = c2.recorder().await?;
    let rss = |pid: Option<u32>| pid.and_then(procfs::rss_kib);
    let mib = |kib: Option<u64>| {
        kib.map(|k| format!("{:.1}", k as f64 / 1024.0))
            .unwrap_or_else(|| "-".into())
    };
    // What a copy costs: the growth of RSS since the first row (one
    // object), divided by the objects added since.
    let (c1_base, c2_base) = (rss(c1.agent_pid()), rss(c2.agent_pid()));
    let per_copy = |kib: Option<u64>, base: Option<u64>, n: usize| match (kib, base) {
        (Some(k), Some(b)) if n > 1 => {
            let bytes = k.saturating_sub(b) as f64 * 1024.0 / (n - 1) as f64;
            format!("{bytes:.0}")
        }
        _ => "-".into(),
    };
    let mut t = Table::new(
        "6. Memory: agent RSS by synced objects",
        &[
            "synced objects",
            "origin agent c1 MiB",
            "sink agent c2 MiB",
            "origin bytes/copy",
            "sink bytes/copy",
            "devcluster c1 MiB",
            "nats-server MiB",
        ],
    );
    let row = |t: &mut Table, n: usize| {
        let (o, s) = (rss(c1.agent_pid()), rss(c2.agent_pid()));
        t.row([
            n.to_string(),
            mib(o),
            mib(s),
            per_copy(o, c1_base, n),
            per_copy(s, c2_base, n),
            mib(rss(c1.cluster.pid())),
            // Always one nats-server here (memory is not a topology scenario).
            mib(rss(fleet.bus.pids().first().copied())),
        ]);
    };
    row(&mut t, 1);
    let mut created = 0;
    let mut at_10k = None;
    for &n in &steps {
        load::create_many(&c1.configmaps(), "m", created..n, 32).await?;
        created = n;
        if let Err(e) = sink.wait_count(n + 1, STEP.max(SETUP)).await {
            // Keep the rows measured so far; say where it stopped.
            t.incomplete(format!("stopped at {n} objects: {e:#}"));
            break;
        }
        row(&mut t, n + 1);
        eprintln!("fleetbus-bench: memory: {n} objects synced");
        if n == 10_000 {
            at_10k = [c1.agent_pid(), c2.agent_pid()]
                .into_iter()
                .filter_map(|p| p.and_then(procfs::rss_kib))
                .max();
        }
    }
    // The first row is taken before anything was synced: not a sample.
    t.samples = t.rows.len().saturating_sub(1);
    if max != usize::MAX {
        t.note(format!(
            "Steps capped at {max} objects by {}.",
            super::propagation_at::MAX_ENV
        ));
    }
    t.note("RSS is read right after the last copy of a step was seen on c2 (1 = only the warm-up object).");
    t.note("bytes/copy: the agent's RSS growth since the first row divided by the objects added since (allocator slack included).");
    if let Some(k) = at_10k {
        let v = t.goal(
            "agent RSS at 10,000 objects ≤ 64 MiB",
            format!("{:.1} MiB (larger of the two agents)", k as f64 / 1024.0),
            k <= 64 * 1024,
        );
        t.note(format!(
            "goal agent RSS at 10,000 objects ≤ 64 MiB: {v} (larger of the two agents: {:.1} MiB)",
            k as f64 / 1024.0
        ));
    }
    Ok(vec![t])
}
