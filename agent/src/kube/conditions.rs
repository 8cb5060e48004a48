//! Building `status.conditions` so that an unchanged condition compares equal.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition as decided by the agent, before timestamps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    /// Condition type, e.g. `ClustersSynced`.
    pub type_: &'static str,
    /// True or false.
    pub status: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

/// Now, truncated to whole seconds: the API server stores RFC 3339 seconds,
/// and a sub-second value would never compare equal to what it gives back.
pub fn now_seconds() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

/// Renders `desired` against `existing`: a condition whose status did not
/// change keeps its `lastTransitionTime`, so a steady state renders identical
/// conditions and needs no write. Conditions not in `desired` are dropped.
pub fn merge(
    existing: &[Condition],
    desired: &[Desired],
    generation: Option<i64>,
) -> Vec<Condition> {
    desired
        .iter()
        .map(|d| {
            let status = if d.status { "True" } else { "False" };
            let last_transition_time = existing
                .iter()
                .find(|c| c.type_ == d.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(now_seconds);
            Condition {
                type_: d.type_.to_owned(),
                status: status.to_owned(),
                reason: d.reason.to_owned(),
                message: bounded(&d.message),
                last_transition_time,
                observed_generation: generation,
            }
        })
        .collect()
}

/// `existing` with condition `desired.type_` rendered anew (see [`merge`])
/// and moved last; conditions of other types are kept as they are, for
/// when only one condition of an object is ours to judge.
pub fn replace_one(
    existing: &[Condition],
    desired: Desired,
    generation: Option<i64>,
) -> Vec<Condition> {
    let mut conditions: Vec<_> = existing
        .iter()
        .filter(|c| c.type_ != desired.type_)
        .cloned()
        .collect();
    conditions.extend(merge(existing, &[desired], generation));
    conditions
}

/// Longest condition message written. Kubernetes refuses more than 32768
/// bytes; messages built from peer data (member lists) are cut well below.
pub const MAX_MESSAGE: usize = 4096;

/// `message` cut to [`MAX_MESSAGE`] bytes at a char boundary, marked with "…".
pub fn bounded(message: &str) -> String {
    if message.len() <= MAX_MESSAGE {
        return message.to_owned();
    }
    let mut cut = MAX_MESSAGE - '…'.len_utf8();
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}…", &message[..cut])
}

/// The status ("True"/"False") of condition `type_`, if present.
pub fn status_of<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a str> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_below_the_kubernetes_limit() {
        let long = "é".repeat(20_000);
        let m = bounded(&long);
        assert!(m.len() <= MAX_MESSAGE && m.ends_with('…'));
        assert_eq!(bounded("short"), "short");
    }

    fn d(status: bool, msg: &str) -> Desired {
        Desired {
            type_: "ClustersSynced",
            status,
            reason: "Test",
            message: msg.to_owned(),
        }
    }

    #[test]
    fn unchanged_status_keeps_transition_time() {
        let old = Time(Timestamp::from_second(1_000).unwrap());
        let existing = vec![Condition {
            type_: "ClustersSynced".into(),
            status: "True".into(),
            reason: "Test".into(),
            message: "m".into(),
            last_transition_time: old.clone(),
            observed_generation: Some(1),
        }];
        let merged = merge(&existing, &[d(true, "m")], Some(1));
        assert_eq!(
            merged, existing,
            "steady state renders identical conditions"
        );
        let merged = merge(&existing, &[d(true, "other message")], Some(1));
        assert_eq!(merged[0].last_transition_time, old);
        let flipped = merge(&existing, &[d(false, "m")], Some(1));
        assert_ne!(flipped[0].last_transition_time, old);
        assert_eq!(status_of(&flipped, "ClustersSynced"), Some("False"));
    }

    #[test]
    fn replace_one_keeps_the_other_conditions_and_the_transition_time() {
        let desired = |type_, status| Desired {
            type_,
            status,
            reason: "Because",
            message: String::new(),
        };
        let before = merge(&[], &[desired("A", true), desired("B", true)], Some(1));
        let replaced = replace_one(&before, desired("A", true), Some(2));
        assert_eq!(replaced[0], before[1], "B is kept as it was");
        assert_eq!(replaced[1].type_, "A");
        assert_eq!(
            replaced[1].last_transition_time, before[0].last_transition_time,
            "the status did not change"
        );
        assert_eq!(replaced[1].observed_generation, Some(2));
        let flipped = replace_one(&before, desired("B", false), None);
        assert_eq!(flipped[0], before[0]);
        assert_eq!(flipped[1].status, "False");
        assert_eq!(flipped.len(), 2);
    }
}
