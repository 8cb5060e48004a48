//! The short tour printed once a mesh is up.

use std::fmt::Write;
use std::path::Path;

use crate::state::MeshState;

/// What to try now that the mesh is up.
pub fn tour(state: &MeshState, dir: &Path, detached: bool) -> String {
    let fleetbus = std::env::args().next().unwrap_or_else(|| "fleetbus".into());
    let nats = state
        .nats
        .as_ref()
        .map_or("nats://127.0.0.1:4222", |n| n.url.as_str());
    let names: Vec<&str> = state.clusters.iter().map(|c| c.name.as_str()).collect();
    let first = state
        .clusters
        .first()
        .map(|c| c.kubeconfig.display().to_string())
        .unwrap_or_default();
    let dir = dir.display();
    let mut t = String::new();
    let _ = writeln!(
        t,
        "fleetbus mesh is up: clusters {} on {nats}",
        names.join(", ")
    );
    let _ = writeln!(t, "\nTry:");
    let _ = writeln!(
        t,
        "  kubectl --kubeconfig {first} get clusters.fleetbus.io   # every cluster in the fleet"
    );
    let _ = writeln!(t, "  kubectl --kubeconfig {first} get ns");
    let nats_auth = state
        .security
        .as_ref()
        .map(|s| {
            format!(
                " --creds {} --tlsca {}",
                s.admin_creds.display(),
                s.ca.display()
            )
        })
        .unwrap_or_default();
    let _ = writeln!(t, "  nats sub 'fleetbus.>' -s {nats}{nats_auth}   # watch the bus (needs the `nats` CLI, not installed here)");
    let _ = writeln!(t, "  {fleetbus} mesh status --dir {dir}");
    let _ = writeln!(
        t,
        "  {fleetbus} dashboard --nats-url {nats} --dir {dir}   # the live fleet dashboard on http://127.0.0.1:8080/"
    );
    match &state.security {
        Some(s) => {
            let _ = writeln!(
                t,
                "Secure: NATS over TLS (CA {}), one credential per cluster ({dir}/<cluster>/nats.creds), \
                 the admin's {}; `fleetbus` commands here use them. \
                 `{fleetbus} join NAME --dir {dir}` mints a new cluster's.",
                s.ca.display(),
                s.admin_creds.display()
            );
        }
        None => {
            let _ = writeln!(
                t,
                "Insecure (--insecure): anyone who reaches {nats} reads and writes the whole bus."
            );
        }
    }
    let _ = writeln!(
        t,
        "Logs: {dir}/nats.log, {dir}/<cluster>/devcluster.log, {dir}/<cluster>/agent.log"
    );
    if detached {
        let _ = write!(
            t,
            "The mesh runs in the background; stop it with `{fleetbus} mesh down --dir {dir}`."
        );
    } else {
        let _ = write!(
            t,
            "Press Ctrl-C to stop the mesh (or run `{fleetbus} mesh down --dir {dir}` elsewhere)."
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{ClusterRecord, NatsRecord, ProcRecord};

    fn state() -> MeshState {
        let process = ProcRecord {
            pid: 1,
            start_ticks: 1,
            log: "/m/nats.log".into(),
        };
        MeshState {
            nats: Some(NatsRecord {
                process,
                port: 4333,
                url: "nats://127.0.0.1:4333".into(),
                store_dir: "/m/nats".into(),
            }),
            clusters: ["a", "b"]
                .iter()
                .map(|n| ClusterRecord {
                    name: n.to_string(),
                    kubeconfig: format!(".fleetbus-mesh/{n}/kubeconfig").into(),
                    data_dir: format!(".fleetbus-mesh/{n}/data").into(),
                    devcluster: None,
                    agent: None,
                    devcluster_args: Vec::new(),
                    agent_args: Vec::new(),
                    stopped: false,
                })
                .collect(),
            ..MeshState::default()
        }
    }

    #[test]
    fn tour_points_at_the_first_kubeconfig_and_the_bus() {
        let t = tour(&state(), Path::new(".fleetbus-mesh"), false);
        assert!(
            t.contains("kubectl --kubeconfig .fleetbus-mesh/a/kubeconfig get clusters.fleetbus.io"),
            "{t}"
        );
        assert!(
            t.contains("kubectl --kubeconfig .fleetbus-mesh/a/kubeconfig get ns"),
            "{t}"
        );
        assert!(
            t.contains("nats sub 'fleetbus.>' -s nats://127.0.0.1:4333"),
            "{t}"
        );
        assert!(t.contains("mesh status --dir .fleetbus-mesh"), "{t}");
        assert!(
            t.contains("dashboard --nats-url nats://127.0.0.1:4333 --dir .fleetbus-mesh"),
            "{t}"
        );
        assert!(t.contains("Ctrl-C"), "{t}");
    }

    #[test]
    fn secure_tour_names_the_credentials() {
        let mut s = state();
        s.security = Some(crate::state::MeshSecurity {
            ca: "/m/ca.pem".into(),
            admin_creds: "/m/admin.creds".into(),
        });
        let t = tour(&s, Path::new("/m"), false);
        assert!(
            t.contains("-s nats://127.0.0.1:4333 --creds /m/admin.creds --tlsca /m/ca.pem"),
            "{t}"
        );
        assert!(t.contains("join NAME --dir /m"), "{t}");
        assert!(!t.contains("Insecure"), "{t}");
        assert!(tour(&state(), Path::new("/m"), false).contains("Insecure"));
    }

    #[test]
    fn detached_tour_says_how_to_stop() {
        let t = tour(&state(), Path::new("/tmp/m"), true);
        assert!(t.contains("mesh down --dir /tmp/m"), "{t}");
        assert!(!t.contains("Ctrl-C"), "{t}");
    }
}
