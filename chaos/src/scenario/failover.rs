//! Placement when a chosen cluster is lost: dead (`failover`) or cut from
//! the bus (`placement-partition`, below). A rule on c1 places each of
//! its ConfigMaps in namespace `placed` on 2 of the 3 other clusters; the
//! sink holding the most copies loses its agent and its API server
//! (SIGKILL both) while the usual churn runs on the chaos rule. Its API
//! server comes back first (it cannot have heard anything: every copy it
//! held is still there), then its agent (`failback: Never`: the new choice
//! stays and its stale copies are collected once the replacements exist).
//! In `placement-partition` the same sink's agent is cut from NATS instead
//! (its API server stays up) for the whole window, then heard again.
//!
//! Checked from what the sinks' API servers hold, sampled every
//! [`SAMPLE`], never from the agents' own records (the oracle must not echo
//! the system under test):
//! - outside the failover window (`afterSeconds` + [`GRACE`] from the kill)
//!   every object has at least 2 copies on the clusters that are up;
//! - the replacement copies all exist within that window (its time is
//!   reported);
//! - no flapping: on the clusters that stayed up, each object's set of
//!   holders changes at most once from the kill to the end;
//! - nothing deleted on the lost cluster while it could not hear (read
//!   after its API server returns; through the cut, every sample);
//! - at the end each object is on exactly 2 clusters, none of them the one
//!   that died.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use fleetbus_testsupport::try_wait_for;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{
    ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::{Api, ResourceExt};

use super::{finish_with, Row, Running, Size, CONVERGE};
use crate::fleet::{create_rule_json, Fleet, SETUP};
use crate::proxy::Fault;
use crate::workload::ORIGIN_CLUSTER;

/// The namespace the placed objects live in (not the chaos rule's).
const PLACED: &str = "placed";
/// The origin of the placed objects; the others are its candidate sinks.
const CLUSTERS: &[&str] = &["c1", "c2", "c3", "c4"];
/// How many clusters hold each placed object.
const COPIES: usize = 2;
/// Beyond `afterSeconds`, how long the replacements may take (the e2e
/// test's bound: detection plus a write).
const GRACE: Duration = Duration::from_secs(10);
/// How often the sinks' holdings are read.
const SAMPLE: Duration = Duration::from_millis(250);

/// Which sinks hold a copy of each placed object: object name → clusters.
type Holders = BTreeMap<String, BTreeSet<String>>;

/// How the chosen sink is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Strike {
    /// Its agent and API server SIGKILLed (`failover`).
    Kill,
    /// Its agent cut from NATS by its proxy, its API server up: its copies
    /// are watched through the cut (`placement-partition`).
    Cut,
}

/// `failover`: the chosen sink's agent and API server SIGKILLed.
pub(super) async fn failover(seed: u64, size: Size) -> anyhow::Result<Row> {
    strike("failover", Strike::Kill, seed, size).await
}

/// `placement-partition`: the chosen sink's agent cut from the bus for the
/// whole window. Its copies must all stay while it cannot hear, and go once
/// it hears again (failback Never).
pub(super) async fn placement_partition(seed: u64, size: Size) -> anyhow::Result<Row> {
    strike("placement-partition", Strike::Cut, seed, size).await
}

async fn strike(name: &str, how: Strike, seed: u64, size: Size) -> anyhow::Result<Row> {
    let after_seconds: u64 = if size.is_short() { 2 } else { 10 };
    let objects = if size.is_short() { 8 } else { 100 };
    let fleet = Fleet::start(CLUSTERS).await?;
    let writes_before = fleet.configmap_writes().await?;
    let names: BTreeSet<String> = (0..objects).map(|i| format!("p{i}")).collect();
    let placed = place(&fleet, after_seconds, &names).await?;
    let sinks: Vec<usize> = (1..fleet.nodes.len()).collect();

    let load = fleet.start_load(seed, size.writers, size.objects, size.pace);
    let mut run = Running {
        fleet,
        load,
        writes_before,
    };
    // The churn period before the strike is a duration by design (the
    // writers run meanwhile), as in every scenario; nothing is waited on.
    tokio::time::sleep(size.churn).await;
    // The sink holding the most copies dies, agent and API server.
    let victim = sinks
        .iter()
        .copied()
        .max_by_key(|i| {
            let name = run.fleet.nodes[*i].name();
            (placed.values().filter(|h| h.contains(name)).count(), *i)
        })
        .unwrap_or(1);
    let victim_name = run.fleet.nodes[victim].name().to_owned();
    let held: BTreeSet<String> = placed
        .iter()
        .filter(|(_, h)| h.contains(&victim_name))
        .map(|(n, _)| n.clone())
        .collect();
    match how {
        Strike::Kill => {
            run.fleet.nodes[victim].member.agent.kill9();
            run.fleet.nodes[victim].member.cluster.kill9();
        }
        Strike::Cut => run.fleet.nodes[victim].nats.set(Fault::Cut),
    }
    let window = Window {
        killed: Instant::now(),
        length: Duration::from_secs(after_seconds) + GRACE,
        stable: size.outage / 2,
    };
    let living: Vec<usize> = sinks.iter().copied().filter(|i| *i != victim).collect();
    let last = survivors_of(&placed, &victim_name);
    let cut = (how == Strike::Cut).then_some((victim, &held));
    let mut extra = watch_window(&run.fleet, &living, &names, last, &window, cut).await?;

    // Its API server returns alone: it heard nothing, so nothing went.
    if how == Strike::Kill {
        run.fleet.nodes[victim].member.cluster.restart()?;
    }
    let still = try_wait_for("the dead cluster's API server back", SETUP, || async {
        holders(&run.fleet, &[victim])
            .await
            .map_err(|e| format!("{e:#}"))
    })
    .await
    .map_err(anyhow::Error::msg)?;
    extra.extend(deleted_unheard(&victim_name, &held, &still));
    // Its agent returns (or hears again): failback Never, its stale copies collected.
    match how {
        Strike::Kill => {
            run.fleet.nodes[victim].member.agent.spawn()?;
            run.fleet.nodes[victim].wait_ready().await?;
        }
        Strike::Cut => run.fleet.nodes[victim].nats.set(Fault::Pass),
    }
    let last_fault = Instant::now();
    let end = try_wait_for(
        "each placed object on exactly 2 sinks, none the dead one",
        CONVERGE,
        || async {
            let h = holders(&run.fleet, &sinks)
                .await
                .map_err(|e| format!("{e:#}"))?;
            short_of(&h, &names, COPIES, Some(&victim_name)).map_or(Ok(()), Err)
        },
    )
    .await;
    if let Err(e) = end {
        extra.push(e);
    }
    let model = run.fleet.rule_model();
    let (row, _) = finish_with(name, seed, run, last_fault, extra, &model, None).await?;
    Ok(row)
}

/// The namespace everywhere, `role=sink` on c2–c4, the placement rule and
/// the objects `names` on c1; returns once each has its copies.
async fn place(
    fleet: &Fleet,
    after_seconds: u64,
    names: &BTreeSet<String>,
) -> anyhow::Result<Holders> {
    for node in &fleet.nodes {
        create_namespace(&node.member.client, PLACED).await?;
    }
    for node in &fleet.nodes[1..] {
        label_sink(&node.member.client, node.name()).await?;
    }
    create_rule(&fleet.nodes[0].member.client, after_seconds).await?;
    let cms: Api<ConfigMap> = Api::namespaced(fleet.nodes[0].member.client.clone(), PLACED);
    for (i, name) in names.iter().enumerate() {
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": PLACED},
            "data": {"i": i.to_string()},
        }))?;
        cms.create(&PostParams::default(), &cm).await?;
    }
    let sinks: Vec<usize> = (1..fleet.nodes.len()).collect();
    try_wait_for("every placed object on 2 sinks", SETUP, || async {
        let h = holders(fleet, &sinks).await.map_err(|e| format!("{e:#}"))?;
        short_of(&h, names, COPIES, None).map_or(Ok(h), Err)
    })
    .await
    .map_err(anyhow::Error::msg)
}

/// The failover window: from the kill, `length` for the replacements, then
/// `stable` with them in place.
struct Window {
    killed: Instant,
    length: Duration,
    stable: Duration,
}

/// The copies `victim` held (`held`) that it no longer holds (`now`): each
/// deleted while it could not hear the decision.
fn deleted_unheard(victim: &str, held: &BTreeSet<String>, now: &Holders) -> Vec<String> {
    held.iter()
        .filter(|n| !now.contains_key(*n))
        .map(|n| format!("{victim}: {PLACED}/{n} deleted while it could not hear"))
        .collect()
}

/// Samples the `living` sinks from the strike until the replacements exist
/// and stayed for `stable`, or the window is over; returns the violations
/// (copies short past the window or lost again, flapping, and with `cut`,
/// a copy the cut sink held gone while it was cut).
async fn watch_window(
    fleet: &Fleet,
    living: &[usize],
    names: &BTreeSet<String>,
    mut last: Holders,
    w: &Window,
    cut: Option<(usize, &BTreeSet<String>)>,
) -> anyhow::Result<Vec<String>> {
    let mut extra = Vec::new();
    let mut changes: BTreeMap<String, usize> = BTreeMap::new();
    let mut replaced_after: Option<Duration> = None;
    let mut late = false;
    while replaced_after.is_none_or(|t| w.killed.elapsed() < t + w.stable) {
        if let Some((victim, held)) = cut {
            let now = holders(fleet, &[victim]).await?;
            let gone = deleted_unheard(fleet.nodes[victim].name(), held, &now);
            if !gone.is_empty() {
                extra.extend(gone);
                break;
            }
        }
        let h = holders(fleet, living).await?;
        for (name, set) in &h {
            if last.get(name) != Some(set) {
                *changes.entry(name.clone()).or_default() += 1;
            }
        }
        let at = w.killed.elapsed();
        match (short_of(&h, names, COPIES, None), replaced_after) {
            (None, None) => replaced_after = Some(at),
            (Some(why), Some(_)) => {
                extra.push(format!("{at:?} after the strike, copies lost again: {why}"));
                break;
            }
            // Past the window: a violation, but sampling goes on (to twice
            // the window) so that the row says how late the replacements were.
            (Some(why), None) if at > w.length && !late => {
                extra.push(format!(
                    "{at:?} after the strike (past the {:?} window): {why}",
                    w.length
                ));
                late = true;
            }
            (Some(_), None) if at > w.length * 2 => break,
            _ => {}
        }
        last = h;
        // The sampling period: the invariants are judged at every sample,
        // so a fixed pace (not a condition) is the point.
        tokio::time::sleep(SAMPLE).await;
    }
    match replaced_after {
        Some(t) => {
            eprintln!("fleetbus-chaos: replacements complete {t:?} after the strike");
            if late {
                extra.push(format!("replacements complete only {t:?} after the strike"));
            }
        }
        None => extra.push(format!(
            "replacements not complete within {:?}",
            w.length * 2
        )),
    }
    for (name, n) in &changes {
        if *n > 1 {
            extra.push(format!(
                "{PLACED}/{name}: its holders changed {n} times for one fault (flapping)"
            ));
        }
    }
    Ok(extra)
}

/// What is wrong with `h`: an object of `names` with fewer than `want`
/// holders (or, with `exact_without`, not exactly `want`, or on that cluster).
fn short_of(
    h: &Holders,
    names: &BTreeSet<String>,
    want: usize,
    exact_without: Option<&str>,
) -> Option<String> {
    let empty = BTreeSet::new();
    let wrong: Vec<String> = names
        .iter()
        .filter_map(|n| {
            let set = h.get(n).unwrap_or(&empty);
            let bad = match exact_without {
                None => set.len() < want,
                Some(dead) => set.len() != want || set.contains(dead),
            };
            bad.then(|| format!("{n} on {set:?}"))
        })
        .take(5)
        .collect();
    (!wrong.is_empty()).then(|| wrong.join(", "))
}

/// `h` without `dead` among the holders (what the living hold).
fn survivors_of(h: &Holders, dead: &str) -> Holders {
    h.iter()
        .map(|(n, set)| {
            let mut s = set.clone();
            s.remove(dead);
            (n.clone(), s)
        })
        .collect()
}

/// The placed objects' copies on `sinks`: a ConfigMap in [`PLACED`] whose
/// origin annotation names c1.
async fn holders(fleet: &Fleet, sinks: &[usize]) -> anyhow::Result<Holders> {
    let mut out = Holders::new();
    for i in sinks {
        let node = &fleet.nodes[*i];
        let list = Api::<ConfigMap>::namespaced(node.member.client.clone(), PLACED)
            .list(&ListParams::default())
            .await?;
        for cm in list {
            if cm.annotations().get(ORIGIN_CLUSTER).map(String::as_str) == Some("c1") {
                out.entry(cm.name_any())
                    .or_default()
                    .insert(node.name().to_owned());
            }
        }
    }
    Ok(out)
}

async fn create_namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// `role=sink` on the cluster's own Cluster object (what selectors match).
async fn label_sink(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("fleetbus.io", "v1alpha1", "Cluster"),
        "clusters",
    );
    let api = Api::<DynamicObject>::all_with(client.clone(), &ar);
    let patch = serde_json::json!({"metadata": {"labels": {"role": "sink"}}});
    try_wait_for(
        &format!("{name}'s Cluster object labelled"),
        SETUP,
        || async {
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .await
    .map_err(anyhow::Error::msg)
}

/// The placement rule on the origin: 2 of the sinks, failover after
/// `after_seconds`, failback Never, purge Graciously.
async fn create_rule(client: &kube::Client, after_seconds: u64) -> anyhow::Result<()> {
    create_rule_json(
        client,
        serde_json::json!({
            "apiVersion": "fleetbus.io/v1alpha1",
            "kind": "ResourceSyncRule",
            "metadata": {"name": "placed"},
            "spec": {
                "groupVersionKind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "rules": [{"match": [{"namespaces": [PLACED]}]}],
                "clusterSelector": {"matchLabels": {"role": "sink"}},
                "placement": {
                    "clusters": COPIES,
                    "failover": {"afterSeconds": after_seconds, "failback": "Never", "purge": "Graciously"},
                },
            },
        }),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(entries: &[(&str, &[&str])]) -> Holders {
        entries
            .iter()
            .map(|(n, cs)| {
                (
                    (*n).to_owned(),
                    cs.iter().map(|c| (*c).to_owned()).collect(),
                )
            })
            .collect()
    }

    #[test]
    fn short_of_names_objects_with_too_few_or_wrong_holders() {
        let names: BTreeSet<String> = ["a", "b"].iter().map(|s| (*s).to_owned()).collect();
        let ok = h(&[("a", &["c2", "c3"]), ("b", &["c3", "c4"])]);
        assert_eq!(short_of(&ok, &names, 2, None), None);
        assert_eq!(
            short_of(&ok, &names, 2, Some("c2")).as_deref(),
            Some(r#"a on {"c2", "c3"}"#)
        );
        let missing = h(&[("a", &["c2"])]);
        let why = short_of(&missing, &names, 2, None).unwrap();
        assert!(why.contains("a on") && why.contains("b on {}"), "{why}");
        let three = h(&[("a", &["c2", "c3", "c4"]), ("b", &["c3", "c4"])]);
        assert_eq!(
            short_of(&three, &names, 2, None),
            None,
            "at least, outside the end"
        );
        assert!(
            short_of(&three, &names, 2, Some("c1")).is_some(),
            "exactly, at the end"
        );
    }

    #[test]
    fn a_copy_missing_from_what_the_lost_sink_held_is_named() {
        let held: BTreeSet<String> = ["a", "b"].iter().map(|s| (*s).to_owned()).collect();
        assert!(deleted_unheard("c2", &held, &h(&[("a", &["c2"]), ("b", &["c2"])])).is_empty());
        assert_eq!(
            deleted_unheard("c2", &held, &h(&[("a", &["c2"])])),
            vec!["c2: placed/b deleted while it could not hear".to_owned()]
        );
    }

    #[test]
    fn survivors_leave_out_the_dead() {
        let all = h(&[("a", &["c2", "c3"])]);
        assert_eq!(survivors_of(&all, "c2"), h(&[("a", &["c3"])]));
    }
}
