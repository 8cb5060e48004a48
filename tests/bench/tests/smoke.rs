//! CI's smoke run of the benchmark harness (issue 12): every scenario at tiny
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
