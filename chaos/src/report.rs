//! The report: one row per scenario, printed and written to a Markdown file
//! (docs/RELIABILITY.md by default) with the command and the git revision.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::scenario::Row;

/// The table of `rows` as Markdown.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| scenario | seed | result | converged after last fault | objects | changes | sink writes per change | violations |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    for r in rows {
        let converged = r.converged.map_or_else(
            || "not converged".to_owned(),
            |d| format!("{:.1} s", d.as_secs_f64()),
        );
        let violations = if r.violations.is_empty() {
            "none".to_owned()
        } else {
            // The first few, named; the count says how many there were.
            let shown: Vec<&str> = r.violations.iter().take(5).map(String::as_str).collect();
            format!(
                "{}: {}",
                r.violations.len(),
                shown.join("; ").replace('|', "/")
            )
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {} |",
            r.scenario,
            r.seed,
            if r.passed() { "pass" } else { "FAIL" },
            converged,
            r.objects,
            r.changes,
            r.writes_per_change,
            violations
        );
    }
    out
}

/// The current git revision of the checkout (or "unknown").
fn revision() -> String {
    Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(fleetbus_testsupport::repo_root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map_or_else(
            || "unknown".to_owned(),
            |o| String::from_utf8_lossy(&o.stdout).trim().to_owned(),
        )
}

/// Writes the run's section into `out`: the table between the markers
/// `<!-- chaos:begin -->` and `<!-- chaos:end -->`, replacing an earlier one
/// (the rest of the file, written by hand, stays); appended if absent.
pub fn write(out: &Path, command: &str, short: bool, rows: &[Row]) -> std::io::Result<()> {
    const BEGIN: &str = "<!-- chaos:begin -->";
    const END: &str = "<!-- chaos:end -->";
    let kind = if short {
        "SHORT run (`--short`)"
    } else {
        "full run"
    };
    let section = format!(
        "{BEGIN}\n{kind} of `{command}` at revision `{}`.\n\n{}{END}\n",
        revision(),
        table(rows)
    );
    let old = std::fs::read_to_string(out).unwrap_or_default();
    let new = match (old.find(BEGIN), old.find(END)) {
        (Some(b), Some(e)) if b < e => {
            format!(
                "{}{section}{}",
                &old[..b],
                old[e + END.len()..].trim_start_matches('\n')
            )
        }
        _ if old.is_empty() => format!("# Reliability\n\n{section}"),
        _ => format!("{}\n{section}", old.trim_end()),
    };
    std::fs::write(out, new)
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn row(violations: Vec<String>, converged: Option<Duration>) -> Row {
        Row {
            scenario: "partition".into(),
            seed: 7,
            converged,
            objects: 30,
            changes: 100,
            writes_per_change: 2.0,
            violations,
        }
    }

    #[test]
    fn a_row_passes_only_converged_without_violations() {
        let t = table(&[
            row(vec![], Some(Duration::from_millis(1500))),
            row(
                vec!["c3: missing copy of c1:load/c1-w0-1".into()],
                Some(Duration::ZERO),
            ),
            row(vec![], None),
        ]);
        let lines: Vec<&str> = t.lines().skip(2).collect();
        assert!(lines[0].contains("| pass | 1.5 s |"), "{t}");
        assert!(
            lines[1].contains("| FAIL |") && lines[1].contains("1: c3: missing copy"),
            "{t}"
        );
        assert!(lines[2].contains("| FAIL | not converged |"), "{t}");
    }

    #[test]
    fn a_new_run_replaces_the_previous_table_and_keeps_the_prose() {
        let dir = std::env::temp_dir().join(format!("chaos-report-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("R.md");
        std::fs::write(&path, "# Reliability\n\nProse.\n").expect("write");
        write(&path, "fleetbus-chaos all", false, &[row(vec![], None)]).expect("first run");
        write(
            &path,
            "fleetbus-chaos all --short",
            true,
            &[row(vec![], None)],
        )
        .unwrap_or_default();
        let text = std::fs::read_to_string(&path).expect("read");
        assert!(text.starts_with("# Reliability\n\nProse.\n"), "{text}");
        assert_eq!(text.matches("chaos:begin").count(), 1, "{text}");
        assert!(
            text.contains("SHORT run (`--short`) of `fleetbus-chaos all --short`"),
            "{text}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
