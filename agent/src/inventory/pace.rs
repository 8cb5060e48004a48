//! When a profile's status is written (pure): only on change, and at most
//! once per [`MIN_INTERVAL`] per profile unless a condition changed
//! (KEP-4322: under 1/30 QPS per profile; with 1,000 members a periodic
//! refresh would be 33 writes a second on every cluster).

use std::time::Duration;

use fleetbus_schemas::multicluster::ClusterProfileStatus;
use tokio::time::Instant;

/// The least time between two status writes of one profile that change no
/// condition.
pub const MIN_INTERVAL: Duration = Duration::from_secs(30);

/// What to do with one profile's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// It already says this.
    Skip,
    /// Write it now.
    Write,
    /// Write it then (a change within [`MIN_INTERVAL`] of the last write).
    WriteAt(Instant),
}

/// Whether `next` is written over `current`, given the last status write
/// of this profile.
pub fn decide(
    current: Option<&ClusterProfileStatus>,
    next: &ClusterProfileStatus,
    last_write: Option<Instant>,
    now: Instant,
) -> Step {
    let Some(current) = current else {
        return Step::Write;
    };
    if current == next {
        return Step::Skip;
    }
    let conditions = |s: &ClusterProfileStatus| {
        let mut c: Vec<_> = s
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect();
        c.sort();
        c
    };
    if conditions(current) != conditions(next) {
        return Step::Write;
    }
    match last_write.map(|at| at + MIN_INTERVAL) {
        Some(due) if due > now => Step::WriteAt(due),
        _ => Step::Write,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    fn status(health: &str, version: &str) -> ClusterProfileStatus {
        let t = Time(k8s_openapi::jiff::Timestamp::from_second(0).unwrap());
        ClusterProfileStatus {
            conditions: vec![Condition {
                type_: "ControlPlaneHealthy".into(),
                status: health.into(),
                reason: "R".into(),
                message: String::new(),
                last_transition_time: t,
                observed_generation: None,
            }],
            version: Some(fleetbus_schemas::multicluster::Version {
                kubernetes: Some(version.into()),
            }),
            ..ClusterProfileStatus::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn only_changes_are_written_and_not_more_than_twice_a_minute() {
        let now = Instant::now();
        let a = status("True", "v1.33.0");
        assert_eq!(decide(None, &a, None, now), Step::Write);
        assert_eq!(decide(Some(&a), &a.clone(), Some(now), now), Step::Skip);
        let newer = status("True", "v1.33.1");
        let soon = now + Duration::from_secs(5);
        assert_eq!(
            decide(Some(&a), &newer, Some(now), soon),
            Step::WriteAt(now + MIN_INTERVAL)
        );
        assert_eq!(
            decide(Some(&a), &newer, Some(now), now + MIN_INTERVAL),
            Step::Write
        );
        // A condition that changes is written at once.
        assert_eq!(
            decide(Some(&a), &status("False", "v1.33.0"), Some(now), soon),
            Step::Write
        );
    }
}
