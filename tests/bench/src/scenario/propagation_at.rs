//! Scenario 2b: propagation of one 1 KiB ConfigMap at a time when
//! the rule already syncs 50 / 1,000 / 10,000 / 50,000 objects. A change
//! must cost the same whatever the number of copies the sink holds: each
//! step's p50 is compared with the floor (same span as scenario 2: from just
//! before the c1 create to the copy seen by a watch on c2) and with the p50
//! of the smallest step, measured in the same fleet.

use std::time::Duration;

use crate::load;
use crate::mesh::{BenchMember, Fleet, SETUP};
use crate::scenario::propagation::one_at_a_time_split;
use crate::scenario::Ctx;
use crate::stats::ms;
use crate::table::Table;

/// How long syncing one step's bulk objects may take.
const STEP: Duration = Duration::from_secs(900);

/// The ratio of two durations as "1.23×", or "-".
fn times(a: Option<Duration>, b: Option<Duration>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if !b.is_zero() => format!("{:.2}×", a.as_secs_f64() / b.as_secs_f64()),
        _ => "-".to_owned(),
    }
}

/// Caps the steps (e.g. `10000` to leave out 50,000 where a run would take
/// too long); unset: every step.
pub const MAX_ENV: &str = "FLEETBUS_BENCH_MAX_OBJECTS";

/// The agents' metrics that say how much each pass planned.
const PASSES: &str = "fleetbus_sync_passes_total";
const FULL_PLANS: &str = "fleetbus_sync_full_plans_total";

/// (name, passes, full plans) of each agent of the fleet, origin first.
fn plan_counts(fleet: &Fleet) -> Vec<(String, Option<f64>, Option<f64>)> {
    std::iter::once(fleet.origin())
        .chain(fleet.sinks())
        .map(|m| {
            (
                m.name.clone(),
                m.agent_metric(PASSES),
                m.agent_metric(FULL_PLANS),
            )
        })
        .collect()
}

/// What each agent's counters grew by since `before`, as "c1 105 (0), c2 101 (1)".
fn plan_counts_since(fleet: &Fleet, before: &[(String, Option<f64>, Option<f64>)]) -> String {
    let diff = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => format!("{}", b - a),
        _ => "?".to_owned(),
    };
    plan_counts(fleet)
        .iter()
        .zip(before)
        .map(|((name, p, f), (_, p0, f0))| format!("{name} {} ({})", diff(*p0, *p), diff(*f0, *f)))
        .collect::<Vec<_>>()
        .join(", ")
}

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let max = super::env_cap(MAX_ENV);
    let steps: Vec<usize> = ctx
        .pick(vec![5, 20], vec![50, 1_000, 10_000, 50_000])
        .into_iter()
        .filter(|n| *n <= max)
        .collect();
    let per_step = ctx.pick(3, 100);
    let fleet = Fleet::start(2, false).await?;
    let sink = fleet.sinks()[0].recorder().await?;
    let origin = fleet.origin().configmaps();
    let mut t = Table::latency(
        "2b. Propagation of one 1 KiB ConfigMap with N objects already synced (c1 → c2)",
    );
    // The warm-up object is synced already.
    let mut synced = 1;
    let mut bulk = 0;
    let mut first_p50: Option<(usize, Duration)> = None;
    for &n in &steps {
        // Objects already synced = bulk objects + warm-up + earlier samples:
        // top the bulk up so the step starts with n.
        let top = n.saturating_sub(synced);
        load::create_many(&origin, "bulk", bulk..bulk + top, 32).await?;
        bulk += top;
        synced += top;
        if let Err(e) = sink.wait_count(synced, STEP.max(SETUP)).await {
            t.incomplete(format!("stopped at {n} objects: {e:#}"));
            break;
        }
        eprintln!("fleetbus-bench: propagation_at: {synced} objects synced");
        let before = plan_counts(&fleet);
        let split = match one_at_a_time_split(&origin, &sink, &format!("p{n}"), per_step).await {
            Ok(split) => split,
            Err(e) => {
                // Keep the steps measured so far; say where it stopped.
                t.incomplete(format!("stopped at {n} objects: {e:#}"));
                break;
            }
        };
        let lat = split.whole;
        t.note(format!(
            "{n} objects: sync passes (of which full plans) while the {per_step} samples ran: {}",
            plan_counts_since(&fleet, &before)
        ));
        synced += per_step;
        let measure = format!("{n} objects synced: before the c1 create → copy seen on c2");
        t.latency_row(&measure, &lat, ctx.floor, "p50 ≤ 3× floor, p99 ≤ 25 ms");
        // Where the time went: a step slower than the first may be the
        // devclusters holding more objects, not the agents.
        t.latency_row(
            &format!("{n} objects synced: of which the c1 create, until acknowledged"),
            &split.origin_ack,
            ctx.floor,
            "",
        );
        t.latency_row(
            &format!("{n} objects synced: of which c1's acknowledgement → copy seen on c2"),
            &split.after_ack,
            ctx.floor,
            "",
        );
        t.samples += lat.len();
        let p50_ok = matches!((lat.p50(), ctx.floor), (Some(p), Some(f)) if p <= f * 3);
        t.goal(
            &format!("propagation p50 at {n} objects ≤ 3× floor"),
            format!(
                "{} ms = {} the floor's {} ms",
                ms(lat.p50()),
                times(lat.p50(), ctx.floor),
                ms(ctx.floor)
            ),
            p50_ok,
        );
        let p99 = lat.percentile(99.0);
        t.goal(
            &format!("propagation p99 at {n} objects ≤ 25 ms"),
            format!("{} ms", ms(p99)),
            p99.is_some_and(|p| p <= Duration::from_millis(25)),
        );
        match (first_p50, lat.p50()) {
            (None, Some(p)) => first_p50 = Some((n, p)),
            (Some((n0, p0)), Some(p)) => {
                t.goal(
                    &format!("propagation p50 at {n} objects ≤ 1.5× p50 at {n0}"),
                    format!(
                        "{} ms = {} the {} ms at {n0}",
                        ms(Some(p)),
                        times(Some(p), Some(p0)),
                        ms(Some(p0))
                    ),
                    p <= p0.mul_f64(1.5),
                );
            }
            (_, None) => {}
        }
    }
    if max != usize::MAX {
        t.note(format!("Steps capped at {max} objects by {MAX_ENV}."));
    }
    t.note(format!(
        "Per step, {per_step} objects are created one after another (the next only after the previous copy was seen), \
         after the rule's bulk objects are synced; the floor is scenario 1's, timed over the same span."
    ));
    Ok(vec![t])
}
