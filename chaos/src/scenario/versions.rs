//! Rolling upgrades (`mixed-versions`, on demand): the fleet starts on an
//! earlier revision's agent, N−1, built from git history, and each agent in
//! turn is stopped and started again on the workspace's, N, under churn;
//! the oracle's invariants are checked after every step and at the end, and
//! `fleetbus rules preview` is asked while the fleet is mixed.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use fleetbus_testsupport::{cargo_bin, repo_root};

use super::agents::{duplicate_writes, write_counts, Counts};
use super::{finish_with, Row, Running, Size, CLUSTERS, CONVERGE, QUIET};
use crate::fleet::{Fleet, Load, Node};

/// N−1: `d6cd565`, main's previous release point (the copy writer's answer
/// deadline), before placement, operator taints and the cluster inventory
/// added a stream, registry keys and record fields. Its agent speaks
/// protocol 1: its cluster records carry no `protocol` member. Move it
/// forward with each release, to the release before the workspace's.
pub const OLD_REVISION: &str = "d6cd565";

/// How long `scripts/old-agent` may take: a cold build of the agent and its
/// dependencies on a two-core machine took about 12 minutes.
const BUILD: Duration = Duration::from_secs(40 * 60);
/// How long one `fleetbus rules preview` may take (its own timeout per
/// cluster is 10 s).
const PREVIEW: Duration = Duration::from_secs(60);

/// The fleet on [`OLD_REVISION`]'s agent (`old_agent`, else built by
/// `scripts/old-agent`), converged under churn, then each agent upgraded in
/// turn under churn: converged, nothing lost, stale or written twice and
/// quiet after every step; `rules preview` answered in the mixed fleet.
pub(super) async fn mixed_versions(
    seed: u64,
    size: Size,
    old_agent: Option<&Path>,
) -> anyhow::Result<Row> {
    let old = match old_agent {
        Some(p) => p.to_path_buf(),
        None => build_old_agent().await?,
    };
    let new = cargo_bin("fleetbus-agent");
    eprintln!(
        "fleetbus-chaos: mixed-versions: from {} ({OLD_REVISION}) to {}",
        old.display(),
        new.display()
    );
    let fleet = Fleet::start_on(CLUSTERS, &old).await?;
    let writes_before = fleet.configmap_writes().await?;
    let before = write_counts(&fleet)?;
    let load = phase_load(&fleet, seed, size, 0);
    let mut run = Running {
        fleet,
        load,
        writes_before,
    };
    let mut steps = Steps::default();
    // A fixed period of churn, not a wait for a condition: each step is
    // checked after the same amount of workload, as every scenario runs.
    tokio::time::sleep(size.churn).await;
    steps
        .check(&mut run, &format!("all on {OLD_REVISION}"), &before)
        .await?;
    let mut old_logs = Vec::new();
    for i in 0..run.fleet.nodes.len() {
        // Counted from here, while the fleet is quiet (the last check ended
        // converged and quiet): under load the two counts are not read at
        // one instant (see `write_counts`), and up to an agent's writes in
        // flight showed as written twice (7–9 in runs of 2026-11).
        let mut before = write_counts(&run.fleet)?;
        run.load = phase_load(&run.fleet, seed, size, i + 1);
        // Half a churn period before the upgrade, so it lands under load.
        tokio::time::sleep(size.churn / 2).await;
        let name = run.fleet.nodes[i].name().to_owned();
        // What the old process wrote until now counts in the step; the new
        // one counts from zero. (Writes between this and its stop are not
        // counted: they can only hide a surplus, never make one.)
        before[i].replaced(&write_counts(&run.fleet)?[i]);
        old_logs.push((name.clone(), respawn(&mut run.fleet, i, &new).await?));
        let last = run.fleet.nodes.len() - 1;
        let mut step = format!("{name} upgraded");
        if i == 0 {
            // N−1 must still start on a bus N has set up (its streams,
            // buckets and keys): an old agent restarted mid-upgrade, as a
            // rescheduled pod would be.
            before[last].replaced(&write_counts(&run.fleet)?[last]);
            old_logs.push((
                run.fleet.nodes[last].name().to_owned(),
                respawn(&mut run.fleet, last, &old).await?,
            ));
            step += &format!(
                " and {} restarted on {OLD_REVISION}",
                run.fleet.nodes[last].name()
            );
        }
        // The churn period after the upgrade (see above).
        tokio::time::sleep(size.churn).await;
        steps.check(&mut run, &step, &before).await?;
        if i + 1 < run.fleet.nodes.len() {
            steps
                .extra
                .extend(preview_in_mixed_fleet(&run.fleet, &step).await?);
            steps.extra.extend(skew_unseen(&run.fleet.nodes[i], &step));
        }
    }
    let before = write_counts(&run.fleet)?;
    run.load = phase_load(&run.fleet, seed, size, run.fleet.nodes.len() + 1);
    let last_fault = Instant::now();
    // A last churn period with every agent on N, then the final check.
    tokio::time::sleep(size.churn).await;
    let model = run.fleet.rule_model();
    let (mut row, run) = finish_with(
        "mixed-versions",
        seed,
        run,
        last_fault,
        Vec::new(),
        &model,
        None,
    )
    .await?;
    row.violations
        .extend(duplicate_writes(&run.fleet, &before)?);
    // What a step reported already is not reported again, unlabelled.
    row.violations.retain(|v| !steps.reported.contains(v));
    let mut violations = steps.extra;
    violations.append(&mut row.violations);
    row.violations = violations;
    if !row.passed() {
        keep_logs(&row, &run.fleet, &old_logs);
    }
    Ok(row)
}

/// `scripts/old-agent OLD_REVISION`: the old agent's path, built once.
async fn build_old_agent() -> anyhow::Result<PathBuf> {
    let script = repo_root().join("scripts/old-agent");
    eprintln!(
        "fleetbus-chaos: mixed-versions: {} {OLD_REVISION} (a build of minutes the first time)",
        script.display()
    );
    let mut cmd = tokio::process::Command::new(&script);
    cmd.arg(OLD_REVISION)
        .current_dir(repo_root())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true);
    let out = tokio::time::timeout(BUILD, cmd.output())
        .await
        .with_context(|| format!("{} took over {BUILD:?}", script.display()))?
        .with_context(|| format!("run {}", script.display()))?;
    anyhow::ensure!(
        out.status.success(),
        "{} {OLD_REVISION}: {}",
        script.display(),
        out.status
    );
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(|l| PathBuf::from(l.trim()))
        .context("scripts/old-agent printed no path")?;
    anyhow::ensure!(path.is_file(), "no old agent at {}", path.display());
    Ok(path)
}

/// The churn of phase `phase` (0: before the upgrades, then one per
/// step): writers of their own, so that each may start from nothing while
/// the objects of the earlier phases stay and must stay right.
fn phase_load(fleet: &Fleet, seed: u64, size: Size, phase: usize) -> Load {
    let all: Vec<&str> = fleet.nodes.iter().map(Node::name).collect();
    let writers = phase * size.writers..(phase + 1) * size.writers;
    fleet.start_writers(&all, seed, writers, size.objects, size.pace)
}

/// Node `i`'s agent stopped (SIGTERM) and started on `bin`, back once it
/// answers ready and every peer shows it Ready; the log of the agent it
/// replaced is returned.
async fn respawn(fleet: &mut Fleet, i: usize, bin: &Path) -> anyhow::Result<String> {
    let node = &mut fleet.nodes[i];
    let name = node.name().to_owned();
    let log = node.respawn_on(bin)?;
    node.wait_ready().await?;
    for peer in fleet.nodes.iter().filter(|n| n.name() != name) {
        peer.wait_peer_state(&name, "Ready").await?;
    }
    eprintln!(
        "fleetbus-chaos: mixed-versions: {name} runs {}",
        bin.display()
    );
    Ok(log)
}

/// What the steps found, labelled with the step, and what they reported
/// (the oracle keeps its history: the final check sees it again).
#[derive(Default)]
struct Steps {
    extra: Vec<String>,
    reported: BTreeSet<String>,
}

impl Steps {
    /// Stops the churn and checks the invariants after `step`: converged
    /// within [`CONVERGE`], no violation the oracle had not seen before, quiet
    /// for [`QUIET`] after, no copy written twice since `before` (from
    /// `write_counts`).
    async fn check(
        &mut self,
        run: &mut Running,
        step: &str,
        before: &[Counts],
    ) -> anyhow::Result<()> {
        run.load.stop().await;
        let conv = run.fleet.converge(CONVERGE).await?;
        let mut found: Vec<String> = conv.violations.iter().map(ToString::to_string).collect();
        match conv.after {
            None => self
                .extra
                .push(format!("after {step}: not converged within {CONVERGE:?}")),
            Some(after) => {
                eprintln!(
                    "fleetbus-chaos: mixed-versions: after {step}: converged in {:.1} s",
                    after.as_secs_f64()
                );
                let writes = run.fleet.configmap_writes().await?;
                // The quiet window itself: writes are counted across it.
                tokio::time::sleep(QUIET).await;
                let later = run.fleet.configmap_writes().await?.saturating_sub(writes);
                if later > 0 {
                    found.push(format!(
                        "{later} ConfigMap writes in the {QUIET:?} after convergence (ping-pong?)"
                    ));
                }
            }
        }
        found.extend(duplicate_writes(&run.fleet, before)?);
        for v in found {
            if self.reported.insert(v.clone()) {
                self.extra.push(format!("after {step}: {v}"));
            }
        }
        Ok(())
    }
}

/// A violation unless the upgraded agent on `node` logged that a peer
/// speaks the previous protocol: N tells N−1 apart (PROTOCOL §7.1).
fn skew_unseen(node: &Node, step: &str) -> Option<String> {
    let told = node
        .member
        .agent
        .log()
        .contains("peer speaks another fleet protocol, within the supported skew");
    (!told).then(|| {
        format!(
            "after {step}: {} logged no peer of the previous protocol",
            node.name()
        )
    })
}

/// `fleetbus rules preview` of the fleet's rule, and of a candidate like it,
/// while the fleet is mixed: exit 0 or 1 (no change, changes), never 2 (a
/// cluster refused or did not answer). What each run printed goes to stderr.
async fn preview_in_mixed_fleet(fleet: &Fleet, step: &str) -> anyhow::Result<Vec<String>> {
    let candidate = tempfile::Builder::new().suffix(".yaml").tempfile()?;
    // A candidate as an operator would preview it: the fleet's rule, renamed.
    std::fs::write(
        candidate.path(),
        crate::fleet::rule_json("chaos-candidate").to_string(),
    )?;
    let path = candidate.path().display().to_string();
    let mut out = Vec::new();
    for args in [vec!["--rule", "chaos"], vec!["-f", path.as_str()]] {
        let (code, text) = preview(fleet, &args).await?;
        // Each cluster's summary and any error, not every change listed.
        let summary: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("cluster ") || l.contains("error"))
            .collect();
        eprintln!(
            "fleetbus-chaos: mixed-versions: after {step}: rules preview {}: exit {code:?}\n  {}",
            args.join(" "),
            summary.join("\n  ")
        );
        if !matches!(code, Some(0 | 1)) {
            out.push(format!(
                "after {step}: rules preview {} exited {code:?} in the mixed fleet: {}",
                args.join(" "),
                text.lines()
                    .filter(|l| l.contains("error") || l.contains("refused"))
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
    }
    Ok(out)
}

/// `fleetbus rules preview <args>` against the fleet's NATS: its exit code
/// and what it printed (stdout, then stderr).
async fn preview(fleet: &Fleet, args: &[&str]) -> anyhow::Result<(Option<i32>, String)> {
    let mut cmd = tokio::process::Command::new(cargo_bin("fleetbus"));
    cmd.args(["rules", "preview"])
        .args(args)
        .env("FLEETBUS_NATS_URL", fleet.nats.url())
        .env_remove("FLEETBUS_SUBJECT_PREFIX")
        .kill_on_drop(true);
    let out = tokio::time::timeout(PREVIEW, cmd.output())
        .await
        .with_context(|| format!("rules preview took over {PREVIEW:?}"))??;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok((out.status.code(), text))
}

/// A failed run's logs: every agent's (`<cluster>.log`) and those of the
/// agents the steps replaced (`<cluster>-before-<k>.log`, in step order).
fn keep_logs(row: &Row, fleet: &Fleet, old: &[(String, String)]) {
    let dir = super::failed_logs_dir(&row.scenario, row.seed);
    let kept = fleet.keep_logs(&dir).and_then(|()| {
        old.iter().enumerate().try_for_each(|(k, (name, log))| {
            std::fs::write(dir.join(format!("{name}-before-{k}.log")), log)
        })
    });
    match kept {
        Ok(()) => eprintln!(
            "fleetbus-chaos: mixed-versions: agent logs in {}",
            dir.display()
        ),
        Err(e) => eprintln!("fleetbus-chaos: mixed-versions: agent logs not kept: {e}"),
    }
}
