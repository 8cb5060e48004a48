//! Scenario 11: placement at 1,000 clusters (PROTOCOL §6.10).
//! ONE real agent (c1, with its devcluster) among N simulated clusters (the
//! machinery of scenario 10, [`crate::sim`]: a record each, beats at the
//! fleet's interval with their TTL, so c1's registry judges every one Ready
//! and, once its beats stop, Disconnected like a real peer). c1 holds M
//! ConfigMaps (namespace `bench`, created before the rule) and then the
//! rule [`RULE_NAME`] that places them:
//!
//! - `clusterSelector: {bench: placement}` (every simulated cluster; c1 is
//!   the origin, never a candidate);
//! - `clusters: 3`, `spread: [{topologyKey: region, maxSkew: 1}]` over
//!   [`REGIONS`] regions (`region-<i mod 10>`);
//! - `prefer: [{weight: 50, clusterSelector: {tier: gold}}]`, the first
//!   [`GOLD`] clusters being gold (two per region): every object wants three
//!   gold clusters and the spread forbids two of one region, so the spread
//!   binds, and each gold cluster is chosen for about M × 3 / 20 objects: a
//!   failover re-decides ~150 objects at full size, not ~3;
//! - `failover: {afterSeconds: 0}`: a failed cluster is replaced as soon as
//!   c1's registry judges it down, so "within 2 s of the detection" measures
//!   the agent, not a configured wait.
//!
//! Measured (harness timestamps unless said):
//! - **decide everything**: from the rule's creation (the API server's
//!   ack) until all M PlacementRecords of origin c1 are on the stream
//!   `FLEETBUS_PLACEMENTS` (an ordered JetStream consumer of the harness),
//!   and, inside it, until the M source envelopes were on the bus (a core
//!   subscriber on c1's `obj` subjects): the origin decides only objects it
//!   has published and read back.
//! - **the agent's pass** (`fleetbus_placement_pass_seconds`, the deciding
//!   alone, puts excluded; `fleetbus_placement_units`): the passes once all
//!   M units exist are full passes (every pass decides every unit); the goal
//!   is checked on the slowest one, by the upper bound of its bucket.
//! - **failover**: the simulated cluster chosen for the most objects stops
//!   beating. Detection = the moment the harness's own watch of that
//!   cluster's key in the beats bucket receives the server's TTL-expiry
//!   marker: the message c1's registry watch receives at the same time and
//!   judges the peer by (PROTOCOL §5.4). Failover = from then until every
//!   affected object's new record (without the victim in `chosen`) is on
//!   the stream. The simulated clusters write no copies: "new copies
//!   written" is measured as the new decision records, which are what a
//!   sink acts on (one propagation later on a real sink).
//! - **CPU and memory** of the agent from /proc: user+sys over the decide
//!   phase, over a quiet window afterwards (every engine pass re-decides
//!   every unit) and from detection to failover; RSS and peak RSS.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::pull::OrderedConfig, consumer::DeliverPolicy};
use fleetbus_schemas::crd::{Cluster, ClusterState};
use fleetbus_schemas::jetstream::Layout;
use fleetbus_schemas::placement::{all_placements, PlacementKey, PlacementRecord};
use fleetbus_schemas::registry::{beat_interval, beat_ttl};
use fleetbus_schemas::subject::{ObjectKey, Prefix};
use fleetbus_testsupport::{http_get, Member, NatsServer};
use futures::StreamExt;
use kube::api::{DynamicObject, PostParams};
use kube::Api;
use tokio::sync::mpsc;

use crate::bus::Bus;
use crate::mesh::{rule_resource, BenchMember, SETUP};
use crate::objects::{self, NS};
use crate::poll::poll;
use crate::procfs;
use crate::profile::Perf;
use crate::scenario::registry::count_in;
use crate::scenario::{env_cap, Ctx};
use crate::sim::{Sim, BASE, BEATS_BUCKET};
use crate::table::Table;

/// The placing rule.
const RULE_NAME: &str = "placement";
/// Regions the simulated clusters are spread over (the spread's domains).
const REGIONS: usize = 10;
/// The first this many simulated clusters are `tier: gold` (preferred).
const GOLD: usize = 20;
/// `spec.placement.clusters`.
const CLUSTERS: usize = 3;
/// Source objects are `<OBJECT_PREFIX>-<i>`.
const OBJECT_PREFIX: &str = "pl";
/// Caps both N and M (a small machine), not below [`GOLD`].
const MAX_ENV: &str = "FLEETBUS_BENCH_PLACEMENT_MAX";
/// The goals (placement's "Measure it").
const PASS_GOAL: Duration = Duration::from_secs(1);
const FAILOVER_GOAL: Duration = Duration::from_secs(2);
/// The agent's histogram of its placement passes.
const PASS_METRIC: &str = "fleetbus_placement_pass_seconds";

/// The labels of the i-th simulated cluster (see the module docs).
fn labels(i: usize) -> BTreeMap<String, String> {
    let tier = if i < GOLD { "gold" } else { "standard" };
    [
        ("bench".to_owned(), "placement".to_owned()),
        ("region".to_owned(), format!("region-{}", i % REGIONS)),
        ("tier".to_owned(), tier.to_owned()),
    ]
    .into()
}

/// Aborts the simulator's beats however the scenario ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let cap = env_cap(MAX_ENV).max(GOLD);
    let peers = ctx.pick(10, 1000).min(cap);
    let count = ctx.pick(10, 1000).min(cap);
    let nats = NatsServer::start()?;
    let url = nats.url();
    let bus = Bus::Single(nats);
    let mut node = Member::bench_cluster("c1", false, Some(&bus)).await?;
    node.start_agent()?;
    node.wait_ready().await?;
    let pid = node
        .agent_pid()
        .ok_or_else(|| anyhow::anyhow!("agent not running"))?;
    let client = async_nats::connect(url.as_str()).await?;
    let js = jetstream::new(client.clone());
    let sim = Arc::new(Sim::new(js.clone(), &["c1"], labels));
    let _beats = AbortOnDrop(tokio::spawn(sim.clone().run()));
    let m = measure(&node, pid, &client, &js, &sim, peers, count, ctx.profile)
        .await
        .map_err(|e| node.with_log(e))?;
    let mut t = Table::new(
        &format!(
            "11. Placement: one agent among {peers} simulated clusters, {count} objects (clusters: {CLUSTERS}, spread over region)"
        ),
        &["measure", "value"],
    );
    m.report(&mut t, peers, count);
    t.samples = m.full.count as usize + m.affected;
    t.note(format!(
        "Fleet: {peers} simulated clusters (scenario 10's simulator: records and beats with their TTL, no agent, no copies), labelled `bench: placement`, `region: region-<i mod {REGIONS}>`, the first {GOLD} `tier: gold`. Rule `{RULE_NAME}` on c1 over the {count} ConfigMaps of `{NS}` (1 KiB, created before the rule): `clusters: {CLUSTERS}`, `spread: [{{topologyKey: region, maxSkew: 1}}]`, `prefer: [{{weight: 50, clusterSelector: {{tier: gold}}}}]` (the spread binds: two gold clusters per region), `failover: {{afterSeconds: 0}}`."
    ));
    t.note("Decide everything: from the rule's creation (API ack) until every record of origin c1 is on FLEETBUS_PLACEMENTS, read by an ordered JetStream consumer of the harness; the sources' time is when the last of the source envelopes reached a core subscriber on c1's `obj` subjects (the origin decides only objects it has published and read back).");
    t.note(format!("Agent pass: `{PASS_METRIC}` (the deciding of every unit, the puts excluded). Full passes: those run after every record was on the stream until the failover was done (each decides all {count} units against all {peers} clusters); the goal is checked on the slowest by its bucket's upper bound (buckets ≤ 0.5, 0.75, 1, 1.5 s …)."));
    t.note("Failover: the cluster chosen for the most objects stops beating. Detection = the harness's watch of its key in the beats bucket receives the server's TTL-expiry marker (what c1's registry watch receives and judges by); then until every affected object's new record (victim no longer chosen) is on the stream. The simulated clusters write no copies: the new records are what a sink copies by, one propagation later.");
    t.note(format!("CPU: user+sys of the agent from /proc/<pid>/stat (10 ms ticks); quiet window {} s after everything was decided; RSS and peak (VmHWM) at the end. {MAX_ENV} caps N and M (not below {GOLD}).", m.quiet.as_secs()));
    if !m.top.is_empty() {
        t.note(format!(
            "perf profile of the agent from the rule's creation to the end of the quiet window, top functions by self time: {}",
            m.top.join("; ")
        ));
    }
    Ok(vec![t])
}

/// A snapshot of the agent's pass histogram.
#[derive(Debug, Clone, Default)]
struct Hist {
    /// (upper bound, cumulative count), in order.
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Hist {
    fn read(node: &Member) -> anyhow::Result<Self> {
        let (status, body) = http_get(&format!("http://{}/metrics", node.metrics_addr))
            .map_err(anyhow::Error::msg)?;
        anyhow::ensure!(status == 200, "/metrics answered {status}");
        Ok(Self::parse(&body))
    }

    fn parse(text: &str) -> Self {
        let mut h = Hist::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let Some(rest) = line.strip_prefix(PASS_METRIC) else {
                continue;
            };
            let value = |s: &str| s.split_whitespace().last()?.parse::<f64>().ok();
            if let Some(b) = rest.strip_prefix("_bucket{le=\"") {
                let Some((le, tail)) = b.split_once("\"}") else {
                    continue;
                };
                if let (Ok(le), Some(v)) = (le.parse::<f64>(), value(tail)) {
                    h.buckets.push((le, v));
                }
            } else if let Some(s) = rest.strip_prefix("_sum ") {
                h.sum = value(s).unwrap_or(0.0);
            } else if let Some(s) = rest.strip_prefix("_count ") {
                h.count = value(s).unwrap_or(0.0);
            }
        }
        h
    }

    /// The passes observed since `before`: how many, their mean, and the
    /// upper bound of the bucket of the slowest.
    fn since(&self, before: &Hist) -> Passes {
        let count = self.count - before.count;
        let slowest = self
            .buckets
            .iter()
            .map(|(le, c)| {
                let earlier = before
                    .buckets
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0.0, |b| b.1);
                (*le, c - earlier)
            })
            .find(|(_, c)| count > 0.0 && *c >= count)
            .map(|(le, _)| le);
        Passes {
            count: count.max(0.0) as u64,
            mean: (count > 0.0).then(|| (self.sum - before.sum) / count),
            slowest,
        }
    }
}

/// Passes of the agent over a window.
#[derive(Debug, Clone, Copy)]
struct Passes {
    count: u64,
    mean: Option<f64>,
    /// The bucket bound the slowest pass is under.
    slowest: Option<f64>,
}

impl Passes {
    fn show(&self) -> String {
        let ms = |s: f64| format!("{:.1} ms", s * 1000.0);
        match (self.mean, self.slowest) {
            (Some(mean), Some(le)) if le.is_finite() => {
                format!(
                    "{} passes, mean {}, slowest ≤ {}",
                    self.count,
                    ms(mean),
                    ms(le)
                )
            }
            (Some(mean), _) => format!(
                "{} passes, mean {}, slowest > the largest bucket",
                self.count,
                ms(mean)
            ),
            _ => format!("{} passes", self.count),
        }
    }
}

/// One record seen on the stream, with when.
struct Seen {
    at: Instant,
    subject: String,
    record: PlacementRecord,
}

/// What the stream holds of origin c1, as the harness read it.
struct Records {
    rx: mpsc::UnboundedReceiver<anyhow::Result<Seen>>,
    latest: BTreeMap<String, PlacementRecord>,
}

impl Records {
    /// Reads until `done` holds of the latest records; returns when the
    /// record that made it hold arrived.
    async fn until(
        &mut self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&BTreeMap<String, PlacementRecord>) -> bool,
    ) -> anyhow::Result<Instant> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut at = Instant::now();
        while !done(&self.latest) {
            let next = tokio::time::timeout_at(deadline, self.rx.recv())
                .await
                .map_err(|_| {
                    anyhow::anyhow!(
                        "{what}: not within {timeout:?} ({} records read)",
                        self.latest.len()
                    )
                })?
                .ok_or_else(|| anyhow::anyhow!("{what}: the placement consumer ended"))??;
            at = next.at;
            self.latest.insert(next.subject, next.record);
        }
        Ok(at)
    }
}

/// Follows every placement record of origin c1 on the stream (an ordered
/// consumer from the start), sending each with when it arrived.
async fn follow(js: &jetstream::Context) -> anyhow::Result<Records> {
    let prefix = Prefix::default();
    let layout = Layout::new(prefix.clone(), 1);
    let name = layout.placements_stream().name;
    // The agent creates the stream at start-up; ready means it exists, but
    // a slow start is no reason to fail.
    let stream = poll(&format!("stream {name}"), SETUP, || async {
        js.get_stream(&name).await.map_err(|e| e.to_string())
    })
    .await?;
    let consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: all_placements(&prefix),
            deliver_policy: DeliverPolicy::All,
            ..OrderedConfig::default()
        })
        .await?;
    let mut messages = consumer.messages().await?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(m) = messages.next().await {
            let at = Instant::now();
            let seen = m.map_err(anyhow::Error::from).and_then(|m| {
                let subject = m.subject.to_string();
                let key = PlacementKey::parse_subject(&prefix, &subject)
                    .map_err(|e| anyhow::anyhow!("{subject}: {e}"))?;
                let record = PlacementRecord::decode(&m.payload)
                    .map_err(|e| anyhow::anyhow!("{subject}: {e}"))?;
                Ok((key.origin == "c1").then_some(Seen {
                    at,
                    subject,
                    record,
                }))
            });
            let failed = seen.is_err();
            if let Some(s) = seen.transpose() {
                if tx.send(s).is_err() || failed {
                    return;
                }
            }
        }
    });
    Ok(Records {
        rx,
        latest: BTreeMap::new(),
    })
}

/// Counts the distinct source envelopes c1 publishes for the objects; the
/// receiver gets (count, when) at each new one.
async fn follow_sources(
    client: &async_nats::Client,
) -> anyhow::Result<tokio::sync::watch::Receiver<(usize, Instant)>> {
    let sample = serde_json::to_value(objects::configmap("x", "0"))?;
    let subject = ObjectKey::from_object("c1", &sample)
        .ok_or_else(|| anyhow::anyhow!("no subject for a ConfigMap"))?
        .to_subject(&Prefix::default());
    let head = subject
        .rsplit_once('.')
        .map(|(head, _)| head.to_owned())
        .ok_or_else(|| anyhow::anyhow!("subject {subject} has no name token"))?;
    let mut sub = client.subscribe(format!("{head}.*")).await?;
    client.flush().await?;
    let (tx, rx) = tokio::sync::watch::channel((0, Instant::now()));
    tokio::spawn(async move {
        let mut names = BTreeSet::new();
        let lead = format!("{head}.{OBJECT_PREFIX}-");
        while let Some(m) = sub.next().await {
            let at = Instant::now();
            if m.subject.starts_with(lead.as_str())
                && names.insert(m.subject.to_string())
                && tx.send((names.len(), at)).is_err()
            {
                return;
            }
        }
    });
    Ok(rx)
}

/// Creates the placing rule on c1; returns when the API server acknowledged it.
async fn create_rule(node: &Member) -> anyhow::Result<Instant> {
    let rule: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "fleetbus.io/v1alpha1",
        "kind": "ResourceSyncRule",
        "metadata": {"name": RULE_NAME},
        "spec": {
            "groupVersionKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
            "rules": [{"match": [{"namespaces": [NS]}]}],
            "clusterSelector": {"matchLabels": {"bench": "placement"}},
            "placement": {
                "clusters": CLUSTERS,
                "spread": [{"topologyKey": "region", "maxSkew": 1}],
                "prefer": [{"weight": 50, "clusterSelector": {"matchLabels": {"tier": "gold"}}}],
                "failover": {"afterSeconds": 0},
            },
        },
    }))?;
    Api::<DynamicObject>::all_with(node.client.clone(), &rule_resource())
        .create(&PostParams::default(), &rule)
        .await
        .map_err(|e| anyhow::anyhow!("create rule {RULE_NAME}: {e}"))?;
    Ok(Instant::now())
}

/// What one run measured.
struct Measured {
    sources: Duration,
    decided: Duration,
    initial: Passes,
    full: Passes,
    quiet: Duration,
    quiet_passes: Passes,
    quiet_cpu_pct: f64,
    decide_cpu_s: f64,
    decide_cpu_pct: f64,
    units: f64,
    degraded: usize,
    victim: String,
    affected: usize,
    detection_wait: Duration,
    /// Seconds, signed (see [`ms`]).
    failover: f64,
    failover_cpu_s: f64,
    failovers_counted: f64,
    rss_mib: f64,
    peak_mib: f64,
    /// `--profile`: the agent's top functions by self time.
    top: Vec<String>,
}

/// Signed milliseconds: the agent's watch may get the expiry marker before
/// the harness's, so its records can arrive first (then ≤ 0).
fn ms(s: f64) -> String {
    format!("{:.1} ms", s * 1000.0)
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

impl Measured {
    fn report(&self, t: &mut Table, peers: usize, count: usize) {
        let rows: Vec<(&str, String)> = vec![
            ("simulated clusters × objects", format!("{peers} × {count}")),
            ("rule created → every source on the bus", secs(self.sources)),
            (
                "rule created → every record on the stream",
                secs(self.decided),
            ),
            (
                "last source on the bus → every record on the stream",
                secs(self.decided.saturating_sub(self.sources)),
            ),
            (
                "agent passes until every record (growing)",
                self.initial.show(),
            ),
            (
                "units of a full pass (fleetbus_placement_units)",
                format!("{}", self.units),
            ),
            ("agent full passes (all units)", self.full.show()),
            (
                "records degraded (fewer than 3, or spread missed)",
                self.degraded.to_string(),
            ),
            (
                "agent CPU, rule → every record",
                format!(
                    "{:.2} s ({:.0}% of a core)",
                    self.decide_cpu_s, self.decide_cpu_pct
                ),
            ),
            (
                "agent CPU, quiet window",
                format!(
                    "{:.1}% of a core ({})",
                    self.quiet_cpu_pct,
                    self.quiet_passes.show()
                ),
            ),
            (
                "failed cluster (objects it held)",
                format!("{} ({})", self.victim, self.affected),
            ),
            (
                "beats stopped → expiry marker (detection)",
                secs(self.detection_wait),
            ),
            (
                "detection → every new record on the stream",
                ms(self.failover),
            ),
            (
                "agent CPU, detection → failover done",
                format!("{:.2} s", self.failover_cpu_s),
            ),
            (
                "fleetbus_placement_failovers_total",
                format!("{}", self.failovers_counted),
            ),
            (
                "agent RSS / peak",
                format!("{:.1} MiB / {:.1} MiB", self.rss_mib, self.peak_mib),
            ),
        ];
        for (k, v) in rows {
            t.row([k.to_owned(), v]);
        }
        let slowest = self.full.slowest.unwrap_or(f64::INFINITY);
        t.goal(
            &format!("placement {peers}×{count}: a full decision pass < 1 s"),
            self.full.show(),
            self.full.count > 0 && slowest <= PASS_GOAL.as_secs_f64(),
        );
        t.goal(
            &format!(
                "placement {peers}×{count}: failover's new records within 2 s of the detection"
            ),
            format!("{} ({} objects)", ms(self.failover), self.affected),
            self.failover <= FAILOVER_GOAL.as_secs_f64(),
        );
    }
}

/// The share of a core (%) process `pid` uses over the next `window`: a
/// sleep is the point here (what the agent spends while nothing happens).
async fn cpu_share(pid: u32, window: Duration) -> f64 {
    let t0 = procfs::cpu_ticks(pid).unwrap_or(0);
    let started = Instant::now();
    tokio::time::sleep(window).await;
    let secs = started.elapsed().as_secs_f64();
    let t1 = procfs::cpu_ticks(pid).unwrap_or(0);
    t1.saturating_sub(t0) as f64 / procfs::TICKS_PER_SEC / secs * 100.0
}

/// The cluster chosen for the most objects (ties: the first by name), and
/// the subjects of the records that choose it.
fn victim_of(
    latest: &BTreeMap<String, PlacementRecord>,
) -> anyhow::Result<(String, BTreeSet<String>)> {
    let mut held: BTreeMap<&str, usize> = BTreeMap::new();
    for r in latest.values() {
        for c in r.chosen_names() {
            *held.entry(c).or_default() += 1;
        }
    }
    let victim = held
        .iter()
        .max_by_key(|(name, n)| (**n, std::cmp::Reverse(**name)))
        .map(|(name, _)| (*name).to_owned())
        .ok_or_else(|| anyhow::anyhow!("no cluster was chosen"))?;
    let affected = latest
        .iter()
        .filter(|(_, r)| r.chosen_names().any(|c| c == victim))
        .map(|(s, _)| s.clone())
        .collect();
    Ok((victim, affected))
}

/// Stops `victim`'s beats and waits for the server's expiry marker of its
/// beat key (what the agent's registry judges by): (stopped, detected).
async fn stop_and_detect(
    js: &jetstream::Context,
    sim: &Sim,
    victim: &str,
    peers: usize,
) -> anyhow::Result<(Instant, Instant)> {
    let kv = js.get_key_value(BEATS_BUCKET).await?;
    let mut watch = kv.watch(Sim::beat_key(victim)).await?;
    anyhow::ensure!(sim.kill(victim), "{victim} was not beating");
    let stopped = Instant::now();
    let interval = beat_interval(BASE, peers + 1);
    let wait = beat_ttl(interval) + interval + Duration::from_secs(30);
    let detected = tokio::time::timeout(wait, async {
        while let Some(e) = watch.next().await {
            let e = e?;
            if e.operation != jetstream::kv::Operation::Put {
                return anyhow::Ok(Instant::now());
            }
        }
        anyhow::bail!("the beats watch ended")
    })
    .await
    .map_err(|_| anyhow::anyhow!("no expiry marker of {victim}'s beat within {wait:?}"))??;
    Ok((stopped, detected))
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    node: &Member,
    pid: u32,
    client: &async_nats::Client,
    js: &jetstream::Context,
    sim: &Sim,
    peers: usize,
    count: usize,
    profile: bool,
) -> anyhow::Result<Measured> {
    eprintln!("fleetbus-bench: placement: {peers} simulated clusters");
    sim.grow_to(peers).await?;
    // Every simulated cluster Ready on c1 (the Local object is Ready too)
    // before the rule: a cluster not judged yet is no candidate, and in
    // Steady mode a first decision without it would stand.
    let api: Api<Cluster> = Api::all(node.client.clone());
    poll(
        &format!("{peers} clusters Ready on c1"),
        SETUP.max(Duration::from_secs(300)),
        || async {
            match count_in(&api, ClusterState::Ready).await? {
                r if r > peers => Ok(()),
                r => Err(format!("{r} Ready")),
            }
        },
    )
    .await?;
    eprintln!("fleetbus-bench: placement: creating {count} objects");
    crate::load::create_many(&node.configmaps(), OBJECT_PREFIX, 0..count, 16).await?;
    let mut records = follow(js).await?;
    let mut sources = follow_sources(client).await?;
    let h0 = Hist::read(node)?;
    // `--profile`: the agent sampled from the rule's creation to the end of
    // the quiet window (deciding everything, then full passes alone).
    let perf = profile.then(|| Perf::start(pid)).flatten();
    let c0 = procfs::cpu_ticks(pid).unwrap_or(0);
    eprintln!("fleetbus-bench: placement: rule created, deciding");
    let created = create_rule(node).await?;
    let timeout = SETUP.max(Duration::from_secs(300));
    let sourced = tokio::time::timeout(timeout, sources.wait_for(|(n, _)| *n >= count))
        .await
        .map_err(|_| anyhow::anyhow!("{count} sources not on the bus within {timeout:?}"))??
        .1;
    let decided = records
        .until(&format!("{count} placement records"), timeout, |l| {
            l.len() >= count
        })
        .await?;
    let c1 = procfs::cpu_ticks(pid).unwrap_or(0);
    let decide_cpu_s = c1.saturating_sub(c0) as f64 / procfs::TICKS_PER_SEC;
    let decide_secs = decided.saturating_duration_since(created).as_secs_f64();
    let h1 = Hist::read(node)?;
    let degraded = records
        .latest
        .values()
        .filter(|r| r.degraded.is_some() || r.chosen.len() < CLUSTERS)
        .count();

    // A quiet window: what the agent spends with every unit decided.
    let quiet = Duration::from_secs(if peers >= 1000 { 10 } else { 3 });
    let quiet_cpu_pct = cpu_share(pid, quiet).await;
    let hq = Hist::read(node)?;
    let units = node.agent_metric("fleetbus_placement_units").unwrap_or(0.0);
    let top = perf.map(|p| p.stop(15)).unwrap_or_default();

    let (victim, affected) = victim_of(&records.latest)?;
    let failovers0 = node
        .agent_metric("fleetbus_placement_failovers_total")
        .unwrap_or(0.0);
    eprintln!(
        "fleetbus-bench: placement: {victim} (chosen for {}) stops beating",
        affected.len()
    );
    let (stopped, detected) = stop_and_detect(js, sim, &victim, peers).await?;
    let d0 = procfs::cpu_ticks(pid).unwrap_or(0);
    let moved = records
        .until(
            &format!("{} records without {victim}", affected.len()),
            Duration::from_secs(60),
            |l| {
                affected.iter().all(|s| {
                    l.get(s)
                        .is_some_and(|r| !r.chosen_names().any(|c| c == victim))
                })
            },
        )
        .await?;
    let d1 = procfs::cpu_ticks(pid).unwrap_or(0);
    let h2 = Hist::read(node)?;
    let failovers1 = node
        .agent_metric("fleetbus_placement_failovers_total")
        .unwrap_or(0.0);
    Ok(Measured {
        sources: sourced.saturating_duration_since(created),
        decided: decided.saturating_duration_since(created),
        initial: h1.since(&h0),
        full: h2.since(&h1),
        quiet,
        quiet_passes: hq.since(&h1),
        quiet_cpu_pct,
        decide_cpu_s,
        decide_cpu_pct: decide_cpu_s / decide_secs.max(1e-3) * 100.0,
        units,
        degraded,
        victim,
        affected: affected.len(),
        detection_wait: detected.saturating_duration_since(stopped),
        failover: if moved >= detected {
            moved.duration_since(detected).as_secs_f64()
        } else {
            -detected.duration_since(moved).as_secs_f64()
        },
        failover_cpu_s: d1.saturating_sub(d0) as f64 / procfs::TICKS_PER_SEC,
        failovers_counted: failovers1 - failovers0,
        rss_mib: procfs::rss_kib(pid).unwrap_or(0) as f64 / 1024.0,
        peak_mib: procfs::peak_rss_kib(pid).unwrap_or(0) as f64 / 1024.0,
        top,
    })
}

#[cfg(test)]
mod tests {
    use super::Hist;

    #[test]
    fn the_slowest_pass_is_bounded_by_the_first_bucket_holding_every_new_pass() {
        let before = Hist::parse(
            "fleetbus_placement_pass_seconds_bucket{le=\"0.5\"} 2\nfleetbus_placement_pass_seconds_bucket{le=\"1.0\"} 2\nfleetbus_placement_pass_seconds_bucket{le=\"+Inf\"} 2\nfleetbus_placement_pass_seconds_sum 0.4\nfleetbus_placement_pass_seconds_count 2\n",
        );
        let after = Hist::parse(
            "# HELP x\nfleetbus_placement_pass_seconds_bucket{le=\"0.5\"} 3\nfleetbus_placement_pass_seconds_bucket{le=\"1.0\"} 4\nfleetbus_placement_pass_seconds_bucket{le=\"+Inf\"} 4\nfleetbus_placement_pass_seconds_sum 1.6\nfleetbus_placement_pass_seconds_count 4\nfleetbus_placement_units 7\n",
        );
        let p = after.since(&before);
        assert_eq!(p.count, 2);
        assert_eq!(p.slowest, Some(1.0));
        assert!((p.mean.unwrap() - 0.6).abs() < 1e-9);
        // No new pass: no bound, no mean.
        let none = after.since(&after);
        assert_eq!((none.count, none.slowest, none.mean), (0, None, None));
        // A pass past the largest finite bucket is bounded by +Inf only.
        let slow = Hist::parse(
            "fleetbus_placement_pass_seconds_bucket{le=\"1.0\"} 2\nfleetbus_placement_pass_seconds_bucket{le=\"+Inf\"} 3\nfleetbus_placement_pass_seconds_count 3\n",
        );
        assert_eq!(slow.since(&before).slowest, Some(f64::INFINITY));
    }
}
