//! Benchmark harness of fleetbus. Never ships.
//!
//! `cargo run --release -p fleetbus-bench -- <scenario>|all [--smoke]` runs
//! scenarios against a local fleet of real processes (nats-server,
//! devclusters, agents; see [`mesh`]) started with `fleetbus-testsupport`.
//! Latencies are timestamps taken by the harness: an API server's
//! acknowledgement of a write, and the moment a watch ([`recorder`]) or a NATS
//! subscriber sees the result. Every run measures the floor first
//! ([`scenario::floor`]) and reports other latencies as a ratio to it; each
//! scenario's table is printed and appended to `BENCHMARKS.md` ([`report`]).
//! The fleet scenarios ([`scenario::ON_TOPOLOGIES`]) also run on the NATS
//! topologies of `deploy/nats/` (`--nats single,cluster3,leaf`, see [`bus`]);
//! [`replication`] then reports them side by side.
//! Start reading at [`run`], then [`scenario`].

pub mod bus;
pub mod load;
pub mod mesh;
pub mod objects;
pub mod poll;
pub mod procfs;
pub mod profile;
pub mod progress_cli;
pub mod recorder;
pub mod replication;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod stats;
pub mod table;
pub mod wire_objects;

use std::path::PathBuf;

use bus::Topology;
use scenario::{Ctx, ALL, ON_TOPOLOGIES};
use table::{Summary, Table};

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// A scenario of [`scenario::ALL`], or "all".
    pub scenario: String,
    /// Tiny sizes; fails if a scenario produced no samples (never on times).
    pub smoke: bool,
    /// Sample the agents with `perf` during the throughput and placement scenarios.
    pub profile: bool,
    /// Where the tables are appended.
    pub out: PathBuf,
    /// The command line, for the report.
    pub command: String,
    /// The NATS topologies the fleet scenarios run on, in this order.
    pub nats: Vec<Topology>,
}

/// Runs the scenarios; returns false if one failed (or, in a smoke run, produced no samples).
pub async fn run(opts: &Options) -> anyhow::Result<bool> {
    let selected: Vec<&str> = if opts.scenario == "all" {
        ALL.to_vec()
    } else if let Some(s) = ALL.iter().find(|s| **s == opts.scenario) {
        vec![*s]
    } else {
        anyhow::bail!(
            "unknown scenario {:?}: one of {} or all",
            opts.scenario,
            ALL.join(", ")
        );
    };
    preflight()?;
    let header = report::run_header(&opts.command, opts.smoke);
    println!("{header}");
    let mut ctx = Ctx {
        smoke: opts.smoke,
        profile: opts.profile,
        floor: None,
        topology: Topology::Single,
    };
    let mut tables = Vec::new();
    let mut ok = true;
    // Every latency is reported against the floor of the same run.
    let needs_floor = selected
        .iter()
        .any(|s| !matches!(*s, "wire" | "registry" | "placement" | "services"));
    if needs_floor {
        match scenario::floor::run(&ctx).await {
            Ok((t, p50)) => {
                ctx.floor = p50;
                tables.extend(t);
            }
            Err(e) => tables.push(failed("floor", &e)),
        }
        for t in &tables {
            println!("{}", t.markdown());
        }
    }
    let mut summaries: Vec<(Topology, Summary)> = Vec::new();
    for name in selected.iter().filter(|s| **s != "floor") {
        let topologies = if ON_TOPOLOGIES.contains(name) {
            opts.nats.clone()
        } else {
            vec![Topology::Single]
        };
        for topology in topologies {
            let ctx = Ctx { topology, ..ctx };
            let first_new = tables.len();
            tables.extend(run_one(name, &ctx).await);
            for t in &mut tables[first_new..] {
                if topology != Topology::Single {
                    t.title = format!("{} — NATS {topology}", t.title);
                }
                if let Some(s) = &t.summary {
                    summaries.push((topology, s.clone()));
                }
                println!("{}", t.markdown());
            }
        }
    }
    // The cost of replication, when the run had more than the single server.
    if opts.nats != [Topology::Single] && selected.iter().any(|s| ON_TOPOLOGIES.contains(s)) {
        let t = replication::table(&opts.nats, &summaries);
        println!("{}", t.markdown());
        tables.push(t);
    }
    for t in &tables {
        if t.samples == 0 {
            eprintln!("fleetbus-bench: {} produced no samples", t.title);
            ok = false;
        }
        if let Some(why) = &t.incomplete {
            eprintln!("fleetbus-bench: {} did not run to its end: {why}", t.title);
            ok = false;
        }
    }
    // The goals table of this run, from the verdicts the scenarios computed:
    // BENCHMARKS.md's goals table is this one, copied as printed.
    let goals = table::goals(&tables);
    println!("{}", goals.markdown());
    tables.push(goals);
    report::append(&opts.out, &header, &tables)?;
    eprintln!(
        "fleetbus-bench: appended {} table(s) to {}",
        tables.len(),
        opts.out.display()
    );
    Ok(ok)
}

/// Runs scenario `name` on `ctx`'s topology; a failure becomes a table saying so.
async fn run_one(name: &str, ctx: &Ctx) -> Vec<Table> {
    eprintln!("fleetbus-bench: running {name} on NATS {}", ctx.topology);
    let result = match name {
        "propagation" => scenario::propagation::run(ctx).await,
        "propagation_at" => scenario::propagation_at::run(ctx).await,
        "previewing" => scenario::engine_load::previewing(ctx).await,
        "pressure" => scenario::engine_load::pressure(ctx).await,
        "drift" => scenario::drift::run(ctx).await,
        "throughput" => scenario::throughput::run(ctx).await,
        "catchup" => scenario::catchup::run(ctx).await,
        "memory" => scenario::memory::run(ctx).await,
        "fleet" => scenario::fleet::run(ctx).await,
        "wire" => scenario::wire::run(ctx).await,
        "registry" => scenario::registry::run(ctx).await,
        "idle" => scenario::idle::run(ctx).await,
        "placement" => scenario::placement::run(ctx).await,
        "services" => scenario::services::run(ctx).await,
        other => Err(anyhow::anyhow!("scenario {other} has no runner")),
    };
    match result {
        Ok(t) => t,
        Err(e) => vec![failed(name, &e)],
    }
}

/// The agent and devcluster binaries must sit next to this one (same profile):
/// `cargo run -p fleetbus-bench` builds only the harness itself.
fn preflight() -> anyhow::Result<()> {
    let exe = std::env::current_exe()?;
    let dir = exe
        .parent()
        .ok_or_else(|| anyhow::anyhow!("{} has no directory", exe.display()))?;
    // Test executables run from `deps/`; the binaries are one level up.
    let dir = if dir.ends_with("deps") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    for bin in ["fleetbus-agent", "fleetbus-devcluster"] {
        if !dir.join(bin).is_file() {
            anyhow::bail!(
                "{} not found: build the binaries of the same profile first, e.g. \
                 `cargo build --release -p fleetbus-agent -p fleetbus-devcluster -p fleetbus-bench` for a release run",
                dir.join(bin).display()
            );
        }
    }
    Ok(())
}

/// A table that says the scenario failed, and why (it is recorded, not hidden).
fn failed(name: &str, e: &anyhow::Error) -> Table {
    let mut t = Table::new(&format!("{name}: FAILED"), &["error"]);
    t.row([format!("{e:#}").replace('\n', " ⏎ ").replace('|', "\\|")]);
    t
}
