//! hub's integration tests (the real `fleetbus` binary and the processes it drives), in one test binary: one link of the
//! dependency graph instead of one per file. Every test still runs in its own
//! process under nextest.

mod completion;
mod drift_cli;
mod mesh;
mod notify;
