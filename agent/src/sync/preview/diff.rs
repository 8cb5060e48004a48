//! The changes a preview shows for one update: the live copy against what the
//! API server's dry run made of the write, both through drift's comparable
//! form (`compare::normalize`: server-owned metadata, status unless synced,
//! `kubernetes.io` keys and the rule's drift exclusions out), so a path shown
//! is a path the write changes. Values are redacted exactly as drift events
//! redact them: a Secret's `/data` and `/stringData`, and everything outside
//! `/metadata` of a `seal: true` rule (the reply is readable JSON on the bus).

use fleetbus_schemas::drift::DriftChange;
use serde_json::Value;

use crate::sync::drift::policy;
use crate::sync::model::Target;

/// What redaction a copy's changes need.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Redact {
    /// The copy is a Secret.
    pub secret: bool,
    /// Its rule seals what it syncs.
    pub sealed: bool,
}

impl Redact {
    /// The redaction of `target`'s changes under a rule that seals or not.
    pub fn of(target: &Target, sealed: bool) -> Self {
        Redact {
            secret: target.api_version == "v1" && target.kind == "Secret",
            sealed,
        }
    }
}

/// The leaf changes from `live` to `server` (the dry run's result), sorted by
/// path, redacted per `redact`.
pub(super) fn changes(
    server: &Value,
    live: &Value,
    with_status: bool,
    exclude: &[String],
    redact: Redact,
) -> Vec<DriftChange> {
    let mut out = policy::changes(server, live, with_status, exclude);
    if redact.secret {
        policy::redact_secret_values(&mut out);
    }
    if redact.sealed {
        policy::redact_sealed_values(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn target(kind: &str) -> Target {
        Target::from(crate::sync::model::Place {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: Some("a".into()),
            name: "s".into(),
        })
    }

    #[test]
    fn only_what_the_write_changes_is_shown_and_no_secret_value() {
        let live = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "resourceVersion": "7", "uid": "u",
                         "labels": {"team": "a", "kubernetes.io/x": "1"}},
            "data": {"k": "c2VjcmV0", "gone": "eA=="}});
        let server = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "resourceVersion": "8", "uid": "u",
                         "labels": {"team": "b"}},
            "data": {"k": "bmV3", "added": "eQ=="}});
        let ch = changes(
            &server,
            &live,
            false,
            &[],
            Redact::of(&target("Secret"), false),
        );
        let paths: Vec<&str> = ch.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "/data/added",
                "/data/gone",
                "/data/k",
                "/metadata/labels/team"
            ]
        );
        let text = serde_json::to_string(&ch).unwrap();
        for value in ["c2VjcmV0", "bmV3", "eA==", "eQ=="] {
            assert!(!text.contains(value), "{text}");
        }
        // Added and removed keys still show as such.
        assert_eq!(ch[0].live, Value::Null);
        assert_eq!(ch[1].desired, Value::Null);
        assert_eq!(ch[3].desired, json!("b"));
    }

    #[test]
    fn a_sealed_rule_shows_paths_outside_metadata_without_values() {
        let live = json!({"kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "old"}});
        let server = json!({"kind": "ConfigMap", "metadata": {"name": "c", "labels": {"l": "1"}},
                            "data": {"k": "new"}});
        let ch = changes(
            &server,
            &live,
            false,
            &[],
            Redact::of(&target("ConfigMap"), true),
        );
        assert_eq!(ch.len(), 2);
        assert_eq!(ch[0].path, "/data/k");
        assert!(!serde_json::to_string(&ch[0]).unwrap().contains("new"));
        assert_eq!(ch[1].path, "/metadata/labels");
        assert_eq!(ch[1].desired, json!({"l": "1"}));
        // Excluded paths are no change.
        let none = changes(
            &server,
            &live,
            false,
            &["/data/k".to_owned(), "/metadata/labels".to_owned()],
            Redact::of(&target("ConfigMap"), false),
        );
        assert!(none.is_empty(), "{none:?}");
    }
}
