//! chaos's integration tests (the chaos scenarios against real processes), in one test binary: one link of the
//! dependency graph instead of one per file. Every test still runs in its own
//! process under nextest.

mod api_outage;
mod short;
mod workload;
