//! The placement consumer (`<p>.placement.>`, PROTOCOL §6.10): what a sink
//! needs to know where copies live, and what an origin reads back after a
//! restart.

use std::sync::Arc;

use fleetbus_schemas::placement::{PlacementKey, PlacementRecord};
use fleetbus_schemas::subject::Prefix;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::follow::Follow;
use crate::context::Context;
use crate::sync::model::Input;

/// Reads `<p>.placement.>` (last record per subject, then live ones) into
/// the engine until `cancel`.
pub async fn placement_consumer(
    ctx: Arc<Context>,
    tx: mpsc::Sender<Input>,
    cancel: CancellationToken,
) {
    let f = Follow {
        stream: ctx.layout.placements_stream().name,
        filter: fleetbus_schemas::placement::all_placements(ctx.layout.prefix()),
        what: "placements",
        decode: {
            let ctx = ctx.clone();
            Box::new(move |prefix, subject, payload| {
                let (key, rec) = decode_record(prefix, subject, payload)?;
                super::follow::signed_by(&ctx, &key.origin, subject, payload)?;
                Ok((key, rec))
            })
        },
        key_of: |prefix, subject| PlacementKey::parse_subject(prefix, subject).ok(),
        input: Box::new(Input::Placement),
    };
    super::follow::follow(ctx, f, tx, cancel).await;
}

/// Decodes one record; the reason is the metric label when it is skipped.
pub(in crate::sync) fn decode_record(
    prefix: &Prefix,
    subject: &str,
    payload: &[u8],
) -> Result<(PlacementKey, PlacementRecord), &'static str> {
    let key = PlacementKey::parse_subject(prefix, subject).map_err(|_| "placement_bad_subject")?;
    let rec = PlacementRecord::decode(payload).map_err(|e| match e {
        fleetbus_schemas::DecodeError::UnsupportedVersion { .. } => "placement_unsupported_version",
        _ => "placement_malformed",
    })?;
    rec.validate().map_err(|_| "placement_malformed")?;
    Ok((key, rec))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn garbage_and_records_under_foreign_subjects_are_refused() {
        let p = Prefix::default();
        assert_eq!(
            decode_record(&p, "fleetbus.placement.hub.x", b"{}").unwrap_err(),
            "placement_bad_subject"
        );
        let subject = PlacementKey {
            origin: "hub".into(),
            unit: fleetbus_schemas::placement::PlacementUnit::Group("g".into()),
        }
        .to_subject(&p);
        assert_eq!(
            decode_record(&p, &subject, b"nope").unwrap_err(),
            "placement_malformed"
        );
        let bad = br#"{"schema":"fleetbus.io/placement/v1","rule":"r","revision":1,"chosen":[{"cluster":"NOT A NAME","score":0,"reason":""}],"decidedAt":"2026-01-01T00:00:00.000Z"}"#;
        assert_eq!(
            decode_record(&p, &subject, bad).unwrap_err(),
            "placement_malformed"
        );
        let good = br#"{"schema":"fleetbus.io/placement/v1","rule":"r","revision":1,"chosen":[{"cluster":"a","score":0,"reason":""}],"decidedAt":"2026-01-01T00:00:00.000Z"}"#;
        assert_eq!(decode_record(&p, &subject, good).unwrap().1.chosen.len(), 1);
    }
}
