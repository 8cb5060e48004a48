//! A child process that logs to a file and is killed and reaped on drop.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// A port that was free a moment ago (bind 127.0.0.1:0, read, release).
/// Racy by nature: callers retry when the process they start cannot bind.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// `127.0.0.1:<free port>`, e.g. for `--metrics-addr`.
pub fn free_addr() -> String {
    free_socket_addr().to_string()
}

/// [`free_addr`] as a `SocketAddr`, e.g. for `AgentCommand::metrics_addr`.
pub fn free_socket_addr() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], free_port()))
}

/// A spawned child; stdout and stderr go to `log` (appended), unless the
/// caller asked to read stdout's first line (see [`Proc::spawn_reading_first_line`]).
#[derive(Debug)]
pub(crate) struct Proc {
    child: Option<Child>,
    status: Option<ExitStatus>,
    log: PathBuf,
}

fn open_log(log: &Path) -> anyhow::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("open log {}", log.display()))
}

impl Proc {
    /// Spawns `cmd` with stdout and stderr appended to `log`.
    pub(crate) fn spawn(mut cmd: Command, log: &Path) -> anyhow::Result<Proc> {
        let out = open_log(log)?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .env("NO_COLOR", "1");
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {:?}", cmd.get_program()))?;
        Ok(Proc {
            child: Some(child),
            status: None,
            log: log.to_path_buf(),
        })
    }

    /// Spawns `cmd`, waits up to `timeout` for the first stdout line and returns
    /// it; a thread keeps copying the rest of stdout into `log` so the pipe never fills.
    pub(crate) fn spawn_reading_first_line(
        mut cmd: Command,
        log: &Path,
        timeout: Duration,
    ) -> anyhow::Result<(Proc, String)> {
        let err = open_log(log)?;
        let mut out_copy = open_log(log)?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err)
            .env("NO_COLOR", "1");
        let mut child = cmd
            .spawn()
            .with_context(|| format!("spawn {:?}", cmd.get_program()))?;
        let stdout = child.stdout.take().context("stdout was piped")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut first = String::new();
            let _ = tx.send(reader.read_line(&mut first).map(|_| first));
            // Drain until EOF (the child exits), whatever is read goes to the log.
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 || out_copy.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        });
        let mut proc = Proc {
            child: Some(child),
            status: None,
            log: log.to_path_buf(),
        };
        let line = match rx.recv_timeout(timeout) {
            Ok(Ok(line)) if !line.trim().is_empty() => line.trim().to_string(),
            Ok(Ok(_)) => {
                proc.kill();
                bail!(
                    "{:?} exited before printing a line; log:\n{}",
                    cmd.get_program(),
                    proc.log_tail()
                )
            }
            Ok(Err(e)) => {
                proc.kill();
                bail!(
                    "reading stdout of {:?}: {e}; log:\n{}",
                    cmd.get_program(),
                    proc.log_tail()
                )
            }
            Err(_) => {
                proc.kill();
                bail!(
                    "{:?} printed nothing on stdout within {timeout:?}; log:\n{}",
                    cmd.get_program(),
                    proc.log_tail()
                )
            }
        };
        Ok((proc, line))
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `signal` (e.g. `STOP`, `CONT`) with `kill(1)`: pausing a server
    /// is how tests make it hang without closing its sockets.
    pub(crate) fn signal(&self, signal: &str) -> anyhow::Result<()> {
        let pid = self.pid().context("process not running")?;
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .context("run kill")?;
        if !status.success() {
            bail!("kill -{signal} {pid} failed: {status}");
        }
        Ok(())
    }

    /// True while the process has not exited (reaps it if it has).
    pub(crate) fn is_running(&mut self) -> bool {
        let Some(child) = self.child.as_mut() else {
            return false;
        };
        match child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                self.status = Some(status);
                self.child = None;
                false
            }
            Err(_) => false,
        }
    }

    /// The exit status, if the process has exited.
    pub(crate) fn exit_status(&mut self) -> Option<ExitStatus> {
        self.is_running();
        self.status
    }

    /// SIGKILL and reap. No-op when already gone.
    pub(crate) fn kill(&mut self) -> Option<ExitStatus> {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            if let Ok(status) = child.wait() {
                self.status = Some(status);
            }
        }
        self.status
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL. Returns the exit status and
    /// whether the process exited within `grace`.
    pub(crate) fn terminate(&mut self, grace: Duration) -> (Option<ExitStatus>, bool) {
        let Some(pid) = self.pid() else {
            return (self.status, true);
        };
        // std has no SIGTERM and the workspace forbids unsafe (libc::kill): use kill(1).
        let _ = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if !self.is_running() {
                return (self.status, true);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        (self.kill(), false)
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read(&self.log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    /// The last ~4 KiB of the log, for error messages.
    pub(crate) fn log_tail(&self) -> String {
        let log = self.log();
        let start = log.len().saturating_sub(4096);
        let start = (start..log.len())
            .find(|&i| log.is_char_boundary(i))
            .unwrap_or(log.len());
        log[start..].to_string()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until something accepts TCP on `addr`, failing early if `proc` exits.
pub(crate) fn wait_for_tcp(
    proc: &mut Proc,
    addr: SocketAddr,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        if !proc.is_running() {
            bail!(
                "process exited ({:?}) before accepting TCP on {addr}",
                proc.status
            );
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            bail!("nothing accepted TCP on {addr} within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}
