//! Every end-to-end test in one binary: real nats-server, devclusters and agent
//! processes. One module per area (`sync`, `placement`, `fleet_trust`, ...);
//! nextest names a test `<module>::<test>` and runs each in its own process, so
//! the tests stay as independent as when each file was its own binary, and the
//! workspace links one test binary instead of one per file (CI time).

mod common;

mod api_pressure;
mod bundles;
mod cli_views;
mod command_rate;
mod dashboard;
mod deploy_compose;
mod deploy_helm;
mod deploy_nats;
mod drift;
mod drift_storms;
mod faults;
mod fleet_sealing;
mod fleet_signed;
mod fleet_trust;
mod hub_spoke;
mod jetstream_layout;
mod nats_tls;
mod placement;
mod registry;
mod rule_depends;
mod rule_preview;
mod rule_rollout;
mod rule_suspend;
mod rule_values;
mod services;
mod status_return;
mod sync;
mod sync_burst;
mod sync_conflicts;
mod sync_faults;
mod sync_hostile;
mod sync_integrity;
mod sync_kinds;
mod sync_membership;
mod sync_names;
mod sync_ownership;
mod sync_policy;
mod sync_progress;
mod sync_stamps;
