//! What one notification says, and its body for each webhook format.

use std::collections::BTreeMap;

use chrono::{DateTime, SecondsFormat, Utc};
use fleetbus_schemas::conflict::ConflictEvent;
use fleetbus_schemas::drift::{DriftEvent, DriftPhase};
use fleetbus_schemas::ObjectRef;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

/// How bad an event is; targets filter on a minimum.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Something changed and was handled (a drift corrected or resolved).
    Info,
    /// Someone should look (a drift detected and left as it is).
    Warning,
    /// Something is not converging (a correction failed, two writers fight).
    Critical,
}

/// The message shape a webhook expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// Slack incoming webhook: `{"text": …}`.
    Slack,
    /// Microsoft Teams incoming webhook: a MessageCard.
    Teams,
    /// The [`Notification`] itself as JSON.
    Json,
}

/// One event as operators read it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// Kind of event: `drift`, `conflict`, `rollout`, `placement`, `policy`,
    /// `cluster`.
    pub kind: &'static str,
    /// How bad it is.
    pub severity: Severity,
    /// The cluster it happened on.
    pub cluster: String,
    /// The rule concerned.
    pub rule: String,
    /// The phase of a drift (`Detected`, `Fight`, …), the reason of a conflict.
    pub phase: String,
    /// The object, `Kind namespace/name`.
    pub object: String,
    /// One line for people.
    pub summary: String,
    /// How many events this message stands for (a storm folded into one).
    pub count: u32,
    /// When the first of them happened.
    pub at: DateTime<Utc>,
    /// The labels of `cluster` as the registry says (what a target's
    /// `clusterSelector` matches); not sent.
    #[serde(skip)]
    pub labels: BTreeMap<String, String>,
}

impl Notification {
    /// A notification with no object, summary or time yet (count 1).
    pub fn new(
        kind: &'static str,
        severity: Severity,
        cluster: &str,
        rule: &str,
        phase: &str,
    ) -> Self {
        Notification {
            kind,
            severity,
            cluster: cluster.to_owned(),
            rule: rule.to_owned(),
            phase: phase.to_owned(),
            object: String::new(),
            summary: String::new(),
            count: 1,
            at: Utc::now(),
            labels: BTreeMap::new(),
        }
    }

    /// The notification of a drift event.
    pub fn from_drift(e: &DriftEvent) -> Self {
        let severity = match e.phase {
            DriftPhase::Corrected | DriftPhase::Resolved => Severity::Info,
            DriftPhase::Detected => Severity::Warning,
            DriftPhase::CorrectionFailed | DriftPhase::Fight => Severity::Critical,
        };
        let object = shown(&e.object);
        let mut summary = format!(
            "drift {} on {}: {object} (rule {})",
            e.phase.as_str(),
            e.cluster,
            e.rule
        );
        if let Some(error) = &e.error {
            summary.push_str(&format!(": {error}"));
        }
        Notification {
            kind: "drift",
            severity,
            cluster: e.cluster.clone(),
            rule: e.rule.clone(),
            phase: e.phase.as_str().to_owned(),
            object,
            summary,
            count: e.count.max(1),
            at: e.detected_at,
            labels: BTreeMap::new(),
        }
    }

    /// The notification of a conflict event: a copy a sink would not write.
    pub fn from_conflict(e: &ConflictEvent) -> Self {
        let object = shown(&e.object);
        Notification {
            kind: "conflict",
            severity: Severity::Warning,
            cluster: e.cluster.clone(),
            rule: e.rule.clone(),
            phase: e.reason.as_str().to_owned(),
            summary: format!(
                "conflict on {}: {object} (rule {}): {}",
                e.cluster, e.rule, e.message
            ),
            object,
            count: 1,
            at: e.detected_at,
            labels: BTreeMap::new(),
        }
    }

    /// The text line of chat formats: the summary, and how many it stands for.
    fn text(&self) -> String {
        let at = self.at.to_rfc3339_opts(SecondsFormat::Secs, true);
        if self.count > 1 {
            format!("{} ({} times since {at})", self.summary, self.count)
        } else {
            format!("{} (at {at})", self.summary)
        }
    }

    /// The request body for a webhook of `format`; with a target's own
    /// `line` (its template filled), that is the text (Slack, Teams) or a
    /// `text` member (JSON).
    pub fn render(&self, format: Format, line: Option<String>) -> Value {
        match format {
            Format::Slack => json!({
                "text": line.unwrap_or_else(|| format!("[{}] {}", self.severity.word(), self.text()))
            }),
            Format::Teams => json!({
                "@type": "MessageCard",
                "@context": "https://schema.org/extensions",
                "summary": self.summary,
                "themeColor": match self.severity {
                    Severity::Info => "2EB67D",
                    Severity::Warning => "ECB22E",
                    Severity::Critical => "E01E5A",
                },
                "title": format!("fleetbus {} {}", self.kind, self.severity.word()),
                "text": line.unwrap_or_else(|| self.text()),
            }),
            Format::Json => {
                let mut body = serde_json::to_value(self).unwrap_or(Value::Null);
                if let (Some(line), Some(o)) = (line, body.as_object_mut()) {
                    o.insert("text".to_owned(), Value::String(line));
                }
                body
            }
        }
    }
}

impl Severity {
    /// The word, as targets and templates write it.
    pub fn word(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Critical => "critical",
        }
    }
}

/// `Kind namespace/name`, or `Kind name` for a cluster-scoped object.
pub(super) fn shown(o: &ObjectRef) -> String {
    match &o.namespace {
        Some(ns) => format!("{} {ns}/{}", o.kind, o.name),
        None => format!("{} {}", o.kind, o.name),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;
    use fleetbus_schemas::crd::DriftMode;
    use fleetbus_schemas::drift::DriftType;
    use fleetbus_schemas::ObjectRef;

    pub(crate) fn drift(cluster: &str, rule: &str, name: &str, phase: DriftPhase) -> DriftEvent {
        DriftEvent {
            id: format!("{cluster}-{name}"),
            cluster: cluster.to_owned(),
            rule: rule.to_owned(),
            origin: "a".to_owned(),
            object: ObjectRef {
                api_version: "v1".to_owned(),
                kind: "ConfigMap".to_owned(),
                namespace: Some("apps".to_owned()),
                name: name.to_owned(),
                uid: None,
                resource_version: None,
            },
            phase,
            type_: DriftType::Modified,
            detected_at: DateTime::from_timestamp(1_700_000_000, 0).unwrap(),
            changes: Vec::new(),
            changed_by: None,
            action: DriftMode::Report,
            error: None,
            count: 1,
            resume_at: None,
        }
    }

    #[test]
    fn each_format_has_its_shape() {
        let n = Notification::from_drift(&drift("b", "web", "site", DriftPhase::Fight));
        assert_eq!(n.severity, Severity::Critical);
        assert_eq!(
            n.render(Format::Slack, None)["text"],
            "[critical] drift Fight on b: ConfigMap apps/site (rule web) (at 2023-11-14T22:13:20Z)"
        );
        let teams = n.render(Format::Teams, None);
        assert_eq!(teams["@type"], "MessageCard");
        assert_eq!(teams["themeColor"], "E01E5A");
        let j = n.render(Format::Json, None);
        assert_eq!(j["cluster"], "b");
        assert_eq!(j["count"], 1);
        assert_eq!(j["severity"], "critical");
        assert!(j.get("text").is_none());
        // A target's own line (its template filled) is the text.
        let line = "critical: ConfigMap apps/site on b";
        for format in [Format::Slack, Format::Teams, Format::Json] {
            assert_eq!(n.render(format, Some(line.to_owned()))["text"], line);
        }
    }
}
