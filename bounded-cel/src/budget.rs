//! One evaluation's budget: what the meters (`cost`, `built`) charge, and
//! whether an evaluation spent more than [`LIMIT`].

use std::cell::Cell;

use cel::ExecutionError;

/// The most an expression may cost, estimated when it compiles and spent
/// when it runs (see `cost` for the unit). Ten million iterations of nested
/// `all` took a sink 2.4–4.5 s, so this is some 25–45 ms of one core: a pass
/// that judges a hundred changed copies at once still takes seconds, not
/// minutes, and an unchanged copy is not judged again (see `cel`'s memo).
pub const LIMIT: u64 = 100_000;

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

/// What is left of the budget (0 once it is spent): how far a meter need
/// measure a value before it knows the budget cannot pay for it.
pub fn left() -> u64 {
    LIMIT.saturating_sub(SPENT.with(Cell::get))
}

/// Charges `units` to the evaluation's budget, or fails once it is spent:
/// what was about to be done (a loop, a value built) then is not.
pub fn spend(units: u64, meter: &str) -> Result<(), ExecutionError> {
    let spent = SPENT.with(|s| {
        let spent = s.get().saturating_add(units);
        s.set(spent);
        spent
    });
    if spent > LIMIT {
        return Err(spent_error(meter));
    }
    Ok(())
}

/// Spends the whole budget and fails: for what must not be done whatever is
/// left (a value over its cap), so that the evaluation is stopped as one
/// over its budget is, and says so the same way.
pub fn refuse(meter: &str) -> ExecutionError {
    SPENT.with(|s| s.set(u64::MAX));
    spent_error(meter)
}

fn spent_error(meter: &str) -> ExecutionError {
    ExecutionError::function_error(meter, format!("cost budget of {LIMIT} spent"))
}
