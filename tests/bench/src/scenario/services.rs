//! Scenario 12: multi-cluster Services (MCS API, KEP-1645; PROTOCOL §6.11)
//! under endpoint churn. Fleet c1, c2, c3 with the upstream MCS CRDs
//! installed before the agents start (as a platform team would), namespace
//! `mcs` on all. c1 holds Service `web`, its EndpointSlice `web-1` (100
//! endpoints, written by the harness as the EndpointSlice controller would)
//! and the ServiceExport `web`; c2 and c3 import it. Then the harness
//! rewrites `web-1` 10 times a second for a fixed time, as the controller
//! of a Deployment under a rolling replacement would: version `v` holds pods
//! `v..v+100`, one pod gone and one new per version, so every version is
//! told apart by its addresses (pod `k` is `10.1.<k/200>.<k%200+1>`).
//!
//! Lag: a kube-rs watch on c2 and on c3 of the imported EndpointSlices
//! (`multicluster.kubernetes.io/service-name=web`) timestamps every version
//! it sees; per write, from its acknowledgement to the first version at or
//! after it on that cluster (the agent batches: at most one record per
//! Service per 500 ms, so most versions are coalesced into a later one).
//! Bus cost: a plain NATS subscriber on `fleetbus.svc.>` counts the records
//! and their bytes; c1's `fleetbus_mcs_events_total{event="published"}`
//! beside it.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Api;
use serde_json::json;
use tokio::sync::Notify;

use crate::bus::Bus;
use crate::mesh::{BenchMember, Fleet, Member, SETUP};
use crate::scenario::Ctx;
use crate::stats::{ms, Samples};
use crate::table::Table;

/// The namespace of the exported Service, on every cluster.
const NS: &str = "mcs";
/// The Service, its ServiceExport and (with "-1") its EndpointSlice.
const SERVICE: &str = "web";
const SLICE: &str = "web-1";
/// Endpoints of the exported slice, in every version.
const ENDPOINTS: u64 = 100;
/// Time between two writes of the slice (10 a second).
const PERIOD: Duration = Duration::from_millis(100);
/// How long a sink may take to show the last version after the churn.
const DRAIN: Duration = Duration::from_secs(30);
/// The label of the imported slices naming the Service (KEP-1645).
const LABEL_SERVICE_NAME: &str = "multicluster.kubernetes.io/service-name";
/// The agent's batching bound (PROTOCOL §6.11): one record per 500 ms.
const MIN_INTERVAL: Duration = Duration::from_millis(500);
/// The most endpoints one record carries (PROTOCOL §6.11).
const MAX_RECORD_ENDPOINTS: u64 = 1000;
/// The upstream CRD files the scenario installs.
const CRD_FILES: [&str; 2] = [
    "multicluster.x-k8s.io_serviceexports.yaml",
    "multicluster.x-k8s.io_serviceimports.yaml",
];

const LAG_HEADERS: [&str; 8] = [
    "measure",
    "samples",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "max ms",
    "versions seen (of written)",
    "goal",
];

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let churn = ctx.pick(Duration::from_secs(3), Duration::from_secs(30));
    let fleet = start_fleet(ctx).await?;
    let (c1, sinks) = (fleet.origin(), fleet.sinks());
    let mut watches = Vec::new();
    for s in sinks {
        watches.push(ImportWatch::start(s.client.clone(), SETUP).await?);
    }

    // The export, as the Service's owners and the EndpointSlice controller
    // would write it; then until every sink shows its 100 endpoints.
    let exported = Instant::now();
    Api::<Service>::namespaced(c1.client.clone(), NS)
        .create(&PostParams::default(), &serde_json::from_value(service())?)
        .await
        .map_err(|e| anyhow::anyhow!("c1: create Service {SERVICE}: {e}"))?;
    let slices: Api<EndpointSlice> = Api::namespaced(c1.client.clone(), NS);
    let mut last = slices
        .create(&PostParams::default(), &slice(0))
        .await
        .map_err(|e| anyhow::anyhow!("c1: create EndpointSlice {SLICE}: {e}"))?;
    Api::<DynamicObject>::namespaced_with(c1.client.clone(), NS, &export_resource())
        .create(&PostParams::default(), &serde_json::from_value(export())?)
        .await
        .map_err(|e| anyhow::anyhow!("c1: create ServiceExport {SERVICE}: {e}"))?;
    let mut first_import = Vec::new();
    for (s, w) in sinks.iter().zip(&watches) {
        let at = w
            .wait_version(0, SETUP)
            .await
            .map_err(|e| c1.with_log(s.with_log(e)))?;
        first_import.push(at.saturating_duration_since(exported));
    }

    // What goes over the bus during the churn, and what c1 says it published.
    let nats = async_nats::connect(fleet.bus.url_of("c1")).await?;
    let mut sub = nats.subscribe("fleetbus.svc.>").await?;
    nats.flush().await?;
    let bus_log: Arc<Mutex<Vec<Record>>> = Arc::default();
    let bus_task = tokio::spawn({
        let log = bus_log.clone();
        async move {
            while let Some(msg) = sub.next().await {
                let at = Instant::now();
                let rec = Record::read(at, &msg.subject, &msg.payload);
                lock(&log).push(rec);
            }
        }
    });
    const PUBLISHED: &str = "fleetbus_mcs_events_total{event=\"published\"}";
    const SLICE_WRITES: &str = "fleetbus_kube_writes_total{kind=\"EndpointSlice\"}";
    let published0 = c1.agent_metric(PUBLISHED);
    let sink_writes0: Vec<Option<f64>> =
        sinks.iter().map(|s| s.agent_metric(SLICE_WRITES)).collect();

    // The churn: one new version every 100 ms, each written once the
    // previous was acknowledged (a write slower than 100 ms delays the next).
    let mut acks: Vec<Instant> = Vec::new();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let total = (churn.as_millis() / PERIOD.as_millis()) as u64;
    let start = Instant::now();
    let mut version = 0u64;
    while version < total {
        tick.tick().await;
        version += 1;
        let mut next = slice(version);
        next.metadata.resource_version = last.metadata.resource_version.clone();
        last = slices
            .replace(SLICE, &PostParams::default(), &next)
            .await
            .map_err(|e| {
                anyhow::anyhow!("c1: update EndpointSlice {SLICE} to version {version}: {e}")
            })?;
        acks.push(Instant::now());
    }
    // The churn's time: its ticks, or longer if the writes fell behind them.
    let wrote_for = acks
        .last()
        .map_or(churn, |a| a.saturating_duration_since(start).max(churn));
    let last_version = version;

    // Until every sink shows the last version; then one batching interval
    // more, so a record published late is counted too.
    let mut drained = Vec::new();
    for w in &watches {
        drained.push(w.wait_version(last_version, DRAIN).await.ok());
    }
    tokio::time::sleep(MIN_INTERVAL * 2).await;
    bus_task.abort();
    let published1 = c1.agent_metric(PUBLISHED);
    let sink_writes1: Vec<Option<f64>> =
        sinks.iter().map(|s| s.agent_metric(SLICE_WRITES)).collect();
    let records: Vec<Record> = lock(&bus_log).clone();

    // Lag per sink: each write → the first version at or after it there.
    let mut lag_table = Table::new(
        &format!(
            "12. Multi-cluster Services: c1's EndpointSlice ({ENDPOINTS} endpoints) rewritten 10×/s, imported on c2 and c3"
        ),
        &LAG_HEADERS,
    );
    let mut lags = Vec::new();
    for ((s, w), seen_last) in sinks.iter().zip(&watches).zip(&drained) {
        let events: Vec<Seen> = w.log().into_iter().filter(|e| e.at >= start).collect();
        let lag = lag_per_write(&acks, &events);
        let distinct = {
            let mut v: Vec<u64> = events
                .iter()
                .filter_map(|e| e.version)
                .filter(|v| *v >= 1)
                .collect();
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        let went_back = events
            .iter()
            .filter_map(|e| e.version)
            .scan(0u64, |max, v| {
                let back = v < *max;
                *max = (*max).max(v);
                Some(back)
            })
            .filter(|b| *b)
            .count();
        lag_table.row([
            format!(
                "c1 write acknowledged → that version or a later one seen by a watch on {}",
                s.name
            ),
            lag.len().to_string(),
            ms(lag.p50()),
            ms(lag.percentile(90.0)),
            ms(lag.percentile(99.0)),
            ms(lag.max()),
            format!("{distinct} of {}", acks.len()),
            "p99 ≤ 1 s".to_owned(),
        ]);
        if went_back > 0 {
            lag_table.note(format!(
                "**{}: {went_back} events showed an OLDER version than one already seen** (a record applied out of order)",
                s.name
            ));
        }
        if seen_last.is_none() {
            lag_table.incomplete(format!(
                "{} did not show the last version ({last_version}) within {} s of the churn's end",
                s.name,
                DRAIN.as_secs()
            ));
        }
        lags.push((s.name.clone(), lag));
    }
    lag_table.samples = lags.iter().map(|(_, l)| l.len()).min().unwrap_or(0);
    let mut verdicts = Vec::new();
    for (name, lag) in &lags {
        let p99 = lag.percentile(99.0);
        let v = lag_table.goal(
            &format!("services: imported endpoints on {name} lag p99 ≤ 1 s"),
            format!(
                "p99 {} ms, max {} ms ({} writes)",
                ms(p99),
                ms(lag.max()),
                lag.len()
            ),
            p99.is_some_and(|p| p <= Duration::from_secs(1)),
        );
        verdicts.push(format!("{name} {v} (p99 {} ms)", ms(p99)));
    }
    lag_table.note(format!(
        "goal lag p99 ≤ 1 s to every sink: {}",
        verdicts.join("; ")
    ));
    lag_table.note(format!(
        "{} versions written in {:.1} s = {:.1} writes/s (a PUT of the whole slice, as the EndpointSlice controller sends; each waits for the previous acknowledgement); version v holds pods v to v+{}: one address gone, one new per version.",
        acks.len(),
        wrote_for.as_secs_f64(),
        acks.len() as f64 / wrote_for.as_secs_f64().max(1e-9),
        ENDPOINTS - 1,
    ));
    lag_table.note(
        "Lag of a write: from its acknowledgement by c1's API server to the first event of the sink's watch (imported EndpointSlices labelled multicluster.kubernetes.io/service-name=web) showing that version or a later one: the agent batches (one record per Service per 500 ms), so most versions are never seen themselves; \"versions seen\" counts those that were.",
    );
    let firsts: Vec<String> = sinks
        .iter()
        .zip(&first_import)
        .map(|(s, d)| format!("{} {} ms", s.name, ms(Some(*d))))
        .collect();
    lag_table.note(format!(
        "Before the churn: Service, EndpointSlice and ServiceExport created on c1 → its {ENDPOINTS} endpoints imported: {}.",
        firsts.join(", ")
    ));

    let bus = bus_table(
        &records,
        &acks,
        wrote_for,
        start,
        published0.zip(published1),
    );
    let mut bus = bus;
    let writes: Vec<String> = sinks
        .iter()
        .zip(sink_writes0.iter().zip(&sink_writes1))
        .map(|(s, (a, b))| match a.zip(*b) {
            Some((a, b)) => format!("{} {:.0}", s.name, b - a),
            None => format!("{} -", s.name),
        })
        .collect();
    bus.row([
        "EndpointSlice writes of the importing agents, churn → last version".to_owned(),
        format!(
            "{} (fleetbus_kube_writes_total{{kind=\"EndpointSlice\"}})",
            writes.join(", ")
        ),
    ]);
    Ok(vec![lag_table, bus])
}

/// The bus-cost table and its goal: records per second for the Service.
fn bus_table(
    records: &[Record],
    acks: &[Instant],
    wrote_for: Duration,
    start: Instant,
    published: Option<(f64, f64)>,
) -> Table {
    let mut t = Table::new(
        "12. Multi-cluster Services: what one exported Service under churn costs on the bus",
        &["measure", "value"],
    );
    let subject = format!("fleetbus.svc.c1.{NS}.{SERVICE}");
    let ours: Vec<&Record> = records.iter().filter(|r| r.subject == subject).collect();
    let others = records.len() - ours.len();
    let bytes: usize = records.iter().map(|r| r.bytes).sum();
    let secs = wrote_for.as_secs_f64().max(1e-9);
    let (msgs_s, bytes_s) = (records.len() as f64 / secs, bytes as f64 / secs);
    // The sustained rate: records after the first over the time between the
    // first and the last (a record at each end of the span counts once).
    let sustained = match (ours.first(), ours.last()) {
        (Some(a), Some(b)) if ours.len() > 1 => {
            (ours.len() - 1) as f64 / b.at.saturating_duration_since(a.at).as_secs_f64().max(1e-9)
        }
        _ => ours.len() as f64 / secs,
    };
    let gaps = |f: &dyn Fn(&Record) -> Option<f64>| -> Option<f64> {
        ours.windows(2)
            .filter_map(|w| Some(f(w[1])? - f(w[0])?))
            .reduce(f64::min)
    };
    let min_arrival_gap =
        gaps(&|r| Some(r.at.saturating_duration_since(start).as_secs_f64() * 1e3));
    let min_revision_gap = gaps(&|r| r.revision.map(|v| v as f64));
    // The most records in any 1 s (half-open), by a clock in ms per record.
    let busiest = |f: &dyn Fn(&Record) -> Option<f64>| -> Option<usize> {
        let times: Vec<f64> = ours.iter().map(|r| f(r)).collect::<Option<_>>()?;
        times
            .iter()
            .map(|a| {
                times
                    .iter()
                    .filter(|b| **b >= *a && **b - *a < 1000.0)
                    .count()
            })
            .max()
    };
    let busiest_arrival =
        busiest(&|r| Some(r.at.saturating_duration_since(start).as_secs_f64() * 1e3));
    let busiest_revision = busiest(&|r| r.revision.map(|v| v as f64));
    let count = |n: Option<usize>| n.map_or("-".to_owned(), |n| n.to_string());
    let per_record =
        |f: fn(&Record) -> usize| -> Vec<usize> { ours.iter().map(|r| f(r)).collect() };
    let sizes = per_record(|r| r.bytes);
    let mean_size = sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64;
    let max_size = sizes.iter().copied().max().unwrap_or(0);
    let endpoints = per_record(|r| r.endpoints.unwrap_or(0));
    let mean_endpoints = endpoints.iter().sum::<usize>() as f64 / endpoints.len().max(1) as f64;
    let per_endpoint = mean_size / mean_endpoints.max(1.0);
    let versions: Vec<u64> = ours.iter().filter_map(|r| r.version).collect();
    let versions_per_record = acks.len() as f64 / ours.len().max(1) as f64;
    let rows: Vec<(String, String)> = vec![
        (
            "messages on fleetbus.svc.> (first write → every sink at the last version, + 1 s)".into(),
            format!("{} ({} for {subject}, {others} others)", records.len(), ours.len()),
        ),
        ("bytes (payloads)".into(), format!("{bytes} B = {:.1} KiB", bytes as f64 / 1024.0)),
        (
            format!("messages/s, bytes/s over the churn ({:.1} s)", secs),
            format!("{msgs_s:.2} msg/s, {bytes_s:.0} B/s = {:.2} KiB/s", bytes_s / 1024.0),
        ),
        (
            "records of the Service per second, sustained ((records − 1) / first → last arrival)".into(),
            format!("{sustained:.2}/s"),
        ),
        (
            "records in the busiest 1 s: by arrival / by their revisions (the agent's ms clock)"
                .into(),
            format!("{} / {}", count(busiest_arrival), count(busiest_revision)),
        ),
        (
            "least time between two records: by arrival / by their revisions (the agent's ms clock)".into(),
            format!(
                "{} ms / {} ms",
                min_arrival_gap.map_or("-".into(), |g| format!("{g:.1}")),
                min_revision_gap.map_or("-".into(), |g| format!("{g:.0}"))
            ),
        ),
        (
            "versions written per record (coalesced by the 500 ms batching)".into(),
            format!("{versions_per_record:.1} ({} writes, {} records)", acks.len(), ours.len()),
        ),
        (
            "record size: mean / max; per endpoint".into(),
            format!("{mean_size:.0} B / {max_size} B; {per_endpoint:.0} B ({mean_endpoints:.0} endpoints a record)"),
        ),
        (
            "records whose version went back (out of order)".into(),
            versions.windows(2).filter(|w| w[1] < w[0]).count().to_string(),
        ),
        (
            "c1's fleetbus_mcs_events_total{event=\"published\"}, same window".into(),
            published.map_or("- (metrics not readable)".into(), |(a, b)| format!("{:.0}", b - a)),
        ),
    ];
    for (m, v) in rows {
        t.row([m, v]);
    }
    t.samples = ours.len();
    let v = t.goal(
        "services: at most 2 records per second for one Service (500 ms batching)",
        format!(
            "{sustained:.2} records/s ({} records; busiest 1 s by the agent's revisions: {}); bus {bytes_s:.0} B/s",
            ours.len(),
            count(busiest_revision)
        ),
        !ours.is_empty() && sustained <= 2.0,
    );
    t.note(format!(
        "goal ≤ 2 records/s for the Service: {v} ({sustained:.2}/s sustained); bytes/s on the bus: {bytes_s:.0} B/s ({:.2} KiB/s) while its endpoints changed 10 times a second.",
        bytes_s / 1024.0
    ));
    let bound = 2.0 * MAX_RECORD_ENDPOINTS as f64 * per_endpoint;
    t.note(format!(
        "Bound on one Service, whatever its churn: at most {MAX_RECORD_ENDPOINTS} endpoints per record (more are left out and counted in `truncated`) and one record per 500 ms, so ≤ 2 records/s; at this endpoint shape ({per_endpoint:.0} B per endpoint) ≤ {:.0} KiB/s published for a Service of 1,000 or more endpoints, each delivered to every agent (every cluster imports).",
        bound / 1024.0
    ));
    t.note(
        "Counted by a plain NATS core subscriber on fleetbus.svc.> (it sees the JetStream publishes) from the first write until every sink showed the last version, plus 1 s; bytes are the message payloads (JSON records, PROTOCOL §6.11), rates over the churn's duration. The goal's rate is the sustained one: N records are N − 1 intervals.",
    );
    t
}

/// Per write (acknowledged at `acks[i]`, version `i + 1`), the time until the
/// sink first showed that version or a later one (`events` in time order);
/// writes never reached are left out.
fn lag_per_write(acks: &[Instant], events: &[Seen]) -> Samples {
    let mut out = Samples::new();
    let mut max_seen = 0u64;
    let mut next = 0usize; // index into acks: version next + 1
    for e in events {
        let Some(v) = e.version else { continue };
        max_seen = max_seen.max(v);
        while next < acks.len() && (next as u64 + 1) <= max_seen {
            out.push(e.at.saturating_duration_since(acks[next]));
            next += 1;
        }
    }
    out
}

/// Starts c1, c2, c3 with the MCS CRDs and namespace [`NS`] in place before
/// the agents start (the agent looks for the CRDs every 5 s otherwise).
async fn start_fleet(ctx: &Ctx) -> anyhow::Result<Fleet> {
    let crds = std::panic::catch_unwind(fleetbus_testsupport::upstream_crds).map_err(|_| {
        anyhow::anyhow!(
            "the upstream MCS CRDs were not found (fleetbus_testsupport::upstream_crds: set FLEETBUS_UPSTREAM_CRDS)"
        )
    })?;
    let bus = Bus::start(ctx.topology).await?;
    let mut nodes = Vec::new();
    for i in 1..=3 {
        nodes.push(Member::bench_cluster(&format!("c{i}"), false, Some(&bus)).await?);
    }
    // `kubectl create -f`, as a platform team installs them; one kubectl
    // per cluster, side by side.
    let args: Vec<String> = CRD_FILES
        .iter()
        .flat_map(|f| ["-f".to_owned(), crds.join(f).display().to_string()])
        .collect();
    let failures: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> = nodes
            .iter()
            .map(|m| {
                let args = &args;
                s.spawn(move || {
                    let mut argv = vec!["create"];
                    argv.extend(args.iter().map(String::as_str));
                    let out = m.cluster.kubectl("1.33", &argv);
                    (!out.status.success()).then(|| {
                        format!(
                            "{}: kubectl create: {}",
                            m.name,
                            String::from_utf8_lossy(&out.stderr)
                        )
                    })
                })
            })
            .collect();
        runs.into_iter()
            .filter_map(|r| {
                r.join()
                    .unwrap_or_else(|_| Some("kubectl thread panicked".into()))
            })
            .collect()
    });
    if !failures.is_empty() {
        anyhow::bail!("installing the MCS CRDs: {}", failures.join("; "));
    }
    for node in &mut nodes {
        node.create_namespace(NS).await?;
        node.start_agent()?;
    }
    for node in &nodes {
        node.wait_ready().await?;
    }
    let names: Vec<String> = nodes.iter().map(|n| n.name.clone()).collect();
    bus.join(&names).await?;
    Ok(Fleet { bus, nodes })
}

fn export_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("multicluster.x-k8s.io", "v1beta1", "ServiceExport"),
        "serviceexports",
    )
}

fn service() -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": SERVICE, "namespace": NS},
        "spec": {
            "type": "ClusterIP",
            "selector": {"app": SERVICE},
            "ports": [{"name": "http", "port": 80, "targetPort": 8080, "protocol": "TCP"}],
        },
    })
}

fn export() -> serde_json::Value {
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
        "metadata": {"name": SERVICE, "namespace": NS},
    })
}

/// Pod `k`'s address: `10.1.<k/200>.<k%200+1>` (no .0, no .255).
fn pod_ip(k: u64) -> String {
    format!("10.1.{}.{}", k / 200, k % 200 + 1)
}

/// The pod number of an address made by [`pod_ip`].
fn pod_of(ip: &str) -> Option<u64> {
    let mut octets = ip.strip_prefix("10.1.")?.split('.');
    let hi: u64 = octets.next()?.parse().ok()?;
    let lo: u64 = octets.next()?.parse().ok()?;
    (octets.next().is_none() && (1..=200).contains(&lo)).then(|| hi * 200 + lo - 1)
}

/// Version `v` of the slice, as the EndpointSlice controller writes it:
/// pods `v..v+ENDPOINTS`, ready.
fn slice(v: u64) -> EndpointSlice {
    let endpoints: Vec<serde_json::Value> = (v..v + ENDPOINTS)
        .map(|k| {
            json!({
                "addresses": [pod_ip(k)],
                "conditions": {"ready": true, "serving": true, "terminating": false},
                "targetRef": {"kind": "Pod", "namespace": NS, "name": format!("{SERVICE}-{k}")},
            })
        })
        .collect();
    let v = json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": SLICE, "namespace": NS, "labels": {
            "kubernetes.io/service-name": SERVICE,
            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        }},
        "addressType": "IPv4",
        "endpoints": endpoints,
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    });
    #[allow(clippy::expect_used)]
    serde_json::from_value(v).expect("an EndpointSlice")
}

/// The version a set of addresses is (its newest pod − ENDPOINTS + 1).
fn version_of<'a>(addresses: impl Iterator<Item = &'a str>) -> Option<u64> {
    addresses
        .filter_map(pod_of)
        .max()
        .and_then(|k| k.checked_sub(ENDPOINTS - 1))
}

/// One message seen on `fleetbus.svc.>`.
#[derive(Debug, Clone)]
struct Record {
    at: Instant,
    subject: String,
    bytes: usize,
    revision: Option<u64>,
    endpoints: Option<usize>,
    version: Option<u64>,
}

impl Record {
    fn read(at: Instant, subject: &str, payload: &[u8]) -> Record {
        let v: Option<serde_json::Value> = serde_json::from_slice(payload).ok();
        let endpoints = v
            .as_ref()
            .and_then(|v| v["slices"].as_array())
            .map(|slices| {
                slices
                    .iter()
                    .filter_map(|s| s["endpoints"].as_array())
                    .flatten()
                    .collect::<Vec<_>>()
            });
        let version = endpoints.as_ref().and_then(|eps| {
            version_of(
                eps.iter()
                    .filter_map(|e| e["addresses"].as_array())
                    .flatten()
                    .filter_map(|a| a.as_str()),
            )
        });
        Record {
            at,
            subject: subject.to_owned(),
            bytes: payload.len(),
            revision: v.as_ref().and_then(|v| v["revision"].as_u64()),
            endpoints: endpoints.map(|e| e.len()),
            version,
        }
    }
}

/// One event of a sink's watch of the imported slices.
#[derive(Debug, Clone)]
struct Seen {
    at: Instant,
    /// The version its endpoints are (None: not one of ours).
    version: Option<u64>,
    endpoints: usize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A kube-rs watch of one cluster's imported EndpointSlices of `web` in
/// [`NS`]; timestamps every version it sees. Stops on drop.
struct ImportWatch {
    log: Arc<Mutex<Vec<Seen>>>,
    changed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl ImportWatch {
    /// Starts the watch and waits until its initial list is done.
    async fn start(client: kube::Client, timeout: Duration) -> anyhow::Result<Self> {
        let api: Api<EndpointSlice> = Api::namespaced(client, NS);
        let config = watcher::Config::default().labels(&format!("{LABEL_SERVICE_NAME}={SERVICE}"));
        let log: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let changed = Arc::new(Notify::new());
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn({
            let (log, changed) = (log.clone(), changed.clone());
            async move {
                let mut ready_tx = Some(ready_tx);
                let mut stream = watcher(api, config).default_backoff().boxed();
                while let Some(ev) = stream.next().await {
                    let at = Instant::now();
                    let s = match ev {
                        Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => s,
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = ready_tx.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        Err(e) => {
                            eprintln!("bench services: watch error: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                        Ok(_) => continue,
                    };
                    let version = version_of(
                        s.endpoints
                            .iter()
                            .flat_map(|e| e.addresses.iter().map(String::as_str)),
                    );
                    lock(&log).push(Seen {
                        at,
                        version,
                        endpoints: s.endpoints.len(),
                    });
                    changed.notify_waiters();
                }
            }
        });
        tokio::time::timeout(timeout, ready_rx)
            .await
            .map_err(|_| {
                anyhow::anyhow!(
                    "the watch of imported EndpointSlices did not list within {timeout:?}"
                )
            })?
            .map_err(|_| anyhow::anyhow!("the watch of imported EndpointSlices ended"))?;
        Ok(ImportWatch { log, changed, task })
    }

    /// Waits until a version ≥ `v` with all its endpoints was seen; returns
    /// when it first was.
    async fn wait_version(&self, v: u64, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let found = lock(&self.log)
                .iter()
                .find(|e| e.version.is_some_and(|x| x >= v) && e.endpoints as u64 == ENDPOINTS)
                .map(|e| e.at);
            if let Some(at) = found {
                return Ok(at);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let last = lock(&self.log).last().map(|e| (e.version, e.endpoints));
                anyhow::bail!(
                    "timed out after {timeout:?} waiting for version {v} of the imported endpoints (last seen: {last:?})"
                );
            }
        }
    }

    fn log(&self) -> Vec<Seen> {
        lock(&self.log).clone()
    }
}

impl Drop for ImportWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_version_is_told_by_its_addresses() {
        for k in [0, 1, 199, 200, 399, 12_345] {
            assert_eq!(pod_of(&pod_ip(k)), Some(k), "{}", pod_ip(k));
        }
        assert_eq!(pod_of("10.2.0.1"), None);
        assert_eq!(pod_of("10.1.0.0"), None);
        for v in [0, 1, 7, 300] {
            let s = slice(v);
            assert_eq!(s.endpoints.len() as u64, ENDPOINTS);
            let got = version_of(
                s.endpoints
                    .iter()
                    .flat_map(|e| e.addresses.iter().map(String::as_str)),
            );
            assert_eq!(got, Some(v));
        }
    }

    #[test]
    fn a_write_waits_for_the_first_version_at_or_after_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // Versions 1..=4 acknowledged at 0, 100, 200, 300 ms; the sink shows
        // 2 at 150 ms, an old event, then 4 at 600 ms.
        let acks = [at(0), at(100), at(200), at(300)];
        let seen = |ms, v| Seen {
            at: at(ms),
            version: Some(v),
            endpoints: 100,
        };
        let events = [seen(150, 2), seen(160, 1), seen(600, 4)];
        let lag = lag_per_write(&acks, &events);
        assert_eq!(lag.len(), 4);
        assert_eq!(lag.p50(), Some(Duration::from_millis(150)));
        assert_eq!(lag.max(), Some(Duration::from_millis(400)));
        // Nothing reached: no samples.
        assert!(lag_per_write(&acks, &[]).is_empty());
    }
}
