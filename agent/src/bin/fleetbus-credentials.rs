//! `fleetbus-credentials`: the exec credential plugin a kubeconfig built
//! from a fleetbus ClusterProfile calls (client-go passes the
//! `ExecCredential` in `KUBERNETES_EXEC_INFO`; the answer goes to stdout).

use std::process::ExitCode;

fn main() -> ExitCode {
    let Ok(info) = std::env::var(fleetbus_agent::credentials::EXEC_INFO) else {
        eprintln!(
            "error: {}",
            fleetbus_agent::report(&fleetbus_agent::credentials::CredentialsError::Input(None))
        );
        return ExitCode::FAILURE;
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(fleetbus_agent::credentials::exec(&info)) {
        Ok(credential) => {
            println!("{credential}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", fleetbus_agent::report(&e));
            ExitCode::FAILURE
        }
    }
}
