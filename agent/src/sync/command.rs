//! `<p>.cmd.<self>.correct`: an operator's manual correction
//! (`fleetbus drift correct`). The request selects drifted copies (by rule,
//! kind, namespace, name; absent = any); the engine corrects them in the next
//! pass whatever the drift mode or pause annotations, and replies with what
//! it did. A malformed request gets a reply with `error`, nothing else.

use serde_json::{json, Value};

use super::engine::{Engine, Target};

/// The filter of a correct request.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Selector {
    /// Rule name.
    pub rule: Option<String>,
    /// Kind of the copy.
    pub kind: Option<String>,
    /// Namespace of the copy.
    pub namespace: Option<String>,
    /// Name of the copy.
    pub name: Option<String>,
}

/// Schema of requests.
pub const REQUEST_SCHEMA: &str = "fleetbus.io/correct-request/v1";
/// Schema of replies.
pub const REPLY_SCHEMA: &str = "fleetbus.io/correct-reply/v1";

/// Parses a request; the error is the reply's `error`.
pub fn parse(bytes: &[u8]) -> Result<Selector, String> {
    let v: Value = serde_json::from_slice(bytes).map_err(|e| format!("malformed request: {e}"))?;
    match v.get("schema").and_then(Value::as_str) {
        Some(REQUEST_SCHEMA) => {}
        Some(other) => return Err(format!("unsupported request schema {other:?}")),
        None => return Err("malformed request: no schema".to_owned()),
    }
    let field = |k: &str| -> Result<Option<String>, String> {
        match v.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("malformed request: {k} must be a string")),
        }
    };
    Ok(Selector {
        rule: field("rule")?,
        kind: field("kind")?,
        namespace: field("namespace")?,
        name: field("name")?,
    })
}

impl Selector {
    fn selects(&self, target: &Target, rule: &str) -> bool {
        self.rule.as_deref().is_none_or(|r| r == rule)
            && self.kind.as_deref().is_none_or(|k| k == target.kind)
            && self
                .namespace
                .as_ref()
                .is_none_or(|n| Some(n) == target.namespace.as_ref())
            && self.name.as_deref().is_none_or(|n| n == target.name)
    }
}

fn object(t: &Target) -> Value {
    json!({"apiVersion": t.api_version, "kind": t.kind, "namespace": t.namespace, "name": t.name})
}

impl Engine {
    /// Corrects the drifted copies `sel` selects, now; returns the reply.
    pub async fn correct(&mut self, sel: &Selector) -> Value {
        let chosen: Vec<Target> = self
            .drifts
            .iter()
            .filter(|(t, d)| sel.selects(t, &d.event.rule))
            .map(|(t, _)| t.clone())
            .collect();
        tracing::info!(count = chosen.len(), ?sel, "correction requested");
        self.forced = chosen.iter().cloned().collect();
        self.forced_results.clear();
        self.pass().await;
        // A copy the pass did not reach (its rule is not ready, say) failed.
        let leftover: Vec<Target> = self.forced.drain().collect();
        let mut corrected = Vec::new();
        let mut failed = Vec::new();
        for (t, r) in self.forced_results.drain(..) {
            match r {
                Ok(()) => corrected.push(object(&t)),
                Err(e) => failed.push(json!({"object": object(&t), "error": e})),
            }
        }
        for t in leftover {
            failed.push(json!({"object": object(&t), "error": "not corrected in this pass (its rule or kind is not ready)"}));
        }
        json!({
            "schema": REPLY_SCHEMA,
            "cluster": self.fleet.local.name,
            "corrected": corrected,
            "failed": failed,
            "error": null,
        })
    }

    /// The reply to a request that could not be read.
    pub fn refuse(&self, error: &str) -> Value {
        json!({
            "schema": REPLY_SCHEMA,
            "cluster": self.fleet.local.name,
            "corrected": [],
            "failed": [],
            "error": error,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse_or_say_why_not() {
        let sel = parse(br#"{"schema":"fleetbus.io/correct-request/v1","rule":"r","name":null}"#)
            .unwrap();
        assert_eq!(sel.rule.as_deref(), Some("r"));
        assert_eq!(sel.name, None);
        assert!(parse(b"not json").unwrap_err().contains("malformed"));
        assert!(parse(br#"{"schema":"fleetbus.io/correct-request/v9"}"#)
            .unwrap_err()
            .contains("unsupported"));
        assert!(
            parse(br#"{"schema":"fleetbus.io/correct-request/v1","kind":5}"#)
                .unwrap_err()
                .contains("kind")
        );
        let t = Target {
            api_version: "v1".into(),
            kind: "Secret".into(),
            namespace: Some("a".into()),
            name: "x".into(),
        };
        assert!(Selector::default().selects(&t, "r"));
        assert!(!Selector {
            namespace: Some("b".into()),
            ..Selector::default()
        }
        .selects(&t, "r"));
        assert!(!Selector {
            rule: Some("q".into()),
            ..Selector::default()
        }
        .selects(&t, "r"));
    }
}
