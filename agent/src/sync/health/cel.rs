//! Health expressions in CEL (the `cel` crate, cel-rust), over `object`, the
//! live copy, as Kubernetes users write them for `x-kubernetes-validations`.
//!
//! What bounds a hostile expression: the rule's validation caps its length
//! (1 KiB); compiling (an ANTLR parser with no stack guard, hundreds of KiB
//! of stack for a trivial expression in a debug build) runs on a thread of
//! its own with a 32 MiB stack, once per distinct source (memoized), never on
//! the engine's task; evaluation recursion is bounded by the parsed tree;
//! the work of its loops and the size of what it builds by `cost`: an
//! estimate refused when it compiles, and a budget that stops an evaluation
//! (`budget`). An expression's result is
//! remembered per copy version (uid and resourceVersion), so a copy is
//! evaluated again only when it changed, not on every pass.
//! Absent, compared with Kubernetes CEL: the Kubernetes libraries
//! (`quantity()`, `url()`, `ip()`, `semver()`, ...), and a cost for reading
//! strings (see `cost`).
//!
//! Why cel-rust with a rewritten tree rather than another crate: the Rust
//! CEL crates looked at (cel-rust, formerly `cel-interpreter`; `rscel`)
//! document no cost accounting, and cel-go and cel-cpp, which have it, are
//! not Rust. cel-rust exposes its parsed tree, evaluates a tree given to it
//! (`Value::resolve`), and takes plain `fn` overloads in its environment:
//! all the budget needs (`cost`). An evaluation on a thread of its own,
//! abandoned at a deadline, would leave the thread running.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cel::common::ast::IdedExpr;
use cel::{Context, Env, Value as Cel};
use serde_json::Value;

use super::budget;
use super::cost;

/// Compiled programs by source; bounded so rule churn cannot grow it forever.
const MEMO_CAP: usize = 256;

/// Results remembered per expression: one per copy (the latest version of
/// each uid), so this bounds the copies one rule holds on a cluster whose
/// results are kept. Past it everything is forgotten at once, as the
/// compile memo does: simple, and only a rule with more copies here than
/// this evaluates some of them again.
const RESULTS_CAP: usize = 16_384;

/// Stack for the compiling thread (see the module docs).
const COMPILE_STACK: usize = 32 << 20;

/// How much of an expression a message quotes.
const EXCERPT: usize = 120;

/// Why an expression cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompileError {
    /// The parser refused it (its message; kept as text because compile
    /// results are memoized and the parser's error cannot be cloned).
    #[error("does not compile: {0}")]
    Parse(String),
    /// Its estimated cost is above the limit (see `cost`).
    #[error(
        "`{excerpt}` is too costly: its estimated cost is {estimate}, above the limit of {limit} (elements its loops walk; a list it does not write out counts as {assumed})",
        limit = cost::LIMIT,
        assumed = cost::ASSUMED_SIZE
    )]
    TooCostly {
        /// The start of the expression.
        excerpt: String,
        /// Its estimated cost.
        estimate: u64,
    },
    /// The compiling thread could not be started or died (its message).
    #[error("the CEL compiler failed: {0}")]
    Compiler(String),
}

/// Why an expression gave no boolean for a copy.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// Its loops walked, or its values held, more elements than one
    /// evaluation may, or it would build a string over the cap (see `cost`).
    #[error(
        "stopped: it would cost more than {limit} (elements its loops walk and values it builds, 100 bytes of string counting as one, a string over 1 MiB all of it), the budget of one evaluation",
        limit = cost::LIMIT
    )]
    BudgetExceeded,
    /// The interpreter failed (a missing field, no such overload, ...).
    #[error("does not evaluate")]
    Execution(#[source] cel::ExecutionError),
    /// The result is not a boolean.
    #[error("must be a bool, got a {got}")]
    NotBool {
        /// The result's type.
        got: String,
    },
}

/// A compiled expression, comparable by its source (rules compare equal
/// when their specs do).
#[derive(Clone)]
pub struct Expr {
    source: Arc<str>,
    /// The parsed tree, metered (`cost::metered`).
    tree: Arc<IdedExpr>,
    /// Shared by the clones of one compiled rule and dropped with it: no
    /// other rule, engine or test in the process sees its results (they are
    /// only as right as uids are unique, which test fixtures need not be).
    results: Arc<Mutex<Results>>,
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

impl Expr {
    /// The start of the source, for messages (bounded, whole characters).
    pub fn excerpt(&self) -> String {
        excerpt(&self.source)
    }

    /// How many times this expression was evaluated (not answered from
    /// what it remembers).
    #[cfg(test)]
    pub fn evaluations(&self) -> u64 {
        self.results.lock().map_or(0, |r| r.evaluations)
    }
}

fn excerpt(source: &str) -> String {
    match source.char_indices().nth(EXCERPT) {
        Some((cut, _)) => format!("{}…", &source[..cut]),
        None => source.to_owned(),
    }
}

/// The results of one expression, by copy uid: the resourceVersion they
/// are about and the result.
#[derive(Default)]
struct Results {
    by_uid: HashMap<String, (String, Result<bool, EvalError>)>,
    evaluations: u64,
}

fn env() -> &'static Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        // The strings extension only declares functions; it cannot fail on a
        // fresh stdlib env, and if it ever did the expressions using it would
        // fail to compile with a clear message, so its error is dropped.
        let _ = env.add_extension(cel::extensions::strings);
        // New names on a fresh env (each starts with `@`) cannot conflict.
        // If declaring one ever failed, every expression the rewrite passes
        // through it (a loop, a `+`, a literal, a function call) would fail
        // to evaluate (an undeclared function): nothing would run unmetered.
        let _ = cost::register(&mut env);
        Arc::new(env)
    })
}

/// What compiling a source gave: its metered tree, or why not.
type Compiled = Result<Arc<IdedExpr>, CompileError>;

fn memo() -> &'static Mutex<HashMap<String, Compiled>> {
    static MEMO: OnceLock<Mutex<HashMap<String, Compiled>>> = OnceLock::new();
    MEMO.get_or_init(Mutex::default)
}

/// Compiles `source`, or says why it cannot be used: it does not parse, or
/// its estimated cost is above the limit.
pub fn compile(source: &str) -> Result<Expr, CompileError> {
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
    result.map(|tree| Expr {
        source: source.into(),
        tree,
        results: Arc::default(),
    })
}

fn compile_on_big_stack(source: &str) -> Compiled {
    let owned = source.to_owned();
    let env = env().clone();
    let worker = std::thread::Builder::new()
        .name("cel-compile".into())
        .stack_size(COMPILE_STACK)
        // The estimate and the rewrite recurse over the tree as the parser
        // does: on this thread too.
        .spawn(move || {
            let program = env
                .compile(&owned)
                .map_err(|e| CompileError::Parse(e.to_string()))?;
            let estimate = cost::estimate(program.expression());
            if estimate > cost::LIMIT {
                return Err(CompileError::TooCostly {
                    excerpt: excerpt(&owned),
                    estimate,
                });
            }
            Ok(Arc::new(cost::metered(program.expression().clone())))
        });
    match worker {
        Ok(handle) => handle.join().unwrap_or_else(|_| {
            Err(CompileError::Compiler(
                "the CEL parser failed on this expression".to_owned(),
            ))
        }),
        Err(e) => Err(CompileError::Compiler(format!(
            "cannot start the CEL compiler thread: {e}"
        ))),
    }
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
    let result = evaluate(&expr.tree, object);
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

fn evaluate(tree: &IdedExpr, object: &Value) -> Result<bool, EvalError> {
    let mut ctx = Context::with_env(env().clone());
    ctx.add_variable_from_value("object", to_cel(object));
    let (result, spent) = budget::metering(|| Cel::resolve(tree, &ctx));
    if spent {
        return Err(EvalError::BudgetExceeded);
    }
    match result {
        Ok(Cel::Bool(b)) => Ok(b),
        Ok(other) => Err(EvalError::NotBool {
            got: other.type_of().to_string(),
        }),
        Err(e) => Err(EvalError::Execution(e)),
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
        assert_eq!(
            eval(&e, &json!({"spec": {}})),
            Err(EvalError::Execution(cel::ExecutionError::no_such_key(
                "status"
            )))
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

    /// Seven comprehensions nested over ten-element literals (ten million
    /// iterations on every evaluation: the expression that stalled a sink).
    fn seven_nested() -> String {
        let mut s = "g >= 0".to_owned();
        for v in ["g", "f", "e", "d", "c", "b", "a"] {
            s = format!("[0,1,2,3,4,5,6,7,8,9].all({v}, {s})");
        }
        s
    }

    #[test]
    fn what_cannot_fit_the_limit_does_not_compile() {
        let source = seven_nested();
        assert!(source.len() < 250, "{}", source.len());
        match compile(&source) {
            Err(CompileError::TooCostly { estimate, excerpt }) => {
                assert_eq!(estimate, 11_111_110);
                assert!(source.starts_with(excerpt.trim_end_matches('…')));
            }
            other => panic!("compiled: {other:?}"),
        }
        // What a health check usually is, and two loops nested over the
        // copy's lists, fit; three do not.
        for fits in [
            "object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')",
            "object.spec.containers.all(c, c.ports.all(p, p.containerPort > 0))",
        ] {
            assert!(compile(fits).is_ok(), "{fits}");
        }
        let three = "object.a.all(x, x.b.all(y, y.c.all(z, z > 0)))";
        assert!(matches!(
            compile(three),
            Err(CompileError::TooCostly {
                estimate: 1_010_100,
                ..
            })
        ));
    }

    /// An object whose list makes `object.spec.items.all(...)` walk more
    /// than the budget.
    fn big(items: usize) -> Value {
        json!({"metadata": {"uid": format!("u-{items}"), "resourceVersion": "1"},
               "spec": {"items": vec![1; items]}})
    }

    #[test]
    fn an_evaluation_over_its_budget_is_stopped() {
        let all = compile("object.spec.items.all(x, x >= 0)").unwrap();
        let huge = big(200_000);
        let started = std::time::Instant::now();
        assert_eq!(eval(&all, &huge), Err(EvalError::BudgetExceeded));
        // Stopped before its loop starts (the JSON's conversion is most of it).
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        // Within the estimate, over the budget: the outer loop stops about
        // a hundred iterations in, not a million.
        let pairs = compile("object.spec.items.all(x, object.spec.items.all(y, y == x))").unwrap();
        assert_eq!(eval(&pairs, &big(1_000)), Err(EvalError::BudgetExceeded));
        // Within both: 300 + 300 × 300 elements.
        assert_eq!(eval(&pairs, &big(300)), Ok(true));
        // A stopped loop stops the evaluation, though `error || true` is true.
        let absorbed = compile("object.spec.items.all(x, x >= 0) || true").unwrap();
        assert_eq!(eval(&absorbed, &huge), Err(EvalError::BudgetExceeded));
        // `in` walks its list: charged too.
        let scan = compile("object.spec.items.all(x, x in object.spec.items)").unwrap();
        assert_eq!(eval(&scan, &big(1_000)), Err(EvalError::BudgetExceeded));
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
    fn what_does_not_compile_says_why_and_is_remembered() {
        let e = compile("object.status.phase ==").unwrap_err();
        assert!(matches!(e, CompileError::Parse(_)), "{e:?}");
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
