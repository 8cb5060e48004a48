//! `fleetbus mesh down`: stop a mesh recorded in `<dir>/mesh.json`.

use std::path::Path;
use std::time::{Duration, Instant};

use super::up::{AGENT_GRACE, DEVCLUSTER_GRACE, NATS_GRACE};
use super::MeshError;
use crate::proc::{self, Stoppable};
use crate::state::MeshState;

/// How long a foreground `mesh up` gets to stop its own mesh.
const SUPERVISOR_GRACE: Duration = Duration::from_secs(60);

/// Stops the mesh: asks a foreground `mesh up` to do it if one is running,
/// then stops whatever is still alive (agents, devclusters, NATS; SIGTERM,
/// SIGKILL after a grace period) and removes the state file.
pub fn down(dir: &Path) -> Result<(), MeshError> {
    let state = MeshState::read(dir)?;
    if let Some(sup) = state.supervisor.as_ref().filter(|s| proc::is_alive(s)) {
        println!(
            "asking the foreground `fleetbus mesh up` (pid {}) to stop the mesh",
            sup.pid
        );
        proc::signal(sup, "TERM");
        let deadline = Instant::now() + SUPERVISOR_GRACE;
        while proc::is_alive(sup) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    let all = state.processes_in_stop_order();
    for (suffix, grace) in [
        ("/agent", AGENT_GRACE),
        ("/devcluster", DEVCLUSTER_GRACE),
        ("nats-server", NATS_GRACE),
    ] {
        let mut group: Vec<Stoppable> = all
            .iter()
            .filter(|(what, _)| what.ends_with(suffix))
            .map(|(what, rec)| Stoppable::new(what.clone(), rec.clone(), None))
            .collect();
        super::stop_and_report(&mut group, grace);
    }
    MeshState::remove(dir)?;
    println!(
        "mesh in {} is down (data kept in {0}/<cluster>/data and {0}/nats)",
        dir.display()
    );
    Ok(())
}
