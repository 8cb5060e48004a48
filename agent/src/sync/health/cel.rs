//! Health expressions in CEL over `object`, the live copy, as Kubernetes
//! users write them for `x-kubernetes-validations`: compiled and bounded by
//! `bounded_cel` (a cost estimate refused when it compiles, a budget that
//! stops an evaluation; the rule's validation caps the source at 1 KiB).
//! An expression's result is remembered per copy version (uid and
//! resourceVersion), so a copy is evaluated again only when it changed, not
//! on every pass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

pub use bounded_cel::{CompileError, EvalError};

/// Results remembered per expression: one per copy (the latest version of
/// each uid), so this bounds the copies one rule holds on a cluster whose
/// results are kept. Past it everything is forgotten at once, as the
/// compile memo does: simple, and only a rule with more copies here than
/// this evaluates some of them again.
const RESULTS_CAP: usize = 16_384;

/// A compiled expression, comparable by its source (rules compare equal
/// when their specs do).
#[derive(Clone)]
pub struct Expr {
    program: bounded_cel::Program,
    /// Shared by the clones of one compiled rule and dropped with it: no
    /// other rule, engine or test in the process sees its results (they are
    /// only as right as uids are unique, which test fixtures need not be).
    results: Arc<Mutex<Results>>,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expr").field(&self.program).finish()
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.program == other.program
    }
}

impl Expr {
    /// The start of the source, for messages (bounded, whole characters).
    pub fn excerpt(&self) -> String {
        self.program.excerpt()
    }

    /// How many times this expression was evaluated (not answered from
    /// what it remembers).
    #[cfg(test)]
    pub fn evaluations(&self) -> u64 {
        self.results.lock().map_or(0, |r| r.evaluations)
    }
}

/// The results of one expression, by copy uid: the resourceVersion they
/// are about and the result.
#[derive(Default)]
struct Results {
    by_uid: HashMap<String, (String, Result<bool, EvalError>)>,
    evaluations: u64,
}

/// Compiles `source`, or says why it cannot be used: it does not parse, or
/// its estimated cost is above the limit.
pub fn compile(source: &str) -> Result<Expr, CompileError> {
    bounded_cel::compile(source).map(|program| Expr {
        program,
        results: Arc::default(),
    })
}

/// Evaluates a compiled expression over `object`: its boolean, or why it
/// has none. A copy with a uid and a resourceVersion is evaluated once per
/// version: the result is remembered (errors too, a spent budget above all,
/// which would otherwise be spent again on every pass).
pub fn eval(expr: &Expr, object: &Value) -> Result<bool, EvalError> {
    let version = version_of(object);
    if let Some((uid, rv)) = version {
        // A std Mutex: held for a lookup or an insert, never across an
        // evaluation or an await.
        let known = expr.results.lock().ok().and_then(|r| {
            r.by_uid
                .get(uid)
                .filter(|(at, _)| at == rv)
                .map(|(_, result)| result.clone())
        });
        if let Some(result) = known {
            return result;
        }
    }
    let result = expr.program.eval_bool(&[("object", object)]);
    if let Ok(mut r) = expr.results.lock() {
        r.evaluations += 1;
        if let Some((uid, rv)) = version {
            if r.by_uid.len() >= RESULTS_CAP && !r.by_uid.contains_key(uid) {
                r.by_uid.clear();
            }
            r.by_uid
                .insert(uid.to_owned(), (rv.to_owned(), result.clone()));
        }
    }
    result
}

/// The copy's uid and resourceVersion, when it has both: what identifies
/// its content (every change to an object gives it a new resourceVersion).
fn version_of(object: &Value) -> Option<(&str, &str)> {
    let field = |name: &str| {
        object
            .get("metadata")?
            .get(name)?
            .as_str()
            .filter(|s| !s.is_empty())
    };
    Some((field("uid")?, field("resourceVersion")?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn compiles_evaluates_and_explains() {
        let e = compile(
            "object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')",
        )
        .unwrap();
        let ok = json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}});
        assert_eq!(eval(&e, &ok), Ok(true));
        assert_eq!(eval(&e, &json!({"status": {"conditions": []}})), Ok(false));
        assert_eq!(
            eval(&e, &json!({"spec": {}})),
            Err(EvalError::Execution(
                bounded_cel::ExecutionError::no_such_key("status")
            ))
        );
        // Integers are int, as in Kubernetes CEL: arithmetic with literals works.
        let arith = compile("object.spec.replicas - 1 == 2").unwrap();
        assert_eq!(eval(&arith, &json!({"spec": {"replicas": 3}})), Ok(true));
        let strings = compile("object.metadata.name.lowerAscii().startsWith('web')").unwrap();
        assert_eq!(
            eval(&strings, &json!({"metadata": {"name": "WEB-1"}})),
            Ok(true)
        );
        let not_bool = eval(&compile("object.spec").unwrap(), &json!({"spec": 1}));
        assert!(
            matches!(not_bool, Err(EvalError::NotBool { .. })),
            "{not_bool:?}"
        );
        // Loops still work once metered: `map` and `filter`, `in`, nested.
        let loops = compile(
            "object.spec.items.map(x, x * 2).filter(y, y > 2) == [4, 6] \
             && 3 in object.spec.items && !(7 in object.spec.items) \
             && object.spec.items.all(x, object.spec.items.exists(y, y == x)) \
             && object.spec.items.exists_one(x, x == 2)",
        )
        .unwrap();
        assert_eq!(
            eval(&loops, &json!({"spec": {"items": [1, 2, 3]}})),
            Ok(true)
        );
    }

    /// An object whose list makes `object.spec.items.all(...)` walk more
    /// than the budget.
    fn big(items: usize) -> Value {
        json!({"metadata": {"uid": format!("u-{items}"), "resourceVersion": "1"},
               "spec": {"items": vec![1; items]}})
    }

    #[test]
    fn a_copy_is_evaluated_once_per_version() {
        let e = compile("object.status.phase == 'Up'").unwrap();
        let copy = |uid: &str, rv: &str, phase: &str| json!({"metadata": {"uid": uid, "resourceVersion": rv}, "status": {"phase": phase}});
        assert_eq!(eval(&e, &copy("u1", "1", "Up")), Ok(true));
        assert_eq!(eval(&e, &copy("u1", "1", "Up")), Ok(true));
        assert_eq!(
            e.evaluations(),
            1,
            "the same version is not evaluated again"
        );
        assert_eq!(eval(&e, &copy("u1", "2", "Down")), Ok(false));
        assert_eq!(eval(&e, &copy("u2", "1", "Up")), Ok(true));
        assert_eq!(eval(&e, &copy("u1", "2", "Down")), Ok(false));
        assert_eq!(e.evaluations(), 3, "a new version or another copy is");
        // Without a resourceVersion nothing tells a change: evaluated each time.
        let unversioned = json!({"metadata": {"uid": "u3"}, "status": {"phase": "Up"}});
        assert_eq!(eval(&e, &unversioned), Ok(true));
        assert_eq!(eval(&e, &unversioned), Ok(true));
        assert_eq!(e.evaluations(), 5);
        // Clones (the rule's copies in the engine) share what is known; a
        // new compile (another rule, another engine) starts afresh.
        assert_eq!(eval(&e.clone(), &copy("u1", "2", "Down")), Ok(false));
        assert_eq!(e.evaluations(), 5);
        let again = compile("object.status.phase == 'Up'").unwrap();
        assert_eq!(eval(&again, &copy("u1", "2", "Up")), Ok(true));
        // A spent budget is remembered too: not spent again on every pass.
        let all = compile("object.spec.items.all(x, x >= 0)").unwrap();
        let huge = big(200_000);
        assert_eq!(eval(&all, &huge), Err(EvalError::BudgetExceeded));
        assert_eq!(eval(&all, &huge), Err(EvalError::BudgetExceeded));
        assert_eq!(all.evaluations(), 1);
    }

    #[test]
    fn the_crd_states_these_bounds() {
        let rule = fleetbus_schemas::crd::all_crds()
            .into_iter()
            .find(|c| c.spec.names.kind == "ResourceSyncRule")
            .unwrap();
        let schema = serde_json::to_value(&rule.spec.versions[0].schema).unwrap();
        let said = schema
            .pointer("/openAPIV3Schema/properties/spec/properties/health/description")
            .and_then(serde_json::Value::as_str)
            .unwrap();
        // The CRD (what `kubectl explain` shows) states these numbers.
        assert_eq!(
            (
                bounded_cel::LIMIT,
                bounded_cel::ASSUMED_SIZE,
                bounded_cel::BYTES_PER_UNIT,
                bounded_cel::MAX_STRING
            ),
            (100_000, 100, 100, 1 << 20),
            "update the CRD's docs and `EvalError::BudgetExceeded`'s message too"
        );
        for stated in [
            "above 100,000",
            "counted as 100)",
            "100,000 elements (100 bytes of a string",
            "over 1 MiB",
        ] {
            assert!(said.contains(stated), "{stated} not in {said}");
        }
    }
}
