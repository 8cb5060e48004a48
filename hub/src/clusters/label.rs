//! `fleetbus clusters label C k=v k2-`: relabel one cluster through its agent (PROTOCOL §6.4).

use std::io::Write;

use fleetbus_schemas::command::{LabelReply, LabelRequest};
use fleetbus_schemas::subject::CommandKey;

use super::ClustersError;
use crate::cli::{ClustersLabelArgs, OutputFormat};

/// Reads kubectl label syntax: `key=value` sets, `key-` removes. Keys and values are
/// checked by the agent (the same validation as the registry record).
pub fn parse_label_args(args: &[String]) -> Result<LabelRequest, ClustersError> {
    let mut req = LabelRequest::default();
    for arg in args {
        if let Some((k, v)) = arg.split_once('=') {
            if k.is_empty() {
                return Err(ClustersError::LabelArg(arg.clone()));
            }
            req.set.insert(k.to_owned(), v.to_owned());
        } else if let Some(k) = arg.strip_suffix('-').filter(|k| !k.is_empty()) {
            req.remove.push(k.to_owned());
        } else {
            return Err(ClustersError::LabelArg(arg.clone()));
        }
    }
    Ok(req)
}

/// Sends the request and prints the cluster's labels after it. No responder, no reply in
/// time and a refusal are errors naming the cluster.
pub async fn label(args: &ClustersLabelArgs, out: &mut impl Write) -> Result<(), ClustersError> {
    let mut request = parse_label_args(&args.labels)?;
    request.overwrite = args.overwrite;
    let (client, _js) = crate::command::connect(&args.bus).await?;
    let reply = send(
        &client,
        &args.bus.subject_prefix,
        &args.cluster,
        &request,
        args.timeout,
    )
    .await?;
    let labels = reply.labels.unwrap_or_default();
    match args.out.output {
        format @ (OutputFormat::Json | OutputFormat::Yaml) => {
            let value = serde_json::json!({"cluster": reply.cluster, "labels": labels});
            crate::output::data(out, format, &value)?;
        }
        OutputFormat::Table => {
            let labels: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
            writeln!(
                out,
                "cluster/{} labeled: {}",
                reply.cluster,
                labels.join(",")
            )?;
        }
    }
    Ok(())
}

/// Sends `request` to `cluster`'s agent and returns its checked reply: the one code path
/// of `clusters label` and the dashboard's relabelling.
pub(crate) async fn send(
    client: &async_nats::Client,
    prefix: &fleetbus_schemas::subject::Prefix,
    cluster: &str,
    request: &LabelRequest,
    timeout: std::time::Duration,
) -> Result<LabelReply, ClustersError> {
    let subject = CommandKey::label(cluster).to_subject(prefix);
    let payload = request.encode().map_err(ClustersError::Encode)?;
    let reply = crate::command::request(client, subject, payload, cluster, timeout).await?;
    let reply = LabelReply::decode(&reply.payload).map_err(|source| ClustersError::BadReply {
        cluster: cluster.to_owned(),
        source,
    })?;
    check_reply(cluster, &reply)?;
    Ok(reply)
}

/// A reply from another cluster than the one asked is an error (a name claimed by two
/// clusters reaches both agents), as is a refusal.
fn check_reply(cluster: &str, reply: &LabelReply) -> Result<(), ClustersError> {
    if reply.cluster != cluster {
        return Err(ClustersError::WrongCluster {
            asked: cluster.to_owned(),
            answered: reply.cluster.clone(),
        });
    }
    if let Some(reason) = &reply.error {
        return Err(ClustersError::Refused {
            cluster: cluster.to_owned(),
            reason: reason.clone(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn kubectl_label_syntax() {
        let req = parse_label_args(&args(&["env=prod", "tier-", "empty="])).unwrap();
        assert_eq!(req.set["env"], "prod");
        assert_eq!(req.set["empty"], "");
        assert_eq!(req.remove, vec!["tier"]);
        assert!(!req.overwrite);
        for bad in ["env", "=v", "-"] {
            assert!(
                matches!(
                    parse_label_args(&args(&[bad])),
                    Err(ClustersError::LabelArg(_))
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn replies_from_another_cluster_or_refusals_are_errors() {
        let reply = |cluster: &str, error: Option<&str>| LabelReply {
            cluster: cluster.to_owned(),
            labels: None,
            error: error.map(str::to_owned),
            retry_after_ms: None,
        };
        assert!(check_reply("west", &reply("west", None)).is_ok());
        assert!(matches!(
            check_reply("west", &reply("east", None)),
            Err(ClustersError::WrongCluster { .. })
        ));
        assert!(matches!(
            check_reply("west", &reply("west", Some("no"))),
            Err(ClustersError::Refused { .. })
        ));
    }
}
