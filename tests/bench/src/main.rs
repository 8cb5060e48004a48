//! `fleetbus-bench <scenario>|all [--smoke] [--out FILE]`: see the crate docs.

use std::path::PathBuf;

use clap::Parser;
use fleetbus_bench::bus::Topology;

/// Benchmarks of fleetbus against a local fleet of real processes.
#[derive(Debug, Parser)]
#[command(name = "fleetbus-bench")]
struct Cli {
    /// floor, propagation, propagation_at, previewing, pressure, drift, throughput, catchup, memory, fleet, wire, registry, idle, placement, services, or all.
    scenario: String,
    /// Tiny sizes (seconds): checks that every scenario produces samples, for CI.
    #[arg(long)]
    smoke: bool,
    /// Sample the agents with `perf record` during the throughput and placement
    /// scenarios and report the functions with the most CPU time.
    #[arg(long)]
    profile: bool,
    /// The NATS topologies the fleet scenarios (propagation, throughput, fleet)
    /// run on, side by side in a "Replication cost" table: single (one
    /// nats-server), cluster3 (deploy/nats/hub.conf ×3, agents --replicas 3),
    /// leaf (that hub plus a site leaf node); comma-separated, or all.
    #[arg(long, default_value = "single", value_parser = parse_nats)]
    nats: Topologies,
    /// Markdown file the tables are appended to [default: <repo>/BENCHMARKS.md].
    #[arg(long)]
    out: Option<PathBuf>,
}

/// The value of `--nats`.
#[derive(Debug, Clone)]
struct Topologies(Vec<Topology>);

fn parse_nats(s: &str) -> Result<Topologies, String> {
    Topology::parse_list(s).map(Topologies)
}

#[tokio::main]
async fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    let opts = fleetbus_bench::Options {
        out: cli
            .out
            .unwrap_or_else(|| fleetbus_testsupport::repo_root().join("BENCHMARKS.md")),
        command: std::iter::once("fleetbus-bench".to_owned())
            .chain(std::env::args().skip(1))
            .collect::<Vec<_>>()
            .join(" "),
        scenario: cli.scenario,
        smoke: cli.smoke,
        profile: cli.profile,
        nats: cli.nats.0,
    };
    let ok = fleetbus_bench::run(&opts).await?;
    Ok(if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
