//! Where a run's tables go: stdout, and appended to `BENCHMARKS.md` with the
//! command, the machine, the git revision and the date.

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

use anyhow::Context;

use crate::procfs;
use crate::table::Table;

/// The heading of one run: command, size, machine, revision, date, load.
pub fn run_header(command: &str, smoke: bool) -> String {
    let rev = git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(&["status", "--porcelain", "--untracked-files=no"])
        .map(|s| {
            if s.is_empty() {
                ""
            } else {
                " (uncommitted changes)"
            }
        })
        .unwrap_or("");
    let size = if smoke {
        "SMOKE run (tiny sizes; numbers are NOT benchmark results)"
    } else {
        "full run"
    };
    // The agent and devcluster binaries are those of the harness's own profile.
    let build = if cfg!(debug_assertions) {
        "DEBUG build (slower than release; not the benchmark numbers)"
    } else {
        "release build"
    };
    format!(
        "## {} — {size}, {build}\n\n- command: `{command}`\n- machine: {}\n- git revision: {rev}{dirty}\n- 1-min load average at start: {}\n",
        chrono::Utc::now().format("%Y-%m-%d %H:%M UTC"),
        procfs::machine(),
        procfs::loadavg(),
    )
}

/// Appends `header` and the tables to `path` (created if missing).
pub fn append(path: &Path, header: &str, tables: &[Table]) -> anyhow::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("open {}", path.display()))?;
    write!(f, "\n{header}\n")?;
    for t in tables {
        writeln!(f, "{}", t.markdown())?;
    }
    Ok(())
}

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(fleetbus_testsupport::repo_root())
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
}
