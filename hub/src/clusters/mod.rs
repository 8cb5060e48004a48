//! `fleetbus clusters label|ls|progress|forget`: the fleet's clusters. `label` asks one cluster's
//! agent to relabel its Local Cluster object (PROTOCOL §6.4); `ls` reads the registry
//! bucket; `progress` asks agents how far their sync is (PROTOCOL §6.5).

mod error;
mod forget;
pub(crate) mod label;
mod ls;
pub(crate) mod progress;
pub(crate) mod render;
mod taint;

use std::process::ExitCode;

use crate::cli::ClustersCommand;

pub use error::ClustersError;
pub use forget::{forget, mark_left, put_revoked};
pub use label::{label, parse_label_args};
pub use ls::{describe, ls};
pub use progress::progress;

/// Runs one clusters command.
pub async fn run(cmd: ClustersCommand) -> Result<ExitCode, ClustersError> {
    let stdout = std::io::stdout();
    let tty = std::io::IsTerminal::is_terminal(&stdout);
    let mut out = stdout.lock();
    match cmd {
        ClustersCommand::Label(args) => label(&args, &mut out).await?,
        ClustersCommand::Ls(args) => ls(&args, &mut out).await?,
        ClustersCommand::Describe(args) => return describe(&args, &mut out).await,
        ClustersCommand::Progress(args) => return progress(&args, tty, &mut out).await,
        ClustersCommand::Forget(args) => return forget(&args, &mut out).await,
        ClustersCommand::Taint(args) => {
            let change = taint::Change::of(&args.taint, args.remove);
            return taint::taint(&args.bus, &args.cluster, change, &mut out).await;
        }
        ClustersCommand::Cordon(args) => {
            return taint::taint(
                &args.bus,
                &args.cluster,
                taint::Change::cordon(true),
                &mut out,
            )
            .await
        }
        ClustersCommand::Uncordon(args) => {
            return taint::taint(
                &args.bus,
                &args.cluster,
                taint::Change::cordon(false),
                &mut out,
            )
            .await
        }
    }
    Ok(ExitCode::SUCCESS)
}
