//! `fleetbus fleet init --dir D`: a new fleet, or the one already there.

use std::process::ExitCode;

use super::MembershipError;
use crate::cli::FleetInitArgs;
use crate::trust::{self, InitOutcome};

/// Creates the fleet `args` describes (or finds it already there) and prints
/// where its files are.
pub fn init(args: &FleetInitArgs) -> Result<ExitCode, MembershipError> {
    let dir = &args.dir.dir;
    let limits = trust::JsLimits {
        disk_storage: args.js_max_disk,
        mem_storage: args.js_max_mem,
        streams: args.js_max_streams,
        consumers: args.js_max_consumers,
    };
    match trust::init(dir, &args.name, &args.subject_prefix, &limits, args.force)? {
        InitOutcome::Created(info) => {
            println!(
                "created fleet {:?} in {}\n  operator {}\n  streams account {}\n  members account {}\n  admin credentials {}\n  \
                 nats-server include {}\n  fleet root public key {}\n  notify bridge credentials {}",
                info.name,
                dir.display(),
                info.operator,
                info.account,
                info.members_account.as_deref().unwrap_or_default(),
                dir.join(trust::files::ADMIN_CREDS).display(),
                dir.join(trust::files::SERVER_CONF).display(),
                dir.join(trust::files::ROOT_PUB).display(),
                dir.join(trust::files::NOTIFY_CREDS).display(),
            );
        }
        InitOutcome::Split(info) => {
            println!(
                "{} held fleet {:?} (operator {}) from before its members account: added it \
                 ({}); new admin credentials {} and notify bridge credentials {}; each cluster's \
                 next `fleetbus join` issues it new credentials and revokes its old ones (reload \
                 nats-server with {} after handing them out)",
                dir.display(),
                info.name,
                info.operator,
                info.members_account.as_deref().unwrap_or_default(),
                dir.join(trust::files::ADMIN_CREDS).display(),
                dir.join(trust::files::NOTIFY_CREDS).display(),
                dir.join(trust::files::SERVER_CONF).display(),
            );
        }
        InitOutcome::AlreadyInitialised(info, true) => {
            println!(
                "{} already holds fleet {:?} (operator {}): added the notify bridge's credentials {}",
                dir.display(),
                info.name,
                info.operator,
                dir.join(trust::files::NOTIFY_CREDS).display()
            );
        }
        InitOutcome::AlreadyInitialised(info, false) => {
            println!(
                "{} already holds fleet {:?} (operator {}): nothing changed",
                dir.display(),
                info.name,
                info.operator
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
