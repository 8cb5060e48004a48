//! Scenario 5: a new cluster c3 joins a mesh (c1 origin, c2 sink) that holds
//! M synced objects; time from starting c3's agent to every copy seen by a
//! watch on c3.

use std::time::{Duration, Instant};

use crate::load;
use crate::mesh::{BenchMember, Fleet, Member};
use crate::progress_cli::{ProgressCli, Shown};
use crate::scenario::Ctx;
use crate::table::Table;

/// How long the new cluster may take to get every copy.
const CATCH_UP: Duration = Duration::from_secs(300);

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let m = ctx.pick(20, 10_000);
    let fleet = Fleet::start(2, false).await?;
    let c2 = fleet.sinks()[0].recorder().await?;
    let seeded = Instant::now();
    load::create_many(&fleet.origin().configmaps(), "cu", 0..m, 32).await?;
    // The warm-up object makes it m + 1.
    let synced = c2.wait_count(m + 1, CATCH_UP).await?;

    eprintln!("fleetbus-bench: catchup: {m} objects synced to c2; c3 joins");
    let mut c3 = Member::bench_cluster("c3", false, Some(&fleet.bus)).await?;
    let watch = c3.recorder().await?;
    // What an operator runs to follow the join (the CLI's progress indicator).
    let cli = ProgressCli::start(&fleet.bus.url(), "c3", CATCH_UP)?;
    let started = c3.start_agent()?;
    let ready = c3.wait_ready().await?;
    let first = watch
        .wait_count(1, CATCH_UP)
        .await
        .map_err(|e| c3.with_log(e))?;
    let all = watch
        .wait_count(m + 1, CATCH_UP)
        .await
        .map_err(|e| c3.with_log(e))?;

    let shown = cli.finish(CATCH_UP).await?;

    let secs = |d: Duration| format!("{:.2}", d.as_secs_f64());
    let took = all.saturating_duration_since(started);
    let mut t = Table::new(
        "5. Catch-up: a new cluster joins a mesh holding M synced objects",
        &[
            "M objects",
            "agent start → ready s",
            "→ first copy s",
            "→ all copies s",
            "goal",
            "verdict",
        ],
    );
    let verdict = t.goal(
        "catch-up: a joining cluster has every copy ≤ 10 s",
        format!("{} s for {} copies", secs(took), m + 1),
        took <= Duration::from_secs(10),
    );
    t.row([
        (m + 1).to_string(),
        secs(ready.saturating_duration_since(started)),
        secs(first.saturating_duration_since(started)),
        secs(took),
        "≤ 10 s".into(),
        verdict.to_owned(),
    ]);
    t.samples = watch.count();
    t.note(format!(
        "for comparison, the existing sink c2 got the {m} objects {} s after the harness started creating them (limited by the harness's creates)",
        secs(synced.saturating_duration_since(seeded))
    ));
    t.note(describe_cli(&shown, started, all));
    Ok(vec![t])
}

/// One note on what `fleetbus clusters progress c3 --watch` showed: how many
/// lines with a copy count before "in sync", a few of them, and when it exited.
fn describe_cli(shown: &Shown, started: Instant, all: Instant) -> String {
    let at = |t: Instant| {
        format!(
            "{:.1} s",
            t.saturating_duration_since(started).as_secs_f64()
        )
    };
    let moving: Vec<&(Instant, String)> = shown
        .lines
        .iter()
        .filter(|(_, l)| l.contains("catching up"))
        .collect();
    let mut picks: Vec<String> = Vec::new();
    let step = (moving.len() / 4).max(1);
    for (t, line) in moving.iter().step_by(step).take(5) {
        picks.push(format!(
            "{}: `{}`",
            at(*t),
            line.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    let last = shown
        .lines
        .last()
        .map(|(t, l)| {
            format!(
                "{}: `{}`",
                at(*t),
                l.split_whitespace().collect::<Vec<_>>().join(" ")
            )
        })
        .unwrap_or_else(|| "nothing".to_owned());
    format!(
        "`fleetbus clusters progress c3 --watch`, started with c3's agent: {} progress lines while catching up ({}); last line {last}; exit code {:?} {} after the agent started ({:.1} s after the last copy was seen by the harness's watch)",
        moving.len(),
        if picks.is_empty() { "none".to_owned() } else { picks.join(", ") },
        shown.code,
        at(shown.exited),
        shown.exited.saturating_duration_since(all).as_secs_f64(),
    )
}
