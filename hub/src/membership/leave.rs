//! `fleetbus leave NAME --dir D`: revoke a cluster's credentials and
//! certificates, and mark it Left in the registry.

use std::path::Path;
use std::process::ExitCode;

use fleetbus_schemas::subject::Prefix;

use super::reload::reload_or_tell;
use super::MembershipError;
use crate::cli::{BusArgs, LeaveArgs};
use crate::{clusters, mesh, trust};

/// Revokes every NATS user key `args.name` was issued (in force once
/// nats-server reloads), then, on the fleet's NATS, marks its records Left
/// and puts the revocation of its certificates. The revocation on disk and
/// the reload are synchronous and come first: nothing else runs on the CLI's
/// runtime meanwhile. Exit code 1 when a later step failed (each is said on
/// stderr) or no NATS was given or running.
pub async fn leave(args: &LeaveArgs) -> Result<ExitCode, MembershipError> {
    let dir = &args.dir.dir;
    let left = trust::leave(dir, &args.name)?;
    let mut ok = true;
    if left.newly_revoked.is_empty() {
        println!(
            "{} had left already: its {} key(s) are revoked in {}",
            left.name,
            left.keys.len(),
            left.server_conf.display()
        );
    } else {
        println!(
            "{} left: revoked {} in {}",
            left.name,
            left.newly_revoked.join(", "),
            left.server_conf.display()
        );
        ok = reload_or_tell(dir);
    }
    // The registry half, after the revocation: a live agent could otherwise
    // put its record back as Active.
    let Some(url) = args
        .nats_url
        .clone()
        .or_else(|| mesh::secure::running_url(dir))
    else {
        eprintln!(
            "fleetbus: no --nats-url and no mesh running in {}: {}'s registry records were not \
             marked Left; run `fleetbus leave` again with --nats-url",
            dir.display(),
            left.name
        );
        return Ok(ExitCode::FAILURE);
    };
    let prefix =
        Prefix::new(left.info.subject_prefix.clone()).map_err(MembershipError::SubjectPrefix)?;
    let ca = dir.join(mesh::secure::CA_FILE);
    let bus = BusArgs {
        nats_url: url,
        creds: Some(dir.join(trust::files::ADMIN_CREDS)),
        ca: ca.exists().then_some(ca),
        mesh_dir: dir.clone(),
        subject_prefix: prefix,
    };
    let signer =
        trust::identity::record_signer(dir, &left.name).map_err(MembershipError::ClusterKeys)?;
    match clusters::mark_left(&bus, &left.name, signer.as_ref()).await {
        Ok(0) => println!("no Active record of {} in the registry", left.name),
        Ok(n) => println!(
            "marked {} Left in the registry ({n} record(s)): its copies follow their rules' orphanPolicy",
            left.name
        ),
        Err(e) => {
            eprintln!("fleetbus: error: marking {} Left in the registry: {e:#}", left.name);
            ok = false;
        }
    }
    ok &= put_revocation(dir, &bus, &left.name).await;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `leave`'s root-signed revocation of `name`'s certificates, put in the
/// registry (PROTOCOL §5.5): secure agents refuse everything signed with
/// them from then on, even if the broker still lets the cluster publish.
/// False when it could not be made or put (said on stderr).
async fn put_revocation(dir: &Path, bus: &BusArgs, name: &str) -> bool {
    let bytes = match trust::identity::revocation(dir, name) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return true,
        Err(e) => {
            eprintln!("fleetbus: error: revoking {name}'s certificates: {e}");
            return false;
        }
    };
    match clusters::put_revoked(bus, name, bytes).await {
        Ok(true) => {
            println!(
                "revoked {name}'s certificates in the registry (signed by the fleet root): \
                 agents refuse what they sign"
            );
            true
        }
        Ok(false) => {
            println!(
                "no registry yet: {name}'s certificate revocation was not put (run `fleetbus \
                 leave {name}` again once agents run)"
            );
            true
        }
        Err(e) => {
            eprintln!("fleetbus: error: putting {name}'s revocation in the registry: {e:#}");
            false
        }
    }
}
