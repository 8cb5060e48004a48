//! Putting a revocation in force on the fleet's nats-server.

use std::path::Path;

use crate::mesh;
use crate::trust;

/// A revocation takes effect when nats-server reloads the fleet's include:
/// done here for a running secure mesh in `dir`, said otherwise. False when
/// the mesh's reload failed (the revocation is written but not in force).
pub(super) fn reload_or_tell(dir: &Path) -> bool {
    match mesh::secure::reload_nats(dir) {
        Some(Ok(pid)) => {
            eprintln!("fleetbus: reloaded the mesh's nats-server (pid {pid})");
            true
        }
        Some(Err(why)) => {
            eprintln!(
                "fleetbus: error: the mesh's nats-server did not reload, the revocation is \
                 not in force yet: {why}"
            );
            false
        }
        None => {
            eprintln!(
                "fleetbus: copy {} to every nats-server of the fleet and reload each \
                 (`nats-server --signal reload`): the revocation takes effect then",
                dir.join(trust::files::SERVER_CONF).display()
            );
            true
        }
    }
}
