//! `--profile`: `perf record` on an agent while a scenario loads it, and the
//! functions that took the most CPU (`perf report`, self time).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tempfile::TempDir;

/// A running `perf record -p <pid>`; killed on drop if not stopped.
pub struct Perf {
    child: Option<Child>,
    data: PathBuf,
    // Removed after perf is gone.
    _dir: TempDir,
}

impl Perf {
    /// Starts sampling `pid` at 499 Hz; `None` when perf is not available.
    pub fn start(pid: u32) -> Option<Perf> {
        let dir = tempfile::Builder::new()
            .prefix("fleetbus-perf-")
            .tempdir()
            .ok()?;
        let data = dir.path().join("perf.data");
        let child = Command::new("perf")
            .args(["record", "-F", "499", "-g", "-p", &pid.to_string(), "-o"])
            .arg(&data)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .ok()?;
        Some(Perf {
            child: Some(child),
            data,
            _dir: dir,
        })
    }

    /// Stops sampling (SIGINT, so perf writes its file) and returns the `top`
    /// functions by self time, e.g. "12.3% serde_json::ser::format_escaped_str".
    pub fn stop(mut self, top: usize) -> Vec<String> {
        let Some(mut child) = self.child.take() else {
            return Vec::new();
        };
        let _ = Command::new("kill")
            .args(["-INT", &child.id().to_string()])
            .status();
        // perf writes its data after SIGINT; give it up to 30 s.
        for _ in 0..300 {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        let Ok(out) = Command::new("perf")
            .args([
                "report",
                "--stdio",
                "--no-children",
                "-g",
                "none",
                "--sort",
                "symbol",
                "--percent-limit",
                "0.5",
                "-i",
            ])
            .arg(&self.data)
            .output()
        else {
            return Vec::new();
        };
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.starts_with('#') && l.contains('%'))
            .take(top)
            .map(|l| {
                let l = l.trim();
                // "12.34%  [.] symbol" -> "12.34% symbol"
                let (pct, rest) = l.split_once('%').unwrap_or((l, ""));
                let sym = rest
                    .trim()
                    .trim_start_matches("[.]")
                    .trim_start_matches("[k]")
                    .trim();
                let sym: String = sym.chars().take(110).collect();
                format!("{}% {}", pct.trim(), sym.trim_end())
            })
            .collect()
    }
}

impl Drop for Perf {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
