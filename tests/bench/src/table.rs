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
        }
    }

    /// A table with [`LATENCY_HEADERS`].
    pub fn latency(title: &str) -> Self {
        Self::new(title, &LATENCY_HEADERS)
    }

    /// Marks the table as not run to its end: a note says why, and the run fails.
    pub fn incomplete(&mut self, why: String) {
        self.note(format!("**INCOMPLETE**: {why}"));
        self.incomplete = Some(why);
    }

    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        self.rows.push(cells.into_iter().map(Into::into).collect());
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

#[cfg(test)]
mod tests {
    use super::*;

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
