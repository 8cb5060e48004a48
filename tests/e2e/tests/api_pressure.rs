//! The agent against an API server under pressure, end to end:
//! the sink's devcluster, through its `/debug/faults` endpoint, answers the
//! agent's requests 429 with `Retry-After` (as API Priority and Fairness
//! does), 500, or ends its watches with 410 Expired (as an etcd compaction
//! does). The agent waits what `Retry-After` says, backs off on 500s, and
//! re-lists after a 410 without writing any copy again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::{Duration, Instant};

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_testsupport::{wait_for, DevClusterOpts, NatsServer};
use serde_json::{json, Value};

/// What the fault plans select: the agent's requests (its `User-Agent`).
const AGENT: &str = "fleetbus-agent/";
/// The path of the copies (and only theirs: the agent watches cluster-wide).
const COPIES: &str = "/api/v1/namespaces/shared/secrets";

/// c1 (origin) and c2 (sink, whose devcluster serves `/debug/faults`), the
/// rule copying namespace `shared`'s Secrets everywhere.
async fn pressure_fleet(nats: &NatsServer) -> (Member, Member) {
    let c1 = Member::start(nats, "c1", "c1", &[]).await;
    let opts = DevClusterOpts {
        nodes: 2,
        extra_args: vec!["--debug-faults".into()],
        ..DevClusterOpts::new("c2")
    };
    let c2 = Member::start_with(nats, opts, "c2", &[]).await;
    wait_mesh(&[&c1, &c2], &["c1", "c2"]).await;
    for m in [&c1, &c2] {
        create_ns(m, "shared").await;
    }
    apply_yaml(&c1, &shared_secrets_rule().yaml());
    (c1, c2)
}

/// The agent's counters in c2's fault report.
async fn agent_counts(c2: &Member) -> Value {
    let report = c2.cluster.faults().await.unwrap();
    let clients = report["clients"].as_object().cloned().unwrap_or_default();
    clients
        .into_iter()
        .find(|(ua, _)| ua.starts_with(AGENT))
        .map(|(_, c)| c)
        .unwrap_or(Value::Null)
}

/// Waits until the agent's counter `field` reaches `n`; returns when.
async fn wait_count(c2: &Member, field: &str, n: u64) -> Instant {
    wait_for(&format!("agent's {field} ≥ {n}"), SYNC, || async {
        let c = agent_counts(c2).await;
        match c[field].as_u64() {
            Some(v) if v >= n => Ok(()),
            _ => Err(c.to_string()),
        }
    })
    .await;
    Instant::now()
}

async fn clear_faults(c2: &Member) {
    c2.cluster.set_faults(&json!({})).await.unwrap();
}

/// Every write of the copies on c2 refused by `plan`, c1 creates Secret
/// `name`: how long the agent's first `n` refused tries of its copy took
/// (counted by c2 in `field`); then the plan is lifted and the copy must be
/// written, by an agent still running.
async fn refused_tries(plan: Value, name: &str, field: &str, n: u64) -> Duration {
    let nats = NatsServer::start().unwrap();
    let (c1, mut c2) = pressure_fleet(&nats).await;
    c2.cluster.set_faults(&plan).await.unwrap();
    create_secret(&c1, "shared", name, &[("k", "1")]).await;
    let first = wait_count(&c2, field, 1).await;
    let waited = wait_count(&c2, field, n).await - first;
    eprintln!("{n} tries in {waited:?}: {}", agent_counts(&c2).await);
    clear_faults(&c2).await;
    wait_copy(
        &c2,
        &secrets(),
        Some("shared"),
        name,
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
    assert!(
        c2.agent.is_running(),
        "the agent exited:\n{}",
        c2.agent.log()
    );
    waited
}

/// Every 429 on the copy's write carries `Retry-After: 3`: the agent's next
/// try comes no sooner, so three tries take at least two waits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured_on_429() {
    let plan = json!({
        "userAgent": AGENT, "path": COPIES,
        "tooManyRequests": 1.0, "retryAfterSeconds": 3,
    });
    let waited = refused_tries(plan, "throttled", "tooManyRequests", 3).await;
    // Two waits, less what polling every 100 ms can misplace. Without the
    // client's server-aware retry the per-copy backoff (1 s, 2 s) takes 3 s.
    assert!(
        waited >= Duration::from_millis(5_500),
        "three tries within {waited:?}: Retry-After (3 s) not honoured"
    );
}

/// A copy whose writes get 500 is tried again after growing waits (1 s,
/// 2 s, 4 s less jitter: not on every pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_errors_are_retried_with_backoff() {
    let plan = json!({"userAgent": AGENT, "path": COPIES, "internalError": 1.0});
    let waited = refused_tries(plan, "failing", "internalErrors", 4).await;
    // 1 + 2 + 4 s, each less at most a fifth of jitter: 5.6 s; polling slack.
    assert!(
        waited >= Duration::from_millis(5_000),
        "four tries within {waited:?}: no backoff"
    );
}

/// Every watch of the agent on c2 is ended by a 410 Expired ERROR event
/// every second (and cannot resume from before it): the agent re-lists and
/// writes nothing, since nothing changed (c2's `/debug/writes`, every
/// resource), and keeps syncing: a Secret created meanwhile is copied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relists_after_410_rewrite_nothing() {
    let nats = NatsServer::start().unwrap();
    let (c1, c2) = pressure_fleet(&nats).await;
    for i in 0..10 {
        create_secret(&c1, "shared", &format!("s{i}"), &[("k", "1")]).await;
    }
    for i in 0..10 {
        wait_copy(
            &c2,
            &secrets(),
            Some("shared"),
            &format!("s{i}"),
            "c1",
            "shared-secrets",
            |_| Ok(()),
        )
        .await;
    }
    // The rule's status written for the ten copies: nothing more is due.
    wait_rule(&c2, "shared-secrets", "to count 10 copies", |r| {
        match r.status.as_ref().map(|s| s.objects_synced) {
            Some(10) => Ok(()),
            other => Err(format!("objectsSynced {other:?}")),
        }
    })
    .await;
    let before = c2.cluster.writes().await.unwrap();
    c2.cluster
        .set_faults(&json!({"userAgent": AGENT, "expireWatchesAfterMs": 1000}))
        .await
        .unwrap();
    // Every watch of the agent (Secrets, rules, CRDs, Namespaces, Clusters,
    // Nodes, …) ended several times, and re-listed after each.
    wait_count(&c2, "watchesExpired", 30).await;
    let relisted = c2.cluster.writes().await.unwrap();
    assert_eq!(
        relisted, before,
        "30 watch expiries and re-lists with nothing changed wrote something"
    );
    create_secret(&c1, "shared", "late", &[("k", "1")]).await;
    wait_copy(
        &c2,
        &secrets(),
        Some("shared"),
        "late",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
    clear_faults(&c2).await;
}

/// A list the API server takes but never answers (a connection that went
/// half-open as the server came back: the `api-down` chaos run's stall).
/// c2's API server dies: its agent's watches fail, and the Secret watch
/// holds c2's Secret copies until it has listed again. The server comes
/// back holding the agent's cluster-wide Secret lists for a minute (the
/// fault plan's longest; the plan is lifted once one is held). The watch
/// gives a list 20 s, then lists again on a new connection, so a Secret
/// created meanwhile is copied long before the held list would have been
/// answered; before lists had a deadline the copy waited for the whole
/// minute (the client's own read timeout is 295 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_that_is_never_answered_is_sent_again() {
    let nats = NatsServer::start().unwrap();
    let (c1, mut c2) = pressure_fleet(&nats).await;
    create_secret(&c1, "shared", "before", &[("k", "1")]).await;
    wait_copy(
        &c2,
        &secrets(),
        Some("shared"),
        "before",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
    c2.cluster.kill9();
    wait_readyz(&c2, 503, CONVERGE).await;
    let plan = json!({
        "userAgent": AGENT, "path": "/api/v1/secrets", "slow": 1.0, "latencyMs": 60_000,
    });
    c2.cluster
        .restart_with(&["--debug-faults-plan", &plan.to_string()])
        .unwrap();
    // The first list after the restart is held: it would answer at +60 s.
    let held = wait_count(&c2, "delayed", 1).await;
    clear_faults(&c2).await;
    create_secret(&c1, "shared", "during", &[("k", "1")]).await;
    // The list's deadline gives up on it (20 s) and the watch starts again
    // on a new connection; without the deadline this never comes.
    wait_for(
        "the watch to give up on the held list",
        Duration::from_secs(40),
        || async {
            let log = c2.agent.log();
            log.contains("no answer to the list within")
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    )
    .await;
    // Its next list is answered (the plan is lifted): the copy is written,
    // before the held list would have been answered.
    wait_for(
        "the copy of a Secret created while the list was held",
        CONVERGE,
        || async {
            dynamic(&c2, &secrets(), Some("shared"))
                .get_opt("during")
                .await
                .map_err(|e| e.to_string())?
                .map(|_| ())
                .ok_or_else(|| "no copy yet".to_owned())
        },
    )
    .await;
    let after = held.elapsed();
    eprintln!("copied {after:?} after the list was held");
    assert!(
        after < Duration::from_secs(60),
        "copied only after the held list answered: {after:?}"
    );
}

/// c2's API server dies and comes back holding its agent's lists of `path`
/// (GETs whose path contains it) for a minute; the plan is lifted once one
/// is held. Returns when the first was held, and how many times the agent
/// had given up on a list before.
async fn hold_lists_across_a_restart(c2: &mut Member, path: &str) -> (Instant, usize) {
    let gave_up = c2.agent.log().matches(GAVE_UP).count();
    c2.cluster.kill9();
    wait_readyz(c2, 503, CONVERGE).await;
    let plan = json!({
        "userAgent": AGENT, "path": path, "methods": ["GET"], "slow": 1.0, "latencyMs": 60_000,
    });
    c2.cluster
        .restart_with(&["--debug-faults-plan", &plan.to_string()])
        .unwrap();
    let held = wait_count(c2, "delayed", 1).await;
    clear_faults(c2).await;
    (held, gave_up)
}

/// What the agent logs when a watch gives up on a list nobody answers.
const GAVE_UP: &str = "no answer to the list within";

/// Waits until c2's agent says a watch gave up on a held list, and then
/// until `check` (of what c1 shows) holds; fails if that took as long as
/// the hold (60 s), which the held list's answer would also have fixed.
async fn relisted_before_the_hold_ends<F, Fut>(
    c2: &Member,
    (held, gave_up): (Instant, usize),
    what: &str,
    check: F,
) where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    wait_for(
        "a watch to give up on the held list",
        Duration::from_secs(40),
        || async {
            let now = c2.agent.log().matches(GAVE_UP).count();
            (now > gave_up)
                .then_some(())
                .ok_or_else(|| "not yet".to_owned())
        },
    )
    .await;
    wait_for(what, CONVERGE, check).await;
    let after = held.elapsed();
    eprintln!("{what}: {after:?} after the list was held");
    assert!(
        after < Duration::from_secs(60),
        "{what} only after the held list answered: {after:?}"
    );
}

/// The registry's watches list again on a new connection too, as the sync
/// watches do: c2's API server comes back holding its agent's Cluster lists,
/// then (another restart) its Node lists. Each watch gives its list 20 s,
/// lists again, and c1 sees the label put on c2's Cluster object, then the
/// CPU c2's Nodes report, before the held list would have answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_and_node_watches_list_again_on_a_new_connection() {
    let nats = NatsServer::start().unwrap();
    let (c1, mut c2) = pressure_fleet(&nats).await;
    let shown = |path: &'static str| {
        let c1 = &c1;
        move || async move {
            let args = ["get", "clusters.fleetbus.io", "c2", "-o", path];
            Ok::<_, String>(kubectl(c1, &args).trim().to_owned())
        }
    };

    let held = hold_lists_across_a_restart(&mut c2, "/clusters").await;
    kubectl(&c2, &["label", "clusters.fleetbus.io", "c2", "tier=gold"]);
    let tier = shown("jsonpath={.metadata.labels.tier}");
    relisted_before_the_hold_ends(&c2, held, "c2's label at c1", || async {
        match tier().await? {
            t if t == "gold" => Ok(()),
            t => Err(format!("tier {t:?}")),
        }
    })
    .await;

    let held = hold_lists_across_a_restart(&mut c2, "/nodes").await;
    let nodes = kubectl(&c2, &["get", "nodes", "-o", "name"]);
    for node in nodes.split_whitespace() {
        let patch = r#"{"status":{"allocatable":{"cpu":"64","memory":"256Gi"}}}"#;
        let args = [
            "patch",
            node,
            "--subresource=status",
            "--type=merge",
            "-p",
            patch,
        ];
        kubectl(&c2, &args);
    }
    let want = (64_000 * nodes.split_whitespace().count()).to_string();
    let cpu = shown("jsonpath={.status.metadata.allocatable.cpuMillis}");
    relisted_before_the_hold_ends(&c2, held, "c2's Nodes' CPU at c1", || async {
        match cpu().await? {
            c if c == want => Ok(()),
            c => Err(format!("cpuMillis {c:?}, want {want}")),
        }
    })
    .await;
}

/// A preview's reads are bounded together (8 s, under the CLI's default
/// `--timeout` of 10 s): c2's API server holds every ConfigMap list of its
/// agent for a minute, and the preview of a first ConfigMap rule, whose
/// `preview-source` makes c2 list ConfigMaps, gets c2's answer saying why
/// in time, not a timeout; meanwhile and after, c2 keeps syncing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preview_whose_reads_hang_answers_within_its_budget() {
    let nats = NatsServer::start().unwrap();
    let (c1, c2) = pressure_fleet(&nats).await;
    c2.cluster
        .set_faults(&json!({
            "userAgent": AGENT, "path": "/api/v1/configmaps", "slow": 1.0, "latencyMs": 60_000,
        }))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("cms.yaml");
    std::fs::write(
        &rule,
        RuleBuilder::new("cms").namespaces(&["shared"]).yaml(),
    )
    .unwrap();
    let started = Instant::now();
    let (code, out, err) =
        fleetbus_cli(&nats, &["rules", "preview", "-f", rule.to_str().unwrap()]).await;
    let took = started.elapsed();
    eprintln!("preview took {took:?}: {out}{err}");
    assert_eq!(code, Some(2), "{out}{err}");
    let said = format!("{out}{err}");
    assert!(
        said.contains("c2") && said.contains("did not finish within the preview's 8s for reads"),
        "c2 should say its reads ran out of time: {said}"
    );
    // The engine answered within the budget and syncs on.
    create_secret(&c1, "shared", "after-preview", &[("k", "1")]).await;
    wait_copy(
        &c2,
        &secrets(),
        Some("shared"),
        "after-preview",
        "c1",
        "shared-secrets",
        |_| Ok(()),
    )
    .await;
    clear_faults(&c2).await;
}
