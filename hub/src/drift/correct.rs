//! `fleetbus drift correct`: ask one agent to correct its drifted copies (PROTOCOL §6.3).

use std::io::Write;

use fleetbus_schemas::command::{CorrectReply, CorrectRequest};
use fleetbus_schemas::subject::CommandKey;

use super::{connect, DriftError};
use crate::cli::{DriftCorrectArgs, OutputFormat};

/// Sends the request, prints the reply; `Ok(false)` if some copies could not be
/// corrected. No responder, no reply in time, and a refused request are errors.
pub async fn correct(args: &DriftCorrectArgs, out: &mut impl Write) -> Result<bool, DriftError> {
    let (client, _js) = connect(&args.bus).await?;
    let cluster = args.cluster.clone();
    let request = CorrectRequest {
        rule: args.rule.clone(),
        kind: args.kind.clone(),
        namespace: args.namespace.clone(),
        name: args.name.clone(),
    };
    let subject = CommandKey::correct(&cluster).to_subject(&args.bus.subject_prefix);
    let payload = request.encode().map_err(DriftError::Encode)?;
    let reply = crate::command::request(&client, subject, payload, &cluster, args.timeout).await?;
    let reply = CorrectReply::decode(&reply.payload).map_err(|source| DriftError::BadReply {
        cluster: cluster.clone(),
        source,
    })?;
    if let Some(reason) = reply.error {
        return Err(DriftError::Refused { cluster, reason });
    }
    match args.out.output {
        format @ (OutputFormat::Json | OutputFormat::Yaml) => {
            let value: serde_json::Value = reply
                .encode()
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            crate::output::data(out, format, &value)?;
        }
        OutputFormat::Table => {
            for object in &reply.corrected {
                writeln!(out, "corrected {}", object)?;
            }
            for failure in &reply.failed {
                writeln!(out, "failed    {}: {}", failure.object, failure.error)?;
            }
            writeln!(
                out,
                "cluster {}: {} corrected, {} failed",
                reply.cluster,
                reply.corrected.len(),
                reply.failed.len()
            )?;
        }
    }
    Ok(reply.failed.is_empty())
}
