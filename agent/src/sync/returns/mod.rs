//! Status return: the sink publishes the status and readiness of its copies
//! ([`report`], readiness read by [`readiness`], pure), and the origin turns
//! the reports about its objects into the source's status, `ReportedState`
//! objects and readiness summaries ([`returned`], [`per_cluster`]), keeping
//! its book between passes ([`state`]). The reports arrive through the
//! status consumer (`inputs::watches`).

mod per_cluster;
pub(super) mod readiness;
mod report;
mod returned;
pub(super) mod state;
