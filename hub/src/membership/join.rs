//! `fleetbus join NAME --dir D`: a cluster's credentials, keys and
//! certificate, printed as the operator asked.

use std::process::ExitCode;

use super::reload::reload_or_tell;
use super::MembershipError;
use crate::cli::JoinArgs;
use crate::trust;

/// Issues (or finds) `args.name`'s credentials and prints them as `-o` says;
/// a `--rotate` that revoked earlier ones has the mesh's nats-server reload.
/// Exit code 1 when that reload failed: the new credentials are printed
/// anyway, they are issued.
pub fn join(args: &JoinArgs) -> Result<ExitCode, MembershipError> {
    let dir = &args.dir.dir;
    let ca_path = args.ca.clone().or_else(|| {
        let p = dir.join("ca.pem");
        p.exists().then_some(p)
    });
    let ca = match &ca_path {
        Some(path) => {
            Some(
                std::fs::read_to_string(path).map_err(|source| MembershipError::ReadCa {
                    path: path.clone(),
                    source,
                })?,
            )
        }
        None => None,
    };
    let joined = trust::join(dir, &args.name, args.rotate)?;
    let what = if joined.issued { "issued" } else { "kept" };
    eprintln!(
        "fleetbus: {what} credentials for {} ({})",
        args.name,
        joined.path.display()
    );
    let mut reloaded = true;
    if !joined.revoked.is_empty() {
        eprintln!(
            "fleetbus: revoked {}'s earlier credentials ({})",
            args.name,
            joined.revoked.join(", ")
        );
        reloaded = reload_or_tell(dir);
    }
    if joined.moved {
        eprintln!(
            "fleetbus: {}'s credentials were from before the fleet's members account: issued \
             in it now; hand them to its agent",
            args.name
        );
    }
    if joined.old_creds_stopped {
        eprintln!(
            "fleetbus: every cluster has moved to the members account: credentials from before \
             it stop working when nats-server reloads"
        );
        reloaded = reload_or_tell(dir) && reloaded;
    }
    print!(
        "{}",
        trust::render(
            &joined,
            args.output,
            &args.namespace,
            args.nats_url.as_deref(),
            ca.as_deref()
        )
    );
    Ok(if reloaded {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
