//! `fleetbus clusters progress C --watch`, run beside a scenario the way an
//! operator would, with every line it prints timestamped by the harness.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A running `fleetbus clusters progress --watch` and what it printed so far.
pub struct ProgressCli {
    child: Child,
    lines: Arc<Mutex<Vec<(Instant, String)>>>,
}

/// What the CLI showed, once it exited.
pub struct Shown {
    /// Lines printed (stdout is not a terminal: one line per cluster per second).
    pub lines: Vec<(Instant, String)>,
    /// Its exit code (0: every selected cluster in sync).
    pub code: Option<i32>,
    /// When it exited, as seen by the harness.
    pub exited: Instant,
}

impl ProgressCli {
    /// Starts following `cluster` on the bus at `nats_url` for at most `timeout`.
    pub fn start(nats_url: &str, cluster: &str, timeout: Duration) -> anyhow::Result<Self> {
        let bin = fleetbus_testsupport::cargo_bin("fleetbus");
        let mut child = Command::new(bin)
            .args(["clusters", "progress", cluster, "--watch", "--timeout"])
            .arg(format!("{}s", timeout.as_secs()))
            .args(["--nats-url", nats_url])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let lines = Arc::new(Mutex::new(Vec::new()));
        if let Some(out) = child.stdout.take() {
            let sink = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    sink.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push((Instant::now(), line));
                }
            });
        }
        Ok(ProgressCli { child, lines })
    }

    /// Waits (polling, at most `timeout`) for the CLI to exit; kills it if it
    /// does not.
    pub async fn finish(mut self, timeout: Duration) -> anyhow::Result<Shown> {
        let status = crate::poll::poll("fleetbus clusters progress to exit", timeout, || {
            let status = self.child.try_wait();
            async move {
                match status {
                    Ok(Some(s)) => Ok((Instant::now(), s.code())),
                    Ok(None) => Err("still running".to_owned()),
                    Err(e) => Err(e.to_string()),
                }
            }
        })
        .await;
        let (exited, code) = match status {
            Ok(done) => done,
            Err(e) => {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return Err(e);
            }
        };
        // The reader thread ends with the pipe; what it read is what was printed.
        let lines = self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone();
        Ok(Shown {
            lines,
            code,
            exited,
        })
    }
}
