//! `fleetbus rules preview`: asks every cluster's agent what a rule would create,
//! update and delete there (`<p>.cmd.<cluster>.preview`, PROTOCOL §6.8), all at once,
//! and prints the answers per cluster. Nothing is written anywhere.
//!
//! Exit codes as `kubectl diff`: 0 no change anywhere, 1 changes, 2 an error: an
//! unreadable or invalid rule file (found here before asking anyone, or by the agents,
//! which compile it as they compile rules), or a cluster that does not answer or
//! refuses, named.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use fleetbus_schemas::crd::{ClusterState, ResourceSyncRule, RuleError};
use fleetbus_schemas::preview::{
    DeleteAction, PreviewReply, PreviewRequest, PreviewSource, RULE_API_VERSION, RULE_KIND,
};

pub use super::error::PreviewError;
use super::preview_source::{ask_origins, with_sources, Sources};
use fleetbus_schemas::subject::CommandKey;
use serde_json::{json, Value};

use crate::cli::{OutputFormat, RulesPreviewArgs};

/// One cluster's answer: its reply, or why there is none (the message names it).
pub type Answer = (String, Result<PreviewReply, String>);

/// Runs the command; errors are printed and exit 2.
pub async fn run(args: &RulesPreviewArgs, out: &mut impl Write) -> ExitCode {
    match preview(args, out).await {
        Ok(code) => ExitCode::from(code),
        Err(e) => {
            let mut text = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                text.push_str(&format!(": {s}"));
                source = s.source();
            }
            eprintln!("fleetbus: error: {text}");
            ExitCode::from(2)
        }
    }
}

async fn preview(args: &RulesPreviewArgs, out: &mut impl Write) -> Result<u8, PreviewError> {
    let mut request = request(args)?;
    let (client, js) = crate::command::connect(&args.bus)
        .await
        .map_err(super::RulesError::from)?;
    let prefix = &args.bus.subject_prefix;
    let members: Vec<String> = crate::fleet::clusters(&js, prefix, chrono::Utc::now())
        .await
        .map_err(super::RulesError::from)?
        .into_iter()
        .filter(|c| c.state != ClusterState::Left)
        .map(|c| c.record.name)
        .collect();
    let clusters = match args.clusters.is_empty() {
        true => members.clone(),
        false => args.clusters.clone(),
    };
    // A candidate may select objects no origin publishes yet: every member
    // may be an origin, whichever clusters are previewed.
    let max = client.server_info().max_payload;
    let mut sources = match &request.rule {
        Some(rule) => ask_origins(&client, args, rule, &members, max).await,
        None => Sources::default(),
    };
    let payload = with_sources(&mut request, &mut sources, max)?;
    let asks = clusters.iter().map(|cluster| {
        let subject = CommandKey::preview(cluster).to_subject(prefix);
        let (client, payload) = (&client, payload.clone());
        async move {
            // Refused for rate, or while its previews are busy: asked
            // again when the cluster says, a few times.
            let decode = |b: &[u8]| PreviewReply::decode(b).map_err(|e| e.to_string());
            let retry = |r: &PreviewReply| r.error.as_ref().and(r.retry_after_ms);
            let asked = (subject, payload);
            let answer = crate::command::request_patiently(
                client,
                asked,
                cluster,
                args.timeout,
                decode,
                retry,
            )
            .await;
            (cluster.clone(), answer)
        }
    });
    let answers: Vec<Answer> = futures::future::join_all(asks).await;
    match args.out.output {
        OutputFormat::Table => {
            render(out, &answers)?;
            sources.render(out)?;
        }
        format => {
            let mut data = as_data(&answers);
            sources.add_to(&mut data);
            crate::output::data(out, format, &data)?;
        }
    }
    Ok(match sources.failed() {
        true => 2,
        false => exit_code(&answers),
    })
}

/// The request `args` ask for, checked here first: a rule file that is not a valid
/// ResourceSyncRule is named before any agent is asked.
fn request(args: &RulesPreviewArgs) -> Result<PreviewRequest, PreviewError> {
    let object = args.file.as_deref().map(read_object).transpose()?;
    let req = match (&args.rule, object) {
        (None, Some(rule)) => {
            check_rule(&rule)?;
            PreviewRequest {
                rule: Some(rule),
                author: args.author.clone(),
                ..PreviewRequest::default()
            }
        }
        (Some(name), object) => {
            let source = match (object, &args.origin) {
                (None, _) => None,
                (Some(object), Some(origin)) => Some(PreviewSource {
                    origin: origin.clone(),
                    object,
                }),
                (Some(_), None) => {
                    return Err(PreviewError::Invalid(
                        "--rule with -f previews a changed source object: say which cluster it lives on with --origin".to_owned(),
                    ))
                }
            };
            PreviewRequest {
                rule_name: Some(name.clone()),
                source,
                ..PreviewRequest::default()
            }
        }
        (None, None) => {
            return Err(PreviewError::Invalid(
                "give the candidate rule (-f rule.yaml) or --rule NAME".to_owned(),
            ))
        }
    };
    req.validate()
        .map_err(|e| PreviewError::Invalid(e.to_string()))?;
    Ok(req)
}

/// One YAML or JSON document.
fn read_object(path: &Path) -> Result<Value, PreviewError> {
    let fail = |why: String| PreviewError::File {
        path: path.display().to_string(),
        why,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let value: Value = fleetbus_schemas::yaml::from_str(&text).map_err(|e| fail(e.to_string()))?;
    if !value.is_object() {
        return Err(fail("not one object (a YAML mapping)".to_owned()));
    }
    Ok(value)
}

/// The rule parses as a ResourceSyncRule and its spec validates (as agents judge it).
fn check_rule(rule: &Value) -> Result<(), PreviewError> {
    let kind = (
        rule.get("apiVersion").and_then(Value::as_str),
        rule.get("kind").and_then(Value::as_str),
    );
    if kind != (Some(RULE_API_VERSION), Some(RULE_KIND)) {
        return Err(PreviewError::Invalid(format!(
            "the file holds no {RULE_API_VERSION} {RULE_KIND} (with --rule NAME, -f is a changed source object)"
        )));
    }
    let parsed: ResourceSyncRule = serde_json::from_value(rule.clone())
        .map_err(|e| PreviewError::Invalid(format!("invalid rule: {e}")))?;
    parsed.validate().map_err(|errors| {
        PreviewError::Invalid(format!("invalid rule: {}", RuleError::summarize(&errors)))
    })
}

/// 2 if a cluster did not answer or refused, else 1 if any would change, else 0.
pub fn exit_code(answers: &[Answer]) -> u8 {
    let failed = answers
        .iter()
        .any(|(_, a)| a.as_ref().map_or(true, |r| r.error.is_some()));
    if failed {
        2
    } else if answers
        .iter()
        .any(|(_, a)| a.as_ref().is_ok_and(PreviewReply::has_changes))
    {
        1
    } else {
        0
    }
}

/// `-o json|yaml`: every reply as the agent sent it, and the clusters that did not.
fn as_data(answers: &[Answer]) -> Value {
    let mut replies = Vec::new();
    let mut errors = Vec::new();
    for (cluster, answer) in answers {
        match answer {
            Ok(reply) => replies.push(serde_json::to_value(reply).unwrap_or_default()),
            Err(e) => errors.push(json!({"cluster": cluster, "error": e})),
        }
    }
    json!({"clusters": replies, "errors": errors})
}

fn shown(v: &Value) -> String {
    match v {
        Value::Null => "(absent)".to_owned(),
        v => v.to_string(),
    }
}

/// The human output: per cluster, `+ create`, `~ update` with its changed paths,
/// `- delete` (or orphan, or keep and why), then conflicts, errors and what the agent
/// could not see.
pub fn render(out: &mut impl Write, answers: &[Answer]) -> std::io::Result<()> {
    for (cluster, answer) in answers {
        let r = match answer {
            Err(e) => {
                writeln!(out, "cluster {cluster}: error: {e}")?;
                continue;
            }
            Ok(r) if r.error.is_some() => {
                let e = r.error.as_deref().unwrap_or_default();
                writeln!(out, "cluster {cluster}: refused: {e}")?;
                continue;
            }
            Ok(r) => r,
        };
        render_reply(out, r)?;
    }
    Ok(())
}

fn render_reply(out: &mut impl Write, r: &PreviewReply) -> std::io::Result<()> {
    let deletes = r
        .deletes
        .iter()
        .filter(|d| d.action != DeleteAction::Keep)
        .count();
    let selected = if r.selected { "" } else { " (not selected)" };
    writeln!(
        out,
        "cluster {}{selected}: {} to create, {} to update, {} to delete, {} unchanged",
        r.cluster,
        r.creates.len(),
        r.updates.len(),
        deletes,
        r.unchanged
    )?;
    for c in &r.creates {
        writeln!(out, "+ create {} (from {})", c.object, c.origin)?;
    }
    for u in &r.updates {
        let why = u
            .reason
            .as_deref()
            .map(|w| format!(", {w}"))
            .unwrap_or_default();
        writeln!(out, "~ update {} (from {}{why})", u.object, u.origin)?;
        for c in &u.changes {
            writeln!(
                out,
                "    {}: {} -> {}",
                c.path,
                shown(&c.live),
                shown(&c.desired)
            )?;
        }
        if u.changes_omitted > 0 {
            writeln!(out, "    ... {} more changes", u.changes_omitted)?;
        }
    }
    for d in &r.deletes {
        let (sign, verb) = match d.action {
            DeleteAction::Delete => ("-", "delete"),
            DeleteAction::Orphan => ("-", "orphan"),
            DeleteAction::Keep => ("=", "keep"),
        };
        let why = d
            .reason
            .as_deref()
            .map(|w| format!(" ({w})"))
            .unwrap_or_default();
        writeln!(out, "{sign} {verb} {}{why}", d.object)?;
    }
    for c in &r.conflicts {
        writeln!(out, "! conflict {}: {}", c.object, c.message)?;
    }
    for e in &r.errors {
        writeln!(out, "! error {}: {}", e.object, e.message)?;
    }
    if r.held > 0 {
        writeln!(
            out,
            "  {} of these wait for the rule's hold (suspend, dependsOn)",
            r.held
        )?;
    }
    if r.placed_elsewhere > 0 {
        writeln!(
            out,
            "  {} selected object(s) placed on other clusters (spec.placement): no copy here",
            r.placed_elsewhere
        )?;
    }
    if r.omitted > 0 {
        writeln!(
            out,
            "  ... {} more items (the reply was cut to fit the bus)",
            r.omitted
        )?;
    }
    for note in &r.incomplete {
        writeln!(out, "  note: {note}")?;
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use clap::Parser;

    fn args(a: &[&str]) -> Result<RulesPreviewArgs, clap::Error> {
        let cli = crate::cli::Cli::try_parse_from(
            ["fleetbus", "rules", "preview"]
                .iter()
                .chain(a.iter())
                .copied(),
        )?;
        match cli.command {
            crate::cli::Command::Rules(crate::cli::RulesCommand::Preview(p)) => Ok(p),
            other => panic!("{other:?}"),
        }
    }

    fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }

    const RULE: &str = "apiVersion: fleetbus.io/v1alpha1\nkind: ResourceSyncRule\nmetadata: {name: web}\nspec:\n  groupVersionKind: {version: v1, kind: Secret}\n";

    #[test]
    fn the_request_is_the_rule_file_or_a_rule_name_with_a_changed_source() {
        let dir = tempfile::tempdir().unwrap();
        let rule = file(&dir, "rule.yaml", RULE);
        let req = request(&args(&["-f", &rule]).unwrap()).unwrap();
        assert_eq!(req.validate().unwrap(), "web");
        assert!(req.rule.is_some() && req.source.is_none());
        let src = file(
            &dir,
            "s.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s, namespace: a}\n",
        );
        let a = args(&["--rule", "web", "-f", &src, "--origin", "c1"]).unwrap();
        let req = request(&a).unwrap();
        assert_eq!(req.rule_name.as_deref(), Some("web"));
        assert_eq!(req.source.unwrap().origin, "c1");
        let req = request(&args(&["--rule", "web"]).unwrap()).unwrap();
        assert!(req.rule.is_none() && req.source.is_none());
    }

    #[test]
    fn bad_input_is_named_before_any_agent_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        // Usage errors (clap exits 2).
        assert!(args(&[]).is_err());
        assert!(args(&["--origin", "c1", "-f", "x"]).is_err());
        assert!(args(&["--rule", "web", "--cluster", "b.>"]).is_err());
        assert!(args(&["--rule", "web", "--timeout", "soon"]).is_err());
        let fails = |a: &[&str]| request(&args(a).unwrap()).unwrap_err().to_string();
        assert!(
            fails(&["-f", "/nonexistent/rule.yaml"]).contains("cannot read /nonexistent/rule.yaml")
        );
        let garbage = file(&dir, "g.yaml", ": : [\n");
        assert!(fails(&["-f", &garbage]).contains("cannot read"));
        // Ten aliases per level, six levels: a million strings, refused by the reader.
        let mut laughs = String::from("l0: &l0 [a, a, a, a, a, a, a, a, a, a]\n");
        for i in 1..6 {
            laughs += &format!(
                "l{i}: &l{i} [{}]\n",
                vec![format!("*l{}", i - 1); 10].join(", ")
            );
        }
        let laughs = file(&dir, "laughs.yaml", &laughs);
        let msg = fails(&["-f", &laughs]);
        assert!(
            msg.contains("cannot read") && msg.contains("budget"),
            "{msg}"
        );
        let list = file(&dir, "l.yaml", "- 1\n- 2\n");
        assert!(fails(&["-f", &list]).contains("not one object"));
        let cm = file(
            &dir,
            "cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n",
        );
        assert!(fails(&["-f", &cm]).contains("holds no fleetbus.io/v1alpha1 ResourceSyncRule"));
        let bad_kind = file(
            &dir,
            "bad.yaml",
            &RULE.replace("kind: Secret", "kind: 'not a kind'"),
        );
        let msg = fails(&["-f", &bad_kind]);
        assert!(
            msg.starts_with("invalid rule: spec.groupVersionKind"),
            "{msg}"
        );
        let bad_spec = file(
            &dir,
            "spec.yaml",
            &RULE.replace("{version: v1, kind: Secret}", "7"),
        );
        assert!(fails(&["-f", &bad_spec]).starts_with("invalid rule: "));
        let unnamed = file(&dir, "u.yaml", &RULE.replace("{name: web}", "{}"));
        assert!(fails(&["-f", &unnamed]).contains("no metadata.name"));
        let src = file(
            &dir,
            "s.yaml",
            "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n",
        );
        assert!(fails(&["--rule", "web", "-f", &src]).contains("--origin"));
        assert!(fails(&["--rule", "Web!"]).contains("invalid rule name"));
    }

    fn reply(cluster: &str) -> PreviewReply {
        PreviewReply {
            cluster: cluster.into(),
            ..PreviewReply::default()
        }
    }

    #[test]
    fn exit_codes_are_kubectl_diffs() {
        let quiet = |c: &str| (c.to_owned(), Ok(reply(c)));
        assert_eq!(exit_code(&[quiet("a"), quiet("b")]), 0);
        assert_eq!(exit_code(&[]), 0);
        let mut changing = reply("b");
        changing
            .creates
            .push(fleetbus_schemas::preview::PreviewCreate {
                object: fleetbus_schemas::ObjectRef::new("v1", "Secret", Some("a"), "s"),
                origin: "c1".into(),
            });
        let changes = ("b".to_owned(), Ok(changing));
        assert_eq!(exit_code(&[quiet("a"), changes.clone()]), 1);
        let silent = (
            "c".to_owned(),
            Err("no reply from cluster c within 10s".to_owned()),
        );
        assert_eq!(exit_code(&[changes.clone(), silent]), 2);
        let refused = (
            "d".to_owned(),
            Ok(PreviewReply::refused("d", "invalid rule web: …")),
        );
        assert_eq!(exit_code(&[quiet("a"), refused]), 2);
    }
}
