//! Command-line interface of `fleetbus` (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// The fleetbus operator CLI.
#[derive(Debug, Parser)]
#[command(name = "fleetbus", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a local mesh: one nats-server, N devclusters and one agent per cluster.
    #[command(subcommand)]
    Mesh(MeshCommand),
}

#[derive(Debug, Subcommand)]
pub enum MeshCommand {
    /// Start a local mesh (in the foreground unless --detach; Ctrl-C stops it).
    Up(UpArgs),
    /// Stop a mesh started with --detach (or running in another terminal).
    Down(DirArgs),
    /// Show each component of the mesh: pid, alive, URL, agent readiness.
    Status(DirArgs),
}

/// Where the mesh keeps its state, data and logs.
#[derive(Debug, Args)]
pub struct DirArgs {
    /// Mesh directory: mesh.json, nats store, per-cluster data, kubeconfigs and logs.
    #[arg(long, env = "FLEETBUS_MESH_DIR", default_value = ".fleetbus-mesh")]
    pub dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    #[command(flatten)]
    pub dir: DirArgs,

    /// Number of clusters (default 3, or the number of --names).
    #[arg(long, env = "FLEETBUS_MESH_CLUSTERS", value_parser = clap::value_parser!(u32).range(1..=26))]
    pub clusters: Option<u32>,

    /// Cluster names, comma-separated DNS-1123 labels (default a,b,c,...).
    #[arg(long, env = "FLEETBUS_MESH_NAMES", value_delimiter = ',')]
    pub names: Option<Vec<String>>,

    /// Start everything, print the tour and return, leaving the mesh running.
    #[arg(long, env = "FLEETBUS_MESH_DETACH")]
    pub detach: bool,

    /// NATS client port (0 picks a free one).
    #[arg(long, env = "FLEETBUS_MESH_NATS_PORT", default_value_t = 0)]
    pub nats_port: u16,

    /// Nodes each devcluster reports.
    #[arg(long, env = "FLEETBUS_MESH_NODES", default_value_t = 3)]
    pub nodes: u32,

    /// Seconds to wait for each component to become ready.
    #[arg(long, env = "FLEETBUS_MESH_READY_TIMEOUT", default_value_t = 90)]
    pub ready_timeout: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("fleetbus").chain(args.iter().copied()))
    }

    #[test]
    fn up_parses_names_and_flags() {
        let cli = parse(&[
            "mesh",
            "up",
            "--clusters",
            "3",
            "--names",
            "a,b,c",
            "--dir",
            "/tmp/m",
            "--detach",
        ])
        .unwrap();
        let Command::Mesh(MeshCommand::Up(up)) = cli.command else {
            panic!("not up")
        };
        assert_eq!(up.clusters, Some(3));
        assert_eq!(up.names.unwrap(), vec!["a", "b", "c"]);
        assert_eq!(up.dir.dir, PathBuf::from("/tmp/m"));
        assert!(up.detach);
        assert_eq!((up.nats_port, up.nodes), (0, 3));
    }

    #[test]
    fn dir_defaults_to_dot_fleetbus_mesh() {
        let cli = parse(&["mesh", "status"]).unwrap();
        let Command::Mesh(MeshCommand::Status(d)) = cli.command else {
            panic!("not status")
        };
        assert_eq!(d.dir, PathBuf::from(".fleetbus-mesh"));
    }

    #[test]
    fn bad_args_are_usage_errors() {
        for bad in [
            &["mesh", "up", "--clusters", "0"][..],
            &["mesh", "up", "--clusters", "many"],
            &["mesh", "up", "--bogus"],
            &["mesh", "sideways"],
            &["mesh"],
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(err.exit_code(), 2, "{bad:?}: {err}");
        }
    }
}
