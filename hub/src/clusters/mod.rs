//! `fleetbus clusters label|ls`: the fleet's clusters. `label` asks one cluster's agent to
//! relabel its Local Cluster object (PROTOCOL §6.4); `ls` reads the registry bucket.

mod error;
mod label;
mod ls;

use std::process::ExitCode;

use crate::cli::ClustersCommand;

pub use error::ClustersError;
pub use label::{label, parse_label_args};
pub use ls::ls;

/// Runs one clusters command.
pub async fn run(cmd: ClustersCommand) -> Result<ExitCode, ClustersError> {
    let mut out = std::io::stdout().lock();
    match cmd {
        ClustersCommand::Label(args) => label(&args, &mut out).await?,
        ClustersCommand::Ls(args) => ls(&args, &mut out).await?,
    }
    Ok(ExitCode::SUCCESS)
}
