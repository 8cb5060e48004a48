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

/// Every origin's rollout records of `rule` (last per subject), from
/// `FLEETBUS_ROLLOUTS`; unreadable or invalid ones are counted, not shown.
/// An error when the stream cannot be read (an older fleet has none).
pub async fn records(
    js: &async_nats::jetstream::Context,
    prefix: &fleetbus_schemas::subject::Prefix,
    rule: &str,
) -> Result<(Vec<fleetbus_schemas::rollout::RolloutRecord>, usize), String> {
    use fleetbus_schemas::subject::RolloutKey;
    let layout = fleetbus_schemas::jetstream::Layout::new(prefix.clone(), 1);
    let stream = layout.rollouts_stream().name;
    let messages = last_per_subject(js, &stream, RolloutKey::of_rule(prefix, rule)).await?;
    let (mut out, mut skipped) = (Vec::new(), 0);
    for (subject, payload) in messages {
        let rec = RolloutKey::parse_subject(prefix, &subject)
            .ok()
            .and_then(|k| {
                let r = fleetbus_schemas::rollout::RolloutRecord::decode(&payload).ok()?;
                r.validate(&k).ok().map(|()| r)
            });
        match rec {
            Some(r) => out.push(r),
            None => skipped += 1,
        }
    }
    Ok((out, skipped))
}

/// The last message of every subject of `stream` under `filter`, as
/// (subject, payload), read by an ordered consumer up to what was pending
/// when it started.
pub async fn last_per_subject(
    js: &async_nats::jetstream::Context,
    stream: &str,
    filter: String,
) -> Result<Vec<(String, Vec<u8>)>, String> {
    use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
    use futures::StreamExt;
    let stream = js.get_stream(stream).await.map_err(|e| e.to_string())?;
    let mut consumer = stream
        .create_consumer(OrderedConfig {
            filter_subject: filter,
            deliver_policy: DeliverPolicy::LastPerSubject,
            ..OrderedConfig::default()
        })
        .await
        .map_err(|e| e.to_string())?;
    let pending = consumer
        .info()
        .await
        .map_err(|e| e.to_string())?
        .num_pending;
    let mut messages = consumer.messages().await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for _ in 0..pending {
        let Some(Ok(msg)) = messages.next().await else {
            break;
        };
        out.push((msg.subject.to_string(), msg.payload.to_vec()));
    }
    Ok(out)
}

/// The Rollouts section of `rules describe` (pure): per object, its phase,
/// revision, step and what it waits for; which clusters were admitted to
/// which version, and which failed.
pub fn render(
    out: &mut impl Write,
    records: &[fleetbus_schemas::rollout::RolloutRecord],
    skipped: usize,
) -> std::io::Result<()> {
    if records.is_empty() && skipped == 0 {
        return Ok(());
    }
    let short = |h: &str| h.get(..12).unwrap_or(h).to_owned();
    writeln!(out)?;
    writeln!(out, "Rollouts:")?;
    for r in records {
        let object = match &r.source.namespace {
            Some(ns) => format!("{} {ns}/{}", r.source.kind, r.source.name),
            None => format!("{} {}", r.source.kind, r.source.name),
        };
        writeln!(
            out,
            "  {object} from {}: {} (revision {}, step {}/{})",
            r.origin,
            r.phase,
            r.revision,
            r.step + 1,
            r.steps.max(1)
        )?;
        if !r.message.is_empty() {
            writeln!(out, "    {}", r.message)?;
        }
        let stable = r.stable.as_deref().map_or("-".to_owned(), short);
        let target = r.target.as_deref().map_or("-".to_owned(), short);
        writeln!(out, "    stable {stable}, target {target}")?;
        for (hash, clusters) in &r.admitted {
            let which = if Some(hash) == r.target.as_ref() {
                "target"
            } else {
                "older"
            };
            let names: Vec<&str> = clusters.iter().map(String::as_str).collect();
            writeln!(
                out,
                "    admitted to {} ({which}): {}",
                short(hash),
                names.join(", ")
            )?;
        }
        for (cluster, why) in &r.failed {
            // The origin's reason names the cluster already ("c3: not
            // healthy within 12s"); say it once.
            let why = why
                .strip_prefix(cluster.as_str())
                .and_then(|w| w.strip_prefix(": "))
                .unwrap_or(why);
            writeln!(out, "    failed: {cluster}: {why}")?;
        }
    }
    if skipped > 0 {
        writeln!(out, "  ({skipped} unreadable record(s) skipped)")?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod render_tests {
    use super::*;
    use fleetbus_schemas::rollout::{RolloutPhase, RolloutRecord};

    #[test]
    fn the_section_says_where_each_rollout_stands() {
        let rec = RolloutRecord {
            origin: "hub".into(),
            rule: "web".into(),
            source: ObjectRef::new("apps/v1", "Deployment", Some("apps"), "web"),
            revision: 3,
            stable: Some("a".repeat(64)),
            target: Some("b".repeat(64)),
            phase: RolloutPhase::Paused,
            admitted: [("b".repeat(64), ["c3".to_owned()].into())].into(),
            admitted_at: Default::default(),
            failed: [("c3".to_owned(), "c3: not healthy within 12s".to_owned())].into(),
            step: 0,
            steps: 2,
            paused_by: None,
            reason: "Failed".into(),
            message: "paused: c3: not healthy within 12s".into(),
            updated_at: chrono::Utc::now(),
        };
        let mut out = Vec::new();
        render(&mut out, &[rec], 1).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "\nRollouts:\n  Deployment apps/web from hub: Paused (revision 3, step 1/2)\n    paused: c3: not healthy within 12s\n    stable aaaaaaaaaaaa, target bbbbbbbbbbbb\n    admitted to bbbbbbbbbbbb (target): c3\n    failed: c3: not healthy within 12s\n  (1 unreadable record(s) skipped)\n"
        );
        let mut none = Vec::new();
        render(&mut none, &[], 0).unwrap();
        assert!(none.is_empty());
    }
}
