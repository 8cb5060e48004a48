//! Catch-up progress in the CLI (bench scenario 5): `fleetbus clusters progress` asks
//! agents over `<p>.cmd.<cluster>.progress` (PROTOCOL §6.5) how far their sync is.
//!
//! Real nats-server, devclusters, agents and the `fleetbus` binary; the garbage test
//! answers the CLI with a plain NATS client.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use common::rules::RuleBuilder;
use common::sync::*;
use common::*;
use fleetbus_testsupport::{wait_for, NatsServer};
use futures::StreamExt;

/// How many ConfigMaps c1 publishes before c3 joins.
const OBJECTS: usize = 300;

fn rule() -> String {
    RuleBuilder::new("shared-configmaps")
        .namespaces(&["shared"])
        .yaml()
}

/// `n` ConfigMaps in namespace `shared`, one YAML stream; each carries 2 KiB of data,
/// so their envelopes travel compressed.
fn configmaps(n: usize) -> String {
    let blob = "line of configuration text\n".repeat(80);
    (0..n)
        .map(|i| {
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:04}\n  namespace: shared\ndata:\n  index: \"{i}\"\n  blob: {blob:?}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

/// A cluster joining late: c1 holds OBJECTS synced ConfigMaps (c2 has its copies), then
/// c3 starts. `clusters progress c3 --watch` follows it until it holds every copy, exits
/// 0, and its last line shows every copy in sync; the copies are really there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn late_cluster_catch_up_is_shown_until_in_sync() {
    let nats = NatsServer::start().unwrap();
    let m = fleet(&nats, &["c1", "c2"]).await;
    let (c1, c2) = (&m[0], &m[1]);
    for x in &m {
        create_ns(x, "shared").await;
    }
    apply_yaml(c1, &rule());
    apply_yaml(c1, &configmaps(OBJECTS));
    let cms = resource("", "v1", "ConfigMap", "configmaps");
    wait_for("c2 holds every copy", SYNC * 3, || async {
        let n = dynamic(c2, &cms, Some("shared"))
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?
            .items
            .iter()
            .filter(|o| {
                o.metadata
                    .name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("cm-"))
            })
            .count();
        if n == OBJECTS {
            Ok(())
        } else {
            Err(format!("{n} copies"))
        }
    })
    .await;

    let c3 = Member::start(&nats, "c3", "c3", &[]).await;
    create_ns(&c3, "shared").await;
    let (code, out, err) = fleetbus_cli(
        &nats,
        &["clusters", "progress", "c3", "--watch", "--timeout", "90s"],
    )
    .await;
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    let last = lines.last().copied().unwrap_or_default();
    // Every copy c3 should hold: the OBJECTS ConfigMaps and the copy of the rule.
    let all = OBJECTS + 1;
    assert!(
        last.starts_with("c3")
            && last.contains("in sync")
            && last.contains(&format!("{all}/{all} copies (100%)")),
        "last line {last:?} of\n{out}"
    );
    assert!(last.contains("reading bus: done"), "{out}");
    // Not a line before the end says "in sync": the watch ended at the first such round.
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| !l.contains("in sync")),
        "{out}"
    );
    // What the CLI reported is what c3 holds.
    let copies = dynamic(&c3, &cms, Some("shared"))
        .list(&Default::default())
        .await
        .unwrap()
        .items
        .len();
    assert!(copies >= OBJECTS, "c3 holds {copies} ConfigMaps");
    // Asked once more, without --watch: exit 0, one line.
    let (code, out, err) = fleetbus_cli(&nats, &["clusters", "progress", "c3"]).await;
    assert_eq!(code, Some(0), "{out}{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    drop(c3);
}

/// Garbage on a cluster's progress subject (a rogue responder): the CLI says the reply is
/// unreadable, skips it, keeps asking and ends at --timeout with exit 1 naming what is
/// missing, without crashing. A cluster nobody answers for: "no agent".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_progress_replies_are_reported_not_fatal() {
    let nats = NatsServer::start().unwrap();
    let client = async_nats::connect(nats.url()).await.unwrap();
    let mut sub = client.subscribe("fleetbus.cmd.c9.progress").await.unwrap();
    client.flush().await.unwrap();
    let rogue = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut answered = 0usize;
            while let Some(msg) = sub.next().await {
                if let Some(to) = msg.reply {
                    client.publish(to, "\u{c1}garbage{".into()).await.unwrap();
                    answered += 1;
                }
            }
            answered
        })
    };
    let (code, out, err) = fleetbus_cli(
        &nats,
        &[
            "clusters",
            "progress",
            "c9",
            "c8",
            "--watch",
            "--timeout",
            "3s",
        ],
    )
    .await;
    assert_eq!(code, Some(1), "stdout:\n{out}\nstderr:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    let c9: Vec<&str> = out.lines().filter(|l| l.starts_with("c9")).collect();
    assert!(c9.len() >= 2, "asked again after the garbage:\n{out}");
    assert!(
        c9.iter()
            .all(|l| l.contains("unreadable") && l.contains("skipped")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("c8") && l.contains("no agent")),
        "{out}"
    );
    assert!(
        err.contains("not in sync after 3s") && err.contains("c9 (unreadable"),
        "{err}"
    );
    drop(client);
    rogue.abort();
}
