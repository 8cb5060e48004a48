//! CEL as Kubernetes users write it (the `cel` crate, cel-rust) over JSON
//! values, with what keeps a hostile expression from running away: an
//! estimated cost refused when it compiles and a budget that stops an
//! evaluation (`cost` says how both count), as kube-apiserver bounds the CEL
//! of `x-kubernetes-validations`.
//!
//! Start at [`compile`], then [`Program::eval_bool`]. Used by the agent (a
//! rule's health expressions over `object`) and by the devcluster (a CRD's
//! validation rules over `self` and `oldSelf`, with the bounds its schema
//! gives them: [`compile_bounded`]; their `messageExpression`s:
//! [`Program::eval_string`]), so both bound the same way.
//!
//! What bounds a hostile expression: the caller caps its length; compiling
//! (an ANTLR parser with no stack guard, hundreds of KiB of stack for a
//! trivial expression in a debug build) runs on a thread of its own with a
//! 32 MiB stack, once per distinct source (memoized), never on the caller's
//! task; evaluation recursion is bounded by the parsed tree; the work of its
//! loops and the size of what it builds by `cost`. Absent, compared with
//! Kubernetes CEL: the Kubernetes libraries (`quantity()`, `url()`, `ip()`,
//! `semver()`, ...), and a cost for reading strings.
//!
//! Why cel-rust with a rewritten tree rather than another crate: the Rust
//! CEL crates looked at (cel-rust, formerly `cel-interpreter`; `rscel`)
//! document no cost accounting, and cel-go and cel-cpp, which have it, are
//! not Rust. cel-rust exposes its parsed tree, evaluates a tree given to it
//! (`Value::resolve`), and takes plain `fn` overloads in its environment:
//! all the budget needs. An evaluation on a thread of its own, abandoned at
//! a deadline, would leave the thread running.

mod budget;
mod built;
mod cost;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use cel::{Context, Env, Value as Cel};
use serde_json::Value;

pub use budget::LIMIT;
pub use built::{BYTES_PER_UNIT, MAX_STRING};
pub use cel::ExecutionError;
pub use cost::{Bounds, ASSUMED_SIZE};

/// Compiled programs by source; bounded so churn cannot grow it forever.
const MEMO_CAP: usize = 256;

/// Stack for the compiling thread (see the crate docs).
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
        limit = LIMIT,
        assumed = ASSUMED_SIZE
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

/// Why an expression gave no boolean.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// Its loops walked, or its values held, more elements than one
    /// evaluation may, or it would build a string over the cap (see `cost`).
    #[error(
        "stopped: it would cost more than {limit} (elements its loops walk and values it builds, 100 bytes of string counting as one, a string over 1 MiB all of it), the budget of one evaluation",
        limit = LIMIT
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
    /// The result is not a string ([`Program::eval_string`]).
    #[error("must be a string, got a {got}")]
    NotString {
        /// The result's type.
        got: String,
    },
}

/// A compiled expression, comparable by its source.
#[derive(Clone)]
pub struct Program {
    source: Arc<str>,
    /// The parsed tree, metered (`cost::metered`).
    tree: Arc<IdedExpr>,
}

impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Program").field(&self.source).finish()
    }
}

impl PartialEq for Program {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Program {
    /// The start of the source, for messages (bounded, whole characters).
    pub fn excerpt(&self) -> String {
        excerpt(&self.source)
    }

    /// Whether the expression names the variable `name` anywhere (a CRD
    /// rule naming `oldSelf` is a transition rule).
    pub fn mentions(&self, name: &str) -> bool {
        mentions(&self.tree, name)
    }

    /// Evaluates the program with `vars` bound (JSON as Kubernetes CEL sees
    /// it): its boolean, or why it has none. Stopped once its budget is
    /// spent.
    pub fn eval_bool(&self, vars: &[(&str, &Value)]) -> Result<bool, EvalError> {
        match self.eval(vars)? {
            Cel::Bool(b) => Ok(b),
            other => Err(EvalError::NotBool {
                got: other.type_of().to_string(),
            }),
        }
    }

    /// Like [`Program::eval_bool`], for an expression that makes a string
    /// (a CRD rule's `messageExpression`), with a budget of its own.
    pub fn eval_string(&self, vars: &[(&str, &Value)]) -> Result<String, EvalError> {
        match self.eval(vars)? {
            Cel::String(s) => Ok(s.to_string()),
            other => Err(EvalError::NotString {
                got: other.type_of().to_string(),
            }),
        }
    }

    fn eval(&self, vars: &[(&str, &Value)]) -> Result<Cel, EvalError> {
        let mut ctx = Context::with_env(env().clone());
        for (name, value) in vars {
            ctx.add_variable_from_value(*name, to_cel(value));
        }
        let (result, spent) = budget::metering(|| Cel::resolve(&self.tree, &ctx));
        if spent {
            return Err(EvalError::BudgetExceeded);
        }
        result.map_err(EvalError::Execution)
    }
}

fn mentions(e: &IdedExpr, name: &str) -> bool {
    let entry = |entry: &cel::common::ast::IdedEntryExpr| match &entry.expr {
        EntryExpr::MapEntry(m) => mentions(&m.key, name) || mentions(&m.value, name),
        EntryExpr::StructField(f) => mentions(&f.value, name),
    };
    match &e.expr {
        Expr::Ident(n) => n == name,
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .any(|e| mentions(e, name)),
        Expr::Comprehension(c) => [
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ]
        .into_iter()
        .any(|e| mentions(e, name)),
        Expr::List(l) => l.elements.iter().any(|e| mentions(e, name)),
        Expr::Map(m) => m.entries.iter().any(entry),
        Expr::Struct(s) => s.entries.iter().any(entry),
        Expr::Select(s) => mentions(&s.operand, name),
        Expr::Literal(_) | Expr::Unspecified => false,
    }
}

fn excerpt(source: &str) -> String {
    match source.char_indices().nth(EXCERPT) {
        Some((cut, _)) => format!("{}…", &source[..cut]),
        None => source.to_owned(),
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

/// A source and the bounds its estimate was given (none for [`compile`]).
type MemoKey = (String, Vec<(String, Bounds)>);

fn memo() -> &'static Mutex<HashMap<MemoKey, Compiled>> {
    static MEMO: OnceLock<Mutex<HashMap<MemoKey, Compiled>>> = OnceLock::new();
    MEMO.get_or_init(Mutex::default)
}

/// Compiles `source`, or says why it cannot be used: it does not parse, or
/// its estimated cost is above [`LIMIT`].
pub fn compile(source: &str) -> Result<Program, CompileError> {
    compile_bounded(source, &[])
}

/// [`compile`], with an estimate that knows the bounds of the variables
/// `vars` (a CRD's rule: `self` and `oldSelf` as its schema bounds them).
pub fn compile_bounded(source: &str, vars: &[(&str, &Bounds)]) -> Result<Program, CompileError> {
    let key: MemoKey = (
        source.to_owned(),
        vars.iter()
            .map(|(n, b)| ((*n).to_owned(), (*b).clone()))
            .collect(),
    );
    // A std Mutex: held for a lookup or an insert, never across a compile.
    let cached = memo().lock().ok().and_then(|m| m.get(&key).cloned());
    let result = match cached {
        Some(r) => r,
        None => {
            let r = compile_on_big_stack(source, key.1.clone());
            if let Ok(mut m) = memo().lock() {
                if m.len() >= MEMO_CAP {
                    m.clear();
                }
                m.insert(key, r.clone());
            }
            r
        }
    };
    result.map(|tree| Program {
        source: source.into(),
        tree,
    })
}

fn compile_on_big_stack(source: &str, vars: Vec<(String, Bounds)>) -> Compiled {
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
            let estimate = cost::estimate(program.expression(), &vars);
            if estimate > LIMIT {
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
        assert_eq!(
            all.eval_bool(&[("object", &huge)]),
            Err(EvalError::BudgetExceeded)
        );
        // Stopped before its loop starts (the JSON's conversion is most of it).
        assert!(
            started.elapsed() < std::time::Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        // Within the estimate, over the budget: the outer loop stops about
        // a hundred iterations in, not a million.
        let pairs = compile("object.spec.items.all(x, object.spec.items.all(y, y == x))").unwrap();
        assert_eq!(
            pairs.eval_bool(&[("object", &big(1_000))]),
            Err(EvalError::BudgetExceeded)
        );
        // Within both: 300 + 300 × 300 elements.
        assert_eq!(pairs.eval_bool(&[("object", &big(300))]), Ok(true));
        // A stopped loop stops the evaluation, though `error || true` is true.
        let absorbed = compile("object.spec.items.all(x, x >= 0) || true").unwrap();
        assert_eq!(
            absorbed.eval_bool(&[("object", &huge)]),
            Err(EvalError::BudgetExceeded)
        );
        // `in` walks its list: charged too.
        let scan = compile("object.spec.items.all(x, x in object.spec.items)").unwrap();
        assert_eq!(
            scan.eval_bool(&[("object", &big(1_000))]),
            Err(EvalError::BudgetExceeded)
        );
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
                        let _ = e.eval_bool(&[("object", &serde_json::json!({}))]);
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

    #[test]
    fn a_string_expression_gives_its_string_within_a_budget() {
        let self_ = json!({"name": "web", "items": vec![1; 200_000]});
        let vars: &[(&str, &Value)] = &[("self", &self_)];
        let msg = compile("'name ' + self.name + ' is taken'").unwrap();
        assert_eq!(msg.eval_string(vars), Ok("name web is taken".to_owned()));
        assert_eq!(
            compile("size(self.name)").unwrap().eval_string(vars),
            Err(EvalError::NotString {
                got: "int".to_owned()
            })
        );
        assert!(matches!(
            compile("self.missing").unwrap().eval_string(vars),
            Err(EvalError::Execution(_))
        ));
        assert_eq!(
            compile("self.items.map(x, string(x)).join(',')")
                .unwrap()
                .eval_string(vars),
            Err(EvalError::BudgetExceeded)
        );
    }

    #[test]
    fn bounds_admit_what_they_keep_small_and_are_remembered_apart() {
        let three = "self.a.all(x, x.a.all(y, y.a.all(z, z > 0)))";
        assert!(matches!(
            compile(three),
            Err(CompileError::TooCostly { .. })
        ));
        // Lists of at most 10, three deep.
        let mut bounds = Bounds::default();
        for _ in 0..3 {
            let mut list = Bounds {
                max_elements: Some(10),
                ..Bounds::default()
            };
            list.items = Some(Box::new(bounds));
            bounds = Bounds::default();
            bounds.fields.insert("a".to_owned(), list);
        }
        let program = compile_bounded(three, &[("self", &bounds)]).unwrap();
        let value = json!({"a": [{"a": [{"a": [1, 2]}]}]});
        assert_eq!(program.eval_bool(&[("self", &value)]), Ok(true));
        // The unbounded compile is still refused: each is remembered with its bounds.
        assert!(compile(three).is_err());
    }
}
