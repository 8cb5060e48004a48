//! `fleetbus-bench <scenario>|all [--smoke] [--out FILE]`: see the crate docs.

use std::path::PathBuf;

use clap::Parser;

/// Benchmarks of fleetbus against a local fleet of real processes (issue 12).
#[derive(Debug, Parser)]
#[command(name = "fleetbus-bench")]
struct Cli {
    /// floor, propagation, propagation_at, drift, throughput, catchup, memory, fleet, wire, registry, or all.
    scenario: String,
    /// Tiny sizes (seconds): checks that every scenario produces samples, for CI.
    #[arg(long)]
    smoke: bool,
    /// Sample the agents with `perf record` during the throughput scenario and
    /// report the functions with the most CPU time.
    #[arg(long)]
    profile: bool,
    /// Markdown file the tables are appended to [default: <repo>/BENCHMARKS.md].
    #[arg(long)]
    out: Option<PathBuf>,
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
    };
    let ok = fleetbus_bench::run(&opts).await?;
    Ok(if ok {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
