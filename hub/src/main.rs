//! `fleetbus`: parse flags, run the command, map the outcome to an exit code.

use std::process::ExitCode;

use clap::{CommandFactory, Parser};
use fleetbus_hub::cli::{Cli, Command, FleetCommand, MeshCommand};
use fleetbus_hub::cluster_names;
use fleetbus_hub::mesh::{self, UpOutcome, UpPlan};
use fleetbus_hub::{clusters, dashboard, drift, membership, notify, rules, status};

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
        Command::Notify(args) => {
            return runtime
                .block_on(notify::run(args))
                .map(|()| ExitCode::SUCCESS)
                .unwrap_or_else(|e| fail(&e.into()));
        }
        Command::Status(args) => return runtime.block_on(status::run(args)),
        Command::Rules(cmd) => {
            return runtime
                .block_on(rules::run(cmd))
                .unwrap_or_else(|e| fail(&e.into()));
        }
        Command::Fleet(FleetCommand::Init(args)) => {
            return membership::init(&args).unwrap_or_else(|e| fail(&e.into()));
        }
        Command::Join(args) => {
            return membership::join(&args).unwrap_or_else(|e| fail(&e.into()));
        }
        Command::Leave(args) => {
            return runtime
                .block_on(membership::leave(&args))
                .unwrap_or_else(|e| fail(&e.into()));
        }
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
        MeshCommand::Init(args) => {
            let names = match cluster_names(args.members.clusters, args.members.names.as_deref()) {
                Ok(names) => names,
                Err(e) => usage_error("init", e),
            };
            mesh::init(&args.dir.dir, &names, &args.nats_host)
                .map(|done| {
                    done.print();
                    ExitCode::SUCCESS
                })
                .map_err(Into::into)
        }
        MeshCommand::Down(args) => mesh::down(&args.dir)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
        MeshCommand::Stop(a) => mesh::stop(&a.dir.dir, &a.cluster)
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
        MeshCommand::Start(a) => runtime
            .block_on(mesh::start(&a.dir.dir, &a.cluster))
            .map(|()| ExitCode::SUCCESS)
            .map_err(Into::into),
        MeshCommand::Status(args) => runtime
            .block_on(mesh::status(&args.dir))
            // Exit 1 when a component is not healthy.
            .map(|healthy| ExitCode::from(u8::from(!healthy)))
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
