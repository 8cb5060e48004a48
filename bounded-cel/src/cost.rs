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
//!   result): the expression cannot know how long a list of the copy is;
//! - unless the caller knows ([`Bounds`], as a CRD's schema knows its
//!   `maxItems`, `maxProperties` and `maxLength`): a variable's value, a
//!   field of it, an element of a list or a value of a map then has the
//!   size its bound says (a loop's variable the bound of its range's
//!   elements), and `s.split(…)` at most one more element than `s` has
//!   characters.
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

use std::collections::BTreeMap;

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

/// What the estimate may know of the values of a variable: the most
/// elements of a list or entries of a map, the longest string, and the same
/// of its fields, elements and map values (a CRD's schema: `maxItems`,
/// `maxProperties`, `maxLength`, `properties`, `items`,
/// `additionalProperties`). What it does not say counts as unknown.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Most elements of a list, or entries of a map.
    pub max_elements: Option<u64>,
    /// Most characters of a string.
    pub max_length: Option<u64>,
    /// An object's fields.
    pub fields: BTreeMap<String, Bounds>,
    /// A list's elements.
    pub items: Option<Box<Bounds>>,
    /// A map's values (a loop over a map walks its keys).
    pub values: Option<Box<Bounds>>,
}

/// The variables whose bounds the estimate knows, by name; a loop's variable
/// hides an outer one of the same name.
#[derive(Clone, Copy)]
struct Scope<'a> {
    vars: &'a [(String, Bounds)],
    binding: Option<(&'a str, Option<&'a Bounds>)>,
    parent: Option<&'a Scope<'a>>,
}

impl<'a> Scope<'a> {
    fn new(vars: &'a [(String, Bounds)]) -> Self {
        Scope {
            vars,
            binding: None,
            parent: None,
        }
    }

    fn with(&'a self, name: &'a str, bounds: Option<&'a Bounds>) -> Scope<'a> {
        Scope {
            vars: self.vars,
            binding: Some((name, bounds)),
            parent: Some(self),
        }
    }

    fn lookup(&self, name: &str) -> Option<&'a Bounds> {
        let mut scope = Some(self);
        while let Some(s) = scope {
            if let Some((n, b)) = s.binding {
                if n == name {
                    return b;
                }
            }
            scope = s.parent;
        }
        self.vars.iter().find(|(n, _)| n == name).map(|(_, b)| b)
    }
}

/// The estimated cost of `e` (see the module docs), saturating, knowing the
/// bounds of the variables `vars`.
pub fn estimate(e: &IdedExpr, vars: &[(String, Bounds)]) -> u64 {
    estimate_in(e, &Scope::new(vars))
}

fn estimate_in(e: &IdedExpr, scope: &Scope<'_>) -> u64 {
    match &e.expr {
        Expr::Comprehension(c) => {
            let range = bounds_of(&c.iter_range, scope);
            // One variable: a list's element, or a map's key; two: the index
            // or key, then the element or value.
            let (first, second) = match &c.iter_var2 {
                None => (range.and_then(|b| b.items.as_deref()), None),
                Some(_) => (
                    None,
                    range.and_then(|b| b.items.as_deref().or(b.values.as_deref())),
                ),
            };
            let accu = scope.with(&c.accu_var, None);
            let outer = accu.with(&c.iter_var, first);
            let inner = match &c.iter_var2 {
                Some(v) => outer.with(v, second),
                None => outer,
            };
            let per_item = estimate_in(&c.loop_cond, &inner)
                .saturating_add(estimate_in(&c.loop_step, &inner))
                .saturating_add(1);
            size(&c.iter_range, scope)
                .saturating_mul(per_item)
                .saturating_add(estimate_in(&c.iter_range, scope))
                .saturating_add(estimate_in(&c.accu_init, scope))
                .saturating_add(estimate_in(&c.result, &accu))
        }
        Expr::Call(call) if is_in(call) => operands(&e.expr)
            .into_iter()
            .map(|o| estimate_in(o, scope))
            .fold(size(&call.args[1], scope), u64::saturating_add),
        other => operands(other)
            .into_iter()
            .map(|o| estimate_in(o, scope))
            .fold(0, u64::saturating_add),
    }
}

/// How many elements the estimate gives the value of `e` (see the module docs).
fn size(e: &IdedExpr, scope: &Scope<'_>) -> u64 {
    match &e.expr {
        Expr::List(l) => len(l.elements.len()),
        Expr::Map(m) => len(m.entries.len()),
        // `map` and `filter`: at most one element per iteration.
        Expr::Comprehension(c) if builds_list(&c.accu_init, &c.result, &c.accu_var) => {
            size(&c.iter_range, scope)
        }
        Expr::Call(call) if call.target.is_none() => {
            match (call.func_name.as_str(), &call.args[..]) {
                (operators::ADD, [a, b]) => size(a, scope).saturating_add(size(b, scope)),
                (operators::CONDITIONAL, [_, a, b]) => size(a, scope).max(size(b, scope)),
                _ => bounded_size(e, scope),
            }
        }
        // At most one part per character, and one more.
        Expr::Call(call) if call.func_name == "split" => call
            .target
            .as_deref()
            .and_then(|t| bounds_of(t, scope)?.max_length)
            .map_or(ASSUMED_SIZE, |l| l.saturating_add(1)),
        _ => bounded_size(e, scope),
    }
}

/// The size the bounds give `e`'s value, else [`ASSUMED_SIZE`].
fn bounded_size(e: &IdedExpr, scope: &Scope<'_>) -> u64 {
    bounds_of(e, scope)
        .and_then(|b| b.max_elements)
        .unwrap_or(ASSUMED_SIZE)
}

/// What the bounds say of `e`'s value: a variable, a field of it, an element
/// of a list or a value of a map (`a[i]`).
fn bounds_of<'a>(e: &IdedExpr, scope: &Scope<'a>) -> Option<&'a Bounds> {
    match &e.expr {
        Expr::Ident(name) => scope.lookup(name),
        Expr::Select(s) if !s.test => bounds_of(&s.operand, scope)?.fields.get(&s.field),
        Expr::Call(call) if call.target.is_none() && call.func_name == operators::INDEX => {
            let of = bounds_of(call.args.first()?, scope)?;
            of.items.as_deref().or(of.values.as_deref())
        }
        _ => None,
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
        assert_eq!(estimate(&parse("object.status.phase == 'Up'"), &[]), 0);
        assert_eq!(
            estimate(&parse(
                "object.status.conditions.exists(c, c.type == 'Available' && c.status == 'True')"
            ), &[]),
            ASSUMED_SIZE
        );
        assert_eq!(estimate(&parse(&nested(1, ten)), &[]), 10);
        assert_eq!(estimate(&parse(&nested(2, ten)), &[]), 10 * 11);
        assert_eq!(estimate(&parse(&nested(7, ten)), &[]), 11_111_110);
        // Over the copy's lists: two nested are admitted, three are not.
        let two = estimate(&parse(&nested(2, "object.spec.items")), &[]);
        assert_eq!(two, ASSUMED_SIZE * (ASSUMED_SIZE + 1));
        assert!(two <= LIMIT);
        assert!(estimate(&parse(&nested(3, "object.spec.items")), &[]) > LIMIT);
        // `map` keeps its range's size; `+` adds; `in` scans.
        assert_eq!(
            estimate(&parse(&format!("{ten}.map(x, x * 2).all(y, y > 0)")), &[]),
            20
        );
        assert_eq!(
            estimate(&parse(&format!("({ten} + {ten}).all(y, y > 0)")), &[]),
            20
        );
        assert_eq!(
            estimate(&parse("object.spec.a.all(x, x in object.spec.b)"), &[]),
            ASSUMED_SIZE * (ASSUMED_SIZE + 1)
        );
    }

    fn list_of(max: u64, items: Bounds) -> Bounds {
        Bounds {
            max_elements: Some(max),
            items: Some(Box::new(items)),
            ..Bounds::default()
        }
    }

    fn object(fields: &[(&str, Bounds)]) -> Bounds {
        Bounds {
            fields: fields
                .iter()
                .map(|(k, b)| ((*k).to_owned(), b.clone()))
                .collect(),
            ..Bounds::default()
        }
    }

    #[test]
    fn known_bounds_replace_the_assumed_size() {
        // self: {a: [≤5 of {b: [≤7 of {c: [≤3]}]}], m: map ≤4 of [≤2], s: string ≤9, u: unbounded list}
        let c = list_of(3, Bounds::default());
        let b = list_of(7, object(&[("c", c)]));
        let a = list_of(5, object(&[("b", b)]));
        let m = Bounds {
            max_elements: Some(4),
            values: Some(Box::new(list_of(2, Bounds::default()))),
            ..Bounds::default()
        };
        let s = Bounds {
            max_length: Some(9),
            ..Bounds::default()
        };
        let vars = vec![(
            "self".to_owned(),
            object(&[("a", a), ("m", m), ("s", s), ("u", Bounds::default())]),
        )];
        let est = |src: &str| estimate(&parse(src), &vars);
        assert_eq!(
            est("self.a.all(x, x.b.all(y, y.c.all(z, z > 0)))"),
            5 * (1 + 7 * (1 + 3))
        );
        // Unbounded, or unknown to the bounds: as without them.
        assert_eq!(est("self.u.all(x, true)"), ASSUMED_SIZE);
        assert_eq!(est("object.a.all(x, true)"), ASSUMED_SIZE);
        // A map's entries (its keys), and a value by index.
        assert_eq!(est("self.m.all(k, self.m[k].all(v, v > 0))"), 4 * (1 + 2));
        // `split`: at most one part per character, and one more.
        assert_eq!(est("self.s.split(',').all(p, p != '')"), 10);
        assert_eq!(est("self.a[0].b.all(y, true)"), 7);
        // A loop's variable hides an outer one: `self` here is an element of a.
        assert_eq!(est("self.a.all(self, self.b.all(y, true))"), 5 * (1 + 7));
        // What would be refused unbounded fits with its bounds, and a large
        // bound counts as large.
        let three = "self.a.all(x, x.b.all(y, y.c.all(z, z > 0)))";
        assert!(estimate(&parse(three), &[]) > LIMIT);
        let wide = vec![(
            "self".to_owned(),
            object(&[("u", list_of(1_000_000, Bounds::default()))]),
        )];
        assert_eq!(estimate(&parse("self.u.all(x, true)"), &wide), 1_000_000);
    }
}
