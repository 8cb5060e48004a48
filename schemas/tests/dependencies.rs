//! schemas is types only: its normal dependency tree must not pull in a runtime or a client.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test crate

use std::process::Command;

const FORBIDDEN: [&str; 7] = [
    "tokio",
    "kube",
    "kube-client",
    "kube-runtime",
    "hyper",
    "async-nats",
    "nats",
];

#[test]
fn no_runtime_or_client_dependencies() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "tree",
            "-p",
            "fleetbus-schemas",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let tree = String::from_utf8(out.stdout).unwrap();
    assert!(
        tree.contains("fleetbus-schemas"),
        "unexpected output: {tree}"
    );
    let found: Vec<&str> = tree
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| FORBIDDEN.contains(name))
        .collect();
    assert!(
        found.is_empty(),
        "forbidden dependencies: {found:?}\n{tree}"
    );
}
