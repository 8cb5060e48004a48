//! A real `fleetbus-devcluster` process standing in for a Kubernetes cluster.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tempfile::TempDir;

use crate::bins::{cargo_bin, kubectl_bin};
use crate::process::Proc;

const START_TIMEOUT: Duration = Duration::from_secs(30);

/// How to start a [`DevCluster`]. Build with [`DevClusterOpts::new`] and
/// override fields: `DevClusterOpts { tls: true, ..DevClusterOpts::new("a") }`.
#[derive(Debug, Clone)]
pub struct DevClusterOpts {
    /// `--name`.
    pub name: String,
    /// The devcluster binary; default `cargo_bin("fleetbus-devcluster")`.
    pub bin: Option<PathBuf>,
    /// `--data-dir`; default a directory inside the DevCluster's tempdir, so
    /// [`DevCluster::restart`] keeps the stored objects.
    pub data_dir: Option<PathBuf>,
    /// `--tls` (serve https with a self-signed CA written into the kubeconfig).
    pub tls: bool,
    /// `--token`: require this bearer token.
    pub token: Option<String>,
    /// `--nodes`: how many Node objects to seed.
    pub nodes: u32,
    /// More flags, e.g. `["--authorization", "rbac"]`.
    pub extra_args: Vec<String>,
    /// Extra environment variables, e.g. `RUST_LOG=info,fleetbus_devcluster=debug`
    /// to log every request (reads too), which the benchmarks count.
    pub env: Vec<(String, String)>,
}

impl DevClusterOpts {
    /// Plain http, no token, one node, data dir in the DevCluster's tempdir.
    pub fn new(name: &str) -> Self {
        DevClusterOpts {
            name: name.to_string(),
            bin: None,
            data_dir: None,
            tls: false,
            token: None,
            nodes: 1,
            extra_args: Vec::new(),
            env: Vec::new(),
        }
    }
}

/// A running devcluster; killed (and its tempdir removed) on drop.
#[derive(Debug)]
pub struct DevCluster {
    pub name: String,
    proc: Option<Proc>,
    opts: DevClusterOpts,
    bin: PathBuf,
    url: String,
    port: u16,
    data_dir: PathBuf,
    kubeconfig: PathBuf,
    // Declared last so it is removed after the process is dead.
    dir: TempDir,
}

impl DevCluster {
    /// Starts the devcluster on `127.0.0.1:0` and waits for the URL it prints.
    pub fn start(opts: DevClusterOpts) -> anyhow::Result<DevCluster> {
        let bin = match &opts.bin {
            Some(b) => b.clone(),
            None => cargo_bin("fleetbus-devcluster"),
        };
        let dir = tempfile::Builder::new()
            .prefix(&format!("fleetbus-devcluster-{}-", opts.name))
            .tempdir()?;
        let data_dir = opts
            .data_dir
            .clone()
            .unwrap_or_else(|| dir.path().join("data"));
        let kubeconfig = dir.path().join("kubeconfig");
        let mut dc = DevCluster {
            name: opts.name.clone(),
            proc: None,
            opts,
            bin,
            url: String::new(),
            port: 0,
            data_dir,
            kubeconfig,
            dir,
        };
        dc.spawn("127.0.0.1:0")?;
        Ok(dc)
    }

    /// The URL the server printed, e.g. `http://127.0.0.1:41233`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The kubeconfig the server wrote (points at [`DevCluster::url`]).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Server log (stderr, and stdout after the URL line).
    pub fn log(&self) -> String {
        std::fs::read(self.log_path())
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("devcluster.log")
    }

    pub fn is_running(&mut self) -> bool {
        self.proc.as_mut().is_some_and(Proc::is_running)
    }

    /// The server's process id while it runs (the benchmarks read its RSS and CPU time).
    pub fn pid(&self) -> Option<u32> {
        self.proc.as_ref().and_then(Proc::pid)
    }

    /// SIGSTOP: the devcluster keeps its sockets open but answers nothing
    /// (a hung process, not a dead one). Undo with `resume`.
    pub fn pause(&self) -> anyhow::Result<()> {
        self.proc
            .as_ref()
            .context("devcluster not running")?
            .signal("STOP")
    }

    /// SIGCONT after [`Self::pause`].
    pub fn resume(&self) -> anyhow::Result<()> {
        self.proc
            .as_ref()
            .context("devcluster not running")?
            .signal("CONT")
    }

    /// SIGKILL and reap; the data dir is kept for [`DevCluster::restart`].
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }

    /// Kills the server if running and starts it again with the same flags,
    /// the same listen port and the same data dir.
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9();
        let listen = format!("127.0.0.1:{}", self.port);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn(&listen) {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!("restart devcluster {} on {listen}", self.name)))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        }
    }

    /// [`Self::restart`] with `args` added to its flags (for this and every
    /// later restart), e.g. `--debug-faults-plan` for a fault in force before
    /// the first client reconnects. A `--flag value` given before is
    /// replaced, not repeated (the server takes each once).
    pub fn restart_with(&mut self, args: &[&str]) -> anyhow::Result<()> {
        let extra = &mut self.opts.extra_args;
        for flag in args.iter().filter(|a| a.starts_with("--")) {
            if let Some(i) = extra.iter().position(|a| a == flag) {
                let valued = extra.get(i + 1).is_some_and(|v| !v.starts_with("--"));
                extra.drain(i..if valued { i + 2 } else { i + 1 });
            }
        }
        extra.extend(args.iter().map(|a| (*a).to_owned()));
        self.restart()
    }

    /// Runs `/usr/lib/google-cloud-sdk/bin/kubectl.<version> --kubeconfig <kc>
    /// --cache-dir <this DevCluster's cache> <args>`.
    ///
    /// # Panics
    /// If that kubectl cannot be run at all.
    pub fn kubectl(&self, version: &str, args: &[&str]) -> Output {
        let bin = kubectl_bin(version);
        Command::new(&bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(self.dir.path().join("kubectl-cache"))
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin.display()))
    }

    /// A kube client from the kubeconfig the server wrote.
    pub async fn client(&self) -> anyhow::Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(&self.kubeconfig)
            .with_context(|| format!("read {}", self.kubeconfig.display()))?;
        let config = kube::Config::from_custom_kubeconfig(
            kubeconfig,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        Ok(kube::Client::try_from(config)?)
    }

    /// `GET /debug/writes`: `{"<group>/<resource>": count, ...}`.
    pub async fn writes(&self) -> anyhow::Result<serde_json::Value> {
        self.debug(http::Request::get("/debug/writes").body(Vec::new())?)
            .await
    }

    /// `PUT /debug/faults` on a devcluster started with `--debug-faults`:
    /// sets the fault plan (e.g. `{"userAgent": "fleetbus-agent",
    /// "tooManyRequests": 0.2}`, see the devcluster's README) and returns
    /// the report.
    pub async fn set_faults(&self, plan: &serde_json::Value) -> anyhow::Result<serde_json::Value> {
        let body = serde_json::to_vec(plan)?;
        self.debug(
            http::Request::put("/debug/faults")
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(body)?,
        )
        .await
    }

    /// `GET /debug/faults`: the plan and what was injected, in total and
    /// per client (`User-Agent`).
    pub async fn faults(&self) -> anyhow::Result<serde_json::Value> {
        self.debug(http::Request::get("/debug/faults").body(Vec::new())?)
            .await
    }

    /// One request to a `/debug/` endpoint, its JSON answer.
    async fn debug(&self, req: http::Request<Vec<u8>>) -> anyhow::Result<serde_json::Value> {
        let what = format!("{} {}", req.method(), req.uri());
        let client = self.client().await?;
        let text = client.request_text(req).await.context(what.clone())?;
        serde_json::from_str(&text).with_context(|| format!("parse {what}: {text}"))
    }

    fn spawn(&mut self, listen: &str) -> anyhow::Result<()> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(["--name", &self.opts.name, "--listen", listen])
            .arg("--kubeconfig-out")
            .arg(&self.kubeconfig)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .args(["--nodes", &self.opts.nodes.to_string()]);
        if self.opts.tls {
            cmd.arg("--tls");
        }
        if let Some(token) = &self.opts.token {
            cmd.args(["--token", token]);
        }
        cmd.args(&self.opts.extra_args);
        cmd.envs(self.opts.env.iter().map(|(k, v)| (k, v)));
        let (proc, line) = Proc::spawn_reading_first_line(cmd, &self.log_path(), START_TIMEOUT)
            .with_context(|| format!("start devcluster {}", self.name))?;
        let port = parse_port(&line)?;
        self.url = line;
        self.port = port;
        self.proc = Some(proc);
        Ok(())
    }
}

/// The port of a bare URL such as `https://127.0.0.1:41233`.
fn parse_port(url: &str) -> anyhow::Result<u16> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .with_context(|| format!("devcluster's first stdout line is not a URL: {url:?}"))?;
    let hostport = rest.split('/').next().unwrap_or(rest);
    match hostport.rsplit_once(':').map(|(_, p)| p.parse::<u16>()) {
        Some(Ok(port)) => Ok(port),
        _ => bail!("no port in devcluster URL {url:?}"),
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        self.kill9();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_port_of_printed_url() {
        assert_eq!(parse_port("http://127.0.0.1:41233").unwrap(), 41233);
        assert_eq!(parse_port("https://127.0.0.1:8443/").unwrap(), 8443);
        assert!(parse_port("listening on 127.0.0.1:80").is_err());
        assert!(parse_port("http://127.0.0.1").is_err());
    }

    #[test]
    fn fails_clearly_when_binary_prints_nothing() {
        let opts = DevClusterOpts {
            bin: Some(PathBuf::from("/bin/true")),
            ..DevClusterOpts::new("x")
        };
        let err = format!("{:#}", DevCluster::start(opts).unwrap_err());
        assert!(err.contains("exited before printing a line"), "{err}");
    }

    #[test]
    fn fails_clearly_when_first_line_is_not_a_url() {
        let opts = DevClusterOpts {
            bin: Some(PathBuf::from("/bin/echo")),
            ..DevClusterOpts::new("x")
        };
        let err = format!("{:#}", DevCluster::start(opts).unwrap_err());
        assert!(err.contains("not a URL"), "{err}");
    }
}
