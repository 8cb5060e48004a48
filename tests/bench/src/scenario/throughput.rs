//! Scenario 4: one origin under sustained updates. The harness updates K
//! ConfigMaps on c1 round robin as fast as c1's API server acknowledges (64
//! writers) for the run's duration; a plain NATS subscriber counts what c1's
//! agent publishes, a watch on c2 timestamps every version that arrives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::ListParams;
use kube::ResourceExt;

use crate::load;
use crate::mesh::{BenchMember, Fleet, Member, SETUP};
use crate::procfs;
use crate::profile::Perf;
use crate::recorder::MARK;
use crate::scenario::Ctx;
use crate::stats::{ms, Samples};
use crate::table::Table;

/// How long the sink may take to catch up after the writers stopped.
const DRAIN: Duration = Duration::from_secs(180);
/// How long the sink may take to apply the burst's copies.
const BURST_APPLY: Duration = Duration::from_secs(600);

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let k = ctx.pick(50, 1000);
    let secs = ctx.pick(2u64, 30);
    let writers = ctx.pick(8, 64);
    let fleet = Fleet::start_on(ctx.topology, 2, false).await?;
    let (c1, c2) = (fleet.origin(), &fleet.sinks()[0]);
    let sink = c2.recorder().await?;
    let origin = c1.configmaps();
    load::create_many(&origin, "t", 0..k, 32).await?;
    sink.wait_count(k + 1, SETUP).await?;

    // Count what c1's agent publishes (core NATS sees JetStream publishes
    // too), on the server c1's agent talks to.
    let nats = async_nats::connect(fleet.bus.url_of("c1")).await?;
    let mut published = nats.subscribe("fleetbus.obj.c1.>").await?;
    nats.flush().await?;
    let publishes = Arc::new(AtomicU64::new(0));
    let counter = publishes.clone();
    let count_task = tokio::spawn(async move {
        while published.next().await.is_some() {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    });

    let mut pids = vec![
        ("agent c1".to_owned(), vec![c1.agent_pid()]),
        ("agent c2".to_owned(), vec![c2.agent_pid()]),
        ("devcluster c1".to_owned(), vec![c1.cluster.pid()]),
        ("devcluster c2".to_owned(), vec![c2.cluster.pid()]),
    ];
    let servers = fleet.bus.pids();
    pids.push((
        format!("nats-server ×{} (sum)", servers.len()),
        servers.into_iter().map(Some).collect(),
    ));
    let cpu0 = cpu_ticks(&pids);
    let perf: Vec<(&str, Option<Perf>)> = if ctx.profile {
        vec![
            ("agent c1 (origin)", c1.agent_pid().and_then(Perf::start)),
            ("agent c2 (sink)", c2.agent_pid().and_then(Perf::start)),
        ]
    } else {
        Vec::new()
    };
    let start = Instant::now();
    let names = Arc::new((0..k).map(|i| format!("t-{i}")).collect::<Vec<_>>());
    let writes = load::update_for(&origin, names, writers, Duration::from_secs(secs)).await?;
    let wrote_for = start.elapsed();
    let published_in_window = publishes.load(Ordering::Relaxed);
    let cpu1 = cpu_ticks(&pids);
    let profiles: Vec<(&str, Vec<String>)> = perf
        .into_iter()
        .filter_map(|(who, p)| p.map(|p| (who, p.stop(12))))
        .collect();

    // The final version of every object, as c1 holds it; wait until c2 has each.
    let finals: HashMap<String, String> = origin
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|o| {
            let mark = o
                .data
                .as_ref()
                .and_then(|d| d.get(MARK))
                .cloned()
                .unwrap_or_default();
            (o.name_any(), mark)
        })
        .collect();
    // A sink that cannot keep up is a result, not a failure: report what it had.
    let drain_deadline = Instant::now() + DRAIN;
    let mut drained_at = Some(start);
    for (name, mark) in &finals {
        let left = drain_deadline.saturating_duration_since(Instant::now());
        match sink.wait_seen(name, mark, left).await {
            Ok(at) => drained_at = drained_at.map(|d| d.max(at)),
            Err(_) => {
                drained_at = None;
                break;
            }
        }
    }
    let missing = finals
        .iter()
        .filter(|(name, mark)| sink.first_seen(name, mark).is_none())
        .count();
    let end = start + wrote_for;
    count_task.abort();

    let mut lag = Samples::new();
    let mut coalesced = 0usize;
    for w in &writes {
        match sink.first_seen(&w.name, &w.mark) {
            Some(at) => lag.push(at.saturating_duration_since(w.ack)),
            None => coalesced += 1,
        }
    }
    let rate = |n: f64| n / wrote_for.as_secs_f64();
    let write_rate = rate(writes.len() as f64);
    let publish_rate = rate(published_in_window as f64);

    let mut t = Table::latency("4. Throughput: sustained updates on c1, lag of c2");
    t.latency_row(
        "sink lag: c1 update acknowledged → that version seen on c2",
        &lag,
        ctx.floor,
        "bounded",
    );
    t.samples = lag.len();
    t.summarize(
        "4. throughput: sink lag under sustained updates on c1",
        &lag,
        vec![
            ("updates/s acknowledged by c1".into(), write_rate),
            ("msg/s published by c1's agent".into(), publish_rate),
        ],
    );
    t.note(format!(
        "{} updates of {k} ConfigMaps acknowledged by c1 in {:.1} s = **{write_rate:.0} updates/s** ({writers} writers)",
        writes.len(),
        wrote_for.as_secs_f64()
    ));
    let v = t.goal(
        "throughput: c1's agent publishes ≥ 5,000 msg/s sustained",
        format!("{publish_rate:.0} msg/s"),
        publish_rate >= 5000.0,
    );
    t.note(format!(
        "c1's agent published {published_in_window} messages in that window = **{publish_rate:.0} msg/s**; goal ≥ 5,000/s sustained: {v}"
    ));
    t.note(format!(
        "versions never seen on c2 (superseded before they arrived — the bus keeps the last value per subject — or not arrived by the end): {coalesced} of {}",
        writes.len()
    ));
    match drained_at {
        Some(at) => t.note(format!(
            "c2 held the final version of all {k} objects {} ms after the last write (drain)",
            ms(Some(at.saturating_duration_since(end)))
        )),
        None => t.incomplete(format!(
            "c2 did NOT catch up: {missing} of {k} objects still lacked their final version {} s after the writes stopped",
            DRAIN.as_secs()
        )),
    }
    let cpu: Vec<String> = pids
        .iter()
        .zip(cpu0.iter().zip(&cpu1))
        .filter_map(|((name, _), (a, b))| {
            let used = (*b)?.checked_sub((*a)?)? as f64 / procfs::TICKS_PER_SEC;
            Some(format!(
                "{name} {:.0}%",
                100.0 * used / wrote_for.as_secs_f64()
            ))
        })
        .collect();
    t.note(format!(
        "CPU during the write window (100% = one core): {}",
        cpu.join(", ")
    ));
    for (who, top) in profiles {
        t.note(format!(
            "perf profile of {who} during the write window, top functions by self time: {}",
            top.join("; ")
        ));
    }
    let burst = burst(ctx, &fleet).await?;
    Ok(vec![t, burst])
}

/// Per named group of processes, the CPU ticks they used so far (summed; None
/// if one of them cannot be read).
fn cpu_ticks(groups: &[(String, Vec<Option<u32>>)]) -> Vec<Option<u64>> {
    groups
        .iter()
        .map(|(_, pids)| {
            pids.iter()
                .map(|p| p.and_then(procfs::cpu_ticks))
                .sum::<Option<u64>>()
        })
        .collect()
}

/// The agent's own publish rate, without an API server's write rate in front
/// of it: cluster c3 holds M objects before its agent starts; its agent
/// publishes them all as fast as it can, and c2 applies the copies.
async fn burst(ctx: &Ctx, fleet: &Fleet) -> anyhow::Result<Table> {
    let m = ctx.pick(50, 10_000);
    let mut c3 = Member::bench_cluster("c3", false, Some(&fleet.bus)).await?;
    load::create_many(&c3.configmaps(), "b", 0..m, 32).await?;
    let sink = fleet.sinks()[0].recorder().await?;
    let before = sink.count();
    let nats = async_nats::connect(fleet.bus.url_of("c3")).await?;
    let mut published = nats.subscribe("fleetbus.obj.c3.>").await?;
    nats.flush().await?;
    let started = c3.start_agent()?;
    let sink_perf = if ctx.profile {
        fleet.sinks()[0].agent_pid().and_then(Perf::start)
    } else {
        None
    };
    let mut first = None;
    let mut last = started;
    let mut n = 0usize;
    let deadline = tokio::time::Instant::now() + DRAIN;
    while n < m {
        match tokio::time::timeout_at(deadline, published.next()).await {
            Ok(Some(_)) => {
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                n += 1;
            }
            Ok(None) => anyhow::bail!("subscription to fleetbus.obj.c3.> ended"),
            Err(_) => {
                return Err(c3.with_log(anyhow::anyhow!("c3 published {n} of {m} within {DRAIN:?}")))
            }
        }
    }
    let all_copies = sink
        .wait_count(before + m, BURST_APPLY)
        .await
        .map_err(|e| c3.with_log(e))?;
    let sink_profile = sink_perf.map(|p| p.stop(12));
    let first = first.unwrap_or(started);
    let publish_secs = last.saturating_duration_since(first).as_secs_f64();
    let publish_rate = m as f64 / publish_secs.max(1e-9);
    let apply_secs = all_copies.saturating_duration_since(first).as_secs_f64();
    let mut t = Table::new(
        "4b. Burst: an agent starts on a cluster holding M objects and publishes them all",
        &[
            "M objects",
            "agent start → first publish s",
            "first → last publish s",
            "publish rate msg/s",
            "first publish → all M copies on c2 s",
            "copies applied /s",
            "goal ≥ 5,000/s",
        ],
    );
    let verdict = t.goal(
        "burst: the agent's own publish rate ≥ 5,000 msg/s",
        format!("{publish_rate:.0} msg/s"),
        publish_rate >= 5000.0,
    );
    t.row([
        m.to_string(),
        format!(
            "{:.2}",
            first.saturating_duration_since(started).as_secs_f64()
        ),
        format!("{publish_secs:.2}"),
        format!("{publish_rate:.0}"),
        format!("{apply_secs:.2}"),
        format!("{:.0}", m as f64 / apply_secs.max(1e-9)),
        verdict.to_owned(),
    ]);
    t.samples = n;
    t.summarize(
        "4b. burst: an agent publishes M objects, c2 applies them",
        &crate::stats::Samples::new(),
        vec![
            ("msg/s published".into(), publish_rate),
            (
                "copies applied/s on c2".into(),
                m as f64 / apply_secs.max(1e-9),
            ),
        ],
    );
    t.note("Publishes are counted by a plain NATS subscriber on fleetbus.obj.c3.>; copies by a watch on c2.");
    if let Some(top) = sink_profile {
        t.note(format!(
            "perf profile of agent c2 (sink) while it applied the M copies, top functions by self time: {}",
            top.join("; ")
        ));
    }
    Ok(t)
}
