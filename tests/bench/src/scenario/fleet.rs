//! Scenario 7: fleet scaling. For each N, a fleetbus fleet of N clusters and
//! then the full-mesh baseline on N fresh devclusters, in the same run: K
//! ConfigMaps created on c1 one at a time, latency until the copy is seen on
//! ALL other clusters; connections per cluster (from /proc); API-server
//! requests per change (from the devclusters' request logs).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::bus::Topology;
use crate::mesh::{BenchMember, Fleet, Member, SETUP};
use crate::objects;
use crate::procfs;
use crate::recorder::Recorder;
use crate::scenario::fullmesh::FullMesh;
use crate::scenario::Ctx;
use crate::stats::{ms, Samples};
use crate::table::{ratio, Table};

/// How long after the last change its requests may still be logged. A fixed
/// delay on purpose: the devclusters' request logs (another process's file)
/// give no event that says "all written", and this bounds a measurement
/// window, not a test.
const LOG_SETTLE: Duration = Duration::from_millis(200);

const HEADERS: [&str; 11] = [
    "mode",
    "N",
    "samples",
    "p50 ms to all N",
    "p99 ms to all N",
    "p50 / floor",
    "p50 / full mesh",
    "API conns per cluster",
    "cross-cluster API conns per cluster",
    "NATS conns per cluster",
    "API requests per change",
];

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let sizes: Vec<usize> = ctx.pick(vec![2, 3], vec![2, 4, 8, 16]);
    let k = ctx.pick(3, 50);
    let mut t = Table::new("7. Fleet scaling: fleetbus vs full-mesh baseline", &HEADERS);
    let mut samples = usize::MAX;
    for &n in &sizes {
        eprintln!("fleetbus-bench: fleet: N={n}");
        let fb = fleetbus(ctx, n, k).await?;
        // The baseline uses no NATS: measured once, on the single-server run.
        let fm = match ctx.topology {
            Topology::Single => Some(full_mesh(ctx, n, k).await?),
            _ => None,
        };
        samples = samples
            .min(fb.lat.len())
            .min(fm.as_ref().map_or(usize::MAX, |m| m.lat.len()));
        if Some(&n) == sizes.last() {
            t.summarize(
                &format!("7. fleet: c1 create → copy on all of N={n}"),
                &fb.lat,
                Vec::new(),
            );
        }
        let modes = std::iter::once(("fleetbus", &fb)).chain(fm.as_ref().map(|m| ("full mesh", m)));
        for (mode, r) in modes {
            t.row([
                mode.to_owned(),
                n.to_string(),
                r.lat.len().to_string(),
                ms(r.lat.p50()),
                ms(r.lat.percentile(99.0)),
                ratio(r.lat.p50(), ctx.floor),
                ratio(r.lat.p50(), fm.as_ref().and_then(|m| m.lat.p50())),
                format!("{:.1}", r.api_conns),
                format!("{:.1}", r.cross_conns),
                format!("{:.1}", r.nats_conns),
                format!("{:.1}", r.requests_per_change),
            ]);
            t.note(format!("{mode} N={n}, requests per change by kind (before subtracting background and the harness's create): {}", r.breakdown));
        }
    }
    t.samples = if samples == usize::MAX { 0 } else { samples };
    t.note("Latency: c1 create acknowledged → copy seen by a watch on every other cluster (the slowest one).");
    t.note("Connections: established TCP connections from /proc/<pid>/fd + /proc/net/tcp; fleetbus counts each agent's sockets, the baseline the harness's sockets opened by its watchers and writers (divided by N; its writers' connections are opened and counted before its watches, so 'cross-cluster' = connections the watches added). 'API conns' are into any API server, 'cross-cluster' into a peer's.");
    t.note("Requests per change: request lines in all devclusters' logs (every request logged, reads included) during the K changes, minus the harness's own K creates and minus the background requests (rate measured over an idle window just before, times the window), divided by K.");
    Ok(vec![t])
}

/// One mode's numbers at one N.
struct Outcome {
    lat: Samples,
    api_conns: f64,
    cross_conns: f64,
    nats_conns: f64,
    requests_per_change: f64,
    /// The most frequent requests during the changes, per change.
    breakdown: String,
}

async fn fleetbus(ctx: &Ctx, n: usize, k: usize) -> anyhow::Result<Outcome> {
    let fleet = Fleet::start_on(ctx.topology, n, true).await?;
    let recorders = recorders(&fleet.nodes).await?;
    let (lat, requests_per_change, breakdown) =
        changes(ctx, &fleet.nodes, &recorders, "fb", k).await?;
    let api_ports: Vec<u16> = fleet.nodes.iter().map(|x| x.cluster.port()).collect();
    let (mut api, mut cross, mut nats) = (0usize, 0usize, 0usize);
    for node in &fleet.nodes {
        let conns = node
            .agent_pid()
            .map(procfs::connections_by_remote_port)
            .unwrap_or_default();
        for (port, c) in conns {
            if fleet.bus.ports().contains(&port) {
                nats += c;
            } else if port == node.cluster.port() {
                api += c;
            } else if api_ports.contains(&port) {
                api += c;
                cross += c;
            }
        }
    }
    let per = |x: usize| x as f64 / n as f64;
    Ok(Outcome {
        lat,
        api_conns: per(api),
        cross_conns: per(cross),
        nats_conns: per(nats),
        requests_per_change,
        breakdown,
    })
}

async fn full_mesh(ctx: &Ctx, n: usize, k: usize) -> anyhow::Result<Outcome> {
    let mut nodes = Vec::new();
    for i in 1..=n {
        nodes.push(Member::bench_cluster(&format!("m{i}"), true, None).await?);
    }
    let recorders = recorders(&nodes).await?;
    // The harness's own connections (recorders, writer) are open before the
    // baseline starts; what is added after is the baseline's: first its
    // writers, then its watches (the cross-cluster connections).
    let me = std::process::id();
    let added = |before: &BTreeMap<u16, usize>| {
        let now = procfs::connections_by_remote_port(me);
        nodes
            .iter()
            .map(|x| {
                let p = x.cluster.port();
                now.get(&p)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(before.get(&p).copied().unwrap_or(0))
            })
            .sum::<usize>()
    };
    let s0 = procfs::connections_by_remote_port(me);
    let mut mesh = FullMesh::writers(&nodes).await?;
    let s1 = procfs::connections_by_remote_port(me);
    mesh.watch(&nodes).await?;
    let (lat, requests_per_change, breakdown) = changes(ctx, &nodes, &recorders, "fm", k).await?;
    let (api, cross) = (added(&s0), added(&s1));
    drop(mesh);
    let per = |x: usize| x as f64 / n as f64;
    Ok(Outcome {
        lat,
        api_conns: per(api),
        cross_conns: per(cross),
        nats_conns: 0.0,
        requests_per_change,
        breakdown,
    })
}

/// A watch on every node but the first (the origin).
async fn recorders(nodes: &[Member]) -> anyhow::Result<Vec<Recorder>> {
    let mut out = Vec::new();
    for s in nodes.iter().skip(1) {
        out.push(s.recorder().await?);
    }
    Ok(out)
}

/// Warms up, then creates `k` objects on `nodes[0]` one at a time and waits for
/// each on every other node (`recorders`). Returns the latencies to all and
/// the API requests per change.
async fn changes(
    ctx: &Ctx,
    nodes: &[Member],
    recorders: &[Recorder],
    prefix: &str,
    k: usize,
) -> anyhow::Result<(Samples, f64, String)> {
    let origin = nodes
        .first()
        .ok_or_else(|| anyhow::anyhow!("no clusters"))?;
    let api = origin.configmaps();
    let warm = format!("{prefix}-warm-up");
    objects::create(&api, &warm, "1").await?;
    for r in recorders {
        r.wait_seen(&warm, "1", SETUP).await?;
    }
    let requests = || nodes.iter().map(Member::requests_logged).sum::<usize>();
    // Background requests (heartbeats, status, watch renewals) over an idle window first.
    let idle = ctx.pick(Duration::from_millis(500), Duration::from_secs(5));
    tokio::time::sleep(LOG_SETTLE).await;
    let b0 = requests();
    tokio::time::sleep(idle).await;
    let background_rate = requests().saturating_sub(b0) as f64 / idle.as_secs_f64();
    let by_kind = || {
        let mut all = BTreeMap::new();
        for x in nodes {
            for (k, v) in x.requests_by_kind(&format!("{prefix}-")) {
                *all.entry(k).or_insert(0usize) += v;
            }
        }
        all
    };
    let kinds0 = by_kind();
    let req0 = requests();
    let start = Instant::now();
    let mut lat = Samples::new();
    for i in 0..k {
        let name = format!("{prefix}-{i}");
        objects::create(&api, &name, "1").await?;
        let ack = Instant::now();
        let mut last = ack;
        for r in recorders {
            last = last.max(r.wait_seen(&name, "1", SETUP).await?);
        }
        lat.push(last.saturating_duration_since(ack));
    }
    // A server logs a request when it has answered it: let the last ones land.
    tokio::time::sleep(LOG_SETTLE).await;
    let window = start.elapsed();
    let req1 = requests();
    let kinds1 = by_kind();
    let mut kinds: Vec<(usize, String)> = kinds1
        .into_iter()
        .filter_map(|(k, v)| {
            let d = v.saturating_sub(kinds0.get(&k).copied().unwrap_or(0));
            (d > 0).then_some((d, k))
        })
        .collect();
    kinds.sort_by(|a, b| b.cmp(a));
    let breakdown = kinds
        .iter()
        .take(8)
        .map(|(d, kind)| format!("`{kind}` {:.1}", *d as f64 / k as f64))
        .collect::<Vec<_>>()
        .join(", ");
    let background = background_rate * window.as_secs_f64();
    let per_change = (req1.saturating_sub(req0) as f64 - background - k as f64) / k as f64;
    Ok((lat, per_change, breakdown))
}
