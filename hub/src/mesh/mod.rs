//! `fleetbus mesh up|down|status|init`: a local mesh of real processes.

mod down;
mod error;
mod init;
mod member;
pub mod secure;
mod status;
mod tour;
mod up;
mod upstream;

pub use down::down;
pub use error::MeshError;
pub use init::{init, ClusterFiles, Initialised};
pub use member::{start, stop};
pub use status::status;
pub use up::{up, UpOutcome, UpPlan};

use std::time::Duration;

use crate::proc::{stop_group, Stoppable, Stopped};

/// Stops `group` (SIGTERM, SIGKILL after `grace`) and prints one line per process.
fn stop_and_report(group: &mut [Stoppable], grace: Duration) {
    let outcome = stop_group(group, grace);
    for (p, how) in group.iter().zip(outcome) {
        let pid = p.record.pid;
        match how {
            Stopped::Terminated => println!("  stopped {} (pid {pid})", p.what),
            Stopped::Killed => {
                println!(
                    "  killed  {} (pid {pid}): still running {}s after SIGTERM",
                    p.what,
                    grace.as_secs()
                )
            }
            Stopped::AlreadyGone => println!("  {} (pid {pid}) was not running", p.what),
        }
    }
}
