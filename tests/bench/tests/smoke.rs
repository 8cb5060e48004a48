//! CI's smoke run of the benchmark harness: every scenario at tiny
//! sizes against real processes. Asserts only that each scenario ran to its
//! end and produced samples, never on times; the tables go to a temporary file, not
//! to BENCHMARKS.md.

use std::process::Command;

#[test]
fn all_scenarios_run_and_produce_samples() {
    let out = tempfile::Builder::new()
        .suffix(".md")
        .tempfile()
        .expect("temp file");
    let run = Command::new(env!("CARGO_BIN_EXE_fleetbus-bench"))
        .args(["all", "--smoke", "--out"])
        .arg(out.path())
        .output()
        .expect("run fleetbus-bench");
    let report = std::fs::read_to_string(out.path()).expect("read report");
    assert!(
        run.status.success(),
        "fleetbus-bench all --smoke failed ({}):\n{report}\nstderr:\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    for title in [
        "1. Floor",
        "2. Propagation",
        "3. Drift",
        "4. Throughput",
        "4b. Burst",
        "5. Catch-up",
        "6. Memory",
        "7. Fleet scaling",
        "8. Wire size",
        "11. Placement",
        "12. Multi-cluster Services",
        "Goals of this run",
    ] {
        assert!(
            report.contains(&format!("### {title}")),
            "no table {title}:\n{report}"
        );
    }
    assert!(report.contains("SMOKE run"), "{report}");
    assert!(!report.contains("FAILED"), "{report}");
    // A scenario that stopped early or whose sink did not catch up is not a pass.
    assert!(!report.contains("INCOMPLETE"), "{report}");
}

/// The cost of replication at smoke size: propagation on one
/// nats-server, on the 3-node cluster of deploy/nats/hub.conf (agents
/// --replicas 3) and through a site leaf node (c1 at the site, c2 on the
/// hub). Proves that an object crosses each topology end to end and that the
/// side-by-side table is printed with a number for each; never asserts times.
#[test]
fn propagation_runs_on_the_cluster_and_through_a_leaf_node() {
    let out = tempfile::Builder::new()
        .suffix(".md")
        .tempfile()
        .expect("temp file");
    let run = Command::new(env!("CARGO_BIN_EXE_fleetbus-bench"))
        .args([
            "propagation",
            "--smoke",
            "--nats",
            "single,cluster3,leaf",
            "--out",
        ])
        .arg(out.path())
        .output()
        .expect("run fleetbus-bench");
    let report = std::fs::read_to_string(out.path()).expect("read report");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "fleetbus-bench propagation --nats single,cluster3,leaf failed ({}):\n{report}\nstderr:\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(!report.contains("FAILED"), "{report}");
    for title in [
        "### 2. Propagation",
        "### 2. Propagation of one 1 KiB ConfigMap at a time (c1 → c2) — NATS cluster3",
        "### 2. Propagation of one 1 KiB ConfigMap at a time (c1 → c2) — NATS leaf",
        "### Replication cost",
    ] {
        assert!(report.contains(title), "no {title}:\n{report}");
        assert!(stdout.contains(title), "not printed: {title}:\n{stdout}");
    }
    // The p50 row has a number in every topology's column and a ratio to single.
    let p50 = report
        .lines()
        .find(|l| l.starts_with("| 2. propagation") && l.contains("| p50 ms |"))
        .unwrap_or_else(|| panic!("no p50 row:\n{report}"));
    let cells: Vec<&str> = p50.split('|').map(str::trim).collect();
    // "", measure, number, single, cluster3, ratio, leaf, ratio, ""
    assert_eq!(cells.len(), 9, "{p50}");
    for cell in &cells[3..8] {
        assert!(
            cell.trim_end_matches('x').parse::<f64>().is_ok(),
            "not a number: {cell:?} in {p50}"
        );
    }
}

/// A topology that does not exist is refused before anything starts.
#[test]
fn an_unknown_topology_is_refused() {
    let run = Command::new(env!("CARGO_BIN_EXE_fleetbus-bench"))
        .args(["propagation", "--smoke", "--nats", "single,mesh"])
        .output()
        .expect("run fleetbus-bench");
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("unknown NATS topology \"mesh\""),
        "{stderr}"
    );
}
