//! What a health expression may cost: an estimate refused above [`LIMIT`]
//! when it compiles, and the same limit as a budget that stops an evaluation.
//!
//! As Kubernetes does for its CEL (an estimated cost checked at admission, a
//! runtime cost limit), in a coarser unit: the elements walked by loops,
//! which multiply when nested. The `cel` crate's loops are comprehensions
//! (`all`, `exists`, `exists_one`, `map`, `filter`) and `in` over a list.
//!
//! The estimate, over the parsed tree:
//! - a comprehension costs `size(range) × (1 + cost(loop_cond) +
//!   cost(loop_step)) + cost(range) + cost(accu_init) + cost(result)`: every
//!   iteration counts once, and nested loops multiply;
//! - `x in l` costs `size(l)` besides its operands (a scan of a list);
//! - anything else costs what its operands cost;
//! - `size` is a list or map literal's length, a `map`/`filter`'s range's
//!   size, the sum for `+`, the larger branch for `?:`, and
//!   [`ASSUMED_SIZE`] for anything else (a field of `object`, a function's
//!   result): the expression cannot know how long a list of the copy is.
//!
//! So `object.status.conditions.exists(c, c.type == 'Available')` is
//! estimated at 100, two comprehensions nested over lists of `object`
//! (`a.all(x, b.all(y, …))`) at 10,100 (admitted), three at 1,010,100
//! (refused), and seven nested over 10-element literals at 11,111,110
//! (refused).
//!
//! At run time the copy's lists are as long as they are. Every comprehension's
//! range and every `in`'s right-hand side is passed through a function this
//! module registers ([`metered`] rewrites the tree, [`register`] declares
//! it), which charges the value's size to the evaluation's budget and fails
//! once [`LIMIT`] is spent; [`metering`] runs one evaluation and says whether
//! it spent the budget. A range is charged in full when it is evaluated,
//! whether or not the loop stops early: an upper bound, as the estimate is,
//! and one that gives the same verdict whatever the order of the elements.
//! The rewrite leaves a comprehension's loop step, condition and result as
//! they were, so the interpreter's fast path for `map`/`filter` (appending to
//! one list instead of copying it each iteration) still applies.
//!
//! Not charged, so not bounded here: the size of what an iteration computes.
//! Most functions are linear in what they are given (`contains`, `matches`,
//! comparing two lists), but `replace` and `strings.quote` can multiply a
//! string's length at each nesting (six nested `replace` make 10 MB out of a
//! 10-character literal), and `map` copies what it appends
//! (`object.spec.items.map(x, object)` copies the whole copy per item).
//! Bounding those needs value sizes in the cost, as Kubernetes estimates
//! string and list sizes.

use std::cell::Cell;

use cel::common::ast::{operators, CallExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr};
use cel::common::types::{Kind, DYN_TYPE};
use cel::common::value::CowVal;
use cel::{DeclarationError, Env, ExecutionError};

/// The most an expression may cost, estimated when it compiles and spent
/// when it runs: elements walked. Ten million iterations of nested `all`
/// took a sink 2.4–4.5 s, so this is some 25–45 ms of one core: a pass
/// that judges a hundred changed copies at once still takes seconds, not
/// minutes, and an unchanged copy is not judged again (see `cel`'s memo).
pub const LIMIT: u64 = 100_000;

/// Elements the estimate assumes of a list it cannot see. Kubernetes takes
/// the bound from the schema's `maxItems`; a rule has no schema for its
/// copies, so the bound is a typical one, low enough that two nested loops
/// over a copy's lists are admitted (containers × ports) and the run-time
/// budget stops the copy whose lists are longer.
pub const ASSUMED_SIZE: u64 = 100;

/// The function each comprehension's range is passed through. No expression
/// can call it: `@` cannot start a name in CEL source.
const RANGE: &str = "@fleetbus_range";

/// The function `in`'s right-hand side is passed through (charges lists
/// only: `in` over a map is a lookup).
const SCAN: &str = "@fleetbus_scan";

/// The estimated cost of `e` (see the module docs), saturating.
pub fn estimate(e: &IdedExpr) -> u64 {
    match &e.expr {
        Expr::Comprehension(c) => {
            let per_item = estimate(&c.loop_cond)
                .saturating_add(estimate(&c.loop_step))
                .saturating_add(1);
            size(&c.iter_range)
                .saturating_mul(per_item)
                .saturating_add(estimate(&c.iter_range))
                .saturating_add(estimate(&c.accu_init))
                .saturating_add(estimate(&c.result))
        }
        Expr::Call(call) if is_in(call) => operands(&e.expr)
            .into_iter()
            .map(estimate)
            .fold(size(&call.args[1]), u64::saturating_add),
        other => operands(other)
            .into_iter()
            .map(estimate)
            .fold(0, u64::saturating_add),
    }
}

/// How many elements the estimate gives the value of `e` (see the module docs).
fn size(e: &IdedExpr) -> u64 {
    match &e.expr {
        Expr::List(l) => len(l.elements.len()),
        Expr::Map(m) => len(m.entries.len()),
        // `map` and `filter`: at most one element per iteration.
        Expr::Comprehension(c) if builds_list(&c.accu_init, &c.result, &c.accu_var) => {
            size(&c.iter_range)
        }
        Expr::Call(call) if call.target.is_none() => {
            match (call.func_name.as_str(), &call.args[..]) {
                (operators::ADD, [a, b]) => size(a).saturating_add(size(b)),
                (operators::CONDITIONAL, [_, a, b]) => size(a).max(size(b)),
                _ => ASSUMED_SIZE,
            }
        }
        _ => ASSUMED_SIZE,
    }
}

fn len(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// Whether a comprehension builds a list: it starts from `[]` and is its
/// accumulator (the shape of the `map` and `filter` macros).
fn builds_list(init: &IdedExpr, result: &IdedExpr, accu: &str) -> bool {
    matches!(&init.expr, Expr::List(l) if l.elements.is_empty())
        && matches!(&result.expr, Expr::Ident(name) if name == accu)
}

fn is_in(call: &CallExpr) -> bool {
    call.func_name == operators::IN && call.target.is_none() && call.args.len() == 2
}

/// The expressions `e` is made of, one level down.
fn operands(e: &Expr) -> Vec<&IdedExpr> {
    match e {
        Expr::Call(call) => call
            .target
            .as_deref()
            .into_iter()
            .chain(&call.args)
            .collect(),
        Expr::Comprehension(c) => vec![
            &c.iter_range,
            &c.accu_init,
            &c.loop_cond,
            &c.loop_step,
            &c.result,
        ],
        Expr::List(l) => l.elements.iter().collect(),
        Expr::Map(m) => entries(&m.entries),
        Expr::Struct(s) => entries(&s.entries),
        Expr::Select(s) => vec![&s.operand],
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => Vec::new(),
    }
}

fn entries(entries: &[IdedEntryExpr]) -> Vec<&IdedExpr> {
    entries
        .iter()
        .flat_map(|entry| match &entry.expr {
            EntryExpr::MapEntry(m) => vec![&m.key, &m.value],
            EntryExpr::StructField(f) => vec![&f.value],
        })
        .collect()
}

/// `e` with every comprehension's range passed through the range meter and
/// every `in`'s right-hand side through the scan meter (see the module docs).
pub fn metered(mut e: IdedExpr) -> IdedExpr {
    meter(&mut e);
    e
}

fn meter(e: &mut IdedExpr) {
    match &mut e.expr {
        Expr::Call(call) => {
            let in_list = is_in(call);
            if let Some(target) = call.target.as_deref_mut() {
                meter(target);
            }
            call.args.iter_mut().for_each(meter);
            if in_list {
                wrap(&mut call.args[1], SCAN);
            }
        }
        Expr::Comprehension(c) => {
            for part in [
                &mut c.iter_range,
                &mut c.accu_init,
                &mut c.loop_cond,
                &mut c.loop_step,
                &mut c.result,
            ] {
                meter(part);
            }
            wrap(&mut c.iter_range, RANGE);
        }
        Expr::List(l) => l.elements.iter_mut().for_each(meter),
        Expr::Map(m) => m.entries.iter_mut().for_each(meter_entry),
        Expr::Struct(s) => s.entries.iter_mut().for_each(meter_entry),
        Expr::Select(s) => meter(&mut s.operand),
        Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
    }
}

fn meter_entry(entry: &mut IdedEntryExpr) {
    match &mut entry.expr {
        EntryExpr::MapEntry(m) => {
            meter(&mut m.key);
            meter(&mut m.value);
        }
        EntryExpr::StructField(f) => meter(&mut f.value),
    }
}

/// Replaces `e` by `function(e)` (the call takes `e`'s id: ids only locate
/// nodes in the source, and the call stands where `e` was written).
fn wrap(e: &mut IdedExpr, function: &str) {
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

/// Declares the meters in `env`, the environment expressions run in.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(RANGE, RANGE, vec![DYN_TYPE], charge_range)?;
    env.add_overload(SCAN, SCAN, vec![DYN_TYPE], charge_scan)
}

thread_local! {
    /// What the evaluation running on this thread has spent. A thread-local
    /// is sound because an evaluation runs from start to end on the thread
    /// that called [`metering`] (the interpreter is synchronous and starts
    /// no thread), and evaluates no other expression meanwhile; the meters
    /// are plain `fn`s, so they cannot carry a counter of their own.
    static SPENT: Cell<u64> = const { Cell::new(0) };
}

/// Runs `evaluation` with a fresh budget; the bool says whether it spent
/// more than [`LIMIT`] (its result, whatever it is, then does not count:
/// CEL's `error || true` is `true`, so a stopped loop need not surface).
pub fn metering<T>(evaluation: impl FnOnce() -> T) -> (T, bool) {
    SPENT.with(|s| s.set(0));
    let out = evaluation();
    let spent = SPENT.with(Cell::get);
    (out, spent > LIMIT)
}

fn charge_range<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(args, RANGE, |_| true)
}

fn charge_scan<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    charge(args, SCAN, |kind| kind == Kind::List)
}

/// Charges the size of the one argument (when `counts` its kind) and hands
/// it back unchanged, or fails once the budget is spent: the loop over it
/// then never starts, and neither does any later one.
fn charge<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
    meter: &str,
    counts: fn(Kind) -> bool,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = match (args.pop(), args.len()) {
        (Some(value), 0) => value,
        (_, others) => return Err(ExecutionError::invalid_argument_count(1, others + 1)),
    };
    let size = match value.as_sizer() {
        Some(s) if counts(value.get_type().kind()) => u64::try_from(*s.size().inner()).unwrap_or(0),
        _ => 0,
    };
    let spent = SPENT.with(|s| {
        let spent = s.get().saturating_add(size);
        s.set(spent);
        spent
    });
    if spent > LIMIT {
        return Err(ExecutionError::function_error(
            meter,
            format!("cost budget of {LIMIT} spent"),
        ));
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(source: &str) -> IdedExpr {
        Env::stdlib().compile(source).unwrap().expression().clone()
    }

    fn nested(depth: usize, range: &str) -> String {
        let vars = ["a", "b", "c", "d", "e", "f", "g", "h"];
        let mut s = "true".to_owned();
        for v in vars.iter().take(depth).rev() {
            s = format!("{range}.all({v}, {s})");
        }
        s
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
            (LIMIT, ASSUMED_SIZE),
            (100_000, 100),
            "update the CRD's docs too"
        );
        for stated in ["above 100,000", "walk more than 100,000", "counted as 100)"] {
            assert!(said.contains(stated), "{stated} not in {said}");
        }
    }

    #[test]
    fn the_estimate_counts_iterations_and_nested_loops_multiply() {
        let ten = "[0,1,2,3,4,5,6,7,8,9]";
        assert_eq!(estimate(&parse("object.status.phase == 'Up'")), 0);
        assert_eq!(
            estimate(&parse(
                "object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')"
            )),
            ASSUMED_SIZE
        );
        assert_eq!(estimate(&parse(&nested(1, ten))), 10);
        assert_eq!(estimate(&parse(&nested(2, ten))), 10 * 11);
        assert_eq!(estimate(&parse(&nested(7, ten))), 11_111_110);
        // Over the copy's lists: two nested are admitted, three are not.
        let two = estimate(&parse(&nested(2, "object.spec.items")));
        assert_eq!(two, ASSUMED_SIZE * (ASSUMED_SIZE + 1));
        assert!(two <= LIMIT);
        assert!(estimate(&parse(&nested(3, "object.spec.items"))) > LIMIT);
        // `map` keeps its range's size; `+` adds; `in` scans.
        assert_eq!(
            estimate(&parse(&format!("{ten}.map(x, x * 2).all(y, y > 0)"))),
            20
        );
        assert_eq!(
            estimate(&parse(&format!("({ten} + {ten}).all(y, y > 0)"))),
            20
        );
        assert_eq!(
            estimate(&parse("object.spec.a.all(x, x in object.spec.b)")),
            ASSUMED_SIZE * (ASSUMED_SIZE + 1)
        );
    }
}
