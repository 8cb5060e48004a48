//! A real `fleetbus-agent` process.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use tempfile::TempDir;

use crate::bins::cargo_bin;
use crate::process::Proc;

/// How long [`Agent::stop`] waits after SIGTERM before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(15);

/// A spawned agent; stdout and stderr go to a log file. Killed on drop.
#[derive(Debug)]
pub struct Agent {
    proc: Option<Proc>,
    bin: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    // Declared last so it is removed after the process is dead.
    dir: TempDir,
}

impl Agent {
    /// Spawns `cargo_bin("fleetbus-agent") <args>`.
    pub fn start<I, S>(args: I) -> anyhow::Result<Agent>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::start_with_env(args, std::iter::empty::<(&str, &str)>())
    }

    /// Spawns `cargo_bin("fleetbus-agent") <args>` with extra environment variables.
    pub fn start_with_env<I, S, E, K, V>(args: I, env: E) -> anyhow::Result<Agent>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
        E: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        Self::start_bin(&cargo_bin("fleetbus-agent"), args, env)
    }

    /// Spawns `bin <args>` with extra environment variables.
    pub fn start_bin<I, S, E, K, V>(bin: &Path, args: I, env: E) -> anyhow::Result<Agent>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
        E: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        let env = env
            .into_iter()
            .map(|(k, v)| (k.as_ref().to_owned(), v.as_ref().to_owned()))
            .collect();
        let mut agent = Self::prepared(bin, owned(args), env)?;
        agent.spawn()?;
        Ok(agent)
    }

    /// `cargo_bin("fleetbus-agent") <args>`, not running until [`Agent::spawn`]
    /// (the bench starts a cluster first and times its agent's start).
    pub fn prepare<I, S>(args: I) -> anyhow::Result<Agent>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::prepared(&cargo_bin("fleetbus-agent"), owned(args), Vec::new())
    }

    /// `bin <args>`, not running until [`Agent::spawn`]: an agent binary
    /// other than the workspace's (the chaos scenario `mixed-versions` runs
    /// an earlier revision's).
    pub fn prepare_bin<I, S>(bin: &Path, args: I) -> anyhow::Result<Agent>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self::prepared(bin, owned(args), Vec::new())
    }

    fn prepared(
        bin: &Path,
        args: Vec<OsString>,
        env: Vec<(OsString, OsString)>,
    ) -> anyhow::Result<Agent> {
        Ok(Agent {
            proc: None,
            bin: bin.to_path_buf(),
            args,
            env,
            dir: tempfile::Builder::new()
                .prefix("fleetbus-agent-")
                .tempdir()?,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().and_then(Proc::pid)
    }

    /// True while the process has not exited.
    pub fn is_running(&mut self) -> bool {
        self.proc.as_mut().is_some_and(Proc::is_running)
    }

    /// The exit status if the process has exited.
    pub fn exit_status(&mut self) -> Option<ExitStatus> {
        self.proc.as_mut().and_then(Proc::exit_status)
    }

    /// Everything the agent wrote to stdout and stderr (across restarts).
    pub fn log(&self) -> String {
        std::fs::read(self.log_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("agent.log")
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        if let Some(p) = self.proc.as_mut() {
            p.kill();
        }
    }

    /// SIGSTOP: the agent keeps its sockets open but does nothing (a hung
    /// or starved process, not a dead one). Undo with [`Agent::resume`].
    pub fn pause(&self) -> anyhow::Result<()> {
        self.running()?.signal("STOP")
    }

    /// SIGCONT after [`Agent::pause`].
    pub fn resume(&self) -> anyhow::Result<()> {
        self.running()?.signal("CONT")
    }

    fn running(&self) -> anyhow::Result<&Proc> {
        self.proc
            .as_ref()
            .ok_or_else(|| anyhow::anyhow!("agent not running"))
    }

    /// SIGTERM, then wait (SIGKILL after 15s). Returns the exit status.
    ///
    /// # Panics
    /// If the agent did not exit within the grace period (it is killed first),
    /// with its log in the message.
    pub fn stop(&mut self) -> ExitStatus {
        let Some(proc) = self.proc.as_mut() else {
            panic!("agent was never started")
        };
        let (status, graceful) = proc.terminate(STOP_GRACE);
        assert!(
            graceful,
            "agent did not exit within {STOP_GRACE:?} of SIGTERM; log:\n{}",
            self.log()
        );
        status.unwrap_or_else(|| panic!("agent exit status unknown; log:\n{}", self.log()))
    }

    /// Kills the agent if running and spawns it again with the same args and env.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9();
        self.spawn()
    }

    /// Spawns the agent: a prepared one for the first time, or again (its log
    /// is appended to). [`Agent::restart`] kills a running one first.
    pub fn spawn(&mut self) -> anyhow::Result<()> {
        let log = self.log_path();
        if log.exists() {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new().append(true).open(&log)?;
            writeln!(f, "----- fleetbus-testsupport: agent restarted -----")?;
        }
        let mut cmd = Command::new(&self.bin);
        cmd.args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)));
        if std::env::var_os("RUST_LOG").is_none() {
            cmd.env("RUST_LOG", "info");
        }
        self.proc = Some(Proc::spawn(cmd, &log)?);
        Ok(())
    }
}

fn owned<S: AsRef<OsStr>>(args: impl IntoIterator<Item = S>) -> Vec<OsString> {
    args.into_iter().map(|a| a.as_ref().to_owned()).collect()
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> anyhow::Result<Agent> {
        Agent::start_bin(
            Path::new("/bin/sh"),
            ["-c", script],
            [("GREETING", "hello")],
        )
    }

    #[test]
    fn captures_output_and_env_and_appends_across_restarts() {
        let mut a = sh("echo out $GREETING; echo err >&2; exec sleep 60").unwrap();
        crate::wait_for_blocking("agent output", Duration::from_secs(10), || {
            let log = a.log();
            if log.contains("out hello") && log.contains("err") {
                Ok(())
            } else {
                Err(log)
            }
        });
        a.restart().unwrap();
        crate::wait_for_blocking("second run output", Duration::from_secs(10), || {
            let log = a.log();
            if log.matches("out hello").count() == 2 {
                Ok(())
            } else {
                Err(log)
            }
        });
        assert!(a.log().contains("agent restarted"));
    }

    #[test]
    fn stop_sends_sigterm_and_reports_exit_status() {
        let mut a = sh("trap 'exit 7' TERM; echo ready; while :; do sleep 0.05; done").unwrap();
        crate::wait_for_blocking("trap installed", Duration::from_secs(10), || {
            if a.log().contains("ready") {
                Ok(())
            } else {
                Err(a.log())
            }
        });
        let status = a.stop();
        assert_eq!(status.code(), Some(7), "the TERM trap ran");
        assert!(!a.is_running());
    }

    /// The process state letter in /proc/<pid>/stat ('T' when stopped).
    fn state(pid: u32) -> String {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        // After the command name, which is in parentheses.
        stat.rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_default()
            .to_owned()
    }

    #[test]
    fn pause_stops_and_resume_continues_the_process() {
        let a = sh("exec sleep 60").unwrap();
        let pid = a.pid().unwrap();
        a.pause().unwrap();
        crate::wait_for_blocking("stopped", Duration::from_secs(10), || {
            let s = state(pid);
            if s == "T" {
                Ok(())
            } else {
                Err(s)
            }
        });
        a.resume().unwrap();
        crate::wait_for_blocking("continued", Duration::from_secs(10), || {
            let s = state(pid);
            if s == "S" || s == "R" {
                Ok(())
            } else {
                Err(s)
            }
        });
    }

    #[test]
    fn kill9_reaps_the_process() {
        let mut a = sh("exec sleep 60").unwrap();
        let pid = a.pid().unwrap();
        a.kill9();
        assert!(!a.is_running());
        assert!(
            !Path::new(&format!("/proc/{pid}")).exists(),
            "zombie or alive: {pid}"
        );
    }
}
