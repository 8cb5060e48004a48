//! `fleetbus mesh stop|start CLUSTER`: one cluster of a running mesh goes
//! down (its agent and API server killed, SIGKILL: a failure, as a machine
//! dies, not a clean leave) and comes back with the same data, arguments and
//! name. What the tour's failover shows; `mesh status` tells it, and a
//! foreground `mesh up` lets a stopped cluster be.

use std::path::Path;
use std::time::{Duration, Instant};

use fleetbus_launch::Binaries;

use super::MeshError;
use crate::proc::{self, Stoppable};
use crate::state::{AgentRecord, DevclusterRecord, MeshState};

/// How long `mesh start` waits for the API server and the agent.
const READY: Duration = Duration::from_secs(60);

/// Kills `name`'s agent and devcluster and marks the cluster stopped.
pub fn stop(dir: &Path, name: &str) -> Result<(), MeshError> {
    let mut state = MeshState::read(dir)?;
    let c = cluster(&mut state, name)?;
    c.stopped = true;
    let procs: Vec<(String, crate::state::ProcRecord)> = [
        c.agent.as_ref().map(|a| ("agent", a.process.clone())),
        c.devcluster
            .as_ref()
            .map(|d| ("devcluster", d.process.clone())),
    ]
    .into_iter()
    .flatten()
    .map(|(w, p)| (format!("{name}/{w}"), p))
    .collect();
    // Marked first: a foreground `mesh up` reads it before it sees them exit.
    state.write(dir)?;
    for (what, rec) in procs {
        if proc::is_alive(&rec) {
            proc::signal(&rec, "KILL");
            println!("  killed {what} (pid {})", rec.pid);
        }
    }
    println!("{name} is stopped: its agent and API server are down; `fleetbus mesh start {name}` brings them back");
    Ok(())
}

/// Runs `name`'s devcluster and agent again with the arguments they had,
/// waits until the agent is ready, and marks the cluster running.
pub async fn start(dir: &Path, name: &str) -> Result<(), MeshError> {
    let bins = Binaries::locate()?;
    let mut state = MeshState::read(dir)?;
    let c = cluster(&mut state, name)?;
    let alive = |r: Option<&crate::state::ProcRecord>| r.is_some_and(proc::is_alive);
    if alive(c.agent.as_ref().map(|a| &a.process))
        || alive(c.devcluster.as_ref().map(|d| &d.process))
    {
        return Err(MeshError::Usage(format!(
            "{name} is running: `fleetbus mesh stop {name}` first"
        )));
    }
    if c.devcluster_args.is_empty() || c.agent_args.is_empty() {
        return Err(MeshError::Usage(format!(
            "{name} was started by an older `fleetbus mesh up`: its arguments are not recorded"
        )));
    }
    let cdir = dir.join(name);
    let stdout = cdir.join("devcluster.stdout");
    let dev = spawn(
        &bins.devcluster,
        &c.devcluster_args,
        &cdir.join("devcluster.log"),
        Some(&stdout),
        &format!("{name}/devcluster"),
    )?;
    let url = wait(READY, &dev, || async {
        crate::probe::first_line(&stdout).ok_or_else(|| "no URL yet".to_owned())
    })
    .await?;
    println!("  {name}/devcluster {url} (pid {})", dev.record.pid);
    c.devcluster = Some(DevclusterRecord {
        process: dev.record.clone(),
        url,
    });
    let agent = spawn(
        &bins.agent,
        &c.agent_args,
        &cdir.join("agent.log"),
        None,
        &format!("{name}/agent"),
    )?;
    let metrics = c
        .agent
        .as_ref()
        .map(|a| a.metrics_addr.clone())
        .unwrap_or_default();
    c.agent = Some(AgentRecord {
        process: agent.record.clone(),
        metrics_addr: metrics.clone(),
    });
    c.stopped = false;
    state.write(dir)?;
    wait(READY, &agent, || crate::probe::readyz(&metrics)).await?;
    println!(
        "  {name}/agent ready (pid {}, http://{metrics}/readyz)",
        agent.record.pid
    );
    Ok(())
}

fn cluster<'a>(
    state: &'a mut MeshState,
    name: &str,
) -> Result<&'a mut crate::state::ClusterRecord, MeshError> {
    let names: Vec<String> = state.clusters.iter().map(|c| c.name.clone()).collect();
    state
        .clusters
        .iter_mut()
        .find(|c| c.name == name)
        .ok_or_else(|| {
            MeshError::Usage(format!(
                "no cluster {name:?} in this mesh (it has {})",
                names.join(", ")
            ))
        })
}

fn spawn(
    program: &Path,
    args: &[String],
    log: &Path,
    stdout: Option<&Path>,
    what: &str,
) -> Result<Stoppable, MeshError> {
    let s = proc::spawn(program, args, log, stdout).map_err(|source| MeshError::Spawn {
        what: what.to_owned(),
        source,
    })?;
    // Not our child to keep: the process outlives this command (a std
    // Child dropped neither kills nor waits).
    Ok(Stoppable::new(what, s.record, None))
}

async fn wait<T, F, Fut>(timeout: Duration, p: &Stoppable, check: F) -> Result<T, MeshError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        let last = match check().await {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if !proc::is_alive(&p.record) || Instant::now() >= deadline {
            return Err(MeshError::Usage(format!(
                "{} did not come up ({last}); see {}",
                p.what,
                p.record.log.display()
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
