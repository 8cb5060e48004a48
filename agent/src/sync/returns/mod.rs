//! Status return: the sink publishes the status and health of its copies
//! ([`report`], health judged by `sync::health`, pure), and the origin turns
//! the reports about its objects into the source's status, `ReportedState`
//! objects and readiness summaries ([`returned`], [`per_cluster`]; the
//! source object a report is about: [`source`]), keeping its book between
//! passes ([`state`]). The reports arrive through the
//! status consumer (`inputs::watches`).

mod per_cluster;
pub(super) mod report;
pub(super) mod returned;
pub(super) mod source;
pub(super) mod state;
