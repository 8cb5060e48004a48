//! `dependsOn` cycles among rules: found when the rules are compiled, so
//! every rule on a cycle is Invalid on every cluster (rules are replicated,
//! and each agent finds the same cycles).

use std::collections::{BTreeMap, BTreeSet};

/// Every dependency cycle among `edges` (rule → the rules it depends on), each
/// as the path `a → b → a` starting from its smallest name; each cycle once.
pub fn cycles(edges: &BTreeMap<String, Vec<String>>) -> Vec<Vec<String>> {
    let mut found: BTreeSet<Vec<String>> = BTreeSet::new();
    for start in edges.keys() {
        // Depth-first from every rule, looking for a way back to `start`
        // through rules greater than it (so each cycle is found from its
        // smallest member only).
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        let mut seen: BTreeSet<String> = BTreeSet::new();
        while let Some((at, path)) = stack.pop() {
            for next in edges.get(&at).into_iter().flatten() {
                if next == start {
                    let mut cycle = path.clone();
                    cycle.push(start.clone());
                    found.insert(cycle);
                } else if next > start && edges.contains_key(next) && seen.insert(next.clone()) {
                    let mut p = path.clone();
                    p.push(next.clone());
                    stack.push((next.clone(), p));
                }
            }
        }
    }
    found.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edges(list: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        list.iter()
            .map(|(a, bs)| (a.to_string(), bs.iter().map(|b| b.to_string()).collect()))
            .collect()
    }

    #[test]
    fn cycles_found_once_from_their_smallest_rule() {
        assert!(cycles(&edges(&[("a", &["b"]), ("b", &["c"]), ("c", &[])])).is_empty());
        assert_eq!(
            cycles(&edges(&[("b", &["a"]), ("a", &["b"]), ("c", &["a"])])),
            vec![vec!["a".to_string(), "b".into(), "a".into()]]
        );
        assert_eq!(
            cycles(&edges(&[("x", &["x"])])),
            vec![vec!["x".to_string(), "x".into()]]
        );
        let three = cycles(&edges(&[
            ("c", &["a"]),
            ("a", &["b"]),
            ("b", &["c"]),
            ("d", &["d", "a"]),
        ]));
        assert_eq!(three.len(), 2, "{three:?}");
        assert!(three.contains(&vec!["a".to_string(), "b".into(), "c".into(), "a".into()]));
        // A dependency on a rule that does not exist is no cycle.
        assert!(cycles(&edges(&[("a", &["nope"])])).is_empty());
    }
}
