//! `fleetbus`: parse flags, run the command, map the outcome to an exit code.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use fleetbus_hub::cli::{
    Cli, Command, FleetCommand, FleetInitArgs, JoinArgs, LeaveArgs, MeshCommand,
};
use fleetbus_hub::mesh::{self, UpOutcome, UpPlan};
use fleetbus_hub::trust::{self, InitOutcome};
use fleetbus_hub::{clusters, dashboard, drift, rules, status};

fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return fail(&anyhow::Error::new(e).context("cannot start the async runtime")),
    };
    let cmd = match cli.command {
        Command::Mesh(cmd) => cmd,
        Command::Drift(cmd) => {
            return runtime
                .block_on(drift::run(cmd))
                .unwrap_or_else(|e| fail(&e.into()));
        }
        Command::Clusters(cmd) => {
            return runtime
                .block_on(clusters::run(cmd))
                .unwrap_or_else(|e| fail(&e.into()));
        }
        Command::Dashboard(args) => {
            return runtime
                .block_on(dashboard::run(args))
                .unwrap_or_else(|e| fail(&e.into()));
        }
        Command::Status(args) => return runtime.block_on(status::run(args)),
        Command::Rules(cmd) => {
            return runtime
                .block_on(rules::run(cmd))
                .unwrap_or_else(|e| fail(&e.into()));
        }
        Command::Fleet(FleetCommand::Init(args)) => return fleet_init(&args),
        Command::Join(args) => return join(&args),
        Command::Leave(args) => return leave(&args, &runtime),
        Command::Completion(args) => {
            clap_complete::generate(
                args.shell,
                &mut Cli::command(),
                "fleetbus",
                &mut std::io::stdout(),
            );
            return ExitCode::SUCCESS;
        }
    };
    let result: anyhow::Result<ExitCode> = match cmd {
        MeshCommand::Up(args) => {
            let plan = match UpPlan::from_args(&args) {
                Ok(plan) => plan,
                // Invalid names are usage errors: clap's format and exit code 2.
                Err(e) => usage_error("up", e),
            };
            runtime
                .block_on(mesh::up(&plan))
                .map_err(Into::into)
                .map(|outcome| match outcome {
                    UpOutcome::Detached | UpOutcome::Stopped => ExitCode::SUCCESS,
                    UpOutcome::ComponentExited(_) => ExitCode::FAILURE,
                })
        }
        MeshCommand::Down(args) => mesh::down(&args.dir)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
        MeshCommand::Status(args) => runtime
            .block_on(mesh::status(&args.dir))
            .map(|healthy| {
                if healthy {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            })
            .map_err(Into::into),
    };
    result.unwrap_or_else(|e| {
        if matches!(e.downcast_ref(), Some(mesh::MeshError::Interrupted)) {
            eprintln!("fleetbus: {e}");
            return ExitCode::from(130);
        }
        fail(&e)
    })
}

fn fleet_init(args: &FleetInitArgs) -> ExitCode {
    let dir = &args.dir.dir;
    let limits = trust::JsLimits {
        disk_storage: args.js_max_disk,
        mem_storage: args.js_max_mem,
        streams: args.js_max_streams,
        consumers: args.js_max_consumers,
    };
    match trust::init(dir, &args.name, &args.subject_prefix, &limits, args.force) {
        Ok(InitOutcome::Created(info)) => {
            println!(
                "created fleet {:?} in {}\n  operator {}\n  account  {}\n  admin credentials {}\n  \
                 nats-server include {}\n  fleet root public key {}",
                info.name,
                dir.display(),
                info.operator,
                info.account,
                dir.join(trust::files::ADMIN_CREDS).display(),
                dir.join(trust::files::SERVER_CONF).display(),
                dir.join(trust::files::ROOT_PUB).display(),
            );
            ExitCode::SUCCESS
        }
        Ok(InitOutcome::AlreadyInitialised(info)) => {
            println!(
                "{} already holds fleet {:?} (operator {}): nothing changed",
                dir.display(),
                info.name,
                info.operator
            );
            ExitCode::SUCCESS
        }
        Err(e) => fail(&e.into()),
    }
}

fn join(args: &JoinArgs) -> ExitCode {
    let dir = &args.dir.dir;
    let ca_path = args.ca.clone().or_else(|| {
        let p = dir.join("ca.pem");
        p.exists().then_some(p)
    });
    let ca = match ca_path.as_ref().map(std::fs::read_to_string).transpose() {
        Ok(ca) => ca,
        Err(e) => {
            let path = ca_path.unwrap_or_default();
            return fail(&anyhow::Error::new(e).context(format!("--ca {}", path.display())));
        }
    };
    match trust::join(dir, &args.name, args.rotate) {
        Ok(joined) => {
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
            // The new creds are printed either way: they are issued.
            if reloaded {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => fail(&e.into()),
    }
}

/// `leave`'s root-signed revocation of `name`'s certificates, put in the
/// registry (PROTOCOL §5.5): secure agents refuse everything signed with
/// them from then on, even if the broker still lets the cluster publish.
fn put_revocation(
    dir: &std::path::Path,
    bus: &fleetbus_hub::cli::BusArgs,
    name: &str,
    runtime: &tokio::runtime::Runtime,
) -> bool {
    let bytes = match trust::identity::revocation(dir, name) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return true,
        Err(e) => {
            eprintln!("fleetbus: error: revoking {name}'s certificates: {e}");
            return false;
        }
    };
    match runtime.block_on(clusters::put_revoked(bus, name, bytes)) {
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

fn leave(args: &LeaveArgs, runtime: &tokio::runtime::Runtime) -> ExitCode {
    let dir = &args.dir.dir;
    let left = match trust::leave(dir, &args.name) {
        Ok(left) => left,
        Err(e) => return fail(&e.into()),
    };
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
        return ExitCode::FAILURE;
    };
    let prefix = match fleetbus_schemas::subject::Prefix::new(left.info.subject_prefix.clone()) {
        Ok(p) => p,
        Err(e) => return fail(&anyhow::Error::new(e).context("fleet.json's subject prefix")),
    };
    let ca = dir.join(mesh::secure::CA_FILE);
    let bus = fleetbus_hub::cli::BusArgs {
        nats_url: url,
        creds: Some(dir.join(trust::files::ADMIN_CREDS)),
        ca: ca.exists().then_some(ca),
        mesh_dir: dir.clone(),
        subject_prefix: prefix,
    };
    let signer = match trust::identity::record_signer(dir, &left.name) {
        Ok(s) => s,
        Err(e) => return fail(&anyhow::Error::new(e).context("the cluster's keys")),
    };
    match runtime.block_on(clusters::mark_left(&bus, &left.name, signer.as_ref())) {
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
    ok &= put_revocation(dir, &bus, &left.name, runtime);
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// A revocation takes effect when nats-server reloads the fleet's include:
/// done here for a running secure mesh in `dir`, said otherwise. False when
/// the mesh's reload failed (the revocation is written but not in force).
fn reload_or_tell(dir: &std::path::Path) -> bool {
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

/// Exits like clap does for bad arguments (exit code 2, usage of `fleetbus mesh <sub>`).
fn usage_error(sub: &str, e: impl std::fmt::Display) -> ! {
    let mut cmd = Cli::command();
    cmd.build();
    let sub_cmd = cmd
        .find_subcommand_mut("mesh")
        .and_then(|m| m.find_subcommand_mut(sub))
        .cloned();
    sub_cmd
        .unwrap_or(cmd)
        .error(clap::error::ErrorKind::ValueValidation, e)
        .exit()
}

fn fail(e: &anyhow::Error) -> ExitCode {
    eprintln!("fleetbus: error: {e:#}");
    ExitCode::FAILURE
}
