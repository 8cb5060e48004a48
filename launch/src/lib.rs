//! How fleetbus processes are started, shared by the `fleetbus` CLI (`mesh
//! up`), the test harness and the bench: [`AgentCommand`] builds the agent's
//! command line from typed values, [`Binaries`] and [`nats_server`] find the
//! programs to run. No process is started here.

mod agent_command;
mod locate;

pub use agent_command::AgentCommand;
pub use locate::{nats_server, Binaries, LocateError, NATS_INSTALL_HINT, NATS_VENV_PATH};
