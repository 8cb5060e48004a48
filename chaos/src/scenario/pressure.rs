//! `api-pressure`: the last cluster's API server under pressure while every
//! origin churns. Through the devcluster's `/debug/faults` it answers a share
//! of its agent's requests 429 with `Retry-After` (as API Priority and
//! Fairness does) or 500, serves a share late, and ends the agent's watches
//! with 410 Expired (as an etcd compaction does). Besides the invariants of
//! every scenario: faults were injected, the agent did not exit, its request
//! count under pressure stays within a bound of its count over as long
//! without (no retry storm), and re-lists with nothing changed write nothing.

use std::time::{Duration, Instant};

use fleetbus_testsupport::try_wait_for;
use serde_json::{json, Value};

use super::{finish, start, Row, Size, CONVERGE};
use crate::fleet::{Node, SETUP};

/// What the plans select: the agent's requests (by its `User-Agent`).
const AGENT: &str = "fleetbus-agent/";
/// Watch expiries of the agent the no-rewrite check waits for (every kind
/// it watches, several times).
const RELISTS: u64 = 20;

/// The agent's counters on one API server (`/debug/faults`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    requests: u64,
    too_many_requests: u64,
    internal_errors: u64,
    delayed: u64,
    watches_expired: u64,
}

impl Counts {
    /// The agent's entries of a fault report (one per agent version that ran).
    fn of(report: &Value) -> Counts {
        let mut c = Counts::default();
        let clients = report["clients"].as_object().into_iter().flatten();
        for (_, v) in clients.filter(|(ua, _)| ua.starts_with(AGENT)) {
            let n = |f: &str| v[f].as_u64().unwrap_or(0);
            c.requests += n("requests");
            c.too_many_requests += n("tooManyRequests");
            c.internal_errors += n("internalErrors");
            c.delayed += n("delayed");
            c.watches_expired += n("watchesExpired");
        }
        c
    }

    fn since(&self, earlier: &Counts) -> Counts {
        Counts {
            requests: self.requests.saturating_sub(earlier.requests),
            too_many_requests: self
                .too_many_requests
                .saturating_sub(earlier.too_many_requests),
            internal_errors: self.internal_errors.saturating_sub(earlier.internal_errors),
            delayed: self.delayed.saturating_sub(earlier.delayed),
            watches_expired: self.watches_expired.saturating_sub(earlier.watches_expired),
        }
    }
}

async fn agent_counts(node: &Node) -> anyhow::Result<Counts> {
    Ok(Counts::of(&node.member.cluster.faults().await?))
}

/// API requests `node`'s agent has sent its API server so far (the
/// devcluster counts every client's requests, plan or not).
pub(super) async fn agent_requests(node: &Node) -> anyhow::Result<u64> {
    Ok(agent_counts(node).await?.requests)
}

/// The pressure: a fifth of the agent's requests 429 (`Retry-After: 1`), a
/// tenth 500, almost a third held 200 ms, every watch ended after `expire`.
fn pressure_plan(seed: u64, expire: Duration) -> Value {
    json!({
        "seed": seed,
        "userAgent": AGENT,
        "tooManyRequests": 0.2,
        "retryAfterSeconds": 1,
        "internalError": 0.1,
        "slow": 0.3,
        "latencyMs": 200,
        "expireWatchesAfterMs": u64::try_from(expire.as_millis()).unwrap_or(u64::MAX),
    })
}

/// The most requests the agent may send under pressure, given `base` sent
/// over as long without it: retries of refused requests (3 in 10 here,
/// about 1.4 tries each) and a re-list per ended watch (a list, its pages
/// and a new watch) on top of the same work, then a margin. A retry without
/// backoff or `Retry-After` would send orders of magnitude more.
fn request_bound(base: u64, under: &Counts) -> u64 {
    3 * base + 4 * under.watches_expired + 50
}

/// What the injected faults and the agent's requests say is wrong.
fn judge(name: &str, base: &Counts, under: &Counts) -> Vec<String> {
    let mut v = Vec::new();
    if under.too_many_requests == 0 || under.internal_errors == 0 || under.watches_expired == 0 {
        v.push(format!(
            "{name}: too few faults injected to test anything: {under:?}"
        ));
    }
    let bound = request_bound(base.requests, under);
    if under.requests > bound {
        v.push(format!(
            "{name}: the agent sent {} requests under pressure, more than {bound} \
             ({} over as long without it): a retry storm",
            under.requests, base.requests
        ));
    }
    v
}

pub(super) async fn api_pressure(seed: u64, size: Size) -> anyhow::Result<Row> {
    let mut run = start(seed, size).await?;
    let window = size.outage;
    let expire = (window / 3).clamp(Duration::from_secs(2), Duration::from_secs(10));
    tokio::time::sleep(size.churn).await;
    let mut extra = Vec::new();
    let last_fault = {
        let node = run.fleet.last()?;
        // The same churn without faults, then with them, as long each.
        let a = agent_counts(node).await?;
        tokio::time::sleep(window).await;
        let b = agent_counts(node).await?;
        node.member
            .cluster
            .set_faults(&pressure_plan(seed, expire))
            .await?;
        tokio::time::sleep(window).await;
        node.member.cluster.set_faults(&json!({})).await?;
        let c = agent_counts(node).await?;
        let (base, under) = (b.since(&a), c.since(&b));
        eprintln!(
            "fleetbus-chaos: api-pressure: the agent's requests over {window:?}: {} without faults, {} under pressure ({under:?})",
            base.requests, under.requests
        );
        extra.extend(judge(node.name(), &base, &under));
        Instant::now()
    };
    tokio::time::sleep(size.churn).await;
    extra.extend(
        run.fleet
            .nodes
            .last_mut()
            .and_then(|n| n.agent_exited("under pressure")),
    );
    // Converged, re-lists with nothing changed must write nothing (the quiet
    // period of `finish` catches a late one).
    run.load.stop().await;
    let conv = run.fleet.converge(CONVERGE).await?;
    let converged = conv.after.map(|_| last_fault.elapsed());
    if converged.is_some() {
        extra.extend(relists_write_nothing(run.fleet.last()?, seed).await?);
    }
    let mut row = finish("api-pressure", seed, run, last_fault, extra).await?;
    // Convergence after the pressure, not after the re-list check.
    if row.converged.is_some() {
        row.converged = converged;
    }
    Ok(row)
}

/// Ends every watch of `node`'s agent every second until it has re-listed
/// [`RELISTS`] times, with nothing changing: a violation if that wrote a
/// ConfigMap.
async fn relists_write_nothing(node: &Node, seed: u64) -> anyhow::Result<Option<String>> {
    let writes = node.configmap_writes().await?;
    let before = agent_counts(node).await?.watches_expired;
    node.member
        .cluster
        .set_faults(&json!({"seed": seed, "userAgent": AGENT, "expireWatchesAfterMs": 1000}))
        .await?;
    let relisted = try_wait_for("the agent's watches ended and re-listed", SETUP, || async {
        let n = agent_counts(node)
            .await
            .map_err(|e| e.to_string())?
            .watches_expired
            .saturating_sub(before);
        if n >= RELISTS {
            Ok(())
        } else {
            Err(format!("{n} ended"))
        }
    })
    .await;
    node.member.cluster.set_faults(&json!({})).await?;
    relisted.map_err(anyhow::Error::msg)?;
    let after = node.configmap_writes().await?;
    Ok((after != writes).then(|| {
        format!(
            "{}: {} ConfigMap writes while re-listing after 410s with nothing changed",
            node.name(),
            after.saturating_sub(writes)
        )
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_agents_counters_are_read() {
        let report = json!({"clients": {
            "fleetbus-agent/0.1.0 (linux/x86_64)": {"requests": 10, "tooManyRequests": 2, "watchesExpired": 1},
            "(none)": {"requests": 99, "tooManyRequests": 50},
        }});
        let c = Counts::of(&report);
        assert_eq!(
            (c.requests, c.too_many_requests, c.watches_expired),
            (10, 2, 1)
        );
        assert_eq!(Counts::of(&json!({})), Counts::default());
    }

    #[test]
    fn a_retry_storm_or_no_fault_fails_the_scenario() {
        let base = Counts {
            requests: 100,
            ..Counts::default()
        };
        let under = Counts {
            requests: 300,
            too_many_requests: 20,
            internal_errors: 10,
            delayed: 30,
            watches_expired: 5,
        };
        assert!(judge("c3", &base, &under).is_empty());
        let storm = Counts {
            requests: 3_000,
            ..under
        };
        assert!(judge("c3", &base, &storm)[0].contains("retry storm"));
        let idle = Counts {
            watches_expired: 0,
            ..under
        };
        assert!(judge("c3", &base, &idle)[0].contains("too few faults"));
    }
}
