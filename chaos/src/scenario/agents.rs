//! Scenarios of the agents' own lives and of their acknowledgements: a sink
//! that stops answering while the others churn (`slow-sink`), JetStream acks
//! lost on every link (`redelivery`), every agent restarted in turn under
//! churn (`rolling-restart`), and a peer that leaves for good next to one
//! that crashes (`leave-vs-crash`).

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use fleetbus_testsupport::try_wait_for;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use super::{finish, finish_with, start, Row, Running, Size, CLUSTERS, CONVERGE};
use crate::fleet::{Fleet, Node, NS, SETUP};
use crate::oracle::{Oracle, RuleModel};
use crate::proxy::Fault;
use crate::workload::{lock, seq_of, ORIGIN_CLUSTER};

/// Writes of copies a sink may make per source object it must catch up on
/// after a pause, on average: one is enough for the last version, two when
/// the object was deleted and created again meanwhile (the old copy deleted,
/// the new one created); and a pass may run while the backlog still arrives
/// and write a version the next messages replace (short runs measured 11 to
/// 32 writes for 12 objects). Replaying every version would be about ten per
/// object. Per object, a write under way at the pause may add one.
const WRITES_PER_OBJECT: u64 = 3;

/// The slow sink's pause: 2 min in the full run (twice the outage), 12 s
/// short (twice the peer timeout: its peers see it Disconnected).
fn pause_of(size: Size) -> Duration {
    size.outage * 2
}

/// The last cluster's agent SIGSTOPped while the others make many updates
/// on few objects, then SIGCONTed: it reaches their last state writing each
/// copy about once, not every version made meanwhile.
pub(super) async fn slow_sink(seed: u64, size: Size) -> anyhow::Result<Row> {
    let fleet = Fleet::start(CLUSTERS).await?;
    let writes_before = fleet.configmap_writes().await?;
    let sink = fleet.nodes.len() - 1;
    let origins: Vec<&str> = fleet.nodes[..sink].iter().map(Node::name).collect();
    // Full: 5,000 updates on about 500 objects; short: 150 on 12.
    let updates = (size.backlog / 2) as u64;
    let writers = size.writers.max(1);
    let per_writer = (updates as usize / 10 / (origins.len() * writers)).max(3);
    let objects = (per_writer * writers * origins.len()) as u64;
    let load = fleet.start_load_on(&origins, seed, writers, per_writer, size.pace);
    let mut run = Running {
        fleet,
        load,
        writes_before,
    };
    tokio::time::sleep(size.churn).await;
    let sink_before = run.fleet.nodes[sink].configmap_writes().await?;
    let acked_before = lock(&run.fleet.oracle).acknowledged_writes();
    let seen_before = lock(&run.fleet.oracle).copy_events_by_source(run.fleet.nodes[sink].name());
    run.fleet.nodes[sink].member.agent.pause()?;
    let paused = Instant::now();
    let oracle = run.fleet.oracle.clone();
    let mut extra = Vec::new();
    let enough = try_wait_for("the updates made during the pause", SETUP * 5, || async {
        let n = lock(&oracle).acknowledged_writes() - acked_before;
        if n >= updates {
            Ok(())
        } else {
            Err(format!("{n} of {updates}"))
        }
    })
    .await;
    if let Err(e) = enough {
        extra.push(e);
    }
    run.load.stop().await;
    let made = lock(&oracle).acknowledged_writes() - acked_before;
    tokio::time::sleep_until((paused + pause_of(size)).into()).await;
    run.fleet.nodes[sink].member.agent.resume()?;
    let last_fault = Instant::now();
    let model = run.fleet.rule_model();
    let (mut row, run) =
        finish_with("slow-sink", seed, run, last_fault, extra, &model, None).await?;
    let node = &run.fleet.nodes[sink];
    let wrote = node.configmap_writes().await? - sink_before;
    eprintln!(
        "fleetbus-chaos: slow-sink: {} wrote {wrote} copies for {made} changes on {objects} objects made while it was stopped",
        node.name()
    );
    // Per object, what its watch saw the agent write since the pause.
    let seen = lock(&run.fleet.oracle).copy_history(node.name());
    let mut replayed: Vec<String> = seen
        .iter()
        .map(|(s, h)| (s, &h[seen_before.get(s).copied().unwrap_or(0) as usize..]))
        .filter(|(_, h)| h.len() as u64 > WRITES_PER_OBJECT + 1)
        .map(|(s, h)| format!("{s} {h:?}"))
        .collect();
    if wrote > objects * WRITES_PER_OBJECT || !replayed.is_empty() {
        replayed.truncate(5);
        row.violations.push(format!(
            "{}: {wrote} copy writes to catch up on {made} changes of {objects} objects (bound {}): intermediate versions written, e.g. {}",
            node.name(),
            objects * WRITES_PER_OBJECT,
            replayed.join(", ")
        ));
    }
    keep_logs_if_failed(&row, &run.fleet);
    Ok(row)
}

/// What one agent wrote and its sink's watch saw, so far ([`write_counts`]).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Counts {
    /// Copy writes its agent made (since it started).
    pub writes: u64,
    /// Copy changes its sink's watch saw.
    pub changes: u64,
    /// Of the writes, updates the API server found changed nothing.
    pub unchanged: u64,
    /// Writes (and unchanged updates) an agent process made since this was
    /// taken, before it was replaced: the new one counts from zero.
    carried: (u64, u64),
}

impl Counts {
    /// The agent is about to be replaced, and had counted `last` so far:
    /// what it wrote since this was taken is carried over, and the new
    /// process counts from zero.
    pub fn replaced(&mut self, last: &Counts) {
        self.carried.0 += last.writes.saturating_sub(self.writes);
        self.carried.1 += last.unchanged.saturating_sub(self.unchanged);
        self.writes = 0;
        self.unchanged = 0;
    }

    /// Writes, changes and unchanged updates from `self` to `later`.
    fn since(&self, later: &Counts) -> (u64, u64, u64) {
        (
            (later.writes + self.carried.0).saturating_sub(self.writes),
            later.changes.saturating_sub(self.changes),
            (later.unchanged + self.carried.1).saturating_sub(self.unchanged),
        )
    }
}

/// Per cluster: the copy writes its agent made and the copy changes its
/// sink's watch saw, so far. Taken while the agents write, the two are not
/// read at one instant: an agent counts a write when it reads the
/// response, after the watch may have delivered its event, so up to the
/// writes it has in flight (24) may count on the wrong side. Take it when
/// the fleet is quiet where the count must be exact.
pub(super) fn write_counts(fleet: &Fleet) -> anyhow::Result<Vec<Counts>> {
    let oracle = lock(&fleet.oracle);
    fleet
        .nodes
        .iter()
        .map(|n| {
            Ok(Counts {
                writes: n.agent_copy_writes()?,
                changes: oracle.copy_events(n.name()),
                unchanged: n.agent_unchanged_writes()?,
                carried: (0, 0),
            })
        })
        .collect()
}

/// Every agent's write requests beyond what its sink's watch saw change
/// since `before` (from [`write_counts`]): a write that changed nothing,
/// i.e. the same version written again. Updates the API server says
/// changed nothing are counted exactly and are a violation each.
pub(super) fn duplicate_writes(fleet: &Fleet, before: &[Counts]) -> anyhow::Result<Vec<String>> {
    let after = write_counts(fleet)?;
    let mut out = Vec::new();
    for ((n, b), a) in fleet.nodes.iter().zip(before).zip(after) {
        let (writes, changes, unchanged) = b.since(&a);
        eprintln!(
            "fleetbus-chaos: {}: {writes} copy writes, {changes} copy changes seen, {unchanged} updates that changed nothing",
            n.name()
        );
        if unchanged > 0 {
            out.push(format!(
                "{}: {unchanged} copy updates changed nothing (the API server kept the copy's resourceVersion)",
                n.name()
            ));
        }
        if writes > changes + noise(changes) {
            out.push(format!(
                "{}: {writes} copy writes for {changes} changes its watch saw: {} wrote nothing new (e.g. {})",
                n.name(),
                writes - changes,
                written_unseen(n, &lock(&fleet.oracle)).join(", ")
            ));
        }
    }
    Ok(out)
}

/// How many copy writes beyond the changes a sink's watch saw are noise, not
/// duplicates: full runs measured the two counts 1–2 apart either way with
/// nothing written twice that we could find (a recreate is one write and two
/// changes; a watch that restarts replays or skips); a copy written again per
/// redelivered message would be hundreds apart.
fn noise(changes: u64) -> u64 {
    (changes / 1000).max(3)
}

/// The copies `node`'s agent logged writing (`wrote copy`, `collected
/// copy`) more often than its sink's watch saw them change over the whole
/// run, as `name: writes/changes` (the first five): where to look in its log.
fn written_unseen(node: &Node, oracle: &Oracle) -> Vec<String> {
    let seen: std::collections::BTreeMap<String, u64> = oracle
        .copy_events_by_source(node.name())
        .into_iter()
        .map(|(s, n)| (s.name, n))
        .collect();
    let mut logged: std::collections::BTreeMap<String, u64> = Default::default();
    let marker = format!("copy=ConfigMap {NS}/");
    for line in node.member.agent.log().lines() {
        if !(line.contains("wrote copy") || line.contains("collected copy")) {
            continue;
        }
        let Some(at) = line.find(&marker) else {
            continue;
        };
        let name: String = line[at + marker.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect();
        *logged.entry(name).or_default() += 1;
    }
    logged
        .into_iter()
        .filter(|(name, n)| *n > seen.get(name).copied().unwrap_or(0))
        .take(5)
        .map(|(name, n)| format!("{name}: {n}/{}", seen.get(&name).copied().unwrap_or(0)))
        .collect()
}

/// Every agent's JetStream acknowledgements dropped for the outage (the
/// publish acks of its publications, and a consumer's acks if it acks)
/// while every origin churns: whatever JetStream delivers again, or the
/// agents publish again, writes no copy twice.
pub(super) async fn redelivery(seed: u64, size: Size) -> anyhow::Result<Row> {
    let fleet = Fleet::start(CLUSTERS).await?;
    // Counted from before the load, while the counts can be read exactly
    // (see `write_counts`).
    let before = write_counts(&fleet)?;
    let run = Running {
        writes_before: fleet.configmap_writes().await?,
        load: fleet.start_load(seed, size.writers, size.objects, size.pace),
        fleet,
    };
    tokio::time::sleep(size.churn).await;
    for n in &run.fleet.nodes {
        n.nats.set(Fault::DropAcks);
    }
    // Longer than a publish's wait for its ack (5 s), so publishers give up
    // and publish again.
    tokio::time::sleep(size.outage.max(Duration::from_secs(8))).await;
    for n in &run.fleet.nodes {
        n.nats.set(Fault::Pass);
    }
    let last_fault = Instant::now();
    let dropped: u64 = run
        .fleet
        .nodes
        .iter()
        .map(|n| n.nats.counters().acks_dropped.load(Ordering::Relaxed))
        .sum();
    let mut extra = Vec::new();
    eprintln!("fleetbus-chaos: redelivery: {dropped} acknowledgements dropped");
    if dropped == 0 {
        extra.push("no acknowledgement was dropped: nothing was tested".to_owned());
    }
    tokio::time::sleep(size.churn).await;
    let model = run.fleet.rule_model();
    let (mut row, run) =
        finish_with("redelivery", seed, run, last_fault, extra, &model, None).await?;
    row.violations
        .extend(duplicate_writes(&run.fleet, &before)?);
    keep_logs_if_failed(&row, &run.fleet);
    Ok(row)
}

/// Every agent stopped (SIGTERM, no leave) in turn under churn, down until
/// its peers show it Disconnected, then started again: nothing lost, and no
/// copy deleted because its origin was Disconnected (the watches of every
/// sink run across all the restarts).
pub(super) async fn rolling_restart(seed: u64, size: Size) -> anyhow::Result<Row> {
    let mut run = start(seed, size).await?;
    tokio::time::sleep(size.churn).await;
    let mut extra = Vec::new();
    for i in 0..run.fleet.nodes.len() {
        let name = run.fleet.nodes[i].name().to_owned();
        let status = run.fleet.nodes[i].member.agent.stop();
        if !status.success() {
            extra.push(format!("{name}: the agent exited with {status} on SIGTERM"));
        }
        for peer in run.fleet.nodes.iter().filter(|n| n.name() != name) {
            peer.wait_peer_state(&name, "Disconnected").await?;
        }
        run.fleet.nodes[i].member.agent.spawn()?;
        run.fleet.nodes[i].wait_ready().await?;
        // One agent down at a time: the next stops once this one is back.
        for peer in run.fleet.nodes.iter().filter(|n| n.name() != name) {
            peer.wait_peer_state(&name, "Ready").await?;
        }
    }
    let last_fault = Instant::now();
    tokio::time::sleep(size.churn).await;
    finish("rolling-restart", seed, run, last_fault, extra).await
}

/// The resource of ResourceSyncRules.
fn rules() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleetbus.io", "v1alpha1", "ResourceSyncRule"),
        "resourcesyncrules",
    )
}

/// Sets the fleet's rule's orphanPolicy on the first cluster (where it was
/// created) and waits until that cluster's agent reports it read it.
async fn set_orphan_policy(fleet: &Fleet, policy: &str) -> anyhow::Result<()> {
    let api = Api::<DynamicObject>::all_with(fleet.nodes[0].member.client.clone(), &rules());
    let patch = serde_json::json!({"spec": {"orphanPolicy": policy}});
    let rule = api
        .patch("chaos", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let generation = rule.metadata.generation.unwrap_or_default();
    try_wait_for("the rule's new orphanPolicy read", SETUP, || async {
        let r = api.get("chaos").await.map_err(|e| e.to_string())?;
        let seen = r.data.pointer("/status/observedGeneration");
        match seen.and_then(serde_json::Value::as_i64) {
            Some(g) if g >= generation => Ok(()),
            other => Err(format!("observed {other:?}, generation {generation}")),
        }
    })
    .await
    .map_err(anyhow::Error::msg)
}

/// The ConfigMaps of [`NS`] on `node` whose names are those of `origin`'s
/// workload objects (copies or not).
async fn named_after(node: &Node, origin: &str) -> anyhow::Result<Vec<ConfigMap>> {
    let api: Api<ConfigMap> = Api::namespaced(node.member.client.clone(), NS);
    let prefix = format!("{origin}-w");
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|cm| cm.name_any().starts_with(&prefix))
        .collect())
}

/// `leaver` leaves for good (SIGTERM with `--leave-on-shutdown`), and the
/// sink `to` shows it Left.
async fn leave(fleet: &mut Fleet, leaver: usize, to: usize) -> anyhow::Result<()> {
    let name = fleet.nodes[leaver].name().to_owned();
    lock(&fleet.oracle).left(&name);
    let status = fleet.nodes[leaver].member.agent.stop();
    anyhow::ensure!(status.success(), "{name}: exit {status} on SIGTERM");
    fleet.nodes[to].wait_peer_state(&name, "Left").await
}

/// Four clusters: `c1` stays; `c2` leaves for good under orphanPolicy
/// Delete (its copies go), then `c3` under Orphan (its copies stay,
/// unmanaged), and `c4`'s agent is SIGKILLed (its copies stay, managed,
/// also once `c1` shows it Disconnected).
pub(super) async fn leave_vs_crash(seed: u64, size: Size) -> anyhow::Result<Row> {
    let mut fleet = Fleet::start(&["c1", "c2", "c3", "c4"]).await?;
    for n in &mut fleet.nodes[1..3] {
        n.respawn_with(&["--leave-on-shutdown"])?;
    }
    for n in &fleet.nodes {
        n.wait_ready().await?;
    }
    let writes_before = fleet.configmap_writes().await?;
    let load = fleet.start_load(seed, size.writers, size.objects, size.pace);
    let mut run = Running {
        fleet,
        load,
        writes_before,
    };
    tokio::time::sleep(size.churn).await;
    run.load.stop().await;
    let conv = run.fleet.converge(CONVERGE).await?;
    anyhow::ensure!(conv.after.is_some(), "not converged before the leaves");
    let fleet = &mut run.fleet;
    leave(fleet, 1, 0).await?;
    try_wait_for("c1 without c2's copies", CONVERGE, || async {
        match named_after(&fleet.nodes[0], "c2").await {
            Ok(left) if left.is_empty() => Ok(()),
            Ok(left) => Err(format!("{} left", left.len())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await
    .map_err(anyhow::Error::msg)?;
    set_orphan_policy(fleet, "Orphan").await?;
    leave(fleet, 2, 0).await?;
    fleet.nodes[3].member.agent.kill9();
    fleet.nodes[0].wait_peer_state("c4", "Disconnected").await?;
    let last_fault = Instant::now();
    // What c1 must hold: copies of c4's objects (crashed: they stay).
    let model = RuleModel {
        namespaces: BTreeSet::from([NS.to_owned()]),
        sources: BTreeSet::from(["c1".to_owned(), "c4".to_owned()]),
        sinks: BTreeSet::from(["c1".to_owned()]),
    };
    let (mut row, run) = finish_with(
        "leave-vs-crash",
        seed,
        run,
        last_fault,
        Vec::new(),
        &model,
        None,
    )
    .await?;
    let c1 = &run.fleet.nodes[0];
    let (of_c2, of_c3) = (named_after(c1, "c2").await?, named_after(c1, "c3").await?);
    for cm in of_c2 {
        row.violations.push(format!(
            "c1: {}/{} still there after c2 left under orphanPolicy Delete",
            NS,
            cm.name_any()
        ));
    }
    row.violations
        .extend(orphaned(&lock(&run.fleet.oracle), "c3", &of_c3));
    Ok(row)
}

/// What is wrong with the objects a sink holds of `origin`'s, which left
/// under orphanPolicy Orphan: each present source must still be there with
/// its last version, without fleetbus's origin annotation (unmanaged).
fn orphaned(oracle: &Oracle, origin: &str, held: &[ConfigMap]) -> Vec<String> {
    let mut out = Vec::new();
    for (source, (_, seq)) in oracle.present() {
        if source.origin != origin {
            continue;
        }
        match held.iter().find(|cm| cm.name_any() == source.name) {
            None => out.push(format!(
                "c1: no {source} after {origin} left under orphanPolicy Orphan"
            )),
            Some(cm) if cm.annotations().contains_key(ORIGIN_CLUSTER) => out.push(format!(
                "c1: {source} still managed after {origin} left under orphanPolicy Orphan"
            )),
            Some(cm) if seq_of(cm) != seq => out.push(format!(
                "c1: {source} kept at seq {}, its last is {seq}",
                seq_of(cm)
            )),
            Some(_) => {}
        }
    }
    out
}

/// What every agent did so far, for [`bounded_work`].
pub(super) struct Work {
    /// Per cluster: copy writes and copy changes seen ([`write_counts`]).
    writes: Vec<Counts>,
    /// Per cluster: envelopes its agent published, changes its writers made,
    /// connections its agent opened to NATS (through its proxy).
    published: Vec<(u64, u64, u64)>,
}

impl Work {
    /// Every agent's copy writes since this was taken, in node order.
    pub(super) fn copy_writes_since(&self, fleet: &Fleet) -> anyhow::Result<Vec<u64>> {
        Ok(write_counts(fleet)?
            .iter()
            .zip(&self.writes)
            .map(|(a, b)| b.since(a).0)
            .collect())
    }

    pub(super) fn now(fleet: &Fleet) -> anyhow::Result<Work> {
        let oracle = lock(&fleet.oracle);
        let published = fleet
            .nodes
            .iter()
            .map(|n| {
                let conns = n.nats.counters().connections.load(Ordering::Relaxed);
                Ok((
                    n.agent_published()?,
                    oracle.acknowledged_writes_of(n.name()),
                    conns,
                ))
            })
            .collect::<anyhow::Result<_>>()?;
        drop(oracle);
        Ok(Work {
            writes: write_counts(fleet)?,
            published,
        })
    }
}

/// Envelopes an agent may publish per change its origin made, on average:
/// one, and one more for a publish that failed in a cut and went again.
const PUBLISHES_PER_CHANGE: u64 = 2;
/// Connections an agent may open to NATS per cut of its link: async-nats
/// reconnects at once, then after a delay that doubles from a few ms, so a
/// 2 s cut costs about 11 attempts (22 measured for 2 cuts); a retry storm
/// without backoff would cost thousands.
const CONNECTIONS_PER_CUT: u64 = 16;

/// Bounded work since `before` (no retry storm): no copy written twice,
/// publishes in proportion to the changes made, reconnects in proportion to
/// the `cuts` of the links.
pub(super) fn bounded_work(fleet: &Fleet, before: &Work, cuts: u64) -> anyhow::Result<Vec<String>> {
    let mut out = duplicate_writes(fleet, &before.writes)?;
    let after = Work::now(fleet)?;
    for ((n, (p0, c0, k0)), (p1, c1, k1)) in fleet
        .nodes
        .iter()
        .zip(&before.published)
        .zip(after.published)
    {
        let (published, changes, conns) = (p1 - p0, c1 - c0, k1 - k0);
        eprintln!(
            "fleetbus-chaos: {}: {published} envelopes published for {changes} changes, {conns} NATS connections",
            n.name()
        );
        if published > changes * PUBLISHES_PER_CHANGE {
            out.push(format!(
                "{}: {published} envelopes published for {changes} changes of its objects (bound {})",
                n.name(),
                changes * PUBLISHES_PER_CHANGE
            ));
        }
        if conns > 1 + cuts * CONNECTIONS_PER_CUT {
            out.push(format!(
                "{}: {conns} connections to NATS for {cuts} cuts of its links (bound {})",
                n.name(),
                1 + cuts * CONNECTIONS_PER_CUT
            ));
        }
    }
    Ok(out)
}

/// Keeps the agents' logs of a row that failed on a check made after
/// convergence (`finish_with` keeps them when convergence failed).
pub(super) fn keep_logs_if_failed(row: &Row, fleet: &Fleet) {
    if row.passed() || row.converged.is_none() {
        return;
    }
    let dir = super::failed_logs_dir(&row.scenario, row.seed);
    match fleet.keep_logs(&dir) {
        Ok(()) => eprintln!(
            "fleetbus-chaos: {}: agent logs in {}",
            row.scenario,
            dir.display()
        ),
        Err(e) => eprintln!("fleetbus-chaos: {}: agent logs not kept: {e}", row.scenario),
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;

    fn counts(writes: u64, changes: u64, unchanged: u64) -> Counts {
        Counts {
            writes,
            changes,
            unchanged,
            carried: (0, 0),
        }
    }

    /// A step across an agent's replacement counts what the old process
    /// wrote after the step began and all the new one wrote: 40 + 25 writes
    /// for 70 changes (the old process's last 5 were not counted before its
    /// stop: a deficit, never a surplus), and the unchanged updates of both.
    #[test]
    fn a_replaced_agent_carries_its_writes_into_the_step() {
        let mut before = counts(100, 300, 1);
        before.replaced(&counts(140, 330, 2));
        assert_eq!(before.since(&counts(25, 370, 3)), (65, 70, 4));
        // Replaced twice in one step (the first upgrade restarts c3 too).
        before.replaced(&counts(30, 380, 3));
        assert_eq!(before.since(&counts(7, 390, 0)), (77, 90, 4));
    }

    /// Without a replacement the counts are plain differences.
    #[test]
    fn counts_since_are_differences() {
        assert_eq!(counts(10, 20, 0).since(&counts(15, 24, 1)), (5, 4, 1));
    }
}
