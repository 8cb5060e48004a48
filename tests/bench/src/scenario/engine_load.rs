//! Scenarios 2c and 2d: does other work on a sink slow the propagation of
//! unrelated changes? Both time scenario 2's span (one ConfigMap created on
//! c1 at a time, until c2's watch shows the copy), first alone, then while:
//!
//! - **2c, previewing**: a plain NATS client asks c2 to preview the bench
//!   rule, over 3,000 synced objects, in a loop at the command rate limit
//!   (5 requests a second). Goal: p99 within 1.5× of propagation alone, and
//!   no sample over 100 ms.
//! - **2d, API pressure**: c2's API server answers 429 with `Retry-After: 1`
//!   to 20% of the writes (POST, PUT) of a second rule's copies (namespace
//!   `pressured`, whose objects c1 keeps changing), through the devcluster's
//!   fault plan. The same writes run in both halves; only the plan differs.
//!   Goal: the bench rule's propagation p50 within 1.5× of the run without
//!   pressure.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use fleetbus_schemas::preview::PreviewRequest;
use fleetbus_schemas::subject::{CommandKey, Prefix};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use crate::bus::Topology;
use crate::mesh::{create_rule_for, BenchMember, Fleet, RULE, SETUP};
use crate::objects;
use crate::scenario::propagation::one_at_a_time;
use crate::scenario::Ctx;
use crate::stats::{ms, Samples};
use crate::table::Table;

/// The second rule's namespace in 2d.
const PRESSURED: &str = "pressured";

/// Scenario 2c: propagation while c2 previews the bench rule in a loop.
pub async fn previewing(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    // 1,000 samples of ~3 ms span ~3 s, some 15 previews: 200 (~0.6 s, 3
    // or 4 previews) left the p99 to the two samples a preview happened to
    // overlap, and runs of the same code printed p99s from 8 to 98 ms.
    let (objects, n) = (ctx.pick(30, 3_000), ctx.pick(5, 1_000));
    let fleet = Fleet::start_on(Topology::Single, 2, false).await?;
    let sink = fleet.sinks()[0].recorder().await?;
    let origin = fleet.origin().configmaps();
    crate::load::create_many(&origin, "pv", 0..objects, 16).await?;
    // The warm-up object and every `pv-*`.
    sink.wait_count(objects + 1, SETUP.max(Duration::from_secs(300)))
        .await
        .map_err(|e| fleet.sinks()[0].with_log(e))?;
    let alone = one_at_a_time(&origin, &sink, "alone", n).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let (answered, asked) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let took = Arc::new(std::sync::Mutex::new(Samples::new()));
    let url = fleet.bus.url();
    let previewer = tokio::spawn(preview_loop(
        url,
        stop.clone(),
        asked.clone(),
        answered.clone(),
        took.clone(),
    ));
    // The samples start once a preview was answered: they are taken
    // while previews run, not before the first arrives.
    crate::poll::poll("a first preview answered", SETUP, || async {
        match answered.load(Ordering::Relaxed) {
            0 => Err("none yet".to_owned()),
            _ => Ok(()),
        }
    })
    .await?;
    let busy = one_at_a_time(&origin, &sink, "previewing", n).await;
    stop.store(true, Ordering::Relaxed);
    previewer.await??;
    let busy = busy?;

    let mut t = Table::latency(&format!(
        "2c. Propagation while c2 previews the rule over {objects} objects, 5 previews/s (c1 → c2)"
    ));
    t.latency_row("alone", &alone, ctx.floor, "-");
    t.latency_row(
        "while previewing",
        &busy,
        ctx.floor,
        "p99 ≤ 1.5× alone, max ≤ 100 ms",
    );
    t.samples = alone.len() + busy.len();
    t.summarize("2c. propagation while previewing", &busy, Vec::new());
    let p99_ok = within(busy.percentile(99.0), alone.percentile(99.0), 1.5);
    let max_ok = busy.max().is_some_and(|m| m <= Duration::from_millis(100));
    let p99_v = t.goal(
        "propagation while previewing: p99 ≤ 1.5× alone",
        format!(
            "{} ms vs {} ms alone",
            ms(busy.percentile(99.0)),
            ms(alone.percentile(99.0))
        ),
        p99_ok,
    );
    let max_v = t.goal(
        "propagation while previewing: no sample over 100 ms",
        format!("max {} ms", ms(busy.max())),
        max_ok,
    );
    let took = took
        .lock()
        .map(|t| t.clone())
        .unwrap_or_else(|_| Samples::new());
    t.note(format!(
        "p99 goal: {p99_v}; max goal: {max_v} (max {} ms alone). Previews asked {}, answered {} (refusals for rate included); a preview's answer took p50 {} ms, max {} ms.",
        ms(alone.max()),
        asked.load(Ordering::Relaxed),
        answered.load(Ordering::Relaxed),
        ms(took.p50()),
        ms(took.max()),
    ));
    Ok(vec![t])
}

/// Asks c2 to preview the bench rule every 200 ms (the agents' default
/// command rate) until `stop`.
async fn preview_loop(
    url: String,
    stop: Arc<AtomicBool>,
    asked: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
    took: Arc<std::sync::Mutex<Samples>>,
) -> anyhow::Result<()> {
    let client = async_nats::connect(url).await?;
    let subject = CommandKey::preview("c2").to_subject(&Prefix::default());
    let request = PreviewRequest {
        rule: None,
        rule_name: Some(RULE.to_owned()),
        source: None,
        author: None,
        sources: Vec::new(),
        sources_complete: false,
    }
    .encode()?;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        asked.fetch_add(1, Ordering::Relaxed);
        let (client, subject, request, answered, took) = (
            client.clone(),
            subject.clone(),
            request.clone(),
            answered.clone(),
            took.clone(),
        );
        // Not awaited in turn: a slow answer does not slow the asking.
        tokio::spawn(async move {
            let started = std::time::Instant::now();
            let asked = client.request(subject, request.into());
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(30), asked).await {
                answered.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut t) = took.lock() {
                    t.push(started.elapsed());
                }
            }
        });
    }
    Ok(())
}

/// Scenario 2d: propagation while c2's API server throttles another rule's copies.
pub async fn pressure(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let (pressured, n) = (ctx.pick(5, 50), ctx.pick(5, 100));
    let fleet = Fleet::start_with(Topology::Single, 2, false, &["--debug-faults"]).await?;
    let c2 = &fleet.sinks()[0];
    for m in &fleet.nodes {
        m.create_namespace(PRESSURED).await?;
    }
    create_rule_for(fleet.origin(), "pressured", PRESSURED).await?;
    let busy: Api<ConfigMap> = Api::namespaced(fleet.origin().client.clone(), PRESSURED);
    crate::load::create_many(&busy, "w", 0..pressured, 8).await?;
    let names: Arc<Vec<String>> = Arc::new((0..pressured).map(|i| format!("w-{i}")).collect());
    let sink = c2.recorder().await?;
    let origin = fleet.origin().configmaps();

    let calm = with_writes(&busy, &names, one_at_a_time(&origin, &sink, "calm", n)).await?;
    let plan = serde_json::json!({
        "userAgent": "fleetbus-agent",
        "path": format!("/namespaces/{PRESSURED}/"),
        "methods": ["POST", "PUT"],
        "tooManyRequests": 0.2,
        "retryAfterSeconds": 1,
        "seed": 7,
    });
    c2.cluster.set_faults(&plan).await?;
    let pressed = with_writes(&busy, &names, one_at_a_time(&origin, &sink, "pressed", n)).await?;
    let report = c2.cluster.faults().await?;
    c2.cluster.set_faults(&serde_json::json!({})).await?;
    let refused = report["total"]["tooManyRequests"].as_u64().unwrap_or(0);

    let mut t = Table::latency(&format!(
        "2d. Propagation while c2's API server answers 429 to 20% of another rule's copy writes (c1 → c2, {pressured} objects of that rule changing)"
    ));
    t.latency_row("without pressure", &calm, ctx.floor, "-");
    t.latency_row("under pressure", &pressed, ctx.floor, "p50 ≤ 1.5× without");
    t.samples = calm.len() + pressed.len();
    t.summarize("2d. propagation under API pressure", &pressed, Vec::new());
    let ok = within(pressed.p50(), calm.p50(), 1.5);
    let v = t.goal(
        "propagation under API pressure: p50 ≤ 1.5× without",
        format!("{} ms vs {} ms without", ms(pressed.p50()), ms(calm.p50())),
        ok,
    );
    t.note(format!(
        "goal: {v}. c2's API server answered {refused} writes 429 (Retry-After: 1) in the pressured half; c1 changed the pressured rule's objects in both halves."
    ));
    Ok(vec![t])
}

/// Runs `measure` while c1 changes `names` in `api` (two writers, as fast as
/// c1 acknowledges); the writes stop when it ends.
async fn with_writes<F>(
    api: &Api<ConfigMap>,
    names: &Arc<Vec<String>>,
    measure: F,
) -> anyhow::Result<Samples>
where
    F: std::future::Future<Output = anyhow::Result<Samples>>,
{
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..2u64 {
        let (api, names, stop) = (api.clone(), names.clone(), stop.clone());
        writers.spawn(async move {
            let mut i = w;
            while !stop.load(Ordering::Relaxed) {
                let name = &names[(i as usize) % names.len().max(1)];
                objects::set_mark(&api, name, &i.to_string()).await?;
                i += 2;
                // A fixed pace on purpose: the same load (about 100 changes
                // a second from the two writers) in both halves of the run.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            anyhow::Ok(())
        });
    }
    let out = measure.await;
    stop.store(true, Ordering::Relaxed);
    while let Some(r) = writers.join_next().await {
        r??;
    }
    out
}

/// Whether `a` ≤ `factor` × `b` (both measured).
fn within(a: Option<Duration>, b: Option<Duration>, factor: f64) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.as_secs_f64() <= b.as_secs_f64() * factor,
        _ => false,
    }
}
