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
    let request = CorrectRequest {
        rule: args.rule.clone(),
        kind: args.kind.clone(),
        namespace: args.namespace.clone(),
        name: args.name.clone(),
    };
    let reply = send(
        &client,
        &args.bus.subject_prefix,
        &args.cluster,
        &request,
        args.timeout,
    )
    .await?;
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

/// Sends `request` to `cluster`'s agent and returns its reply. No responder, no reply
/// in time, an unreadable reply and a refused request are errors. The one code path of
/// `drift correct` and the dashboard's "correct now".
pub(crate) async fn send(
    client: &async_nats::Client,
    prefix: &fleetbus_schemas::subject::Prefix,
    cluster: &str,
    request: &CorrectRequest,
    timeout: std::time::Duration,
) -> Result<CorrectReply, DriftError> {
    let subject = CommandKey::correct(cluster).to_subject(prefix);
    let payload = request.encode().map_err(DriftError::Encode)?;
    let reply = crate::command::request(client, subject, payload, cluster, timeout).await?;
    let reply = CorrectReply::decode(&reply.payload).map_err(|source| DriftError::BadReply {
        cluster: cluster.to_owned(),
        source,
    })?;
    if let Some(reason) = reply.error {
        return Err(DriftError::Refused {
            cluster: cluster.to_owned(),
            reason,
        });
    }
    Ok(reply)
}
