//! Health expressions in CEL (the `cel` crate, cel-rust), over `object`, the
//! live copy, as Kubernetes users write them for `x-kubernetes-validations`.
//!
//! What bounds a hostile expression: the rule's validation caps its length
//! (1 KiB); compiling (an ANTLR parser with no stack guard, hundreds of KiB
//! of stack for a trivial expression in a debug build) runs on a thread of
//! its own with a 32 MiB stack, once per distinct source (memoized), never on
//! the engine's task; evaluation recursion is bounded by the parsed tree.
//! Absent, compared with Kubernetes CEL: the Kubernetes libraries
//! (`quantity()`, `url()`, `ip()`, `semver()`, ...) and a cost budget.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;

/// Compiled programs by source; bounded so rule churn cannot grow it forever.
const MEMO_CAP: usize = 256;

/// Stack for the compiling thread (see the module docs).
const COMPILE_STACK: usize = 32 << 20;

/// A compiled expression, comparable by its source (rules compare equal
/// when their specs do).
#[derive(Clone)]
pub struct Expr {
    source: String,
    program: Arc<Program>,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Expr").field(&self.source).finish()
    }
}

impl PartialEq for Expr {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // The strings extension only declares functions; it cannot fail on a
        // fresh stdlib env, and if it ever did the expressions using it would
        // fail to compile with a clear message, so its error is dropped.
        let _ = env.add_extension(cel::extensions::strings);
        Arc::new(env)
    })
}

/// What compiling a source gave: its program, or the parser's message.
type Compiled = Result<Arc<Program>, String>;

fn memo() -> &'static Mutex<HashMap<String, Compiled>> {
    static MEMO: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    MEMO.get_or_init(Mutex::default)
}

/// Compiles `source`, or says why it does not compile (the parser's message).
pub fn compile(source: &str) -> Result<Expr, String> {
    let cached = memo().lock().ok().and_then(|m| m.get(source).cloned());
    let result = match cached {
        Some(r) => r,
        None => {
            let r = compile_on_big_stack(source);
            if let Ok(mut m) = memo().lock() {
                if m.len() >= MEMO_CAP {
                    m.clear();
                }
                m.insert(source.to_owned(), r.clone());
            }
            r
        }
    };
    result.map(|program| Expr {
        source: source.to_owned(),
        program,
    })
}

fn compile_on_big_stack(source: &str) -> Compiled {
    let owned = source.to_owned();
    let env = env().clone();
    let worker = std::thread::Builder::new()
        .name("cel-compile".into())
        .stack_size(COMPILE_STACK)
        .spawn(move || env.compile(&owned).map(Arc::new).map_err(|e| e.to_string()));
    match worker {
        Ok(handle) => handle
            .join()
            .unwrap_or_else(|_| Err("the CEL parser failed on this expression".to_owned())),
        Err(e) => Err(format!("cannot start the CEL compiler thread: {e}")),
    }
}

/// Evaluates a compiled expression over `object`: its boolean, or why it has none.
pub fn eval(expr: &Expr, object: &Value) -> Result<bool, String> {
    let mut ctx = Context::with_env(env().clone());
    ctx.add_variable_from_value("object", to_cel(object));
    match expr.program.execute(&ctx) {
        Ok(Cel::Bool(b)) => Ok(b),
        Ok(other) => Err(format!("{}: must be a bool, got {other:?}", expr.source)),
        Err(e) => Err(format!("{}: {e}", expr.source)),
    }
}

/// JSON as Kubernetes CEL sees it: integers are `int` (serde's route would
/// make every non-negative one a `uint`, and `uint - int` has no overload).
fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Cel::Int(i),
            (None, Some(u)) => Cel::UInt(u),
            _ => Cel::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => Cel::from(a.iter().map(to_cel).collect::<Vec<Cel>>()),
        Value::Object(m) => Cel::from(
            m.iter()
                .map(|(k, v)| (k.clone(), to_cel(v)))
                .collect::<HashMap<String, Cel>>(),
        ),
    }
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
        let missing = eval(&e, &json!({"spec": {}})).unwrap_err();
        assert!(missing.contains("status"), "{missing}");
        // Integers are int, as in Kubernetes CEL: arithmetic with literals works.
        let arith = compile("object.spec.replicas - 1 == 2").unwrap();
        assert_eq!(eval(&arith, &json!({"spec": {"replicas": 3}})), Ok(true));
        let strings = compile("object.metadata.name.lowerAscii().startsWith('web')").unwrap();
        assert_eq!(
            eval(&strings, &json!({"metadata": {"name": "WEB-1"}})),
            Ok(true)
        );
        let not_bool = eval(&compile("object.spec").unwrap(), &json!({"spec": 1})).unwrap_err();
        assert!(not_bool.contains("must be a bool"), "{not_bool}");
    }

    #[test]
    fn what_does_not_compile_says_why_and_is_remembered() {
        let e = compile("object.status.phase ==").unwrap_err();
        assert!(!e.is_empty());
        assert_eq!(compile("object.status.phase ==").unwrap_err(), e);
        assert!(compile("(((((((((((((((((((((((((((((((true").is_err());
        // As deep as a rule may make it (1 KiB): refused by the parser's depth
        // bound or compiled, never a stack overflow of the agent (every agent
        // compiles every replicated rule).
        let mut evaluated = 0;
        for deep in [
            format!("{}true{}", "(".repeat(500), ")".repeat(500)),
            format!("{}1{}", "[".repeat(500), "]".repeat(500)),
            format!("{}true", "!".repeat(1000)),
            format!("{}1", "-".repeat(1000)),
            "a.".repeat(500) + "b",
        ] {
            // What compiles is evaluated on the engine's task: a tokio worker's
            // 2 MiB stack must be enough for it.
            if let Ok(e) = compile(&deep) {
                evaluated += 1;
                let ran = std::thread::Builder::new()
                    .stack_size(2 << 20)
                    .spawn(move || {
                        let _ = eval(&e, &serde_json::json!({}));
                    })
                    .unwrap()
                    .join();
                assert!(ran.is_ok(), "evaluating {deep:.40}… failed");
            }
        }
        assert!(
            evaluated > 0,
            "no deep expression compiled: the evaluation bound is untested"
        );
        assert_eq!(compile("true").unwrap(), compile("true").unwrap());
        assert_ne!(compile("true").unwrap(), compile("false").unwrap());
    }
}
