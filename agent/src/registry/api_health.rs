//! The API probe's loop: `GET /readyz` every second (at once when a watch broke), recorded in the registry.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::error::RegistryError;
use super::shared::Registry;
use crate::kube::api_probe::{probe, PROBE_TIMEOUT};

/// How often the API server is probed.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// Probes until `cancel`, publishing every change of the API's health.
#[tracing::instrument(name = "api_probe", skip_all, fields(cluster = %reg.ctx.cfg.cluster_name))]
pub async fn run(reg: Arc<Registry>, cancel: CancellationToken) -> Result<(), RegistryError> {
    let mut tick = tokio::time::interval(PROBE_INTERVAL);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            _ = tick.tick() => {}
            _ = reg.probe_now.notified() => tick.reset(),
        }
        let health = tokio::select! {
            _ = cancel.cancelled() => return Ok(()),
            h = probe(&reg.ctx.client, PROBE_TIMEOUT) => h,
        };
        reg.set_api_health(health);
    }
}
