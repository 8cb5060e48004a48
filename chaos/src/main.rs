//! `fleetbus-chaos list | <scenario> | all [--short] [--seed N] [--out FILE] [--old-agent PATH]`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use fleetbus_chaos::report;
use fleetbus_chaos::scenario::{self, Size, OLD_REVISION, ON_DEMAND, SCENARIOS};

/// Scripted faults under load against a local fleet of real processes:
/// nothing lost, nothing stale, converged.
#[derive(Debug, Parser)]
#[command(name = "fleetbus-chaos")]
struct Cli {
    /// `list`, a scenario's name, or `all` (every scenario but those run on
    /// demand only).
    scenario: String,
    /// The short version of each scenario (seconds each), as CI runs it.
    #[arg(long)]
    short: bool,
    /// The workload's seed (a failure prints the seed that reproduces it).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Markdown file the table is written to [default: <repo>/docs/RELIABILITY.md].
    #[arg(long)]
    out: Option<PathBuf>,
    /// mixed-versions: the earlier fleetbus-agent binary to start the fleet
    /// on [default: built from git history by scripts/old-agent].
    #[arg(long, env = "FLEETBUS_CHAOS_OLD_AGENT")]
    old_agent: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    if cli.scenario == "list" {
        for (name, what) in SCENARIOS {
            println!("{name:14} {what}");
        }
        for (name, what) in ON_DEMAND {
            println!("{name:14} [on demand, not in `all`; from {OLD_REVISION}] {what}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let names: Vec<&str> = if cli.scenario == "all" {
        SCENARIOS.iter().map(|(n, _)| *n).collect()
    } else if SCENARIOS
        .iter()
        .chain(ON_DEMAND)
        .any(|(n, _)| *n == cli.scenario)
    {
        vec![cli.scenario.as_str()]
    } else {
        anyhow::bail!("no scenario {:?}: try `fleetbus-chaos list`", cli.scenario);
    };
    let size = Size::new(cli.short);
    let mut rows = Vec::new();
    for name in names {
        eprintln!("fleetbus-chaos: {name} (seed {})", cli.seed);
        let row = scenario::run(name, cli.seed, size, cli.old_agent.as_deref()).await;
        if !row.passed() {
            eprintln!(
                "fleetbus-chaos: {name} FAILED; reproduce with: fleetbus-chaos {name}{} --seed {}",
                if cli.short { " --short" } else { "" },
                cli.seed
            );
            for v in &row.violations {
                eprintln!("  {v}");
            }
        }
        rows.push(row);
    }
    print!("{}", report::table(&rows));
    let command = std::iter::once("fleetbus-chaos".to_owned())
        .chain(std::env::args().skip(1))
        .collect::<Vec<_>>()
        .join(" ");
    let out = cli
        .out
        .unwrap_or_else(|| fleetbus_testsupport::repo_root().join("docs/RELIABILITY.md"));
    report::write(&out, &command, cli.short, &rows)?;
    Ok(if rows.iter().all(scenario::Row::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
