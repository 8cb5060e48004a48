//! A scenario's result: a Markdown table plus notes, printed and appended to `BENCHMARKS.md`.

use std::time::Duration;

use crate::stats::{ms, Samples};

/// Columns of a latency table (see [`Table::latency`]).
pub const LATENCY_HEADERS: [&str; 8] = [
    "measure",
    "samples",
    "p50 ms",
    "p90 ms",
    "p99 ms",
    "p50 / floor",
    "p99 / floor",
    "goal",
];

/// One scenario's table.
#[derive(Debug, Clone)]
pub struct Table {
    pub title: String,
    pub headers: Vec<String>,
    pub rows: Vec<Vec<String>>,
    /// Free text under the table: how it was measured, what a number means.
    pub notes: Vec<String>,
    /// Number of samples behind the table's main measure (the smoke run asserts > 0).
    pub samples: usize,
    /// Why the scenario did not run to its end (it stopped early, a sink did not
    /// catch up): the run then fails, whatever the samples say.
    pub incomplete: Option<String>,
    /// The goals this table checked, with what was measured: the run's goals
    /// table is made of these, so every verdict is the harness's own.
    pub goals: Vec<Goal>,
    /// The headline numbers of a fleet scenario, for the "Replication cost"
    /// table that puts the NATS topologies side by side.
    pub summary: Option<Summary>,
}

/// A scenario's headline numbers on one NATS topology.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// What was timed, the same on every topology (e.g. "c1 create → copy on c2").
    pub measure: String,
    pub p50: Option<Duration>,
    pub p99: Option<Duration>,
    /// Rates measured alongside: (what, per second).
    pub rates: Vec<(String, f64)>,
}

/// One goal checked in a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Goal {
    /// The goal as written in BENCHMARKS.md (e.g. "p99 ≤ 25 ms").
    pub goal: String,
    /// What the run measured.
    pub measured: String,
    pub met: bool,
}

impl Table {
    pub fn new(title: &str, headers: &[&str]) -> Self {
        Table {
            title: title.into(),
            headers: headers.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
            samples: 0,
            incomplete: None,
            goals: Vec::new(),
            summary: None,
        }
    }

    /// A table with [`LATENCY_HEADERS`].
    pub fn latency(title: &str) -> Self {
        Self::new(title, &LATENCY_HEADERS)
    }

    /// Records a goal's verdict from what was measured; returns "met" or
    /// "MISSED" for the table's own notes.
    pub fn goal(&mut self, goal: &str, measured: String, met: bool) -> &'static str {
        self.goals.push(Goal {
            goal: goal.to_owned(),
            measured,
            met,
        });
        crate::scenario::verdict(met)
    }

    /// Marks the table as not run to its end: a note says why, and the run fails.
    pub fn incomplete(&mut self, why: String) {
        self.note(format!("**INCOMPLETE**: {why}"));
        self.incomplete = Some(why);
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
    }

    /// Sets [`Table::summary`] to the percentiles of `s` and `rates`.
    pub fn summarize(&mut self, measure: &str, s: &Samples, rates: Vec<(String, f64)>) {
        self.summary = Some(Summary {
            measure: measure.to_owned(),
            p50: s.p50(),
            p99: s.percentile(99.0),
            rates,
        });
    }

    /// A row of [`LATENCY_HEADERS`]: percentiles of `s` and their ratio to `floor`'s p50.
    pub fn latency_row(&mut self, measure: &str, s: &Samples, floor: Option<Duration>, goal: &str) {
        let ratio = |d: Option<Duration>| ratio(d, floor);
        self.row([
            measure.to_owned(),
            s.len().to_string(),
            ms(s.p50()),
            ms(s.percentile(90.0)),
            ms(s.percentile(99.0)),
            ratio(s.p50()),
            ratio(s.percentile(99.0)),
            goal.to_owned(),
        ]);
    }

    pub fn note(&mut self, text: impl Into<String>) {
        self.notes.push(text.into());
    }

    /// The Markdown text: `### title`, the table, then the notes as a list.
    pub fn markdown(&self) -> String {
        let mut out = format!("### {}\n\n", self.title);
        out.push_str(&format!("| {} |\n", self.headers.join(" | ")));
        out.push_str(&format!(
            "|{}\n",
            self.headers.iter().map(|_| "---|").collect::<String>()
        ));
        for r in &self.rows {
            out.push_str(&format!("| {} |\n", r.join(" | ")));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
        }
        out
    }
}

/// `d / base` as "1.23x", "-" when either is missing (or `base` is zero).
pub fn ratio(d: Option<Duration>, base: Option<Duration>) -> String {
    match (d, base) {
        (Some(d), Some(b)) if !b.is_zero() => format!("{:.2}x", d.as_secs_f64() / b.as_secs_f64()),
        _ => "-".into(),
    }
}

/// The run's goals table: every goal a scenario checked, with what was
/// measured and the verdict, in the order the scenarios ran.
pub fn goals(tables: &[Table]) -> Table {
    let mut t = Table::new(
        "Goals of this run (verdicts computed by the harness)",
        &["scenario", "goal", "measured", "verdict"],
    );
    for table in tables {
        for g in &table.goals {
            t.row([
                table.title.clone(),
                g.goal.clone(),
                g.measured.clone(),
                crate::scenario::verdict(g.met).to_owned(),
            ]);
        }
    }
    let missed = t.rows.iter().filter(|r| r[3] != "met").count();
    t.samples = t.rows.len();
    t.note(format!("{} goals checked, {missed} missed.", t.rows.len()));
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goals_table_lists_every_checked_goal_with_its_verdict() {
        let mut a = Table::new("2. Propagation", &["x"]);
        assert_eq!(a.goal("p99 ≤ 25 ms", "30.00 ms".into(), false), "MISSED");
        let mut b = Table::new("8. Wire size", &["x"]);
        assert_eq!(b.goal("bytes ≤ 0.7× JSON", "0.37×".into(), true), "met");
        let g = goals(&[a, Table::new("no goals", &["x"]), b]);
        assert_eq!(
            g.rows,
            vec![
                vec!["2. Propagation", "p99 ≤ 25 ms", "30.00 ms", "MISSED"],
                vec!["8. Wire size", "bytes ≤ 0.7× JSON", "0.37×", "met"],
            ]
        );
        assert!(
            g.notes.iter().any(|n| n == "2 goals checked, 1 missed."),
            "{:?}",
            g.notes
        );
    }

    #[test]
    fn renders_latency_row_with_ratio_to_floor() {
        let mut t = Table::latency("x");
        let s: Samples = [2, 4, 6].into_iter().map(Duration::from_millis).collect();
        t.latency_row("m", &s, Some(Duration::from_millis(2)), "g");
        t.note("n");
        let md = t.markdown();
        assert!(
            md.contains("| m | 3 | 4.00 | 6.00 | 6.00 | 2.00x | 3.00x | g |"),
            "{md}"
        );
        assert!(md.starts_with("### x\n\n| measure |"), "{md}");
        assert!(md.ends_with("- n\n"), "{md}");
    }
}
