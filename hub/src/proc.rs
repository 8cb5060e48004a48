//! Child processes of a mesh: spawning them in their own process group with
//! logs in files, telling whether a recorded pid is still ours, stopping them.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::state::ProcRecord;

/// Spawning a process failed.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    /// Its log file could not be created.
    #[error("cannot create log file {0}")]
    Log(std::path::PathBuf, #[source] io::Error),
    /// The program could not be executed.
    #[error("cannot run {0}")]
    Exec(std::path::PathBuf, #[source] io::Error),
}

/// A process this `fleetbus` started (it is the parent and reaps it).
#[derive(Debug)]
pub struct Spawned {
    pub child: Child,
    pub record: ProcRecord,
}

/// Spawns `program args` with stdin closed, stderr to `log` and stdout to
/// `stdout` (or `log` too). Files are truncated: each `mesh up` starts fresh logs.
///
/// The child gets its own process group: Ctrl-C in the terminal then reaches
/// only `fleetbus`, which stops the mesh in order (agents before NATS) instead
/// of every process dying at once; a detached mesh also survives its shell.
pub fn spawn(
    program: &Path,
    args: &[impl AsRef<OsStr>],
    log: &Path,
    stdout: Option<&Path>,
) -> Result<Spawned, SpawnError> {
    let err = File::create(log).map_err(|e| SpawnError::Log(log.to_path_buf(), e))?;
    let out = match stdout {
        Some(p) => File::create(p).map_err(|e| SpawnError::Log(p.to_path_buf(), e))?,
        None => err
            .try_clone()
            .map_err(|e| SpawnError::Log(log.to_path_buf(), e))?,
    };
    let child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Logs go to files: no ANSI colour codes in them.
        .env("NO_COLOR", "1")
        .process_group(0)
        .spawn()
        .map_err(|e| SpawnError::Exec(program.to_path_buf(), e))?;
    let pid = child.id();
    let record = ProcRecord {
        pid,
        start_ticks: start_ticks(pid).unwrap_or(0),
        log: log.to_path_buf(),
    };
    Ok(Spawned { child, record })
}

/// Start time of `pid` in clock ticks since boot (`/proc/<pid>/stat` field 22);
/// `None` if there is no such process or it is a zombie (exited, not yet reaped).
pub fn start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is parenthesised and may contain spaces.
    let after_comm = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_comm.split_whitespace();
    let state = fields.next()?;
    if state == "Z" || state == "X" {
        return None;
    }
    // Fields 4..=21 follow the state (field 3); starttime is field 22.
    fields.nth(18)?.parse().ok()
}

/// True if the recorded process is still running (same pid, same start time).
pub fn is_alive(rec: &ProcRecord) -> bool {
    start_ticks(rec.pid).is_some_and(|t| t == rec.start_ticks)
}

/// Sends `signal` ("TERM", "KILL", "INT") to `pid` if it is still the recorded process.
pub fn signal(rec: &ProcRecord, signal: &str) {
    if !is_alive(rec) {
        return;
    }
    // The workspace forbids unsafe code (libc::kill), and std can only SIGKILL its
    // own children: kill(1) it is.
    let _ = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(rec.pid.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

/// A process to stop: recorded, and possibly our own child (which we must reap).
#[derive(Debug)]
pub struct Stoppable {
    pub what: String,
    pub record: ProcRecord,
    pub child: Option<Child>,
    /// Exit status, once our own child has been reaped.
    pub exit: Option<ExitStatus>,
}

impl Stoppable {
    pub fn new(what: impl Into<String>, record: ProcRecord, child: Option<Child>) -> Self {
        Stoppable {
            what: what.into(),
            record,
            child,
            exit: None,
        }
    }

    /// Alive check that also reaps our own exited children.
    pub fn is_alive(&mut self) -> bool {
        if self.exit.is_some() {
            return false;
        }
        if let Some(child) = self.child.as_mut() {
            return match child.try_wait() {
                Ok(None) => true,
                Ok(Some(status)) => {
                    self.exit = Some(status);
                    false
                }
                Err(_) => false,
            };
        }
        is_alive(&self.record)
    }

    /// "exit status: 1", "signal: 9 (SIGKILL)", or "exited" when not our child.
    pub fn exit_description(&self) -> String {
        self.exit
            .map_or_else(|| "exited".to_string(), |s| s.to_string())
    }
}

/// How a process ended when stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// It was not running any more.
    AlreadyGone,
    /// It exited after SIGTERM.
    Terminated,
    /// It ignored SIGTERM for the whole grace period and was SIGKILLed.
    Killed,
}

/// SIGTERM every process in `group` at once, wait up to `grace` for them to
/// exit, SIGKILL the rest. Returns how each ended, in order.
pub fn stop_group(group: &mut [Stoppable], grace: Duration) -> Vec<Stopped> {
    let mut outcome: Vec<Stopped> = group
        .iter_mut()
        .map(|p| {
            if p.is_alive() {
                signal(&p.record, "TERM");
                Stopped::Terminated
            } else {
                Stopped::AlreadyGone
            }
        })
        .collect();
    let deadline = Instant::now() + grace;
    while group.iter_mut().any(Stoppable::is_alive) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (p, o) in group.iter_mut().zip(outcome.iter_mut()) {
        if p.is_alive() {
            *o = Stopped::Killed;
            match p.child.as_mut() {
                Some(child) => {
                    let _ = child.kill();
                    p.exit = child.wait().ok();
                }
                None => {
                    signal(&p.record, "KILL");
                    let until = Instant::now() + Duration::from_secs(5);
                    while is_alive(&p.record) && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
            }
        }
    }
    outcome
}

/// The last `lines` lines of a log file, for error messages.
pub fn log_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(dir: &Path, script: &str) -> Spawned {
        spawn(
            Path::new("/bin/sh"),
            &["-c", script],
            &dir.join("log"),
            None,
        )
        .unwrap()
    }

    #[test]
    fn recorded_process_is_alive_until_it_exits() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = sh(dir.path(), "exec sleep 30");
        assert!(s.record.start_ticks > 0);
        assert!(is_alive(&s.record));
        let reused = ProcRecord {
            start_ticks: s.record.start_ticks + 1,
            ..s.record.clone()
        };
        assert!(
            !is_alive(&reused),
            "same pid, different start time: not ours"
        );
        s.child.kill().unwrap();
        s.child.wait().unwrap();
        assert!(!is_alive(&s.record));
    }

    #[test]
    fn stop_group_terminates_then_kills_stubborn_processes() {
        let dir = tempfile::tempdir().unwrap();
        let polite = sh(dir.path(), "exec sleep 30");
        let stubborn = spawn(
            Path::new("/bin/sh"),
            &[
                "-c",
                "trap '' TERM; echo ready; while :; do sleep 0.05; done",
            ],
            &dir.path().join("stubborn.log"),
            None,
        )
        .unwrap();
        let ready = Instant::now() + Duration::from_secs(10);
        while !log_tail(&dir.path().join("stubborn.log"), 1).contains("ready") {
            assert!(Instant::now() < ready, "stubborn shell never started");
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut group = vec![
            Stoppable::new("polite", polite.record, Some(polite.child)),
            Stoppable::new("stubborn", stubborn.record, Some(stubborn.child)),
        ];
        let outcome = stop_group(&mut group, Duration::from_millis(500));
        assert_eq!(outcome, vec![Stopped::Terminated, Stopped::Killed]);
        assert!(group.iter_mut().all(|p| !p.is_alive()));
        assert_eq!(
            stop_group(&mut group, Duration::from_millis(100)),
            vec![Stopped::AlreadyGone; 2]
        );
    }

    #[test]
    fn log_tail_keeps_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("l");
        std::fs::write(&p, "1\n2\n3\n").unwrap();
        assert_eq!(log_tail(&p, 2), "2\n3");
        assert_eq!(log_tail(&dir.path().join("missing"), 2), "");
    }
}
