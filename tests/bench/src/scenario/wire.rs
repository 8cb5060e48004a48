//! Scenario 8: bytes on the wire. The MessagePack envelope (what the agent
//! publishes) against JSON (the object as the API server sends it, and the
//! same envelope fields as JSON), and whether zstd pays for large payloads.
//!
//! No zstd crate is available offline here, so compression is measured with
//! the `zstd` command-line tool (`zstd -b3`: the same C library a crate would
//! bind), when it is installed.

use std::io::Write as _;
use std::process::Command;
use std::time::Instant;

use fleetbus_schemas::envelope::Envelope;
use serde_json::{json, Value};

use crate::scenario::{verdict, Ctx};
use crate::stats::{ms, Samples};
use crate::table::Table;
use crate::wire_objects;

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let iterations = ctx.pick(20, 2000);
    let mut t = Table::new(
        "8. Wire size: MessagePack envelope vs JSON",
        &[
            "object",
            "object JSON B",
            "envelope as JSON B",
            "MessagePack envelope B",
            "MsgPack / JSON envelope",
            "zstd-3(MsgPack) B",
            "zstd-3 / JSON envelope",
            "zstd compress / decompress MB/s",
            "encode p50 / p99 ms (hash + MsgPack)",
        ],
    );
    let mut worst: f64 = 0.0;
    let mut samples = usize::MAX;
    for (name, obj) in [
        ("ConfigMap (1 KiB data)", wire_objects::configmap()),
        (
            "Deployment (2 containers, status, managedFields)",
            wire_objects::deployment(),
        ),
        (
            "large CRD instance (PrometheusRule, 400 rules)",
            wire_objects::large_crd(),
        ),
    ] {
        let object_json = serde_json::to_vec(&obj)?.len();
        let mut enc = Samples::new();
        let mut packed = Vec::new();
        let mut env = None;
        for _ in 0..iterations {
            let t0 = Instant::now();
            let e = Envelope::snapshot(
                "c1",
                Some("0d4f1c2e-kube-system"),
                obj.clone(),
                chrono::Utc::now(),
            )?;
            packed = e.encode()?;
            enc.push(t0.elapsed());
            env = Some(e);
        }
        samples = samples.min(enc.len());
        let env = env.ok_or_else(|| anyhow::anyhow!("no iterations"))?;
        let env_json = serde_json::to_vec(&envelope_as_json(&env))?.len();
        let ratio = packed.len() as f64 / env_json as f64;
        worst = worst.max(ratio);
        let z = zstd_bench(&packed);
        t.row([
            name.to_owned(),
            object_json.to_string(),
            env_json.to_string(),
            packed.len().to_string(),
            format!("{ratio:.2}"),
            z.as_ref()
                .map(|z| z.size.to_string())
                .unwrap_or_else(|| "-".into()),
            z.as_ref()
                .map(|z| format!("{:.2}", z.size as f64 / env_json as f64))
                .unwrap_or_else(|| "-".into()),
            z.as_ref()
                .map(|z| format!("{} / {}", z.compress, z.decompress))
                .unwrap_or_else(|| "zstd CLI failed or missing".into()),
            format!("{} / {}", ms(enc.p50()), ms(enc.percentile(99.0))),
        ]);
    }
    t.samples = if samples == usize::MAX { 0 } else { samples };
    t.note(format!(
        "goal MessagePack ≤ 0.7× JSON: {} (worst ratio {worst:.2}). MessagePack only saves the framing (quotes, braces, number text); Kubernetes objects are mostly strings, which it stores as they are.",
        verdict(worst <= 0.7)
    ));
    t.note("zstd sizes and speeds come from `zstd -b3 -i1` (CLI, libzstd) on the MessagePack bytes; no zstd crate is available offline.");
    Ok(vec![t])
}

/// The envelope's fields as a JSON document (what a JSON envelope would carry).
fn envelope_as_json(e: &Envelope) -> Value {
    json!({
        "schemaVersion": 1,
        "origin": e.origin,
        "originClusterId": e.origin_cluster_id,
        "uid": e.uid,
        "resourceVersion": e.resource_version,
        "generation": e.generation,
        "contentHash": e.content_hash,
        "time": e.time,
        "tombstone": e.tombstone,
        "object": e.object,
    })
}

struct Zstd {
    size: usize,
    compress: String,
    decompress: String,
}

/// `zstd -b3 -i1` on `bytes`: compressed size and speeds as zstd prints them.
fn zstd_bench(bytes: &[u8]) -> Option<Zstd> {
    let mut f = tempfile::NamedTempFile::new().ok()?;
    f.write_all(bytes).ok()?;
    f.flush().ok()?;
    let out = Command::new("zstd")
        .args(["-b3", "-i1"])
        .arg(f.path())
        .output()
        .ok()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Progress lines separated by '\r'; the last complete one reads
    // " |-file : 1234 ->   567 (x2.17),  400.0 MB/s,  1500.0 MB/s".
    let line = text
        .split(['\r', '\n'])
        .rfind(|l| l.matches("MB/s").count() == 2)?;
    let last = line.rsplit("->").next()?;
    let mut parts = last.split(',');
    let size = parts.next()?.split_whitespace().next()?.parse().ok()?;
    let speed = |p: Option<&str>| {
        p.and_then(|s| s.split_whitespace().next())
            .map(str::to_owned)
    };
    Some(Zstd {
        size,
        compress: speed(parts.next())?,
        decompress: speed(parts.next())?,
    })
}
