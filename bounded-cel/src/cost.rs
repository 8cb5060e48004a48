//! What an expression may cost: an estimate refused above [`crate::LIMIT`]
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
//! At run time the copy's lists are as long as they are, and the budget
//! (`budget`) is charged for what the evaluation copies and builds, as
//! Kubernetes' runtime cost charges the sizes of what its functions
//! traverse and return. The unit stays an element: one per value (a scalar,
//! a list or map, each element, key and value in it) and one per 100 bytes
//! of a string (`built::BYTES_PER_UNIT`). [`metered`] rewrites the tree so
//! that the meters see each value, [`register`] declares them:
//! - every comprehension's range is charged the size of its elements (the
//!   interpreter copies each into the loop's variable), and every `in`'s
//!   right-hand side its length (a scan compares in place). A range is
//!   charged in full when it is evaluated, whether or not the loop stops
//!   early: an upper bound, as the estimate is, and one that gives the same
//!   verdict whatever the order of the elements;
//! - `+` (which the interpreter runs itself, so the rewrite renames the
//!   call), `replace`, `join` and `strings.quote` count the size of their
//!   result and charge it before they build it, and refuse a string over
//!   `built::MAX_STRING` (1 MiB) whatever is left;
//! - any other function's result is charged once built (so each call costs
//!   at least one), a string over the cap refused: those build at most a
//!   small multiple of their inputs (`format` twice a string's bytes for
//!   `%x`, `split` a value per character), so the overshoot before the stop
//!   is bounded by what they are given;
//! - a value copied into a list or map literal, or appended by `map` or
//!   `filter`, is charged its size when it is borrowed (a field of
//!   `object`, a loop's variable: the copy is deep); an owned one is moved,
//!   and was charged when it was built.
//!
//! So what an evaluation builds, all of it alive at once at worst, is some
//! 10 MB of strings and 100,000 values, and a string at most 1 MiB: six
//! nested `replace` (10 MB from a 10-character literal) are refused at the
//! sixth, before it builds, and `object.spec.items.map(x, object)` stops
//! once its copies hold 10 MB. The rewrite leaves a `map`/`filter`'s loop
//! step (`@result + [x]`), condition and result in the shape the interpreter
//! runs in place (appending to one list instead of copying it each
//! iteration); only `x` is passed through the copy meter.
//!
//! The estimate stays a count of iterations: a compiled expression is
//! refused for its loops, never for the sizes it would build, which only
//! the copy it runs over decides. Not charged: reading (`contains`,
//! `matches`, comparing two values walk what they are given without copying
//! it, and at most once per call, itself charged), and the length of a
//! string literal (the source, at most 1 KiB, bounds it).

use cel::common::ast::{operators, CallExpr, EntryExpr, Expr, IdedEntryExpr, IdedExpr};
use cel::common::types::{Kind, DYN_TYPE};
use cel::common::value::{CowVal, Val};
use cel::{DeclarationError, Env, ExecutionError};

use crate::budget;
use crate::built;

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
                built::wrap(&mut call.args[1], SCAN);
            }
            built::rewrite_call(e);
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
            built::wrap(&mut c.iter_range, RANGE);
        }
        Expr::List(l) => {
            for element in &mut l.elements {
                meter(element);
                built::meter_copy(element);
            }
        }
        Expr::Map(m) => {
            for entry in &mut m.entries {
                meter_entry(entry);
                if let EntryExpr::MapEntry(m) = &mut entry.expr {
                    built::meter_copy(&mut m.key);
                    built::meter_copy(&mut m.value);
                }
            }
        }
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

/// Declares the meters in `env`, the environment expressions run in.
pub fn register(env: &mut Env) -> Result<(), DeclarationError> {
    env.add_overload(RANGE, RANGE, vec![DYN_TYPE], charge_range)?;
    env.add_overload(SCAN, SCAN, vec![DYN_TYPE], charge_scan)?;
    built::register(env)
}

fn charge_range<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    // Each element is copied into the loop's variable as the loop reaches it.
    charge(args, RANGE, |v| built::units_of_elements(v, budget::left()))
}

fn charge_scan<'b, 'v>(args: Vec<CowVal<'b, 'v>>) -> Result<CowVal<'b, 'v>, ExecutionError> {
    // A scan compares in place: each element counts once, whatever its size.
    charge(args, SCAN, |v| match v.as_sizer() {
        Some(s) if v.get_type().kind() == Kind::List => {
            u64::try_from(*s.size().inner()).unwrap_or(0)
        }
        _ => 0,
    })
}

/// Charges the size of the one argument and hands it back unchanged, or
/// fails once the budget is spent: the loop over it then never starts, and
/// neither does any later one.
fn charge<'b, 'v>(
    mut args: Vec<CowVal<'b, 'v>>,
    meter: &str,
    size: fn(&dyn Val) -> u64,
) -> Result<CowVal<'b, 'v>, ExecutionError> {
    let value = match (args.pop(), args.len()) {
        (Some(value), 0) => value,
        (_, others) => return Err(ExecutionError::invalid_argument_count(1, others + 1)),
    };
    budget::spend(size(value.as_ref()), meter)?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LIMIT;

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
