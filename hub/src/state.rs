//! The mesh state file (`<dir>/mesh.json`): what `mesh up` started, for `down` and `status`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// File name of the state file inside the mesh directory.
pub const STATE_FILE: &str = "mesh.json";
const VERSION: u32 = 1;

/// Why the state file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// No state file: no mesh was started in this directory (or it was stopped).
    #[error("no mesh state at {0} (is a mesh running? start one with `fleetbus mesh up`)")]
    Missing(PathBuf),
    /// Reading or writing the file failed.
    #[error("cannot access mesh state {path}")]
    Io {
        /// The state file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a state file this version understands.
    #[error("cannot parse mesh state {path}")]
    Parse {
        /// The state file.
        path: PathBuf,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
}

/// A process `mesh up` started. `start_ticks` (from `/proc/<pid>/stat`) tells
/// it apart from an unrelated process that later reused the pid.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcRecord {
    pub pid: u32,
    pub start_ticks: u64,
    /// Where its stderr (and stdout) go.
    pub log: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NatsRecord {
    pub process: ProcRecord,
    pub port: u16,
    pub url: String,
    pub store_dir: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DevclusterRecord {
    pub process: ProcRecord,
    /// The URL the devcluster printed, once it has (empty before).
    pub url: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    pub process: ProcRecord,
    pub metrics_addr: String,
}

impl AgentRecord {
    pub fn readyz_url(&self) -> String {
        format!("http://{}/readyz", self.metrics_addr)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterRecord {
    pub name: String,
    pub kubeconfig: PathBuf,
    pub data_dir: PathBuf,
    pub devcluster: Option<DevclusterRecord>,
    pub agent: Option<AgentRecord>,
    /// The devcluster's and the agent's arguments, for `mesh start` to run
    /// them again after `mesh stop`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub devcluster_args: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_args: Vec<String>,
    /// `mesh stop` killed it: a foreground `mesh up` lets it be.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
}

/// Everything `mesh up` started, written as each component starts so that
/// `mesh down` can clean up even after an interrupted `up`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshState {
    pub version: u32,
    /// The foreground `fleetbus mesh up` supervising the mesh; `None` when detached.
    pub supervisor: Option<ProcRecord>,
    pub nats: Option<NatsRecord>,
    pub clusters: Vec<ClusterRecord>,
    /// What a client needs to connect to a secure mesh (absent: `--insecure`,
    /// or a mesh.json written before meshes were secure).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security: Option<MeshSecurity>,
}

/// The credentials of a secure mesh, for every `fleetbus` command run
/// without `--creds`/`--ca` (see [`crate::command`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MeshSecurity {
    /// The CA the mesh's nats-server certificate chains to.
    pub ca: PathBuf,
    /// The fleet admin's creds.
    pub admin_creds: PathBuf,
}

impl Default for MeshState {
    fn default() -> Self {
        MeshState {
            version: VERSION,
            supervisor: None,
            nats: None,
            clusters: Vec::new(),
            security: None,
        }
    }
}

impl MeshState {
    pub fn path(dir: &Path) -> PathBuf {
        dir.join(STATE_FILE)
    }

    /// Reads `<dir>/mesh.json`.
    pub fn read(dir: &Path) -> Result<MeshState, StateError> {
        let path = Self::path(dir);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StateError::Missing(path))
            }
            Err(source) => return Err(StateError::Io { path, source }),
        };
        serde_json::from_str(&text).map_err(|source| StateError::Parse { path, source })
    }

    /// Writes `<dir>/mesh.json` atomically (temp file + rename), so a reader
    /// never sees half a file.
    pub fn write(&self, dir: &Path) -> Result<(), StateError> {
        let path = Self::path(dir);
        let tmp = dir.join(format!(".{STATE_FILE}.tmp"));
        let io = |source| StateError::Io {
            path: path.clone(),
            source,
        };
        let text = serde_json::to_string_pretty(self).map_err(|source| StateError::Parse {
            path: path.clone(),
            source,
        })?;
        std::fs::write(&tmp, text + "\n").map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }

    /// Removes `<dir>/mesh.json` (no error if already gone).
    pub fn remove(dir: &Path) -> Result<(), StateError> {
        let path = Self::path(dir);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Io { path, source }),
        }
    }

    /// Every recorded process, in the order they must be stopped: agents
    /// (so they can still publish their leave record), devclusters, NATS.
    pub fn processes_in_stop_order(&self) -> Vec<(String, ProcRecord)> {
        let agents = self.clusters.iter().filter_map(|c| {
            c.agent
                .as_ref()
                .map(|a| (format!("{}/agent", c.name), a.process.clone()))
        });
        let devclusters = self.clusters.iter().filter_map(|c| {
            c.devcluster
                .as_ref()
                .map(|d| (format!("{}/devcluster", c.name), d.process.clone()))
        });
        let nats = self
            .nats
            .iter()
            .map(|n| ("nats-server".to_string(), n.process.clone()));
        agents.chain(devclusters).chain(nats).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(pid: u32) -> ProcRecord {
        ProcRecord {
            pid,
            start_ticks: 1000 + u64::from(pid),
            log: PathBuf::from(format!("/m/{pid}.log")),
        }
    }

    fn sample() -> MeshState {
        MeshState {
            version: VERSION,
            supervisor: Some(rec(1)),
            nats: Some(NatsRecord {
                process: rec(2),
                port: 4222,
                url: "nats://127.0.0.1:4222".into(),
                store_dir: "/m/nats".into(),
            }),
            clusters: vec![
                ClusterRecord {
                    name: "a".into(),
                    kubeconfig: "/m/a/kubeconfig".into(),
                    data_dir: "/m/a/data".into(),
                    devcluster: Some(DevclusterRecord {
                        process: rec(3),
                        url: "http://127.0.0.1:1".into(),
                    }),
                    agent: Some(AgentRecord {
                        process: rec(4),
                        metrics_addr: "127.0.0.1:2".into(),
                    }),
                    devcluster_args: Vec::new(),
                    agent_args: Vec::new(),
                    stopped: false,
                },
                ClusterRecord {
                    name: "b".into(),
                    kubeconfig: "/m/b/kubeconfig".into(),
                    data_dir: "/m/b/data".into(),
                    devcluster: Some(DevclusterRecord {
                        process: rec(5),
                        url: String::new(),
                    }),
                    agent: None,
                    devcluster_args: Vec::new(),
                    agent_args: Vec::new(),
                    stopped: false,
                },
            ],
            security: Some(MeshSecurity {
                ca: "/m/ca.pem".into(),
                admin_creds: "/m/admin.creds".into(),
            }),
        }
    }

    #[test]
    fn round_trips_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let state = sample();
        state.write(dir.path()).unwrap();
        assert_eq!(MeshState::read(dir.path()).unwrap(), state);
        MeshState::remove(dir.path()).unwrap();
        assert!(matches!(
            MeshState::read(dir.path()),
            Err(StateError::Missing(_))
        ));
        MeshState::remove(dir.path()).unwrap();
    }

    #[test]
    fn garbage_is_a_parse_error() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(MeshState::path(dir.path()), "{not json").unwrap();
        assert!(matches!(
            MeshState::read(dir.path()),
            Err(StateError::Parse { .. })
        ));
    }

    #[test]
    fn stop_order_is_agents_then_devclusters_then_nats() {
        let order: Vec<_> = sample()
            .processes_in_stop_order()
            .into_iter()
            .map(|(n, p)| (n, p.pid))
            .collect();
        assert_eq!(
            order,
            vec![
                ("a/agent".to_string(), 4),
                ("a/devcluster".to_string(), 3),
                ("b/devcluster".to_string(), 5),
                ("nats-server".to_string(), 2)
            ]
        );
    }
}
