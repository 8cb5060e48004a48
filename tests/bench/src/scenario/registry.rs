//! Scenario 10: the registry at 1,000 clusters. ONE real agent
//! (c1, with its devcluster) and N simulated peers that put on the bus what an
//! agent puts: a record each (with the members list a real record carries,
//! put again at every growth step as a join makes real agents do), then beats
//! at the interval the fleet's size calls for, with their TTL. Per N: the
//! agent's CPU and RSS (from /proc) and the bytes and messages it received
//! (nats-server's `/connz`) over an idle window, and the fleet's total idle
//! beat traffic, published and as delivered to N agents (computed from the
//! protocol). Then one simulated peer stops beating and the harness times
//! until the agent's Cluster object for it, read through the devcluster's
//! API, says Disconnected, against the documented detection time.
//!
//! Object traffic for one rule: c1 holds the bench rule (the ConfigMaps of
//! namespace `bench`, every cluster a source and a sink) and each simulated
//! peer publishes [`OBJECTS_PER_PEER`] ConfigMaps as envelopes under its own
//! subtree (`fleetbus.obj.<peer>.…`), so c1's agent syncs N × k copies; the
//! idle window starts once all of them are on c1.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use fleetbus_schemas::crd::{Cluster, ClusterState};
use fleetbus_schemas::envelope::Envelope;
use fleetbus_schemas::registry::{beat_interval, beat_ttl, TARGET_BEATS_PER_SECOND};
use fleetbus_schemas::subject::{ObjectKey, Prefix};
use fleetbus_testsupport::{free_port, http_get, Member, NatsServer};
use kube::Api;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::mesh::{create_rule, BenchMember, SETUP};
use crate::objects;
use crate::poll::poll;
use crate::procfs;
use crate::scenario::Ctx;
use crate::sim::{Sim, BASE};
use crate::table::Table;

/// ConfigMaps each simulated peer publishes for the rule.
const OBJECTS_PER_PEER: usize = 2;
/// Caps the largest N (for CI's smoke run or a small machine).
const MAX_ENV: &str = "FLEETBUS_BENCH_REGISTRY_MAX";

const HEADERS: [&str; 12] = [
    "N peers",
    "copies on c1",
    "beat interval s",
    "agent CPU % of a core",
    "agent RSS MiB",
    "agent received KiB/s",
    "agent received msgs/s",
    "fleet published KiB/s",
    "fleet delivered KiB/s",
    "detection s",
    "documented detection s",
    "agent registry passes/s by wake",
];

/// Publishes the objects of peers `from..to` for the rule, as their
/// agents would: a snapshot envelope per ConfigMap on the peer's subtree.
async fn publish_objects(js: &jetstream::Context, from: usize, to: usize) -> anyhow::Result<()> {
    let prefix = Prefix::default();
    for i in from..to {
        let peer = Sim::name(i);
        for k in 0..OBJECTS_PER_PEER {
            let name = format!("{peer}-{k}");
            let mut object = serde_json::to_value(objects::configmap(&name, "1"))?;
            object["metadata"]["uid"] = format!("{name}-uid").into();
            object["metadata"]["resourceVersion"] = "1".into();
            let subject = ObjectKey::from_object(&peer, &object)
                .ok_or_else(|| anyhow::anyhow!("no key for {name}"))?
                .to_subject(&prefix);
            let env = Envelope::snapshot(&peer, Some(&Sim::id(&peer)), object, chrono::Utc::now())?;
            js.publish(subject, env.encode()?.into()).await?.await?;
        }
    }
    Ok(())
}

/// Every simulated peer's labels here.
fn labels(_: usize) -> BTreeMap<String, String> {
    [("bench".to_owned(), "registry".to_owned())].into()
}

/// `out_bytes` and `out_msgs` (what the server sent it) of the connection named `name`.
async fn connz(http: u16, name: &str) -> anyhow::Result<(f64, f64)> {
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", http)).await?;
    s.write_all(b"GET /connz?limit=100000 HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .await?;
    let mut text = String::new();
    s.read_to_string(&mut text).await?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b)
        .ok_or_else(|| anyhow::anyhow!("no HTTP body"))?;
    let v: serde_json::Value = serde_json::from_str(body)?;
    let c = v["connections"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["name"] == name))
        .ok_or_else(|| anyhow::anyhow!("no connection {name} in /connz"))?;
    let num = |k: &str| c[k].as_f64().unwrap_or(0.0);
    Ok((num("out_bytes"), num("out_msgs")))
}

/// The agent's `fleetbus_registry_passes_total` by `wake` (empty if the
/// metrics cannot be read: the column then says nothing, the run goes on).
fn passes(node: &Member) -> std::collections::BTreeMap<String, f64> {
    const SERIES: &str = "fleetbus_registry_passes_total{wake=\"";
    let Ok((200, body)) = http_get(&format!("http://{}/metrics", node.metrics_addr)) else {
        return Default::default();
    };
    body.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(SERIES)?;
            let (wake, value) = rest.split_once("\"} ")?;
            Some((wake.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

/// How many peers the agent's Cluster objects show in `state`.
pub(crate) async fn count_in(api: &Api<Cluster>, state: ClusterState) -> Result<usize, String> {
    let list = api
        .list(&Default::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .iter()
        .filter(|c| c.status.as_ref().and_then(|s| s.state) == Some(state))
        .count())
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let max = super::env_cap(MAX_ENV);
    let sizes: Vec<usize> = ctx
        .pick(vec![10], vec![10, 100, 1000])
        .into_iter()
        .filter(|n| *n <= max)
        .collect();
    let idle = ctx.pick(Duration::from_secs(3), Duration::from_secs(30));
    let http = free_port();
    // One server with its monitoring port (for /connz): the registry is
    // measured on the single server only.
    let nats = NatsServer::start_with_config(&format!("http: \"127.0.0.1:{http}\"\n"))?;
    let url = nats.url();
    let bus = crate::bus::Bus::Single(nats);
    let mut node = Member::bench_cluster("c1", false, Some(&bus)).await?;
    node.start_agent()?;
    node.wait_ready().await?;
    create_rule(&node).await?;
    let pid = node
        .agent_pid()
        .ok_or_else(|| anyhow::anyhow!("agent not running"))?;
    let client = async_nats::connect(url.as_str()).await?;
    let js = jetstream::new(client);
    let sim = Arc::new(Sim::new(js.clone(), &["c1"], labels));
    let beats = tokio::spawn(sim.clone().run());
    let api: Api<Cluster> = Api::all(node.client.clone());
    let mut t = Table::new("10. Registry: one agent among N simulated peers", &HEADERS);
    // One peer is killed per step: `killed` of the N are silent already.
    for (killed, n) in sizes.into_iter().enumerate() {
        eprintln!("fleetbus-bench: registry: N={n}");
        let step = measure(&sim, &js, &api, &node, pid, http, n, killed, idle).await;
        match step {
            Ok(row) => row.report(&mut t, n),
            Err(e) => {
                t.incomplete(format!("N={n}: {e:#}"));
                break;
            }
        }
    }
    beats.abort();
    t.samples = t.rows.len();
    t.note(format!("Objects: each simulated peer publishes {OBJECTS_PER_PEER} ConfigMaps (1 KiB) for the bench rule on its own subtree; c1's agent writes them as copies (N × {OBJECTS_PER_PEER})."));
    t.note("Idle window: 30 s (3 s in a smoke run) once every live peer is Ready on c1 and every copy is there. CPU from /proc/<pid>/stat, received from nats-server's /connz (out_bytes and out_msgs of the agent's connection).");
    t.note("Fleet traffic is computed for N+1 real agents from the protocol (PROTOCOL §5.4): published = (N+1) / interval beats a second, delivered = published × (N+1) (every agent watches every beat), at the beat's size on the wire measured by the simulator.");
    t.note(format!("{MAX_ENV} caps N. Detection: from the moment the simulated peer stops beating to its Cluster object on c1 reading Disconnected, polled every 100 ms through c1's API; documented = the beat TTL (3 intervals) + 1 s expiry tick."));
    Ok(vec![t])
}

/// What one N measured.
struct Row {
    interval: Duration,
    cpu_pct: f64,
    rss_mib: f64,
    recv_kib_s: f64,
    recv_msgs_s: f64,
    published_kib_s: f64,
    delivered_kib_s: f64,
    detection: Duration,
    documented: Duration,
    /// Reconcile passes a second over the window, by what woke them.
    passes: String,
}

impl Row {
    fn report(&self, t: &mut Table, n: usize) {
        t.row([
            n.to_string(),
            (n * OBJECTS_PER_PEER).to_string(),
            format!("{}", self.interval.as_secs_f64()),
            format!("{:.2}", self.cpu_pct),
            format!("{:.1}", self.rss_mib),
            format!("{:.1}", self.recv_kib_s),
            format!("{:.1}", self.recv_msgs_s),
            format!("{:.1}", self.published_kib_s),
            format!("{:.1}", self.delivered_kib_s),
            format!("{:.1}", self.detection.as_secs_f64()),
            format!("{:.1}", self.documented.as_secs_f64()),
            self.passes.clone(),
        ]);
        // Linear in N: each agent receives at most the target rate, whatever N.
        let cap = TARGET_BEATS_PER_SECOND as f64 * 1.1;
        t.goal(
            &format!("registry N={n}: agent receives ≤ {TARGET_BEATS_PER_SECOND} msgs/s at idle (fleet traffic linear in N)"),
            format!("{:.1} msgs/s", self.recv_msgs_s),
            self.recv_msgs_s <= cap,
        );
        t.goal(
            &format!("registry N={n}: killed peer Disconnected within the documented time"),
            format!(
                "{:.1} s (documented {:.1} s)",
                self.detection.as_secs_f64(),
                self.documented.as_secs_f64()
            ),
            self.detection <= self.documented,
        );
        if n >= 1000 {
            t.goal(
                "registry N=1000: agent idles < 5% of a core",
                format!("{:.2}%", self.cpu_pct),
                self.cpu_pct < 5.0,
            );
            t.goal(
                "registry N=1000: agent RSS < 64 MiB",
                format!("{:.1} MiB", self.rss_mib),
                self.rss_mib < 64.0,
            );
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    sim: &Sim,
    js: &jetstream::Context,
    api: &Api<Cluster>,
    node: &Member,
    pid: u32,
    http: u16,
    n: usize,
    killed: usize,
    idle: Duration,
) -> anyhow::Result<Row> {
    let before = sim.len();
    sim.grow_to(n).await?;
    publish_objects(js, before, n).await?;
    let live = n - killed;
    // The Local object is Ready too.
    poll(
        &format!("{live} peers Ready on c1"),
        SETUP.max(Duration::from_secs(300)),
        || async {
            match count_in(api, ClusterState::Ready).await? {
                r if r > live => Ok(()),
                r => Err(format!("{r} Ready")),
            }
        },
    )
    .await
    .map_err(|e| node.with_log(e))?;
    // Every peer's objects copied to c1 (a Disconnected peer stays a source).
    let copies = n * OBJECTS_PER_PEER;
    let cms = node.configmaps();
    poll(
        &format!("{copies} copies on c1"),
        SETUP.max(Duration::from_secs(300)),
        || async {
            let list = cms
                .list_metadata(&Default::default())
                .await
                .map_err(|e| e.to_string())?;
            match list.items.len() {
                c if c >= copies => Ok(()),
                c => Err(format!("{c} copies")),
            }
        },
    )
    .await
    .map_err(|e| node.with_log(e))?;
    let interval = beat_interval(BASE, n + 1);
    // Let the interval change and the joins settle before measuring idle:
    // every peer is already Ready (polled above); what settles is the traffic
    // of the joins (record puts), which has no end to observe, so two intervals.
    tokio::time::sleep(interval * 2).await;
    let name = format!("fleetbus-agent/{}", node.name);
    let (b0, m0) = connz(http, &name).await?;
    let p0 = passes(node);
    let c0 = procfs::cpu_ticks(pid).unwrap_or(0);
    let start = Instant::now();
    // The measurement window itself: idle CPU and bytes are counted over it.
    tokio::time::sleep(idle).await;
    let window = start.elapsed().as_secs_f64();
    let c1 = procfs::cpu_ticks(pid).unwrap_or(0);
    let p1 = passes(node);
    let (b1, m1) = connz(http, &name).await?;
    let rss = procfs::rss_kib(pid).unwrap_or(0) as f64 / 1024.0;
    let beat_bytes = sim.beat_bytes() as f64;
    let agents = (n + 1) as f64;
    let published = agents / interval.as_secs_f64() * beat_bytes;
    let victim = sim
        .kill_one()
        .ok_or_else(|| anyhow::anyhow!("no live peer to kill"))?;
    let stopped = Instant::now();
    let documented = beat_ttl(interval) + Duration::from_secs(1);
    poll(
        &format!("{victim} Disconnected on c1"),
        documented * 3,
        || async {
            let c = api.get(&victim).await.map_err(|e| e.to_string())?;
            match c.status.and_then(|s| s.state) {
                Some(ClusterState::Disconnected) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await?;
    Ok(Row {
        interval,
        cpu_pct: (c1.saturating_sub(c0)) as f64 / procfs::TICKS_PER_SEC / window * 100.0,
        rss_mib: rss,
        recv_kib_s: (b1 - b0) / 1024.0 / window,
        recv_msgs_s: (m1 - m0) / window,
        published_kib_s: published / 1024.0,
        delivered_kib_s: published * agents / 1024.0,
        detection: stopped.elapsed(),
        documented,
        passes: p1
            .iter()
            .map(|(wake, v)| {
                let rate = (v - p0.get(wake).copied().unwrap_or(0.0)) / window;
                format!("{wake} {rate:.2}")
            })
            .collect::<Vec<_>>()
            .join(", "),
    })
}
