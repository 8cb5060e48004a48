//! What the values an evaluation builds cost: the functions whose result
//! can outgrow their inputs, measured before they build it, and every other
//! result and copy charged by its size (see `cost` for the model).

use cel::common::ast::{operators, CallExpr, Expr, IdedExpr};
use cel::common::types::{CelBytes, CelInt, CelString, Kind, DYN_TYPE};
use cel::common::value::{CowVal, Val};
use cel::objects::Value;
use cel::{DeclarationError, Env, ExecutionError};

use crate::budget;

/// The longest string (or bytes) an evaluation may build, whatever is left
/// of its budget: the budget alone would let one string reach 10 MB. A
/// health check compares names, phases and conditions, far below this.
pub const MAX_STRING: usize = 1 << 20;

/// Bytes of a string that cost as much as one value (one element, one
/// iteration). Kubernetes charges a tenth of a unit per byte traversed; a
/// unit here is a whole iteration, heavier than one of cel-go's steps, so
/// the ratio is coarser. With it the budget is some 10 MB of strings built.
pub const BYTES_PER_UNIT: u64 = 100;

/// `_+_`, measured before it adds (the interpreter adds itself, outside the
/// function table, so the rewrite renames the call to this).
const ADD: &str = "@fleetbus_add";
/// A value copied into a list or map literal or a `map`/`filter` result.
const COPY: &str = "@fleetbus_copy";
/// The result of any other function, charged once built.
const MADE: &str = "@fleetbus_made";
/// `string.replace`, measured before it builds.
const REPLACE: &str = "@fleetbus_replace";
/// `list.join`, measured before it builds.
const JOIN: &str = "@fleetbus_join";
/// `strings.quote`, measured before it builds.
const QUOTE: &str = "@fleetbus_quote";

/// The accumulator of the `map` and `filter` macros: `@result + [x]` is the
/// step the interpreter runs in place (appending to one list), so it is
/// left as it is and only `x` is charged, as a copy.
const ACCUMULATOR: &str = "@result";

/// Declares the meters and the measured functions in `env`.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    // Any argument types: each function checks its own, and says so in the
    // name the expression wrote.
    let any = |n: usize| (0..n).map(|_| DYN_TYPE).collect::<Vec<_>>();
    env.add_overload(ADD, ADD, any(2), add)?;
    env.add_overload(COPY, COPY, any(1), copy)?;
    env.add_overload(MADE, MADE, any(1), made)?;
    env.add_overload(REPLACE, REPLACE, any(3), replace)?;
    env.add_overload(REPLACE, "@fleetbus_replace_n", any(4), replace)?;
    env.add_overload(JOIN, JOIN, any(1), join)?;
    env.add_overload(JOIN, "@fleetbus_join_sep", any(2), join)?;
    env.add_overload(QUOTE, QUOTE, any(1), quote)
}

/// Rewrites the call `e` (its operands already rewritten): a function whose
/// result can outgrow its inputs to its measured version, `+` to the
/// measured add, any other function's result through the result meter.
/// Operators other than `+` (comparisons, `&&`, indexing, ...) build
/// nothing larger than what they are given and are left as they are.
pub fn rewrite_call(e: &mut IdedExpr) {
    let Expr::Call(call) = &mut e.expr else {
        return;
    };
    let measured = match (
        call.func_name.as_str(),
        call.target.as_deref(),
        call.args.len(),
    ) {
        (operators::ADD, None, 2) if !is_append(&call.args) => Some(ADD),
        ("replace", Some(_), 2 | 3) => Some(REPLACE),
        ("join", Some(_), 0 | 1) => Some(JOIN),
        (
            "quote",
            Some(IdedExpr {
                expr: Expr::Ident(ns),
                ..
            }),
            1,
        ) if ns == "strings" => {
            call.target = None;
            Some(QUOTE)
        }
        _ => None,
    };
    if let Some(function) = measured {
        // A member call becomes a global one taking its target first, as the
        // interpreter passes it to a member overload.
        if let Some(target) = call.target.take() {
            call.args.insert(0, *target);
        }
        function.clone_into(&mut call.func_name);
    } else if call
        .func_name
        .starts_with(|c: char| c.is_ascii_alphabetic())
    {
        wrap(e, MADE);
    }
}

/// `@result + [x]`: the `map`/`filter` step (see [`ACCUMULATOR`]).
fn is_append(args: &[IdedExpr]) -> bool {
    matches!(&args[0].expr, Expr::Ident(name) if name == ACCUMULATOR)
        && matches!(args[1].expr, Expr::List(_))
}

/// Passes the element or entry `e` of a literal through the copy meter: the
/// interpreter copies what it puts in a list or map it builds. A literal
/// constant is not metered: the source bounds it.
pub fn meter_copy(e: &mut IdedExpr) {
    if !matches!(e.expr, Expr::Literal(_)) {
        wrap(e, COPY);
    }
}

/// Replaces `e` by `function(e)` (the call takes `e`'s id: ids only locate
/// nodes in the source, and the call stands where `e` was written).
pub fn wrap(e: &mut IdedExpr, function: &str) {
    let inner = std::mem::take(e);
    *e = IdedExpr {
        id: inner.id,
        expr: Expr::Call(CallExpr {
            func_name: function.to_owned(),
            target: None,
            args: vec![inner],
        }),
    };
}

/// The size of `v` in units: one for itself and for each element, key and
/// value it holds, and one per [`BYTES_PER_UNIT`] of a string or bytes.
/// Measured no further than just past `limit`: a value that large is not
/// paid for anyway, and so measuring one costs no more than the budget.
pub fn units(v: &dyn Val, limit: u64) -> u64 {
    let mut total = 0;
    measure(v, limit, &mut total);
    total
}

/// The size of the elements of a list (or the keys of a map): what a loop
/// over it copies, one element at a time, into its variable.
pub fn units_of_elements(v: &dyn Val, limit: u64) -> u64 {
    let mut total = 0;
    if let Some(items) = v.as_iterable() {
        let mut items = items.iter();
        while let Some(item) = items.next() {
            if total > limit {
                break;
            }
            measure(item, limit, &mut total);
        }
    }
    total
}

fn measure(v: &dyn Val, limit: u64, total: &mut u64) {
    if *total > limit {
        return;
    }
    *total = total.saturating_add(1);
    match v.get_type().kind() {
        Kind::String | Kind::Bytes => {
            *total = total.saturating_add(bytes(text_len(v)));
        }
        Kind::List | Kind::Map => {
            let (Some(items), indexer) = (v.as_iterable(), v.as_indexer()) else {
                return;
            };
            let mut items = items.iter();
            while let Some(item) = items.next() {
                if *total > limit {
                    return;
                }
                measure(item, limit, total);
                // A map iterates its keys: its values are looked up.
                if let Some(value) = indexer.and_then(|m| m.get(item).ok()) {
                    measure(value.as_ref(), limit, total);
                }
            }
        }
        _ => {}
    }
}

/// The length in bytes of a string or bytes (0 for anything else).
fn text_len(v: &dyn Val) -> usize {
    match v.downcast_ref::<CelString<'_>>() {
        Some(s) => s.len(),
        None => v
            .downcast_ref::<CelBytes<'_>>()
            .map_or(0, |b| b.inner().len()),
    }
}

/// Units of `len` bytes of string.
fn bytes(len: usize) -> u64 {
    u64::try_from(len).unwrap_or(u64::MAX) / BYTES_PER_UNIT
}

/// Charges a string of `len` bytes about to be built (and `read` bytes
/// read to build it), or refuses it above [`MAX_STRING`].
fn spend_string(len: usize, read: usize, function: &str) -> Result<(), ExecutionError> {
    if len > MAX_STRING {
        return Err(budget::refuse(function));
    }
    budget::spend(1 + bytes(len) + bytes(read), function)
}

fn exactly<'b, 'v, const N: usize>(
    args: Vec<CowVal<'b, 'v>>,
) -> Result<[CowVal<'b, 'v>; N], ExecutionError> {
    let count = args.len();
    args.try_into()
        .map_err(|_| ExecutionError::invalid_argument_count(N, count))
}

fn no_overload(function: &str, args: &[CowVal<'_, '_>]) -> ExecutionError {
    let types = args
        .iter()
        .map(|a| a.get_type().name().to_owned())
        .collect();
    ExecutionError::no_such_overload(function, types)
}

fn string<'a>(v: &'a CowVal<'_, '_>) -> Option<&'a str> {
    v.downcast_ref::<CelString<'_>>().map(|s| s.inner())
}

/// `a + b`, charged the size of the sum before it is built: both sides are
/// copied into it (a list's elements deeply).
fn add<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [lhs, rhs] = exactly(args)?;
    match (lhs.get_type().kind(), rhs.get_type().kind()) {
        (Kind::String, Kind::String) | (Kind::Bytes, Kind::Bytes) => {
            let len = text_len(lhs.as_ref()).saturating_add(text_len(rhs.as_ref()));
            spend_string(len, 0, "+")?;
        }
        (Kind::List, Kind::List) => {
            let limit = budget::left();
            let units = units_of_elements(lhs.as_ref(), limit)
                .saturating_add(units_of_elements(rhs.as_ref(), limit));
            budget::spend(units.saturating_add(1), "+")?;
        }
        // Numbers, durations, timestamps: a value of fixed size.
        _ => {}
    }
    let Some(adder) = lhs.as_adder() else {
        // What the interpreter says of a `+` it cannot do.
        return Err(ExecutionError::UnsupportedBinaryOperator(
            "add",
            Value::try_from(lhs.as_ref()).unwrap_or(Value::Null),
            Value::try_from(rhs.as_ref()).unwrap_or(Value::Null),
        ));
    };
    let sum = adder.add(rhs.as_ref())?.into_owned();
    Ok(CowVal::Owned(sum))
}

/// A value about to be copied into a literal or a `map`/`filter` result:
/// a borrowed one (a field of `object`, a loop's variable) is copied whole,
/// so charged its size; an owned one is moved, and was charged when built.
fn copy<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [value] = exactly(args)?;
    if let CowVal::Borrowed(v) = &value {
        budget::spend(units(*v, budget::left()), "copy")?;
    }
    Ok(value)
}

/// Any other function's result, charged its size once built (one unit for
/// a scalar or a borrowed value). The functions that build a value larger
/// than their inputs are measured before (`+`, `replace`, `join`,
/// `strings.quote`); those left build at most a small multiple of theirs
/// (`format`, `split`, see `cost`), so the cap and the budget stop the next
/// step, not this one.
fn made<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let [value] = exactly(args)?;
    let units = match &value {
        CowVal::Borrowed(_) => 1,
        CowVal::Owned(v) => {
            if text_len(v.as_ref()) > MAX_STRING {
                return Err(budget::refuse("result"));
            }
            units(v.as_ref(), budget::left())
        }
    };
    budget::spend(units, "result")?;
    Ok(value)
}

/// `s.replace(from, to)` and `s.replace(from, to, n)` as the strings
/// extension does them (`str::replace`, `str::replacen`; `n` negative for
/// all), the length of the result counted before it is built.
fn replace<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let limit = match args.get(3) {
        None => None,
        Some(n) => match n.downcast_ref::<CelInt>() {
            Some(n) => Some(usize::try_from(*n.inner()).ok()),
            None => return Err(no_overload("replace", &args)),
        },
    };
    let (Some(s), Some(from), Some(to)) = (
        args.first().and_then(string),
        args.get(1).and_then(string),
        args.get(2).and_then(string),
    ) else {
        return Err(no_overload("replace", &args));
    };
    let all = s.matches(from).count();
    let count = match limit {
        Some(Some(n)) => all.min(n),
        Some(None) | None => all,
    };
    // `count` matches of `from` are in `s`: this cannot underflow.
    let len = (s.len() - count * from.len()).saturating_add(count.saturating_mul(to.len()));
    spend_string(len, s.len(), "replace")?;
    let replaced = match limit {
        Some(Some(n)) => s.replacen(from, to, n),
        Some(None) | None => s.replace(from, to),
    };
    Ok(CowVal::owned(CelString::from(replaced)))
}

/// `list.join()` and `list.join(sep)`, the length counted before building.
fn join<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let sep = match args.get(1) {
        None => "",
        Some(sep) => string(sep).ok_or_else(|| no_overload("join", &args))?,
    };
    let list = args
        .first()
        .and_then(|l| l.as_iterable())
        .ok_or_else(|| no_overload("join", &args))?;
    let mut parts = Vec::new();
    let mut items = list.iter();
    while let Some(item) = items.next() {
        let part =
            item.downcast_ref::<CelString<'_>>()
                .ok_or_else(|| ExecutionError::UnexpectedType {
                    got: item.get_type().name().to_owned(),
                    want: "string".to_owned(),
                })?;
        parts.push(part.inner());
    }
    let seps = parts.len().saturating_sub(1).saturating_mul(sep.len());
    let len = parts
        .iter()
        .map(|p| p.len())
        .fold(seps, usize::saturating_add);
    spend_string(len, 0, "join")?;
    Ok(CowVal::owned(CelString::from(parts.join(sep))))
}

/// `strings.quote(s)` as the strings extension writes it, its length
/// counted before it is built (each escape is two bytes for one).
fn quote<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let Some(s) = args.first().and_then(string) else {
        return Err(no_overload("strings.quote", &args));
    };
    let escapes = s.chars().filter(|&c| escape(c).is_some()).count();
    spend_string(
        s.len().saturating_add(escapes).saturating_add(2),
        s.len(),
        "strings.quote",
    )?;
    let mut quoted = String::with_capacity(s.len() + escapes + 2);
    quoted.push('"');
    for c in s.chars() {
        match escape(c) {
            Some(escaped) => quoted.push_str(escaped),
            None => quoted.push(c),
        }
    }
    quoted.push('"');
    Ok(CowVal::owned(CelString::from(quoted)))
}

/// How `strings.quote` escapes `c`, if it does.
fn escape(c: char) -> Option<&'static str> {
    Some(match c {
        '\x07' => "\\a",
        '\x08' => "\\b",
        '\x0c' => "\\f",
        '\n' => "\\n",
        '\r' => "\\r",
        '\t' => "\\t",
        '\x0b' => "\\v",
        '\\' => "\\\\",
        '"' => "\\\"",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use cel::{Context, Value as Cel};
    use serde_json::{json, Value as Json};

    use crate::{compile, EvalError};

    fn run(source: &str, object: &Json) -> Result<bool, EvalError> {
        compile(source).unwrap().eval_bool(&[("object", object)])
    }

    /// The process's peak resident set, in bytes (Linux's `VmHWM`).
    fn peak_rss() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }

    /// Runs `source` over `object`, expecting it stopped: quickly, and
    /// without the memory its values would take.
    fn stopped(source: &str, object: &Json) {
        let (before, started) = (peak_rss(), Instant::now());
        let result = run(source, object);
        let (took, grew) = (started.elapsed(), peak_rss().saturating_sub(before));
        assert_eq!(result, Err(EvalError::BudgetExceeded), "{source:.80}");
        assert!(took < Duration::from_secs(2), "{source:.80} took {took:?}");
        // Other tests run alongside: a bound well below what the value
        // would take (100 MB at least), above what they may add meanwhile.
        assert!(grew < 64 << 20, "{source:.80}: peak grew by {grew} bytes");
    }

    /// `'aaaaaaaaaa'` with each `a` made ten, `depth` times over: 10^(depth+1) bytes.
    fn nested_replace(depth: usize) -> String {
        let mut s = "'aaaaaaaaaa'".to_owned();
        for _ in 0..depth {
            s = format!("{s}.replace('a', 'aaaaaaaaaa')");
        }
        format!("{s}.size() > 0")
    }

    #[test]
    fn growing_strings_are_stopped_before_they_are_built() {
        // Five levels make 1 MB (under the cap, within the budget).
        assert_eq!(run(&nested_replace(5), &json!({})), Ok(true));
        // Six would make 10 MB (built in 11 ms before), seven 100 MB, nine 10 GB.
        let seven = nested_replace(7);
        stopped(&seven, &json!({}));
        let nine = nested_replace(9);
        assert!(
            nine.len() < 1024,
            "longer than a rule allows: {}",
            nine.len()
        );
        stopped(&nine, &json!({}));
        // `strings.quote` doubles a string of quotes at each level: from a
        // thousand, seventeen levels would make 128 MB.
        let mut quoted = "object.metadata.name".to_owned();
        for _ in 0..17 {
            quoted = format!("strings.quote({quoted})");
        }
        let quotes = json!({"metadata": {"name": "\"".repeat(1000)}});
        stopped(&format!("{quoted}.size() > 0"), &quotes);
        // A long separator between many short strings: 10 MB.
        let many = json!({"spec": {"items": vec!["a"; 20_000]}});
        let sep = "-".repeat(500);
        stopped(
            &format!("object.spec.items.join('{sep}').size() > 0"),
            &many,
        );
    }

    #[test]
    fn copies_of_large_values_are_charged() {
        // A 100 KB field copied per item of a 200-item list: 20 MB.
        let copy = json!({"metadata": {"name": "x".repeat(100_000)},
                          "spec": {"items": vec![1; 200]}});
        stopped("object.spec.items.map(x, object).size() > 0", &copy);
        // A 500 KB field copied by a list literal: fifty references, 25 MB.
        let half = json!({"metadata": {"name": "x".repeat(500_000)}});
        let refs = vec!["object"; 50].join(", ");
        stopped(&format!("[{refs}].size() > 0"), &half);
        // And by a loop's variable, element by element: 200 elements of
        // 100 KB walked by each of 200 iterations, 4 GB of copies.
        let big_items = json!({"spec": {"items": vec!["x".repeat(100_000); 200]}});
        stopped(
            "object.spec.items.all(x, object.spec.items.all(y, y == x))",
            &big_items,
        );
    }

    #[test]
    fn what_health_checks_do_still_works() {
        let object = json!({
            "metadata": {"name": "WEB-1", "namespace": "prod"},
            "spec": {"items": ["a", "b"], "replicas": 3},
            "status": {"conditions": [{"type": "Available", "status": "True"}]},
        });
        for source in [
            "object.metadata.name.lowerAscii().startsWith('web')",
            "object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')",
            "object.metadata.name + '/' + object.metadata.namespace == 'WEB-1/prod'",
            "object.spec.items + ['c'] == ['a', 'b', 'c'] && object.spec.replicas + 1 == 4",
            "object.spec.items.map(x, x + '!') == ['a!', 'b!']",
            "object.spec.items.filter(x, x != 'a') == ['b']",
            "{'n': object.metadata.name}.n == 'WEB-1' && [object.spec.items][0][1] == 'b'",
            "object.spec.items.join() == 'ab' && object.spec.items.join('-') == 'a-b'",
            "object.metadata.name.replace('-', '_') == 'WEB_1'",
            "'aaa'.replace('a', 'b', 2) == 'bba' && 'aaa'.replace('a', 'b', -1) == 'bbb'",
            "'abc'.replace('', '-') == '-a-b-c-'",
            "strings.quote('a\"b\\n') == '\"a\\\\\"b\\\\n\"'",
            "'%s-%d'.format([object.metadata.namespace, 2]) == 'prod-2'",
            "'a,b'.split(',') == object.spec.items && size(object.spec.items) == 2",
            "b'ab' + b'c' == b'abc'",
        ] {
            assert_eq!(run(source, &object), Ok(true), "{source}");
        }
        // Wrong types still fail as evaluations, naming the function.
        for wrong in [
            "object.spec.replicas.replace('a', 'b') == ''",
            "object.spec.replicas.join() == ''",
            "[1, 2].join() == ''",
            "strings.quote(1) == ''",
            "object.spec.items + 1 == []",
        ] {
            assert!(
                matches!(run(wrong, &object), Err(EvalError::Execution(_))),
                "{wrong}"
            );
        }
    }

    #[test]
    fn measured_functions_give_what_the_strings_extension_gives() {
        let mut env = cel::Env::stdlib();
        env.add_extension(cel::extensions::strings).unwrap();
        let env = Arc::new(env);
        let tricky = "a\"b\\c\nd\re\tf\u{7}\u{8}\u{b}\u{c}é€😀 aa";
        for source in [
            "strings.quote(object.s)",
            "object.s.replace('a', 'xyz')",
            "object.s.replace('', '.')",
            "object.s.replace('a', '', 1)",
            "object.s.replace('a', 'b', 0)",
            "[object.s, object.s, ''].join()",
            "[object.s, object.s].join(', ')",
        ] {
            // The strings extension's own, unmetered.
            let mut ctx = Context::with_env(env.clone());
            let object = HashMap::from([("s".to_owned(), Cel::from(tricky))]);
            ctx.add_variable_from_value("object", object);
            let Ok(Cel::String(expected)) = env.compile(source).unwrap().execute(&ctx) else {
                panic!("{source} gave no string");
            };
            let object = json!({"s": tricky, "expected": *expected});
            assert_eq!(
                run(&format!("{source} == object.expected"), &object),
                Ok(true),
                "{source}"
            );
        }
    }
}
