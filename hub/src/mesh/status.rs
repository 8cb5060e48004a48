//! `fleetbus mesh status`: each component's pid, liveness, URL and readiness.

use std::path::Path;

use super::MeshError;
use crate::probe;
use crate::proc;
use crate::state::{MeshState, ProcRecord};

/// Prints the mesh's components; returns true if every one is running (and
/// every agent ready).
pub async fn status(dir: &Path) -> Result<bool, MeshError> {
    let state = MeshState::read(dir)?;
    let mut healthy = true;
    match &state.supervisor {
        Some(s) if proc::is_alive(s) => println!(
            "mesh in {}: foreground, supervised by pid {}",
            dir.display(),
            s.pid
        ),
        Some(s) => {
            healthy = false;
            println!(
                "mesh in {}: its `fleetbus mesh up` (pid {}) is gone",
                dir.display(),
                s.pid
            );
        }
        None => println!("mesh in {}: detached", dir.display()),
    }
    println!("{:<18} {:>8}  {:<8} ENDPOINT", "COMPONENT", "PID", "STATE");
    let mut row = |what: &str, p: &ProcRecord, endpoint: &str| -> bool {
        let alive = proc::is_alive(p);
        healthy &= alive;
        println!(
            "{what:<18} {:>8}  {:<8} {endpoint}",
            p.pid,
            if alive { "running" } else { "dead" }
        );
        alive
    };
    if let Some(n) = &state.nats {
        row("nats-server", &n.process, &n.url);
    }
    let mut agents = Vec::new();
    for c in &state.clusters {
        if c.stopped {
            // Dead on purpose (`mesh stop`): said, and not a failure of the mesh.
            println!(
                "{:<16} stopped (`fleetbus mesh start {0}` brings it back)",
                c.name
            );
            continue;
        }
        if let Some(d) = &c.devcluster {
            row(
                &format!("{}/devcluster", c.name),
                &d.process,
                &format!("{}  kubeconfig {}", d.url, c.kubeconfig.display()),
            );
        }
        if let Some(a) = &c.agent {
            let alive = row(&format!("{}/agent", c.name), &a.process, &a.readyz_url());
            agents.push((c.name.clone(), alive, a.metrics_addr.clone()));
        }
    }
    for (name, alive, addr) in agents {
        let ready = if alive {
            probe::readyz(&addr).await
        } else {
            Err("not running".to_string())
        };
        match ready {
            Ok(()) => println!("{name}/agent: ready"),
            Err(why) => {
                healthy = false;
                println!("{name}/agent: NOT ready ({why})");
            }
        }
    }
    Ok(healthy)
}
