//! `fleetbus mesh init`: what a secure mesh runs with, written without
//! starting it, for a mesh whose processes run elsewhere (docker-compose).

use std::path::{Path, PathBuf};

use super::{secure, MeshError};
use crate::trust::files;

/// What `init` wrote, for the operator and the processes that read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Initialised {
    /// nats-server's configuration (`-c`).
    pub nats_conf: PathBuf,
    /// The CA clients verify nats-server with.
    pub ca: PathBuf,
    /// The admin's credentials.
    pub admin_creds: PathBuf,
    /// Each cluster: name, credentials, key, certificate.
    pub clusters: Vec<ClusterFiles>,
}

/// One cluster's files, as its agent's flags name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterFiles {
    pub name: String,
    /// `--nats-creds`.
    pub creds: PathBuf,
    /// `--cluster-key`.
    pub key: PathBuf,
    /// `--cluster-cert`.
    pub cert: PathBuf,
}

/// Writes into `dir` the fleet, the NATS CA and server certificate (for
/// 127.0.0.1, localhost and `nats_hosts`), the nats-server configuration and
/// every cluster's credentials, key and certificate: what `mesh up` writes
/// before it starts anything. Nothing already there is minted again.
pub fn init(dir: &Path, names: &[String], nats_hosts: &[String]) -> Result<Initialised, MeshError> {
    files::create_dir(dir)?;
    let (nats_conf, security) = secure::prepare(dir, nats_hosts)?;
    let mut clusters = Vec::with_capacity(names.len());
    for name in names {
        let creds = secure::cluster_creds(dir, name)?;
        let cluster = dir.join(files::CLUSTERS).join(name);
        clusters.push(ClusterFiles {
            name: name.clone(),
            creds,
            key: cluster.join(files::CLUSTER_KEY),
            cert: cluster.join(files::CLUSTER_CERT),
        });
    }
    Ok(Initialised {
        nats_conf,
        ca: security.ca,
        admin_creds: security.admin_creds,
        clusters,
    })
}

impl Initialised {
    /// What `mesh init` wrote: one line per file a process of the mesh reads.
    pub fn print(&self) {
        println!("nats-server -c {}", self.nats_conf.display());
        println!("nats CA     {}", self.ca.display());
        println!("admin creds {}", self.admin_creds.display());
        for c in &self.clusters {
            println!(
                "{}: --nats-creds {} --cluster-key {} --cluster-cert {}",
                c.name,
                c.creds.display(),
                c.key.display(),
                c.cert.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn writes_every_file_an_agent_and_nats_server_read_and_keeps_them() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("m");
        let got = init(&dir, &names(&["a", "b"]), &names(&["nats"])).unwrap();
        for f in [&got.nats_conf, &got.ca, &got.admin_creds] {
            assert!(f.is_file(), "{}", f.display());
        }
        assert_eq!(got.clusters.len(), 2);
        for c in &got.clusters {
            for f in [&c.creds, &c.key, &c.cert] {
                assert!(f.is_file(), "{}", f.display());
            }
        }
        let conf = std::fs::read_to_string(&got.nats_conf).unwrap();
        assert!(conf.contains(&dir.display().to_string()), "{conf}");
        // Again: the same files, nothing minted anew.
        let read = |g: &Initialised| {
            [
                &g.ca,
                &g.admin_creds,
                &g.clusters[0].creds,
                &g.clusters[1].cert,
            ]
            .map(|p| std::fs::read(p).unwrap())
        };
        let before = read(&got);
        let again = init(&dir, &names(&["a", "b"]), &names(&["nats"])).unwrap();
        assert_eq!(again, got);
        assert_eq!(read(&again), before);
        // A host the certificate lacks: a new CA; the credentials stay.
        let more = init(&dir, &names(&["a", "b"]), &names(&["nats", "nats.example"])).unwrap();
        let after = read(&more);
        assert_ne!(after[0], before[0], "a new CA");
        assert_eq!(after[1..], before[1..]);
    }
}
