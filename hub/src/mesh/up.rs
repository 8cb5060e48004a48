//! `fleetbus mesh up`: start NATS, the devclusters and their agents, wait for
//! each to be ready, print a tour, then supervise until Ctrl-C (or detach).

use std::ffi::OsStr;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::time::Duration;

use fleetbus_launch::{AgentCommand, Binaries};
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::time::Instant;

use super::tour::tour;
use super::upstream;
use super::MeshError;
use crate::cli::UpArgs;
use crate::names::{cluster_names, NameError};
use crate::probe;
use crate::proc::{self, log_tail, Spawned, Stoppable};
use crate::state::{
    AgentRecord, ClusterRecord, DevclusterRecord, MeshState, NatsRecord, ProcRecord,
};

/// Tries when the NATS port we picked was taken before nats-server bound it.
const NATS_PORT_ATTEMPTS: usize = 3;
/// Lines of a failed component's log shown in the error.
const TAIL_LINES: usize = 30;
/// How long each kind of component gets between SIGTERM and SIGKILL.
/// Agents get the longest: they publish their leave record on the way out.
pub(crate) const AGENT_GRACE: Duration = Duration::from_secs(10);
pub(crate) const DEVCLUSTER_GRACE: Duration = Duration::from_secs(5);
pub(crate) const NATS_GRACE: Duration = Duration::from_secs(5);

/// A validated `mesh up` request.
#[derive(Debug, Clone)]
pub struct UpPlan {
    pub dir: PathBuf,
    pub names: Vec<String>,
    pub detach: bool,
    pub nats_port: u16,
    pub nodes: u32,
    pub ready_timeout: Duration,
    /// `--insecure`: plain-text NATS without auth.
    pub insecure: bool,
    /// `--upstream-crds`: where the SIG Multicluster CRDs are (None: the default place).
    pub upstream_crds: Option<PathBuf>,
}

impl UpPlan {
    pub fn from_args(args: &UpArgs) -> Result<UpPlan, NameError> {
        Ok(UpPlan {
            dir: args.dir.dir.clone(),
            names: cluster_names(args.members.clusters, args.members.names.as_deref())?,
            detach: args.detach,
            nats_port: args.nats_port,
            nodes: args.nodes,
            ready_timeout: Duration::from_secs(args.ready_timeout),
            insecure: args.insecure,
            upstream_crds: args.upstream_crds.clone(),
        })
    }
}

/// How a successful `mesh up` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpOutcome {
    /// `--detach`: the mesh keeps running.
    Detached,
    /// SIGINT/SIGTERM stopped the mesh.
    Stopped,
    /// A component exited on its own; the mesh was stopped.
    ComponentExited(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Agent,
    Devcluster,
    Nats,
}

/// The running mesh: what was started (to stop it in order) and its state file.
struct Mesh {
    dir: PathBuf,
    state: MeshState,
    procs: Vec<(Kind, Stoppable)>,
}

/// Runs `mesh up`. Whatever happens before the mesh is ready (an error, a
/// signal) stops what was already started.
pub async fn up(plan: &UpPlan) -> Result<UpOutcome, MeshError> {
    let bins = Binaries::locate()?;
    prepare_dir(&plan.dir)?;
    let mut signals = Signals::install()?;
    let mut mesh = Mesh {
        dir: plan.dir.clone(),
        state: MeshState::default(),
        procs: Vec::new(),
    };
    if !plan.detach {
        mesh.state.supervisor = Some(own_record());
    }
    println!(
        "starting a fleetbus mesh in {}: clusters {}",
        plan.dir.display(),
        plan.names.join(", ")
    );
    let started = tokio::select! {
        r = mesh.start(plan, &bins) => r,
        () = signals.recv() => Err(MeshError::Interrupted),
    };
    if let Err(e) = started {
        mesh.shutdown();
        return Err(e);
    }
    println!("\n{}", tour(&mesh.state, &plan.dir, plan.detach));
    if plan.detach {
        // Dropping a std Child neither kills nor waits: the mesh keeps running.
        return Ok(UpOutcome::Detached);
    }
    let outcome = loop {
        tokio::select! {
            () = signals.recv() => {
                println!("\nstopping the mesh");
                break UpOutcome::Stopped;
            }
            () = tokio::time::sleep(Duration::from_millis(500)) => {
                mesh.let_stopped_be();
                if let Some((what, why, log)) = mesh.first_exited() {
                    println!("\n{what} exited ({why}); last lines of {}:\n{}", log.display(), log_tail(&log, TAIL_LINES));
                    println!("stopping the mesh");
                    break UpOutcome::ComponentExited(what);
                }
            }
        }
    };
    mesh.shutdown();
    Ok(outcome)
}

fn prepare_dir(dir: &Path) -> Result<(), MeshError> {
    let io = |source| MeshError::Io {
        what: format!("directory {}", dir.display()),
        source,
    };
    std::fs::create_dir_all(dir).map_err(io)?;
    // Everything under it is its user's alone: cluster keys, credentials,
    // the devclusters' ServiceAccount keys and stores (Secrets in clear).
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(io)?;
    }
    match MeshState::read(dir) {
        Ok(old)
            if old
                .supervisor
                .iter()
                .chain(old.processes_in_stop_order().iter().map(|(_, p)| p))
                .any(proc::is_alive) =>
        {
            Err(MeshError::AlreadyRunning(dir.to_path_buf()))
        }
        // No state, a stale one (everything dead) or an unreadable one: start afresh.
        _ => Ok(()),
    }
}

fn own_record() -> ProcRecord {
    let pid = std::process::id();
    ProcRecord {
        pid,
        start_ticks: proc::start_ticks(pid).unwrap_or(0),
        log: PathBuf::new(),
    }
}

fn free_port() -> Result<u16, MeshError> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|source| MeshError::Io {
            what: "a free port".into(),
            source,
        })
}

fn progress(what: &str, detail: &str) {
    println!("  ok  {what:<18} {detail}");
}

impl Mesh {
    async fn start(&mut self, plan: &UpPlan, bins: &Binaries) -> Result<(), MeshError> {
        let conf = if plan.insecure {
            None
        } else {
            let (conf, security) = super::secure::prepare(&self.dir, &[])?;
            self.state.security = Some(security);
            Some(conf)
        };
        let nats_url = self.start_nats(plan, bins, conf.as_deref()).await?;
        self.start_devclusters(plan, bins).await?;
        self.install_upstream_crds(plan).await?;
        self.start_agents(plan, bins, &nats_url).await
    }

    /// Applies every upstream CRD file to every devcluster, before the agents
    /// start (they find the standards served from the first moment). Without
    /// the directory, says once what stays inactive and goes on.
    async fn install_upstream_crds(&self, plan: &UpPlan) -> Result<(), MeshError> {
        let exe = std::env::current_exe().unwrap_or_default();
        let exe_dir = exe.parent().unwrap_or(Path::new("."));
        let dir = match upstream::locate(plan.upstream_crds.as_deref(), exe_dir) {
            Ok(dir) => dir,
            Err(looked) => {
                eprintln!("{}", upstream::missing_warning(&looked));
                return Ok(());
            }
        };
        let unreadable = |file: &Path, reason: String| MeshError::UpstreamCrd {
            file: file.to_path_buf(),
            cluster: None,
            reason,
        };
        let crds = upstream::files(&dir)
            .map_err(|e| unreadable(&dir, e.to_string()))?
            .iter()
            .map(|f| upstream::read(f).map_err(|reason| unreadable(f, reason)))
            .collect::<Result<Vec<_>, _>>()?;
        if crds.is_empty() {
            eprintln!("{}", upstream::missing_warning(&[dir]));
            return Ok(());
        }
        for cluster in &self.state.clusters {
            let url = cluster
                .devcluster
                .as_ref()
                .map(|d| d.url.as_str())
                .unwrap_or("");
            for crd in &crds {
                upstream::apply(url, crd)
                    .await
                    .map_err(|reason| MeshError::UpstreamCrd {
                        file: crd.path.clone(),
                        cluster: Some(cluster.name.clone()),
                        reason,
                    })?;
            }
        }
        let names: Vec<&str> = crds.iter().map(|c| c.name.as_str()).collect();
        let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
        progress(
            "upstream CRDs",
            &format!("{} in every cluster: {}", dir.display(), names.join(", ")),
        );
        Ok(())
    }

    fn save(&self) -> Result<(), MeshError> {
        Ok(self.state.write(&self.dir)?)
    }

    fn spawn(
        &mut self,
        kind: Kind,
        what: &str,
        program: &Path,
        args: &[impl AsRef<OsStr>],
        log: &Path,
        stdout: Option<&Path>,
    ) -> Result<ProcRecord, MeshError> {
        let Spawned { child, record } =
            proc::spawn(program, args, log, stdout).map_err(|source| MeshError::Spawn {
                what: what.to_string(),
                source,
            })?;
        self.procs
            .push((kind, Stoppable::new(what, record.clone(), Some(child))));
        Ok(record)
    }

    async fn start_nats(
        &mut self,
        plan: &UpPlan,
        bins: &Binaries,
        conf: Option<&Path>,
    ) -> Result<String, MeshError> {
        let store_dir = self.dir.join("nats");
        let log = self.dir.join("nats.log");
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = if plan.nats_port == 0 {
                free_port()?
            } else {
                plan.nats_port
            };
            let args: Vec<String> = [
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                &port.to_string(),
                "-n",
                "fleetbus-mesh",
                "-sd",
            ]
            .iter()
            .map(|s| s.to_string())
            .chain([store_dir.display().to_string()])
            .chain(
                conf.iter()
                    .flat_map(|c| ["-c".to_owned(), c.display().to_string()]),
            )
            .collect();
            let process = self.spawn(
                Kind::Nats,
                "nats-server",
                &bins.nats_server,
                &args,
                &log,
                None,
            )?;
            // `tls://`: a client that cannot verify the server does not connect.
            let scheme = if conf.is_some() { "tls" } else { "nats" };
            let url = format!("{scheme}://127.0.0.1:{port}");
            self.state.nats = Some(NatsRecord {
                process: process.clone(),
                port,
                url: url.clone(),
                store_dir: store_dir.clone(),
            });
            self.save()?;
            let addr = format!("127.0.0.1:{port}");
            let idx = self.procs.len() - 1;
            let ready = wait_until(&mut self.procs[idx].1, plan.ready_timeout, async || {
                if probe::accepts_tcp(&addr).await {
                    Ok(())
                } else {
                    Err(format!("nothing accepts TCP on {addr}"))
                }
            })
            .await;
            match ready {
                Ok(()) => {
                    progress(
                        "nats-server",
                        &format!(
                            "{url} (pid {}, JetStream store {})",
                            process.pid,
                            store_dir.display()
                        ),
                    );
                    return Ok(url);
                }
                // A port picked by us may have been taken meanwhile: try another one.
                Err(MeshError::Exited { .. })
                    if plan.nats_port == 0 && attempt < NATS_PORT_ATTEMPTS =>
                {
                    self.procs.pop();
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn start_devclusters(&mut self, plan: &UpPlan, bins: &Binaries) -> Result<(), MeshError> {
        // Spawn all, then wait for each: they start in parallel.
        let mut waiting = Vec::new();
        for name in &plan.names {
            let cdir = self.dir.join(name);
            let data_dir = cdir.join("data");
            std::fs::create_dir_all(&data_dir).map_err(|source| MeshError::Io {
                what: format!("directory {}", data_dir.display()),
                source,
            })?;
            let kubeconfig = cdir.join("kubeconfig");
            let stdout = cdir.join("devcluster.stdout");
            let what = format!("{name}/devcluster");
            let args = vec![
                "--name".to_string(),
                name.clone(),
                "--listen".into(),
                "127.0.0.1:0".into(),
                "--data-dir".into(),
                data_dir.display().to_string(),
                "--kubeconfig-out".into(),
                kubeconfig.display().to_string(),
                "--nodes".into(),
                plan.nodes.to_string(),
            ];
            let process = self.spawn(
                Kind::Devcluster,
                &what,
                &bins.devcluster,
                &args,
                &cdir.join("devcluster.log"),
                Some(&stdout),
            )?;
            self.state.clusters.push(ClusterRecord {
                name: name.clone(),
                kubeconfig,
                data_dir,
                devcluster: Some(DevclusterRecord {
                    process,
                    url: String::new(),
                }),
                agent: None,
                devcluster_args: args.clone(),
                agent_args: Vec::new(),
                stopped: false,
            });
            waiting.push((self.procs.len() - 1, stdout));
        }
        self.save()?;
        for (i, (idx, stdout)) in waiting.into_iter().enumerate() {
            // The devcluster writes its kubeconfig, then prints its URL as the first stdout line.
            let url = wait_until(&mut self.procs[idx].1, plan.ready_timeout, async || {
                probe::first_line(&stdout).ok_or_else(|| "no URL printed on stdout yet".to_string())
            })
            .await?;
            let cluster = &mut self.state.clusters[i];
            if let Some(d) = cluster.devcluster.as_mut() {
                d.url = url.clone();
            }
            let detail = format!(
                "{url} (pid {}, kubeconfig {})",
                self.procs[idx].1.record.pid,
                cluster.kubeconfig.display()
            );
            progress(&self.procs[idx].1.what, &detail);
            self.save()?;
        }
        Ok(())
    }

    async fn start_agents(
        &mut self,
        plan: &UpPlan,
        bins: &Binaries,
        nats_url: &str,
    ) -> Result<(), MeshError> {
        let mut waiting = Vec::new();
        for i in 0..self.state.clusters.len() {
            let (name, kubeconfig) = {
                let c = &self.state.clusters[i];
                (c.name.clone(), c.kubeconfig.clone())
            };
            let metrics = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()?));
            let metrics_addr = metrics.to_string();
            let mut cmd = AgentCommand::new(&name)
                .nats_url(nats_url)
                .kubeconfig(kubeconfig)
                .metrics_addr(metrics)
                .publish_kubeconfig(true);
            if let Some(security) = &self.state.security {
                cmd = super::secure::secure_agent(&self.dir, security, cmd)?;
            }
            let args = cmd.argv();
            let log = self.dir.join(&name).join("agent.log");
            let process = self.spawn(
                Kind::Agent,
                &format!("{name}/agent"),
                &bins.agent,
                &args,
                &log,
                None,
            )?;
            self.state.clusters[i].agent = Some(AgentRecord {
                process,
                metrics_addr: metrics_addr.clone(),
            });
            self.state.clusters[i].agent_args = args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect();
            waiting.push((self.procs.len() - 1, metrics_addr));
        }
        self.save()?;
        for (idx, metrics_addr) in waiting {
            wait_until(&mut self.procs[idx].1, plan.ready_timeout, async || {
                probe::readyz(&metrics_addr).await
            })
            .await?;
            let p = &self.procs[idx].1;
            progress(
                &p.what,
                &format!("ready (pid {}, http://{metrics_addr}/readyz)", p.record.pid),
            );
        }
        Ok(())
    }

    /// Forgets the processes of clusters `mesh stop` stopped (read from the
    /// state file): their exit is not a failure of the mesh.
    fn let_stopped_be(&mut self) {
        let Ok(on_disk) = MeshState::read(&self.dir) else {
            return;
        };
        let stopped: Vec<String> = on_disk
            .clusters
            .iter()
            .filter(|c| c.stopped)
            .map(|c| format!("{}/", c.name))
            .collect();
        self.procs
            .retain(|(_, p)| !stopped.iter().any(|s| p.what.starts_with(s.as_str())));
        self.state = on_disk;
    }

    /// The first component that exited on its own: name, status, log.
    fn first_exited(&mut self) -> Option<(String, String, PathBuf)> {
        self.procs.iter_mut().find_map(|(_, p)| {
            (!p.is_alive()).then(|| (p.what.clone(), p.exit_description(), p.record.log.clone()))
        })
    }

    /// Stops everything in order (agents, devclusters, NATS), reaping each
    /// child, and removes the state file.
    fn shutdown(&mut self) {
        // What `mesh start` ran again is in the state file, not our children.
        if let Ok(on_disk) = MeshState::read(&self.dir) {
            let ours: Vec<u32> = self.procs.iter().map(|(_, p)| p.record.pid).collect();
            for c in &on_disk.clusters {
                let agent = c
                    .agent
                    .as_ref()
                    .map(|a| (Kind::Agent, "agent", a.process.clone()));
                let dev = c
                    .devcluster
                    .as_ref()
                    .map(|d| (Kind::Devcluster, "devcluster", d.process.clone()));
                for (kind, what, rec) in agent.into_iter().chain(dev) {
                    if !ours.contains(&rec.pid) {
                        let what = format!("{}/{what}", c.name);
                        self.procs.push((kind, Stoppable::new(what, rec, None)));
                    }
                }
            }
        }
        for (kind, grace) in [
            (Kind::Agent, AGENT_GRACE),
            (Kind::Devcluster, DEVCLUSTER_GRACE),
            (Kind::Nats, NATS_GRACE),
        ] {
            let mut group: Vec<Stoppable> = Vec::new();
            let mut rest = Vec::new();
            for (k, p) in self.procs.drain(..) {
                if k == kind {
                    group.push(p)
                } else {
                    rest.push((k, p))
                }
            }
            self.procs = rest;
            super::stop_and_report(&mut group, grace);
        }
        if let Err(e) = MeshState::remove(&self.dir) {
            eprintln!("warning: {e}");
        }
    }
}

/// Polls `check` every 100ms until it succeeds; fails early if `proc` exits,
/// and after `timeout` with the last probe result and the end of its log.
async fn wait_until<T>(
    proc: &mut Stoppable,
    timeout: Duration,
    mut check: impl AsyncFnMut() -> Result<T, String>,
) -> Result<T, MeshError> {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if !proc.is_alive() {
            return Err(MeshError::Exited {
                what: proc.what.clone(),
                status: proc.exit_description(),
                log: proc.record.log.clone(),
                tail: log_tail(&proc.record.log, TAIL_LINES),
            });
        }
        if Instant::now() >= deadline {
            return Err(MeshError::NotReady {
                what: proc.what.clone(),
                secs: timeout.as_secs(),
                last,
                log: proc.record.log.clone(),
                tail: log_tail(&proc.record.log, TAIL_LINES),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// SIGINT (Ctrl-C), SIGTERM and SIGHUP (terminal closed). Installing the
/// handlers replaces the default "die at once", so the mesh is always stopped
/// in order and never orphaned.
struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> Result<Signals, MeshError> {
        let io = |source| MeshError::Io {
            what: "signal handlers".into(),
            source,
        };
        Ok(Signals {
            int: signal(SignalKind::interrupt()).map_err(io)?,
            term: signal(SignalKind::terminate()).map_err(io)?,
            hup: signal(SignalKind::hangup()).map_err(io)?,
        })
    }

    async fn recv(&mut self) {
        tokio::select! {
            _ = self.int.recv() => {}
            _ = self.term.recv() => {}
            _ = self.hup.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mesh_directory_is_its_users_alone() {
        use std::os::unix::fs::PermissionsExt as _;
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("mesh");
        prepare_dir(&dir).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&dir), 0o700);
        // An existing directory left open by an earlier version is closed too.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        prepare_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
    }
}
