//! The scenarios: each builds a [`Fleet`], runs the workload, injects its
//! faults while the workload runs, stops it, waits for convergence and
//! checks the oracle's invariants plus its own (writes, drift, readiness).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fleetbus_testsupport::try_wait_for;
use futures::StreamExt;

use crate::fleet::{Fleet, Load, SETUP};
use crate::oracle::{RuleModel, Source, Violation};
use crate::proxy::Fault;
use crate::workload::lock;

mod agents;
mod failover;
mod pressure;
mod versions;

pub use versions::OLD_REVISION;

/// Every scenario, in the order `all` runs them, with what it shows.
pub const SCENARIOS: &[(&str, &str)] = &[
    ("restart", "agent restart with nothing changed: zero writes, zero drift events"),
    ("nats-kill", "nats-server kill -9 and restart under churn: nothing lost, converged after"),
    ("partition", "one agent cut from NATS under churn: keeps its copies, converges after the heal"),
    ("api-down", "an agent's API server unreachable (proxy cut + SIGSTOP): /readyz 503, converged after"),
    ("catchup-kill", "sink agent kill -9 in the middle of a catch-up, restarted: converged, nothing lost or extra"),
    ("flapping", "an agent's NATS link cut 2 s every 5 s under churn: converged after"),
    ("slow-sink", "an agent SIGSTOPped while the others churn: after SIGCONT it writes each copy about once, not every version"),
    ("redelivery", "JetStream acks dropped on every agent's link under churn: no copy written twice"),
    ("rolling-restart", "every agent restarted in turn under churn: nothing lost, no delete because a peer was Disconnected"),
    ("leave-vs-crash", "peers leave for good (orphanPolicy Delete, then Orphan) and one crashes: copies follow the policy, or stay"),
    ("api-pressure", "an agent's API server answers 429 (Retry-After), 500, late and ends watches with 410 under churn: bounded requests, no rewrite on re-list, converged after"),
    ("failover", "a placed object's chosen sink dies (agent and API server SIGKILLed) under churn: replaced within afterSeconds + 10 s, never fewer than 2 copies outside that window, no flapping, nothing deleted where it could not be heard, stale copies collected on return"),
    ("placement-partition", "a placed object's chosen sink cut from NATS for the failover window under churn: replaced elsewhere, none of its copies deleted while cut, collected once it hears again, no flapping"),
];

/// Scenarios run only by name, never by `all` nor in CI: `mixed-versions`
/// builds a second agent from git history first (minutes when cold).
pub const ON_DEMAND: &[(&str, &str)] = &[
    ("mixed-versions", "the fleet on the previous release's agent (built from git history, or --old-agent), upgraded one agent at a time under churn: converged, nothing lost, stale or written twice after every step; rules preview answered while mixed"),
];

/// The clusters of every fleet (every one an origin and a sink).
const CLUSTERS: &[&str] = &["c1", "c2", "c3"];
/// How long the sinks may take to converge once the workload stopped.
const CONVERGE: Duration = Duration::from_secs(90);
/// After convergence, how long the fleet must stay without ConfigMap writes
/// (every cluster copies to every other: a ping-pong would write here).
const QUIET: Duration = Duration::from_secs(3);

/// One scenario's result: a row of the report.
#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: String,
    pub seed: u64,
    /// From the end of the last fault to convergence (None: not converged).
    pub converged: Option<Duration>,
    /// Source objects the oracle checked.
    pub objects: usize,
    /// Acknowledged writes (creates, updates, deletes) on the origins.
    pub changes: u64,
    /// The sinks' ConfigMap writes ÷ changes.
    pub writes_per_change: f64,
    /// Every invariant that did not hold, objects named.
    pub violations: Vec<String>,
}

impl Row {
    pub fn passed(&self) -> bool {
        self.converged.is_some() && self.violations.is_empty()
    }

    /// A row for a scenario that could not run to its end.
    pub fn error(scenario: &str, seed: u64, e: &anyhow::Error) -> Row {
        Row {
            scenario: scenario.to_owned(),
            seed,
            converged: None,
            objects: 0,
            changes: 0,
            writes_per_change: 0.0,
            violations: vec![format!("error: {e:#}")],
        }
    }
}

/// The sizes of a run: seconds each (`--short`, CI) or the full version.
#[derive(Debug, Clone, Copy)]
pub struct Size {
    /// The short version (CI) rather than the full one.
    short: bool,
    /// Churn before the fault and after it.
    churn: Duration,
    /// Writers per origin and objects per writer.
    writers: usize,
    objects: usize,
    pace: Duration,
    /// How long a cut, a pause or an outage lasts.
    outage: Duration,
    /// Cycles of the flapping link.
    flaps: usize,
    /// Objects written while a sink's agent is down (catch-up scenario).
    backlog: usize,
    /// How late the sink's API server answers each request during that
    /// catch-up: the short backlog is small, and a delay per request makes
    /// a catch-up that sends its requests one at a time show in seconds.
    catchup_latency: Duration,
}

impl Size {
    pub fn new(short: bool) -> Size {
        if short {
            Size {
                short,
                churn: Duration::from_secs(2),
                writers: 2,
                objects: 10,
                pace: Duration::from_millis(20),
                outage: Duration::from_secs(6),
                flaps: 2,
                backlog: 600,
                catchup_latency: Duration::from_millis(100),
            }
        } else {
            Size {
                short,
                churn: Duration::from_secs(20),
                writers: 4,
                objects: 50,
                pace: Duration::from_millis(10),
                outage: Duration::from_secs(60),
                flaps: 24,
                backlog: 10_000,
                catchup_latency: Duration::ZERO,
            }
        }
    }
}

impl Size {
    /// Whether this is the short version.
    pub fn is_short(&self) -> bool {
        self.short
    }
}

/// Runs scenario `name`; an error (a process that did not start) is a failed
/// row. `old_agent`: the earlier agent `mixed-versions` starts the fleet on
/// (None: built from [`OLD_REVISION`] by `scripts/old-agent`).
pub async fn run(name: &str, seed: u64, size: Size, old_agent: Option<&std::path::Path>) -> Row {
    let result = match name {
        "restart" => restart(seed, size).await,
        "nats-kill" => nats_kill(seed, size).await,
        "partition" => partition(seed, size).await,
        "api-down" => api_down(seed, size).await,
        "catchup-kill" => catchup_kill(seed, size).await,
        "flapping" => flapping(seed, size).await,
        "slow-sink" => agents::slow_sink(seed, size).await,
        "redelivery" => agents::redelivery(seed, size).await,
        "rolling-restart" => agents::rolling_restart(seed, size).await,
        "leave-vs-crash" => agents::leave_vs_crash(seed, size).await,
        "api-pressure" => pressure::api_pressure(seed, size).await,
        "failover" => failover::failover(seed, size).await,
        "placement-partition" => failover::placement_partition(seed, size).await,
        "mixed-versions" => versions::mixed_versions(seed, size, old_agent).await,
        other => Err(anyhow::anyhow!("no scenario {other}")),
    };
    result.unwrap_or_else(|e| Row::error(name, seed, &e))
}

/// A fleet with its workload running, and the writes counted before it.
struct Running {
    fleet: Fleet,
    load: Load,
    writes_before: u64,
}

async fn start(seed: u64, size: Size) -> anyhow::Result<Running> {
    let fleet = Fleet::start(CLUSTERS).await?;
    let writes_before = fleet.configmap_writes().await?;
    let load = fleet.start_load(seed, size.writers, size.objects, size.pace);
    Ok(Running {
        fleet,
        load,
        writes_before,
    })
}

/// Stops the workload, waits for convergence, checks the quiet period and
/// makes the row; `last_fault` is when the last fault ended.
async fn finish(
    name: &str,
    seed: u64,
    run: Running,
    last_fault: Instant,
    extra: Vec<String>,
) -> anyhow::Result<Row> {
    let model = run.fleet.rule_model();
    let (row, _) = finish_with(name, seed, run, last_fault, extra, &model, None).await?;
    Ok(row)
}

/// The copies one sink held when a fault struck, with their
/// resourceVersions: those that were right then must not be written after
/// it (checked once the oracle is settled).
struct Untouchable {
    node: usize,
    copies: Vec<(crate::oracle::Copy, String)>,
}

/// [`finish`] against `model` (its sinks only), also checking that no copy in
/// `untouchable` that was right was written since; hands the fleet back for
/// the scenario's own checks after convergence (watches stopped).
async fn finish_with(
    name: &str,
    seed: u64,
    mut run: Running,
    last_fault: Instant,
    mut extra: Vec<String>,
    model: &RuleModel,
    untouchable: Option<Untouchable>,
) -> anyhow::Result<(Row, Running)> {
    run.load.stop().await;
    let conv = run.fleet.converge_to(model, CONVERGE).await?;
    let converged = conv.after.map(|_| last_fault.elapsed());
    let writes = run.fleet.configmap_writes().await? - run.writes_before;
    if converged.is_some() {
        tokio::time::sleep(QUIET).await;
        let later = run.fleet.configmap_writes().await? - run.writes_before;
        if later != writes {
            extra.push(format!(
                "{} ConfigMap writes in the {QUIET:?} after convergence (ping-pong?)",
                later - writes
            ));
        }
    }
    if let Some(u) = untouchable {
        extra.extend(
            rewritten(&run.fleet, u)
                .await?
                .iter()
                .map(ToString::to_string),
        );
    }
    run.fleet.stop_watches().await;
    let (objects, changes) = {
        let o = lock(&run.fleet.oracle);
        (o.objects(), o.acknowledged_writes())
    };
    // The devclusters count the origins' own writes too: take them out.
    let sink_writes = writes.saturating_sub(changes);
    let mut violations: Vec<String> = conv.violations.iter().map(ToString::to_string).collect();
    violations.extend(extra);
    if !(conv.after.is_some() && violations.is_empty()) {
        let dir = failed_logs_dir(name, seed);
        match run.fleet.keep_logs(&dir) {
            Ok(()) => eprintln!("fleetbus-chaos: {name}: agent logs in {}", dir.display()),
            Err(e) => eprintln!("fleetbus-chaos: {name}: agent logs not kept: {e}"),
        }
    }
    let row = Row {
        scenario: name.to_owned(),
        seed,
        converged,
        objects,
        changes,
        writes_per_change: if changes == 0 {
            0.0
        } else {
            sink_writes as f64 / changes as f64
        },
        violations,
    };
    Ok((row, run))
}

/// Where a failed run's agent logs are kept: a directory of its own per run
/// (scenario, seed, time and process), so a later run of the same seed — the
/// next `./scripts/test`, or a rerun to reproduce — never overwrites the logs
/// of the failure being explained.
pub(crate) fn failed_logs_dir(scenario: &str, seed: u64) -> std::path::PathBuf {
    let at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    std::env::temp_dir().join(format!(
        "fleetbus-chaos-{scenario}-{seed}-{at}-{}",
        std::process::id()
    ))
}

/// API requests of every agent so far, in node order.
async fn api_requests(fleet: &Fleet) -> anyhow::Result<Vec<u64>> {
    let mut out = Vec::new();
    for n in &fleet.nodes {
        out.push(pressure::agent_requests(n).await?);
    }
    Ok(out)
}

/// Requests an agent may send its API server per copy it wrote (a write, at
/// most a dry run or a read before it, a status write) and per second of the
/// run for what it does anyway (the API probe every second, watch
/// bookmarks, rule status). A cut of the NATS link must add no API work: a
/// retry storm against the API server would exceed this many times over.
const REQUESTS_PER_WRITE: u64 = 4;
const REQUESTS_PER_SECOND: u64 = 3;

/// Every agent's API requests since `before`, against its copy writes over
/// the same span: bounded, whatever the flapping link did.
async fn bounded_requests(
    fleet: &Fleet,
    work: &agents::Work,
    before: &[u64],
    span: Duration,
) -> anyhow::Result<Vec<String>> {
    let after = api_requests(fleet).await?;
    let writes = work.copy_writes_since(fleet)?;
    let mut out = Vec::new();
    for (((n, r0), r1), w) in fleet.nodes.iter().zip(before).zip(after).zip(writes) {
        let requests = r1.saturating_sub(*r0);
        let bound = w * REQUESTS_PER_WRITE + span.as_secs().max(1) * REQUESTS_PER_SECOND;
        eprintln!(
            "fleetbus-chaos: {}: {requests} API requests for {w} copy writes in {span:.0?} (bound {bound})",
            n.name()
        );
        if requests > bound {
            out.push(format!(
                "{}: {requests} API requests for {w} copy writes in {span:.0?} (bound {bound}): a retry storm?",
                n.name()
            ));
        }
    }
    Ok(out)
}

/// Converged churn, then every agent restarted: no write, no drift event.
async fn restart(seed: u64, size: Size) -> anyhow::Result<Row> {
    let mut run = start(seed, size).await?;
    tokio::time::sleep(size.churn).await;
    run.load.stop().await;
    let conv = run.fleet.converge(CONVERGE).await?;
    if conv.after.is_none() {
        let dir = failed_logs_dir("restart", seed);
        if run.fleet.keep_logs(&dir).is_ok() {
            eprintln!("fleetbus-chaos: restart: agent logs in {}", dir.display());
        }
        anyhow::bail!("not converged before the restarts");
    }
    let nats = async_nats::connect(run.fleet.nats.url()).await?;
    let mut drift = nats.subscribe("fleetbus.drift.>").await?;
    nats.flush().await?;
    let before = run.fleet.configmap_writes().await?;
    for node in &mut run.fleet.nodes {
        node.member.agent.stop();
        node.member.agent.spawn()?;
    }
    for node in &run.fleet.nodes {
        node.wait_ready().await?;
    }
    let last_fault = Instant::now();
    tokio::time::sleep(size.churn + QUIET).await;
    let mut extra = Vec::new();
    let after = run.fleet.configmap_writes().await?;
    if after != before {
        extra.push(format!(
            "{} ConfigMap writes after restarting every agent with nothing changed",
            after - before
        ));
    }
    let mut events = 0;
    while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(200), drift.next()).await {
        events += 1;
    }
    if events > 0 {
        extra.push(format!("{events} drift events with nothing edited"));
    }
    finish("restart", seed, run, last_fault, extra).await
}

/// nats-server SIGKILLed under churn, restarted on its file store.
async fn nats_kill(seed: u64, size: Size) -> anyhow::Result<Row> {
    let mut run = start(seed, size).await?;
    tokio::time::sleep(size.churn).await;
    run.fleet.nats.kill();
    tokio::time::sleep(size.outage.min(Duration::from_secs(10)) / 2).await;
    run.fleet.nats.restart()?;
    let last_fault = Instant::now();
    tokio::time::sleep(size.churn).await;
    let row = finish("nats-kill", seed, run, last_fault, Vec::new()).await?;
    // The goal, counted from the end of the churn that follows the
    // restart (nothing converges while the origins still write).
    Ok(goal(
        row,
        size.churn + NATS_GOAL,
        &format!(
            "the server accepted connections again, with {:?} of churn after",
            size.churn
        ),
    ))
}

/// The goal of `nats-kill`: converged this soon after the churn
/// that follows the server's restart.
const NATS_GOAL: Duration = Duration::from_secs(5);

/// The last cluster's agent cut from NATS while every origin churns.
async fn partition(seed: u64, size: Size) -> anyhow::Result<Row> {
    let run = start(seed, size).await?;
    tokio::time::sleep(size.churn).await;
    let cut = run.fleet.nodes.last().map(|n| &n.nats);
    set(cut, Fault::Cut);
    tokio::time::sleep(size.outage).await;
    set(cut, Fault::Pass);
    let last_fault = Instant::now();
    tokio::time::sleep(size.churn).await;
    finish("partition", seed, run, last_fault, Vec::new()).await
}

fn set(proxy: Option<&crate::proxy::Proxy>, fault: Fault) {
    if let Some(p) = proxy {
        p.set(fault);
    }
}

/// The last cluster's API server cut from its agent and SIGSTOPped.
async fn api_down(seed: u64, size: Size) -> anyhow::Result<Row> {
    let mut run = start(seed, size).await?;
    tokio::time::sleep(size.churn).await;
    let mut extra = Vec::new();
    let outage = size
        .outage
        .min(Duration::from_secs(30))
        .max(Duration::from_secs(8));
    let last_fault = {
        let node = run
            .fleet
            .nodes
            .last()
            .ok_or_else(|| anyhow::anyhow!("no node"))?;
        let until = Instant::now() + outage;
        node.api.set(Fault::Cut);
        node.member.cluster.pause()?;
        let unready = try_wait_for("/readyz 503", outage, || async {
            match node.member.readyz() {
                Ok((503, _)) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        if let Err(e) = unready {
            extra.push(format!("{}: {e}", node.name()));
        }
        tokio::time::sleep_until(until.into()).await;
        node.member.cluster.resume()?;
        node.api.set(Fault::Pass);
        Instant::now()
    };
    tokio::time::sleep(size.churn).await;
    if let Some(node) = run.fleet.nodes.last_mut() {
        if !node.member.agent.is_running() {
            extra.push(format!(
                "{}: the agent exited while its API server was down",
                node.name()
            ));
        }
    }
    finish("api-down", seed, run, last_fault, extra).await
}

/// The last cluster's agent down while every cluster writes a backlog;
/// once it is written the agent is started, SIGKILLed in the middle of its
/// catch-up (once it holds a third of the copies due, or after 20 s) and started
/// again. In the short version its API server answers every request
/// `catchup_latency` late meanwhile (a loaded or distant one). The
/// goal is checked: converged within [`CATCHUP_GOAL`] of the restart, and
/// no write of a copy that was already right at the kill.
async fn catchup_kill(seed: u64, size: Size) -> anyhow::Result<Row> {
    let mut fleet = Fleet::start(CLUSTERS).await?;
    let writes_before = fleet.configmap_writes().await?;
    let sink = fleet.nodes.len() - 1;
    fleet.nodes[sink].member.agent.stop();
    // The backlog: writers that only create (objects ≫ steps) until it is written.
    let per_writer = size.backlog / (2 * size.writers.max(1));
    let mut load = fleet.start_load(seed, size.writers, per_writer * 4, Duration::ZERO);
    let target = size.backlog as u64;
    try_wait_for("backlog written", SETUP * 10, || async {
        let n = lock(&fleet.oracle).acknowledged_writes();
        if n >= target {
            Ok(())
        } else {
            Err(format!("{n} of {target}"))
        }
    })
    .await
    .map_err(anyhow::Error::msg)?;
    // The catch-up is the sink's alone: nothing changes while it runs, so
    // every copy right at the kill must stay untouched.
    load.stop().await;
    let (untouchable, restarted) = {
        let node = &mut fleet.nodes[sink];
        if !size.catchup_latency.is_zero() {
            node.api.set(Fault::Latency(size.catchup_latency));
        }
        node.member.agent.spawn()?;
        let client = node.member.client.clone();
        let name = node.name().to_owned();
        let due = lock(&fleet.oracle)
            .present()
            .keys()
            .filter(|s| s.origin != name)
            .count();
        let _ = try_wait_for("catch-up under way", Duration::from_secs(20), || async {
            let n = crate::workload::list_sink(&name, &client, crate::fleet::NS)
                .await
                .map(|c| c.len())
                .unwrap_or(0);
            if n >= due / 3 {
                Ok(())
            } else {
                Err(format!("{n} of {due}"))
            }
        })
        .await;
        node.member.agent.kill9();
        let copies = crate::workload::list_sink_versions(&name, &client, crate::fleet::NS).await?;
        eprintln!(
            "fleetbus-chaos: {name}'s agent SIGKILLed holding {} of its {due} copies",
            copies.len()
        );
        node.member.agent.spawn()?;
        (Untouchable { node: sink, copies }, Instant::now())
    };
    let run = Running {
        fleet,
        load,
        writes_before,
    };
    let model = run.fleet.rule_model();
    let (row, _) = finish_with(
        "catchup-kill",
        seed,
        run,
        restarted,
        Vec::new(),
        &model,
        Some(untouchable),
    )
    .await?;
    Ok(goal(row, CATCHUP_GOAL, "the restart"))
}

/// `row` with a violation if it converged later than `within` after its
/// last fault (`what`), the scenario's goal.
fn goal(mut row: Row, within: Duration, what: &str) -> Row {
    if let Some(after) = row.converged.filter(|t| *t > within) {
        row.violations.push(format!(
            "converged {:.1} s after {what} (goal: within {within:?})",
            after.as_secs_f64()
        ));
    }
    row
}

/// The goal of `catchup-kill`: converged this soon after the restart.
const CATCHUP_GOAL: Duration = Duration::from_secs(10);

/// The copies in `u` that were right (by the settled oracle) and whose
/// resourceVersion changed since, or that are gone.
async fn rewritten(fleet: &Fleet, u: Untouchable) -> anyhow::Result<Vec<Violation>> {
    let node = fleet
        .nodes
        .get(u.node)
        .ok_or_else(|| anyhow::anyhow!("no node {}", u.node))?;
    let now: BTreeMap<Source, String> =
        crate::workload::list_sink_versions(node.name(), &node.member.client, crate::fleet::NS)
            .await?
            .into_iter()
            .map(|(copy, version)| (copy.source(), version))
            .collect();
    let model = fleet.rule_model();
    let oracle = lock(&fleet.oracle);
    Ok(u.copies
        .iter()
        .filter(|(copy, _)| oracle.right(&model, copy))
        .filter(|(copy, version)| now.get(&copy.source()) != Some(version))
        .map(|(copy, _)| Violation::RewrittenWhileRight {
            sink: copy.sink.clone(),
            source: copy.source(),
        })
        .collect())
}

/// The last cluster's NATS link cut 2 s in every 5 s while origins churn;
/// the work every agent did stays bounded (no retry storm).
async fn flapping(seed: u64, size: Size) -> anyhow::Result<Row> {
    let run = start(seed, size).await?;
    let work = agents::Work::now(&run.fleet)?;
    let requests = api_requests(&run.fleet).await?;
    let began = Instant::now();
    let link = run.fleet.nodes.last().map(|n| &n.nats);
    for _ in 0..size.flaps {
        set(link, Fault::Cut);
        tokio::time::sleep(Duration::from_secs(2)).await;
        set(link, Fault::Pass);
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    let last_fault = Instant::now();
    tokio::time::sleep(size.churn).await;
    let model = run.fleet.rule_model();
    let (mut row, run) =
        finish_with("flapping", seed, run, last_fault, Vec::new(), &model, None).await?;
    let cuts = size.flaps as u64;
    row.violations
        .extend(agents::bounded_work(&run.fleet, &work, cuts)?);
    row.violations
        .extend(bounded_requests(&run.fleet, &work, &requests, began.elapsed()).await?);
    agents::keep_logs_if_failed(&row, &run.fleet);
    Ok(row)
}
