//! `fleetbus rules rollout pause|resume|abort|rollback RULE [--object Kind/ns/name]`:
//! the request of PROTOCOL §6.9 sent to every cluster the rule status bucket
//! names as a source of the rule, each origin deciding for its own objects.

use std::io::Write;
use std::process::ExitCode;

use fleetbus_schemas::rollout::{RolloutAction, RolloutReply, RolloutRequest};
use fleetbus_schemas::subject::{CommandKey, ROLLOUT_VERB};
use fleetbus_schemas::ObjectRef;

use super::RulesError;
use crate::cli::{OutputFormat, RolloutActionArg, RulesRolloutArgs};

/// Reads `--object`: `Kind/namespace/name`, or `Kind/name` for a
/// cluster-scoped object (the rule names the group and version).
pub fn parse_object(s: &str) -> Result<ObjectRef, String> {
    let parts: Vec<&str> = s.split('/').collect();
    let bad = || format!("--object {s:?}: want Kind/namespace/name or Kind/name");
    let (kind, ns, name) = match parts[..] {
        [kind, ns, name] => (kind, Some(ns), name),
        [kind, name] => (kind, None, name),
        _ => return Err(bad()),
    };
    if [kind, name]
        .iter()
        .chain(ns.iter())
        .any(|p| p.is_empty() || p.len() > 253)
    {
        return Err(bad());
    }
    Ok(ObjectRef::new("", kind, ns, name))
}

fn action(a: RolloutActionArg) -> RolloutAction {
    match a {
        RolloutActionArg::Pause => RolloutAction::Pause,
        RolloutActionArg::Resume => RolloutAction::Resume,
        RolloutActionArg::Abort => RolloutAction::Abort,
        RolloutActionArg::Rollback => RolloutAction::Rollback,
    }
}

/// One origin's answer, or why there is none.
type Answer = (String, Result<RolloutReply, String>);

/// `fleetbus rules rollout`: exit 1 if the rule is unknown, has no source,
/// or an origin refuses or does not answer.
pub async fn rollout(
    args: &RulesRolloutArgs,
    out: &mut impl Write,
) -> Result<ExitCode, RulesError> {
    let object = match args.object.as_deref().map(parse_object).transpose() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("fleetbus: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    let (client, js) = crate::command::connect(&args.bus).await?;
    let (_, rows, _) = super::gather(&js, &args.bus.subject_prefix).await?;
    let Some(row) = rows.iter().find(|r| r.name == args.rule) else {
        eprintln!(
            "fleetbus: no rule {:?} on the bus: no agent reports it",
            args.rule
        );
        return Ok(ExitCode::FAILURE);
    };
    if row.sources.is_empty() {
        eprintln!(
            "fleetbus: rule {:?} has no source cluster: nothing rolls",
            args.rule
        );
        return Ok(ExitCode::FAILURE);
    }
    let request = RolloutRequest {
        rule: args.rule.clone(),
        action: action(args.action),
        object,
    };
    let payload = request
        .encode()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    let asks = row.sources.iter().map(|origin| {
        let subject = CommandKey {
            cluster: origin.clone(),
            verb: ROLLOUT_VERB.to_owned(),
        }
        .to_subject(&args.bus.subject_prefix);
        let (client, payload) = (&client, payload.clone());
        async move {
            let got = crate::command::request(client, subject, payload, origin, args.timeout)
                .await
                .map_err(|e| e.to_string())
                .and_then(|m| {
                    RolloutReply::decode(&m.payload)
                        .map_err(|e| format!("cluster {origin} answered something unreadable: {e}"))
                });
            (origin.clone(), got)
        }
    });
    let answers: Vec<Answer> = futures::future::join_all(asks).await;
    let failed = answers
        .iter()
        .any(|(_, a)| a.as_ref().map_or(true, |r| r.error.is_some()));
    print(out, args.out.output, &answers)?;
    let matched: u64 = answers
        .iter()
        .filter_map(|(_, a)| a.as_ref().ok())
        .map(|r| r.matched)
        .sum();
    if matched == 0 && !failed {
        let what = args.object.as_deref().unwrap_or("any object");
        eprintln!(
            "fleetbus: no origin of rule {:?} has a rollout of {what}",
            args.rule
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn print(out: &mut impl Write, format: OutputFormat, answers: &[Answer]) -> std::io::Result<()> {
    match format {
        OutputFormat::Table => {
            for (origin, a) in answers {
                match a {
                    Err(e) => writeln!(out, "{origin}: {e}")?,
                    // An origin with none of the rule's rollouts has nothing to say.
                    Ok(r) if r.matched == 0 && r.error.is_none() => {}
                    Ok(r) => {
                        let changed: Vec<String> =
                            r.changed.iter().map(ToString::to_string).collect();
                        let what = if changed.is_empty() {
                            "nothing changed".to_owned()
                        } else {
                            format!("changed {}", changed.join(", "))
                        };
                        match &r.error {
                            Some(e) => writeln!(out, "{origin}: {what}; refused: {e}")?,
                            None => writeln!(out, "{origin}: {what}")?,
                        }
                    }
                }
            }
            Ok(())
        }
        format => {
            let value: Vec<serde_json::Value> = answers
                .iter()
                .map(|(origin, a)| match a {
                    Ok(r) => serde_json::json!({"cluster": origin, "changed": r.changed, "error": r.error}),
                    Err(e) => serde_json::json!({"cluster": origin, "changed": [], "error": e}),
                })
                .collect();
            crate::output::data(out, format, &serde_json::json!({"origins": value}))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn objects_are_kind_namespace_name_or_kind_name() {
        let o = parse_object("Deployment/apps/web").unwrap();
        assert_eq!(
            (o.kind.as_str(), o.namespace.as_deref(), o.name.as_str()),
            ("Deployment", Some("apps"), "web")
        );
        let c = parse_object("ClusterRole/view").unwrap();
        assert_eq!((c.namespace, c.name.as_str()), (None, "view"));
        for bad in [
            "",
            "web",
            "a/b/c/d",
            "Deployment//web",
            "/apps/web",
            "Deployment/apps/",
        ] {
            assert!(parse_object(bad).is_err(), "{bad:?}");
        }
    }
}
