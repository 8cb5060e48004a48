//! The health of a copy, as a sink judges it and reports it to the origin
//! (PROTOCOL §6.1). The states are kstatus's (`sigs.k8s.io/cli-utils`,
//! `pkg/kstatus/status`), the vocabulary `kubectl`, Flux and Argo users read.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Longest `message` carried on the wire; longer ones are cut (on a char boundary).
pub const MAX_HEALTH_MESSAGE: usize = 1024;

/// Longest health expression a rule may carry (`spec.health.current` / `.failed`).
pub const MAX_HEALTH_EXPRESSION: usize = 1024;

/// Where a copy stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum HealthStatus {
    /// Fully reconciled: what the spec asks for is running.
    Current,
    /// On its way (a rollout, a bound volume, a first observation).
    InProgress,
    /// It will not get there without help (deadline exceeded, crash loop, a failed Job).
    Failed,
    /// Being deleted.
    Terminating,
    /// Cannot be told (an expression that does not evaluate, an unknown pod phase).
    Unknown,
}

impl HealthStatus {
    /// The wire string.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Current => "Current",
            Self::InProgress => "InProgress",
            Self::Failed => "Failed",
            Self::Terminating => "Terminating",
            Self::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for HealthStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A copy's health and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Health {
    /// Where the copy stands.
    pub status: HealthStatus,
    /// What the judge saw, for people ("Deployment is available. Replicas: 3").
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
}

impl Health {
    /// A health with its message cut to [`MAX_HEALTH_MESSAGE`] bytes.
    pub fn new(status: HealthStatus, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > MAX_HEALTH_MESSAGE {
            let mut cut = MAX_HEALTH_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        Self { status, message }
    }

    /// Whether the copy counts as ready (`ready r/n`): only `Current` does.
    pub fn is_current(&self) -> bool {
        self.status == HealthStatus::Current
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_form_and_cut_message() {
        let h = Health::new(HealthStatus::InProgress, "é".repeat(MAX_HEALTH_MESSAGE));
        assert!(h.message.len() <= MAX_HEALTH_MESSAGE);
        assert!(h.message.len() >= MAX_HEALTH_MESSAGE - 1);
        let json = serde_json::to_string(&Health::new(HealthStatus::Failed, "x")).unwrap();
        assert_eq!(json, r#"{"status":"Failed","message":"x"}"#);
        let back: Health = serde_json::from_str(r#"{"status":"Current"}"#).unwrap();
        assert!(back.is_current());
        assert!(serde_json::from_str::<Health>(r#"{"status":"Fine"}"#).is_err());
    }
}
