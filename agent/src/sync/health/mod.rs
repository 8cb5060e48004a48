//! The health of a copy (pure): kstatus's rules, or the rule's own CEL
//! expressions (`spec.health`). Sinks report it with a copy's status
//! (`returns`), Bundles judge their manifests with it, and `ready r/n` counts
//! the copies that are `Current`.

mod cel;
mod kstatus;

use chrono::{DateTime, Utc};
use fleetbus_schemas::crd::HealthCheck;
use fleetbus_schemas::health::{Health, HealthStatus};
use serde_json::Value;

pub use self::cel::Expr;

/// A rule's compiled `spec.health`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledHealth {
    current: Expr,
    failed: Option<Expr>,
}

impl CompiledHealth {
    /// Compiles both expressions; the error names the field and the parser's message.
    pub fn compile(check: &HealthCheck) -> Result<Self, String> {
        let current = cel::compile(&check.current)
            .map_err(|e| format!("spec.health.current: does not compile: {e}"))?;
        let failed = match &check.failed {
            Some(src) => Some(
                cel::compile(src)
                    .map_err(|e| format!("spec.health.failed: does not compile: {e}"))?,
            ),
            None => None,
        };
        Ok(Self { current, failed })
    }
}

/// The health of `live` (a whole live copy): Terminating while it is being
/// deleted, else the rule's expressions if it has them, else kstatus.
pub fn judge(custom: Option<&CompiledHealth>, live: &Value, now: DateTime<Utc>) -> Health {
    let Some(custom) = custom else {
        return kstatus::compute(live, now);
    };
    if live
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return Health::new(HealthStatus::Terminating, "Resource scheduled for deletion");
    }
    if let Some(failed) = &custom.failed {
        match cel::eval(failed, live) {
            Ok(true) => return Health::new(HealthStatus::Failed, "spec.health.failed is true"),
            Ok(false) => {}
            Err(e) => return Health::new(HealthStatus::Unknown, e),
        }
    }
    match cel::eval(&custom.current, live) {
        Ok(true) => Health::new(HealthStatus::Current, "spec.health.current is true"),
        Ok(false) => Health::new(HealthStatus::InProgress, "spec.health.current is false"),
        Err(e) => Health::new(HealthStatus::Unknown, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(current: &str, failed: Option<&str>) -> CompiledHealth {
        CompiledHealth::compile(&HealthCheck {
            current: current.into(),
            failed: failed.map(Into::into),
        })
        .unwrap()
    }

    #[test]
    fn custom_expressions_decide_failed_first_and_terminating_before_both() {
        let c = check(
            "object.status.phase == 'Ready'",
            Some("object.status.phase == 'Broken'"),
        );
        let with = |phase: &str| json!({"status": {"phase": phase}});
        let now = Utc::now();
        assert_eq!(
            judge(Some(&c), &with("Ready"), now).status,
            HealthStatus::Current
        );
        assert_eq!(
            judge(Some(&c), &with("Pending"), now).status,
            HealthStatus::InProgress
        );
        assert_eq!(
            judge(Some(&c), &with("Broken"), now).status,
            HealthStatus::Failed
        );
        let unknown = judge(Some(&c), &json!({"spec": {}}), now);
        assert_eq!(unknown.status, HealthStatus::Unknown);
        assert!(
            unknown.message.contains("Broken"),
            "names the expression: {}",
            unknown.message
        );
        let mut deleting = with("Ready");
        deleting["metadata"] = json!({"deletionTimestamp": "2026-11-27T08:00:00Z"});
        assert_eq!(
            judge(Some(&c), &deleting, now).status,
            HealthStatus::Terminating
        );
        // No custom check: kstatus (a ConfigMap is always Current).
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        assert_eq!(judge(None, &cm, now).status, HealthStatus::Current);
    }

    #[test]
    fn a_bad_expression_names_its_field() {
        let e = CompiledHealth::compile(&HealthCheck {
            current: "true".into(),
            failed: Some("object.(".into()),
        })
        .unwrap_err();
        assert!(
            e.starts_with("spec.health.failed: does not compile: "),
            "{e}"
        );
    }
}
