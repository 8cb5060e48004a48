//! A real `nats-server` with JetStream on a random port and its own store dir.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use tempfile::TempDir;

use crate::bins::locate_nats_server;
use crate::process::{free_port, wait_for_tcp, Proc};

const START_TIMEOUT: Duration = Duration::from_secs(15);
/// Attempts when the free port we picked was grabbed by someone else meanwhile.
const PORT_ATTEMPTS: usize = 5;

/// A `nats-server -js` process; killed (and its store dir removed) on drop.
#[derive(Debug)]
pub struct NatsServer {
    proc: Option<Proc>,
    port: u16,
    bin: PathBuf,
    /// Extra configuration file (`-c`), written into `dir`.
    config: Option<PathBuf>,
    // Declared last so it is removed after the process is dead.
    dir: TempDir,
}

impl NatsServer {
    /// Starts `nats-server -js -a 127.0.0.1 -p <free port> -sd <tempdir>` and
    /// waits until it accepts TCP.
    pub fn start() -> anyhow::Result<NatsServer> {
        Self::start_inner(None)
    }

    /// Like [`NatsServer::start`], with `config` (nats-server configuration
    /// syntax, e.g. a `tls { ... }` block) passed as `-c`. The command-line
    /// address, port and store dir take precedence over the file.
    pub fn start_with_config(config: &str) -> anyhow::Result<NatsServer> {
        Self::start_inner(Some(config))
    }

    fn start_inner(config: Option<&str>) -> anyhow::Result<NatsServer> {
        let bin = locate_nats_server()?;
        if !bin.is_file() {
            bail!(
                "nats-server not found at {} (from FLEETBUS_NATS_SERVER); {}",
                bin.display(),
                fleetbus_launch::NATS_INSTALL_HINT
            );
        }
        let mut last_err = None;
        for _ in 0..PORT_ATTEMPTS {
            let dir = tempfile::Builder::new()
                .prefix("fleetbus-nats-")
                .tempdir()?;
            let config = match config {
                Some(text) => {
                    let path = dir.path().join("nats.conf");
                    std::fs::write(&path, text)
                        .with_context(|| format!("write {}", path.display()))?;
                    Some(path)
                }
                None => None,
            };
            let mut server = NatsServer {
                proc: None,
                port: free_port(),
                bin: bin.clone(),
                config,
                dir,
            };
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or_else(|| anyhow::anyhow!("nats-server did not start")))
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's process id while it runs (the benchmarks read its RSS and CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().and_then(Proc::pid)
    }

    /// Store directory (`-sd`).
    pub fn store_dir(&self) -> PathBuf {
        self.dir.path().join("store")
    }

    /// Server log (stdout + stderr).
    pub fn log(&self) -> String {
        self.proc.as_ref().map(Proc::log).unwrap_or_default()
    }

    /// SIGSTOP: the nats-server keeps its sockets open but answers nothing
    /// (a hung process, not a dead one). Undo with `resume`.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.proc
            .as_ref()
            .context("nats-server not running")?
            .signal("STOP")
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) -> anyhow::Result<()> {
        self.proc
            .as_ref()
            .context("nats-server not running")?
            .signal("CONT")
    }

    /// Replaces the configuration file (`-c`) with `config` and has the
    /// server reload it (SIGHUP: `nats-server --signal reload`), as an
    /// operator does after `fleetbus leave`. Only for servers started
    /// with a configuration.
    pub fn reload(&self, config: &str) -> anyhow::Result<()> {
        let path = self
            .config
            .as_ref()
            .context("nats-server was started without a configuration")?;
        std::fs::write(path, config).with_context(|| format!("write {}", path.display()))?;
        self.proc
            .as_ref()
            .context("nats-server not running")?
            .signal("HUP")
    }

    /// SIGKILL and reap; the store dir is kept for [`NatsServer::restart`].
    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Kills the server if running, then starts it again on the same port with
    /// the same store dir, and waits until it accepts TCP.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill();
        // The port was ours; a bind can still fail briefly, so retry until the deadline.
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(()) => return Ok(()),
                Err(e) if std::time::Instant::now() >= deadline => {
                    return Err(e.context(format!("restart nats-server on port {}", self.port)))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let mut cmd = Command::new(&self.bin);
        if let Some(config) = &self.config {
            cmd.arg("-c").arg(config);
        }
        cmd.args([
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-sd",
        ])
        .arg(self.store_dir());
        let mut proc = Proc::spawn(cmd, &self.dir.path().join("nats.log"))?;
        let addr = SocketAddr::from(([127, 0, 0, 1], self.port));
        wait_for_tcp(&mut proc, addr, START_TIMEOUT).with_context(|| {
            format!(
                "nats-server on port {}; log:\n{}",
                self.port,
                proc.log_tail()
            )
        })?;
        self.proc = Some(proc);
        Ok(())
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpStream;

    #[test]
    fn starts_accepts_tcp_and_restarts_on_same_port() {
        let mut nats = NatsServer::start().unwrap();
        let port = nats.port();
        assert_eq!(nats.url(), format!("nats://127.0.0.1:{port}"));
        let mut info = [0u8; 4];
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Read::read_exact(&mut s, &mut info).unwrap();
        assert_eq!(&info, b"INFO", "NATS greets clients with INFO");

        nats.kill();
        assert!(
            TcpStream::connect(("127.0.0.1", port)).is_err(),
            "killed server still accepts"
        );
        nats.restart().unwrap();
        assert_eq!(nats.port(), port);
        TcpStream::connect(("127.0.0.1", port)).unwrap();
        assert!(nats.log().contains("JetStream"), "log: {}", nats.log());
    }

    #[test]
    fn drop_removes_store_dir_and_stops_server() {
        let nats = NatsServer::start().unwrap();
        let dir = nats.dir.path().to_path_buf();
        let port = nats.port();
        drop(nats);
        assert!(!dir.exists());
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
