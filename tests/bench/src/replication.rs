//! The "Replication cost" table: the headline numbers of each
//! fleet scenario ([`crate::table::Summary`]) on every NATS topology of the
//! run, side by side, with each topology's ratio to the single server.

use std::time::Duration;

use crate::bus::Topology;
use crate::table::{Summary, Table};

/// The title the smoke test and BENCHMARKS.md readers look for.
pub const TITLE: &str =
    "Replication cost: one nats-server vs 3-node cluster (R3) vs site leaf node";

/// One row per (measure, number): p50, p99 and each rate, with a column per
/// topology in `order` and, for each topology but single, its ratio to single.
pub fn table(order: &[Topology], runs: &[(Topology, Summary)]) -> Table {
    let mut headers = vec!["measure".to_owned(), "number".to_owned()];
    for t in order {
        headers.push(t.name().to_owned());
        if *t != Topology::Single {
            headers.push(format!("{t} / single"));
        }
    }
    let header_refs: Vec<&str> = headers.iter().map(String::as_str).collect();
    let mut table = Table::new(TITLE, &header_refs);
    let mut measures: Vec<&str> = Vec::new();
    for (_, s) in runs {
        if !measures.contains(&s.measure.as_str()) {
            measures.push(&s.measure);
        }
    }
    for measure in measures {
        let on = |t: Topology| {
            runs.iter()
                .find(|(rt, s)| *rt == t && s.measure == measure)
                .map(|(_, s)| s)
        };
        let mut numbers = vec![Number::P50, Number::P99];
        for (_, s) in runs.iter().filter(|(_, s)| s.measure == measure) {
            for (name, _) in &s.rates {
                let rate = Number::Rate(name.clone());
                if !numbers.contains(&rate) {
                    numbers.push(rate);
                }
            }
        }
        for number in &numbers {
            let values: Vec<Option<f64>> = order
                .iter()
                .map(|t| on(*t).and_then(|s| number.of(s)))
                .collect();
            if values.iter().all(Option::is_none) {
                continue;
            }
            let single = order
                .iter()
                .position(|t| *t == Topology::Single)
                .and_then(|i| values[i]);
            let mut row = vec![measure.to_owned(), number.label()];
            for (t, v) in order.iter().zip(&values) {
                row.push(match (number.is_latency(), v) {
                    (true, Some(v)) => format!("{v:.2}"),
                    (false, Some(v)) => format!("{v:.0}"),
                    (_, None) => "-".into(),
                });
                if *t != Topology::Single {
                    row.push(match (v, single) {
                        (Some(v), Some(s)) if s > 0.0 => format!("{:.2}x", v / s),
                        _ => "-".into(),
                    });
                }
            }
            table.row(row);
        }
    }
    table.samples = runs.len();
    table.note("Each topology runs the same scenario with fresh processes: single = one nats-server, agents --replicas 1; cluster3 = the 3 nodes of deploy/nats/hub.conf, agents --replicas 3 spread over the nodes (c1 on hub-1, c2 on hub-2: a route between them); leaf = that hub plus a site leaf node from deploy/nats/leaf.conf (domain site-a), odd clusters (c1, c3, …) at the site with --replicas 1, even ones on the hub with --replicas 3, joined by the stream sources of TOPOLOGY.md, so c1 → c2 crosses the leaf link.");
    table.note("Ratios: latency > 1x is slower than one server; rate < 1x is slower. A missing topology column means it was not in --nats; '-' that the scenario failed or has no such number there.");
    table
}

/// One number of a [`Summary`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Number {
    P50,
    P99,
    /// The rate of that name.
    Rate(String),
}

impl Number {
    fn of(&self, s: &Summary) -> Option<f64> {
        match self {
            Number::P50 => s.p50.map(millis),
            Number::P99 => s.p99.map(millis),
            Number::Rate(name) => s.rates.iter().find(|(n, _)| n == name).map(|(_, v)| *v),
        }
    }

    fn label(&self) -> String {
        match self {
            Number::P50 => "p50 ms".into(),
            Number::P99 => "p99 ms".into(),
            Number::Rate(name) => name.clone(),
        }
    }

    fn is_latency(&self) -> bool {
        !matches!(self, Number::Rate(_))
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(measure: &str, p50: u64, rate: Option<f64>) -> Summary {
        Summary {
            measure: measure.into(),
            p50: Some(Duration::from_millis(p50)),
            p99: Some(Duration::from_millis(p50 * 2)),
            rates: rate.map(|r| ("msg/s".to_owned(), r)).into_iter().collect(),
        }
    }

    #[test]
    fn puts_topologies_side_by_side_with_their_ratio_to_single() {
        let order = [Topology::Single, Topology::Cluster3, Topology::Leaf];
        let runs = vec![
            (Topology::Single, summary("prop", 4, None)),
            (Topology::Single, summary("tput", 10, Some(1000.0))),
            (Topology::Cluster3, summary("prop", 8, None)),
            (Topology::Cluster3, summary("tput", 20, Some(500.0))),
            // leaf's throughput failed: no summary
            (Topology::Leaf, summary("prop", 12, None)),
        ];
        let t = table(&order, &runs);
        assert_eq!(
            t.headers,
            vec![
                "measure",
                "number",
                "single",
                "cluster3",
                "cluster3 / single",
                "leaf",
                "leaf / single"
            ]
        );
        assert_eq!(
            t.rows,
            vec![
                vec!["prop", "p50 ms", "4.00", "8.00", "2.00x", "12.00", "3.00x"],
                vec!["prop", "p99 ms", "8.00", "16.00", "2.00x", "24.00", "3.00x"],
                vec!["tput", "p50 ms", "10.00", "20.00", "2.00x", "-", "-"],
                vec!["tput", "p99 ms", "20.00", "40.00", "2.00x", "-", "-"],
                vec!["tput", "msg/s", "1000", "500", "0.50x", "-", "-"],
            ]
        );
    }

    #[test]
    fn without_single_there_is_no_ratio_to_make() {
        let t = table(
            &[Topology::Leaf],
            &[(Topology::Leaf, summary("prop", 4, None))],
        );
        assert_eq!(
            t.headers,
            vec!["measure", "number", "leaf", "leaf / single"]
        );
        assert_eq!(t.rows[0], vec!["prop", "p50 ms", "4.00", "-"]);
    }
}
