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

pub use self::cel::{CompileError, EvalError, Expr};

/// A health expression that cannot be used, naming its field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HealthError {
    /// It does not compile, or would cost too much: the rule is Invalid.
    #[error("{field}")]
    Compile {
        /// `spec.health.current` or `spec.health.failed`.
        field: &'static str,
        /// Why.
        #[source]
        error: CompileError,
    },
    /// It gave no boolean for a copy: the copy's health is Unknown.
    #[error("{field} `{excerpt}`")]
    Eval {
        /// `spec.health.current` or `spec.health.failed`.
        field: &'static str,
        /// The start of the expression.
        excerpt: String,
        /// Why.
        #[source]
        error: EvalError,
    },
}

const CURRENT: &str = "spec.health.current";
const FAILED: &str = "spec.health.failed";

/// A rule's compiled `spec.health`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompiledHealth {
    current: Expr,
    failed: Option<Expr>,
}

impl CompiledHealth {
    /// Compiles both expressions; the error names the field.
    pub fn compile(check: &HealthCheck) -> Result<Self, HealthError> {
        let compile = |field, source: &str| {
            cel::compile(source).map_err(|error| HealthError::Compile { field, error })
        };
        let current = compile(CURRENT, &check.current)?;
        let failed = match &check.failed {
            Some(src) => Some(compile(FAILED, src)?),
            None => None,
        };
        Ok(Self { current, failed })
    }
}

/// `expr` over `live`, or the Unknown health that says why it has no answer.
fn decide(field: &'static str, expr: &Expr, live: &Value) -> Result<bool, Health> {
    cel::eval(expr, live).map_err(|error| {
        let why = HealthError::Eval {
            field,
            excerpt: expr.excerpt(),
            error,
        };
        Health::new(HealthStatus::Unknown, crate::report(&why))
    })
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
        match decide(FAILED, failed, live) {
            Ok(true) => return Health::new(HealthStatus::Failed, "spec.health.failed is true"),
            Ok(false) => {}
            Err(unknown) => return unknown,
        }
    }
    match decide(CURRENT, &custom.current, live) {
        Ok(true) => Health::new(HealthStatus::Current, "spec.health.current is true"),
        Ok(false) => Health::new(HealthStatus::InProgress, "spec.health.current is false"),
        Err(unknown) => unknown,
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
            matches!(
                e,
                HealthError::Compile {
                    field: FAILED,
                    error: CompileError::Parse(_)
                }
            ),
            "{e:?}"
        );
    }

    #[test]
    fn an_expression_too_costly_to_run_names_its_field_cost_and_limit() {
        let mut seven = "g >= 0".to_owned();
        for v in ["g", "f", "e", "d", "c", "b", "a"] {
            seven = format!("[0,1,2,3,4,5,6,7,8,9].all({v}, {seven})");
        }
        let e = CompiledHealth::compile(&HealthCheck {
            current: seven,
            failed: None,
        })
        .unwrap_err();
        assert!(
            matches!(
                e,
                HealthError::Compile {
                    field: CURRENT,
                    error: CompileError::TooCostly {
                        estimate: 11_111_110,
                        ..
                    }
                }
            ),
            "{e:?}"
        );
        // What the rule's Invalid condition says.
        let said = crate::report(&e);
        for part in [
            "spec.health.current: `[0,1,2,3,4,5,6,7,8,9].all(a, ",
            "11111110",
            "limit of 100000",
        ] {
            assert!(said.contains(part), "{part} not in {said}");
        }
    }

    #[test]
    fn an_expression_that_does_not_evaluate_says_why_within_the_message_bound() {
        // As long as a rule allows (1 KiB), stopped by its budget: the
        // reason must survive the cut of the health message (1 KiB too).
        let padding = " && true".repeat(120);
        let current = format!("object.spec.items.all(x, x >= 0){padding}");
        assert!(current.len() > 990 && current.len() <= 1024);
        let c = check(&current, None);
        let live = json!({"metadata": {"uid": "u", "resourceVersion": "1"},
                          "spec": {"items": vec![0; 200_000]}});
        let h = judge(Some(&c), &live, Utc::now());
        assert_eq!(h.status, HealthStatus::Unknown);
        assert!(
            h.message
                .starts_with("spec.health.current `object.spec.items.all(x, x >= 0) && true"),
            "{}",
            h.message
        );
        assert!(
            h.message.ends_with("the budget of one evaluation"),
            "{}",
            h.message
        );
        assert!(h.message.len() < 400, "{}", h.message.len());
    }
}
