//! Scenario 8: bytes on the wire. What the agent publishes (`Envelope::encode`: the
//! MessagePack envelope, in a zstd-3 frame above 256 bytes, PROTOCOL §4.6) against JSON
//! (the object as the API server sends it, and the same envelope fields as JSON), with
//! the plain MessagePack size beside it and the encode and decode times of both.

use std::time::Instant;

use fleetbus_schemas::envelope::{Envelope, ZSTD_MAGIC};
use serde_json::{json, Value};

use crate::scenario::Ctx;
use crate::stats::{ms, Samples};
use crate::table::Table;
use crate::wire_objects;

pub async fn run(ctx: &Ctx) -> anyhow::Result<Vec<Table>> {
    let iterations = ctx.pick(20, 2000);
    let mut t = Table::new(
        "8. Wire size: the envelope as sent vs JSON",
        &[
            "object",
            "object JSON B",
            "envelope as JSON B",
            "MessagePack B",
            "MsgPack / JSON envelope",
            "sent B (zstd-3 frame?)",
            "sent / JSON envelope",
            "encode p50/p99 ms: MsgPack; sent",
            "decode p50/p99 ms: MsgPack; sent",
        ],
    );
    let mut worst_sent: f64 = 0.0;
    let mut worst_plain: f64 = 0.0;
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
        let env = Envelope::snapshot("c1", Some("0d4f1c2e-kube-system"), obj, chrono::Utc::now())?;
        // Encode times include the content hash, as the agent's publish does.
        let (plain, enc_plain) = timed(iterations, || {
            let e = rehash(&env)?;
            Ok(e.encode_msgpack()?)
        })?;
        let (sent, enc_sent) = timed(iterations, || {
            let e = rehash(&env)?;
            Ok(e.encode()?)
        })?;
        let (from_plain, dec_plain) = timed(iterations, || Ok(Envelope::decode(&plain)?))?;
        let (from_sent, dec_sent) = timed(iterations, || Ok(Envelope::decode(&sent)?))?;
        // (Not compared with `env` itself: the wire keeps the time to the millisecond.)
        anyhow::ensure!(
            from_sent == from_plain && from_sent.object == env.object,
            "{name}: the sent bytes do not decode to the envelope"
        );
        samples = samples.min(enc_sent.len());
        let env_json = serde_json::to_vec(&envelope_as_json(&env))?.len();
        let plain_ratio = plain.len() as f64 / env_json as f64;
        let sent_ratio = sent.len() as f64 / env_json as f64;
        worst_plain = worst_plain.max(plain_ratio);
        worst_sent = worst_sent.max(sent_ratio);
        let framed = if sent.starts_with(&ZSTD_MAGIC) {
            "zstd"
        } else {
            "plain"
        };
        t.row([
            name.to_owned(),
            object_json.to_string(),
            env_json.to_string(),
            plain.len().to_string(),
            format!("{plain_ratio:.2}"),
            format!("{} ({framed})", sent.len()),
            format!("{sent_ratio:.2}"),
            format!("{}; {}", p50_p99(&enc_plain), p50_p99(&enc_sent)),
            format!("{}; {}", p50_p99(&dec_plain), p50_p99(&dec_sent)),
        ]);
    }
    t.samples = if samples == usize::MAX { 0 } else { samples };
    let v = t.goal(
        "bytes sent ≤ 0.7× JSON",
        format!("worst {worst_sent:.2}×"),
        worst_sent <= 0.7,
    );
    t.note(format!(
        "goal ≤ 0.7× JSON on the bytes the agent sends: {v} (worst {worst_sent:.2}). MessagePack alone: worst {worst_plain:.2} (it only saves the framing: Kubernetes objects are mostly strings, which it stores as they are); the zstd-3 frame (PROTOCOL §4.6) does the rest."
    ));
    t.note("Sizes and times are the agent's own code (`Envelope::encode_msgpack`, `Envelope::encode`, `Envelope::decode`, libzstd through the `zstd` crate); encode includes the content hash.");
    Ok(vec![t])
}

/// `f` run `n` times: its last result and the time of each run.
fn timed<T>(n: usize, mut f: impl FnMut() -> anyhow::Result<T>) -> anyhow::Result<(T, Samples)> {
    let mut times = Samples::new();
    let mut last = None;
    for _ in 0..n.max(1) {
        let t0 = Instant::now();
        last = Some(f()?);
        times.push(t0.elapsed());
    }
    let last = last.ok_or_else(|| anyhow::anyhow!("no iterations"))?;
    Ok((last, times))
}

/// `env` built again from its object (hash included), as a publish builds it.
fn rehash(env: &Envelope) -> anyhow::Result<Envelope> {
    let obj = env
        .object
        .clone()
        .ok_or_else(|| anyhow::anyhow!("a tombstone"))?;
    Ok(Envelope::snapshot(
        &env.origin,
        env.origin_cluster_id.as_deref(),
        obj,
        env.time,
    )?)
}

fn p50_p99(s: &Samples) -> String {
    format!("{}/{}", ms(s.p50()), ms(s.percentile(99.0)))
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
