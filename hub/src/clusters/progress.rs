//! `fleetbus clusters progress [CLUSTER…] [--watch] [--timeout D]`: each agent's sync
//! progress (PROTOCOL §6.5), once or until every selected cluster is in sync.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use fleetbus_schemas::progress::SyncProgress;
use fleetbus_schemas::registry::MemberState;
use fleetbus_schemas::subject::{CommandKey, Prefix};
use tokio::time::Instant;

use super::ClustersError;
use crate::cli::{ClustersProgressArgs, OutputFormat};
use crate::command::CommandError;

/// How long one question to one agent may take: the agent answers from memory, so a
/// second is plenty, and a watch round stays about a second long.
const ASK_TIMEOUT: Duration = Duration::from_secs(1);

/// How often --watch asks again.
const WATCH_INTERVAL: Duration = Duration::from_secs(1);

/// What one agent said, or why it said nothing usable.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Seen {
    Progress(SyncProgress),
    /// Nobody answers on the cluster's progress subject.
    NoAgent,
    /// Something answered that this fleetbus cannot read (skipped, shown).
    Unreadable(String),
    /// The question failed otherwise (timeout, connection).
    Failed(String),
}

impl Seen {
    fn in_sync(&self) -> bool {
        matches!(self, Seen::Progress(p) if p.in_sync())
    }

    /// The state column and the details after it.
    pub(crate) fn describe(&self) -> (String, String) {
        match self {
            Seen::Progress(p) => {
                let state = if !p.started {
                    "starting"
                } else if p.in_sync() {
                    "in sync"
                } else {
                    "catching up"
                };
                let percent = (p.copies_in_sync.saturating_mul(100))
                    .checked_div(p.copies_wanted)
                    .unwrap_or(100);
                let bus = if p.bus_read() {
                    "done".to_owned()
                } else {
                    format!("{}/{} kinds", p.kinds_ready, p.kinds)
                };
                let mut details = format!(
                    "{}/{} copies ({percent}%)  reading bus: {bus}  errors {}",
                    thousands(p.copies_in_sync),
                    thousands(p.copies_wanted),
                    thousands(p.errors),
                );
                if p.conflicts > 0 {
                    details.push_str(&format!("  conflicts {}", thousands(p.conflicts)));
                }
                (state.to_owned(), details)
            }
            Seen::NoAgent => ("no agent".to_owned(), "no agent answers".to_owned()),
            Seen::Unreadable(why) => (
                "unreadable".to_owned(),
                format!("an unreadable progress reply was skipped: {why}"),
            ),
            Seen::Failed(why) => ("no reply".to_owned(), why.clone()),
        }
    }
}

/// Shows the progress of the selected clusters; see the command's help for the exit code.
pub async fn progress(
    args: &ClustersProgressArgs,
    tty: bool,
    out: &mut impl Write,
) -> Result<ExitCode, ClustersError> {
    let (client, js) = crate::command::connect(&args.bus).await?;
    let prefix = &args.bus.subject_prefix;
    let clusters = if args.clusters.is_empty() {
        let mut names: Vec<String> = crate::fleet::cluster_records(&js, prefix)
            .await?
            .into_iter()
            .filter(|r| r.state == MemberState::Active)
            .map(|r| r.name)
            .collect();
        names.dedup();
        names
    } else {
        args.clusters.clone()
    };
    if clusters.is_empty() {
        writeln!(out, "no active cluster in the registry")?;
        return Ok(ExitCode::FAILURE);
    }
    let deadline = args.timeout.map(|t| Instant::now() + t);
    let width = clusters.iter().map(String::len).max().unwrap_or(0);
    let mut ticks = tokio::time::interval(WATCH_INTERVAL);
    let mut drawn = 0;
    loop {
        ticks.tick().await;
        let mut seen = Vec::with_capacity(clusters.len());
        for cluster in &clusters {
            seen.push((cluster, ask(&client, prefix, cluster).await));
        }
        let done = seen.iter().all(|(_, s)| s.in_sync());
        match args.out.output {
            format @ (OutputFormat::Json | OutputFormat::Yaml) => {
                let all: Vec<_> = seen.iter().map(|(c, s)| to_json(c, s)).collect();
                crate::output::item(out, format, &all)?;
            }
            OutputFormat::Table => {
                // On a terminal, draw over the previous round.
                if tty && drawn > 0 {
                    write!(out, "\x1b[{drawn}A")?;
                }
                for (cluster, s) in &seen {
                    let (state, details) = s.describe();
                    let clear = if tty { "\x1b[2K" } else { "" };
                    writeln!(out, "{clear}{cluster:<width$}  {state:<11}  {details}")?;
                }
                drawn = seen.len();
            }
        }
        out.flush()?;
        if done {
            return Ok(ExitCode::SUCCESS);
        }
        if !args.watch {
            return Ok(ExitCode::FAILURE);
        }
        if deadline.is_some_and(|d| Instant::now() + WATCH_INTERVAL > d) {
            let missing: Vec<String> = seen
                .iter()
                .filter(|(_, s)| !s.in_sync())
                .map(|(c, s)| {
                    let (state, details) = s.describe();
                    format!("{c} ({state}: {details})")
                })
                .collect();
            eprintln!(
                "fleetbus: not in sync after {}: {}",
                humantime::format_duration(args.timeout.unwrap_or_default()),
                missing.join("; ")
            );
            return Ok(ExitCode::FAILURE);
        }
    }
}

/// Asks `cluster`'s agent once.
pub(crate) async fn ask(client: &async_nats::Client, prefix: &Prefix, cluster: &str) -> Seen {
    let subject = CommandKey::progress(cluster).to_subject(prefix);
    match crate::command::request(client, subject, Vec::new(), cluster, ASK_TIMEOUT).await {
        Ok(msg) => match SyncProgress::decode(&msg.payload) {
            // Refused (for rate): no counts, and the next round asks again.
            Ok(SyncProgress { error: Some(e), .. }) => Seen::Failed(format!("refused: {e}")),
            Ok(p) if p.cluster == cluster => Seen::Progress(p),
            Ok(p) => Seen::Unreadable(format!("the reply is cluster {:?}'s", p.cluster)),
            Err(e) => Seen::Unreadable(chain(&e)),
        },
        Err(CommandError::NoResponder { .. }) => Seen::NoAgent,
        Err(e) => Seen::Failed(chain(&e)),
    }
}

/// An error with its causes, `a: b: c`.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

pub(crate) fn to_json(cluster: &str, s: &Seen) -> serde_json::Value {
    match s {
        Seen::Progress(p) => serde_json::json!({
            "cluster": cluster, "inSync": p.in_sync(), "progress": p,
        }),
        other => serde_json::json!({
            "cluster": cluster, "inSync": false, "error": other.describe().1,
        }),
    }
}

/// `7412` -> `7,412`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_get_separators() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(7412), "7,412");
        assert_eq!(thousands(10_000_000), "10,000,000");
    }

    #[test]
    fn lines_say_how_far_a_cluster_is() {
        let mut p = SyncProgress::starting("c3", chrono::Utc::now());
        assert_eq!(Seen::Progress(p.clone()).describe().0, "starting");
        p.started = true;
        p.kinds = 2;
        p.kinds_ready = 2;
        p.copies_wanted = 10_000;
        p.copies_in_sync = 7_412;
        assert_eq!(
            Seen::Progress(p.clone()).describe(),
            (
                "catching up".to_owned(),
                "7,412/10,000 copies (74%)  reading bus: done  errors 0".to_owned()
            )
        );
        p.kinds_ready = 1;
        assert!(Seen::Progress(p.clone())
            .describe()
            .1
            .contains("reading bus: 1/2 kinds"));
        p.kinds_ready = 2;
        p.copies_in_sync = 10_000;
        assert!(Seen::Progress(p.clone()).in_sync());
        assert_eq!(Seen::Progress(p).describe().0, "in sync");
        assert!(!Seen::NoAgent.in_sync());
        assert!(!Seen::Unreadable("x".into()).in_sync());
    }
}
